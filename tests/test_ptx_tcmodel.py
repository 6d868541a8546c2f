"""The tensor-core model (fraglab.ptx.tcmodel) on hand-made blocks where it and a correctly
rounded sum disagree. Each expected bit pattern is worked out from the model's rules:
E = the largest exponent among the accumulator and the products' ea + eb (subnormal inputs at the
format's smallest exponent), every term truncated toward zero to a multiple of 2^(E - 25), the
exact sum truncated to f32 (rounded to nearest even for an f16 accumulator)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fraglab.ptx import tcmodel


def _block(prods, c, itype="f16", ctype="f32", var=tcmodel.H100):
    """One output element: products given as (a, b) pairs, accumulator c."""
    a = np.array([[p[0] for p in prods]], np.float64)
    b = np.array([[p[1]] for p in prods], np.float64)
    return tcmodel.matmul(a, b, np.array([[c]], np.float64), itype, ctype, var)[0, 0]


def _bits32(v):
    return int(np.float32(v).view(np.uint32))


def _bits16(v):
    return int(np.float16(v).view(np.uint16))


def _exact32(prods, c):
    s = sum(a * b for a, b in prods) + c      # exact in float64 for these small cases
    return _bits32(s)


CASES = [
    # 1: 1 + 1.5*2^-24. E = 0, quantum 2^-25: 3 units kept; the sum 1 + 0.75 ulp truncates to 1,
    #    a correctly rounded sum rounds up to 1 + 2^-23.
    ("truncated final", [(1.0, 1.0), (2.0**-12, 1.5 * 2.0**-12)], 0.0, 0x3F800000, 0x3F800001),
    # 2: 1 - 1 + 2^-28: 2^-28 is below the quantum 2^-25 and is dropped before the cancellation:
    #    +0, where the exact sum is 2^-28 (0x31800000).
    ("cancellation", [(1.0, 1.0), (-1.0, 1.0), (2.0**-14, 2.0**-14)], 0.0, 0x00000000, 0x31800000),
    # 3: 1 - 2^-25: kept (one quantum), then truncated to the f32 below 1 (1 - 2^-24); the exact
    #    sum is a tie between 1 - 2^-24 and 1 and goes to the even 1.0.
    ("negative term", [(1.0, 1.0), (-(2.0**-12), 2.0**-13)], 0.0, 0x3F7FFFFF, 0x3F800000),
    # 4: the products' exponents compared before normalising: 1.5 * 1.5 = 2.25 has ea + eb = 0,
    #    so E = 0 and the quantum is 2^-25: of 1.5*2^-25 one unit survives the cancellation of
    #    +-2.25 (result 2^-25 = 0x33000000); exactly: 1.5*2^-25 (0x33400000).
    ("unnormalised exponent", [(1.5, 1.5), (-1.5, 1.5), (2.0**-12, 1.5 * 2.0**-13)], 0.0,
     0x33000000, 0x33400000),
    # 5: f16 subnormal inputs count with exponent -14: 2^-24 * 1 has ea + eb = -14, so E = -14 and
    #    the quantum 2^-39 drops 2^-20 * 2^-20 = 2^-40 (ea + eb = -28): 2^-24 (0x33800000), where
    #    the exact 2^-24 + 2^-40 is representable (0x33800080).
    ("subnormal inputs", [(2.0**-24, 1.0), (2.0**-20, 2.0**-20)], 0.0, 0x33800000, 0x33800080),
    # 6: wide spread (bf16): accumulator 2^100, product 1.75*2^76 = 3.5 quanta (2^75): 3 kept, the
    #    sum 2^100 + 0.75 ulp truncates to 2^100; exactly 0.875 ulp rounds up.
    ("wide exponent range", [(1.75 * 2.0**38, 2.0**38)], 2.0**100, 0x71800000, 0x71800001),
]


@pytest.mark.parametrize("name,prods,c,model_bits,exact_bits", CASES, ids=[c[0] for c in CASES])
def test_block_rules_by_hand(name, prods, c, model_bits, exact_bits):
    itype = "bf16" if name == "wide exponent range" else "f16"
    assert _bits32(_block(prods, c, itype)) == model_bits
    assert _exact32(prods, c) == exact_bits
    with tcmodel.model("exact"):
        a = np.array([[p[0] for p in prods]]); b = np.array([[p[1]] for p in prods])
        old = tcmodel.matmul(a, b, np.array([[c]]), itype, "f32")[0, 0]
    assert _bits32(old) == exact_bits


def test_f16_accumulator_rounds_to_nearest_after_truncating():
    # 1 + 2^-11 (half an f16 ulp) + 2^-30: 2^-30 is below the quantum 2^-25 and is dropped, so the
    # tie goes to the even 1.0 (0x3C00); the exact sum is above the tie: 1 + 2^-10 (0x3C01).
    prods = [(1.0, 1.0), (2.0**-11, 1.0), (2.0**-15, 2.0**-15)]
    assert _bits16(_block(prods, 0.0, "f16", "f16")) == 0x3C00
    assert _bits16(np.float16(1.0 + 2.0**-11 + 2.0**-30)) == 0x3C01


def test_blocks_are_rounded_in_turn():
    # 32 f16 products in two blocks of 16: each adds 3 * 2^-25 to 1 and is truncated back to 1;
    # one rounding of the exact sum 1 + 6*2^-25 = 1 + 1.5 ulp gives 1 + 2^-22.
    a = np.zeros((1, 32)); b = np.zeros((32, 1))
    a[0, 0], b[0, 0] = 1.0, 1.0
    a[0, 1], b[1, 0] = 2.0**-12, 1.5 * 2.0**-12
    a[0, 16], b[16, 0] = 2.0**-12, 1.5 * 2.0**-12
    got = tcmodel.matmul(a, b, np.zeros((1, 1)), "f16", "f32")[0, 0]
    assert _bits32(got) == 0x3F800000
    assert _bits32(1.0 + 6 * 2.0**-25) == 0x3F800002


def test_signed_zeros_and_specials():
    assert not np.signbit(_block([(-0.0, 1.0), (0.0, -1.0)], -0.0))      # every term -0: +0
    assert not np.signbit(_block([(1.0, 1.0), (-1.0, 1.0)], -0.0))        # cancellation: +0
    nan = _block([(np.inf, 1.0), (-np.inf, 1.0)], 0.0)
    assert np.float32(nan).view(np.uint32) == 0x7FFFFFFF
    assert _block([(np.inf, 1.0)], 1.0) == np.inf
    # truncation past the largest f32 gives infinity (bf16: 1.5*2^127 twice)
    assert _block([(1.5 * 2.0**64, 2.0**63), (1.5 * 2.0**64, 2.0**63)], 0.0, "bf16") == np.inf


def test_tf32_blocks_of_eight_and_variants_disagree():
    rng = np.random.default_rng(3)
    A = (rng.standard_normal((16, 8)).astype(np.float32).view(np.uint32) & 0xFFFFE000).view(np.float32)
    B = (rng.standard_normal((8, 8)).astype(np.float32).view(np.uint32) & 0xFFFFE000).view(np.float32)
    C = rng.standard_normal((16, 8)).astype(np.float32)
    outs = {k: tcmodel.matmul(A.astype(float), B.astype(float), C.astype(float), "tf32", "f32", v)
            for k, v in tcmodel.NEIGHBOURS.items()}
    exact = (A.astype(float) @ B + C).astype(np.float32)
    assert (outs["h100"].astype(np.float32) != exact).any()
    assert (outs["h100"] != outs["round_nearest"]).any()


# ---- the H200's own bits (python -m fraglab.ptx.difftest.hw, tests/data/tc_h200_zero_sign.npz) ----
# Written by difftest.tc.regression_record from an H200 run: for each (form, input class) where
# the model gave -0 and the GPU +0 (cancellation into an f16 accumulator; bf16/tf32 subnormal
# products below the f32 range; f16 subnormal products below the f16 range), 48 of those
# elements and 16 others, as the row of A, the column of B, C and the GPU's D, in raw bits.

_H200 = Path(__file__).parent / "data" / "tc_h200_zero_sign.npz"


def _h200():
    z = np.load(_H200)
    return z, sorted({k.rsplit("|", 1)[0] for k in z.files})


def _vals(bits, t):
    from fraglab.dtypes import from_bf16
    if t == "f16":
        return bits.view(np.float16).astype(np.float64)
    if t == "bf16":
        return from_bf16(bits).astype(np.float64)
    return bits.view(np.float32).astype(np.float64)


def _form(key):
    from fraglab.ptx.difftest import tc as T
    return next(f for f in T.FORMS if f[0] == key.split("|")[0])


@pytest.mark.parametrize("key", _h200()[1])
def test_zero_results_are_positive_as_on_the_h200(key):
    z, _ = _h200()
    _, _, _, t, ct = _form(key)
    a, b = _vals(z[key + "|a"], t), _vals(z[key + "|b"], t)
    c, want = _vals(z[key + "|c"], ct), z[key + "|d"]
    got = tcmodel.matmul(a[:, None, :], b[:, :, None], c[:, None, None], t, ct)[:, 0, 0]
    got = got.astype(np.float16 if ct == "f16" else np.float32).view(want.dtype)
    assert (got == want).all(), [(hex(g), hex(w)) for g, w in zip(got, want) if g != w][:4]
    assert (want == 0).sum() >= 48                       # the cases that used to come out -0


@pytest.mark.parametrize("key", ["mma.m16n8k8.f16.f16|cancel", "mma.m16n8k8.f32.bf16|subnormal"])
def test_the_interpreter_replays_the_h200_kernel_bit_for_bit(key):
    from fraglab.ptx.difftest import tc as T
    z, _ = _h200()
    test = T.Test(_form(key), key.split("|")[1], 256, 1)  # the recorded run's inputs (256 instances)
    got = T.unpack(test.form, T.run_interp(test, 1), 1)[0]
    assert (got == z[key + "|inst0"]).all()


def test_a_sum_of_zeros_is_plus_zero_as_the_h200_gave():
    """The second H200 run's 'zeros' inputs (rows of signed zeros, C = -0, every term -0): the GPU
    gave +0 where IEEE's sum of zeros is -0 (its recorded examples, f16 and bf16 inputs)."""
    import json
    from fraglab import tools
    rec = json.load(open(tools.REPO_ROOT / "book/data/appendix_ptx_interpreter/"
                         "tensor_cores_h200_confirm.json"))
    seen = 0
    for t in rec["tests"]:
        if t["class"] != "zeros" or "tf32" in t["form"]:
            continue
        parts = t["form"].split(".")
        acc, ab = parts[-2], parts[-1]
        for e in t["examples"]:
            bits = np.array([int(x, 16) for x in e["a_row"] + e["b_col"]], np.uint32)
            vals = (bits.astype(np.uint16).view(np.float16).astype(np.float64) if ab == "f16"
                    else (bits << 16).view(np.float32).astype(np.float64))
            k = len(e["a_row"])
            cb = int(e["c"], 16)
            c = (np.array([cb], np.uint16).view(np.float16) if acc == "f16"
                 else np.array([cb], np.uint32).view(np.float32)).astype(np.float64)
            got = tcmodel.matmul(vals[:k][None, :], vals[k:][:, None], c[None, :], ab, acc)[0, 0]
            want = int(e["gpu"], 16)
            have = (int(np.float16(got).view(np.uint16)) if acc == "f16"
                    else int(np.float32(got).view(np.uint32)))
            assert have == want, (t["form"], e)
            seen += 1
    assert seen >= 10


