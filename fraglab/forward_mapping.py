"""From a traced table to a formula, and the forward-mapped store (topic 02_forward_mapping).

A traced layout is a table ``layout[lane, i] = (row, col)``. For the tensor-core fragments the
table is not arbitrary: each coordinate is a sum of the bits of ``lane`` and of ``i`` with
integer weights. The paper's equations (1)-(2) for the 16x16 accumulator read::

    row = lane/4 + 8*((i>>1)&1)
    col = 2*(lane%4) + (i%2) + 8*(i>>2)

that is row = 1*bit2(lane) + 2*bit3(lane) + 4*bit4(lane) + 8*bit1(i), and so on.

:func:`fit` finds such a formula for any table, exactly: with ``lane`` and ``i`` both zero the
formula gives its constant; setting one bit at a time gives that bit's weight; then the formula
is checked on *every* slot of the table. If the check fails, the table is not affine in the
bits; :func:`fit` then tries the other natural model, XOR of bits (swizzles), and reports a
kind that fits neither as such (:class:`NotAffine`).

The rest of the module: the PTX ISA's documented ``mma.m16n8k16`` C fragment and how two of
them make the 16x16 WMMA accumulator; the inverse map (row, col) -> (lane, i); and the GPU
wrapper of ``kernels/02_forward_mapping.cu`` (Algorithm 2: store an accumulator with the
formula, compared bit for bit with ``store_matrix_sync``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import fragments, launch, warp
from .fragments import STORE_TYPES, recording  # noqa: F401  (STORE_TYPES re-exported)

KERNELS = "02_forward_mapping"
LANE_BITS = 5
#: Register-index bits the kernel's coefficient table has room for (num_elements <= 16).
REG_BITS = 4


class NotAffine(ValueError):
    """The table is neither an integer-weighted sum nor an XOR of lane and register bits."""


def _nbits(n: int) -> int:
    """Bits needed to index 0..n-1 (n a power of two, or rounded up)."""
    return max(0, int(n - 1).bit_length())


# --------------------------------------------------------------------------------------------
# Formulas
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BitFormula:
    """``value = const + sum_b a[b]*bit_b(x) + sum_b c[b]*bit_b(y)`` with integer weights.

    ``x``/``y`` are two named integer variables (``lane`` and ``i`` for a forward map, ``row`` and
    ``col`` for an inverse one), with ``xbits``/``ybits`` bits each.
    """
    const: int
    a: tuple[int, ...]
    c: tuple[int, ...]
    xname: str = "lane"
    yname: str = "i"

    def __call__(self, x, y):
        x, y = np.asarray(x, dtype=np.int64), np.asarray(y, dtype=np.int64)
        v = np.full(np.broadcast(x, y).shape, self.const, dtype=np.int64)
        for b, w in enumerate(self.a):
            v = v + w * ((x >> b) & 1)
        for b, w in enumerate(self.c):
            v = v + w * ((y >> b) & 1)
        return v

    # -- text ---------------------------------------------------------------------------------
    @staticmethod
    def _runs(weights) -> list[tuple[int, int, int]]:
        """(weight of the lowest bit, lo, hi): maximal runs whose weights double bit by bit, so
        each run is one bit field ``(v >> lo) & mask`` times a coefficient."""
        runs, b = [], 0
        while b < len(weights):
            if weights[b] == 0:
                b += 1
                continue
            lo = hi = b
            while hi + 1 < len(weights) and weights[hi + 1] == 2 * weights[hi]:
                hi += 1
            runs.append((weights[lo], lo, hi))
            b = hi + 1
        return runs

    @staticmethod
    def _field(name: str, lo: int, hi: int, nbits: int, slash: bool) -> tuple[str, bool]:
        """Text of bits lo..hi of ``name`` and whether it is a single token."""
        width = hi - lo + 1
        top = hi == nbits - 1
        if lo == 0 and top:
            return name, True
        if lo == 0:
            return f"{name}%{1 << width}", False
        if top:
            return (f"{name}/{1 << lo}", False) if slash else (f"{name}>>{lo}", False)
        return f"({name}>>{lo})&{(1 << width) - 1}", False

    def terms(self) -> list[str]:
        out = []
        for name, weights, slash in ((self.xname, self.a, True),
                                     (self.yname, self.c, self.yname != "i")):
            nbits = len(weights)
            for w, lo, hi in self._runs(weights):
                f, token = self._field(name, lo, hi, nbits, slash)
                if abs(w) == 1:
                    t = f if (token or "/" in f) else f"({f})"
                else:
                    t = f"{abs(w)}*" + (f if token else f"({f})")
                out.append(("-" if w < 0 else "+", t))
        if self.const:
            out.append(("-" if self.const < 0 else "+", str(abs(self.const))))
        return out

    def text(self) -> str:
        """Readable C-like text, e.g. ``2*(lane%4) + (i%2) + 8*(i>>2)``."""
        terms = self.terms()
        if not terms:
            return "0"
        s = ("-" if terms[0][0] == "-" else "") + terms[0][1]
        for sign, t in terms[1:]:
            s += f" {sign} {t}"
        return s

    def cuda(self) -> str:
        """A CUDA expression of ``lane`` and ``i`` (shifts and masks only)."""
        parts = [str(self.const)]
        for name, weights in ((self.xname, self.a), (self.yname, self.c)):
            for w, lo, hi in self._runs(weights):
                parts.append(f"{w} * (({name} >> {lo}) & {(1 << (hi - lo + 1)) - 1})")
        return "(" + " + ".join(parts) + ")"


@dataclass(frozen=True)
class XorFormula:
    """``bit_j(value) = k_j XOR parity(x & xmask_j) XOR parity(y & ymask_j)`` for each bit j."""
    bits: tuple[tuple[int, int, int], ...]       # (k_j, xmask_j, ymask_j) for j = 0, 1, ...
    xname: str = "lane"
    yname: str = "i"

    def __call__(self, x, y):
        x, y = np.asarray(x, dtype=np.int64), np.asarray(y, dtype=np.int64)
        v = np.zeros(np.broadcast(x, y).shape, dtype=np.int64)
        for j, (k, xm, ym) in enumerate(self.bits):
            v |= (k ^ _parity(x & xm) ^ _parity(y & ym)) << j
        return v

    def text(self) -> str:
        parts = []
        for j, (k, xm, ym) in enumerate(self.bits):
            src = [f"{self.xname}.{b}" for b in range(LANE_BITS + 3) if xm >> b & 1]
            src += [f"{self.yname}.{b}" for b in range(8) if ym >> b & 1]
            src += ["1"] if k else []
            parts.append(f"bit{j} = " + (" ^ ".join(src) if src else "0"))
        return "; ".join(parts)


def _parity(v):
    v = np.asarray(v, dtype=np.int64)
    p = np.zeros_like(v)
    while np.any(v):
        p ^= v & 1
        v = v >> 1
    return p


@dataclass(frozen=True)
class Mapping:
    """A fitted forward map: ``(lane, i) -> (row, col)`` of a fragment kind."""
    row: BitFormula | XorFormula
    col: BitFormula | XorFormula
    shape: tuple[int, int]
    num_elements: int
    model: str = "affine"                       # "affine" (integer weights) or "xor"

    def __call__(self, lane, i):
        return self.row(lane, i), self.col(lane, i)

    def table(self) -> np.ndarray:
        """The (32, num_elements, 2) layout the formula describes."""
        lane, i = np.meshgrid(np.arange(32), np.arange(self.num_elements), indexing="ij")
        return np.stack(self(lane, i), axis=-1)

    def text(self) -> str:
        if self.model == "xor":
            return f"row: {self.row.text()}\ncol: {self.col.text()}"
        return f"row = {self.row.text()}\ncol = {self.col.text()}"

    def coefficients(self) -> np.ndarray:
        """int32 (2, 1 + 5 + REG_BITS): per coordinate, the constant, 5 lane-bit weights and
        REG_BITS register-bit weights: what the fitted store kernel reads."""
        if self.model != "affine":
            raise NotAffine("only an affine formula has integer weights for the kernel")
        out = np.zeros((2, 1 + LANE_BITS + REG_BITS), dtype=np.int32)
        for j, f in enumerate((self.row, self.col)):
            if len(f.c) > REG_BITS:
                raise ValueError(f"the kernel takes at most {REG_BITS} register bits")
            out[j, 0] = f.const
            out[j, 1:1 + len(f.a)] = f.a
            out[j, 1 + LANE_BITS:1 + LANE_BITS + len(f.c)] = f.c
        return out


def _probe_affine(values: np.ndarray, xbits: int, ybits: int, xname: str, yname: str):
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


def _probe_xor(values: np.ndarray, xbits: int, ybits: int, nbits: int, xname: str, yname: str):
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
    k = fragments.get_kind(kind) if kind is not None else None
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
    fits = [_probe_affine(lay[..., j], LANE_BITS, rb, "lane", "i") for j in (0, 1)]
    if all(fits):
        return Mapping(fits[0], fits[1], shape, n, "affine")
    xfits = [_probe_xor(lay[..., j], LANE_BITS, rb, _nbits(shape[j]), "lane", "i")
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
    fits = [_probe_affine(inv[..., j], _nbits(rows), _nbits(cols), "row", "col") for j in (0, 1)]
    if not all(fits):
        raise NotAffine("the inverse map is not affine in the bits of row and col")
    return InverseMapping(fits[0], fits[1], (rows, cols))


@dataclass(frozen=True)
class InverseMapping:
    lane: BitFormula
    reg: BitFormula
    shape: tuple[int, int]

    def __call__(self, row, col):
        return self.lane(row, col), self.reg(row, col)

    def text(self) -> str:
        return f"lane = {self.lane.text()}\ni    = {self.reg.text()}"


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
    k = fragments.get_kind(kind)
    try:
        m = fit(layout, kind=k)
    except NotAffine as e:
        return f"not affine in the bits: {e}"
    head = "formula (integer weights on bits):" if m.model == "affine" else "formula (XOR of bits):"
    return head + "\n  " + m.text().replace("\n", "\n  ")


# --------------------------------------------------------------------------------------------
# What the PTX ISA documents
# --------------------------------------------------------------------------------------------

def eq12(lane, i):
    """The paper's equations (1)-(2) for the 16x16 accumulator: ``(row, col)``."""
    lane, i = np.asarray(lane), np.asarray(i)
    return lane // 4 + ((i >> 1) & 1) * 8, (lane % 4) * 2 + i % 2 + (i >> 2) * 8


