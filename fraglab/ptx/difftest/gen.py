"""Generators of differential tests for the data-path instructions: integer, bit, float,
half/bf16 (scalar and x2), conversions, comparisons and selects. :func:`build` turns one accepted
combination (its full opcode) into a :class:`~.case.Case`, or raises :class:`NoTest`
saying why none is generated. Memory instructions and warp collectives: :mod:`.mem`."""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from . import values as V
from .case import Case, pad32, seed_of

TYPES = set(V.WIDTH) | {"b128", "e2m1x2", "e2m3x2", "e3m2x2", "ue8m0x2"}
INTS = {"u8", "s8", "b8", "u16", "s16", "b16", "u32", "s32", "b32", "u64", "s64", "b64"}
FLOATS = {"f16", "bf16", "f32", "f64", "f16x2", "bf16x2"}
CMPS = {"eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs", "equ", "neu", "ltu", "leu",
        "gtu", "geu", "num", "nan"}


#: full opcodes that need an sm_90 module (ptxas: "requires .target sm_86/sm_89/sm_90 or higher")
SM90 = [r"(add|sub|mul)(\.\w+)*\.bf16(x2)?", r"(ex2|tanh)(\.\w+)*\.bf16(x2)?", r"setp?(\.\w+)*\.bf16(x2)?",
        r"(min|max)(\.\w+)*\.xorsign(\.\w+)*", r"cvt(\.\w+)*\.(e4m3x2|e5m2x2)(\.\w+)*", r"elect\.sync",
        r"cvt(\.\w+)*\.bf16\.(f16|f64|[su](8|16|32|64))", r"cvt(\.\w+)*\.(f16|f64|[su](8|16|32|64))\.bf16",
        r"atom(\.\w+)*\.(v2|v4|v8)(\.\w+)*", r"atom(\.\w+)*\.bf16(x2)?", r"red(\.\w+)*\.bf16(x2)?",
        r"(min|max|add|sub)(\.\w+)*\.[su]16x2", r"cvt(\.\w+)*\.(rn|rz)(\.\w+)*\.tf32\.f32",
        r"cvt(\.\w+)*\.ftz(\.\w+)*\.f32\.bf16", r"(min|max)\.relu\.s32", r"[\w.:]*\.cluster(\.[\w:]+)*",
        r"[\w.:]*::cluster[\w.:]*", r"fence\.(proxy|mbarrier_init)[\w.:]*", r"griddepcontrol\.\w+"]


def arch_for(text: str) -> str:
    import re
    return "sm_90" if any(re.fullmatch(p, text) for p in SM90) else "sm_80"


class NoTest(Exception):
    """No generated test for this combination (the message says why)."""


def split(text: str):
    """'cvt.rn.f16.f32' -> ('cvt', ('rn',), ('f16', 'f32'))."""
    parts = text.split(".")
    return (parts[0], tuple(p for p in parts[1:] if p not in TYPES),
            tuple(p for p in parts[1:] if p in TYPES))


# ---- operand drawing ---------------------------------------------------------------------

def draw(seed, types, pools=None, crafted=(), n_rand=256, limit=1024, near_pairs=True):
    """Operand bit patterns for an instruction reading operands of `types`: one operand: its
    special values; two: their full cross product (sampled down to `limit`); three or more: a
    cross product of a spread of each; then the `crafted` rows (tuples of ints), and `n_rand`
    random rows (float pairs: half of the second operands close to the first). Padded to a
    multiple of 32 elements. Cached: combinations that differ only in modifiers share inputs."""
    key = (seed, tuple(types), tuple(tuple(int(v) for v in p) for p in pools) if pools else None,
           tuple(tuple(int(v) for v in r) for r in crafted), n_rand, limit, near_pairs)
    return [a.copy() for a in _draw(*key)]


