"""The float64 reference of attention, softmax(Q K^T * scale) V, against which every attention
kernel of the course is checked (NumPy, one head at a time)."""
from __future__ import annotations

import math

import numpy as np


def softmax_scale(d: int, scale=None) -> float:
    """The score scale: ``scale``, or 1/sqrt(d) when it is ``None``."""
    return 1.0 / math.sqrt(d) if scale is None else float(scale)


def attention_reference(q, k, v, *, causal: bool = False, scale: float | None = None) -> np.ndarray:
    """softmax(Q K^T * scale) V in float64, for arrays (..., N, d) (any leading axes).

    ``causal=True`` lets query i see keys 0..i only. A row that sees no key would be 0/0; with
    equal query and key counts that cannot happen. Default scale 1/sqrt(d).
    """
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    if q.shape[:-2] != k.shape[:-2] or k.shape != v.shape[:-1] + (k.shape[-1],) or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"shapes do not match: q {q.shape}, k {k.shape}, v {v.shape}")
    sc = softmax_scale(q.shape[-1], scale)
    lead = q.shape[:-2]
    qf = q.reshape((-1,) + q.shape[-2:])
    kf = k.reshape((-1,) + k.shape[-2:])
    vf = v.reshape((-1,) + v.shape[-2:])
    out = np.empty(qf.shape[:-1] + (v.shape[-1],))
    n_q, n_k = q.shape[-2], k.shape[-2]
    visible = np.tril(np.ones((n_q, n_k), dtype=bool)) if causal else None
    for b in range(qf.shape[0]):                      # one head at a time: N x N float64 each
        s = qf[b] @ kf[b].T * sc
        if causal:
            s = np.where(visible, s, -np.inf)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        out[b] = (p / p.sum(axis=1, keepdims=True)) @ vf[b]
    return out.reshape(lead + out.shape[-2:])
