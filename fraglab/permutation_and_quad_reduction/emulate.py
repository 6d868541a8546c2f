"""Emulator versions of the kernels (NumPy, through :mod:`fraglab.warp`): Fig. 2, Algorithm 3,
the generic line reductions, and whole tiles reduced in the kernels' own order, so that a GPU
result must match bit for bit. Fragments are (32, 8) or (32, 8, batch...) arrays."""
from __future__ import annotations

from typing import Callable

import numpy as np

from .. import launch, warp
from .layouts import FIG2_ORDER, QUAD_MASKS, SPECS, _spec_bits, check_shape, layout_from_spec

#: The binary operators, as the kernels apply them (``apply(a, b)`` with ``a`` the running value).
#: ``max``/``min`` are CUDA's fmaxf/fminf: a NaN operand loses (np.fmax/np.fmin do the same);
#: ``max_cmp`` is ``a > b ? a : b``, where a NaN in ``b`` wins and a NaN in ``a`` loses.
OPERATORS: dict[str, Callable] = {
    "max": np.fmax,
    "min": np.fmin,
    "sum": np.add,
    "max_cmp": lambda a, b: np.where(a > b, a, b),
}


def operator(op) -> Callable:
    """The binary function of ``op``: a name in :data:`OPERATORS` or any callable."""
    if callable(op):
        return op
    return OPERATORS[launch.check_choice("op", op, OPERATORS)]


def _as_frag(frag) -> np.ndarray:
    f = np.asarray(frag)
    if f.ndim < 2 or f.shape[:2] != (32, 8):
        raise ValueError(f"a fragment has shape (32, 8) (lanes, registers), optionally with "
                         f"batch axes after them; got {f.shape}")
    return f


def _mask_arg(mask: str, group_masks) -> object:
    """The member masks the shuffles get: the per-lane group masks ('quad' or 'group') or the
    full mask."""
    launch.check_choice("mask", mask, ("quad", "group", "full"))
    return warp.FULL_MASK if mask == "full" else group_masks


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
    m, n = check_shape(shape)
    spec = SPECS[(m, n)] if spec is None else int(spec)
    lay = layout_from_spec(spec, (m, n))
    f = _as_frag(frag)
    fn = operator(op)
    launch.check_choice("along", along, ("rows", "cols"))
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
    m, n = check_shape(t.shape[1:])
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
    shape = check_shape(t.shape[1:])
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
    if op not in ("max", "min", "sum"):
        raise ValueError(f"no order-free reference for {op!r}; known: max, min, sum")
    with np.errstate(invalid="ignore", over="ignore"):
        if op == "max":
            return np.fmax.reduce(t, axis=2), np.fmax.reduce(t, axis=1)
        if op == "min":
            return np.fmin.reduce(t, axis=2), np.fmin.reduce(t, axis=1)
        return t.sum(axis=2), t.sum(axis=1)
