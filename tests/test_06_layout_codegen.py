"""Chapter 6: code generated from a fragment layout. CPU: plans, emulator, compile, SASS, errors,
the committed header. GPU: every accumulator kind against NumPy."""
import dataclasses
import re

import numpy as np
import pytest

from fraglab import layout_codegen as lc
from fraglab import permutation_and_quad_reduction as pq
from fraglab import fragments, sass, toolchain, tools, warp
from fraglab.fragments import recording
from fraglab.layout_codegen import CodegenError
from fraglab.toolchain import ARCHES

KINDS = lc.KINDS


def _moved(lay, lane_map):
    """The layout with lane l's registers moved to lane lane_map[l]."""
    out = np.empty_like(lay)
    for lane in range(32):
        out[lane_map[lane]] = lay[lane]
    return out


def _linear_lane_map(images):
    """Lane l -> XOR of images[b] over the set bits b of l."""
    out = []
    for lane in range(32):
        x = 0
        for b in range(5):
            if lane >> b & 1:
                x ^= images[b]
        out.append(x)
    assert sorted(out) == list(range(32))
    return out


H100 = lc.plan("acc_16x16x16_f32", arch="sm_90").layout
# Lane bit 2 now also flips lane bit 0: the lanes of a column are still a coset, of {5, 8, 16, ...}.
MIXED = _moved(H100, _linear_lane_map([1, 2, 5, 8, 16]))
# Quads 0 and 1 trade places: every row and column is still a coset, but the row of a lane is no
# longer an affine function of its bits.
NON_AFFINE = _moved(H100, [l ^ 4 if l < 8 else l for l in range(32)])


# =================================================================================================
# Plans
# =================================================================================================

EXPECTED = {  # (row offsets, column offsets) on the H100
    (16, 16): ((1, 2), (4, 8, 16)), (32, 8): ((1, 2), (4, 8, 16)), (8, 32): ((4, 8, 16), (1, 2)),
    (8, 8): ((1, 2), (4, 8, 16)),
}


@pytest.mark.parametrize("kind", KINDS)
def test_plan_of_every_accumulator_kind(kind):
    p = lc.plan(kind, arch="sm_90")
    assert (p.rows.offsets, p.cols.offsets) == EXPECTED[p.shape]
    assert p.rows.is_bit_pattern and p.cols.is_bit_pattern
    # each register belongs to exactly one row group and one column group
    for lp in (p.rows, p.cols):
        assert sorted(r for g in lp.groups for r in g) == list(range(p.n_regs))
        assert bin(lp.leaders).count("1") * len(lp.groups) == lp.lines


def test_plan_groups_for_the_three_shapes():
    assert lc.plan("acc_16x16x16_f32", arch="sm_90").rows.groups == fragments.ACC16_ROW_REGS
    assert lc.plan("acc_32x8x16_f32", arch="sm_90").rows.groups == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert lc.plan("acc_8x32x16_f32", arch="sm_90").rows.groups == ((0, 2, 4, 6), (1, 3, 5, 7))


def test_plan_without_arch_uses_the_recording_of_this_machine():
    p = lc.plan("acc_32x8x16_s32")
    assert np.array_equal(p.layout, recording.layout("acc_32x8x16_s32"))
    assert p.source == recording.source_line().split("] ")[1].removeprefix("layouts from ")


def test_a_given_table_cites_its_source():
    assert lc.plan("acc_16x16x16_f32", H100).source == "a table given by the user"
    p = lc.plan("acc_16x16x16_f32", H100, source="[gpu] layouts traced live on a GPU (sm_90)")
    assert p.source == "traced live on a GPU (sm_90)"
    assert "layout: traced live on a GPU (sm_90)." in lc.generate(p)


def test_the_documented_16x16_layout_plans_like_the_recording():
    doc = lc.plan("acc_16x16x16_f32", fragments.wmma_16x16_accumulator())
    rec = lc.plan("acc_16x16x16_f32", arch="sm_90")
    assert doc.pattern() == rec.pattern()
    assert lc.generate(doc).split("\n", 1)[1] == lc.generate(rec).split("\n", 1)[1]


def test_mixed_lane_bits_give_offsets_that_are_not_powers_of_two():
    p = lc.plan("acc_16x16x16_f32", MIXED)
    assert p.rows.offsets == (1, 2) and p.cols.offsets == (5, 8, 16)
    assert not p.cols.is_bit_pattern


