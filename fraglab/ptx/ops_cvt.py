"""Conversions: cvt (integer, float, f16, bf16, tf32, packed x2) and address conversions (cvta,
isspacep). f16 rounding is NumPy's (correct round-to-nearest-even); bf16 and tf32 use
:mod:`fraglab.dtypes`, the course's bit-exact emulation. NaN results and the .ftz cases where the
hardware departs from the ISA's text follow an H100 bit for bit (the differential record of
2026-11-27; each rule is commented where it is applied)."""
from __future__ import annotations

import numpy as np

from ..dtypes import round_tf32, to_bf16, from_bf16
from . import exact
from .decode import DT, mods, types_of, unsupported
from .registry import handler
from .memory import CONST_WINDOW, LOCAL_WINDOW, SHARED_WINDOW, WINDOW_SIZE
from .ops_float import canon32, ftz, round_to, sat

INT_TYPES = {"u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64", "b8", "b16", "b32", "b64"}
_ROUND_INT = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}


def _int_range(t):
    info = np.iinfo(DT[t])
    return info.min, info.max


def _sat_int(a, ddt):
    """Integers clamped to the range of ``ddt`` exactly (64-bit values too)."""
    src, dst, T = np.iinfo(a.dtype), np.iinfo(ddt), a.dtype.type
    if dst.min > src.min:
        a = np.where(a < T(dst.min), T(dst.min), a)
    if dst.max < src.max:
        a = np.where(a > T(dst.max), T(dst.max), a)
    return a.astype(ddt)


def _pair(x):
    """64-bit integers -> (hi, err) float64 with hi + err == x exactly."""
    hi = x.astype(np.float64)
    return hi, np.array([float(int(xi) - int(h)) for xi, h in zip(x.tolist(), hi.tolist())])


def _odd32(x):
    """float64 or integer values -> float32 rounded to odd (truncated, lowest bit set when
    inexact): rounding that to bf16 in any mode rounds the exact value once."""
    s, e = _pair(x) if x.dtype.itemsize == 8 and x.dtype.kind in "iu" else \
        (x.astype(np.float64), np.zeros(x.shape))
    r = exact.round_pair(s, e, np.float32, "rz")
    inexact = ((r.astype(np.float64) != s) | (e != 0)) & np.isfinite(s)
    return (np.ascontiguousarray(r).view(np.uint32) | inexact.astype(np.uint32)).view(np.float32)


def _to_bf16_mode(x32, mode):
    """float32 -> bf16 bits with rounding rn (ties to even), rz, rm or rp."""
    if mode == "rn":
        return np.where(np.isnan(x32), np.uint16(0x7FFF), to_bf16(x32).reshape(x32.shape)).astype(np.uint16)
    bits = np.ascontiguousarray(x32, np.float32).view(np.uint32)
    trunc = (bits >> 16).astype(np.uint16)
    inexact = (bits & 0xFFFF) != 0
    neg = (bits >> 31) == 1
    if mode == "rz":
        up = np.zeros_like(inexact)
    elif mode == "rm":
        up = inexact & neg
    elif mode == "rp":
        up = inexact & ~neg
    else:
        raise ValueError(mode)
    out = (trunc + up.astype(np.uint16)).astype(np.uint16)
    return np.where(np.isnan(x32), np.uint16(0x7FFF), out).astype(np.uint16)


