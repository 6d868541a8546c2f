"""Floating-point arithmetic bit patterns recorded on an H100 (the differential record of
2026-11-27, ``tests/data/ptx_differential.npz``), asserted directly on the interpreter, one test
per rule of ``fraglab/ptx/nan.py`` and ``fraglab/ptx/ops_float.py``: NaN results (canonical
f32/f16/bf16, f64 payload propagation and its operand order), min/max of +-0, .ftz flushing of
results that are subnormal before rounding, div.approx.f32 for |b| > 2^126, testp.normal of
zero, f64 directed rounding and fma (exact, subnormals and overflow included) and the upper-word
rcp/rsqrt.approx.ftz.f64. Every expected value below is the H100's output for those inputs
(recorded on an H100). CPU only."""
from __future__ import annotations

import numpy as np
import pytest

from fraglab import ptx
from ptx_snippets import lane_kernel, run_lanes

HEAD = ".version 8.0\n.target sm_80\n.address_size 64\n"
WIDTH = {"f16": 2, "bf16": 2, "f16x2": 4, "bf16x2": 4, "f32": 4, "f64": 8, "pred": 4}


def lanes(op: str, dst: str, srcs: list, rows: list) -> list:
    """Run ``op d, a, b, ...`` once on a warp, lane i with the operands rows[i] (bit patterns of
    the types `srcs`); the destinations' bits (type `dst`; a predicate as 0/1) per row."""
    reg = lambda t: f"b{8 * WIDTH[t]}"                                 # noqa: E731
    ops = ", ".join(f"%s{i}" for i in range(len(srcs)))
    body = (f"    {op} %p1, {ops};\n    selp.u32 %d0, 1, 0, %p1;" if dst == "pred"
            else f"    {op} %d0, {ops};")
    regs = f"    .reg .pred %p<2>;\n    .reg .b32 %r<4>;\n    .reg .b64 %rd<8>;\n    .reg .{reg(dst)} %d0;"
    text = lane_kernel(HEAD, regs, body, "%d0", reg(dst), srcs=[reg(t) for t in srcs])
    ins = np.zeros((32, len(srcs)), np.uint64)
    for i, row in enumerate(rows):
        ins[i] = [np.uint64(v) for v in row]
    out = run_lanes(ptx.Program(text), ins)
    return [int(v) & ((1 << (8 * WIDTH[dst])) - 1) for v in out[:len(rows)]]


def check(op: str, t: str, cases: list, dst: str | None = None):
    """cases: [(input bits..., H100 output bits)]; every source of type t."""
    rows = [c[:-1] for c in cases]
    got = lanes(op, dst or t, [t] * len(rows[0]), rows)
    want = [c[-1] for c in cases]
    bad = [f"{op} {' '.join(hex(v) for v in r)}: H100 {w:#x}, interpreter {g:#x}"
           for r, w, g in zip(rows, want, got) if w != g]
    assert not bad, "\n".join(bad)


# ---- nan.py rule 2: 16-bit NaNs, abs and neg included ------------------------------------------

@pytest.mark.parametrize("op,t,cases", [
    ("abs.f16", "f16", [(0x7E05, 0x7FFF), (0x7C01, 0x7FFF), (0xFE00, 0x7FFF), (0x8400, 0x0400)]),
    ("neg.f16", "f16", [(0x7E00, 0x7FFF), (0x7FFF, 0x7FFF), (0x3C00, 0xBC00)]),
    ("abs.ftz.f16", "f16", [(0x7D03, 0x7FFF), (0x8001, 0x0000)]),
    ("neg.ftz.f16", "f16", [(0x7C01, 0x7FFF)]),
    ("abs.bf16", "bf16", [(0x7FC5, 0x7FFF), (0x7F81, 0x7FFF)]),
    ("neg.bf16", "bf16", [(0x7FC0, 0x7FFF), (0x7FFF, 0x7FFF), (0x3F80, 0xBF80)]),
    ("abs.f16x2", "f16x2", [(0x8000FC81, 0x00007FFF), (0x7E050200, 0x7FFF0200)]),
    ("neg.f16x2", "f16x2", [(0x7E050200, 0x7FFF8200), (0x7FFF7D03, 0x7FFF7FFF)]),
    ("abs.ftz.f16x2", "f16x2", [(0x7E050200, 0x7FFF0000)]),
    ("neg.ftz.f16x2", "f16x2", [(0x7E050200, 0x7FFF8000)]),
    ("abs.bf16x2", "bf16x2", [(0x8000FF91, 0x00007FFF), (0x7FC08000, 0x7FFF0000)]),
    ("neg.bf16x2", "bf16x2", [(0x7FC50040, 0x7FFF8040)]),
])
def test_half_abs_neg_of_nan_is_canonical(op, t, cases):
    check(op, t, cases)


