"""Floating-point instructions: f32/f64 with .rn/.rz/.rm/.rp, .ftz, .sat; f16, bf16 and their
x2 packed forms; the approximate functions (ex2, lg2, rcp, sqrt, rsqrt, sin, cos, tanh).

Rounding: results are correctly rounded in every mode. .rn add/sub/mul use NumPy's float32
arithmetic; fma and the directed modes go through :mod:`.exact` (f32: error-free sums and
products in float64, then one rounding of the exact value; f64: the exact rational value in
Python integers, then one rounding: fma in every mode, the directed modes of add, sub, mul, div,
rcp, sqrt); f32 div/sqrt/rcp round a float64 result once, which is exact for them (a float64
quotient or root of f32 operands never lands on an f32 value or a midpoint unless it is one).

.ftz flushes subnormal inputs and results; a result is subnormal when its exact value is below
the smallest normal (tininess before rounding: mul.ftz.f32 0x00800000 * 0x3F7FFFFF -> +0, not
the 0x00800000 it rounds to; H100, 2026-11-27 differential record). NaN results follow
:mod:`.nan`. Approximate functions are computed in float64 and rounded, so they are well within
the PTX error bounds (ex2.approx.f32: 2 ulp + ftz; lg2.approx.f32: 2^-22.6 absolute; rcp.approx:
1 ulp); div.approx.f32 and the upper-word f64 approximations follow the ISA's description.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from ..dtypes import from_bf16, to_bf16
from . import exact, nan
from .decode import DT, last_type, mods, unsupported
from .nan import CANON16, CANON32, canon32  # noqa: F401  (re-exported: ops_cvt, tests)
from .registry import handler

F32_MIN_NORMAL = np.float32(1.1754944e-38)
F64_MIN_NORMAL = np.float64(2.2250738585072014e-308)


def ftz(x):
    tiny = F32_MIN_NORMAL if x.dtype == np.float32 else F64_MIN_NORMAL
    return np.where(np.abs(x) < tiny, x * 0, x).astype(x.dtype)


#: The smallest normal magnitude of the 16-bit types (their .ftz flushes below it).
HALF_MIN_NORMAL = {"f16": np.float32(2.0 ** -14), "f16x2": np.float32(2.0 ** -14),
                   "bf16": F32_MIN_NORMAL, "bf16x2": F32_MIN_NORMAL}


def ftz_half(x, t):
    """.ftz on f16/bf16 values held as float32: subnormals of the 16-bit type become a zero of
    the same sign."""
    return np.where(np.abs(x) < HALF_MIN_NORMAL[t], x * 0, x).astype(np.float32)


def sat(x):
    """.sat: clamp to [+0, 1]; NaN and -0 give +0 (as the GPU does)."""
    return np.where(x > 0, np.minimum(x, 1), 0).astype(x.dtype)


def round_to(x64, dt, mode: str):
    """float64 values -> dtype (float32/float64/float16) with PTX rounding `mode`."""
    r = x64.astype(dt)
    if mode in ("rn", "rni", None) or dt == np.float64:
        return r
    back = r.astype(np.float64)
    if mode in ("rz", "rzi"):
        fix = np.abs(back) > np.abs(x64)
        r = np.where(fix, np.nextafter(r, np.zeros_like(r)), r)
    elif mode in ("rm", "rmi"):
        r = np.where(back > x64, np.nextafter(r, np.full_like(r, -np.inf)), r)
    elif mode in ("rp", "rpi"):
        r = np.where(back < x64, np.nextafter(r, np.full_like(r, np.inf)), r)
    return r.astype(dt)


def rounding(ins):
    for r in ("rn", "rz", "rm", "rp"):
        if r in mods(ins):
            return r
    return "rn"


# ---- packing of 16-bit float types -----------------------------------------------------------

def unpack(t):
    """(PTX type) -> (read type, fn(raw) -> float32 array of shape (32,) or (32, 2))."""
    if t == "f16":
        return "b16", lambda r: r.view(np.float16).astype(np.float32)
    if t == "bf16":
        return "b16", lambda r: from_bf16(r)
    if t == "f16x2":
        return "b32", lambda r: np.ascontiguousarray(r).view(np.float16).reshape(32, 2).astype(np.float32)
    if t == "bf16x2":
        return "b32", lambda r: from_bf16(np.ascontiguousarray(r).view(np.uint16).reshape(32, 2))
    raise KeyError(t)


def pack(t):
    """fn(float32 or float64 values) -> raw bits for the 16-bit float type (round to nearest;
    NaN -> 0x7FFF, as the GPU gives)."""
    if t in ("f16", "f16x2"):
        f = lambda v: nan.canon16(v.astype(np.float16).view(np.uint16), v)  # noqa: E731
    else:
        f = lambda v: nan.canon16(to_bf16(v.astype(np.float32)).reshape(v.shape), v)  # noqa: E731
    if t.endswith("x2"):
        return lambda v: np.ascontiguousarray(f(v)).view(np.uint32).reshape(32)
    return f


def _tiny_pair(s, e, mn):
    """The exact value s + e (a float64 pair, |e| below half an ulp of s) is below `mn` in
    magnitude (tininess before rounding)."""
    a = np.abs(s)
    return (a < mn) | ((a == mn) & (e * s < 0))


def _tiny_mul(mn):
    return lambda a, b: np.abs(a.astype(np.float64) * b) < mn    # exact: f32 products fit f64


def _tiny_fma(mn):
    def tiny(a, b, c):
        s, e = exact.two_sum(a.astype(np.float64) * b, c.astype(np.float64))  # exact product
        return _tiny_pair(s, e, mn)
    return tiny


def _half_op(ins, dc, t, fn, n, tiny=None):
    """A 16-bit float op: fn on float32 values (exact, or rounded once by pack()); with .ftz,
    subnormal inputs and results become signed zeros, `tiny(*args)` telling which exact results
    are below the smallest normal (mul and fma; add/sub results that small are exact)."""
    rt, up = unpack(t)
    pk = pack(t)
    rds = [dc.reader(o, rt, ins) for o in ins.operands[1:1 + n]]
    wr = dc.writer(ins.operands[0], rt, ins)
    s = "sat" in mods(ins)
    fz = "ftz" in mods(ins)

    def f(w, m):
        args = [up(r(w)) for r in rds]
        if fz:
            args = [ftz_half(x, t) for x in args]
        v = fn(*args)
        if s:
            v = sat(v)
        if fz:
            v = ftz_half(up(pk(v)), t)
            if tiny is not None:
                v = np.where(tiny(*args), v * 0, v)
        wr(w, pk(v), m)
    return f


def _float_op(ins, dc, t, fn64, fn_native=None, n=2, fn_exact=None, tiny=None):
    """An f32/f64 op: fn_native on the native type for .rn; else fn_exact(*args, dtype, mode)
    (correctly rounded) or fn64 in float64 + rounding. .ftz (f32): `tiny(*args)` marks the
    exact results below the smallest normal, flushed even where they round up to it. NaN
    results follow :mod:`.nan` (f32 canonical, f64 propagated in the hardware's order)."""
    md = mods(ins)
    dt = DT[t]
    rnd = rounding(ins)
    fz = "ftz" in md and t == "f32"
    st = "sat" in md
    is32 = t == "f32"
    fixed = "NaN" in md            # min/max.NaN: "the result is canonical NaN" (PTX ISA)
    order = nan.F64_ORDER.get(ins.base, tuple(range(n))) if t == "f64" else None
    rds = [dc.reader(o, t, ins) for o in ins.operands[1:1 + n]]
    wr = dc.writer(ins.operands[0], t, ins)

    def f(w, m):
        args = [r(w) for r in rds]
        if fz:
            args = [ftz(a) for a in args]
        if fn_native is not None and rnd == "rn":
            v = fn_native(*args).astype(dt)
        elif fn_exact is not None:
            v = fn_exact(*args, dt, rnd)
        else:
            v = round_to(fn64(*[a.astype(np.float64) for a in args]), dt, rnd)
        if fz:
            v = ftz(v)
            if tiny is not None:
                v = np.where(tiny(*args), v * 0, v)
        if st:
            v = sat(v)
        if is32:
            v = canon32(v, fixed)
        elif order is not None:
            v = nan.propagate64(v, [args[i] for i in order])
        wr(w, v, m)
    return f


_ARITH = {"add": np.add, "sub": np.subtract, "mul": np.multiply}
_EXACT = {"add": exact.add, "sub": lambda a, b, dt, mode: exact.add(a, -b, dt, mode),
          "mul": exact.mul}


def arith(ins, dc, t):
    fn = _ARITH[ins.base]
    if t in ("f16", "bf16", "f16x2", "bf16x2"):
        tiny = _tiny_mul(HALF_MIN_NORMAL[t]) if ins.base == "mul" else None
        return _half_op(ins, dc, t, fn, 2, tiny)
    tiny = _tiny_mul(F32_MIN_NORMAL) if ins.base == "mul" else None
    return _float_op(ins, dc, t, fn, fn, fn_exact=_EXACT[ins.base], tiny=tiny)


def _fma64(a, b, c):
    return a * b + c


def fma(ins, dc, t):
    """Fused multiply-add, correctly rounded (exact product, error-free sum, one rounding; f64
    in exact integers)."""
    relu = "relu" in mods(ins)
    if t in ("f16", "f16x2"):
        def f16fma(a, b, c):
            r = exact.fma(a, b, c, np.float16).astype(np.float32)
            return np.where(np.isnan(r), r, np.maximum(r, 0)) if relu else r
        return _half_op(ins, dc, t, f16fma, 3, _tiny_fma(HALF_MIN_NORMAL[t]))
    if t in ("bf16", "bf16x2"):
        def bffma(a, b, c):         # round-to-odd f32, then pack() rounds to bf16 exactly once
            r = exact.fma_round_odd32(a, b, c)
            return np.where(np.isnan(r), r, np.maximum(r, 0)) if relu else r
        return _half_op(ins, dc, t, bffma, 3, _tiny_fma(HALF_MIN_NORMAL[t]))
    return _float_op(ins, dc, t, _fma64, None, 3, fn_exact=exact.fma, tiny=_tiny_fma(F32_MIN_NORMAL))


@handler("fma")
def h_fma(ins, dc):
    return fma(ins, dc, last_type(ins))


_TWO126 = np.float32(2.0 ** 126)


def _div_approx(a, b):
    """div.approx.f32 (9.7.3.8): a * (1 / b). For |b| in [2^-126, 2^126] within 2 ulp (here the
    correctly rounded quotient); for 2^126 < |b| < 2^128 the reciprocal is flushed to zero: a
    sign-preserving zero, NaN when a is infinite (H100: inf / 0x7F7FFFFF -> 0x7FFFFFFF)."""
    q = np.divide(a, b)
    big = (np.abs(b) > _TWO126) & np.isfinite(b)
    if big.any():
        q = np.where(big, a * np.copysign(np.float32(0), b), q)
    return q


def div(ins, dc, t):
    if t == "f32" and "approx" in mods(ins):
        return _float_op(ins, dc, t, None, _div_approx, tiny=None)
    if t == "f32":
        tiny = lambda a, b: np.abs(a.astype(np.float64) / b) < F32_MIN_NORMAL  # noqa: E731
        return _float_op(ins, dc, t, np.divide, np.divide, tiny=tiny)
    return _float_op(ins, dc, t, np.divide, np.divide, fn_exact=exact.div)


def _max(a, b, nan_wins=False):
    """max with -0 < +0 (PTX ISA 9.7.3.12, 9.7.4.8: "-0.0 < +0.0 here"; the H100 agrees in every
    float type, .NaN and x2 lanes: max(+0, -0) = max(-0, +0) = +0); a NaN loses unless
    `nan_wins` (.NaN)."""
    r = (np.maximum if nan_wins else np.fmax)(a, b)
    if np.count_nonzero(r) != r.size:                      # (the cheapest test for a zero)
        r = np.where((a == 0) & (b == 0), a + b, r)        # +0 unless both are -0
    return r


def _min(a, b, nan_wins=False):
    """min with -0 < +0 (PTX ISA 9.7.3.11, 9.7.4.7): min(+0, -0) = min(-0, +0) = -0."""
    r = (np.minimum if nan_wins else np.fmin)(a, b)
    if np.count_nonzero(r) != r.size:
        r = np.where((a == 0) & (b == 0), -(-a - b), r)    # -0 unless both are +0
    return r


def minmax(ins, dc, t):
    if len(ins.operands) != 3:
        unsupported(ins, "three-input min/max")
    fn = partial(_max if ins.base == "max" else _min, nan_wins="NaN" in mods(ins))
    if t in ("f16", "bf16", "f16x2", "bf16x2"):
        return _half_op(ins, dc, t, fn, 2)
    return _float_op(ins, dc, t, fn, fn)


def unary_sign(ins, dc, t):
    fn = np.negative if ins.base == "neg" else np.abs
    if t in ("f16", "bf16", "f16x2", "bf16x2"):       # sign-bit operations on the raw halves
        rt = "b16" if t in ("f16", "bf16") else "b32"
        sign = np.uint16(0x8000)
        exp = np.uint16(0x7C00 if t.startswith("f16") else 0x7F80)
        neg = ins.base == "neg"
        fz = "ftz" in mods(ins)

        def op(x):
            h = np.ascontiguousarray(x).view(np.uint16)
            r = h
            if fz:                       # subnormal (exponent 0): keep only the sign
                r = np.where(r & exp, r, r & sign).astype(np.uint16)
            r = (r ^ sign) if neg else (r & ~sign)
            # a NaN gives 0x7FFF (H100, 2026-11-27 differential record: abs/neg.f16 0x7E05 -> 0x7FFF)
            return nan.canon16_bits(h, r, t).view(x.dtype).reshape(x.shape)
        a = dc.reader(ins.operands[1], rt, ins)
        wr = dc.writer(ins.operands[0], rt, ins)
        return lambda w, m: wr(w, op(a(w)), m)
    if t == "f64":                       # a NaN comes back quieted, its sign unchanged (nan.py)
        neg = ins.base == "neg"
        rd = dc.reader(ins.operands[1], t, ins)
        wr = dc.writer(ins.operands[0], t, ins)

        def f64op(w, m):
            x = rd(w)
            wr(w, nan.unary64(fn(x), x, neg), m)
        return f64op
    return _float_op(ins, dc, t, fn, fn, 1)


def fcompare(ins, cmp, t, fz):
    ordered = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
               "gt": np.greater, "ge": np.greater_equal}
    base = cmp[:-1] if cmp.endswith("u") and cmp[:-1] in ordered else cmp
    if t in ("f16", "bf16"):
        _, up = unpack(t)
        conv = (lambda x: ftz_half(up(x), t)) if (fz and t == "f16") else up
    elif t in ("f32", "f64"):
        conv = ftz if (fz and t == "f32") else (lambda x: x)
    else:
        unsupported(ins, f"comparison of .{t}")
    if cmp == "num":
        return lambda a, b: ~np.isnan(conv(a)) & ~np.isnan(conv(b))
    if cmp == "nan":
        return lambda a, b: np.isnan(conv(a)) | np.isnan(conv(b))
    if base not in ordered:
        unsupported(ins, f"comparison .{cmp}")
    f = ordered[base]
    unordered = base != cmp

    def c(a, b):
        a, b = conv(a), conv(b)
        nan = np.isnan(a) | np.isnan(b)
        r = f(a, b)
        return (r | nan) if unordered else (r & ~nan)
    return c


