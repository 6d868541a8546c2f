"""Floating-point instructions: f32/f64 with .rn/.rz/.rm/.rp, .ftz, .sat; f16, bf16 and their
x2 packed forms; the approximate functions (ex2, lg2, rcp, sqrt, rsqrt, sin, cos, tanh).

Rounding: results are correctly rounded in every mode. .rn add/sub/mul use NumPy's float32
arithmetic; fma and the directed modes go through :mod:`.exact` (error-free sums and products in
float64, then one rounding of the exact value); div/sqrt/rcp round a float64 result once, which is
innocuous for them. ``fma.f64`` is within a hair of correct rounding (a float64 pair).
Approximate functions are computed in float64 and rounded, so they are well within the PTX error
bounds (ex2.approx.f32: 2 ulp + ftz; lg2.approx.f32: 2^-22.6 absolute; rcp.approx: 1 ulp).
"""
from __future__ import annotations

from functools import partial

import numpy as np

from ..dtypes import from_bf16, to_bf16
from . import exact
from .decode import DT, last_type, mods, unsupported
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


def canon32(v):
    """NaN results of f32 arithmetic are the GPU's canonical NaN, 0x7FFFFFFF (checked on an
    H100: add, mul, fma, div, sqrt, rcp, ex2, min/max of two NaNs, neg, abs)."""
    nan = np.isnan(v)
    if nan.any():
        v = np.where(nan, CANON32, v)
    return v


CANON32 = np.array(0x7FFFFFFF, np.uint32).view(np.float32)
CANON16 = np.uint16(0x7FFF)             # f16 and bf16 results and conversions: 0x7FFF


def _nan16(bits, v):
    nan = np.isnan(v)
    return np.where(nan, CANON16, bits).astype(np.uint16) if nan.any() else bits


def pack(t):
    """fn(float32 or float64 values) -> raw bits for the 16-bit float type (round to nearest;
    NaN -> 0x7FFF, as the GPU gives)."""
    if t in ("f16", "f16x2"):
        f = lambda v: _nan16(v.astype(np.float16).view(np.uint16), v)  # noqa: E731
    else:
        f = lambda v: _nan16(to_bf16(v.astype(np.float32)).reshape(v.shape), v)  # noqa: E731
    if t.endswith("x2"):
        return lambda v: np.ascontiguousarray(f(v)).view(np.uint32).reshape(32)
    return f


def _half_op(ins, dc, t, fn, n, post=None):
    rt, up = unpack(t)
    pk = pack(t)
    rds = [dc.reader(o, rt, ins) for o in ins.operands[1:1 + n]]
    wr = dc.writer(ins.operands[0], rt, ins)
    s = "sat" in mods(ins)
    fz = "ftz" in mods(ins)          # subnormal inputs and (rounded) results -> signed zero

    def f(w, m):
        args = [up(r(w)) for r in rds]
        v = fn(*[ftz_half(x, t) for x in args] if fz else args)
        if s:
            v = sat(v)
        if fz:
            v = ftz_half(up(pk(v)), t)
        wr(w, pk(v), m)
    return f


def _float_op(ins, dc, t, fn64, fn_native=None, n=2, fn_exact=None):
    """An f32/f64 op: fn_native on the native type for .rn; else fn_exact(*args, dtype, mode)
    (correctly rounded) or fn64 in float64 + rounding."""
    md = mods(ins)
    dt = DT[t]
    rnd = rounding(ins)
    fz = "ftz" in md and t == "f32"
    st = "sat" in md
    is32 = t == "f32"
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
        if st:
            v = sat(v)
        if is32:
            v = canon32(v)
        wr(w, v, m)
    return f


_ARITH = {"add": np.add, "sub": np.subtract, "mul": np.multiply}
_EXACT = {"add": exact.add, "sub": lambda a, b, dt, mode: exact.add(a, -b, dt, mode),
          "mul": exact.mul}


def arith(ins, dc, t):
    fn = _ARITH[ins.base]
    if t in ("f16", "bf16", "f16x2", "bf16x2"):
        return _half_op(ins, dc, t, fn, 2)
    return _float_op(ins, dc, t, fn, fn, fn_exact=_EXACT[ins.base])


def _fma64(a, b, c):
    return a * b + c


def fma(ins, dc, t):
    """Fused multiply-add, correctly rounded (exact product, error-free sum, one rounding)."""
    if t in ("f16", "f16x2"):
        relu = "relu" in mods(ins)

        def f16fma(a, b, c):
            r = exact.fma(a, b, c, np.float16).astype(np.float32)
            return np.where(np.isnan(r), r, np.maximum(r, 0)) if relu else r
        return _half_op(ins, dc, t, f16fma, 3)
    if t in ("bf16", "bf16x2"):
        relu = "relu" in mods(ins)

        def bffma(a, b, c):         # round-to-odd f32, then pack() rounds to bf16 exactly once
            r = exact.fma_round_odd32(a, b, c)
            return np.where(np.isnan(r), r, np.maximum(r, 0)) if relu else r
        return _half_op(ins, dc, t, bffma, 3)
    return _float_op(ins, dc, t, _fma64, None, 3, fn_exact=exact.fma)


@handler("fma")
def h_fma(ins, dc):
    return fma(ins, dc, last_type(ins))


def div(ins, dc, t):
    return _float_op(ins, dc, t, np.divide, np.divide)


def minmax(ins, dc, t):
    if len(ins.operands) != 3:
        unsupported(ins, "three-input min/max")
    nan = "NaN" in mods(ins)
    if ins.base == "max":
        fn = np.maximum if nan else np.fmax
    else:
        fn = np.minimum if nan else np.fmin
    if t in ("f16", "bf16", "f16x2", "bf16x2"):
        return _half_op(ins, dc, t, fn, 2)
    return _float_op(ins, dc, t, fn, fn)


def unary_sign(ins, dc, t):
    fn = np.negative if ins.base == "neg" else np.abs
    if t in ("f16", "bf16", "f16x2", "bf16x2"):       # sign-bit operations, exact on NaN too
        rt = "b16" if t in ("f16", "bf16") else "b32"
        mask = np.uint16(0x8000) if rt == "b16" else np.uint32(0x80008000)
        op = (lambda x: x ^ mask) if ins.base == "neg" else (lambda x: x & ~mask)
        if "ftz" in mods(ins):           # f16 subnormal (exponent 0): keep only the sign
            sign = op

            def op(x):
                h = np.ascontiguousarray(x).view(np.uint16)
                h = np.where(h & np.uint16(0x7C00), h, h & np.uint16(0x8000)).astype(np.uint16)
                return sign(h.view(x.dtype))
        a = dc.reader(ins.operands[1], rt, ins)
        wr = dc.writer(ins.operands[0], rt, ins)
        return lambda w, m: wr(w, op(a(w)), m)
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
    a = dc.reader(ins.operands[1], t, ins)
    wr = dc.writer(ins.operands[0], t, ins)

    def f(w, m):
        x = a(w)
        if fz:
            x = ftz(x)
        v = round_to(fn64(x.astype(np.float64)), dt, rnd)
        if fz:
            v = ftz(v)
        if t == "f32":
            v = canon32(v)
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
           "normal": lambda x: np.isfinite(x) & (np.abs(x) >= tiny),
           "subnormal": lambda x: (x != 0) & (np.abs(x) < tiny)}
    if op not in fns:
        unsupported(ins)
    a = dc.reader(ins.operands[1], t, ins)
    wr = dc.writer(ins.operands[0], "pred", ins)
    f = fns[op]
    return lambda w, m: wr(w, f(a(w)), m)
