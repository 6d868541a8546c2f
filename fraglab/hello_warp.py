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


def warp_sum(x, source: str | None = None, *, strided: bool = False, warps_per_block: int = 8):
    """Sum each row of ``x`` (a float32 CuPy array of shape (rows, 32)), one warp per row.

    ``strided=False`` launches one 32-thread block per row (kernel ``warp_sum``);
    ``strided=True`` launches blocks of ``warps_per_block`` warps, each warp looping over rows
    (kernel ``warp_sum_strided``), with enough blocks to fill the GPU.
    ``source`` replaces the kernel file (labs pass the learner's CUDA here); it must define
    ``extern "C" __global__ void warp_sum(const float* in, float* out, int rows)``.
    """
    launch.check_array("x", x, dtype=np.float32, shape=(None, 32))
    rows = x.shape[0]
    if rows < 1 or rows * 32 > 2**31 - 1:  # the kernels index with 32-bit ints
        raise ValueError(f"x must have between 1 and {(2**31 - 1) // 32} rows, got {rows}")
    launch.check_range("warps_per_block", warps_per_block, 1, 32)
    out = launch.poisoned((rows,), np.float32)
    if not strided:
        fn = launch.get_kernel(KERNELS, "warp_sum", source=source)
        launch.launch(fn, rows, 32, (x, out, np.int32(rows)))
    else:
        import cupy
        fn = launch.get_kernel(KERNELS, "warp_sum_strided", source=source)
        sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
        blocks = min(-(-rows // warps_per_block), sms * (64 // warps_per_block))
        launch.launch(fn, blocks, 32 * warps_per_block, (x, out, np.int32(rows)))
    return out