# ---- nan.py rules 3 and 4: f64 NaN propagation --------------------------------------------------

QN, QN5, ALL1 = 0x7FF8000000000000, 0x7FF8000000000005, 0x7FFFFFFFFFFFFFFF
SN1, SN3, NQN, NSN = 0x7FF0000000000001, 0x7FF4000000000003, 0xFFF8000000000000, 0xFFF2000000000001
INF, NINF = 0x7FF0000000000000, 0xFFF0000000000000


@pytest.mark.parametrize("op", ["add.f64", "add.rz.f64", "sub.f64", "sub.rm.f64", "mul.f64",
                                "mul.rp.f64", "min.f64", "max.f64"])
def test_f64_binary_nan_second_operand_wins_quieted(op):
    check(op, "f64", [(QN, ALL1, ALL1), (QN, QN5, QN5), (QN, SN1, 0x7FF8000000000001),
                      (QN, SN3, 0x7FFC000000000003), (QN, NSN, 0xFFFA000000000001),
                      (SN1, QN, QN), (NSN, SN3, 0x7FFC000000000003), (ALL1, NQN, NQN)])


def test_f64_one_nan_operand_is_quieted_and_keeps_its_sign():
    check("sub.f64", "f64", [(0x0000000000000000, QN, QN), (0, SN1, 0x7FF8000000000001),
                             (QN, NSN, 0xFFFA000000000001)])
    check("sub.rp.f64", "f64", [(0, ALL1, ALL1), (0, QN5, QN5)])
    check("add.f64", "f64", [(INF, NINF, NQN), (NINF, INF, NQN)])       # invalid: 0xFFF8...


def test_f64_fma_nan_order_b_then_c_then_a():
    for op in ("fma.rn.f64", "fma.rp.f64", "mad.rm.f64"):
        check(op, "f64", [(0, NINF, QN5, QN5),                # 0 * inf + NaN: the NaN addend
                          (0, NINF, NSN, 0xFFFA000000000001),
                          (0, QN5, NSN, QN5),                 # b before c
                          (QN5, 0, NSN, 0xFFFA000000000001),  # c before a
                          (0, NINF, 0, NQN)])                 # invalid: 0xFFF8...


def test_f64_div_nan_order_a_then_b():
    check("div.rn.f64", "f64", [(SN1, QN, 0x7FF8000000000001), (QN, ALL1, QN),
                                (NSN, SN3, 0xFFFA000000000001), (0, 0, NQN), (INF, INF, NQN)])


def test_f64_abs_neg_quiet_a_nan_and_keep_its_sign():
    check("abs.f64", "f64", [(SN1, 0x7FF8000000000001), (SN3, 0x7FFC000000000003), (NQN, NQN),
                             (NSN, 0xFFFA000000000001), (0x8000000000000001, 1)])
    check("neg.f64", "f64", [(QN, QN), (ALL1, ALL1), (QN5, QN5), (SN1, 0x7FF8000000000001),
                             (NSN, 0xFFFA000000000001), (1, 0x8000000000000001)])


def test_f32_nan_is_canonical():
    check("add.f32", "f32", [(0x7FA00003, 0x40200000, 0x7FFFFFFF), (0x3F7FFFFF, 0x7FC00000, 0x7FFFFFFF)])
    check("neg.f32", "f32", [(0x7FC00005, 0x7FFFFFFF)])


# ---- min/max of +0 and -0 (PTX ISA 9.7.3.11/12, 9.7.4.7/8: "-0.0 < +0.0 here") -----------------

