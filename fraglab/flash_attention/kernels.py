"""Wrappers of ``kernels/05_flash_attention_fa1.cu`` (:func:`fa1`) and
``kernels/05_flash_attention_fa2.cu`` (:func:`fa2`): kernel names, shared-memory sizes, argument
checks, launchers for :mod:`fraglab.bench`, and the helpers that make and read their tensors.

Tensors are ``(B, H, N, d)`` C-contiguous CuPy arrays: ``float16``, or ``uint16`` holding bf16
bit patterns (:func:`fraglab.dtypes.to_bf16`; CuPy has no bfloat16 dtype). Every argument is
checked before a launch.
"""
from __future__ import annotations

import math

import numpy as np

from .. import device, launch
from ..dtypes import from_bf16, to_bf16
from .constants import (DTYPES, FA1_HEAD_DIMS, FA1_TILE, FA1_VARIANTS, FA2_BN, FA2_HEAD_DIMS,
                        FA2_WARPS, KERNELS_FA1, KERNELS_FA2, LOG2E, MAX_BH, MAX_N)
from .lab import FA1_LAB_NAME, fa1_lab_source


def fa1_kernel(variant: str, d: int) -> str:
    """Kernel name in ``kernels/05_flash_attention_fa1.cu``."""
    launch.check_choice("variant", variant, FA1_VARIANTS)
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


def attention_flops(b: int, h: int, n: int, d: int, causal: bool = False) -> float:
    """4 B H N^2 d (two matrix products of 2 N^2 d each per head), halved when causal."""
    f = 4.0 * b * h * n * n * d
    return f / 2 if causal else f


# -------------------------------------------------------------------------------------------------
# Argument checks
# -------------------------------------------------------------------------------------------------

def _check_scale(scale, d: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating, np.integer)):
        raise TypeError(f"scale must be a float, got {type(scale).__name__}")
    if not (math.isfinite(float(scale)) and float(scale) > 0):
        raise ValueError(f"scale must be finite and > 0, got {scale}")
    return float(scale)


def _check_qkv(q, k, v, head_dims, align: int, why: str):
    """Common checks: dtype float16 (f16) or uint16 (bf16 bits), shape (B, H, N, d) equal for
    all three, contiguous, aligned, sizes in range. Returns (dtype, (B, H, N, d))."""
    launch.check_array("q", q, dtype=(np.float16, np.uint16), ndim=4)
    launch.check_array("k", k, dtype=q.dtype, shape=q.shape)
    launch.check_array("v", v, dtype=q.dtype, shape=q.shape)
    b, h, n, d = (int(s) for s in q.shape)
    if d not in head_dims:
        raise ValueError(f"head dimension d = {d} is not supported; these kernels are compiled "
                         f"for d in {head_dims}")
    if b < 1 or h < 1 or n < 1:
        raise ValueError(f"q must have B, H, N >= 1, got shape {q.shape}")
    if b * h > MAX_BH:
        raise ValueError(f"B * H = {b * h} must be at most {MAX_BH} (one grid row per head)")
    if n > MAX_N:
        raise ValueError(f"N = {n} must be at most {MAX_N}")
    for name, a in (("q", q), ("k", k), ("v", v)):
        launch.check_aligned(name, a, align, why)
    return ("f16" if q.dtype == np.float16 else "bf16"), (b, h, n, d)


def _require_fa2_gpu(dtype: str) -> None:
    major, minor = device.target_cc()
    if (major, minor) < (8, 0):
        raise RuntimeError(
            f"the FA-2 kernel needs compute capability 8.0 or newer (cp.async, ldmatrix and "
            f"mma.sync.m16n8k16 with f32 accumulators); this GPU is {major}.{minor}. The FA-1 "
            "kernels (fa1) run on 7.5.")
    if dtype == "bf16":
        ok, why = device.supports("bf16", (major, minor))
        if not ok:
            raise RuntimeError(why)


#: Public homes of the checks above, for the topics that vary the FA-2 kernel (chapter 08 on):
#: the same argument checks as :func:`fa2`, one definition.
check_qkv = _check_qkv
check_scale = _check_scale
require_fa2_gpu = _require_fa2_gpu

