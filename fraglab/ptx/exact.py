"""Exact float arithmetic for correctly rounded results.

f32/f16 targets: error-free sums and products in float64 and rounding of an exact value
``s + e`` (a float64 pair) in any PTX rounding mode. f64 targets (:func:`exact64`): the exact
rational value in Python integers (``m * 2^e`` per operand), rounded once to float64 in the
requested mode, subnormal results and overflow included (f64 fma in every mode, and the directed
modes of add, sub, mul, div, rcp and sqrt; NumPy is correctly rounded for the others). Python
integers per element (about 10 us each): f64 arithmetic is rare in the course's kernels."""
from __future__ import annotations

import math

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


_LOW28 = np.int64((1 << 28) - 1)


def _no_midpoint(s, r) -> bool:
    """No element of the finite float64 array s lies halfway between two neighbours (r its
    nearest) of a narrower format (f32, f16, bf16), where the error term would decide a tie:
    such a midpoint is not a value of the format, and it is a multiple of half the format's
    spacing, so its low 28 significand bits are zero. (C-ordered arrays only: then ``r`` is the
    same array the full rounding returns, and the full rounding would warn of nothing more.)"""
    if not (isinstance(s, np.ndarray) and s.ndim > 0 and s.flags.c_contiguous and s.dtype == F64):
        return False
    mid = (s.view(np.int64) & _LOW28) == 0
    if mid.any():
        mid &= r.astype(F64) != s
    return not mid.any() and np.isfinite(s).all()


def round_pair(s, e, dt, mode: str = "rn"):
    """Round the exact value s + e (|e| below half an ulp of s in float64) to dtype ``dt``."""
    dt = np.dtype(dt)
    if dt == np.float64:
        if mode == "rn":
            return s + e
        r = s
    else:
        r = s.astype(dt)
        if mode == "rn" and _no_midpoint(s, r):
            return r
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
    """Correctly rounded a * b + c (float64: :func:`exact64`)."""
    a, b, c = (np.asarray(x, F64) for x in (a, b, c))
    if np.dtype(dt) == np.float64:
        return exact64("fma", (a, b, c), mode)
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
    if np.dtype(dt) == np.float64 and mode != "rn":
        return exact64("add", (a, b), mode)
    s, e = two_sum(a, b)
    return _zero_sign(round_pair(s, e, dt, mode), s, e, a, b, mode)


def mul(a, b, dt, mode="rn"):
    a, b = np.asarray(a, F64), np.asarray(b, F64)
    if np.dtype(dt) == np.float64:
        return (a * b) if mode == "rn" else exact64("mul", (a, b), mode)
    return round_pair(a * b, np.zeros_like(a), dt, mode)


def div(a, b, dt, mode="rn"):
    """a / b correctly rounded to float64 (directed modes exact; float64 division is correctly
    rounded for .rn)."""
    a, b = np.asarray(a, F64), np.asarray(b, F64)
    with np.errstate(all="ignore"):
        return (a / b) if mode == "rn" else exact64("div", (a, b), mode)


def fma_round_odd32(a, b, c):
    """a * b + c rounded to float32 with round-to-odd: a later round-to-nearest to a narrower
    format (bf16) then equals rounding the exact value directly."""
    a, b, c = (np.asarray(x, F64) for x in (a, b, c))
    s, e = two_sum(a * b, c)
    r = round_pair(s, e, np.float32, "rz")
    inexact = ((r.astype(F64) != s) | (e != 0)) & np.isfinite(s)
    bits = np.ascontiguousarray(r).view(np.uint32) | inexact.astype(np.uint32)
    return bits.view(np.float32)


# ---- f64: exact values in Python integers --------------------------------------------------------

_MAX64 = float(np.finfo(np.float64).max)


def _parts(x: float):
    """Finite x -> (negative, m, e) with |x| = m * 2^e exactly (m a Python int)."""
    f, e = math.frexp(abs(x))
    return math.copysign(1.0, x) < 0, int(f * 9007199254740992.0), e - 53     # f * 2^53


