"""Topic 03_permutation_and_quad_reduction: layouts and emulator (anywhere), SASS (anywhere),
wrapper checks (anywhere / GPU), the kernels against NumPy and the emulator (GPU).

The GPU tests never assume where an element sits in a fragment: references are computed from
the matrices themselves (NumPy float64 A @ B, or the accumulator values the kernel was given).
The emulator (which does use the bit layouts) is checked against NumPy here, and on the GPU it
must agree bit for bit with the kernels, which also checks the layouts.
"""
import re
from collections import Counter
from functools import lru_cache

import numpy as np
import pytest

from fraglab import sass, toolchain, warp
from fraglab import permutation_and_quad_reduction as pq
from fraglab.toolchain import ARCHES

ALL_VARIANTS = [(s, p, m) for s in pq.SHAPES for p in ((True, False) if s == (16, 16) else (True,))
                for m in pq.MASKS]
NEWER = ("sm_80", "sm_90", "sm_120")   # targets with a member-mask check in front of shuffles
FLT_MAX = float(np.finfo(np.float32).max)


@lru_cache(maxsize=None)
def _listing(arch):
    return sass.disassemble(toolchain.compile(pq.KERNELS, arch))


def kernel_sass(arch, kernel):
    return sass.function_text(_listing(arch), kernel)


def classes(arch, kernel):        # like Build.classes, from one disassembly per target
    return sass.count_classes(kernel_sass(arch, kernel))


def opcodes(arch, kernel):        # like Build.opcodes
    return sass.count_opcodes(kernel_sass(arch, kernel))


def main_listing(text):
    return pq.normalized_listing(text)[:len(pq.main_path(text))]


def random_tiles(rng, n, shape, dtype=np.float32):
    return rng.standard_normal((n, *shape)).astype(dtype)


# =================================================================================================
# Layouts
# =================================================================================================

def test_16x16_spec_is_the_documented_m16n8k16_layout():
    lay = pq.layout_from_spec(pq.SPECS[(16, 16)], (16, 16))
    np.testing.assert_array_equal(lay, warp.accumulator_16x16_sm80())


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
    try:
        from fraglab import tracer
        traced = np.asarray(tracer.recorded_layout(f"acc_{shape[0]}x{shape[1]}x16_f32", "sm_90"))
    except (ImportError, AttributeError, OSError, KeyError, ValueError) as e:
        pytest.skip(f"no traced recording to compare with: {type(e).__name__}: {e}")
    np.testing.assert_array_equal(traced, pq.layout_from_spec(pq.SPECS[shape], shape))


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
    for _, permute, mask in [v for v in ALL_VARIANTS if v[0] == shape]:
        rows, cols = pq.reduce_tiles(tiles, op, permute, mask)
        assert rows.shape == (50, shape[0]) and cols.shape == (50, shape[1])
        scale_r = np.abs(tiles).sum(axis=2)
        scale_c = np.abs(tiles).sum(axis=1)
        assert np.all(np.abs(rows - ref_rows) <= 1e-5 * scale_r)
        assert np.all(np.abs(cols - ref_cols) <= 1e-5 * scale_c)
        if op != "sum":                                   # max/min pick an element: exact
            np.testing.assert_array_equal(rows, ref_rows)
            np.testing.assert_array_equal(cols, ref_cols)


def edge_tiles(shape, rng):
    """Accumulator values that test what the operators do at the edges; one case per tile."""
    m, n = shape
    base = rng.standard_normal((12, m, n)).astype(np.float32)
    base[0, 1, :] = -np.inf                               # a row of -inf
    base[1, 2, 3] = np.nan                                # one NaN in a row and a column
    base[2, 0, :] = np.nan                                # a row of NaN
    base[3, :, 1] = np.nan                                # a column of NaN
    base[4, 3, :] = 7.0                                   # ties
    base[5, 4, :] = np.where(np.arange(n) % 2, 0.0, -0.0)  # +0 / -0 ties
    base[6, 5, :] = 3.0e38                                # sums overflow to inf
    base[6, :, 6] = -3.0e38
    base[7, 6, 0], base[7, 6, 1] = np.inf, -np.inf        # inf - inf = NaN in a sum
    base[8] = rng.standard_normal((m, n)) * 1e-40         # subnormals
    base[9, 7, :] = np.float32(FLT_MAX)
    base[10, :, 2] = np.nan                               # NaN in every position along rows
    base[10, 4, :] = np.nan                               # and along columns
    base[11, 0, 5], base[11, 1, 0], base[11, 2, n - 1] = np.nan, np.nan, np.nan
    return base