def convert(ins, dt_t, at_t, mode, fz, st, relu=False):
    """fn(a) -> value of the destination type."""
    dfloat = dt_t in ("f16", "bf16", "f32", "f64", "tf32")
    afloat = at_t in ("f16", "bf16", "f32", "f64")
    ddt = DT[dt_t]
    if at_t == "bf16":
        up = lambda a: from_bf16(a)  # noqa: E731
    elif at_t == "f16":
        up = lambda a: a.astype(np.float32)  # noqa: E731
    else:
        up = lambda a: a  # noqa: E731
    if not dfloat and not afloat:                                 # int -> int
        if st:
            return lambda a: _sat_int(a, ddt)
        return lambda a: a.astype(ddt)
    if afloat and not dfloat:                                     # float -> int
        if mode not in _ROUND_INT:
            unsupported(ins, "float-to-integer cvt needs .rni/.rzi/.rmi/.rpi")
        rf = _ROUND_INT[mode]
        lo, hi = _int_range(dt_t)

        def f2i(a):
            x = up(a)
            if fz and x.dtype == np.float32:        # flush f32 subnormals (before widening)
                x = ftz(x)
            x = x.astype(np.float64)
            nan = np.isnan(x)
            r = np.where(nan, 0.0, rf(x))
            if dt_t.endswith("64"):                 # 2^63 and 2^64 are not int64/uint64 values
                top = 2.0 ** (64 if dt_t[0] == "u" else 63)
                inside = np.where(r >= top, 0.0, np.maximum(r, lo))
                out = np.where(r >= top, np.array(hi, ddt), inside.astype(ddt)).astype(ddt)
                nan_bits = np.array(1 << 63, np.uint64).view(ddt)   # NaN: 0x8000000000000000
                out = np.where(np.isnan(x), nan_bits, out).astype(ddt)   # (seen on an H100)
                return out
            out = np.clip(r, lo, hi).astype(np.int64).astype(ddt)
            # NaN to 8/16/32 bits: from f64 1 << (n - 1), signed or not (cvt.rni.u8.f64: 0x80,
            # cvt.rzi.s32.f64: 0x80000000); from f32/f16/bf16 0 (H100, 2026-11-27 record)
            if at_t == "f64" and nan.any():
                out = np.where(nan, np.array(1 << (8 * out.itemsize - 1), np.uint64).astype(ddt), out)
            return out
        return f2i
    # -> float
    rnd = mode or "rn"
    if rnd in _ROUND_INT and afloat:                              # round to integral value
        rf = _ROUND_INT[rnd]

        def to_int_valued(a):
            v = _post(rf(_pre(up(a), fz)).astype(ddt), fz, st)
            if dt_t == "f16" and np.isnan(v).any():   # cvt.rni.f16.f16 of a NaN: 0x7FFF
                v = np.where(np.isnan(v), np.uint16(0x7FFF).view(np.float16), v)
            return canon32(v) if v.dtype == np.float32 else v
        return to_int_valued
    if dt_t == "tf32":
        if rnd == "rna":                   # NaN: the low bits dropped (as the GPU does)
            return lambda a: np.where(np.isnan(a), np.ascontiguousarray(a, np.float32).view(np.uint32)
                                      & np.uint32(0xFFFFE000),
                                      round_tf32(a.astype(np.float32)).view(np.uint32))
        if rnd == "rz":                    # NaN: 0x7FFFE000 (the canonical NaN, truncated)
            return lambda a: np.where(np.isnan(a), np.uint32(0x7FFFE000),
                                      a.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000))
        unsupported(ins, "tf32 rounding other than .rna/.rz")
    if dt_t == "bf16":
        def tobf(a):
            x = _pre(up(a), fz)
            if x.dtype != np.float32:               # f64, integers: no double rounding
                x = _odd32(np.asarray(x))
            if relu:
                x = np.where(np.isnan(x), x, np.maximum(x, 0))
            if st:
                x = sat(x)
            out = _to_bf16_mode(x, rnd)
            if at_t == "f64":
                out = _narrow_nan(a, out, 7)
            return out
        return tobf

    # .ftz on f16.f32 leaves f32 subnormal inputs alone: cvt.rp.ftz.f16.f32 of 0x00000001 is
    # 0x0001 and cvt.rm.ftz.f16.f32 of 0x80000001 is 0x8001 on an H100, where the ISA says
    # .ftz flushes f32 subnormal inputs (H100, 2026-11-27 differential record)
    flush_in = fz and at_t == "f32" and dt_t != "f16"
    # .ftz f32 results from f64: a value below 2^-126 flushes unless rounding it to 24 bits
    # with an unbounded exponent reaches 2^-126 (tininess after rounding, not IEEE's subnormal
    # rounding): cvt.rn.ftz.f32.f64 of 0x380fffffe0000000 (2^-126 - 2^-150, which IEEE rounds
    # to 2^-126) is +0, cvt.rp.ftz.f32.f64 of 0x380fffffe0000001 is 2^-126 (H100, 2026-11-27
    # differential record)
    flush_tiny = fz and at_t == "f64" and dt_t == "f32"

    def tof(a):
        x = up(a) if afloat else a
        x = _pre(x, flush_in) if afloat else x
        if flush_tiny:
            x = _flush_tiny_f64(np.asarray(x), rnd)
        if relu:
            x = np.where(np.isnan(x), x, np.maximum(x, 0))
        x = np.asarray(x)
        if x.dtype.kind in "iu" and x.dtype.itemsize == 8:     # 64-bit ints: an exact pair
            v = exact.round_pair(*_pair(x), np.dtype(ddt), rnd)
        else:
            v = round_to(x.astype(np.float64), np.dtype(ddt), rnd)
        v = _post(v, fz and dt_t == "f32", st)
        if afloat and np.isnan(v).any():
            v = _nan_bits(a, v)
        return v

    def _nan_bits(a, v):
        """The H100's NaN results (2026-11-27 differential record): f16 from f64 keeps the
        sign and the top payload bits, quieted; other f16 results are 0x7FFF; f32 from f16,
        and with .ftz from f32 or bf16, is 0x7FFFFFFF; f32 from f32 or bf16 without .ftz is
        the input's bits (an sNaN stays signalling: a move); f64 from f32 with .ftz is the f32
        canonical NaN widened (0x7FFFFFFFE0000000); the rest are NumPy's (quieted, payload
        kept), as on the H100."""
        nan = np.isnan(v)
        if dt_t == "f16":
            if at_t == "f64":
                return _narrow_nan(a, v.view(np.uint16), 10).view(np.float16)
            return np.where(nan, np.uint16(0x7FFF).view(np.float16), v)
        if dt_t == "f32" and (at_t == "f16" or (fz and at_t in ("f32", "bf16"))):
            return np.where(nan, np.uint32(0x7FFFFFFF).view(np.float32), v)
        if dt_t == "f32" and at_t == "f32":
            return np.where(nan, np.asarray(a, np.float32), v)
        if dt_t == "f32" and at_t == "bf16":
            return np.where(nan, from_bf16(a), v)
        if dt_t == "f64" and at_t == "f32" and fz:
            return np.where(nan, np.uint64(0x7FFFFFFFE0000000).view(np.float64), v)
        return v
    return tof