@pytest.mark.parametrize("op,t,cases", [
    ("max.f32", "f32", [(0x00000000, 0x80000000, 0x00000000), (0x80000000, 0x00000000, 0x00000000),
                        (0x80000000, 0x80000000, 0x80000000)]),
    ("max.NaN.f32", "f32", [(0x00000000, 0x80000000, 0x00000000)]),
    ("min.f32", "f32", [(0x80000000, 0x00000000, 0x80000000), (0x00000000, 0x80000000, 0x80000000),
                        (0x00000000, 0x00000000, 0x00000000)]),
    ("min.ftz.f32", "f32", [(0x80000001, 0x00000001, 0x80000000), (0x807FFFFF, 0x00400000, 0x80000000)]),
    ("max.ftz.f32", "f32", [(0x00000001, 0x80000001, 0x00000000)]),
    ("min.f64", "f64", [(0x8000000000000000, 0, 0x8000000000000000)]),
    ("max.f64", "f64", [(0, 0x8000000000000000, 0)]),
    ("max.NaN.f16", "f16", [(0x0000, 0x8000, 0x0000)]),
    ("min.bf16", "bf16", [(0x0000, 0x8000, 0x8000)]),
    ("max.bf16x2", "bf16x2", [(0x0000FF80, 0x8000FF91, 0x0000FF80)]),
    ("min.ftz.f16x2", "f16x2", [(0x8000FC81, 0x0000FC00, 0x8000FC00), (0x3E0083FF, 0x7E050200, 0x3E008000),
                                (0x83FF0001, 0x00013C00, 0x80000000)]),
])
def test_min_max_order_minus_zero_below_plus_zero(op, t, cases):
    check(op, t, cases)


# ---- .ftz: results subnormal before rounding are flushed ----------------------------------------

@pytest.mark.parametrize("op,t,cases", [
    ("mul.ftz.f32", "f32", [(0x00800000, 0x3F7FFFFF, 0x00000000), (0x80800000, 0x3F7FFFFF, 0x80000000)]),
    ("mul.rn.ftz.sat.f32", "f32", [(0x3F7FFFFF, 0x00800000, 0x00000000)]),
    ("mul.rm.ftz.f32", "f32", [(0x80800000, 0x3F7FFFFF, 0x80000000)]),
    ("mul.rp.ftz.f32", "f32", [(0x00800000, 0x3F7FFFFF, 0x00000000)]),
    ("mul.f32", "f32", [(0x00800000, 0x3F7FFFFF, 0x00800000)]),                 # no .ftz: rounds up
    ("div.rm.ftz.f32", "f32", [(0x80800000, 0x3F800001, 0x80000000)]),
    ("div.rp.ftz.f32", "f32", [(0x00800000, 0x3F800001, 0x00000000)]),
    ("mul.ftz.f16", "f16", [(0x0400, 0x3BFF, 0x0000), (0x8400, 0x3BFF, 0x8000)]),
    ("mul.ftz.f16x2", "f16x2", [(0x0400C100, 0x3BFF8001, 0x00000000), (0x84007C00, 0x3BFF8001, 0x80007FFF),
                                (0x7C008400, 0x80013BFF, 0x7FFF8000)]),
])
def test_ftz_flushes_results_tiny_before_rounding(op, t, cases):
    check(op, t, cases)


# ---- div.approx.f32 for 2^126 < |b| < 2^128 -------------------------------------------------------

@pytest.mark.parametrize("op", ["div.approx.f32", "div.approx.ftz.f32"])
def test_div_approx_huge_divisor(op):
    check(op, "f32", [(0x7F800000, 0x7F7FFFFF, 0x7FFFFFFF), (0xFF800000, 0xFF7FFFFF, 0x7FFFFFFF),
                      (0x7F7FFFFF, 0x7F7FFFFF, 0x00000000), (0x7F7FFFFF, 0xFF7FFFFF, 0x80000000),
                      (0x4B800001, 0x7F7FFFFF, 0x00000000), (0xCB7FFFFF, 0x7F7FFFFF, 0x80000000)])


def test_div_approx_subnormal_divisor_without_ftz():
    check("div.approx.f32", "f32", [(0x00000000, 0x00000001, 0x00000000), (0x007FFFFF, 0x00000001, 0x4AFFFFFE),
                                    (0x3F800000, 0x007FFFFF, 0x7E800001)])


# ---- testp.normal (PTX ISA 9.7.3.1: "positive and negative zero are considered normal numbers") --

def test_testp_normal_of_zero_is_true():
    check("testp.normal.f32", "f32", [(0x00000000, 1), (0x80000000, 1), (0x00000001, 0), (0x00800000, 1),
                                      (0x7F800000, 0), (0x7FC00000, 0)], dst="pred")
    check("testp.normal.f64", "f64", [(0, 1), (0x8000000000000000, 1), (1, 0), (0x0010000000000000, 1)],
          dst="pred")
    check("testp.subnormal.f32", "f32", [(0x00000000, 0), (0x80000001, 1)], dst="pred")


