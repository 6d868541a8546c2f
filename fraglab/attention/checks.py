"""The argument checks of the course's attention kernels, one definition for chapters 05, 08, 09
and 10: q, k, v (:func:`check_qkv`), the score scale (:func:`check_scale`), the GPU
(:func:`require_fa2_gpu`), all three for an FA-2 style kernel (:func:`check_fa2_arguments`), and
its output (:func:`fa2_output`).

Tensors are ``(B, H, N, d)`` C-contiguous arrays (CuPy on a GPU, NumPy on the interpreter):
``float16``, or ``uint16`` holding bf16 bit patterns (CuPy has no bfloat16 dtype).
"""
from __future__ import annotations

import math

import numpy as np

from .. import device, launch
from .constants import FA2_HEAD_DIMS, MAX_BH, MAX_N


def check_scale(scale, d: int) -> float:
    """The score scale: ``scale`` checked (a finite float > 0), or 1/sqrt(d) when it is None."""
    if scale is None:
        return 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating, np.integer)):
        raise TypeError(f"scale must be a float, got {type(scale).__name__}")
    if not (math.isfinite(float(scale)) and float(scale) > 0):
        raise ValueError(f"scale must be finite and > 0, got {scale}")
    return float(scale)


def check_qkv(q, k, v, head_dims, align: int, why: str):
    """Common checks: dtype float16 (f16) or uint16 (bf16 bits), shape (B, H, N, d) equal for
    all three with d in ``head_dims``, contiguous, ``align``-byte aligned (``why``: the copy that
    needs it), sizes in range. Returns (dtype, (B, H, N, d))."""
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


def require_fa2_gpu(dtype: str) -> None:
    """Raise unless the target runs an FA-2 style kernel of ``dtype``: compute capability 8.0 or
    newer (cp.async, ldmatrix, mma.sync with f32 accumulators), and bf16 where it is asked for."""
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


def check_fa2_arguments(q, k, v, causal, scale, head_dims=FA2_HEAD_DIMS):
    """The argument checks of chapter 05's ``fa2`` and of every kernel built like it (chapters 09
    and 10): ``causal`` a bool, q/k/v (B, H, N, d) float16 or bf16 bits with d in ``head_dims``
    (:data:`FA2_HEAD_DIMS`; chapter 10's kernels pass theirs), 16-byte aligned, the scale, and a
    GPU (or interpreter target) that runs mma.sync with f32 accumulators. Returns
    ``(dtype, (B, H, N, d), scale)``."""
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    dtype, shape = check_qkv(q, k, v, tuple(head_dims), 16, "cp.async copies 16 bytes")
    sc = check_scale(scale, shape[3])
    require_fa2_gpu(dtype)
    return dtype, shape, sc


def fa2_output(q, out=None, why: str = "the epilogue stores 16 bytes"):
    """The output of an FA-2 style kernel for ``q``: a new poisoned array, or ``out`` checked
    (dtype and shape of ``q``; 16-byte aligned, for the epilogue's stores: ``why``)."""
    if out is None:
        return launch.poisoned(q.shape, q.dtype)
    launch.check_array("out", out, dtype=q.dtype, shape=q.shape)
    launch.check_aligned("out", out, 16, why)
    return out
