"""The hardware's NaN rules: which bit pattern a floating-point instruction writes when its result
is NaN. The PTX ISA leaves NaN payloads unspecified; the interpreter reproduces what the H100
wrote in the differential record (``tests/data/ptx_differential.npz``, 2026-11-27), rule by rule:

1. f32 arithmetic (add, sub, mul, fma, mad, div, rcp, sqrt, rsqrt, ex2, lg2, ..., abs, neg, and
   min/max when both inputs are NaN or with .NaN) gives the canonical NaN 0x7FFFFFFF, whatever
   the input NaNs were (:func:`canon32`; as the CUDA Programming Guide's "Floating-Point
   Standard" section states for single precision).
2. f16 and bf16 results, scalar and in each half of x2, are 0x7FFF; abs and neg too (with and
   without .ftz): e.g. abs.f16 0x7E05 -> 0x7FFF, neg.bf16x2 0x7FC08000 -> 0x7FFF0000
   (:func:`canon16`, :func:`canon16_bits`).
3. f64 arithmetic propagates an input NaN, quieted (bit 51 set) with its sign and payload
   unchanged (:func:`propagate64`): add 0x7FF8000000000000 + 0x7FF0000000000001 ->
   0x7FF8000000000001. Of several NaN inputs the first in :data:`F64_ORDER` wins: the second
   source of add, sub, mul, min and max (so (qNaN, sNaN) gives the sNaN, quieted); b, then c,
   then a for fma and mad (fma(0, -inf, 0x7FF8000000000005) -> 0x7FF8000000000005, not an
   invalid-operation NaN: the NaN addend wins over 0 * inf); a, then b for div (a software
   sequence); the operand of rcp and sqrt. sub and neg leave the NaN's sign alone (the CUDA
   Programming Guide says f64 abs and neg pass NaNs through unchanged; the H100 quiets them):
   neg.f64 0x7FF8000000000000 -> 0x7FF8000000000000, abs.f64 0xFFF2000000000001 ->
   0xFFFA000000000001 (:func:`unary64`).
4. An f64 invalid operation without a NaN input (inf - inf, 0 * inf, 0 / 0, sqrt(-1)) gives
   0xFFF8000000000000 (:data:`DEFAULT64`).
5. The f64 approximations that work on the upper 32 bits (rcp.approx.ftz.f64,
   rsqrt.approx.ftz.f64) give 0x7FFFFFFF00000000 for a NaN (:data:`CANON64_HI`; PTX ISA
   9.7.3.14/17 "Input NaNs map to a canonical NaN with encoding 0x7fffffff00000000"); an input
   whose upper word is an infinity (0x7FF0000000000001) is an infinity to them, not a NaN.
"""
from __future__ import annotations

import numpy as np

CANON32 = np.array(0x7FFFFFFF, np.uint32).view(np.float32)
CANON16 = np.uint16(0x7FFF)
CANON64_HI = np.array(0x7FFFFFFF00000000, np.uint64).view(np.float64)
DEFAULT64 = np.array(0xFFF8000000000000, np.uint64).view(np.float64)
_QUIET64 = np.uint64(0x0008000000000000)

#: f64 opcode -> the order (source operand indices) in which input NaNs win (rule 3)
F64_ORDER = {"add": (1, 0), "sub": (1, 0), "mul": (1, 0), "min": (1, 0), "max": (1, 0),
             "fma": (1, 2, 0), "mad": (1, 2, 0), "div": (0, 1), "rcp": (0,), "sqrt": (0,),
             "rsqrt": (0,)}


def canon32(v):
    """Rule 1: NaN results of f32 arithmetic -> 0x7FFFFFFF."""
    nan = np.isnan(v)
    if nan.any():
        v = np.where(nan, CANON32, v)
    return v


def canon16(bits, v):
    """Rule 2: the 16-bit results `bits` of values `v` (float32/float64) -> 0x7FFF where v is NaN."""
    nan = np.isnan(v)
    return np.where(nan, CANON16, bits).astype(np.uint16) if nan.any() else bits


def is_nan16(h, t: str):
    """NaN test on raw 16-bit patterns (uint16) of type f16 or bf16 (or their x2 halves)."""
    top = np.uint16(0x7C00) if t.startswith("f16") else np.uint16(0x7F80)
    return (h & np.uint16(0x7FFF)) > top


def canon16_bits(h, result, t: str):
    """Rule 2 for bit operations (abs, neg) on raw 16-bit patterns: where the input `h` is a NaN
    the result is 0x7FFF."""
    nan = is_nan16(h, t)
    return np.where(nan, CANON16, result).astype(np.uint16) if nan.any() else result


def quiet64(x):
    """The f64 NaNs `x` with the quiet bit set (sign and payload kept)."""
    return (np.ascontiguousarray(x, np.float64).view(np.uint64) | _QUIET64).view(np.float64)


def propagate64(v, operands):
    """Rules 3 and 4: where the f64 result `v` is NaN, the first NaN of `operands` (given in the
    winning order), quieted, else the default NaN."""
    nan = np.isnan(v)
    if not nan.any():
        return v
    out = np.where(nan, DEFAULT64, v)
    for x in reversed(operands):                # the first in the order is applied last
        xn = np.isnan(x) & nan
        if xn.any():
            out = np.where(xn, quiet64(x), out)
    return out


def unary64(v, x):
    """Rule 3 for abs/neg.f64: a NaN input comes back quieted, its sign unchanged."""
    nan = np.isnan(x)
    return np.where(nan, quiet64(x), v) if nan.any() else v