# ---- f64: directed rounding and fma, exact ------------------------------------------------------

@pytest.mark.parametrize("op,t,cases", [
    ("rcp.rm.f64", "f64", [(0x0000000000000001, 0x7FEFFFFFFFFFFFFF)]),
    ("rcp.rp.f64", "f64", [(0x0000000000000001, 0x7FF0000000000000), (0x7FEFFFFFFFFFFFFF, 0x0004000000000001)]),
    ("rcp.rz.f64", "f64", [(0x8000000000000001, 0xFFEFFFFFFFFFFFFF), (0x4004000000000000, 0x3FD9999999999999),
                           (0x7FEFFFFFFFFFFFFF, 0x0004000000000000)]),
    ("sqrt.rz.f64", "f64", [(0x3FF8000000000000, 0x3FF3988E1409212E)]),
    ("sqrt.rp.f64", "f64", [(0x3FF8000000000000, 0x3FF3988E1409212F)]),
    ("sqrt.rm.f64", "f64", [(0x000FFFFFFFFFFFFF, 0x1FFFFFFFFFFFFFFE), (0x4004000000000000, 0x3FF94C583ADA5B52)]),
    ("div.rm.f64", "f64", [(0x0000000000000001, 0x800FFFFFFFFFFFFF, 0xBCB0000000000002),
                           (0x0000000000000001, 0x3FF8000000000000, 0x0000000000000000),
                           (0x0000000000000001, 0xC004000000000000, 0x8000000000000001)]),
    ("div.rp.f64", "f64", [(0x0000000000000001, 0x7FEFFFFFFFFFFFFF, 0x0000000000000001),
                           (0x0000000000000001, 0x3FEFFFFFFFFFFFFF, 0x0000000000000002)]),
    ("div.rz.f64", "f64", [(0x8000000000000001, 0x3FF0000000000001, 0x8000000000000000)]),
    ("sub.rm.f64", "f64", [(0x7FEFFFFFFFFFFFFF, 0xFFEFFFFFFFFFFFFF, 0x7FEFFFFFFFFFFFFF)]),
    ("sub.rn.f64", "f64", [(0x7FEFFFFFFFFFFFFF, 0xFFEFFFFFFFFFFFFF, 0x7FF0000000000000)]),
    ("mul.rz.f64", "f64", [(0x0000000000000001, 0x3FEFFFFFFFFFFFFF, 0x0000000000000000)]),
    ("mul.rp.f64", "f64", [(0x0000000000000001, 0x3FEFFFFFFFFFFFFF, 0x0000000000000001)]),
    ("mul.rm.f64", "f64", [(0x000FFFFFFFFFFFFF, 0x3FE0000000000000, 0x0007FFFFFFFFFFFF)]),
    ("fma.rn.f64", "f64", [(0x000FFFFFFFFFFFFF, 0x3FF8000000000000, 0x000FFFFFFFFFFFFF, 0x0023FFFFFFFFFFFF),
                           (0xFFEFFFFFFFFFFFFF, 0xFFEFFFFFFFFFFFFF, NINF, NINF),
                           (0, 0xFFEFFFFFFFFFFFFF, 0x3FF8000000000000, 0x3FF8000000000000)]),
    ("fma.rz.f64", "f64", [(0x0010000000000000, 0xFFEFFFFFFFFFFFFF, 0x3FF0000000000001, 0xC007FFFFFFFFFFFE)]),
    ("mad.rm.f64", "f64", [(0, 0xFFEFFFFFFFFFFFFF, 0, 0x8000000000000000)]),        # -0 + +0 toward -inf
    ("fma.rp.f64", "f64", [(0, 0xFFEFFFFFFFFFFFFF, 0, 0)]),
])
def test_f64_directed_rounding_and_fma_exact(op, t, cases):
    check(op, t, cases)


# ---- rcp/rsqrt.approx.ftz.f64: from the upper word, lower word zero -----------------------------

