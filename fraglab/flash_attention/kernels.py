"""Wrappers of ``kernels/05_flash_attention_fa1.cu`` (:func:`fa1`) and
``kernels/05_flash_attention_fa2.cu`` (:func:`fa2`): kernel names, shared-memory sizes and
launchers for :mod:`fraglab.bench`.

Tensors are ``(B, H, N, d)`` C-contiguous CuPy arrays: ``float16``, or ``uint16`` holding bf16
bit patterns (:func:`fraglab.dtypes.to_bf16`; CuPy has no bfloat16 dtype). Every argument is
checked before a launch, by the checks every attention chapter shares (:mod:`fraglab.attention`).
"""
from __future__ import annotations

import numpy as np

from .. import launch
from ..attention import check_fa2_arguments, check_qkv, check_scale, fa2_output
from .constants import (DTYPES, FA1_HEAD_DIMS, FA1_TILE, FA2_BN, FA2_HEAD_DIMS, FA2_WARPS, FINAL,
                        KERNELS_FA1, KERNELS_FA2, LOG2E, VARIANTS)
from .lab import FA1_LAB_NAME, fa1_lab_source


def fa1_kernel(variant: str, d: int) -> str:
    """Kernel name in ``kernels/05_flash_attention_fa1.cu`` of ``variant`` (:data:`VARIANTS`)."""
    launch.check_choice("variant", variant, VARIANTS)
    launch.check_choice("head dimension d", d, FA1_HEAD_DIMS)
    return f"fa1_{variant}_d{d}"


def fa1_smem_bytes(d: int) -> int:
    """Dynamic shared memory of an FA-1 block (``Fa1Smem<D>::BYTES`` in the .cu file)."""
    launch.check_choice("head dimension d", d, FA1_HEAD_DIMS)
    return 16 * (d + 4) * 4 + 16 * (d + 8) * 2 + 16 * 20 * 4 + 16 * 24 * 2 + 3 * 16 * 4


def fa2_kernel(dtype: str, d: int, warps: int) -> str:
    """Kernel name in ``kernels/05_flash_attention_fa2.cu``."""
    launch.check_choice("dtype", dtype, DTYPES)
    launch.check_choice("head dimension d", d, FA2_HEAD_DIMS)
    launch.check_choice("warps", warps, FA2_WARPS)
    return f"fa2_{dtype}_d{d}_w{warps}"


def fa2_smem_bytes(d: int, warps: int) -> int:
    """Dynamic shared memory of an FA-2 block: Q (16 W rows), K and V (64 rows each), 2 d bytes a row."""
    return (16 * warps + 2 * FA2_BN) * 2 * d


# -------------------------------------------------------------------------------------------------
# FA-1
# -------------------------------------------------------------------------------------------------

def fa1_launcher(q, k, v, variant: str = FINAL, *, scale: float | None = None, out=None,
                 softmax_source: str | None = None):
    """Check the arguments of :func:`fa1`, allocate the (poisoned) output, and return
    ``(launch, out)``: ``launch()`` runs the kernel once on the current stream (for
    :mod:`fraglab.bench`). ``softmax_source``: see :func:`fa1_lab_source` (in-register
    variant only)."""
    launch.check_choice("variant", variant, VARIANTS)
    if softmax_source is not None:
        if not isinstance(softmax_source, str):
            raise TypeError(f"softmax_source must be a str of CUDA code, got {type(softmax_source).__name__}")
        if variant != "inregister":
            raise ValueError("softmax_source replaces the in-register softmax step; it needs "
                             f"variant='inregister', got {variant!r}")
    dtype, (b, h, n, d) = check_qkv(q, k, v, FA1_HEAD_DIMS, 32, "WMMA loads")
    if dtype != "f16":
        raise TypeError("the FA-1 kernels take float16 inputs only (they follow the paper's f16 WMMA)")
    sc = check_scale(scale, d)
    if n % FA1_TILE:
        raise ValueError(f"N = {n} must be a multiple of {FA1_TILE} for the FA-1 kernels (one "
                         "16x16 WMMA tile per step, no masking); the FA-2 kernel (fa2) takes any N")
    if out is None:
        out = launch.poisoned(q.shape, np.float16)
    else:
        launch.check_array("out", out, dtype=np.float16, shape=q.shape)
    if softmax_source is None:
        fn = launch.get_kernel(KERNELS_FA1, fa1_kernel(variant, d))
    else:
        fn = launch.get_kernel(FA1_LAB_NAME, f"fa1_lab_d{d}", source=fa1_lab_source(softmax_source))
    smem = fa1_smem_bytes(d)
    args = (q, k, v, out, np.int32(n), np.float32(sc * LOG2E))
    grid = (n // FA1_TILE, b * h)
    return (lambda: launch.launch(fn, grid, 32, args, shared_mem=smem)), out


def fa1(q, k, v, variant: str = FINAL, *, scale: float | None = None,
        softmax_source: str | None = None):
    """FA-1 style attention (one warp per 16 query rows, 16x16 WMMA tiles, O in shared memory)
    with one of three softmax paths, its rungs :data:`VARIANTS`: ``'paper_baseline'``,
    ``'fair_baseline'`` or ``'inregister'`` (Alg. 4, :data:`FINAL`, the default). ``q``, ``k``,
    ``v``: float16 (B, H, N, d), d in 64/128/512, N a multiple of 16. Non-causal. Returns O (float16, same shape). With ``softmax_source`` (a CUDA
    string, see :func:`fa1_lab_source`) the in-register kernel runs with that softmax step."""
    run, out = fa1_launcher(q, k, v, variant, scale=scale, softmax_source=softmax_source)
    run()
    return out


# -------------------------------------------------------------------------------------------------
# FA-2
# -------------------------------------------------------------------------------------------------

def fa2_launcher(q, k, v, *, causal: bool = False, scale: float | None = None, warps: int = 4,
                 out=None):
    """Check the arguments of :func:`fa2`, allocate the (poisoned) output, and return
    ``(launch, out)`` (see :func:`fa1_launcher`)."""
    if isinstance(warps, bool) or not isinstance(warps, (int, np.integer)) or int(warps) not in FA2_WARPS:
        raise ValueError(f"warps must be one of {FA2_WARPS}, got {warps!r}")
    dtype, (b, h, n, d), sc = check_fa2_arguments(q, k, v, causal, scale)
    out = fa2_output(q, out)
    warps = int(warps)
    fn = launch.get_kernel(KERNELS_FA2, fa2_kernel(dtype, d, warps))
    smem = fa2_smem_bytes(d, warps)
    args = (q, k, v, out, np.int32(n), np.float32(sc * LOG2E), np.int32(bool(causal)))
    grid = (-(-n // (16 * warps)), b * h)
    return (lambda: launch.launch(fn, grid, 32 * warps, args, shared_mem=smem)), out


def fa2(q, k, v, *, causal: bool = False, scale: float | None = None, warps: int = 4):
    """FA-2 style attention: in-register online softmax, P reused from the accumulators as the A
    operand of P V, mma.sync.m16n8k16 through PTX, cp.async + ldmatrix on swizzled shared memory.
    ``q``, ``k``, ``v``: (B, H, N, d) float16, or uint16 holding bf16 (:func:`to_bf16`); d 64 or
    128; any N >= 1; ``causal`` masks keys after the query. ``warps`` per block: 4 (64 query
    rows) or 8 (128). Needs compute capability 8.0+. Returns O (same dtype and shape)."""
    run, out = fa2_launcher(q, k, v, causal=causal, scale=scale, warps=warps)
    run()
    return out