@lru_cache(maxsize=2048)
def _draw(seed, types, pools, crafted, n_rand, limit, near_pairs):
    rng = np.random.default_rng(seed)
    k = len(types)
    pools = [V.as_bits(t, p) for t, p in zip(types, pools or [V.specials(t) for t in types])]
    if k == 1:
        cols = [pools[0]]
    else:
        m = max(2, int(round(limit ** (1 / k))))
        use = [p if k == 2 else p[np.unique(np.linspace(0, len(p) - 1, m).round().astype(int))] for p in pools]
        grid = np.indices([len(p) for p in use]).reshape(k, -1)
        if grid.shape[1] > limit:
            grid = grid[:, np.sort(rng.choice(grid.shape[1], limit, replace=False))]
        cols = [u[g] for u, g in zip(use, grid)]
    if crafted:
        cols = [np.concatenate([c, V.as_bits(t, [r[j] for r in crafted])]) for j, (c, t) in
                enumerate(zip(cols, types))]

    def rand(count):
        out = [V.random_of(t, rng, count) for t in types]
        if near_pairs and k >= 2 and types[0] == types[1] and types[0] in V.FORMAT:
            close = rng.random(count) < 0.5
            out[1] = np.where(close, V.near(types[0], out[0], rng), out[1]).astype(out[1].dtype)
        return out
    if n_rand:
        cols = [np.concatenate([c, r.astype(c.dtype)]) for c, r in zip(cols, rand(n_rand))]
    return pad32(cols, rand)


def thin(arrays, count=64):
    """A spread of `count` elements of equal-length operand arrays (for the variants of an
    instruction whose modifiers do not change its values: memory-ordering qualifiers, scopes)."""
    n = len(arrays[0])
    if n <= count:
        return arrays
    idx = np.unique(np.linspace(0, n - 1, count).round().astype(int))
    return [a[idx] for a in arrays]


def values(t, xs):
    """float64 values -> bit patterns of float type t (rounded to nearest; bf16 truncated)."""
    with np.errstate(all="ignore"):
        return [int(b) for b in V.from_float64(V.half_of(t), np.asarray(xs, np.float64))]


def _pow2(rng, lo, hi, n):
    """n values 2^e for e uniform in [lo, hi), built exactly (a mantissa in [1, 2) scaled by
    an integer power of two): no libm call, so the inputs are the same bits on every machine."""
    return np.ldexp(rng.uniform(1, 2, n), rng.integers(lo, hi, n))


def domain(base, t, seed):
    """Inputs of the approximate/special functions: the points where their description
    changes (range limits, denormal results, overflow) and spreads over their ranges."""
    rng = np.random.default_rng(seed)
    h = V.half_of(t)
    big = {"f16": 65504.0, "bf16": 3e38, "f32": 3.4e38, "f64": 1.7e308}[h]
    if base == "ex2":
        x = np.concatenate([np.linspace(-152, 130, 141), [-126, -126.5, -127, -149, -149.5, -150,
                            -24, -24.5, -25, -14, -14.5, -15, 15, 15.9, 16, 127, 127.99, 128, 128.01],
                            rng.uniform(-1, 1, 40), rng.uniform(-130, 130, 60)])
    elif base == "lg2":
        x = np.concatenate([rng.uniform(0.5, 2, 60), [0.5, 2, 1 - 2**-24, 1 + 2**-23, 0.49999997],
                            _pow2(rng, -149, 128, 80), -rng.uniform(0, 10, 8)])
    elif base in ("sin", "cos"):
        x = np.concatenate([rng.uniform(-2 * np.pi, 2 * np.pi, 80), rng.uniform(-100 * np.pi, 100 * np.pi, 60),
                            np.arange(-16, 17) * np.pi / 4, [2 * np.pi, -2 * np.pi, 100 * np.pi, 1e3, 1e5,
                                                             1e10, -1e20, 1e-10]])
    elif base == "tanh":
        x = np.concatenate([rng.uniform(-10, 10, 80), rng.uniform(-1, 1, 40), _pow2(rng, -140, -5, 30),
                            [9.0, 10, 20, 44, 100, -9]])
    else:                                  # rcp, sqrt, rsqrt: the whole range by exponent
        x = np.concatenate([_pow2(rng, -150, 128, 160) * rng.choice([-1, 1], 160), [2.0**126, 2.0**-126, 2.0**127, 2.0**-127,
                            1.5 * 2.0**126, 2.0**-149, 4.0, 0.25]])
    x = x[np.abs(x) <= big]
    if h == "f64" and base in ("rcp", "sqrt", "rsqrt"):
        x = np.concatenate([x, _pow2(rng, -1070, 1020, 60), [2.0**-1022, 2.0**-1074, 2.0**1023]])
    vals = values(h, x)
    if t in ("f16x2", "bf16x2"):
        vals = [(a << 16) | b for a, b in zip(vals, vals[::-1])]
    return vals


# ---- the generators ------------------------------------------------------------------------

def _one(cb, text, srcs, dsts, body, **kw):
    return Case(text, srcs, dsts, body, **kw)


