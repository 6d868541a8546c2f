"""Wrappers for ``kernels/11_fused_lm_head.cu``: every argument is checked before the launch, and the
output starts poisoned (an element the kernel never writes stays the sentinel and fails a check).
"""
from __future__ import annotations

import numpy as np

from .. import launch

KERNELS = "11_fused_lm_head"
#: Warps (rows) per block of ``warp_scan``.
WARPS_PER_BLOCK = 4


def warp_scan(x, source: str | None = None):
    """The inclusive prefix sum of each row of ``x`` (int32, shape (rows, 32); CuPy on a GPU,
    NumPy on the PTX interpreter), one warp per row: ``out[r, i] = x[r, 0] + ... + x[r, i]``
    (wrapping around like int32). ``source`` replaces the kernel file (the lab passes the
    learner's CUDA); it must define
    ``extern "C" __global__ void warp_scan(const int* in, int* out, int rows)``."""
    launch.check_array("x", x, dtype=np.int32, shape=(None, 32))
    rows = x.shape[0]
    limit = (2**31 - 1) // 32             # the kernel indexes with 32-bit ints
    if not 1 <= rows <= limit:
        raise ValueError(f"x must have between 1 and {limit} rows, got {rows}")
    out = launch.poisoned((rows, 32), np.int32)
    fn = launch.get_kernel(KERNELS, "warp_scan", source=source)
    blocks = -(-rows // WARPS_PER_BLOCK)
    launch.launch(fn, blocks, 32 * WARPS_PER_BLOCK, (x, out, np.int32(rows)))
    return out
