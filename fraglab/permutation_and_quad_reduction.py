"""Topic 03_permutation_and_quad_reduction: row and column reductions of a WMMA accumulator in
registers (the swap of Fig. 2 and the quad reduction of Algorithm 3 of the in-register WMMA paper).

Three parts:

* **Layouts** as bit permutations (:data:`SPECS`, :func:`layout_from_spec`,
  :func:`spec_from_layout`): in the f32 accumulators of 16x16, 32x8 and 8x32 tiles, each lane-id
  bit and each register-index bit selects one bit of the row or of the column.
* **Emulator versions** on :mod:`fraglab.warp`: :func:`permute_fig2`, :func:`quad_reduce`
  (Algorithm 3, generic operator, per-lane quad masks or the full mask), :func:`reduce_lines`
  (any bit layout, rows or columns) and :func:`reduce_tiles` (exactly what the kernels compute,
  in the same order, so results agree bit for bit).
* **Wrappers** of ``kernels/03_permutation_and_quad_reduction.cu``: :func:`reduce_accumulators`
  (reduce chosen accumulator values), :func:`mma_reduce` (C = A @ B on the tensor cores, then
  its reductions), :func:`rowmax` (shared memory vs registers), :func:`accumulator_layout_on_gpu`.
"""
from __future__ import annotations

import re
from typing import Callable

import numpy as np

from . import device, launch, sass, warp
from .dtypes import from_bf16, to_bf16  # noqa: F401  (used here and re-exported)

KERNELS = "03_permutation_and_quad_reduction"
WARPS_PER_BLOCK = 4                      # as in the .cu file: one tile per warp
SHAPES = ((16, 16), (32, 8), (8, 32))    # (M, N) of the f32 accumulators handled here
OPS = ("max", "min", "sum", "max_cmp")   # kernels reducing given accumulator values
MMA_OPS = ("max", "min", "sum")          # kernels reducing A @ B
MASKS = ("group", "full")                # per-lane group masks (the paper's) or 0xffffffff
DTYPES = ("f16", "bf16")
ROWMAX_WAYS = ("shared", "quadmask", "fullmask")
MAX_TILES = 2**31 - 1

#: The binary operators, as the kernels apply them (``apply(a, b)`` with ``a`` the running value).
#: ``max``/``min`` are CUDA's fmaxf/fminf: a NaN operand loses (np.fmax/np.fmin do the same);
#: ``max_cmp`` is ``a > b ? a : b``, where a NaN in ``b`` wins and a NaN in ``a`` loses.
OPERATORS: dict[str, Callable] = {
    "max": np.fmax,
    "min": np.fmin,
    "sum": np.add,
    "max_cmp": lambda a, b: np.where(a > b, a, b),
}

# -------------------------------------------------------------------------------------------------
# Layouts
# -------------------------------------------------------------------------------------------------