def op_line(text, nsrc, ndst=1):
    ds = ", ".join("{d%d}" % i for i in range(ndst))
    return f"{text} {ds}, " + ", ".join("{s%d}" % i for i in range(nsrc)) + ";"


def g_float(text, base, mods, types):
    """Float arithmetic: add/sub/mul/div/fma/mad/min/max/copysign on f32/f64/f16/bf16 (x2)."""
    t = types[-1]
    if len(types) > 1 and types[0] != types[-1]:
        raise NoTest("mixed-precision arithmetic needs sm_100")
    n = 3 if base in ("fma", "mad") else 2
    crafted = _fma_crafted(t) if n == 3 else ()
    srcs = draw(seed_of(base, t, n), [t] * n, crafted=crafted, n_rand=384 if n == 3 else 256)
    return Case(text, [(t, a) for a in srcs], [t], [op_line(text, n)])


def _fma_crafted(t):
    """(a, b, c) rows: products cancelled by c (the result is the product's rounding error),
    sums at rounding ties and just off them, overflow, denormal results."""
    if t in ("f16x2", "bf16x2"):
        return ()
    h = V.half_of(t)
    m = V.FORMAT[h][1]
    rng = np.random.default_rng(seed_of("fma", t))
    a = np.ldexp(rng.uniform(1, 2, 24), rng.integers(-4, 4, 24))
    b = rng.uniform(1, 2, 24)
    a, b = (V.to_float64(h, V.from_float64(h, v)) for v in (a, b))
    with np.errstate(all="ignore"):
        p = V.to_float64(h, V.from_float64(h, a * b))
    ulp = 2.0 ** -m
    rows = [(x, y, -z) for x, y, z in zip(a, b, p)]
    rows += [(1.0, 1.0, k * ulp / 2) for k in (1, 3, 5)] + [(1.0, 1.0, -ulp / 4), (-1.0, 1.0, ulp / 2)]
    rows += [(1.0 + ulp, 1.0 + ulp, 0.0), (1.0 + ulp, 1.0 - ulp / 2, -1.0), (3.0, 1 / 3.0, -1.0)]
    tiny = 2.0 ** (2 - 2 ** (V.FORMAT[h][0] - 1))
    big = float(V.to_float64(h, np.array([((1 << V.FORMAT[h][0]) - 1 << m) - 1], V.udt(h)))[0])
    rows += [(tiny, 0.5, 0.0), (tiny, 0.75, 0.0), (tiny, 0.5, -tiny), (tiny * 2 ** -m, 0.5, 0.0),
             (big, 2.0, -big), (big, 1.0, big), (big, -1.0, -big), (2.0, big, -math.inf),
             (0.0, math.inf, 1.0), (math.inf, 1.0, -math.inf), (-0.0, 1.0, 0.0), (0.0, -1.0, -0.0)]
    return [tuple(values(h, r)) for r in rows]


def g_unary_float(text, base, mods, types):
    """neg/abs and the special functions (sqrt, rcp, rsqrt, ex2, lg2, sin, cos, tanh)."""
    t = types[-1]
    pool = V.specials(t)
    if base not in ("neg", "abs"):
        pool = pool + domain(base, t, seed_of("dom", base, t))
    srcs = draw(seed_of(base, t), [t], pools=[pool], n_rand=160)
    return Case(text, [(t, srcs[0])], [t], [op_line(text, 1)])


def g_testp(text, base, mods, types):
    t = types[-1]
    srcs = draw(seed_of(base, t), [t], n_rand=96)
    return Case(text, [(t, srcs[0])], ["pred"], [op_line(text, 1)])


def g_int_binary(text, base, mods, types):
    """add/sub/mul/div/rem/min/max/and/or/xor (and .hi/.wide/.sat/mul24) on integer types."""
    t = types[-1]
    dst = t
    if "wide" in mods:
        dst = t[0] + str(2 * int(t[1:]))
    if t == "pred":
        srcs = draw(seed_of(base, t), ["pred", "pred"], n_rand=32)
        return Case(text, [("pred", a) for a in srcs], ["pred"], [op_line(text, 2)])
    srcs = draw(seed_of(base, t), [t, t])
    return Case(text, [(t, a) for a in srcs], [dst], [op_line(text, 2)])


def g_mad(text, base, mods, types):
    t = types[-1]
    wt = t[0] + str(2 * int(t[1:])) if "wide" in mods else t
    a = draw(seed_of(base, t, wt), [t, t, wt], n_rand=384)
    return Case(text, [(t, a[0]), (t, a[1]), (wt, a[2])], [wt], [op_line(text, 3)])