# ---- approximate and special functions ---------------------------------------------------------

_HI64 = np.uint64(0xFFFFFFFF00000000)


def _upper_word(ins, dc, fn64):
    """rcp.approx.ftz.f64 and rsqrt.approx.ftz.f64 (PTX ISA 9.7.3.14, 9.7.3.17): "tmp = a[63:32];
    d[63:32] = 1.0 / tmp (1.0 / sqrt(tmp)); d[31:0] = 0", a fast, gross approximation from the
    upper word of the operand (sign, exponent, 20 mantissa bits). Here the exact function of that
    upper word, truncated to its upper word. The ISA states no error bound; the H100's upper
    word is this one or the next one up (2026-11-27 differential record: 427 and 434 of 448
    elements identical, the others one unit above; a table-driven approximation, not
    reproducible bit for bit), and the comparison allows 2^-19 relative. Subnormal operands and
    results are flushed; NaN gives 0x7FFFFFFF00000000, and an operand whose upper word is an
    infinity (0x7FF0000000000001) is that infinity (:mod:`.nan` rule 5)."""
    a = dc.reader(ins.operands[1], "f64", ins)
    wr = dc.writer(ins.operands[0], "f64", ins)

    def f(w, m):
        x = np.ascontiguousarray(a(w), np.float64)
        hi = (x.view(np.uint64) & _HI64).view(np.float64)
        v = np.ascontiguousarray(ftz(fn64(ftz(hi))), np.float64)
        v = (v.view(np.uint64) & _HI64).view(np.float64)
        wr(w, np.where(np.isnan(v), nan.CANON64_HI, v), m)
    return f