@pytest.mark.parametrize("shape", pq.SHAPES)
@pytest.mark.parametrize("op", pq.OPS)
def test_all_variants_agree_on_edge_cases(shape, op, rng):
    tiles = edge_tiles(shape, rng)
    variants = [v for v in ALL_VARIANTS if v[0] == shape]
    first = pq.reduce_tiles(tiles, op, variants[0][1], variants[0][2])
    for _, permute, mask in variants[1:]:
        got = pq.reduce_tiles(tiles, op, permute, mask)
        np.testing.assert_array_equal(got[0], first[0])
        np.testing.assert_array_equal(got[1], first[1])


@pytest.mark.parametrize("shape", pq.SHAPES)
@pytest.mark.parametrize("op", ["max", "min", "sum"])
def test_edge_cases_match_the_order_free_reference(shape, op, rng):
    tiles = edge_tiles(shape, rng)
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
        assert rows[4, 3] == 7.0 and rows[5, 4] == 0.0


def test_max_cmp_depends_on_where_the_nan_is():
    """a > b ? a : b keeps b when the comparison fails: a NaN arriving as b wins, as a loses."""
    m = np.arange(256, dtype=np.float32).reshape(1, 16, 16)
    first = m.copy()
    first[0, 0, 0] = np.nan       # lane 0, x[0]: the very first left operand
    last = m.copy()
    last[0, 0, 15] = np.nan       # lane 3, x[5]: the last right operand, all the way down
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
# SASS: what the permutation and the masks cost (no GPU needed)
# =================================================================================================

@pytest.mark.parametrize("arch", ARCHES)
def test_every_kernel_stays_in_registers(arch):
    b = toolchain.compile(pq.KERNELS, arch)
    for k in b.kernels:
        r = b.resources[k]
        assert r["stack_frame"] == r["spill_stores"] == r["spill_loads"] == 0, k
        assert classes(arch, k)["local"] == 0, k


@pytest.mark.parametrize("arch", ARCHES)
def test_the_permutation_costs_no_instruction(arch):
    """Fig. 2 only renames registers: with and without it, the SASS is the same instructions."""
    for op in pq.OPS:
        for mask in pq.MASKS:
            perm = kernel_sass(arch, pq.reduce_acc_kernel((16, 16), op, True, mask))
            direct = kernel_sass(arch, pq.reduce_acc_kernel((16, 16), op, False, mask))
            assert pq.normalized_listing(perm) == pq.normalized_listing(direct), (op, mask)


@pytest.mark.parametrize("arch", ARCHES)
def test_full_mask_shuffles_are_plain(arch):
    for shape in pq.SHAPES:
        text = kernel_sass(arch, pq.reduce_acc_kernel(shape, "sum", True, "full"))
        ops = Counter(op.split(".")[0] for op in sass.instructions(text))
        m, n = shape
        # one shuffle per lane bit along each line, per line a lane holds: 16x16 rows: 2 bits x
        # 2 rows, cols: 3 bits x 4 cols; 32x8 rows 2 x 4, cols 3 x 2; 8x32 rows 3 x 2, cols 2 x 4
        want = {(16, 16): 2 * 2 + 3 * 4, (32, 8): 2 * 4 + 3 * 2, (8, 32): 3 * 2 + 2 * 4}[shape]
        assert ops["SHFL"] == want
        for op in ("MATCH", "REDUX", "VOTEU", "WARPSYNC", "BAR"):
            assert ops[op] == 0, (shape, op)


