"""Conversions: cvt (integer, float, f16, bf16, tf32, packed x2) and address conversions (cvta,
isspacep). f16 rounding is NumPy's (correct round-to-nearest-even); bf16 and tf32 use
:mod:`fraglab.dtypes`, the course's bit-exact emulation."""
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
            r = np.where(np.isnan(x), 0.0, rf(x))
            if dt_t.endswith("64"):                 # 2^63 and 2^64 are not int64/uint64 values
                top = 2.0 ** (64 if dt_t[0] == "u" else 63)
                inside = np.where(r >= top, 0.0, np.maximum(r, lo))
                out = np.where(r >= top, np.array(hi, ddt), inside.astype(ddt)).astype(ddt)
                nan_bits = np.array(1 << 63, np.uint64).view(ddt)   # NaN: 0x8000000000000000
                out = np.where(np.isnan(x), nan_bits, out).astype(ddt)   # (seen on an H100)
                return out
            return np.clip(r, lo, hi).astype(np.int64).astype(ddt)
        return f2i
    # -> float
    rnd = mode or "rn"
    if rnd in _ROUND_INT and afloat:                              # round to integral value
        rf = _ROUND_INT[rnd]

        def to_int_valued(a):
            v = _post(rf(_pre(up(a), fz)).astype(ddt), fz, st)
            return canon32(v) if v.dtype == np.float32 else v
        return to_int_valued
    if dt_t == "tf32":
        if rnd == "rna":                   # NaN: the low bits dropped (as the GPU does)
            return lambda a: np.where(np.isnan(a), np.ascontiguousarray(a, np.float32).view(np.uint32)
                                      & np.uint32(0xFFFFE000),
                                      round_tf32(a.astype(np.float32)).view(np.uint32))
        if rnd == "rz":
            return lambda a: a.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
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
            return _to_bf16_mode(x, rnd)
        return tobf

    def tof(a):
        x = up(a) if afloat else a
        x = _pre(x, fz and at_t == "f32") if afloat else x
        if relu:
            x = np.where(np.isnan(x), x, np.maximum(x, 0))
        x = np.asarray(x)
        if x.dtype.kind in "iu" and x.dtype.itemsize == 8:     # 64-bit ints: an exact pair
            v = exact.round_pair(*_pair(x), np.dtype(ddt), rnd)
        else:
            v = round_to(x.astype(np.float64), np.dtype(ddt), rnd)
        v = _post(v, fz and dt_t == "f32", st)
        if (dt_t == "f16" or (dt_t == "f32" and at_t == "f16")) and np.isnan(v).any():
            canon = np.uint16(0x7FFF) if dt_t == "f16" else np.uint32(0x7FFFFFFF)
            v = np.where(np.isnan(v), canon.view(v.dtype), v)   # the GPU's canonical NaN
        return v
    return tof


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
