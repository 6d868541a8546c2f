"""Topic 03_permutation_and_quad_reduction: layouts and emulator (anywhere), wrapper checks
(anywhere / GPU), the problems (anywhere, with the emulator), the kernels through their problems
(GPU). The SASS tests are in test_03_permutation_and_quad_reduction_sass.py.

The GPU tests never assume where an element sits in a fragment: references are computed from
the matrices themselves (NumPy float64 A @ B, or the accumulator values the kernel was given).
The emulator (which does use the bit layouts) is checked against NumPy here, and on the GPU it
must agree bit for bit with the kernels, which also checks the layouts.
"""
import dataclasses
import re

import numpy as np
import pytest

from fraglab import fragments, tools, tracer, warp
from fraglab import permutation_and_quad_reduction as pq

REDUCE_CHOICES = [(s, p, m) for s in pq.SHAPES for p, m in pq.problems.reduce_choices(s)]
FLT_MAX = float(np.finfo(np.float32).max)
PROBLEM_CASES = [(name, case) for name, p in pq.PROBLEMS.items() for case in p.cases]
PROBLEM_IDS = [f"{name}-{case}" for name, case in PROBLEM_CASES]


def random_tiles(rng, n, shape, dtype=np.float32):
    return rng.standard_normal((n, *shape)).astype(dtype)


# =================================================================================================
# Layouts
# =================================================================================================

def test_16x16_spec_is_the_documented_m16n8k16_layout():
    lay = pq.layout_from_spec(pq.SPECS[(16, 16)], (16, 16))
    np.testing.assert_array_equal(lay, fragments.wmma_16x16_accumulator())
    np.testing.assert_array_equal(lay, warp.accumulator_16x16_sm80())
    assert pq.SPECS[(16, 16)] == 0xB38210A9


def test_the_kernels_default_codes_are_the_specs():
    """kernels/03_...cu spells the codes as FRAGLAB_SPEC_<M>X<N>: the same numbers as SPECS."""
    text = (tools.KERNELS_DIR / f"{pq.KERNELS}.cu").read_text()
    found = {tuple(map(int, k.split("X"))): int(v, 16)
             for k, v in re.findall(r"#define FRAGLAB_SPEC_(\d+X\d+) (0x[0-9A-Fa-f]+)u", text)}
    assert found == pq.SPECS


def test_32x8_and_8x32_specs_follow_their_formulas():
    lane, i = warp.LANES[:, None], np.arange(8)[None, :]
    g, t = lane // 4, lane % 4
    lay = pq.layout_from_spec(pq.SPECS[(32, 8)], (32, 8))
    np.testing.assert_array_equal(lay[..., 0], np.broadcast_to(g + 8 * (i >> 1), (32, 8)))
    np.testing.assert_array_equal(lay[..., 1], np.broadcast_to(2 * t + (i & 1), (32, 8)))
    # 8x32 is 32x8 transposed
    np.testing.assert_array_equal(pq.layout_from_spec(pq.SPECS[(8, 32)], (8, 32)), lay[..., ::-1])


@pytest.mark.parametrize("shape", pq.SHAPES)
def test_spec_round_trip_and_coverage(shape):
    lay = pq.layout_from_spec(pq.SPECS[shape], shape)
    warp.validate_layout(lay, shape)              # every element held exactly once
    assert pq.spec_from_layout(lay, shape) == pq.SPECS[shape]


@pytest.mark.parametrize("shape", pq.SHAPES)
def test_specs_agree_with_the_layouts_traced_on_the_h100(shape):
    """Chapter 1's recording (fraglab/layouts/sm_90.json, traced through load_matrix_sync and
    through mma_sync on an H100) against the bit layouts read here from the SASS."""
    traced = tracer.recorded_layout(f"acc_{shape[0]}x{shape[1]}x16_f32", "sm_90")
    np.testing.assert_array_equal(traced, pq.layout_from_spec(pq.SPECS[shape], shape))
    assert pq.spec_from_layout(traced, shape) == pq.SPECS[shape]