@pytest.mark.parametrize("arch", NEWER)
def test_per_lane_masks_add_a_convergence_check(arch):
    """With a mask that differs between lanes, ptxas (sm_80 and newer) guards the shuffles with
    MATCH.ANY / REDUX.OR / VOTEU.ANY and a BRA.DIV to a fallback that runs WARPSYNC. The shuffle
    instructions themselves are the same: SHFL has no member-mask operand."""
    for shape in pq.SHAPES:
        group = kernel_sass(arch, pq.reduce_acc_kernel(shape, "max", True, "group"))
        full = kernel_sass(arch, pq.reduce_acc_kernel(shape, "max", True, "full"))
        g = Counter(op.split(".")[0] for op in pq.main_path(group))
        f = Counter(op.split(".")[0] for op in pq.main_path(full))
        for op in ("MATCH", "REDUX", "VOTEU"):
            assert g[op] > 0 and f[op] == 0, (shape, op)
        assert g["SHFL"] == f["SHFL"]
        assert len(pq.main_path(group)) > len(pq.main_path(full))
        assert "WARPSYNC" in " ".join(sass.instructions(group))
        shfl_g = sorted(i.split(",")[-2:] for i in main_listing(group) if i.startswith("SHFL"))
        shfl_f = sorted(i.split(",")[-2:] for i in main_listing(full) if i.startswith("SHFL"))
        assert shfl_g == shfl_f          # same offsets, same clamp: no mask operand in SHFL


def test_on_sm75_the_mask_is_computed_and_ignored():
    q = pq.main_path(kernel_sass("sm_75", "rowmax_quadmask_16x16"))
    f = pq.main_path(kernel_sass("sm_75", "rowmax_fullmask_16x16"))
    extra = Counter(q) - Counter(f)
    assert sum(extra.values()) <= 4 and not any(o.split(".")[0] in ("MATCH", "WARPSYNC", "VOTE")
                                                for o in extra)


@pytest.mark.parametrize("arch", ("sm_80", "sm_90", "sm_120"))
def test_registers_path_has_no_shared_memory_or_barrier(arch):
    b = toolchain.compile(pq.KERNELS, arch)
    shared = classes(arch, "rowmax_shared_16x16")
    assert shared["shared"] > 0 and shared["barrier"] > 0
    assert opcodes(arch, "rowmax_shared_16x16")["BAR"] == 1
    assert b.resources["rowmax_shared_16x16"]["smem"] == 16 * 20 * 4 * pq.WARPS_PER_BLOCK
    full = classes(arch, "rowmax_fullmask_16x16")
    assert full["shared"] == 0 and full["barrier"] == 0 and full["tensor"] > 0
    assert b.resources["rowmax_fullmask_16x16"]["smem"] == 0
    # with the paper's masks: still no shared memory and no BAR, but WARPSYNC instructions
    quad = classes(arch, "rowmax_quadmask_16x16")
    assert quad["shared"] == 0 and b.resources["rowmax_quadmask_16x16"]["smem"] == 0
    ops = opcodes(arch, "rowmax_quadmask_16x16")
    assert ops["BAR"] == 0 and quad["barrier"] == ops["WARPSYNC"] > 0
    for k in b.kernels:
        if k.startswith(("reduce_acc", "mma_reduce")):
            assert classes(arch, k)["shared"] == 0 and b.resources[k]["smem"] == 0, k


@pytest.mark.parametrize("arch", ARCHES)
def test_mma_kernels_use_the_tensor_cores(arch):
    for shape in pq.SHAPES:
        for op in pq.MMA_OPS:
            assert classes(arch, pq.mma_reduce_kernel(shape, "f16", op))["tensor"] > 0
            bf16 = classes(arch, pq.mma_reduce_kernel(shape, "bf16", op))["tensor"]
            assert (bf16 > 0) == (arch != "sm_75")       # bf16 WMMA needs sm_80


def test_normalized_listing_ignores_addresses_and_labels():
    text = kernel_sass("sm_90", "rowmax_quadmask_16x16")
    lines = pq.normalized_listing(text)
    assert lines and not any("/*" in line or re.search(r"L_x_\d", line) for line in lines)
    assert "RET.REL.NODEC" not in " ".join(lines) or "<kernel>" in " ".join(lines)
    assert len(lines) == len(sass.instructions(text))
    assert pq.main_path(text)[-1] == "EXIT"


