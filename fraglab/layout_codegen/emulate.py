"""The generated code, run on :mod:`fraglab.warp` in NumPy (fragments (32, n_regs) or
(32, n_regs, batch...)), and the float64 reference it is compared with."""
from __future__ import annotations

import numpy as np

from .. import warp
from .plan import OPS, Plan

_NP_OPS = {"max": np.fmax, "min": np.fmin, "sum": np.add}


def np_op(op):
    """The NumPy ufunc of an operator name of :data:`OPS` (a callable passes through)."""
    if callable(op):
        return op
    if op not in _NP_OPS:
        raise ValueError(f"unknown operator {op!r}; known: {', '.join(OPS)}")
    return _NP_OPS[op]


def _frag(p: Plan, frag) -> np.ndarray:
    f = np.asarray(frag)
    if f.ndim < 2 or f.shape[:2] != (32, p.n_regs):
        raise ValueError(f"a {p.name} fragment has shape (32, {p.n_regs}), optionally with batch "
                         f"axes after them; got {f.shape}")
    return f


def emulate_reduce(p: Plan, frag, op, axis: str = "rows") -> np.ndarray:
    """What ``reduce_<axis>`` leaves in each lane: (32, groups, ...) in the generated order."""
    lp, fn, f = p.line(axis), np_op(op), _frag(p, frag)
    vals = []
    for regs in lp.groups:
        v = f[:, regs[0]]
        for r in regs[1:]:
            v = fn(v, f[:, r])
        vals.append(v)
    for o in lp.offsets:
        vals = [fn(v, warp.shfl_xor_sync(warp.FULL_MASK, v, o)) for v in vals]
    return np.stack([np.asarray(v) for v in vals], axis=1)


def _emulate_lines(p: Plan, frag, op, axis: str) -> np.ndarray:
    lp = p.line(axis)
    v = emulate_reduce(p, frag, op, axis)
    out = np.full((lp.lines,) + v.shape[2:], np.nan)
    written = np.zeros(lp.lines, int)
    for lane in range(32):
        if lp.leaders >> lane & 1:
            for g in range(len(lp.groups)):
                out[lp.line_of[lane, g]] = v[lane, g]
                written[lp.line_of[lane, g]] += 1
    assert (written == 1).all(), f"leaders write lines {written.tolist()} times"
    return out


def emulate_rows(p: Plan, frag, op) -> np.ndarray:
    """(rows, ...): what ``store_rows`` writes."""
    return _emulate_lines(p, frag, op, "rows")


def emulate_cols(p: Plan, frag, op) -> np.ndarray:
    """(cols, ...): what ``store_cols`` writes."""
    return _emulate_lines(p, frag, op, "cols")


def emulate_expand_rows(p: Plan, v) -> np.ndarray:
    """``expand_rows``: (32, groups, ...) -> (32, n_regs, ...)."""
    return np.asarray(v)[:, p.rows.group_of()]


def emulate_store(p: Plan, frag) -> np.ndarray:
    """``store``: the (M, N, ...) tile the fragment's registers are written to."""
    f = _frag(p, frag)
    out = np.full(p.shape + f.shape[2:], np.nan)
    out[p.layout[..., 0], p.layout[..., 1]] = f
    return out


def fragments(p: Plan, tiles) -> np.ndarray:
    """(n, M, N) tiles -> (32, n_regs, n) fragments of the plan's layout (load_matrix_sync)."""
    t = np.asarray(tiles)
    if t.ndim != 3 or t.shape[1:] != p.shape:
        raise ValueError(f"tiles must have shape (n, {p.shape[0]}, {p.shape[1]}), got {t.shape}")
    return np.moveaxis(t[:, p.layout[..., 0], p.layout[..., 1]], 0, -1)


def reference(tiles, op) -> tuple[np.ndarray, np.ndarray]:
    """Float64 NumPy row and column reductions of (n, M, N) tiles."""
    t = np.asarray(tiles, dtype=np.float64)
    fn = np_op(op)
    return fn.reduce(t, axis=2), fn.reduce(t, axis=1)