def _flush_tiny_f64(x, rnd):
    """f64 values bound for an f32 .ftz result: those below 2^-126 that do not round (24 bits,
    unbounded exponent, mode `rnd`) to 2^-126 or more become zeros of their sign."""
    tiny = np.abs(x) < 2.0 ** -126
    if not tiny.any():
        return x
    scaled = round_to(np.where(tiny, x, 0.0) * 2.0 ** 64, np.dtype(np.float32), rnd)   # exact scaling
    return np.where(tiny & (np.abs(scaled.astype(np.float64)) < 2.0 ** -62), x * 0, x)


def _narrow_nan(a, out_bits, m):
    """f64 NaNs narrowed to a 16-bit float with `m` mantissa bits (f16: 10, bf16: 7) as an H100
    does: the sign, all-ones exponent, the quiet bit and the top payload bits (cvt.rn.f16.f64 of
    0xfff2000000000001 is 0xfe80; H100, 2026-11-27 differential record); `out_bits` elsewhere."""
    bits = np.ascontiguousarray(a, np.float64).view(np.uint64)
    nan = (bits & np.uint64(0x7FFFFFFFFFFFFFFF)) > np.uint64(0x7FF0000000000000)
    if not nan.any():
        return out_bits
    sign = ((bits >> np.uint64(63)) << np.uint64(15)).astype(np.uint16)
    pay = ((bits >> np.uint64(52 - m)) & np.uint64((1 << m) - 1)).astype(np.uint16)
    exp = np.uint16(((1 << (15 - m)) - 1) << m)
    q = np.uint16(1 << (m - 1))
    return np.where(nan, sign | exp | q | pay, np.asarray(out_bits).view(np.uint16)).astype(np.uint16)


def _pre(x, fz):
    return ftz(x) if fz and x.dtype in (np.float32, np.float64) else x


