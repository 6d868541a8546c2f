"""How the differential test compares the interpreter with the GPU.

Bit for bit wherever the PTX ISA defines the result: every integer, bit, conversion, comparison,
memory and collective instruction, IEEE-rounded float arithmetic, and the special values the ISA
lists for the approximate instructions (their tables of -Inf, +-0, +Inf, NaN inputs: those
elements are compared exactly, NaN bits included). Elsewhere an ``.approx`` (and ``div.full``)
result must lie within the ISA's error bound of the GPU's, plus half an ulp for the
interpreter's own rounding (it computes in float64 and rounds once). Elements outside the range
where the ISA states a bound are counted as *unspecified* when they differ, not as failures.

:data:`BOUNDS` cites the ISA section of each bound (PTX ISA 9.1, "Floating Point Instructions"
9.7.3 and "Half Precision Floating Point Instructions" 9.7.4). :data:`NAN_NOTES` lists the
opcodes whose NaN payload the ISA leaves undefined *and* the GPU was not expected to fix (none:
the GPU's NaN bits are deterministic, and the interpreter mimics them)."""
from __future__ import annotations

import re

import numpy as np

from . import values as V

# (pattern of the full opcode, rule). Rules: ("ulp", k): at most k ulps apart (integer distance of
# the bit patterns); ("rel", e) / ("abs", e): relative / absolute difference; the named ones below.
BOUNDS = [
    # 9.7.3.21 ex2: "maximum ulp error is 2 ulp from correctly rounded result across the full range"
    (r"ex2\.approx(\.ftz)?\.f32", ("ulp", 2)),
    # 9.7.4.10 ex2 (half): "maximum relative error for .f16 type is 2^-9.9 ... for .bf16 type is 2^-7"
    (r"ex2\.approx\.f16(x2)?", ("rel", 2 ** -9.9)),
    (r"ex2\.approx\.ftz\.bf16(x2)?", ("rel", 2 ** -7)),
    # 9.7.3.20 lg2: absolute 2^-22 for inputs in (0.5, 2), relative 2^-22 for other positive finite
    (r"lg2\.approx(\.ftz)?\.f32", ("lg2",)),
    # 9.7.3.18 sin / 9.7.3.19 cos: absolute 2^-20.5 on [-2pi, 2pi], 2^-14.7 on [-100pi, 100pi];
    # outside, "only best effort ... no defined error guarantees" (unspecified)
    (r"(sin|cos)\.approx(\.ftz)?\.f32", ("sincos",)),
    # 9.7.3.22 tanh: "maximum relative error over the entire floating point range is 2^-11"
    (r"tanh\.approx\.f32", ("rel", 2 ** -11)),
    # 9.7.4.9 tanh (half): "maximum absolute error for .f16 type is 2^-10.987 ... .bf16 type is 2^-8"
    (r"tanh\.approx\.f16(x2)?", ("abs", 2 ** -10.987)),
    (r"tanh\.approx\.bf16(x2)?", ("abs", 2 ** -8)),
    # 9.7.3.13 rcp: rcp.approx.f32 "maximum ulp error is 1 across the full range of inputs"
    (r"rcp\.approx(\.ftz)?\.f32", ("ulp", 1)),
    # 9.7.3.14 rcp.approx.ftz.f64: "a fast, gross approximation" from the upper 32 bits (20
    # mantissa bits) with the low word zeroed; the ISA states no bound: we allow 2^-19 relative
    # on the upper word and require the low word to be zero on both sides (exact)
    (r"rcp\.approx\.ftz\.f64", ("gross64", 2 ** -19)),
    # 9.7.3.17 rsqrt.approx.ftz.f64: same kind of gross approximation, low 32 bits zero
    (r"rsqrt\.approx\.ftz\.f64", ("gross64", 2 ** -19)),
    # 9.7.3.15 sqrt: sqrt.approx.f32 "maximum relative error over the entire positive finite
    # floating-point range is 2^-23"
    (r"sqrt\.approx(\.ftz)?\.f32", ("rel", 2 ** -23)),
    # 9.7.3.16 rsqrt: "maximum relative error for rsqrt.f32 ... is 2^-22.9"; for rsqrt.approx.f64
    # the ISA states no bound (software emulated): we hold it to the same 2^-22.9
    (r"rsqrt\.approx(\.ftz)?\.f32", ("rel", 2 ** -22.9)),
    (r"rsqrt\.approx\.f64", ("rel", 2 ** -22.9)),
    # 9.7.3.8 div: div.approx.f32 "for |b| in [2^-126, 2^126], the maximum ulp error is 2. For
    # 2^126 < |b| < 2^128, if a is infinity, div.approx.f32 returns NaN, otherwise ... a
    # sign-preserving zero"; outside both ranges unspecified
    (r"div\.approx(\.ftz)?\.f32", ("divapprox",)),
    # 9.7.3.8 div: div.full.f32 "maximum ulp error is 2 across the full range of inputs"
    (r"div\.full(\.ftz)?\.f32", ("ulp", 2)),
]