#: Bit-layout codes (see the .cu file): nibble k describes source bit k (lane bits 0-4, then
#: register bits 0-2); its low 3 bits are the destination bit, 0x8 means "of the column".
SPECS = {
    (16, 16): 0xB38210A9,   # row = g + 8*((i>>1)&1), col = 2t + (i&1) + 8*(i>>2)
    (32, 8): 0x438210A9,    # row = g + 8*(i>>1),     col = 2t + (i&1)
    (8, 32): 0xCB0A9821,    # row = 2t + (i&1),       col = g + 8*(i>>1)
}
#: Fig. 2: new register r holds old register FIG2_ORDER[r] (x[2,3] and x[4,5] trade places).
FIG2_ORDER = (0, 1, 4, 5, 2, 3, 6, 7)
#: The paper's member masks: lane l names the four lanes of its quad, 0xF << ((l/4)*4).
QUAD_MASKS = (0xF << ((warp.LANES // 4) * 4)).astype(np.int64)
QUAD_MASKS.flags.writeable = False


def _check_shape(shape) -> tuple[int, int]:
    try:
        m, n = (int(s) for s in shape)
    except (TypeError, ValueError):
        raise ValueError(f"shape must be one of {list(SHAPES)}, got {shape!r}") from None
    if (m, n) not in SHAPES:
        raise ValueError(f"shape must be one of {list(SHAPES)}, got {(m, n)}")
    return m, n


def _spec_bits(spec: int) -> list[tuple[bool, int]]:
    """(is_col, destination bit) of each of the 8 source bits."""
    return [(bool((spec >> (4 * k)) & 8), (spec >> (4 * k)) & 7) for k in range(8)]


def layout_from_spec(spec: int, shape) -> np.ndarray:
    """The (32, 8, 2) layout table (row, col of register i of each lane) of a bit-layout code."""
    m, n = _check_shape(shape)
    bits = _spec_bits(int(spec))
    rows_to = sorted(d for c, d in bits if not c)
    cols_to = sorted(d for c, d in bits if c)
    if rows_to != list(range(m.bit_length() - 1)) or cols_to != list(range(n.bit_length() - 1)):
        raise ValueError(f"spec {spec:#010x} does not map the 8 lane/register bits onto the "
                         f"{m}x{n} tile's row and column bits one to one")
    lay = np.zeros((32, 8, 2), dtype=np.int64)
    lane = warp.LANES[:, None]
    reg = np.arange(8)[None, :]
    for k, (is_col, dest) in enumerate(bits):
        bit = (lane >> k) & 1 if k < 5 else (reg >> (k - 5)) & 1
        lay[..., int(is_col)] |= bit << dest
    return lay


def spec_from_layout(layout, shape) -> int:
    """The bit-layout code of a (32, 8, 2) layout table; ``ValueError`` if it is not a bit layout
    (e.g. a layout traced on a GPU: pass it to the wrappers' ``layout=``)."""
    m, n = _check_shape(shape)
    lay = warp.validate_layout(layout, (m, n))
    if lay.shape[1] != 8:
        raise ValueError(f"an accumulator layout has 8 registers per lane, got {lay.shape[1]}")
    base = lay[0, 0]
    if tuple(base) != (0, 0):
        raise ValueError("not a bit layout: lane 0 register 0 does not hold element (0, 0)")
    spec = 0
    for k in range(8):
        lane, reg = (1 << k, 0) if k < 5 else (0, 1 << (k - 5))
        r, c = (int(v) for v in lay[lane, reg])
        if (r == 0) == (c == 0) or (r & (r - 1)) or (c & (c - 1)):
            raise ValueError(f"not a bit layout: source bit {k} moves element (0, 0) to ({r}, {c})")
        spec |= ((8 | (c.bit_length() - 1)) if c else (r.bit_length() - 1)) << (4 * k)
    try:
        same = np.array_equal(layout_from_spec(spec, (m, n)), lay)
    except ValueError:
        same = False
    if not same:
        raise ValueError("not a bit layout: the table is not the XOR of what its single bits do")
    return spec


# -------------------------------------------------------------------------------------------------
# Emulator versions (NumPy, through fraglab.warp). Fragments are (32, 8) or (32, 8, batch...).
# -------------------------------------------------------------------------------------------------

def operator(op) -> Callable:
    """The binary function of ``op``: a name in :data:`OPERATORS` or any callable."""
    if callable(op):
        return op
    if op not in OPERATORS:
        raise ValueError(f"unknown operator {op!r}; known: {', '.join(OPERATORS)}")
    return OPERATORS[op]


def _as_frag(frag) -> np.ndarray:
    f = np.asarray(frag)
    if f.ndim < 2 or f.shape[:2] != (32, 8):
        raise ValueError(f"a fragment has shape (32, 8) (lanes, registers), optionally with "
                         f"batch axes after them; got {f.shape}")
    return f


def _mask_arg(mask: str, group_masks) -> object:
    if mask in ("group", "quad"):
        return group_masks
    if mask == "full":
        return warp.FULL_MASK
    raise ValueError(f"mask must be 'quad' (or 'group') or 'full', got {mask!r}")


def permute_fig2(frag) -> np.ndarray:
    """Fig. 2: swap registers 2,3 with 4,5 in every lane (a new array).

    On the 16x16 accumulator this puts row g = lane/4 in x[0..3] and row g+8 in x[4..7].
    """
    return _as_frag(frag)[:, list(FIG2_ORDER)]


def _fold_quads(f: np.ndarray, fn, mask, groups) -> np.ndarray:
    """For each register group (4 registers of one row): fold them left to right in the lane,
    then ``v = fn(v, __shfl_xor_sync(mask, v, offset))`` for offsets 1 and 2. (32, groups, ...)."""
    out = []
    for regs in groups:
        v = f[:, regs[0]]
        for r in regs[1:]:
            v = fn(v, f[:, r])
        for offset in (1, 2):
            v = fn(v, warp.shfl_xor_sync(mask, v, offset))
        out.append(np.asarray(v))
    return np.stack(out, axis=1)


def quad_reduce(frag, op, mask: str = "quad") -> np.ndarray:
    """Algorithm 3 on a permuted fragment: returns (32, 2, ...) = (val_A, val_B) of every lane.

    Stage 1 folds x[0..3] (then x[4..7]) left to right; stage 2 combines with
    ``__shfl_xor_sync(mask, v, 1)`` then offset 2. ``mask='quad'``: the paper's per-lane masks
    :data:`QUAD_MASKS`; ``'full'``: 0xffffffff. ``op``: a name of :data:`OPERATORS` or a binary
    function. Every lane of a quad ends with its two rows' reductions.
    """
    f = _as_frag(frag)
    return _fold_quads(f, operator(op), _mask_arg(mask, QUAD_MASKS), ((0, 1, 2, 3), (4, 5, 6, 7)))


def _group_masks(across: int) -> np.ndarray:
    """Per-lane masks naming the lanes that differ from a lane only in the bits ``across``."""
    m0 = 0
    for lane in range(32):
        if lane & ~across == 0:
            m0 |= 1 << lane
    return (m0 << (warp.LANES & ~across)).astype(np.int64)


def _across_bits(spec: int, along_rows: bool) -> tuple[int, int]:
    """(lane bits, register bits) whose change moves along a row (or down a column)."""
    lane_bits = reg_bits = 0
    for k, (is_col, _) in enumerate(_spec_bits(spec)):
        if is_col == along_rows:
            if k < 5:
                lane_bits |= 1 << k
            else:
                reg_bits |= 1 << (k - 5)
    return lane_bits, reg_bits


def reduce_lines(frag, op, shape, along: str = "rows", mask: str = "group",
                 spec: int | None = None) -> np.ndarray:
    """Reduce every row (``along='rows'``: one value per row) or column of a fragment of any bit
    layout, the way the kernels' generic code does; returns (lines, ...) as the leading lanes
    write them.

    Order, as in the kernel: register i folds the registers j > i on its line, j increasing; then
    one ``__shfl_xor_sync`` per lane bit that moves along the line, lowest bit first.
    """
    m, n = _check_shape(shape)
    spec = SPECS[(m, n)] if spec is None else int(spec)
    lay = layout_from_spec(spec, (m, n))
    f = _as_frag(frag)
    fn = operator(op)
    if along not in ("rows", "cols"):
        raise ValueError(f"along must be 'rows' or 'cols', got {along!r}")
    lane_across, reg_across = _across_bits(spec, along == "rows")
    masks = _mask_arg(mask, _group_masks(lane_across))
    leaders = np.flatnonzero((warp.LANES & lane_across) == 0)
    coord = 0 if along == "rows" else 1
    out = np.full((m if along == "rows" else n,) + f.shape[2:], np.nan, dtype=f.dtype)
    for i in range(8):
        if i & reg_across:
            continue
        v = f[:, i]
        for j in range(i + 1, 8):
            if j & ~reg_across == i:
                v = fn(v, f[:, j])
        for bit in range(5):
            if lane_across >> bit & 1:
                v = fn(v, warp.shfl_xor_sync(masks, v, 1 << bit))
        v = np.asarray(v)
        out[lay[leaders, i, coord]] = v[leaders]
    return out


def rows_16x16(frag, op, permute: bool = True, mask: str = "quad") -> np.ndarray:
    """Row reductions (16, ...) of a 16x16 accumulator fragment, as the kernels compute them:
    Fig. 2 + Algorithm 3 (``permute=True``) or the same reduction of {x0,x1,x4,x5} and
    {x2,x3,x6,x7} without the swap; lane 4g writes rows g and g+8."""
    f = _as_frag(frag)
    fn, m = operator(op), _mask_arg(mask, QUAD_MASKS)
    if permute:
        vals = _fold_quads(permute_fig2(f), fn, m, ((0, 1, 2, 3), (4, 5, 6, 7)))
    else:
        vals = _fold_quads(f, fn, m, ((0, 1, 4, 5), (2, 3, 6, 7)))
    leaders = np.arange(0, 32, 4)
    return np.concatenate([vals[leaders, 0], vals[leaders, 1]], axis=0)


def tiles_to_fragments(tiles, spec: int | None = None) -> np.ndarray:
    """(n, M, N) matrices -> (32, 8, n) fragments (lane, register, tile) of the given layout."""
    t = np.asarray(tiles)
    if t.ndim != 3:
        raise ValueError(f"tiles must have shape (n, M, N), got {t.shape}")
    m, n = _check_shape(t.shape[1:])
    lay = layout_from_spec(SPECS[(m, n)] if spec is None else spec, (m, n))
    return np.moveaxis(t[:, lay[..., 0], lay[..., 1]], 0, -1)


def reduce_tiles(tiles, op, permute: bool = True, mask: str = "group",
                 spec: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(rows (n, M), cols (n, N)): what ``reduce_acc_*`` kernels write for float32 ``tiles``
    (n, M, N), in the kernels' order, so a GPU result must match bit for bit (NaN payloads aside).
    ``permute`` applies to 16x16 only."""
    t = np.asarray(tiles, dtype=np.float32)
    if t.ndim != 3:
        raise ValueError(f"tiles must have shape (n, M, N), got {t.shape}")
    shape = _check_shape(t.shape[1:])
    frag = tiles_to_fragments(t, spec if shape != (16, 16) else None)
    with np.errstate(invalid="ignore", over="ignore"):
        if shape == (16, 16):
            rows = rows_16x16(frag, op, permute, mask)
            cols = reduce_lines(frag, op, shape, "cols", mask)
        else:
            rows = reduce_lines(frag, op, shape, "rows", mask, spec)
            cols = reduce_lines(frag, op, shape, "cols", mask, spec)
    return rows.T.copy(), cols.T.copy()


def reference(tiles, op) -> tuple[np.ndarray, np.ndarray]:
    """Float64 NumPy row and column reductions of (n, M, N) matrices, order-free (max/min ignore
    NaN like fmaxf/fminf; a line of NaN only gives NaN). Not defined for ``max_cmp``, whose
    result depends on the order."""
    t = np.asarray(tiles, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        if op == "max":
            return np.fmax.reduce(t, axis=2), np.fmax.reduce(t, axis=1)
        if op == "min":
            return np.fmin.reduce(t, axis=2), np.fmin.reduce(t, axis=1)
        if op == "sum":
            return t.sum(axis=2), t.sum(axis=1)
    raise ValueError(f"no order-free reference for {op!r}; known: max, min, sum")


# -------------------------------------------------------------------------------------------------
# bf16 as uint16 bit patterns (CuPy and NumPy have no bfloat16 dtype)
# -------------------------------------------------------------------------------------------------





# -------------------------------------------------------------------------------------------------
# Kernel names and SASS helpers (no GPU needed)
# -------------------------------------------------------------------------------------------------

def _shape_name(shape) -> str:
    m, n = _check_shape(shape)
    return f"{m}x{n}"


def _check_op(op, known) -> str:
    if op not in known:
        raise ValueError(f"unknown operator {op!r}; known: {', '.join(known)}")
    return op


def _check_mask(mask) -> str:
    if mask not in MASKS:
        raise ValueError(f"mask must be one of {', '.join(MASKS)}, got {mask!r}")
    return mask


def reduce_acc_kernel(shape, op, permute: bool = True, mask: str = "group") -> str:
    """Name of the kernel reducing given accumulator values of ``shape`` with ``op``."""
    name = _shape_name(shape)
    _check_op(op, OPS)
    _check_mask(mask)
    if not isinstance(permute, (bool, np.bool_)):
        raise TypeError(f"permute must be True or False, got {permute!r}")
    if name == "16x16":
        return f"reduce_acc_16x16_{op}_{'perm' if permute else 'direct'}_{mask}"
    if not permute:
        raise ValueError("the Fig. 2 permutation exists for 16x16 tiles only; the 32x8 and 8x32 "
                         "kernels reduce in place (leave permute=True)")
    return f"reduce_acc_{name}_{op}_{mask}"


def mma_reduce_kernel(shape, dtype: str, op) -> str:
    """Name of the kernel computing A @ B for ``shape`` and reducing it with ``op``."""
    name = _shape_name(shape)
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return f"mma_reduce_{name}_{dtype}_{_check_op(op, MMA_OPS)}"


def rowmax_kernel(way: str) -> str:
    if way not in ROWMAX_WAYS:
        raise ValueError(f"way must be one of {', '.join(ROWMAX_WAYS)}, got {way!r}")
    return f"rowmax_{way}_16x16"


_NUMBERED = re.compile(r"(\.L_x_|__internal_)\d+")


def normalized_listing(sass_text: str) -> list[str]:
    """The instructions of a kernel's SASS as text, with addresses, the kernel's own name and the
    numbers of labels and internal helper functions replaced (``.L_x_#``), so that two kernels
    compiled from the same code compare equal."""
    names = re.findall(r"^\.text\.([\w$]+):", sass_text, re.M)
    lines = [m.group(0).split("*/", 1)[1].strip().rstrip(";").strip()
             for m in re.finditer(r"/\*[0-9a-f]{4,}\*/[^;]*;", sass_text)]
    lines = lines[:len(sass.instructions(sass_text))]
    lines = [_NUMBERED.sub(r"\1#", line) for line in lines]
    if len(names) == 1:
        lines = [re.sub(r"\b" + re.escape(names[0]) + r"\b", "<kernel>", line) for line in lines]
    return lines


def main_path(sass_text: str) -> list[str]:
    """Opcodes up to the kernel's last EXIT: the path a converged warp runs. What ptxas places
    after it (here: the fallback for a warp whose shuffle masks disagree, with WARPSYNC) only
    runs when it is branched to."""
    ops = sass.instructions(sass_text)
    last = max((i for i, op in enumerate(ops) if op == "EXIT"), default=len(ops) - 1)
    return ops[:last + 1]


# -------------------------------------------------------------------------------------------------
# GPU wrappers
# -------------------------------------------------------------------------------------------------

def _defines(shape, layout) -> dict | None:
    if layout is None:
        return None
    m, n = shape
    if (m, n) == (16, 16):
        raise ValueError("layout= applies to the 32x8 and 8x32 kernels; the 16x16 code is "
                         "written for the documented m16n8k16 layout")
    spec = spec_from_layout(layout, (m, n))
    return {f"FRAGLAB_SPEC_{m}X{n}": f"0x{spec:08X}u"}


def _check_aligned(name: str, arr) -> None:
    # load_matrix_sync needs 256-bit aligned tile pointers; tiles are 256 bytes or larger, so an
    # aligned base keeps every tile aligned. CuPy's allocations are; offset views may not be.
    if arr.data.ptr % 32:
        raise ValueError(f"{name} must start on a 32-byte boundary (WMMA loads need it); this "
                         f"view starts at an offset: pass a copy ({name}.copy())")


def _check_tiles(n: int) -> int:
    if not 1 <= n <= MAX_TILES:
        raise ValueError(f"the number of tiles must be between 1 and {MAX_TILES}, got {n}")
    return n


def _grid(n_tiles: int) -> int:
    return -(-n_tiles // WARPS_PER_BLOCK)


def reduce_accumulators(acc, op: str, *, permute: bool = True, mask: str = "group",
                        layout=None):
    """Row and column reductions of given accumulator values: ``acc`` is a float32 CuPy array
    (n_tiles, M, N) with (M, N) in :data:`SHAPES`; each warp loads one tile with
    ``load_matrix_sync`` and reduces it in registers. Returns ``(rows (n, M), cols (n, N))``.

    ``op`` in :data:`OPS`; ``permute`` (16x16 only): Fig. 2 + Algorithm 3, or the same reduction
    without the swap; ``mask``: the paper's per-lane group masks or the full mask. ``layout``
    (32x8/8x32): a traced (32, 8, 2) layout table to compile the kernel for, instead of the
    default bit layout.
    """
    _check_op(op, OPS)
    _check_mask(mask)
    launch.check_array("acc", acc, dtype=np.float32, ndim=3)
    _check_aligned("acc", acc)
    shape = tuple(int(s) for s in acc.shape[1:])
    if shape not in SHAPES:
        raise ValueError(f"acc must have shape (n_tiles, M, N) with (M, N) in {list(SHAPES)}, "
                         f"got {acc.shape}")
    n = _check_tiles(acc.shape[0])
    kernel = reduce_acc_kernel(shape, op, permute, mask)
    fn = launch.get_kernel(KERNELS, kernel, defines=_defines(shape, layout))
    rows = launch.poisoned((n, shape[0]), np.float32)
    cols = launch.poisoned((n, shape[1]), np.float32)
    launch.launch(fn, _grid(n), 32 * WARPS_PER_BLOCK, (acc, rows, cols, np.int32(n)))
    return rows, cols


def _check_inputs(a, b, dtype: str) -> tuple[tuple[int, int], int]:
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    want = np.float16 if dtype == "f16" else np.uint16
    hint = "" if dtype == "f16" else " (bf16 bit patterns: see to_bf16)"
    try:
        launch.check_array("a", a, dtype=want, ndim=3)
        launch.check_array("b", b, dtype=want, ndim=3)
    except TypeError as e:
        raise TypeError(f"{e}{hint}") from None
    m, k = a.shape[1:]
    k2, n = b.shape[1:]
    if k != 16 or k2 != 16 or (m, n) not in SHAPES:
        raise ValueError(f"a must have shape (n_tiles, M, 16) and b (n_tiles, 16, N) with (M, N) "
                         f"in {list(SHAPES)}; got a {a.shape}, b {b.shape}")
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"a and b must hold the same number of tiles, got {a.shape[0]} and "
                         f"{b.shape[0]}")
    _check_aligned("a", a)
    _check_aligned("b", b)
    return (m, n), _check_tiles(a.shape[0])


def mma_reduce(a, b, op: str, *, dtype: str = "f16", layout=None):
    """C[t] = A[t] @ B[t] on the tensor cores (f32 accumulate), then its row and column
    reductions in registers with the paper's masks (for 16x16 rows: Fig. 2 + Algorithm 3).

    ``a`` (n_tiles, M, 16) and ``b`` (n_tiles, 16, N) are C-contiguous CuPy arrays, float16 for
    ``dtype='f16'`` or uint16 bf16 bit patterns (:func:`to_bf16`) for ``dtype='bf16'`` (sm_80+).
    Returns ``(rows (n, M), cols (n, N))`` float32. ``layout`` as in :func:`reduce_accumulators`.
    """
    _check_op(op, MMA_OPS)
    shape, n = _check_inputs(a, b, dtype)
    if dtype == "bf16":
        ok, why = device.supports("bf16")
        if not ok:
            raise RuntimeError(why)
    fn = launch.get_kernel(KERNELS, mma_reduce_kernel(shape, dtype, op),
                           defines=_defines(shape, layout))
    rows = launch.poisoned((n, shape[0]), np.float32)
    cols = launch.poisoned((n, shape[1]), np.float32)
    launch.launch(fn, _grid(n), 32 * WARPS_PER_BLOCK, (a, b, rows, cols, np.int32(n)))
    return rows, cols


def rowmax(a, b, way: str = "fullmask"):
    """Row maxima (n_tiles, 16) of C = A @ B for float16 (n_tiles, 16, 16) ``a`` and ``b``:
    ``way='shared'`` through shared memory (store_matrix_sync, __syncthreads, loads),
    ``'quadmask'`` / ``'fullmask'`` in registers (Fig. 2 + Algorithm 3) with either mask."""
    return run_per_tile(a, b, rowmax_kernel(way))


def run_per_tile(a, b, kernel: str, *, source: str | None = None):
    """Launch ``kernel`` (from this topic's file, or from ``source``: labs pass the learner's
    CUDA here) on float16 (n_tiles, 16, 16) ``a`` and ``b``; returns its output (n_tiles, 16).

    The kernel's signature must be ``(const __half* a, const __half* b, float* out, int
    n_tiles)``, with warp ``w`` of block ``k`` handling tile ``k * 4 + w`` (4 warps per block)
    and writing ``out[tile * 16 + 0..15]``.
    """
    if not isinstance(kernel, str) or not kernel:
        raise TypeError(f"kernel must be a kernel name, got {kernel!r}")
    (m, n), tiles = _check_inputs(a, b, "f16")
    if (m, n) != (16, 16):
        raise ValueError(f"these kernels take 16x16 tiles: a (n, 16, 16), b (n, 16, 16); got a "
                         f"{a.shape}, b {b.shape}")
    fn = launch.get_kernel(KERNELS, kernel, source=source)
    out = launch.poisoned((tiles, 16), np.float32)
    launch.launch(fn, _grid(tiles), 32 * WARPS_PER_BLOCK, (a, b, out, np.int32(tiles)))
    return out


def accumulator_layout_on_gpu(shape) -> np.ndarray:
    """The (32, 8, 2) layout of the f32 accumulator of ``shape`` on this GPU, read by loading a
    matrix whose elements are their own coordinates with ``load_matrix_sync`` (which uses the same
    layout as ``mma_sync`` and ``store_matrix_sync``)."""
    m, n = _check_shape(shape)
    import cupy
    coords = cupy.asarray(np.arange(m * n, dtype=np.float32).reshape(m, n))
    out = launch.poisoned((32, 8), np.float32)
    fn = launch.get_kernel(KERNELS, f"acc_layout_{m}x{n}")
    launch.launch(fn, 1, 32, (coords, out), sync=True)
    flat = out.get()
    if np.isnan(flat).any():
        raise RuntimeError("the layout kernel left registers unwritten")
    flat = flat.astype(np.int64)
    return np.stack([flat // n, flat % n], axis=-1)