def test_non_affine_layout_is_planned():
    p = lc.plan("acc_16x16x16_f32", NON_AFFINE)
    assert p.rows.offsets == (1, 2)
    assert "0x" in lc.generate(p)        # its row index is written with bit-sliced constants


# =================================================================================================
# Errors: not a layout, or no butterfly
# =================================================================================================

def test_duplicates_are_rejected():
    bad = H100.copy()
    bad[3, 1] = bad[0, 0]
    with pytest.raises(warp.LayoutError, match="held more than once"):
        lc.plan("acc_16x16x16_f32", bad)


def test_holes_are_rejected():
    bad = H100.copy()
    bad[3, 1] = (20, 0)
    with pytest.raises(warp.LayoutError, match="outside the 16x16"):
        lc.plan("acc_16x16x16_f32", bad)


@pytest.mark.parametrize("shape", [(32, 4, 2), (16, 8, 2), (32, 8)])
def test_wrong_size_is_rejected(shape):
    with pytest.raises(warp.LayoutError, match="shape|held by no|registers"):
        lc.plan("acc_16x16x16_f32", np.zeros(shape, dtype=np.int64))


def test_a_layout_of_the_wrong_tile_is_rejected():
    with pytest.raises(warp.LayoutError):
        lc.plan("acc_16x16x16_f32", lc.plan("acc_32x8x16_f32", arch="sm_90").layout)


def test_lanes_that_are_not_a_coset_cannot_be_reduced_by_a_butterfly():
    swapped = list(range(32))
    swapped[1], swapped[4] = 4, 1            # lane 1 (quad 0) and lane 4 (quad 1) trade registers
    with pytest.raises(CodegenError, match="not closed under XOR.*No butterfly"):
        lc.plan("acc_16x16x16_f32", _moved(H100, swapped))


def test_registers_grouped_differently_in_one_lane_are_refused():
    bad = H100.copy()
    bad[0, [1, 2]] = bad[0, [2, 1]]
    with pytest.raises(CodegenError, match="differ between lanes"):
        lc.plan("acc_16x16x16_f32", bad)


def test_input_fragments_and_bad_names_are_refused():
    with pytest.raises(ValueError, match="accumulator"):
        lc.plan("a_16x16x16_f16_row")
    with pytest.raises(ValueError, match="unknown fragment kind"):
        lc.plan("acc_16x16x16_f8")
    with pytest.raises(ValueError, match="identifier"):
        lc.plan_from_layout(H100, (16, 16), name="my kind")
    with pytest.raises(ValueError, match="ctype"):
        lc.plan_from_layout(H100, (16, 16), ctype="half")


# =================================================================================================
# Emulator: the plan, run on fraglab.warp, against NumPy
# =================================================================================================

def _tiles(rng, p, n=6):
    return rng.standard_normal((n,) + p.shape)


@pytest.mark.parametrize("op", lc.OPS)
@pytest.mark.parametrize("kind", KINDS)
def test_emulated_reductions_match_numpy(kind, op, rng):
    p = lc.plan(kind, arch="sm_90")
    t = _tiles(rng, p)
    f = lc.fragments(p, t)
    ref_r, ref_c = lc.reference(t, op)
    assert np.allclose(lc.emulate_rows(p, f, op).T, ref_r, rtol=1e-12, atol=1e-12)
    assert np.allclose(lc.emulate_cols(p, f, op).T, ref_c, rtol=1e-12, atol=1e-12)
    # the butterfly leaves the result in every lane that holds the line
    v = lc.emulate_reduce(p, f, op, "rows")
    for lane in range(32):
        for g in range(len(p.rows.groups)):
            assert np.allclose(v[lane, g], ref_r[:, p.rows.line_of[lane, g]])


@pytest.mark.parametrize("kind", KINDS)
def test_emulated_broadcast_and_store(kind, rng):
    p = lc.plan(kind, arch="sm_90")
    t = _tiles(rng, p)
    f = lc.fragments(p, t)
    assert np.array_equal(np.moveaxis(lc.emulate_store(p, f), -1, 0), t)
    v = lc.emulate_reduce(p, f, "max", "rows")
    b = np.moveaxis(lc.emulate_store(p, lc.emulate_expand_rows(p, v)), -1, 0)
    assert np.array_equal(b, np.broadcast_to(t.max(axis=2)[:, :, None], t.shape))


