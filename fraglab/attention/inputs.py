"""Attention inputs and outputs on the host: random q, k, v of a kernel's element type with their
exact float64 values (:func:`random_qkv`: random, or a peaky softmax with ``q_scale`` > 1), and a
kernel's output as float64 (:func:`as_float`).

Kernels take float16, or uint16 holding bf16 bit patterns (:func:`fraglab.dtypes.to_bf16`; CuPy
has no bfloat16 dtype).
"""
from __future__ import annotations

import numpy as np

from .. import launch
from ..dtypes import from_bf16, to_bf16
from .constants import DTYPES


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