WMMA_TF32 = r"""
#include <mma.h>
using namespace nvcuda;
extern "C" __global__ void k(const float* a, const float* b, const float* c, float* d) {
    wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> fc;
    wmma::load_matrix_sync(fa, a, 8);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::load_matrix_sync(fc, c, 16, wmma::mem_row_major);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(d, fc, 16, wmma::mem_row_major);
}
"""


def test_wmma_tf32_is_two_instructions_of_four_products():
    """ptxas lowers wmma.mma m16n16k8 with tf32 inputs to HMMA.1684 pairs along K (sm_80 and
    sm_90): two blocks of 4 products, the first rounded to f32 and fed to the second, where
    mma.m16n8k8 is one block of 8. The interpreter runs it that way; one block of 8 gives other
    bits on these inputs (the H200 differed from it in 249 of 1,024 elements)."""
    from fraglab import toolchain
    from fraglab.ptx.program import Program, launch
    build = toolchain.compile("wmma_tf32.cu", "sm_80", source=WMMA_TF32)
    assert build.sass().count("HMMA.1684.F32.TF32") == 4
    rng = np.random.default_rng(7)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((16, 8), (8, 16), (16, 16)))
    d = np.full((16, 16), np.nan, np.float32)
    launch(Program(build.ptx), "k", 1, 32, (a, b, c, d), echo_printf=False)
    tf32 = [(x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
            for x in (a, b)]
    first = tcmodel.matmul(tf32[0][:, :4], tf32[1][:4], c.astype(np.float64), "tf32", "f32")
    two = tcmodel.matmul(tf32[0][:, 4:], tf32[1][4:], first, "tf32", "f32")
    one = tcmodel.matmul(tf32[0], tf32[1], c.astype(np.float64), "tf32", "f32")
    assert (d.astype(np.float64) == two).all()
    assert (one != two).any()
