"""Wrappers for ``kernels/00_hello_warp.cu`` (topic 00_hello_warp)."""
from __future__ import annotations

import numpy as np

from . import launch

KERNELS = "00_hello_warp"


def hello_warp(source: str | None = None):
    """Run one warp of ``hello_warp``; returns ``(lane_ids (32,), regs (32, 8))`` as NumPy arrays."""
    fn = launch.get_kernel(KERNELS, "hello_warp", source=source)
    lane_ids = launch.poisoned((32,), np.int32)
    regs = launch.poisoned((32, 8), np.float32)
    launch.launch(fn, 1, 32, (lane_ids, regs), sync=True)
    return lane_ids.get(), regs.get()


def warp_sum(x, source: str | None = None):
    """Sum each row of ``x`` (a float32 CuPy array of shape (rows, 32)) with one warp per row.

    ``source`` replaces the kernel file (labs pass the learner's CUDA here); it must define
    ``extern "C" __global__ void warp_sum(const float* in, float* out, int rows)``.
    """
    launch.check_array("x", x, dtype=np.float32, shape=(None, 32))
    rows = x.shape[0]
    if rows < 1 or rows > 2**31 - 1:
        raise ValueError(f"x must have between 1 and 2**31-1 rows, got {rows}")
    fn = launch.get_kernel(KERNELS, "warp_sum", source=source)
    out = launch.poisoned((rows,), np.float32)
    launch.launch(fn, rows, 32, (x, out, np.int32(rows)))
    return out
