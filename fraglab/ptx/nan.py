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

These are the bits the H100 wrote in the per-instruction kernels; the PTX ISA does not promise
them (neg and abs.f32: "NaN inputs yield an unspecified NaN"; arithmetic and min/max of two NaNs:
"NaN"), and ptxas changes them with the context (``min.f32 d, x, x`` folded to ``x`` keeps the
payload, ``neg`` folded into a later operand keeps the sign of the input). :func:`open_bits` runs
code with those bits drawn at random instead (every lane, every instruction): what changes between
such runs depends on bits the ISA leaves open (:func:`fraglab.ptx.difftest.fuzz.open_words`).
"""
from __future__ import annotations

from contextlib import contextmanager

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


_OPEN = None        # None: the H100's patterns; a numpy Generator: open bits drawn (open_bits)


_FLIP = False


@contextmanager
def open_bits(seed: int, flip: bool = False):
    """Within the block, NaN results whose bits the PTX ISA leaves open are drawn from ``seed``
    instead of the H100's patterns: negative NaNs with random payloads, or with ``flip`` positive
    NaNs with the complements of the same payloads, so that every sign and payload bit takes
    both values in the two runs (whatever the pattern a third run gives, each bit differs from
    it in one of them)."""
    global _OPEN, _FLIP
    old, _OPEN, _FLIP = (_OPEN, _FLIP), np.random.default_rng(seed), flip
    try:
        yield
    finally:
        _OPEN, _FLIP = old


def _draw(shape, bits: int):
    """NaN bit patterns for :func:`open_bits` (quiet or signalling)."""
    n = int(np.prod(shape)) if shape else 1
    width = {32: 23, 64: 52, 16: 7}[bits]
    ut = {32: np.uint32, 64: np.uint64, 16: np.uint16}[bits]
    full = (1 << width) - 1
    pay = _OPEN.integers(1, full, n, dtype=np.uint64)             # neither 0 nor all ones
    if _FLIP:
        pay = pay ^ np.uint64(full)
    top = {32: 0xFF800000, 64: 0xFFF0000000000000, 16: 0xFF80}[bits]   # sign, exponent
    if _FLIP:
        top &= ~(1 << (bits - 1))
    out = (np.uint64(top) | pay).astype(ut).reshape(shape)        # 16 bits: 0x7F80 | x is a NaN
    return out.view({32: np.float32, 64: np.float64, 16: np.uint16}[bits])  # of f16 and bf16


def open_int(v, where):
    """Integer results the ISA gives no value for (``abs`` of the most negative value: its
    ``d = |a|`` does not fit the type; the GPU's IABS returns the input, and ptxas may assume the
    result is not negative, e.g. convert it to float as signed): ``v`` as it is, random at
    ``where`` under :func:`open_bits`."""
    if _OPEN is None or not np.any(where):
        return v
    u = np.dtype(f"u{v.dtype.itemsize}")
    r = _OPEN.integers(0, np.iinfo(u).max, np.shape(v), dtype=u, endpoint=True)
    if _FLIP:
        r = ~r
    return np.where(where, r.view(v.dtype), v)


def canon32(v, fixed: bool = False):
    """Rule 1: NaN results of f32 arithmetic -> 0x7FFFFFFF (random under :func:`open_bits` unless
    ``fixed``: results the ISA names as the canonical NaN)."""
    nan = np.isnan(v)
    if nan.any():
        v = np.where(nan, CANON32 if _OPEN is None or fixed else _draw(np.shape(v), 32), v)
    return v


def canon16(bits, v):
    """Rule 2: the 16-bit results `bits` of values `v` (float32/float64) -> 0x7FFF where v is NaN."""
    nan = np.isnan(v)
    if not nan.any():
        return bits
    return np.where(nan, CANON16 if _OPEN is None else _draw(np.shape(bits), 16), bits).astype(np.uint16)


def is_nan16(h, t: str):
    """NaN test on raw 16-bit patterns (uint16) of type f16 or bf16 (or their x2 halves)."""
    top = np.uint16(0x7C00) if t.startswith("f16") else np.uint16(0x7F80)
    return (h & np.uint16(0x7FFF)) > top


def canon16_bits(h, result, t: str):
    """Rule 2 for bit operations (abs, neg) on raw 16-bit patterns: where the input `h` is a NaN
    the result is 0x7FFF."""
    nan = is_nan16(h, t)
    if not nan.any():
        return result
    return np.where(nan, CANON16 if _OPEN is None else _draw(np.shape(result), 16), result).astype(np.uint16)


def quiet64(x):
    """The f64 NaNs `x` with the quiet bit set (sign and payload kept)."""
    return (np.ascontiguousarray(x, np.float64).view(np.uint64) | _QUIET64).view(np.float64)


def propagate64(v, operands):
    """Rules 3 and 4: where the f64 result `v` is NaN, the first NaN of `operands` (given in the
    winning order), quieted, else the default NaN."""
    nan = np.isnan(v)
    if not nan.any():
        return v
    if _OPEN is not None:
        return np.where(nan, _draw(np.shape(v), 64), v)
    out = np.where(nan, DEFAULT64, v)
    for x in reversed(operands):                # the first in the order is applied last
        xn = np.isnan(x) & nan
        if xn.any():
            out = np.where(xn, quiet64(x), out)
    return out


def unary64(v, x, neg: bool = False):
    """Rule 3 for abs/neg.f64: a NaN input comes back quieted, its sign unchanged (random for neg
    under :func:`open_bits`: "NaN inputs yield an unspecified NaN"; abs.f64 passes a NaN through)."""
    nan = np.isnan(x)
    if not nan.any():
        return v
    return np.where(nan, _draw(np.shape(v), 64) if neg and _OPEN is not None else quiet64(x), v)