@pytest.mark.parametrize("layout", [MIXED, NON_AFFINE], ids=["mixed", "non_affine"])
def test_emulated_reductions_of_layouts_that_are_not_bit_layouts(layout, rng):
    p = lc.plan("acc_16x16x16_f32", layout)
    t = _tiles(rng, p)
    f = lc.fragments(p, t)
    ref_r, ref_c = lc.reference(t, "sum")
    assert np.allclose(lc.emulate_rows(p, f, "sum").T, ref_r)
    assert np.allclose(lc.emulate_cols(p, f, "sum").T, ref_c)


def test_emulated_shuffle_count(rng):
    p = lc.plan("acc_16x16x16_f32", arch="sm_90")
    from fraglab import grade
    with grade.count_calls(warp, "shfl_xor_sync") as n:
        lc.emulate_rows(p, lc.fragments(p, _tiles(rng, p)), "sum")
    assert n.calls == 2 * 2                  # two offsets for each of the two row groups


# =================================================================================================
# Compile and SASS (any machine)
# =================================================================================================

def test_committed_header_is_what_the_generator_emits_today():
    assert lc.header_is_current(), "run `python -m fraglab.layout_codegen header`"


def test_generated_kind_list_is_the_catalogues():
    """The header's X(GUARD, KIND, M, N, K, T) rows: the accumulators of fragment_kinds.cuh, with
    the same guards, in the same order."""
    cuh = (tools.KERNELS_DIR / "fragment_kinds.cuh").read_text()
    want = re.findall(r"X\((\w+), (acc_\w+), (\d+), (\d+), (\d+),",
                      cuh.split("#define FRAGLAB_ACCUMULATOR_KINDS(X)")[1].split("\n\n")[0])
    got = re.findall(r"X\((\w+), (acc_\w+), (\d+), (\d+), (\d+),",
                     lc.HEADER_PATH.read_text().split("#define FRAGLAB_GEN_KINDS(X)")[1])
    assert got == want and len(got) == len(KINDS)


def test_header_check_command():
    assert lc.main(["header", "--check"]) == 0


@pytest.mark.parametrize("arch", ARCHES)
def test_harness_has_every_kernel(arch):
    b = toolchain.compile(lc.KERNELS, arch)
    want = {f(k, op) for k in KINDS for op in lc.OPS for f in (lc.reduce_kernel, lc.broadcast_kernel)}
    assert want == set(b.kernels)


@pytest.mark.parametrize("arch", ARCHES)
def test_generated_code_has_no_shared_memory_barrier_or_local_memory(arch):
    b = toolchain.compile(lc.KERNELS, arch)
    for k in b.kernels:
        c = b.classes(k)
        assert c["shared"] == c["barrier"] == c["local"] == 0, (k, dict(c))
        assert b.resources[k]["smem"] == 0, k


def _runs_on(arch, kind):
    return not lc.plan(kind, arch="sm_90").sm80 or int(arch[3:]) >= 80


@pytest.mark.parametrize("arch", ARCHES)
def test_shuffles_are_the_plans(arch):
    b = toolchain.compile(lc.KERNELS, arch)
    for kind in KINDS:
        if not _runs_on(arch, kind):
            continue
        p = lc.plan(kind, arch="sm_90")
        want = sum(len(lp.groups) * len(lp.offsets) for lp in (p.rows, p.cols))
        want *= 2 if p.ctype == "double" else 1          # a double moves as two 32-bit halves
        text = b.sass(lc.reduce_kernel(kind, "sum"))
        shfl = [i for i in sass.listing(text) if i.startswith("SHFL")]
        assert len(shfl) == want, kind
        assert all(i.startswith("SHFL.BFLY") for i in shfl)


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("op", lc.OPS)
def test_no_more_instructions_than_chapter_3(arch, op):
    """Same operator, same output format (rows (n, 16), cols (n, 16) f32, one warp a tile, the
    full mask): the generated 16x16 kernel against chapter 3's hand-written one (Fig. 2 +
    Algorithm 3 for rows, the bit-layout code for columns)."""
    mine = toolchain.compile(lc.KERNELS, arch).sass(lc.reduce_kernel("acc_16x16x16_f32", op))
    hand = toolchain.compile(pq.KERNELS, arch).sass(pq.reduce_acc_kernel((16, 16), op, True, "full"))
    assert len(sass.instructions(mine)) <= len(sass.instructions(hand))
    assert len(sass.main_path(mine)) <= len(sass.main_path(hand))


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("layout", [MIXED, NON_AFFINE], ids=["mixed", "non_affine"])
def test_code_for_a_user_layout_compiles(layout, arch):
    p = lc.plan("acc_16x16x16_f16", layout)
    b = toolchain.compile("06_layout_codegen_user.cu", arch, source=lc.harness_source(p))
    assert set(b.kernels) == {f(p.name, op) for op in lc.OPS
                              for f in (lc.reduce_kernel, lc.broadcast_kernel)}
    for k in b.kernels:
        assert b.classes(k)["shared"] == b.classes(k)["local"] == 0