# =================================================================================================
# Wrapper arguments that need no GPU
# =================================================================================================

def test_kernel_names():
    assert pq.reduce_acc_kernel((16, 16), "max") == "reduce_acc_16x16_max_perm_group"
    assert pq.reduce_acc_kernel((16, 16), "sum", False, "full") == \
        "reduce_acc_16x16_sum_direct_full"
    assert pq.reduce_acc_kernel((32, 8), "min", True, "full") == "reduce_acc_32x8_min_full"
    assert pq.mma_reduce_kernel((8, 32), "bf16", "max") == "mma_reduce_8x32_bf16_max"
    b = toolchain.compile(pq.KERNELS, "sm_90")
    names = {pq.reduce_acc_kernel(s, op, p, m) for s, p, m in ALL_VARIANTS for op in pq.OPS}
    names |= {pq.mma_reduce_kernel(s, d, op) for s in pq.SHAPES for d in pq.DTYPES
              for op in pq.MMA_OPS}
    names |= {pq.rowmax_kernel(w) for w in pq.ROWMAX_WAYS}
    names |= {f"acc_layout_{m}x{n}" for m, n in pq.SHAPES}
    assert names == set(b.kernels)


@pytest.mark.parametrize("call, exc, msg", [
    (lambda: pq.reduce_acc_kernel((16, 16), "mean"), ValueError, "max, min, sum, max_cmp"),
    (lambda: pq.mma_reduce_kernel((16, 16), "f16", "max_cmp"), ValueError, "max, min, sum"),
    (lambda: pq.reduce_acc_kernel((16, 8), "max"), ValueError, "shape must be one of"),
    (lambda: pq.reduce_acc_kernel((32, 8), "max", False), ValueError, "16x16 tiles only"),
    (lambda: pq.reduce_acc_kernel((16, 16), "max", True, "quad8"), ValueError, "group, full"),
    (lambda: pq.reduce_acc_kernel((16, 16), "max", 1), TypeError, "permute"),
    (lambda: pq.mma_reduce_kernel((16, 16), "tf32", "max"), ValueError, "f16, bf16"),
    (lambda: pq.rowmax_kernel("smem"), ValueError, "shared, quadmask, fullmask"),
    (lambda: pq.quad_reduce(np.zeros((32, 4)), "max"), ValueError, r"\(32, 8\)"),
    (lambda: pq.quad_reduce(np.zeros((32, 8)), "avg"), ValueError, "known: max, min, sum"),
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
    with pytest.raises(ValueError, match="known: max, min, sum"):
        call()


@pytest.mark.parametrize("call", [
    lambda: pq.reduce_accumulators(np.zeros((4, 16, 16), np.float32), "max"),
    lambda: pq.mma_reduce(np.zeros((4, 16, 16), np.float16), np.zeros((4, 16, 16), np.float16),
                          "max"),
    lambda: pq.rowmax(np.zeros((4, 16, 16), np.float16), np.zeros((4, 16, 16), np.float16)),
])
def test_wrappers_reject_numpy_arrays(call):
    with pytest.raises(TypeError, match="cupy.asarray"):
        call()


def test_wrappers_reject_bad_option_names():
    a = np.zeros((4, 16, 16), np.float32)
    with pytest.raises(ValueError, match="group, full"):
        pq.reduce_accumulators(a, "max", mask="quad4")
    with pytest.raises(ValueError, match="f16, bf16"):
        pq.mma_reduce(a, a, "max", dtype="f32")
    with pytest.raises(ValueError, match="shared, quadmask"):
        pq.rowmax(a, a, way="global")


# =================================================================================================
# GPU: the kernels
# =================================================================================================

def _cp():
    import cupy
    return cupy


def _assert_same(got, want, what):
    """Bitwise equality up to NaN payloads and the sign of zero."""
    msg = warp.format_diff(got, want, equal_nan=True, index_names=("tile", "line"))
    assert not msg, f"{what}:\n{msg}"


@pytest.mark.gpu
@pytest.mark.parametrize("shape", pq.SHAPES)
def test_gpu_accumulator_layout_is_the_bit_layout(shape):
    lay = pq.accumulator_layout_on_gpu(shape)
    warp.validate_layout(lay, shape)
    np.testing.assert_array_equal(lay, pq.layout_from_spec(pq.SPECS[shape], shape),
                                  err_msg=f"{shape}: traced layout differs from SPECS; "
                                          f"spec_from_layout gives it as a code if it is one")


@pytest.mark.gpu
@pytest.mark.parametrize("shape", pq.SHAPES)
@pytest.mark.parametrize("op", pq.OPS)
def test_gpu_reduce_accumulators_random(shape, op, rng):
    cp = _cp()
    tiles = random_tiles(rng, 37, shape)          # 37: the last block has one warp without a tile
    for _, permute, mask in [v for v in ALL_VARIANTS if v[0] == shape]:
        rows, cols = pq.reduce_accumulators(cp.asarray(tiles), op, permute=permute, mask=mask)
        rows, cols = rows.get(), cols.get()
        want_r, want_c = pq.reduce_tiles(tiles, op, permute, mask)
        _assert_same(rows, want_r, f"rows {shape} {op} permute={permute} mask={mask}")
        _assert_same(cols, want_c, f"cols {shape} {op} permute={permute} mask={mask}")
        if op != "max_cmp":                        # and against NumPy, independent of layouts
            ref_r, ref_c = pq.reference(tiles, op)
            tol = 1e-5 if op == "sum" else 0.0
            assert np.all(np.abs(rows - ref_r) <= tol * np.abs(tiles).sum(axis=2))
            assert np.all(np.abs(cols - ref_c) <= tol * np.abs(tiles).sum(axis=1))


@pytest.mark.gpu
@pytest.mark.parametrize("shape", pq.SHAPES)
@pytest.mark.parametrize("op", pq.OPS)
def test_gpu_reduce_accumulators_edge_cases(shape, op, rng):
    cp = _cp()
    tiles = edge_tiles(shape, rng)
    results = []
    for _, permute, mask in [v for v in ALL_VARIANTS if v[0] == shape]:
        rows, cols = pq.reduce_accumulators(cp.asarray(tiles), op, permute=permute, mask=mask)
        results.append((rows.get(), cols.get()))
        want_r, want_c = pq.reduce_tiles(tiles, op, permute, mask)
        _assert_same(results[-1][0], want_r, f"rows {shape} {op} permute={permute} mask={mask}")
        _assert_same(results[-1][1], want_c, f"cols {shape} {op} permute={permute} mask={mask}")
    for rows, cols in results[1:]:                # full mask == group mask, perm == direct
        _assert_same(rows, results[0][0], "variants disagree (rows)")
        _assert_same(cols, results[0][1], "variants disagree (cols)")
    rows = results[0][0]
    if op == "max":
        assert rows[0, 1] == -np.inf and not np.isnan(rows[1, 2]) and np.isnan(rows[2, 0])
        assert rows[4, 3] == 7.0 and rows[5, 4] == 0.0 and rows[9, 7] == FLT_MAX
    if op == "sum":
        assert rows[6, 5] == np.inf and np.isnan(rows[7, 6]) and rows[0, 1] == -np.inf


@pytest.mark.gpu
def test_gpu_max_cmp_nan_depends_on_position():
    cp = _cp()
    m = np.arange(256, dtype=np.float32).reshape(1, 16, 16)
    first, last = m.copy(), m.copy()
    first[0, 0, 0] = np.nan
    last[0, 0, 15] = np.nan
    r_first, _ = pq.reduce_accumulators(cp.asarray(first), "max_cmp")
    r_last, _ = pq.reduce_accumulators(cp.asarray(last), "max_cmp")
    assert float(r_first[0, 0]) == 15.0 and np.isnan(float(r_last[0, 0]))
    r_max, _ = pq.reduce_accumulators(cp.asarray(last), "max")
    assert float(r_max[0, 0]) == 14.0


def _mma_inputs(rng, n, shape, dtype, integers=False):
    m, k, nn = shape[0], 16, shape[1]
    if integers:
        a = rng.integers(-4, 5, size=(n, m, k)).astype(np.float32)
        b = rng.integers(-4, 5, size=(n, k, nn)).astype(np.float32)
    else:
        a = rng.standard_normal((n, m, k)).astype(np.float32)
        b = rng.standard_normal((n, k, nn)).astype(np.float32)
    if dtype == "f16":
        a, b = a.astype(np.float16), b.astype(np.float16)
        return a, b, a.astype(np.float64), b.astype(np.float64)
    a16, b16 = pq.to_bf16(a), pq.to_bf16(b)
    return a16, b16, pq.from_bf16(a16).astype(np.float64), pq.from_bf16(b16).astype(np.float64)


def _skip_without(dtype):
    from fraglab import device
    ok, why = device.supports(dtype)
    if not ok:
        pytest.skip(why)


def _check_mma(rows, cols, a64, b64, op):
    c = a64 @ b64                                     # float64 reference of the product
    ref_r, ref_c = pq.reference(c, op)
    scale = np.abs(a64) @ np.abs(b64)                 # what f32 rounding errors scale with
    if op == "sum":
        tol_r, tol_c = scale.sum(axis=2), scale.sum(axis=1)
    else:
        tol_r, tol_c = scale.max(axis=2), scale.max(axis=1)
    assert not np.isnan(rows).any() and not np.isnan(cols).any(), "some outputs were not written"
    bad_r = np.abs(rows - ref_r) > 1e-5 * tol_r
    bad_c = np.abs(cols - ref_c) > 1e-5 * tol_c
    assert not bad_r.any(), f"rows: {bad_r.sum()} wrong, e.g. {np.argwhere(bad_r)[:3].tolist()}"
    assert not bad_c.any(), f"cols: {bad_c.sum()} wrong, e.g. {np.argwhere(bad_c)[:3].tolist()}"


@pytest.mark.gpu
@pytest.mark.parametrize("shape", pq.SHAPES)
@pytest.mark.parametrize("dtype", pq.DTYPES)
@pytest.mark.parametrize("op", pq.MMA_OPS)
def test_gpu_mma_reduce_random(shape, dtype, op, rng):
    _skip_without(dtype)
    cp = _cp()
    a, b, a64, b64 = _mma_inputs(rng, 50, shape, dtype)
    rows, cols = pq.mma_reduce(cp.asarray(a), cp.asarray(b), op, dtype=dtype)
    assert rows.shape == (50, shape[0]) and cols.shape == (50, shape[1])
    _check_mma(rows.get(), cols.get(), a64, b64, op)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", pq.SHAPES)
@pytest.mark.parametrize("dtype", pq.DTYPES)
@pytest.mark.parametrize("op", pq.MMA_OPS)
def test_gpu_mma_reduce_exact_on_small_integers(shape, dtype, op, rng):
    """Small integers make every product and sum exact in f32: results must be exact."""
    _skip_without(dtype)
    cp = _cp()
    a, b, a64, b64 = _mma_inputs(rng, 9, shape, dtype, integers=True)
    rows, cols = pq.mma_reduce(cp.asarray(a), cp.asarray(b), op, dtype=dtype)
    ref_r, ref_c = pq.reference(a64 @ b64, op)
    np.testing.assert_array_equal(rows.get(), ref_r)
    np.testing.assert_array_equal(cols.get(), ref_c)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", pq.SHAPES)
@pytest.mark.parametrize("op", pq.MMA_OPS)
def test_gpu_mma_reduce_edge_cases(shape, op, rng):
    """-inf and NaN in A spread along a row of C; f16's largest values do not overflow f32."""
    cp = _cp()
    m, n = shape
    a, b, _, _ = _mma_inputs(rng, 3, shape, "f16")
    b[:, 0, :] = np.abs(b[:, 0, :]) + np.float16(0.5)  # row 0 of B > 0: -inf * b = -inf
    a[0, 1, 0] = -np.inf                               # tile 0: row 1 of C is -inf
    a[1, 2, 3] = np.nan                                # tile 1: row 2 of C is NaN
    a[2] = np.float16(65504.0)                         # tile 2: f16 max everywhere
    b[2] = np.float16(65504.0)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    rows, cols = pq.mma_reduce(cp.asarray(a), cp.asarray(b), op)
    rows, cols = rows.get(), cols.get()
    with np.errstate(invalid="ignore"):
        ref_r, ref_c = pq.reference(a64 @ b64, op)
    special_r = ~np.isfinite(ref_r)
    np.testing.assert_array_equal(rows[special_r], ref_r[special_r])
    special_c = ~np.isfinite(ref_c)
    np.testing.assert_array_equal(cols[special_c], ref_c[special_c])
    # what the special values should give
    assert rows[0, 1] == -np.inf and np.isnan(rows[1, 2])
    if op == "max":
        assert np.all(np.isfinite(cols[0])) and np.all(np.isfinite(cols[1]))  # fmaxf drops them
    # f16 extremes: 16 * 65504^2 = 6.9e10 per element, exact in f32; sums exact too
    big = 16.0 * 65504.0 ** 2
    assert np.all(rows[2] == (big * n if op == "sum" else big))
    assert np.all(cols[2] == (big * m if op == "sum" else big))
    # the finite rest matches NumPy
    fin_r, fin_c = np.isfinite(ref_r), np.isfinite(ref_c)
    finite = lambda x: np.where(np.isfinite(x), np.abs(x), 0.0)   # fmaxf drops the NaN row
    tol = 1e-5 * finite(a64) @ finite(b64)
    tol_r = tol.sum(axis=2) if op == "sum" else tol.max(axis=2)
    tol_c = tol.sum(axis=1) if op == "sum" else tol.max(axis=1)
    assert np.all(np.abs(rows[fin_r] - ref_r[fin_r]) <= tol_r[fin_r])
    assert np.all(np.abs(cols[fin_c] - ref_c[fin_c]) <= tol_c[fin_c])


@pytest.mark.gpu
def test_gpu_bf16_products_beyond_f32_range(rng):
    """bf16 reaches 3.4e38 like f32, so products can leave f32's range. Whether the tensor cores
    give inf (IEEE round to nearest) or saturate at FLT_MAX is what this records; it must not be
    finite-and-small, nor NaN."""
    _skip_without("bf16")
    cp = _cp()
    a = np.ones((1, 16, 16), np.float32)
    b = np.ones((1, 16, 16), np.float32)
    a[0, 3, :] = 2.0 ** 100
    b[0, :, 5] = 2.0 ** 100
    rows, cols = pq.mma_reduce(cp.asarray(pq.to_bf16(a)), cp.asarray(pq.to_bf16(b)), "max",
                               dtype="bf16")
    rows, cols = rows.get(), cols.get()
    assert rows[0, 3] >= FLT_MAX and cols[0, 5] >= FLT_MAX, (rows[0, 3], cols[0, 5])
    print(f"bf16 2^100 * 2^100 accumulated in f32 gives {rows[0, 3]}")


@pytest.mark.gpu
def test_gpu_rowmax_three_ways_agree(rng):
    cp = _cp()
    a, b, a64, b64 = _mma_inputs(rng, 45, (16, 16), "f16")
    ways = {w: pq.rowmax(cp.asarray(a), cp.asarray(b), w).get() for w in pq.ROWMAX_WAYS}
    for w in ways:                                     # the same accumulator: the same maxima
        _assert_same(ways[w], ways["shared"], f"rowmax {w} vs shared")
    rows, _ = pq.mma_reduce(cp.asarray(a), cp.asarray(b), "max")
    _assert_same(rows.get(), ways["shared"], "mma_reduce max vs rowmax shared")
    ref = (a64 @ b64).max(axis=2)
    assert np.all(np.abs(ways["shared"] - ref) <= 1e-5 * (np.abs(a64) @ np.abs(b64)).max(axis=2))


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
