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
    lowest kept bit (so that ties go to even), then drop the low 16 bits. NaN stays NaN."""
    f = np.ascontiguousarray(x, dtype=np.float32)
    b = f.view(np.uint32).astype(np.uint64)
    bits = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(f), np.uint16(0x7FC0), bits).astype(np.uint16)


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
