"""Reduced-precision formats NumPy lacks: bf16 and tf32, emulated bit for bit.

NumPy and CuPy have no bfloat16 dtype, so bf16 tiles travel as ``uint16`` bit patterns; tf32 is a
float32 with its 13 low significand bits cleared. Every topic rounds through these functions, so
the NumPy references round exactly as the GPU's conversion instructions do.
"""
from __future__ import annotations

import numpy as np


def to_bf16(x) -> np.ndarray:
    """float values -> bf16 bit patterns (uint16), rounded to nearest even, as
    ``__float2bfloat16_rn`` does. A bf16 is the top 16 bits of a float32: add 0x7FFF plus the
    lowest kept bit (so that ties go to even), then drop the low 16 bits. Every NaN becomes the
    canonical 0x7FFF, as the GPU's ``cvt.rn.bf16.f32`` gives (checked on an H100)."""
    f = np.ascontiguousarray(x, dtype=np.float32)
    b = f.view(np.uint32).astype(np.uint64)
    bits = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(f), np.uint16(0x7FFF), bits).astype(np.uint16)


def from_bf16(bits) -> np.ndarray:
    """bf16 bit patterns (uint16) -> float32 (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_bf16(x) -> np.ndarray:
    """float32 -> the nearest bf16 value (ties to even), returned as float32; NaN stays NaN."""
    f = np.asarray(x, dtype=np.float32)
    return np.where(np.isnan(f), f, from_bf16(to_bf16(f)).reshape(f.shape)).astype(np.float32)


def round_tf32(x) -> np.ndarray:
    """float32 -> tf32 as ``cvt.rna.tf32.f32`` does (nearest, ties away from zero): keep the top
    19 bits (sign, 8 exponent bits, 10 significand bits)."""
    f = np.asarray(x, dtype=np.float32)
    bits = f.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x1000) & 0xFFFFE000).astype(np.uint32)
    return np.where(np.isnan(f), f, rounded.view(np.float32)).astype(np.float32)


#: Range of each integer element type (the kernels' casts wrap to it).
INT_RANGES = {"s8": (-128, 127), "u8": (0, 255), "s32": (-2**31, 2**31 - 1)}

#: Every element type :func:`round_to` knows.
ROUNDABLE = ("f64", "f32", "tf32", "f16", "bf16", *INT_RANGES)


def round_to(x, dtype: str, result=np.float64) -> np.ndarray:
    """What the device's conversion of float ``x`` to element type ``dtype`` gives, returned as
    ``result`` (float64 by default; every f16/bf16/tf32 value is exact in float32 too).

    f16: ``__float2half_rn``; bf16: ``__float2bfloat16_rn``; tf32: ``cvt.rna``; f32: float32
    rounding; s8/u8/s32: round to the nearest integer and wrap to the type's width, as the
    kernels' casts do. The one rounding function of the course: every reference rounds here.
    """
    x = np.asarray(x, dtype=np.float64)
    if dtype == "f64":
        y = x
    elif dtype == "f32":
        y = x.astype(np.float32)
    elif dtype == "f16":
        y = x.astype(np.float32).astype(np.float16)
    elif dtype == "bf16":
        y = round_bf16(x.astype(np.float32))
    elif dtype == "tf32":
        y = round_tf32(x.astype(np.float32))
    elif dtype in INT_RANGES:
        lo, hi = INT_RANGES[dtype]
        y = (np.rint(x) - lo) % (hi - lo + 1) + lo
    else:
        raise ValueError(f"unknown element type {dtype!r}; known: {', '.join(ROUNDABLE)}")
    return np.asarray(y).astype(result)