def test_spec_from_layout_rejects_layouts_that_are_not_bit_layouts():
    lay = warp.accumulator_16x16_sm80().copy()
    lay[[3, 5], 0] = lay[[5, 3], 0]               # swap two elements: still a valid layout
    warp.validate_layout(lay, (16, 16))
    with pytest.raises(ValueError, match="not a bit layout"):
        pq.spec_from_layout(lay, (16, 16))
    with pytest.raises(ValueError, match="one to one"):
        pq.layout_from_spec(0x438210A9, (16, 16))   # a 32x8 code for a 16x16 tile
    with pytest.raises(ValueError, match="shape must be one of"):
        pq.layout_from_spec(pq.SPECS[(16, 16)], (16, 8))


# =================================================================================================
# Emulator: Fig. 2 and Algorithm 3
# =================================================================================================

def test_fig2_gathers_one_row_per_register_half():
    lay = warp.accumulator_16x16_sm80()
    row_of = warp.to_fragment(np.repeat(np.arange(16)[:, None], 16, axis=1), lay)
    before = row_of.copy()
    after = pq.permute_fig2(row_of)
    g = warp.LANES // 4
    # before: x[0,1] and x[4,5] are row g, x[2,3] and x[6,7] row g+8 (scattered)
    np.testing.assert_array_equal(before[:, [0, 1, 4, 5]], np.repeat(g[:, None], 4, axis=1))
    # after: x[0..3] row g, x[4..7] row g+8
    np.testing.assert_array_equal(after[:, :4], np.repeat(g[:, None], 4, axis=1))
    np.testing.assert_array_equal(after[:, 4:], np.repeat(g[:, None] + 8, 4, axis=1))
    np.testing.assert_array_equal(pq.permute_fig2(after), before)   # a swap undoes itself
    np.testing.assert_array_equal(row_of, before)                  # the input is left alone