def _special(ins, dc, fn64):
    t = last_type(ins)
    if t in ("f16", "bf16", "f16x2", "bf16x2"):
        return _half_op(ins, dc, t, lambda a: fn64(a.astype(np.float64)), 1)
    if t not in ("f32", "f64"):
        unsupported(ins)
    md = mods(ins)
    dt = DT[t]
    fz = "ftz" in md                 # f64 too: rcp/rsqrt.approx.ftz.f64
    rnd = rounding(ins)
    if t == "f64" and fz and ins.base in ("rcp", "rsqrt"):
        return _upper_word(ins, dc, fn64)
    exact64 = t == "f64" and rnd != "rn" and ins.base in ("rcp", "sqrt")
    # rcp.{rn,rz,rm,rp}.ftz.f32: 1/x is below the smallest normal exactly when |x| > 2^126
    tiny_rcp = t == "f32" and fz and ins.base == "rcp" and "approx" not in md
    a = dc.reader(ins.operands[1], t, ins)
    wr = dc.writer(ins.operands[0], t, ins)

    def f(w, m):
        x = a(w)
        if fz:
            x = ftz(x)
        if exact64:
            v = exact.exact64(ins.base, [x], rnd)
        else:
            v = round_to(fn64(x.astype(np.float64)), dt, rnd)
        if fz:
            v = ftz(v)
            if tiny_rcp:
                v = np.where((np.abs(x) > _TWO126) & np.isfinite(x), v * 0, v)
        if t == "f32":
            v = canon32(v)
        else:
            v = nan.propagate64(v, [x])
        wr(w, v, m)
    return f


