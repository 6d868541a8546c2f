"""Fitting a formula to a traced table, exactly: :func:`fit` (forward, ``(lane, i) -> (row, col)``),
:func:`fit_inverse`, and :func:`inverse` (every slot holding an element, for any layout).

Chapter 02 teaches it (:mod:`fraglab.forward_mapping` re-exports it); the tracer's command line
prints it (:func:`describe_fit`). Import it by name (``from fraglab.fragments import fit``): it
is not re-exported by :mod:`fraglab.fragments`, because it checks tables with
:mod:`fraglab.warp`, which uses :mod:`.documented`.
"""
from __future__ import annotations

import numpy as np

from .. import warp
from .catalogue import get_kind
from .formulas import (LANE_BITS, BitFormula, InverseMapping, Mapping, NotAffine,
                       XorFormula)


def _nbits(n: int) -> int:
    """Bits needed to index 0..n-1 (n a power of two, or rounded up)."""
    return max(0, int(n - 1).bit_length())


def probe_affine(values: np.ndarray, xbits: int, ybits: int, xname: str, yname: str):
    """Fit ``values[x, y]`` (an int table) as an integer-weighted sum of bits, or None.

    The weights are read off the table at x = 0 or a power of two and y = 0 or a power of two,
    then the formula is checked on every entry: exact, no least squares needed.
    """
    const = int(values[0, 0])
    a = tuple(int(values[1 << b, 0]) - const for b in range(xbits))
    c = tuple(int(values[0, 1 << b]) - const for b in range(ybits))
    f = BitFormula(const, a, c, xname, yname)
    x, y = np.meshgrid(np.arange(values.shape[0]), np.arange(values.shape[1]), indexing="ij")
    return f if np.array_equal(f(x, y), values) else None


def probe_xor(values: np.ndarray, xbits: int, ybits: int, nbits: int, xname: str, yname: str):
    """Fit each bit of ``values`` as an XOR of bits of x and y (plus a constant), or None."""
    if values.min() < 0:
        return None
    bits = []
    base = int(values[0, 0])
    for j in range(nbits):
        k = base >> j & 1
        xm = sum(1 << b for b in range(xbits) if (int(values[1 << b, 0]) >> j & 1) != k)
        ym = sum(1 << b for b in range(ybits) if (int(values[0, 1 << b]) >> j & 1) != k)
        bits.append((k, xm, ym))
    f = XorFormula(tuple(bits), xname, yname)
    x, y = np.meshgrid(np.arange(values.shape[0]), np.arange(values.shape[1]), indexing="ij")
    return f if np.array_equal(f(x, y), values) else None


def fit(layout, shape=None, *, kind=None) -> Mapping:
    """Fit ``layout[lane, i] = (row, col)`` with a formula in the bits of ``lane`` and ``i``.

    Tries integer weights first (the paper's style), then XOR of bits. Raises
    :class:`NotAffine`, naming a slot where the best guess fails, when neither fits.
    """
    k = get_kind(kind) if kind is not None else None
    shape = tuple(shape) if shape is not None else (k.shape if k else None)
    lay = np.asarray(layout)
    if lay.ndim != 3 or lay.shape[0] != 32 or lay.shape[2] != 2:
        raise ValueError(f"a layout has shape (32, num_elements, 2), got {lay.shape}")
    if shape is None:
        shape = (int(lay[..., 0].max()) + 1, int(lay[..., 1].max()) + 1)
    n = lay.shape[1]
    if n & (n - 1):
        raise NotAffine(f"{n} registers is not a power of two: no bit formula indexes them")
    warp.validate_layout(lay, shape, allow_duplicates=True)
    rb = _nbits(n)
    fits = [probe_affine(lay[..., j], LANE_BITS, rb, "lane", "i") for j in (0, 1)]
    if all(fits):
        return Mapping(fits[0], fits[1], shape, n, "affine")
    xfits = [probe_xor(lay[..., j], LANE_BITS, rb, _nbits(shape[j]), "lane", "i")
             for j in (0, 1)]
    if all(xfits):
        return Mapping(xfits[0], xfits[1], shape, n, "xor")
    # Neither: say where the affine guess breaks.
    j = 0 if fits[0] is None else 1
    const = int(lay[0, 0, j])
    a = tuple(int(lay[1 << b, 0, j]) - const for b in range(LANE_BITS))
    c = tuple(int(lay[0, 1 << b, j]) - const for b in range(rb))
    guess = BitFormula(const, a, c)
    lane, i = np.meshgrid(np.arange(32), np.arange(n), indexing="ij")
    wrong = np.argwhere(guess(lane, i) != lay[..., j])
    l0, i0 = wrong[0]
    name = ("row", "col")[j]
    raise NotAffine(
        f"the {name} of this layout is not affine in the bits of lane and i (nor an XOR of "
        f"them): the weights read at lane 0..16 and i = 0, 1, 2, 4.. give {name} = "
        f"{guess.text()}, which predicts {guess(l0, i0)} at lane {l0} reg {i0} where the table "
        f"has {lay[l0, i0, j]} ({len(wrong)} of {32 * n} slots disagree)")


def fit_inverse(layout, shape) -> Mapping:
    """Fit the inverse map ``(row, col) -> (lane, i)`` of a layout that holds each element once,
    as formulas in the bits of row and col. Its ``table()`` is indexed [row, col]."""
    lay = warp.validate_layout(np.asarray(layout), shape)   # no duplicates allowed
    rows, cols = shape
    inv = np.zeros((rows, cols, 2), dtype=np.int64)
    for lane in range(32):
        for i in range(lay.shape[1]):
            inv[lay[lane, i, 0], lay[lane, i, 1]] = (lane, i)
    if rows & (rows - 1) or cols & (cols - 1):
        raise NotAffine("the tile sides are not powers of two")
    fits = [probe_affine(inv[..., j], _nbits(rows), _nbits(cols), "row", "col") for j in (0, 1)]
    if not all(fits):
        raise NotAffine("the inverse map is not affine in the bits of row and col")
    return InverseMapping(fits[0], fits[1], (rows, cols))


def inverse(layout, shape):
    """A function ``(row, col) -> [(lane, i), ...]`` (every slot holding the element) for any
    layout, duplicates included; checks its arguments."""
    inv = warp.inverse_layout(np.asarray(layout), shape)
    rows, cols = shape

    def where(row: int, col: int) -> list[tuple[int, int]]:
        if not (0 <= row < rows and 0 <= col < cols):
            raise ValueError(f"({row}, {col}) is outside the {rows}x{cols} tile")
        return list(inv[row][col])
    return where


def describe_fit(layout, kind) -> str:
    """A few lines: the fitted formula of a kind's layout, or why there is none."""
    k = get_kind(kind)
    try:
        m = fit(layout, kind=k)
    except NotAffine as e:
        return f"not affine in the bits: {e}"
    head = "formula (integer weights on bits):" if m.model == "affine" else "formula (XOR of bits):"
    return head + "\n  " + m.text().replace("\n", "\n  ")