# =================================================================================================
# Problems: every accumulator kind x operator, committed header and user layout
# =================================================================================================

_CASES = [(name, case) for name, p in lc.PROBLEMS.items() for case in p.cases]
_IDS = [f"{name}-{case}" for name, case in _CASES]


def _emulated(name):
    """A run function for PROBLEMS[name] that runs the plan on the emulator instead of the GPU."""
    def run(kind, acc, op, layout):
        p = lc.plan(kind, arch="sm_90") if layout is None else lc.plan(kind, layout)
        f = lc.fragments(p, acc)
        if name == "reduce_rows":
            return lc.emulate_rows(p, f, op).T
        if name == "reduce_cols":
            return lc.emulate_cols(p, f, op).T
        if name == "broadcast_rows":
            f = lc.emulate_expand_rows(p, lc.emulate_reduce(p, f, op, "rows"))
        return np.moveaxis(lc.emulate_store(p, f), -1, 0)
    return run


@pytest.mark.parametrize("name, case", _CASES, ids=_IDS)
def test_problems_hold_for_the_emulated_code(name, case, rng):
    """The problems' inputs, references and tolerances, checked on the emulator (any machine)."""
    dataclasses.replace(lc.PROBLEMS[name], requires=None).check(case, rng, run=_emulated(name))


def test_a_wrong_reduction_fails_its_problem(rng):
    p = dataclasses.replace(lc.PROBLEMS["reduce_rows"], requires=None)
    run = _emulated("reduce_rows")
    def drops_a_column(acc, **kw):
        return run(acc=np.concatenate([0 * acc[..., :1], acc[..., 1:]], -1), **kw)
    with pytest.raises(AssertionError, match="WRONG"):
        p.check("acc_16x16x16_f32-sum", rng, run=drops_a_column)

    def unwritten(**kw):
        out = run(**kw)
        out[2, 5] = np.nan
        return out
    with pytest.raises(AssertionError, match="WRONG"):
        p.check("acc_32x8x16_f16-max", rng, run=unwritten)


@pytest.mark.gpu
def test_gpu_runs_nearly_every_kind():
    assert sum(fragments.supported(k)[0] for k in KINDS) >= 9


@pytest.mark.gpu
@pytest.mark.parametrize("name, case", _CASES, ids=_IDS)
def test_gpu_kernels_match_numpy(name, case, check_supported):
    """Every kind and operator on 37 tiles (the last block partly empty), outputs poisoned:
    reductions exact for max, min and s32 sums, float sums within a tolerance of sum |x|; the
    store exact. The -user_layout cases generate and compile code for this GPU's layout table."""
    check_supported(lc.PROBLEMS[name], case)


@pytest.mark.gpu
def test_gpu_wrappers_reject_bad_arguments():
    import cupy as cp
    good = cp.zeros((2, 16, 16), cp.float32)
    with pytest.raises(ValueError, match="operator"):
        lc.reduce("acc_16x16x16_f32", good, "prod")
    with pytest.raises(TypeError, match="dtype"):
        lc.reduce("acc_16x16x16_f16", good, "max")
    with pytest.raises(ValueError, match="shape"):
        lc.reduce("acc_32x8x16_f32", good, "max")
    with pytest.raises(TypeError, match="cupy"):
        lc.reduce("acc_16x16x16_f32", np.zeros((2, 16, 16), np.float32), "max")
    with pytest.raises(warp.LayoutError):
        lc.reduce("acc_16x16x16_f32", good, "max", layout=np.zeros((32, 8, 2), np.int64))
