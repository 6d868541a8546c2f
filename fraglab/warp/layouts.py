"""Fragments from a layout table: checking a layout, and moving a matrix into a warp's registers
and back.

A layout says where each register of a fragment lives in the matrix::

    layout.shape == (32, n_regs, 2),  layout[lane, r] == (row, col)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import fragments
from .diff import _same
from .lanes import WARP_SIZE, LayoutError, _as_int, _some

def _as_layout(layout: Any) -> np.ndarray:
    lay = np.asarray(layout)
    if lay.ndim != 3 or lay.shape[0] != WARP_SIZE or lay.shape[2] != 2 or lay.shape[1] < 1:
        raise LayoutError(f"a layout must have shape (32, n_regs, 2) holding (row, col), got {lay.shape}")
    if lay.dtype.kind not in "iu":
        raise LayoutError(f"layout coordinates must be integers, got dtype {lay.dtype}")
    return lay.astype(np.int64)


def _as_shape(shape: Any) -> tuple[int, int]:
    if len(shape) != 2:
        raise ValueError(f"matrix shape must be (rows, cols), got {shape!r}")
    rows, cols = (_as_int(s, "shape") for s in shape)
    if rows < 1 or cols < 1:
        raise ValueError(f"matrix shape must be positive, got {(rows, cols)}")
    return rows, cols


def _check_in_range(lay: np.ndarray, shape: tuple[int, int]) -> None:
    rows, cols = shape
    r, c = lay[..., 0], lay[..., 1]
    bad = np.argwhere((r < 0) | (r >= rows) | (c < 0) | (c >= cols))
    if bad.size:
        entries = [f"lane {l} reg {k} -> ({lay[l, k, 0]}, {lay[l, k, 1]})" for l, k in bad]
        raise LayoutError(
            f"{len(bad)} layout entries lie outside the {rows}x{cols} matrix: {_some(entries, 4)}")


def _holders(lay: np.ndarray, row: int, col: int) -> list[tuple[int, int]]:
    """The (lane, reg) pairs whose layout entry is (row, col), lane-major."""
    hit = (lay[..., 0] == row) & (lay[..., 1] == col)
    return [(int(l), int(k)) for l, k in np.argwhere(hit)]


def validate_layout(layout: Any, shape: Sequence[int], allow_duplicates: bool = False) -> np.ndarray:
    """Check that `layout` describes a fragment of a matrix of `shape`; return it as int64.

    Raises ``LayoutError`` if an entry lies outside the matrix, if some element
    is held by no (lane, reg) (a hole), or, unless `allow_duplicates`, if an
    element is held by several (lane, reg) pairs. Some WMMA input fragments
    replicate elements on purpose; pass ``allow_duplicates=True`` for those.
    """
    lay = _as_layout(layout)
    rows, cols = _as_shape(shape)
    _check_in_range(lay, (rows, cols))

    counts = np.zeros((rows, cols), dtype=np.int64)
    np.add.at(counts, (lay[..., 0], lay[..., 1]), 1)
    problems = []
    holes = np.argwhere(counts == 0)
    if holes.size:
        problems.append(f"{len(holes)} of {rows * cols} elements are held by no (lane, reg): "
                        f"{_some([tuple(map(int, h)) for h in holes], 6)}")
    dups = np.argwhere(counts > 1)
    if dups.size and not allow_duplicates:
        r, c = map(int, dups[0])
        held = ", ".join(f"lane {l} reg {k}" for l, k in _holders(lay, r, c))
        problems.append(f"{len(dups)} elements are held more than once, e.g. ({r}, {c}) by {held} "
                        "(pass allow_duplicates=True if this fragment kind replicates elements)")
    if problems:
        raise LayoutError(f"bad layout for a {rows}x{cols} matrix: " + "; ".join(problems))
    return lay


def to_fragment(matrix: Any, layout: Any) -> np.ndarray:
    """Distribute a matrix over the warp: ``frag[lane, r] = matrix[layout[lane, r]]``.

    Returns a (32, n_regs) array of the matrix's dtype. Only the coordinates'
    range is checked; call ``validate_layout`` to check coverage too.
    """
    m = np.asarray(matrix)
    if m.ndim != 2:
        raise ValueError(f"matrix must be 2-D, got shape {m.shape}")
    lay = _as_layout(layout)
    _check_in_range(lay, m.shape)
    return m[lay[..., 0], lay[..., 1]]


def from_fragment(frag: Any, layout: Any, shape: Sequence[int], fill: Any = np.nan) -> np.ndarray:
    """Gather a warp's fragment back into a matrix of `shape` (inverse of ``to_fragment``).

    Elements no register holds get `fill` (NaN by default, so the result is
    floating point unless you pass e.g. ``fill=0``). An element held by several
    registers must have the same value in every copy (NaN copies agree with
    each other), else ``LayoutError`` names the registers that disagree.
    """
    f = np.asarray(frag)
    lay = _as_layout(layout)
    if f.shape != lay.shape[:2]:
        raise ValueError(f"fragment shape {f.shape} does not match the layout's {lay.shape[:2]}")
    rows, cols = _as_shape(shape)
    _check_in_range(lay, (rows, cols))

    out = np.full((rows, cols), fill, dtype=np.result_type(f, fill))
    r, c = lay[..., 0], lay[..., 1]
    out[r, c] = f                       # with duplicates, one copy wins ...
    wrote = f.astype(out.dtype)
    disagree = np.argwhere(~_same(out[r, c], wrote, equal_nan=True))   # ... so check the others
    if disagree.size:
        lane, k = disagree[0]
        row, col = int(r[lane, k]), int(c[lane, k])
        copies = ", ".join(f"lane {l} reg {q} = {f[l, q]}" for l, q in _holders(lay, row, col))
        raise LayoutError(f"copies of element ({row}, {col}) disagree: {copies}")
    return out


def inverse_layout(layout: Any, shape: Sequence[int]) -> list[list[list[tuple[int, int]]]]:
    """For each element, the (lane, reg) pairs holding it: ``inv[row][col] == [(lane, reg), ...]``.

    Pairs are listed lane-major; an element no register holds gets ``[]``.
    """
    lay = _as_layout(layout)
    rows, cols = _as_shape(shape)
    _check_in_range(lay, (rows, cols))
    inv: list[list[list[tuple[int, int]]]] = [[[] for _ in range(cols)] for _ in range(rows)]
    for lane in range(WARP_SIZE):
        for reg in range(lay.shape[1]):
            row, col = lay[lane, reg]
            inv[row][col].append((lane, reg))
    return inv


def accumulator_16x16_sm80() -> np.ndarray:
    """Layout (32, 8, 2) of the f32 accumulator of a 16x16 WMMA tile on sm_80 / sm_90.

    This is the documented PTX ``mma.m16n8k16`` f32 accumulator fragment (PTX ISA,
    "Matrix Fragments for mma.m16n8k16"), used twice for the two n8 halves of
    the 16x16 tile. With ``group = lane // 4`` and ``t = lane % 4``, register r
    of a lane holds::

        row = group + 8 * ((r >> 1) & 1)        # r = 0,1,4,5: rows 0-7; r = 2,3,6,7: rows 8-15
        col = 2 * t + (r & 1) + 8 * (r >> 2)    # r = 0..3: cols 0-7; r = 4..7: cols 8-15

    WMMA itself leaves the fragment layout unspecified; the course checks that
    this is what the hardware does by tracing real GPUs (chapters 1-2). The one
    home of the formula is :func:`fraglab.fragments.wmma_16x16_accumulator`; this
    is its name in the warp emulator.
    """
    return fragments.wmma_16x16_accumulator()
