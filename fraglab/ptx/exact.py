"""Exact float arithmetic for correctly rounded results: error-free sums and products in float64
and rounding of an exact value ``s + e`` (a float64 pair) to float32/float16/float64 in any PTX
rounding mode. Used for fma and for the directed roundings, so they are bit exact."""
from __future__ import annotations

import numpy as np

F64 = np.float64
_SPLIT = F64(134217729.0)          # 2^27 + 1 (Veltkamp)


def two_sum(a, b):
    """s = fl(a + b) and e with a + b = s + e exactly (finite values)."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, np.where(np.isfinite(s), e, 0.0)


def two_prod(a, b):
    """p = fl(a * b) and e with a * b = p + e exactly (no overflow or underflow)."""
    p = a * b

    def split(x):
        c = _SPLIT * x
        hi = c - (c - x)
        return hi, x - hi
    ah, al = split(a)
    bh, bl = split(b)
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, np.where(np.isfinite(p), e, 0.0)


def round_pair(s, e, dt, mode: str = "rn"):
    """Round the exact value s + e (|e| below half an ulp of s in float64) to dtype ``dt``."""
    dt = np.dtype(dt)
    if dt == np.float64:
        if mode == "rn":
            return s + e
        r = s
    else:
        r = s.astype(dt)
    back = r.astype(F64)
    up, down = np.full_like(r, np.inf), np.full_like(r, -np.inf)
    if mode == "rn":
        if dt == np.float64:
            return r
        d = s - back
        nb = np.nextafter(r, np.where(d > 0, up, down))
        tie = (d != 0) & np.isfinite(back) & (2 * d == nb.astype(F64) - back)
        beyond = tie & (e != 0) & (np.sign(e) == np.sign(d))
        return np.where(beyond, nb, r).astype(dt)
    if dt != np.float64:                     # directed rounding of s itself
        if mode in ("rz", "rzi"):
            r = np.where(np.abs(back) > np.abs(s), np.nextafter(r, np.zeros_like(r)), r)
        elif mode in ("rm", "rmi"):
            r = np.where(back > s, np.nextafter(r, down), r)
        elif mode in ("rp", "rpi"):
            r = np.where(back < s, np.nextafter(r, up), r)
        back = r.astype(F64)
    exact = (back == s) & (e != 0)           # s representable: the error term decides
    if mode in ("rz", "rzi"):
        fix = exact & (np.sign(e) != np.sign(s)) & (s != 0)
        r = np.where(fix, np.nextafter(r, np.zeros_like(r)), r)
    elif mode in ("rm", "rmi"):
        r = np.where(exact & (e < 0), np.nextafter(r, down), r)
    elif mode in ("rp", "rpi"):
        r = np.where(exact & (e > 0), np.nextafter(r, up), r)
    return r.astype(dt)


def fma(a, b, c, dt, mode="rn"):
    """Correctly rounded a * b + c for float32/float16 inputs (float64 as close as a pair allows)."""
    a, b, c = (np.asarray(x, F64) for x in (a, b, c))
    if np.dtype(dt) == np.float64:
        p, pe = two_prod(a, b)
        s, e = two_sum(p, c)
        s, e2 = two_sum(s, e + pe)
        return round_pair(s, e2, dt, mode)
    p = a * b                                 # exact: at most 48 significant bits
    s, e = two_sum(p, c)
    return _zero_sign(round_pair(s, e, dt, mode), s, e, p, c, mode)


def _zero_sign(r, s, e, x, y, mode):
    """IEEE 754: an exactly zero sum (s + e == 0) is -0 when rounding toward -inf, unless both
    terms are +0. (A tiny result that rounds to zero keeps its own sign.)"""
    if mode not in ("rm", "rmi"):
        return r
    plus = (x == 0) & (y == 0) & ~np.signbit(x) & ~np.signbit(y)
    exact_zero = (s == 0) & (e == 0)
    return np.where(exact_zero & ~plus, -np.zeros_like(r), r).astype(r.dtype)


def add(a, b, dt, mode="rn"):
    a, b = np.asarray(a, F64), np.asarray(b, F64)
    s, e = two_sum(a, b)
    return _zero_sign(round_pair(s, e, dt, mode), s, e, a, b, mode)


def mul(a, b, dt, mode="rn"):
    a, b = np.asarray(a, F64), np.asarray(b, F64)
    if np.dtype(dt) == np.float64:
        p, e = two_prod(a, b)
        return round_pair(p, e, dt, mode)
    return round_pair(a * b, np.zeros_like(a), dt, mode)


def fma_round_odd32(a, b, c):
    """a * b + c rounded to float32 with round-to-odd: a later round-to-nearest to a narrower
    format (bf16) then equals rounding the exact value directly."""
    a, b, c = (np.asarray(x, F64) for x in (a, b, c))
    s, e = two_sum(a * b, c)
    r = round_pair(s, e, np.float32, "rz")
    inexact = ((r.astype(F64) != s) | (e != 0)) & np.isfinite(s)
    bits = np.ascontiguousarray(r).view(np.uint32) | inexact.astype(np.uint32)
    return bits.view(np.float32)