def g_carry(text, base, mods, types):
    """add.cc/addc/sub.cc/subc/mad.cc/madc: the carry-in (for the c forms) set from input c
    (non-zero: 1) by an add.cc, then the result and the carry-out read back with addc."""
    t = types[-1]
    n = 3 if base.startswith("mad") else 2
    cin = base in ("addc", "subc", "madc")
    tys = [t] * n + (["u32"] if cin else [])
    a = draw(seed_of(base, t, cin), tys, n_rand=256)
    body = ["add.cc.u32 %x_u, {s%d}, 0xFFFFFFFF;" % n] if cin else []
    body += [op_line(text, n), f"addc.{t} {{d1}}, 0, 0;"]
    return Case(text, [(tt, x) for tt, x in zip(tys, a)], [t, t], body)


def g_shift(text, base, mods, types):
    """shl, shr, and szext (a value and a bit position: the shifts' operands)."""
    t = types[-1]
    a = draw(seed_of(base, t), [t, "u32"], pools=[V.specials(t), V.SHIFTS])
    return Case(text, [(t, a[0]), ("u32", a[1])], [t], [op_line(text, 2)])


def g_unary_int(text, base, mods, types):
    """not/cnot/neg/abs/popc/clz/brev/bfind (the counting ones write a u32)."""
    t = types[-1]
    dst = "u32" if base in ("popc", "clz", "bfind") else t
    a = draw(seed_of(base, t), [t], n_rand=96)
    return Case(text, [(t, a[0])], [dst], [op_line(text, 1)])


def g_bitfield(text, base, mods, types):
    t = types[-1]
    pos = [0, 1, 7, 8, 15, 16, 31, 32, 33, 63, 64, 65, 255, 256]
    sp = V.specials(t)
    if base == "bfe":
        a = draw(seed_of(base, t), [t, "u32", "u32"], pools=[[sp[3], sp[9], sp[-1]], pos, pos], limit=4096)
        return Case(text, [(t, a[0]), ("u32", a[1]), ("u32", a[2])], [t], [op_line(text, 3)])
    a = draw(seed_of(base, t), [t, t, "u32", "u32"], pools=[[sp[3], sp[-1]], [sp[0], sp[10]], pos, pos],
             limit=4096)
    return Case(text, [(t, a[0]), (t, a[1]), ("u32", a[2]), ("u32", a[3])], [t], [op_line(text, 4)])


def g_shf(text, base, mods, types):
    sp = V.specials("b32")
    a = draw(seed_of(base), ["b32", "b32", "u32"], pools=[sp[:8], sp[4:12], V.SHIFTS], limit=2048)
    return Case(text, [("b32", x) for x in a], ["b32"], [op_line(text, 3)])


PRMT_SEL = [0x3210, 0x7654, 0x0123, 0x4567, 0x1032, 0x8888, 0xFFFF, 0x9ABC, 0x7777, 0x0, 0x1,
            0x2, 0x3, 0x5, 0x6, 0x7, 0xDEADBEEF, 0x80808080]


def g_prmt(text, base, mods, types):
    sp = [0x80FF7F01, 0x12345678, 0xDEADBEEF, 0x00800080, 0xFFFFFFFF, 0]
    a = draw(seed_of(base), ["b32", "b32", "b32"], pools=[sp, sp[::-1], PRMT_SEL], limit=1024)
    return Case(text, [("b32", x) for x in a], ["b32"], [op_line(text, 3)])


LUTS = (0x00, 0xFF, 0xF0, 0xCC, 0xAA, 0x96, 0xE8, 0x1E, 0xCA, 0x80, 0xFE, 0x6A, 0x3C, 0x5A)


def g_lop3(text, base, mods, types):
    a = draw(seed_of(base), ["b32"] * 3, n_rand=224)
    body = [f"{text} {{d{i}}}, {{s0}}, {{s1}}, {{s2}}, {lut:#x};" for i, lut in enumerate(LUTS)]
    return Case(text, [("b32", x) for x in a], ["b32"] * len(LUTS), body)


def g_sad(text, base, mods, types):
    t = types[-1]
    a = draw(seed_of(base, t), [t] * 3, n_rand=256)
    return Case(text, [(t, x) for x in a], [t], [op_line(text, 3)])