def test_upper_word_f64_approximations():
    # NaN -> 0x7FFFFFFF00000000; an upper word 0x7FF00000 is +inf; subnormals flushed; exact
    # values whose upper word is the H100's (elsewhere within one unit of it: a bound, see
    # difftest.rules)
    check("rcp.approx.ftz.f64", "f64", [(QN, 0x7FFFFFFF00000000), (NSN, 0x7FFFFFFF00000000), (SN1, 0),
                                        (0x000FFFFFFFFFFFFF, INF), (0x3FF8000000000000, 0x3FE5555500000000),
                                        (0x4004000000000000, 0x3FD9999900000000),
                                        (0x3FF0000000000001, 0x3FF0000000000000),
                                        (0x7FEFFFFFFFFFFFFF, 0), (0x0010000000000000, 0x7FD0000000000000)])
    check("rsqrt.approx.ftz.f64", "f64", [(NINF, 0x7FFFFFFF00000000), (0xBFF0000000000000, 0x7FFFFFFF00000000),
                                          (0x800FFFFFFFFFFFFF, NINF), (SN1, 0),
                                          (0x3FE0000000000000, 0x3FF6A09E00000000),
                                          (0x7FEFFFFFFFFFFFFF, 0x1FF0000000000000)])


# ---- exact.exact64 against Python fractions (no GPU needed) ------------------------------------

def _round_fraction(v, mode: str) -> float:
    """A Fraction rounded to float64 in `mode`, by its neighbours (Fraction -> float is correctly
    rounded to nearest)."""
    import math
    from fractions import Fraction
    big = float(np.finfo(np.float64).max)
    try:
        f = float(v)
    except OverflowError:
        f = math.inf if v > 0 else -math.inf
    if mode == "rn" or v == 0 or (math.isfinite(f) and Fraction(f) == v):
        return f
    if math.isinf(f):
        lo, hi = (big, math.inf) if v > 0 else (-math.inf, -big)
    elif Fraction(f) < v:
        lo, hi = f, math.nextafter(f, math.inf)
    else:
        lo, hi = math.nextafter(f, -math.inf), f
    return {"rm": lo, "rp": hi, "rz": lo if v > 0 else hi}[mode]


def test_exact64_is_correctly_rounded_in_every_mode():
    from fractions import Fraction

    from fraglab.ptx import exact
    rng = np.random.default_rng(5)
    bits = rng.integers(0, 2**63, 240, dtype=np.uint64) | (rng.integers(0, 2, 240, dtype=np.uint64) << 63)
    x = bits.view(np.float64)
    x = np.where(np.isfinite(x), x, 1.5)
    x[:60] = np.ldexp(rng.uniform(1, 2, 60), rng.integers(-30, 30, 60)) * rng.choice([-1, 1], 60)
    x[60:70] = [0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 1.0, 3.0,
                2.0 ** -1060, -(2.0 ** 1000)]
    a, b, c = x[:80], x[80:160], x[160:]
    F = [[Fraction(float(v)) for v in arr] for arr in (a, b, c)]
    want_of = {"add": lambda i: F[0][i] + F[1][i], "mul": lambda i: F[0][i] * F[1][i],
               "fma": lambda i: F[0][i] * F[1][i] + F[2][i],
               "div": lambda i: F[0][i] / F[1][i] if F[1][i] else None,
               "rcp": lambda i: 1 / F[0][i] if F[0][i] else None}
    bad = []
    for mode in ("rn", "rz", "rm", "rp"):
        for kind, want in want_of.items():
            args = {"add": (a, b), "mul": (a, b), "fma": (a, b, c), "div": (a, b), "rcp": (a,)}[kind]
            got = exact.exact64(kind, args, mode)
            for i in range(len(a)):
                v = want(i)
                if v is None or v == 0:
                    continue
                w = _round_fraction(v, mode)
                if got[i] != w:
                    bad.append(f"{kind}.{mode} {[float(y[i]).hex() for y in args]}: {got[i].hex()} != {w.hex()}")
        r = exact.exact64("sqrt", (np.abs(a),), mode)
        for i, v in enumerate(np.abs(a)):
            if v == 0:
                continue
            lo = _round_fraction(Fraction(float(r[i])), "rn")        # the root's neighbours bracket
            below, above = np.nextafter(lo, 0), np.nextafter(lo, np.inf)
            sq = lambda y: Fraction(float(y)) ** 2                        # noqa: E731
            ok = {"rz": sq(lo) <= Fraction(float(v)) < sq(above), "rm": sq(lo) <= Fraction(float(v)) < sq(above),
                  "rp": sq(below) < Fraction(float(v)) <= sq(lo),
                  "rn": (Fraction(float(lo)) + Fraction(float(below))) ** 2 / 4 <= Fraction(float(v))
                  <= (Fraction(float(lo)) + Fraction(float(above))) ** 2 / 4}[mode]
            if not ok:
                bad.append(f"sqrt.{mode} {float(v).hex()}: {r[i].hex()}")
    assert not bad, "\n".join(bad[:20])