def _post(v, fz, st):
    if fz and v.dtype == np.float32:
        v = ftz(v)
    if st:
        v = sat(v)
    return v


@handler("cvt")
def h_cvt(ins, dc):
    md = mods(ins)
    ts = types_of(ins)
    mode = next((x for x in md if x in ("rn", "rz", "rm", "rp", "rna", "rni", "rzi", "rmi", "rpi")), None)
    fz, st, relu = "ftz" in md, "sat" in md, "relu" in md
    if len(ts) != 2:
        unsupported(ins)
    dt_t, at_t = ts
    if dt_t in ("f16x2", "bf16x2"):                               # d = {cvt(a) hi, cvt(b) lo}
        one = "f16" if dt_t == "f16x2" else "bf16"
        f = convert(ins, one, at_t, mode, fz, st or "satfinite" in md and False, relu)
        a = dc.reader(ins.operands[1], at_t, ins)
        b = dc.reader(ins.operands[2], at_t, ins)
        wr = dc.writer(ins.operands[0], "b32", ins)

        def fx2(w, m):
            hi = np.asarray(f(a(w))).view(np.uint16).astype(np.uint32)
            lo = np.asarray(f(b(w))).view(np.uint16).astype(np.uint32)
            wr(w, (hi << np.uint32(16)) | lo, m)
        return fx2
    if at_t in ("f16x2", "bf16x2") or dt_t.startswith("e") or at_t.startswith("e"):
        unsupported(ins)
    f = convert(ins, dt_t, at_t, mode, fz, st, relu)
    read_t = "b16" if at_t == "bf16" else at_t
    write_t = {"bf16": "b16", "tf32": "b32"}.get(dt_t, dt_t)
    a = dc.reader(ins.operands[1], read_t, ins)
    wr = dc.writer(ins.operands[0], write_t, ins)
    wdt = np.dtype(DT[write_t])

    def fn(w, m):
        v = np.asarray(f(a(w)))
        if v.dtype != wdt:
            v = v.view(wdt) if v.dtype.itemsize == wdt.itemsize else v.astype(wdt)
        wr(w, v, m)
    return fn


_WINDOWS = {"shared": SHARED_WINDOW, "local": LOCAL_WINDOW, "global": 0, "const": CONST_WINDOW,
            "param": 0}


@handler("cvta")
def h_cvta(ins, dc):
    md = mods(ins)
    to = "to" in md
    space = next((s.split("::")[0] for s in md if s in _WINDOWS or s == "shared::cta"), None)
    if space is None or space == "param":
        unsupported(ins, "cvta of this state space")
    t = "u32" if "u32" in md else "u64"
    base = np.uint64(_WINDOWS[space])
    a = dc.reader(ins.operands[1], t, ins)
    wr = dc.writer(ins.operands[0], t, ins)
    if t == "u32":
        b32 = np.uint32(_WINDOWS[space] & 0xFFFFFFFF)
        return (lambda w, m: wr(w, a(w) - b32, m)) if to else (lambda w, m: wr(w, a(w) + b32, m))
    return (lambda w, m: wr(w, a(w) - base, m)) if to else (lambda w, m: wr(w, a(w) + base, m))


@handler("isspacep")
def h_isspacep(ins, dc):
    """isspacep.{global,shared{::cta},local,const} p, a: whether the generic address a falls in
    that window (global: in none of the others)."""
    space = mods(ins)[0].split("::")[0]
    if space not in ("global", "shared", "local", "const"):
        unsupported(ins, f"isspacep.{mods(ins)[0]}")
    a = dc.reader(ins.operands[1], "u64", ins)
    wr = dc.writer(ins.operands[0], "pred", ins)
    wins = {k: np.uint64(v) for k, v in (("shared", SHARED_WINDOW), ("local", LOCAL_WINDOW),
                                         ("const", CONST_WINDOW))}
    n = np.uint64(WINDOW_SIZE)

    def f(w, m):
        x = a(w)
        inside = {k: (x >= lo) & (x < lo + n) for k, lo in wins.items()}
        r = inside.get(space)
        if r is None:
            r = ~(inside["shared"] | inside["local"] | inside["const"])
        wr(w, r, m)
    return f