def g_dp(text, base, mods, types):
    at, bt = types[0], types[1]
    ct = "s32" if "s32" in (at, bt) else "u32"
    sp = [0, 0x7F7F7F7F, 0x80808080, 0xFFFFFFFF, 0x01FF80FE, 0x7FFF8000]
    a = draw(seed_of(base, at, bt), [at, bt, ct], pools=[sp, sp[::-1], V.specials(ct)], n_rand=256)
    return Case(text, [(at, a[0]), (bt, a[1]), (ct, a[2])], [ct], [op_line(text, 3)])


def g_bmsk(text, base, mods, types):
    a = draw(seed_of(base), ["u32", "u32"], pools=[V.SHIFTS, V.SHIFTS])
    return Case(text, [("u32", x) for x in a], ["b32"], [op_line(text, 2)])


def g_setp(text, base, mods, types):
    t = types[-1]
    if base == "set":
        dt, t = types[0], types[-1]
    boolop = any(m in ("and", "or", "xor") for m in mods)
    tys = [t, t] + (["pred"] if boolop else [])
    if base == "set":          # setp's comparisons with another result encoding: fewer elements
        a = draw(seed_of(base, t, boolop), tys, n_rand=64, limit=256 if not boolop else 216)
    else:
        a = draw(seed_of(base, t, boolop), tys, n_rand=256 if not boolop else 128,
                 limit=1024 if not boolop else 512)
    srcs = [(ty, x) for ty, x in zip(tys, a)]
    if base == "set":
        return Case(text, srcs, [dt], [op_line(text, len(tys))])
    if t in ("f16", "bf16"):                       # half scalars write one predicate
        return Case(text, srcs, ["pred"], [op_line(text, len(tys))])
    ds = "{d0}|{d1}"
    return Case(text, srcs, ["pred", "pred"], [f"{text} {ds}, " + ", ".join(
        "{s%d}" % i for i in range(len(tys))) + ";"])


def g_selp(text, base, mods, types):
    t = types[-1]
    a = draw(seed_of(base, t), [t, t, "pred"], n_rand=128, limit=512)
    return Case(text, [(t, a[0]), (t, a[1]), ("pred", a[2])], [t], [op_line(text, 3)])


def g_slct(text, base, mods, types):
    t, ct = types[0], types[1]
    a = draw(seed_of(base, t, ct), [t, t, ct], pools=[V.specials(t)[:6], V.specials(t)[6:12], V.specials(ct)],
             n_rand=128, limit=1200)
    return Case(text, [(t, a[0]), (t, a[1]), (ct, a[2])], [t], [op_line(text, 3)])


def g_mov(text, base, mods, types):
    t = types[-1]
    a = draw(seed_of(base, t), [t], n_rand=32)
    return Case(text, [(t, a[0])], [t], [op_line(text, 1)])


def g_cvt(text, base, mods, types):
    """cvt between every accepted pair (rounding, .ftz, .sat, .relu, .satfinite as written),
    cvt.pack, and the packed forms (two f32 sources into f16x2/bf16x2/e4m3x2/e5m2x2)."""
    if "rs" in mods:
        raise NoTest("cvt.rs (stochastic rounding) needs sm_100")
    if "pack" in mods:
        dt, at, bt = types
        sp = V.specials("s32")
        a = draw(seed_of(base, "pack", dt), ["s32", "s32", "b32"], pools=[sp, sp[::-1], [0, 0x12345678, 0xFFFFFFFF]],
                 limit=2048)
        return Case(text, [("s32", a[0]), ("s32", a[1]), ("b32", a[2])], ["b32"], [op_line(text, 3)])
    dt, at = types[0], types[-1]
    arch = arch_for(text)
    seed = seed_of("cvt", dt, at)
    rng = np.random.default_rng(seed)
    if at in ("f16x2", "bf16x2", "e4m3x2", "e5m2x2"):
        pool = V.specials(at) if at in ("f16x2", "bf16x2") else list(range(0, 65536, 97)) + [0x7F7F, 0xFF7E, 0x8080]
        a = draw(seed, [at], pools=[pool], n_rand=160)
        return Case(text, [(at, a[0])], [dt], [op_line(text, 1)], arch=arch)
    pool = list(V.specials(at))
    one = V.half_of(dt) if dt.endswith("x2") else dt
    if at == "f32" and one == "tf32":                       # halfway between tf32 values
        r = rng.integers(0, 1 << 19, 48).astype(np.uint64)
        mid = ((r << np.uint64(13)) | np.uint64(0x1000)) + np.uint64(0x3A800000)
        pool += [int(x) + d for x in mid for d in (0, 1, -1)] + [int(x) | 0x80000000 for x in mid[:16]]
    elif at in ("f32", "f16", "bf16") and one in ("e4m3", "e5m2"):
        pool += values(at, fp8_midpoints(one))
    elif at in V.FORMAT:
        if one in ("f16", "bf16", "f32", "tf32", "e4m3", "e5m2") and V.WIDTH.get(one, 4) <= V.WIDTH[at] \
                and one != at:
            tgt = {"tf32": "f32", "e4m3": "f16", "e5m2": "f16"}.get(one, one)
            if tgt != at:
                pool += [int(x) for x in V.float_ties(at, tgt, rng)]
        if one in INTS or any(m in ("rni", "rzi", "rmi", "rpi") for m in mods):
            pool += [int(x) for x in V.int_rounding_ties(at, rng)]
    elif at in INTS and one in V.FORMAT and one != "f64":
        pool += [int(x) for x in V.int_ties(at, one, rng)]
    if dt.endswith("x2"):
        a = draw(seed, [at, at], pools=[pool, pool[::-1]], limit=900)
        return Case(text, [(at, a[0]), (at, a[1])], [dt], [op_line(text, 2)], arch=arch)
    a = draw(seed, [at], pools=[pool], n_rand=192)
    out = "b32" if dt == "tf32" else dt
    narrow = "bf16" in (dt, at) and (V.WIDTH.get(dt) == 1 or V.WIDTH.get(at) == 1)
    return Case(text, [(at, a[0])], [out], [op_line(text, 1)], arch=arch, narrow=narrow)


