"""Topic 04_microbenchmark: the paper's two kernels - their SASS and ptxas report anywhere, their
results against NumPy (``PROBLEMS``) on a GPU. The measurement machinery is tested in
test_04_microbenchmark_measure.py, the lab's checks in test_04_microbenchmark_lab.py."""
import numpy as np
import pytest

from fraglab import ARCHES, microbenchmark as mb, sass, toolchain

BF16_ARCHES = [a for a in ARCHES if a != "sm_75"]
KERNEL_CASES = [(a, d) for a in ARCHES for d in mb.DTYPES if not (a == "sm_75" and d == "bf16")]


def opcodes(arch, kernel, base=True):
    return sass.count_opcodes(mb.kernel_sass(arch, kernel), base=base)


def classes(arch, kernel):
    return sass.count_classes(mb.kernel_sass(arch, kernel))


# ------------------------------------------------------------------------------------------------
# The build: SASS and ptxas, on any machine
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("arch, dtype", KERNEL_CASES)
def test_in_register_kernel_never_touches_shared_memory(arch, dtype):
    b = toolchain.compile(mb.KERNELS, arch)
    k = mb.kernel_name("regs", dtype)
    cls, ops, res = classes(arch, k), opcodes(arch, k), b.resources[k]
    assert cls["shared"] == 0 and cls["barrier"] == 0 and cls["local"] == 0
    assert res["smem"] == 0 and res["barriers"] == 0
    assert ops["SHFL"] == 4                       # offsets 1 and 2, for rows g and g + 8


@pytest.mark.parametrize("arch, dtype", KERNEL_CASES)
def test_baseline_goes_through_shared_memory(arch, dtype):
    b = toolchain.compile(mb.KERNELS, arch)
    k = mb.kernel_name("smem", dtype)
    ops, res = opcodes(arch, k), b.resources[k]
    assert ops["STS"] >= 4 and ops["LDS"] == 16 and ops["BAR"] == 1 and ops["SHFL"] == 0
    assert res["smem"] == 1024 and res["barriers"] == 1   # the paper's Table 3 footprint


@pytest.mark.parametrize("arch, dtype", KERNEL_CASES)
def test_the_two_kernels_share_everything_but_the_epilogue(arch, dtype):
    s, r = (opcodes(arch, mb.kernel_name(w, dtype), base=False) for w in ("smem", "regs"))
    for op in {*s, *r}:
        if op.startswith(("HMMA", "LDG", "LD.", "MOVM")) or op == "LD":
            assert s[op] == r[op], f"{op}: {s[op]} vs {r[op]}"
    assert any(op.startswith("HMMA") for op in s)


@pytest.mark.parametrize("arch", ARCHES)
def test_no_kernel_spills_or_uses_a_stack(arch):
    b = toolchain.compile(mb.KERNELS, arch)
    for k in b.kernels:
        r = b.resources[k]
        assert r["stack_frame"] == r["spill_stores"] == r["spill_loads"] == 0, k


def test_bf16_kernels_trap_on_sm75():
    for w in mb.VARIANTS:
        for clock in (False, True):
            ops = opcodes("sm_75", mb.kernel_name(w, "bf16", clock))
            assert ops["BPT"] == 1 and ops["HMMA"] == 0


@pytest.mark.parametrize("arch, dtype", KERNEL_CASES)
@pytest.mark.parametrize("variant", mb.VARIANTS)
def test_clock_reads_enclose_the_whole_epilogue(arch, dtype, variant):
    r = mb.clock_bracket(arch, variant, dtype)
    assert r["ok"], "\n".join(f"{i:3} {l}" for i, l in enumerate(r["listing"]))


def test_build_report_is_table_3_from_ptxas():
    r = mb.build_report("sm_90", "bf16")["ways"]
    assert r["smem"]["smem_bytes"] == 1024 and r["regs"]["smem_bytes"] == 0
    assert r["smem"]["barriers"] == 1 and r["regs"]["barriers"] == 0
    assert r["regs"]["registers"] <= r["smem"]["registers"]
    assert r["smem"]["opcodes"]["LDS"] == 16 and r["regs"]["opcodes"]["SHFL"] == 4


# ------------------------------------------------------------------------------------------------
# Inputs, reference, argument checks (no GPU needed)
# ------------------------------------------------------------------------------------------------

def test_kernel_names():
    assert mb.kernel_name("smem", "f16") == "rowmax_smem_f16"
    assert mb.kernel_name("regs", "bf16", clock=True) == "rowmax_regs_bf16_clock"
    names = set(toolchain.compile(mb.KERNELS, "sm_90").kernels)
    assert {mb.kernel_name(w, d, c) for w in mb.VARIANTS for d in mb.DTYPES for c in (0, 1)} == names
    with pytest.raises(ValueError, match="variant"):
        mb.kernel_name("shared", "f16")
    with pytest.raises(ValueError, match="dtype"):
        mb.kernel_name("smem", "fp32")


def test_bf16_encoding_rounds_to_nearest_even():
    x = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, -2.5, np.inf, -np.inf, np.nan], np.float32)
    back = mb.from_bf16(mb.to_bf16(x))
    np.testing.assert_array_equal(back[:6], [1.0, 1.0, 1.0 + 2**-6, -2.5, np.inf, -np.inf])
    assert np.isnan(back[6])


def test_reference_is_fmax_of_the_float64_product(rng):
    for dtype in mb.DTYPES:
        a, b = mb.random_inputs(3, dtype, rng)
        af, bf = mb.decode(a, dtype), mb.decode(b, dtype)
        np.testing.assert_array_equal(mb.reference(a, b, dtype), (af @ bf).max(axis=2))