def test_quad_masks_are_the_papers():
    assert [int(m) for m in pq.QUAD_MASKS[:8]] == [0xF] * 4 + [0xF0] * 4
    assert int(pq.QUAD_MASKS[31]) == 0xF0000000
    for lane in range(32):
        assert int(pq.QUAD_MASKS[lane]) == 0xF << ((lane // 4) * 4)


@pytest.mark.parametrize("op", ["max", "min", "sum"])
@pytest.mark.parametrize("mask", ["quad", "full"])
def test_quad_reduce_matches_numpy(op, mask, rng):
    tiles = random_tiles(rng, 64, (16, 16))
    frag = pq.tiles_to_fragments(tiles)                       # (32, 8, 64)
    vals = pq.quad_reduce(pq.permute_fig2(frag), op, mask)    # (32, 2, 64)
    ref_rows, _ = pq.reference(tiles, op)                     # (64, 16)
    scale = np.abs(tiles).sum(axis=2)                         # float32 rounding scales with it
    g = warp.LANES // 4
    for half in (0, 1):                                      # every lane of the quad has it
        want = ref_rows[:, g + 8 * half].T                    # (32, 64)
        assert np.all(np.abs(vals[:, half] - want) <= 1e-5 * scale[:, g + 8 * half].T)


def test_quad_reduce_takes_any_associative_operator(rng):
    m = rng.integers(0, 2**16, size=(16, 16), dtype=np.int64)
    frag = pq.permute_fig2(warp.to_fragment(m, warp.accumulator_16x16_sm80()))
    vals = pq.quad_reduce(frag, np.bitwise_xor)
    want = np.bitwise_xor.reduce(m, axis=1)
    g = warp.LANES // 4
    np.testing.assert_array_equal(vals[:, 0], want[g])
    np.testing.assert_array_equal(vals[:, 1], want[g + 8])


def test_quad_reduce_without_permutation_is_wrong():
    """Algorithm 3 on the raw fragment mixes rows g and g+8: the swap (or reading the right
    registers) is needed."""
    m = np.arange(256, dtype=np.float64).reshape(16, 16)
    frag = warp.to_fragment(m, warp.accumulator_16x16_sm80())
    g = warp.LANES // 4
    assert not np.array_equal(pq.quad_reduce(frag, "max")[:, 0], m.max(axis=1)[g])
    np.testing.assert_array_equal(pq.quad_reduce(pq.permute_fig2(frag), "max")[:, 0],
                                  m.max(axis=1)[g])


def test_member_mask_rules_in_the_emulator():
    v = np.arange(32.0)
    # the paper's masks are legal: each lane is in its own mask, and every lane its mask names
    # passes the same mask
    warp.shfl_xor_sync(pq.QUAD_MASKS, v, 1)
    # a lane outside its own mask, or masks that overlap without agreeing, are not
    bad = pq.QUAD_MASKS.copy()
    bad[5] = 0xF
    with pytest.raises(warp.WarpError, match="lane 5"):
        warp.shfl_xor_sync(bad, v, 1)
    bad = pq.QUAD_MASKS.copy()
    bad[0] = 0xFF
    with pytest.raises(warp.WarpError, match="same mask"):
        warp.shfl_xor_sync(bad, v, 1)
    # reading outside the quad with a quad mask is refused; the full mask allows it
    with pytest.raises(warp.WarpError, match="not in its own mask"):
        warp.shfl_xor_sync(pq.QUAD_MASKS, v, 4)
    np.testing.assert_array_equal(warp.shfl_xor_sync(warp.FULL_MASK, v, 4), v.astype(int) ^ 4)


# =================================================================================================
# Emulator: every shape, rows and columns, both masks
# =================================================================================================

@pytest.mark.parametrize("shape", pq.SHAPES)
@pytest.mark.parametrize("op", ["max", "min", "sum"])
def test_reduce_tiles_matches_numpy(shape, op, rng):
    tiles = random_tiles(rng, 50, shape)
    ref_rows, ref_cols = pq.reference(tiles, op)
    for _, permute, mask in [v for v in REDUCE_CHOICES if v[0] == shape]:
        rows, cols = pq.reduce_tiles(tiles, op, permute, mask)
        assert rows.shape == (50, shape[0]) and cols.shape == (50, shape[1])
        scale_r = np.abs(tiles).sum(axis=2)
        scale_c = np.abs(tiles).sum(axis=1)
        assert np.all(np.abs(rows - ref_rows) <= 1e-5 * scale_r)
        assert np.all(np.abs(cols - ref_cols) <= 1e-5 * scale_c)
        if op != "sum":                                   # max/min pick an element: exact
            np.testing.assert_array_equal(rows, ref_rows)
            np.testing.assert_array_equal(cols, ref_cols)


@pytest.mark.parametrize("shape", pq.SHAPES)
@pytest.mark.parametrize("op", pq.OPS)
def test_all_variants_agree_on_edge_cases(shape, op, rng):
    tiles = pq.edge_tiles(shape, rng)
    variants = [v for v in REDUCE_CHOICES if v[0] == shape]
    first = pq.reduce_tiles(tiles, op, variants[0][1], variants[0][2])
    for _, permute, mask in variants[1:]:
        got = pq.reduce_tiles(tiles, op, permute, mask)
        np.testing.assert_array_equal(got[0], first[0])
        np.testing.assert_array_equal(got[1], first[1])


@pytest.mark.parametrize("shape", pq.SHAPES)
@pytest.mark.parametrize("op", ["max", "min", "sum"])
def test_edge_cases_match_the_order_free_reference(shape, op, rng):
    tiles = pq.edge_tiles(shape, rng)
    rows, cols = pq.reduce_tiles(tiles, op)
    ref_rows, ref_cols = pq.reference(tiles, op)
    if op == "sum":   # float32 overflows where float64 does not: compare where float64 fits
        t64 = tiles.astype(np.float64)
        for got, ref, axis in ((rows, ref_rows, 2), (cols, ref_cols, 1)):
            with np.errstate(invalid="ignore", over="ignore"):
                scale = np.abs(t64).sum(axis=axis)
            fits = np.abs(scale) < 1e38
            assert np.all(np.abs(got[fits] - ref[fits]) <= 1e-5 * scale[fits])
            assert np.all(np.isinf(got[np.isinf(ref)]) | np.isnan(got[np.isinf(ref)]))
        assert rows[6, 5] == np.inf and np.isnan(rows[7, 6])
    else:
        np.testing.assert_array_equal(rows, ref_rows)
        np.testing.assert_array_equal(cols, ref_cols)
    if op == "max":
        assert rows[0, 1] == -np.inf                      # a row of -inf
        assert not np.isnan(rows[1, 2])                   # fmaxf drops the NaN ...
        assert np.isnan(rows[2, 0])                       # ... unless all are NaN
        assert rows[4, 3] == 7.0 and rows[5, 4] == 0.0 and rows[9, 7] == FLT_MAX
    if op == "sum":
        assert rows[0, 1] == -np.inf


def test_max_cmp_depends_on_where_the_nan_is():
    """a > b ? a : b keeps b when the comparison fails: a NaN arriving as b wins, as a loses."""
    first = pq.problems.nan_tile("first")   # lane 0, x[0]: the very first left operand
    last = pq.problems.nan_tile("last")     # lane 3, x[5]: the last right operand, all the way down
    r_first, _ = pq.reduce_tiles(first, "max_cmp")
    r_last, _ = pq.reduce_tiles(last, "max_cmp")
    assert r_first[0, 0] == 15.0          # the NaN lost at once
    assert np.isnan(r_last[0, 0])         # the NaN won and travelled through the shuffles
    np.testing.assert_array_equal(pq.reduce_tiles(first, "max")[0][0, 0], 15.0)
    np.testing.assert_array_equal(pq.reduce_tiles(last, "max")[0][0, 0], 14.0)  # fmaxf: no NaN


def test_bf16_conversion(rng):
    x = np.concatenate([rng.standard_normal(1000) * 10.0 ** rng.integers(-30, 30, 1000),
                        [0.0, -0.0, np.inf, -np.inf, 1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8]])
    x = x.astype(np.float32)
    back = pq.from_bf16(pq.to_bf16(x))
    np.testing.assert_allclose(back, x, rtol=2**-8)
    assert back[-3] == 1.0 and back[-2] == 1.0 and back[-1] == 1.0 + 4 * 2**-8  # ties to even
    assert np.isnan(pq.from_bf16(pq.to_bf16(np.float32(np.nan))))
    ints = np.arange(-256, 257, dtype=np.float32)
    np.testing.assert_array_equal(pq.from_bf16(pq.to_bf16(ints)), ints)


# =================================================================================================
# Wrapper arguments that need no GPU
# =================================================================================================

@pytest.mark.parametrize("call, exc, msg", [
    (lambda: pq.reduce_acc_kernel((16, 16), "mean"), ValueError, "'max', 'min', 'sum', 'max_cmp'"),
    (lambda: pq.mma_reduce_kernel((16, 16), "f16", "max_cmp"), ValueError, "'max', 'min', 'sum', got"),
    (lambda: pq.reduce_acc_kernel((16, 8), "max"), ValueError, "shape must be one of"),
    (lambda: pq.reduce_acc_kernel((32, 8), "max", False), ValueError, "16x16 tiles only"),
    (lambda: pq.reduce_acc_kernel((16, 16), "max", True, "quad8"), ValueError, "'group', 'full'"),
    (lambda: pq.reduce_acc_kernel((16, 16), "max", 1), TypeError, "permute"),
    (lambda: pq.mma_reduce_kernel((16, 16), "tf32", "max"), ValueError, "'f16', 'bf16'"),
    (lambda: pq.rowmax_kernel("smem"), ValueError, "'shared', 'quadmask', 'fullmask'"),
    (lambda: pq.quad_reduce(np.zeros((32, 4)), "max"), ValueError, r"\(32, 8\)"),
    (lambda: pq.quad_reduce(np.zeros((32, 8)), "avg"), ValueError, "'max', 'min', 'sum'"),
    (lambda: pq.quad_reduce(np.zeros((32, 8)), "max", "half"), ValueError, "quad"),
    (lambda: pq.reduce_lines(np.zeros((32, 8)), "max", (16, 16), "diag"), ValueError, "rows"),
    (lambda: pq.reference(np.zeros((1, 16, 16)), "max_cmp"), ValueError, "order"),
])
def test_bad_names_are_rejected(call, exc, msg):
    with pytest.raises(exc, match=msg):
        call()


@pytest.mark.parametrize("call", [
    lambda: pq.reduce_accumulators(np.zeros((4, 16, 16), np.float32), "avg"),
    lambda: pq.mma_reduce(np.zeros((4, 16, 16), np.float16), np.zeros((4, 16, 16), np.float16),
                          "max_cmp"),
])
def test_wrappers_reject_unknown_operators_first(call):
    with pytest.raises(ValueError, match="'max', 'min', 'sum'"):
        call()


@pytest.mark.parametrize("call", [
    lambda f: pq.reduce_accumulators(f(np.zeros((4, 16, 16), np.float32)), "max"),
    lambda f: pq.mma_reduce(f(np.zeros((4, 16, 16), np.float16)),
                            f(np.zeros((4, 16, 16), np.float16)), "max"),
    lambda f: pq.rowmax(f(np.zeros((4, 16, 16), np.float16)), f(np.zeros((4, 16, 16), np.float16))),
])
def test_wrappers_reject_the_wrong_kind_of_array(call, foreign):
    make, words = foreign
    with pytest.raises(TypeError, match=words):
        call(make)


def test_wrappers_reject_bad_option_names():
    a = np.zeros((4, 16, 16), np.float32)
    with pytest.raises(ValueError, match="'group', 'full'"):
        pq.reduce_accumulators(a, "max", mask="quad4")
    with pytest.raises(ValueError, match="'f16', 'bf16'"):
        pq.mma_reduce(a, a, "max", dtype="f32")
    with pytest.raises(ValueError, match="'shared', 'quadmask'"):
        pq.rowmax(a, a, variant="global")


# =================================================================================================
# The problems, with the emulator standing in for the kernels (no GPU needed)
# =================================================================================================

def _emulated(name):
    """PROBLEMS[name] with its kernel replaced by the emulator (f32 products for A @ B)."""
    def acc(acc, op, permute, mask, **_):
        return pq.problems.lines(*pq.reduce_tiles(acc, op, permute, mask))

    def product(a, b, dtype):          # float64, rounded once to f32 (NumPy's f32 BLAS is not exact)
        with np.errstate(over="ignore", invalid="ignore"):
            return (pq.problems.as_float64(a, dtype) @ pq.problems.as_float64(b, dtype)).astype(np.float32)

    def mma(a, b, op, dtype, saturate=False, **_):
        out = pq.problems.lines(*pq.reduce_tiles(product(a, b, dtype), op))
        return np.clip(out, -FLT_MAX, FLT_MAX) if saturate else out

    run = {"reduce_acc": acc, "reduce_acc_numpy": acc, "mma_reduce": mma,
           "rowmax": lambda a, b, **_: product(a, b, "f16").max(axis=2)}[name]
    return dataclasses.replace(pq.PROBLEMS[name], run=run, requires=None)


def test_problems_cover_every_kernel_variant_and_edge_case():
    acc = pq.PROBLEMS["reduce_acc"].cases
    assert {(c.params["shape"], c.params["op"], c.params["permute"], c.params["mask"])
            for c in acc} == {(s, op, p, m) for s, p, m in REDUCE_CHOICES for op in pq.OPS}
    assert {c.params["kind"] for c in acc if c.edge} == {"edges", "nan_first", "nan_last"}
    mma = pq.PROBLEMS["mma_reduce"].cases
    assert {(c.params["shape"], c.params["dtype"], c.params["op"]) for c in mma} == \
        {(s, d, op) for s in pq.SHAPES for d in pq.DTYPES for op in pq.MMA_OPS}
    assert {c.params["kind"] for c in mma} == {"random", "integers", "inf_nan", "f16_max",
                                                "bf16_overflow"}
    assert [c.params["variant"] for c in pq.PROBLEMS["rowmax"].cases] == list(pq.VARIANTS)
    assert pq.FINAL == pq.VARIANTS[-1] == "fullmask"


@pytest.mark.parametrize("name, case", PROBLEM_CASES, ids=PROBLEM_IDS)
def test_the_emulator_passes_every_problem(name, case, rng):
    """Inputs, references and tolerances are consistent: the emulator (in the kernels' order,
    with f32 products) passes every case the GPU tests check the kernels with."""
    _emulated(name).check(case, rng)


def test_a_wrong_result_fails_its_problem(rng):
    """The checks can fail: an unwritten (poisoned) element, and a product missing a term."""
    acc = _emulated("reduce_acc")

    def unwritten(**inputs):
        out = acc.run(**inputs)
        out[3, 5] = np.nan
        return out
    with pytest.raises(AssertionError, match="tile 3 line 5"):
        acc.check("16x16-sum-perm-group-random", rng, run=unwritten)
    mma = _emulated("mma_reduce")

    def short(a, b, **inputs):
        return mma.run(a[..., :15], b[:, :15, :], **inputs)
    for case in ("32x8-f16-sum-random", "16x16-f16-max-integers"):
        with pytest.raises(AssertionError, match="WRONG"):
            mma.check(case, rng, run=short)


# =================================================================================================
# GPU: the kernels
# =================================================================================================

def _cp():
    import cupy
    return cupy


@pytest.mark.gpu
@pytest.mark.parametrize("name, case", PROBLEM_CASES, ids=PROBLEM_IDS)
def test_gpu_kernels_match_their_references(name, case, rng):
    """Every kernel through its Problem (fraglab/permutation_and_quad_reduction/problems.py),
    outputs poisoned first: reduce_acc_* bit for bit against the emulator (every shape x operator
    x permutation x mask, random and edge tiles, NaN positions for max_cmp) and within 1e-5 of
    float64 NumPy; mma_reduce_* (f16, bf16) against float64 NumPy, exactly on small integers and
    f16's largest values, with -inf/NaN inputs and bf16 products beyond f32's range; rowmax_*
    all three ways."""
    supported, why = pq.PROBLEMS[name].supported(case)     # bf16 needs sm_80
    if supported:
        pq.PROBLEMS[name].check(case, rng)
    else:
        pytest.skip(why)


@pytest.mark.gpu
def test_gpu_rowmax_variants_agree(rng):
    """The same accumulator: the same maxima, bit for bit, whichever variant (and as mma_reduce)."""
    cp = _cp()
    inputs = pq.PROBLEMS["rowmax"].inputs(rng, variant="shared")
    a, b = cp.asarray(inputs["a"]), cp.asarray(inputs["b"])
    maxima = {v: pq.rowmax(a, b, v).get() for v in pq.VARIANTS}
    maxima["mma_reduce max"] = pq.mma_reduce(a, b, "max")[0].get()
    for v, got in maxima.items():
        msg = warp.format_diff(got, maxima["shared"], equal_nan=True, index_names=("tile", "row"))
        assert not msg, f"rowmax {v} vs shared:\n{msg}"


@pytest.mark.gpu
@pytest.mark.parametrize("shape", pq.SHAPES)
def test_gpu_accumulator_layout_is_the_bit_layout(shape):
    lay = pq.accumulator_layout_on_gpu(shape)
    warp.validate_layout(lay, shape)
    np.testing.assert_array_equal(lay, pq.layout_from_spec(pq.SPECS[shape], shape),
                                  err_msg=f"{shape}: traced layout differs from SPECS; "
                                          f"spec_from_layout gives it as a code if it is one")


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(32, 8), (8, 32)])
def test_gpu_layout_argument(shape, rng):
    """layout= recompiles for a given (e.g. traced) layout; a wrong one gives wrong rows, which
    shows that the tests above would notice a wrong layout."""
    cp = _cp()
    tiles = cp.asarray(random_tiles(rng, 8, shape))
    traced = pq.accumulator_layout_on_gpu(shape)
    rows, cols = pq.reduce_accumulators(tiles, "sum", layout=traced)
    ref_r, ref_c = pq.reference(tiles.get(), "sum")
    np.testing.assert_allclose(rows.get(), ref_r, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cols.get(), ref_c, rtol=1e-5, atol=1e-5)
    # a wrong but valid bit layout: swap what lane bits 0 and 2 do
    spec = pq.SPECS[shape]
    nib = [(spec >> (4 * k)) & 0xF for k in range(8)]
    nib[0], nib[2] = nib[2], nib[0]
    wrong_spec = sum(v << (4 * k) for k, v in enumerate(nib))
    wrong = pq.layout_from_spec(wrong_spec, shape)
    rows_w, _ = pq.reduce_accumulators(tiles, "sum", layout=wrong)
    assert not np.allclose(rows_w.get(), ref_r, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_gpu_bf16_refused_before_sm80():
    from fraglab import device
    cp = _cp()
    ok, why = device.supports("bf16")
    a = cp.zeros((1, 16, 16), cp.uint16)
    if ok:
        rows, _ = pq.mma_reduce(a, a, "sum", dtype="bf16")
        assert float(rows.sum()) == 0.0
    else:
        with pytest.raises(RuntimeError, match="bf16"):
            pq.mma_reduce(a, a, "sum", dtype="bf16")


@pytest.mark.gpu
@pytest.mark.parametrize("bad, exc, msg", [
    (lambda cp: cp.zeros((4, 16, 16), cp.float64), TypeError, "float32"),
    (lambda cp: cp.zeros((4, 16, 8), cp.float32), ValueError, "shape"),
    (lambda cp: cp.zeros((16, 16), cp.float32), ValueError, "dimensions"),
    (lambda cp: cp.zeros((0, 16, 16), cp.float32), ValueError, "tiles"),
    (lambda cp: cp.zeros((4, 16, 32), cp.float32)[:, :, ::2], ValueError, "contiguous"),
    (lambda cp: cp.zeros(4 * 256 + 1, cp.float32)[1:].reshape(4, 16, 16), ValueError, "32-byte"),
])
def test_gpu_reduce_accumulators_rejects_bad_arrays(bad, exc, msg):
    cp = _cp()
    with pytest.raises(exc, match=msg):
        pq.reduce_accumulators(bad(cp), "max")


@pytest.mark.gpu
def test_gpu_reduce_accumulators_rejects_permute_and_layout_misuse():
    cp = _cp()
    with pytest.raises(ValueError, match="16x16 tiles only"):
        pq.reduce_accumulators(cp.zeros((1, 32, 8), cp.float32), "max", permute=False)
    with pytest.raises(ValueError, match="layout= applies"):
        pq.reduce_accumulators(cp.zeros((1, 16, 16), cp.float32), "max",
                               layout=warp.accumulator_16x16_sm80())
    with pytest.raises(ValueError, match="not a bit layout"):
        lay = pq.layout_from_spec(pq.SPECS[(32, 8)], (32, 8)).copy()
        lay[[0, 1], 0] = lay[[1, 0], 0]
        pq.reduce_accumulators(cp.zeros((1, 32, 8), cp.float32), "max", layout=lay)


@pytest.mark.gpu
@pytest.mark.parametrize("make, exc, msg", [
    (lambda cp: (cp.zeros((2, 16, 16), cp.float32), cp.zeros((2, 16, 16), cp.float16)),
     TypeError, "float16"),
    (lambda cp: (cp.zeros((2, 16, 16), cp.float16), cp.zeros((3, 16, 16), cp.float16)),
     ValueError, "same number of tiles"),
    (lambda cp: (cp.zeros((2, 16, 8), cp.float16), cp.zeros((2, 8, 16), cp.float16)),
     ValueError, "shape"),
    (lambda cp: (cp.zeros((2, 16, 16), cp.float16), cp.zeros((2, 16, 16), cp.float16)[:, ::-1]),
     ValueError, "contiguous"),
    (lambda cp: (cp.zeros((2, 16, 16), cp.float16), cp.zeros((2, 16, 16, 1), cp.float16)),
     ValueError, "dimensions"),
    (lambda cp: (cp.zeros(2 * 256 + 8, cp.float16)[8:].reshape(2, 16, 16),
                 cp.zeros((2, 16, 16), cp.float16)), ValueError, "32-byte"),
])
def test_gpu_mma_reduce_rejects_bad_arrays(make, exc, msg):
    cp = _cp()
    a, b = make(cp)
    with pytest.raises(exc, match=msg):
        pq.mma_reduce(a, b, "max")


@pytest.mark.gpu
def test_gpu_bf16_wants_bit_patterns_and_rowmax_wants_16x16():
    cp = _cp()
    x = cp.zeros((2, 16, 16), cp.float16)
    with pytest.raises(TypeError, match="to_bf16"):
        pq.mma_reduce(x, x, "max", dtype="bf16")
    with pytest.raises(ValueError, match="16x16"):
        pq.rowmax(cp.zeros((2, 32, 16), cp.float16), cp.zeros((2, 16, 8), cp.float16))