def fp8_midpoints(fmt):
    """Halfway points between neighbouring finite values of e4m3 / e5m2 (and just past the
    largest finite value)."""
    e, m = {"e4m3": (4, 3), "e5m2": (5, 2)}[fmt]
    bias = (1 << (e - 1)) - 1
    vals = []
    for code in range(128):
        ex, ma = code >> m, code & ((1 << m) - 1)
        if fmt == "e4m3" and code == 127 or fmt == "e5m2" and ex == (1 << e) - 1:
            continue
        vals.append(ma * 2.0 ** (1 - bias - m) if ex == 0 else (1 + ma / 2**m) * 2.0 ** (ex - bias))
    v = np.array(sorted(vals))
    mids = (v[1:] + v[:-1]) / 2
    top = v[-1] + (v[-1] - v[-2]) / 2
    return np.concatenate([mids, -mids[::3], [top, -top, top * 1.01, v[-1] * 4]])


FLOAT_BINARY = {"add", "sub", "mul", "div", "min", "max", "copysign"}
INT_BINARY = {"add", "sub", "mul", "div", "rem", "min", "max", "and", "or", "xor", "mul24"}


def build(text: str) -> Case:
    """The generated test of one combination (raises :class:`NoTest`)."""
    base, mods, types = split(text)
    if not types:
        raise NoTest("no operand type in the opcode")
    t = types[-1]
    if base in ("add", "sub", "mad") and ("cc" in mods) or base in ("addc", "subc", "madc"):
        return g_carry(text, base, mods, types)
    if base in ("fma", "mad") and t in FLOATS or base in FLOAT_BINARY and t in FLOATS:
        return g_float(text, base, mods, types)
    if base in ("neg", "abs") and t in FLOATS or base in ("sqrt", "rcp", "rsqrt", "ex2", "lg2", "sin",
                                                          "cos", "tanh"):
        return g_unary_float(text, base, mods, types)
    if base in ("mad", "mad24"):
        return g_mad(text, base, mods, types)
    if base in INT_BINARY:
        return g_int_binary(text, base, mods, types)
    simple = {"testp": g_testp, "shl": g_shift, "shr": g_shift, "bfe": g_bitfield, "bfi": g_bitfield,
              "shf": g_shf, "prmt": g_prmt, "lop3": g_lop3, "sad": g_sad, "dp4a": g_dp, "dp2a": g_dp,
              "bmsk": g_bmsk, "szext": g_shift, "setp": g_setp, "set": g_setp, "selp": g_selp,
              "slct": g_slct, "mov": g_mov, "cvt": g_cvt}
    if base in simple:
        return simple[base](text, base, mods, types)
    if base in ("not", "cnot", "neg", "abs", "popc", "clz", "brev", "bfind"):
        return g_unary_int(text, base, mods, types)
    raise NoTest(f"no generator for `{base}`")