#: The approximate functions, each computed in float64 by :func:`_special` and rounded once.
SPECIAL_FUNCTIONS = {"ex2": np.exp2, "lg2": np.log2, "rcp": lambda x: 1.0 / x, "sqrt": np.sqrt,
                     "rsqrt": lambda x: 1.0 / np.sqrt(x), "sin": np.sin, "cos": np.cos,
                     "tanh": np.tanh}


for _name, _fn64 in SPECIAL_FUNCTIONS.items():
    handler(_name)(partial(_special, fn64=_fn64))


@handler("copysign")
def h_copysign(ins, dc):
    t = last_type(ins)
    a = dc.reader(ins.operands[1], t, ins)
    b = dc.reader(ins.operands[2], t, ins)
    wr = dc.writer(ins.operands[0], t, ins)
    return lambda w, m: wr(w, np.copysign(b(w), a(w)), m)


@handler("testp")
def h_testp(ins, dc):
    t = last_type(ins)
    op = mods(ins)[0]
    tiny = F32_MIN_NORMAL if t == "f32" else F64_MIN_NORMAL
    fns = {"finite": np.isfinite, "infinite": np.isinf, "number": lambda x: ~np.isnan(x),
           "notanumber": np.isnan,
           # PTX ISA 9.7.3.1: "positive and negative zero are considered normal numbers" (H100 too)
           "normal": lambda x: np.isfinite(x) & ((np.abs(x) >= tiny) | (x == 0)),
           "subnormal": lambda x: (x != 0) & (np.abs(x) < tiny)}
    if op not in fns:
        unsupported(ins)
    a = dc.reader(ins.operands[1], t, ins)
    wr = dc.writer(ins.operands[0], "pred", ins)
    f = fns[op]
    return lambda w, m: wr(w, f(a(w)), m)
