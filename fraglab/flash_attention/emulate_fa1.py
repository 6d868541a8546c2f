"""Alg. 4 of the paper on a 16x16 f32 accumulator fragment, in the warp emulator, and the FA-1
in-register kernel's sweep over 16 query rows built from it."""
from __future__ import annotations

import numpy as np

from .. import fragments, warp
from ..dtypes import round_to
from .constants import FA1_TILE, LOG2E
from .reference import softmax_scale

#: For each of the 8 accumulator registers, which of the lane's two rows it holds: 0 for row
#: g = lane // 4 (registers 0, 1, 4, 5), 1 for row g + 8 (registers 2, 3, 6, 7).
ROW_OF_REG = np.array([0 if r in fragments.ACC16_ROW_REGS[0] else 1 for r in range(8)])


def quad_allreduce(values, op):
    """All-reduce over each quad (lanes 4g .. 4g+3): two butterfly steps, offsets 1 and 2.
    The four lanes of a quad hold one row of a 16x16 accumulator between them."""
    return warp.reduce_xor(values, op, offsets=(1, 2))


def alg4_step(frag, m_old, l_old, scale_log2: float, *, normalize: bool = True):
    """One key tile of the online softmax on an accumulator fragment, as the FA-1 in-register
    kernel does it (Alg. 4 of the paper), in float32 on the warp emulator.

    ``frag`` (32, 8): S = Q K^T of a 16x16 tile in the layout of
    :func:`fraglab.fragments.wmma_16x16_accumulator` (unscaled). ``m_old``, ``l_old`` (32, 2): each
    lane's copy of the running max (log2 domain: scores times ``scale_log2``) and row sum of its
    rows g and g + 8. Steps: row max of the tile (4 registers, then a quad reduction), new max,
    ``p = 2^(s * scale_log2 - m_new)``, row sum (quad reduction), new sum.

    Returns ``(p, m_new, l_new, alpha)``: ``p`` (32, 8) is P divided by ``l_new`` when
    ``normalize`` (FA-1, Alg. 4 line 18) and the raw exponentials otherwise (FA-2);
    ``alpha`` (32, 2) is the factor the old output is multiplied by: ``l_old 2^(m_old - m_new) /
    l_new`` with ``normalize``, ``2^(m_old - m_new)`` without.
    """
    x = np.asarray(frag, dtype=np.float32)
    if x.shape != (32, 8):
        raise ValueError(f"frag must have shape (32, 8), got {x.shape}")
    m_old = np.asarray(m_old, dtype=np.float32).reshape(32, 2)
    l_old = np.asarray(l_old, dtype=np.float32).reshape(32, 2)
    sl = np.float32(scale_log2)
    rows = fragments.ACC16_ROW_REGS
    mx = np.stack([x[:, list(r)].max(axis=1) for r in rows], axis=1)       # (32, 2)
    mx = quad_allreduce(mx, np.fmax)
    m_new = np.fmax(m_old, mx * sl)
    m_use = np.where(np.isneginf(m_new), np.float32(0), m_new)           # no -inf - (-inf)
    with np.errstate(invalid="ignore"):
        p = np.exp2(x * sl - m_use[:, ROW_OF_REG]).astype(np.float32)
    sums = np.stack([p[:, list(r)].sum(axis=1) for r in rows], axis=1)
    sums = quad_allreduce(sums, np.add)
    scale_old = np.exp2(m_old - m_use).astype(np.float32)
    l_resc = l_old * scale_old
    l_new = (l_resc + sums).astype(np.float32)
    if not normalize:
        return p, m_new, l_new, scale_old
    inv = np.where(l_new > 0, np.float32(1) / np.where(l_new > 0, l_new, 1), np.float32(0))
    return (p * inv[:, ROW_OF_REG]).astype(np.float32), m_new, l_new, (l_resc * inv).astype(np.float32)


def emulate_fa1_rows(q, k, v, *, scale: float | None = None, dtype: str = "f16") -> np.ndarray:
    """The FA-1 in-register kernel for 16 query rows, tile by tile: S = Q K^T (float32), Alg. 4
    on its accumulator fragment (:func:`alg4_step`), P rounded to ``dtype`` as the kernel stores
    it, then ``O = alpha * O + P V``. ``q`` (16, d), ``k`` and ``v`` (N, d) with N a multiple of 16.
    Returns O (16, d) float32."""
    q, k, v = (np.asarray(a, dtype=np.float32) for a in (q, k, v))
    if q.shape[0] != FA1_TILE or k.shape[0] % FA1_TILE or k.shape != v.shape:
        raise ValueError(f"need q (16, d) and k, v (N, d) with N a multiple of 16; got "
                         f"{q.shape}, {k.shape}, {v.shape}")
    lay = fragments.wmma_16x16_accumulator()
    sl = np.float32(softmax_scale(q.shape[1], scale) * LOG2E)
    m = np.full((32, 2), -np.inf, dtype=np.float32)
    l = np.zeros((32, 2), dtype=np.float32)
    o = np.zeros((16, v.shape[1]), dtype=np.float32)
    for k0 in range(0, k.shape[0], FA1_TILE):
        s = (q.astype(np.float64) @ k[k0:k0 + 16].T.astype(np.float64)).astype(np.float32)
        p, m, l, alpha = alg4_step(warp.to_fragment(s, lay), m, l, sl)
        p_tile = round_to(warp.from_fragment(p, lay, (16, 16)), dtype, np.float32)
        # alpha of row g is in lanes 4g..4g+3, column 0; of row g + 8 in column 1
        alpha_rows = np.concatenate([alpha[0::4, 0], alpha[0::4, 1]])
        o = (alpha_rows[:, None] * o + p_tile.astype(np.float64) @ v[k0:k0 + 16]).astype(np.float32)
    return o