def test_reference_follows_fmaxf_for_inf_and_nan(rng):
    a = rng.standard_normal((1, 16, 16)).astype(np.float32)
    b = rng.standard_normal((1, 16, 16)).astype(np.float32)
    a[0, 3, 0], b[0, 0, :] = -np.inf, 1.0       # row 3 of C is -inf (column 7 aside)
    a[0, 5, :] = np.nan                          # row 5 of C is NaN
    b[0, 2, 7] = np.nan                          # column 7 of C is NaN: fmax ignores it
    ref = mb.reference(mb.encode(a, "f16"), mb.encode(b, "f16"), "f16")[0]
    assert ref[3] == -np.inf and np.isnan(ref[5])
    assert np.isfinite(np.delete(ref, [3, 5])).all()


def test_the_wrong_kind_of_array_is_rejected_before_any_launch(foreign):
    a = np.zeros((1, 16, 16), np.float16)
    make, words = foreign
    with pytest.raises(TypeError, match=words):
        mb.rowmax(make(a), make(a), variant="smem", dtype="f16")
    with pytest.raises(ValueError, match="variant"):
        mb.launcher(a, a, variant="sram", dtype="f16")
    with pytest.raises(ValueError, match="dtype"):
        mb.rowmax(a, a, dtype="tf32")


def test_fill_tiles():
    assert mb.fill_tiles(132) == 132 * 32 and mb.fill_tiles(132, 8) == 132 * 32 * 8


# ------------------------------------------------------------------------------------------------
# Correctness: PROBLEMS (its checks anywhere, the kernels on a GPU)
# ------------------------------------------------------------------------------------------------

ROWMAX = mb.PROBLEMS["rowmax"]


def test_the_problem_keeps_every_case():
    """Tile counts 1, 7, 1009 for both variants, dtypes and clock kernels; inf/NaN rows for each
    variant and dtype; a grid larger than n_tiles for each variant."""
    cases = {str(c) for c in ROWMAX.cases}
    assert {mb.problems.case_name(w, d, n, c) for w in mb.VARIANTS for d in mb.DTYPES
            for n in (1, 7, 1009) for c in (False, True)} <= cases
    assert {f"inf_nan-{w}-{d}" for w in mb.VARIANTS for d in mb.DTYPES} <= cases
    assert {f"extra_blocks-{w}" for w in mb.VARIANTS} <= cases
    assert len(cases) == 24 + 4 + 2 and len(ROWMAX.edge_cases) == 6


def test_a_wrong_or_unwritten_row_fails_its_problem(rng):
    """The check can fail: rows off by more than the tolerance, a row left unwritten (NaN), a
    NaN row where the reference has -inf."""
    def off(a, b, dtype, **_):
        return mb.reference(a, b, dtype) + 1e-2
    with pytest.raises(AssertionError, match="WRONG"):
        ROWMAX.check("regs-f16-7", rng, run=off)

    def unwritten(a, b, dtype, **_):
        r = mb.reference(a, b, dtype)
        r[3, 5] = np.nan
        return r
    with pytest.raises(AssertionError, match="WRONG"):
        ROWMAX.check("smem-f16-7", rng, run=unwritten)

    def nan_for_inf(a, b, dtype, **_):
        r = mb.reference(a, b, dtype)
        r[np.isinf(r)] = np.nan
        return r
    with pytest.raises(AssertionError, match="WRONG"):
        ROWMAX.check("inf_nan-regs-f16", rng, run=nan_for_inf)
    exact = lambda a, b, dtype, **_: mb.reference(a, b, dtype)       # noqa: E731
    assert ROWMAX.check("inf_nan-smem-bf16", rng, run=exact).ok


@pytest.mark.gpu
@pytest.mark.parametrize("case", ROWMAX.cases, ids=str)
def test_kernels_match_numpy(case, rng):
    """Each kernel (plain and clock-timed; a clock count outside 1..1e7 fails its tile) against
    the float64 reference, outputs poisoned: random tiles, -inf and NaN rows that follow fmaxf,
    and a grid larger than n_tiles whose extra blocks must write nothing."""
    ok, why = ROWMAX.supported(case)
    if not ok:
        pytest.skip(why)
    ROWMAX.check(case, rng)


@pytest.mark.gpu
@pytest.mark.parametrize("bad, exc, msg", [
    (lambda cp: (cp.zeros((2, 16, 16), cp.float32),) * 2, TypeError, "float16"),
    (lambda cp: (cp.zeros((2, 16, 8), cp.float16),) * 2, ValueError, "shape"),
    (lambda cp: (cp.zeros((2, 16, 16), cp.float16), cp.zeros((3, 16, 16), cp.float16)),
     ValueError, "same number of tiles"),
    (lambda cp: (cp.zeros((0, 16, 16), cp.float16),) * 2, ValueError, "number of tiles"),
    (lambda cp: (cp.zeros((2, 16, 32), cp.float16)[:, :, ::2],) * 2, ValueError, "contiguous"),
])
def test_rowmax_rejects_bad_arguments(bad, exc, msg):
    import cupy as cp
    a, b = bad(cp)
    with pytest.raises(exc, match=msg):
        mb.rowmax(a, b, variant="regs", dtype="f16")


@pytest.mark.gpu
def test_bf16_tiles_travel_as_uint16():
    import cupy as cp
    x = cp.zeros((1, 16, 16), cp.float16)
    with pytest.raises(TypeError, match="uint16 bit patterns"):
        mb.rowmax(x, x, dtype="bf16")