#: opcode pattern -> why its NaN payload is compared as "any NaN" (everything else: exact bits)
NAN_NOTES: dict = {
    r"cvt(\.ftz)?(\.sat)?\.f32\.bf16": "9.7.9.21 cvt: \"For cvt.f32.bf16, NaN input yields unspecified NaN\"",
}

#: 9.7.1.19 bfe / 9.7.1.20 bfi: the position and length operands "are type .u32, but are restricted
#: to the 8-bit value range 0..255": elements with either >= 256 are unspecified (the H100's 64-bit
#: forms do not reduce them mod 256 as the ISA's pseudo-code does)
BITFIELD = {"bfe": (1, 2), "bfi": (2, 3)}

#: 9.7.1.8 div / 9.7.1.9 rem (integer): "Division by zero yields an unspecified, machine-specific
#: value": elements with a zero divisor are unspecified
INT_DIV = r"(div|rem)\.[su](16|32|64)"


def rules_for(combo: str, dsts: list) -> list:
    """One rule per output: the first output of an approximate instruction gets its bound,
    everything else is exact."""
    if re.fullmatch(INT_DIV, combo):
        return [("intdiv",)]
    if combo.split(".")[0] in BITFIELD:
        return [("bitfield",) + BITFIELD[combo.split(".")[0]]]
    for pat, rule in BOUNDS:
        if re.fullmatch(pat, combo):
            return [rule] + [("exact",)] * (len(dsts) - 1)
    return [("exact",)] * len(dsts)


def _ordered(bits, w):
    """Bit patterns -> integers ordered like the floats they encode (for ulp distances)."""
    b = bits.astype(np.int64) if w < 8 else bits.view(np.int64)
    top = np.int64(1) << np.int64(8 * w - 1) if w < 8 else np.int64(-2**63)
    if w < 8:
        neg = (b & top) != 0
        return np.where(neg, -(b & ~top), b)
    neg = b < 0
    return np.where(neg, -(b & np.int64(2**63 - 1)), b)


def _ulp(t, x):
    m = V.FORMAT[t][1]
    emin = 2 - 2 ** (V.FORMAT[t][0] - 1)
    with np.errstate(all="ignore"):
        e = np.floor(np.log2(np.maximum(np.abs(x), 2.0 ** emin)))
    return 2.0 ** (e - m)