def eq12_inverse(row, col):
    """Inverse of :func:`eq12`: ``(lane, i)`` holding element (row, col) of the 16x16 tile."""
    row, col = np.asarray(row), np.asarray(col)
    return 4 * (row % 8) + (col % 8) // 2, col % 2 + 2 * (row // 8) + 4 * (col // 8)


def ptx_m16n8k16_c(lane, j):
    """The PTX ISA's C/D fragment of ``mma.m16n8k16``, element ``c_j`` (j = 0..3) of a lane:
    ``(row, col)``, read from :func:`fraglab.fragments.mma_m16n8k16` ``("c")``."""
    c = fragments.mma_m16n8k16("c")
    return c[np.asarray(lane), np.asarray(j), 0], c[np.asarray(lane), np.asarray(j), 1]


def wmma16x16_from_ptx() -> np.ndarray:
    """The 16x16 accumulator as two m16n8k16 C fragments side by side (registers 0-3 the left
    half, 4-7 the right): :func:`fraglab.fragments.wmma_16x16_accumulator`. Shape (32, 8, 2)."""
    return fragments.wmma_16x16_accumulator()


# --------------------------------------------------------------------------------------------
# Algorithm 2 on the GPU
# --------------------------------------------------------------------------------------------

#: Kinds with the paper's formula compiled in: the accumulators of the 16x16 tile (the kernels
#: fwd_store_eq12_<kind> exist for these only, kernels/02_forward_mapping.cu).
EQ12_KINDS = tuple(k.name for k in fragments.kinds("accumulator") if k.shape == (16, 16))


