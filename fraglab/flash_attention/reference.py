"""NumPy attention: the online softmax (FA-1 and FA-2 forms), beside the float64 reference that
every attention chapter checks against (:func:`fraglab.attention.attention_reference`,
re-exported here)."""
from __future__ import annotations

import numpy as np

from ..attention.reference import attention_reference, softmax_scale  # noqa: F401


def online_softmax_attention(q, k, v, *, block: int = 16, causal: bool = False,
                             scale: float | None = None, normalize: str = "end",
                             return_stats: bool = False):
    """Attention for one head, (M, d) queries against (N, d) keys and values, one key block
    of ``block`` keys at a time, keeping only a running row max ``m``, a running row sum ``l``
    and the output ``O`` (float64).

    ``normalize='end'`` is the FA-2 form: ``O`` accumulates unnormalized and is divided by ``l``
    once at the end. ``normalize='each_step'`` is the FA-1 form of Alg. 4: after every block ``O``
    is the exact softmax output of the keys seen so far. Both rescale the old ``O`` by
    ``exp(m_old - m_new)`` when the max grows. Query i sees keys 0..i when ``causal``; a row that
    has seen no key yet keeps ``m = -inf`` and contributes nothing (no NaN).
    Returns ``O``, or ``(O, m, l)`` with ``return_stats``.
    """
    if normalize not in ("end", "each_step"):
        raise ValueError(f"normalize must be 'end' or 'each_step', got {normalize!r}")
    if not isinstance(block, (int, np.integer)) or block < 1:
        raise ValueError(f"block must be a positive int, got {block!r}")
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    if q.ndim != 2 or k.ndim != 2 or v.shape != k.shape[:1] + v.shape[1:] or q.shape[1] != k.shape[1]:
        raise ValueError(f"need q (M, d), k (N, d), v (N, dv); got {q.shape}, {k.shape}, {v.shape}")
    sc = softmax_scale(q.shape[1], scale)
    m_rows, n = q.shape[0], k.shape[0]
    m = np.full(m_rows, -np.inf)
    l = np.zeros(m_rows)
    o = np.zeros((m_rows, v.shape[1]))
    rows = np.arange(m_rows)[:, None]
    for k0 in range(0, n, block):
        s = q @ k[k0:k0 + block].T * sc
        if causal:
            s = np.where(k0 + np.arange(s.shape[1])[None, :] <= rows, s, -np.inf)
        m_new = np.maximum(m, s.max(axis=1))
        m_use = np.where(np.isneginf(m_new), 0.0, m_new)     # -inf - (-inf) would be NaN
        p = np.exp(s - m_use[:, None])
        alpha = np.exp(m - m_use)
        l_new = alpha * l + p.sum(axis=1)
        if normalize == "end":
            o = alpha[:, None] * o + p @ v[k0:k0 + block]
        else:
            inv = np.divide(1.0, l_new, out=np.zeros_like(l_new), where=l_new > 0)
            o = (alpha * l * inv)[:, None] * o + (p * inv[:, None]) @ v[k0:k0 + block]
        m, l = m_new, l_new
    if normalize == "end":
        o = o * np.divide(1.0, l, out=np.zeros_like(l), where=l > 0)[:, None]
    return (o, m, l) if return_stats else o
