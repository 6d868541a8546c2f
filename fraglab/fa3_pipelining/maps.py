"""The tma rung's tensor maps: Q, K and V seen as 3-d (B*H, N, d) tensors for
``cp.async.bulk.tensor`` (:func:`fraglab.tma.tensor_map`), and the kernels' map arguments."""
from __future__ import annotations

import numpy as np


def tensor_maps(q, k, v, rows: int, key_tile: int) -> tuple:
    """Three tensor maps over q, k and v seen as 3-d (B*H, N, d) tensors, boxes of 1 x r x 64
    (r: the CTA's query ``rows`` for Q, the ``key_tile`` for K and V), 128-byte swizzle. The
    maps hold the arrays' addresses: build them for the arrays the launch reads, and keep them
    while the kernel may run."""
    from .. import tma
    b, h, n, d = q.shape
    return tuple(tma.tensor_map(x.reshape(b * h, n, d), (1, r, 64), swizzle=128)
                 for x, r in ((q, rows), (k, key_tile), (v, key_tile)))


def map_arguments(maps: tuple) -> tuple:
    """The kernels' last three arguments: the maps' device bytes, or three null pointers (the
    variants whose producer copies with cp.async)."""
    return tuple(m.device for m in maps) if maps else (np.uint64(0),) * 3