def forward_store(kind, a, b, c, *, mapping: Mapping | None = None, variant: str = "fitted",
                  source: str | None = None):
    """Compute ``a @ b + c`` tile by tile with WMMA, one warp a tile, and store every tile twice:
    with ``store_matrix_sync`` (``out_ref``) and with the forward formula (``out_fwd``,
    Algorithm 2). Returns ``(out_ref, out_fwd)`` as CuPy arrays, both poisoned before launch.

    ``a``: (rows, K) of the kind's input dtype; ``b``: (K, cols); ``c``: (rows, cols) of the
    accumulator dtype; rows and cols multiples of the tile. ``variant="fitted"`` passes
    ``mapping`` (default: the fit of the recorded layout for this machine,
    :func:`fraglab.fragments.recording.layout`) to the kernel as bit weights;
    ``"eq12"`` uses the paper's formula compiled in (16x16 kinds only).
    """
    k = fragments.get_kind(kind)
    if not k.is_accumulator:
        raise ValueError(f"{k.name} is not an accumulator kind; forward_store stores accumulators "
                         f"({', '.join(STORE_TYPES)})")
    if variant not in ("fitted", "eq12"):
        raise ValueError(f"variant must be 'fitted' or 'eq12', got {variant!r}")
    if variant == "eq12" and k.name not in EQ12_KINDS:
        raise ValueError(f"the paper's formula describes the 16x16 tiles ({', '.join(EQ12_KINDS)}),"
                         f" not {k.name}; use variant='fitted'")
    inp, in_dt, acc_dt = STORE_TYPES[k.name]
    M, N = k.shape
    launch.check_array("a", a, dtype=in_dt, ndim=2)
    rows, K = a.shape
    if K != k.k:
        raise ValueError(f"a must have {k.k} columns (the k of {k.name}), got shape {a.shape}")
    launch.check_array("b", b, dtype=in_dt, ndim=2)
    if b.shape[0] != k.k:
        raise ValueError(f"b must have {k.k} rows (the k of {k.name}), got shape {b.shape}")
    cols = b.shape[1]
    launch.check_array("c", c, dtype=acc_dt, shape=(rows, cols))
    launch.check_multiple("rows", rows, M)
    launch.check_multiple("cols", cols, N)
    if rows == 0 or cols == 0:
        raise ValueError(f"a, b and c must not be empty (rows {rows}, cols {cols})")
    if rows // M > 65535 or cols // N > 2**31 - 1:
        raise ValueError(f"at most 65535 row tiles ({rows // M} asked)")
    coef = None
    if variant == "fitted":
        if mapping is None:
            mapping = fit(recording.layout(k), kind=k)
        _check_mapping(mapping, k)
        coef = mapping.coefficients()
    fragments.require_supported(k)
    import cupy
    name = f"fwd_store_{'eq12_' if variant == 'eq12' else ''}{k.name}"
    fn = launch.get_kernel(KERNELS, name, source=source)
    out_ref = launch.poisoned((rows, cols), acc_dt)
    out_fwd = launch.poisoned((rows, cols), acc_dt)
    args = (a, b, c, out_ref, out_fwd, np.int32(rows), np.int32(cols))
    if coef is not None:
        args += (cupy.asarray(coef.ravel()),)
    launch.launch(fn, (cols // N, rows // M), 32, args, sync=True)
    return out_ref, out_fwd


def _check_mapping(mapping: Mapping, k) -> None:
    if not isinstance(mapping, Mapping):
        raise TypeError(f"mapping must be a forward_mapping.Mapping (from fit), got "
                        f"{type(mapping).__name__}")
    if mapping.num_elements != k.num_elements or tuple(mapping.shape) != k.shape:
        raise ValueError(f"mapping is for a {mapping.shape} tile with {mapping.num_elements} "
                         f"registers, but {k.name} has a {k.shape} tile and {k.num_elements}")
    # Every slot must land inside the tile (the kernel trusts the weights), each element once.
    try:
        warp.validate_layout(mapping.table(), k.shape)
    except warp.LayoutError as e:
        raise ValueError(f"mapping does not place the {k.slots} values of {k.name} on its "
                         f"tile one to one: {e}") from None