def compare(rule, t: str, gpu, mine, inputs, combo: str = ""):
    """(bad, unspecified): bool arrays over the elements. `gpu`/`mine` are the output's bit
    patterns, `inputs` the instruction's source operands (bit patterns)."""
    same = gpu == mine
    if t in V.FORMAT and gpu.dtype.itemsize == V.WIDTH[t] and any(re.fullmatch(p, combo) for p in NAN_NOTES):
        with np.errstate(all="ignore"):
            same = same | (np.isnan(V.to_float64(t, gpu)) & np.isnan(V.to_float64(t, mine)))
    if rule[0] == "intdiv":
        unspec = ~same & (inputs[1] == 0)
        return ~same & ~unspec, unspec
    if rule[0] == "bitfield":
        unspec = ~same & ((inputs[rule[1]] > 255) | (inputs[rule[2]] > 255))
        return ~same & ~unspec, unspec
    if rule[0] == "exact" or same.all():
        return ~same, np.zeros(len(same), bool)
    if t in ("f16x2", "bf16x2"):
        h = V.half_of(t)
        parts = [compare(rule, h, (gpu >> s) & 0xFFFF, (mine >> s) & 0xFFFF,
                         [(x >> s) & 0xFFFF for x in inputs[:1]] + list(inputs[1:]), combo)
                 for s in (np.uint32(0), np.uint32(16))]
        return parts[0][0] | parts[1][0], (parts[0][1] | parts[1][1]) & ~(parts[0][0] | parts[1][0])
    w = V.WIDTH[t]
    dt = V.UINT[w]
    gpu, mine = gpu.astype(dt), mine.astype(dt)
    x = V.to_float64(t, inputs[0].astype(dt)) if inputs else None
    with np.errstate(all="ignore"):
        g, i = V.to_float64(t, gpu), V.to_float64(t, mine)
        finite = np.isfinite(g) & np.isfinite(i)
        special_in = ~np.isfinite(x) | (x == 0) if x is not None else np.zeros(len(g), bool)
        if "ftz" in combo and x is not None:
            special_in |= np.abs(x) < 2.0 ** (2 - 2 ** (V.FORMAT[t][0] - 1))
        dist = np.abs(_ordered(gpu, w) - _ordered(mine, w))
        unspec = np.zeros(len(g), bool)
        kind = rule[0]
        if kind == "ulp":
            ok = dist <= rule[1]
        elif kind in ("rel", "abs"):
            err = np.abs(g - i)
            allow = (rule[1] * np.maximum(np.abs(g), np.abs(i)) if kind == "rel" else rule[1]) + _ulp(t, i) / 2
            ok = finite & (err <= allow) | (dist <= 1)
        elif kind == "lg2":
            err = np.abs(g - i)
            inner = (x > 0.5) & (x < 2)
            allow = np.where(inner, 2.0 ** -22, 2.0 ** -22 * np.abs(g)) + _ulp(t, i) / 2
            ok = finite & (err <= allow) | (dist <= 1)
        elif kind == "sincos":
            err = np.abs(g - i)
            allow = np.where(np.abs(x) <= 2 * np.pi, 2.0 ** -20.5, 2.0 ** -14.7) + _ulp(t, i) / 2
            ok = finite & (err <= allow)
            unspec = np.abs(x) > 100 * np.pi
        elif kind == "divapprox":
            b = np.abs(V.to_float64(t, inputs[1].astype(dt)))
            inside = (b >= 2.0 ** -126) & (b <= 2.0 ** 126)
            big = (b > 2.0 ** 126) & (b < 2.0 ** 128)
            ok = np.where(inside, dist <= 2, False)
            unspec = ~inside & ~big & np.isfinite(b) & ~special_in
            special_in = special_in | big
        elif kind == "gross64":
            low_ok = ((gpu & np.uint64(0xFFFFFFFF)) == 0) & ((mine & np.uint64(0xFFFFFFFF)) == 0)
            err = np.abs(g - i)
            ok = low_ok & (finite & (err <= rule[1] * np.maximum(np.abs(g), np.abs(i))) | (dist <= 1 << 32))
        else:
            raise ValueError(rule)
        nan = np.isnan(g) | np.isnan(i)
        bad = ~same & (special_in | nan | ~ok)
        unspec &= ~same & ~special_in & ~nan
        return bad & ~unspec, unspec