def check_fa2_arguments(q, k, v, causal, scale):
    """The argument checks of :func:`fa2` (and of every kernel built like it, chapter 09's
    ladder): ``causal`` a bool, q/k/v (B, H, N, d) float16 or bf16 bits with d 64 or 128,
    16-byte aligned, the scale, and a GPU (or interpreter target) that runs mma.sync with f32
    accumulators. Returns ``(dtype, (B, H, N, d), scale)``."""
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    dtype, shape = _check_qkv(q, k, v, FA2_HEAD_DIMS, 16, "cp.async copies 16 bytes")
    sc = _check_scale(scale, shape[3])
    _require_fa2_gpu(dtype)
    return dtype, shape, sc


# -------------------------------------------------------------------------------------------------
# FA-1
# -------------------------------------------------------------------------------------------------

def fa2_output(q, out=None):
    """The output of an FA-2 style kernel for ``q``: a new poisoned array, or ``out`` checked
    (dtype and shape of ``q``; 16-byte aligned, for the epilogue's 16-byte stores)."""
    if out is None:
        return launch.poisoned(q.shape, q.dtype)
    launch.check_array("out", out, dtype=q.dtype, shape=q.shape)
    launch.check_aligned("out", out, 16, "the epilogue stores 16 bytes")
    return out


def fa1_launcher(q, k, v, variant: str = "inregister", *, scale: float | None = None, out=None,
                 softmax_source: str | None = None):
    """Check the arguments of :func:`fa1`, allocate the (poisoned) output, and return
    ``(launch, out)``: ``launch()`` runs the kernel once on the current stream (for
    :mod:`fraglab.bench`). ``softmax_source``: see :func:`fa1_lab_source` (in-register
    variant only)."""
    launch.check_choice("variant", variant, FA1_VARIANTS)
    if softmax_source is not None:
        if not isinstance(softmax_source, str):
            raise TypeError(f"softmax_source must be a str of CUDA code, got {type(softmax_source).__name__}")
        if variant != "inregister":
            raise ValueError("softmax_source replaces the in-register softmax step; it needs "
                             f"variant='inregister', got {variant!r}")
    dtype, (b, h, n, d) = _check_qkv(q, k, v, FA1_HEAD_DIMS, 32, "WMMA loads")
    if dtype != "f16":
        raise TypeError("the FA-1 kernels take float16 inputs only (they follow the paper's f16 WMMA)")
    sc = _check_scale(scale, d)
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


def fa1(q, k, v, variant: str = "inregister", *, scale: float | None = None,
        softmax_source: str | None = None):
    """FA-1 style attention (one warp per 16 query rows, 16x16 WMMA tiles, O in shared memory)
    with one of three softmax paths: ``'paper_baseline'``, ``'fair_baseline'`` or
    ``'inregister'`` (Alg. 4). ``q``, ``k``, ``v``: float16 (B, H, N, d), d in 64/128/512, N a
    multiple of 16. Non-causal. Returns O (float16, same shape). With ``softmax_source`` (a CUDA
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
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    if isinstance(warps, bool) or not isinstance(warps, (int, np.integer)) or int(warps) not in FA2_WARPS:
        raise ValueError(f"warps must be one of {FA2_WARPS}, got {warps!r}")
    dtype, (b, h, n, d) = _check_qkv(q, k, v, FA2_HEAD_DIMS, 16, "cp.async copies 16 bytes")
    sc = _check_scale(scale, d)
    _require_fa2_gpu(dtype)
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


# -------------------------------------------------------------------------------------------------
# Inputs and outputs
# -------------------------------------------------------------------------------------------------

def random_qkv(rng, shape, dtype: str = "f16", *, q_scale: float = 1.0):
    """Random (B, H, N, d) inputs as NumPy arrays of the kernel's dtype (float16, or uint16 bf16
    bits) and their exact float64 values. ``q_scale`` > 1 makes the softmax peaky."""
    vals = [rng.standard_normal(shape).astype(np.float32) for _ in range(3)]
    vals[0] *= np.float32(q_scale)
    if dtype == "f16":
        raw = [a.astype(np.float16) for a in vals]
        exact = [a.astype(np.float64) for a in raw]
    elif dtype == "bf16":
        raw = [to_bf16(a) for a in vals]
        exact = [from_bf16(a).astype(np.float64) for a in raw]
    else:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    return raw, exact


def as_float(out, dtype: str) -> np.ndarray:
    """A kernel's output (CuPy or NumPy, float16 or bf16 bits) as float64 NumPy."""
    a = np.asarray(launch.to_host(out))
    return (a.astype(np.float64) if dtype == "f16" else from_bf16(a).astype(np.float64))