def round_exact(neg: bool, n: int, d: int, e: int, mode: str) -> float:
    """The float64 nearest (in PTX rounding `mode`) to (-1)^neg * n / d * 2^e, n >= 0, d > 0:
    one rounding of the exact value, with subnormal results and overflow (inf, or the largest
    finite value when rounding toward zero)."""
    if n == 0:
        return -0.0 if neg else 0.0
    big = n.bit_length() - d.bit_length()                 # n / d in [2^(big-1), 2^(big+1))
    if (n << max(0, -big)) < (d << max(0, big)):
        big -= 1                                          # now 2^big <= n / d < 2^(big+1)
    q_exp = max(big + e - 52, -1074)                      # the result's quantum: 53 bits or subnormal
    s = e - q_exp
    num, den = (n << s, d) if s >= 0 else (n, d << -s)
    q, r = divmod(num, den)                               # |value| / 2^q_exp = q + r / den
    if r:
        if mode in ("rn", "rni"):
            q += 2 * r > den or (2 * r == den and q & 1)
        elif mode in ("rp", "rpi"):
            q += not neg
        elif mode in ("rm", "rmi"):
            q += neg
    try:
        v = math.ldexp(q, q_exp)
    except OverflowError:
        away = mode in ("rn", "rni") or (mode in ("rp", "rpi") and not neg) or (mode in ("rm", "rmi") and neg)
        v = math.inf if away else _MAX64
    return -v if neg else v


def _sum(neg1, m1, e1, neg2, m2, e2, mode, zero_signs):
    """(-1)^neg1 m1 2^e1 + (-1)^neg2 m2 2^e2 rounded; an exact zero is -0 when both terms are
    negative zeros or (rounding toward -inf) either is negative (IEEE 754 6.3)."""
    e = min(e1, e2)
    n = (-m1 if neg1 else m1) * (1 << (e1 - e)) + (-m2 if neg2 else m2) * (1 << (e2 - e))
    if n == 0:
        s1, s2 = zero_signs
        return -0.0 if (s1 and s2) or (mode in ("rm", "rmi") and (s1 or s2)) else 0.0
    return round_exact(n < 0, abs(n), 1, e, mode)


def _exact_one(kind: str, xs, mode: str) -> float:
    """One element of :func:`exact64` (finite operands)."""
    p = [_parts(x) for x in xs]
    if kind == "add":
        (na, ma, ea), (nb, mb, eb) = p
        return _sum(na, ma, ea, nb, mb, eb, mode, (na, nb))
    if kind == "mul":
        (na, ma, ea), (nb, mb, eb) = p
        return round_exact(na != nb, ma * mb, 1, ea + eb, mode)
    if kind == "fma":
        (na, ma, ea), (nb, mb, eb), (nc, mc, ec) = p
        return _sum(na != nb, ma * mb, ea + eb, nc, mc, ec, mode, (na != nb, nc))
    if kind == "div":
        (na, ma, ea), (nb, mb, eb) = p
        return round_exact(na != nb, ma, mb, ea - eb, mode)
    if kind == "rcp":
        (na, ma, ea), = p
        return round_exact(na, 1, ma, -ea, mode)
    if kind == "sqrt":                                    # x > 0
        (_, m, e), = p
        if e & 1:
            m, e = m << 1, e - 1
        k = max(0, 58 - m.bit_length() // 2)              # a root of at least 57 bits
        q = math.isqrt(m << (2 * k))
        if q * q == m << (2 * k):
            return round_exact(False, q, 1, e // 2 - k, mode)
        # inexact: q < root < q + 1; q + 1/2 rounds the same way (every rounding boundary is a
        # multiple of 2^(bits - 54) >= 2 units of q)
        return round_exact(False, 2 * q + 1, 1, e // 2 - k - 1, mode)
    raise ValueError(kind)


def exact64(kind: str, args, mode: str):
    """f64 `kind` ('add', 'mul', 'fma', 'div', 'rcp', 'sqrt') of float64 arrays, correctly
    rounded in PTX `mode`: finite operands exactly (Python integers); infinities, NaN, a zero
    divisor and negative square roots as NumPy gives them (the caller applies the NaN rules)."""
    args = [np.asarray(a, F64) for a in args]
    with np.errstate(all="ignore"):
        a = args
        out = {"add": lambda: a[0] + a[1], "mul": lambda: a[0] * a[1],
               # a finite product (even one that overflows) plus an infinity is that infinity
               "fma": lambda: np.where(np.isfinite(a[0]) & np.isfinite(a[1]) & np.isinf(a[2]), a[2],
                                       a[0] * a[1] + a[2]),
               "div": lambda: a[0] / a[1],
               "rcp": lambda: 1.0 / a[0], "sqrt": lambda: np.sqrt(a[0])}[kind]()
    out = np.array(out, F64)
    ok = np.logical_and.reduce([np.isfinite(x) for x in args])
    if kind in ("div", "rcp"):
        ok &= args[-1] != 0
    elif kind == "sqrt":
        ok &= args[0] > 0
    for i in np.flatnonzero(ok.ravel()):
        out.flat[i] = _exact_one(kind, [float(x.flat[i]) for x in args], mode)
    return out
