"""Topic 11_fused_lm_head: the fused LM head against its float64 reference (every case on a GPU, the
small ones on the PTX interpreter anywhere), wrong answers that must fail, the kernels' registers
and SASS (the row reduction in registers), the wrapper's argument checks, and the
GPU run's record as the chapter glues it."""
import numpy as np
import pytest

from fraglab import runs_where, sass, toolchain
from fraglab import fused_lm_head as topic
from fraglab.fused_lm_head import bench, kernels, problems, report

PROBLEM = topic.PROBLEMS["fused_linear_cross_entropy"]
_CASES = [(name, case) for name, p in topic.PROBLEMS.items() for case in p.cases]
FORWARD = [kernels.kernel_name(t, cap) for t in ("f16", "bf16") for cap in (False, True)]


def test_the_launch_numbers_are_read_back_from_the_kernel_files():
    """The mma tile is declared once (kernels/11_fused_lm_head_config.cuh, lmh_*), the same in
    every file that includes it and on every target; the module's names read it."""
    from fraglab.fused_lm_head import backward
    tile = ("lmh_bm", "lmh_bn", "lmh_bk", "lmh_stages", "lmh_threads")
    c = {(f, a): toolchain.compile(f, a).constants("lmh_")
         for f in (kernels.KERNELS, backward.KERNELS, backward.CHUNKED) for a in ("sm_80", "sm_90")}
    assert len({tuple(x[k] for k in tile) for x in c.values()}) == 1
    fwd = c[(kernels.KERNELS, "sm_80")]
    assert kernels.tile("sm_80") == fwd == c[(kernels.KERNELS, "sm_90")]
    assert (kernels.BM, kernels.BN, kernels.BK, kernels.STAGES, kernels.THREADS,
            kernels.SMEM_BYTES) == tuple(fwd[k] for k in tile + ("lmh_fwd_smem",))
    assert fwd["lmh_threads"] % 32 == 0 and fwd["lmh_fwd_smem"] <= 227 * 1024
    for name in (kernels.KERNELS, backward.KERNELS, backward.CHUNKED):
        text = toolchain.kernel_path(name).read_text()
        assert '#include "11_fused_lm_head_config.cuh"' in text
        assert "constexpr int LMH_" not in text.replace("constexpr int LMH_SMEM", ""), name


def test_the_rungs_table_names_every_kernel_of_its_files():
    """Every kernel a rung's name rule makes is in its files (the forward's, the G kernel's, the
    GEMMs'), and each file's kernels are the table's (the forward file's merge besides)."""
    from fraglab.fused_lm_head import rungs
    made: dict = {}
    for table in (rungs.FORWARD, rungs.BACKWARD):
        for r in table.values():
            for kind in r.names:
                f = r.gemm_file if kind in ("dw", "dh") else r.file
                made.setdefault(f, set()).update(
                    rungs.kernel_name(r, kind, t, cap) for t in ("f16", "bf16") for cap in (0, 1))
    for f, names in made.items():
        built = set(toolchain.compile(f, "sm_90a").kernels) - {"lmhead_merge"}
        assert names == built, f


def test_the_launch_follows_a_tile_changed_in_the_kernel_file_only(rng):
    """The mma tile's ring changed from 3 stages to 2 in the kernel's text alone (its header
    inlined, LMH_STAGES = 2): the launch reads the new shared memory back from the module it
    runs (on the interpreter without a GPU), and the loss still matches float64."""
    from fraglab import launch
    inc = '#include "11_fused_lm_head_config.cuh"'
    header = (toolchain.KERNELS_DIR / "11_fused_lm_head_config.cuh").read_text()
    text = toolchain.kernel_path(kernels.KERNELS).read_text()
    assert text.count(inc) == 1 and header.count("LMH_STAGES = 3") == 1
    src = text.replace(inc, header.replace("#pragma once", "")
                                  .replace("LMH_STAGES = 3", "LMH_STAGES = 2"))
    own = kernels.tile()
    seen = []
    real = launch.launch
    with pytest.MonkeyPatch.context() as mp:
        def spy(fn, grid, block, args, shared_mem=0, **kw):
            seen.append((block, shared_mem))
            return real(fn, grid, block, args, shared_mem=shared_mem, **kw)
        mp.setattr(launch, "launch", spy)
        PROBLEM.check("random", rng, run=lambda **inp: problems.run_kernel(**inp, source=src))
    assert own["lmh_stages"] == 3 and seen[0] == (own["lmh_threads"], own["lmh_fwd_smem"] // 3 * 2)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_no_spills_and_the_row_reduction_stays_in_registers(arch):
    """Every forward kernel fits 255 registers without a spill or local memory; its main loop
    (the one with the HMMAs, which holds the tile's epilogue too) has the 2 x 2 x 2 SHFL of the
    quad reductions (max of rows g and g + 8 of two 16-row blocks) and touches shared memory only
    through ldmatrix and cp.async: no logit is stored to shared or global memory."""
    build = toolchain.compile(kernels.KERNELS, arch)
    for k in FORWARD:
        res = build.resources[k]
        assert res["registers"] <= 255 and res["spill_stores"] == res["spill_loads"] == 0, (k, res)
        assert build.classes(k)["local"] == 0, k
        loop = [sass.base_opcode(line) for line in sass.main_loop(build.sass(k), "HMMA")]
        assert loop.count("HMMA") == 64 and loop.count("SHFL") == 8, k
        assert not {"STS", "STG", "STL", "ST", "RED", "ATOM"} & set(loop), k


@pytest.mark.gpu
@pytest.mark.parametrize("name, case", _CASES, ids=[f"{n}-{c}" for n, c in _CASES])
def test_kernels_match_their_reference(name, case, check_supported):
    check_supported(topic.PROBLEMS[name], case)


#: Every small case of every Problem of the topic (every rung, forward and backward), each run on
#: the interpreter here or, FILTER_ELSEWHERE's, by the filter test (tests/test_interpreter.py runs
#: one of each Problem's again, under a random warp interleaving, and checks that this list holds
#: them all).
SMALL = [(name, case) for name, p in sorted(topic.PROBLEMS.items()) for case in p.interpreter_cases]
#: Of SMALL, those another test runs as they are, with more asserted: each backward rung's "filter"
#: case, which tests/test_11_fused_lm_head_backward.py's test_the_filter_skips_tiles_within_tolerance
#: checks against the same reference with the rung's own filter and counts its skipped tiles
#: (test_the_filter_test_runs_these_cases keeps the two lists together).
FILTER_ELSEWHERE = {("linear_cross_entropy_backward", "filter"): "chunked",
                    ("linear_cross_entropy_backward_atomic", "filter"): "atomic",
                    ("linear_cross_entropy_backward_wgmma", "filter"): "wgmma"}
RUN_HERE = [(n, c) for n, c in SMALL if (n, c.name) not in FILTER_ELSEWHERE]


@pytest.mark.parametrize("name, case", RUN_HERE, ids=[f"{n}-{c.name}" for n, c in RUN_HERE])
def test_every_small_case_passes_on_the_interpreter(name, case, rng, monkeypatch):
    monkeypatch.setenv("FRAGLAB_MODE", "cpu")
    topic.PROBLEMS[name].check(case, rng)


def test_the_filter_test_runs_these_cases():
    """What lets the cases of FILTER_ELSEWHERE leave this file's list: each is an interpreter case
    of its Problem, the filter test runs that case for the rung with the Problem's inputs,
    reference and tolerance, and with the case's own filter_eps (then again without a filter)."""
    from test_11_fused_lm_head_backward import FILTER_VARIANTS, PROBLEM
    small = {(n, c.name) for n, c in SMALL}
    for (name, case), variant in FILTER_ELSEWHERE.items():
        p = topic.PROBLEMS[name]
        assert (name, case) in small and variant in FILTER_VARIANTS
        assert p.run is getattr(problems, {"chunked": "run_backward"}.get(variant, f"run_backward_{variant}"))
        assert (p.inputs, p.reference) == (PROBLEM.inputs, PROBLEM.reference)
        assert p.case(case).params == PROBLEM.case(case).params
        assert p.tolerance(p.case(case)) == PROBLEM.tolerance(PROBLEM.case(case))


def test_the_rungs_keep_their_small_cases():
    """How many cases each Problem gives the interpreter (a case marked slow by mistake would
    leave a path of its kernels unchecked without a GPU)."""
    small = {n: len(p.interpreter_cases) for n, p in topic.PROBLEMS.items()}
    assert small["fused_linear_cross_entropy"] >= 10
    assert small["fused_linear_cross_entropy_wgmma"] >= 10
    assert small["linear_cross_entropy_backward"] >= 12
    assert small["linear_cross_entropy_backward_atomic"] == 5
    assert small["linear_cross_entropy_backward_wgmma"] == 11
    assert small["fused_linear_cross_entropy_tma"] == 2
    assert small["linear_cross_entropy_backward_tma"] == 3


def _drop_last_tile(h, w, targets, **kw):
    """A plausible wrong answer: the last vocabulary tile left out (targets there stay valid)."""
    v = w.shape[0]
    keep = (v - 1) // kernels.BN * kernels.BN
    ref = problems.lm_head_reference(h, w[:keep], np.where(targets < keep, targets, 0), **kw)
    return ref


def test_wrong_answers_fail_the_problem(rng, monkeypatch):
    """The check can fail: the last vocabulary tile left out, in NumPy and as a kernel mutant on
    the interpreter (its splits' last tile bound off by one), and losses off by 1e-4."""
    monkeypatch.setenv("FRAGLAB_MODE", "cpu")
    with pytest.raises(AssertionError, match="WRONG"):
        PROBLEM.check("ragged", rng, run=_drop_last_tile)
    source = toolchain.kernel_path(kernels.KERNELS).read_text()
    mutant = source.replace("t1 = min(t0 + tiles_per_split, n_tiles)",
                            "t1 = min(t0 + tiles_per_split, n_tiles - 1)")
    assert mutant != source
    with pytest.raises(AssertionError, match="WRONG"):
        PROBLEM.check("random", rng, run=lambda **inp: problems.run_kernel(**inp, source=mutant))
    with pytest.raises(AssertionError, match="WRONG"):
        PROBLEM.check("random", rng, run=lambda **inp: problems.lm_head_reference(**inp) * (1 + 1e-4))


def test_splits_fill_the_gpu_and_none_is_empty():
    for row_blocks, n_tiles, sms in [(32, 1002, 132), (64, 2000, 132), (128, 1002, 132),
                                     (1, 3, 2), (1, 1, 2), (200, 5, 108)]:
        s, per = kernels.choose_splits(row_blocks, n_tiles, sms)
        assert 1 <= s <= kernels.MAX_SPLITS and (s - 1) * per < n_tiles <= s * per
    assert kernels.choose_splits(32, 1002, 132)[0] > 1       # 32 row blocks alone fill 32 SMs


def _inputs(xp, n=8, v=20, d=32):
    h = xp.zeros((n, d), xp.float16)
    return h, xp.zeros((v, d), xp.float16), xp.zeros(n, xp.int64)


@pytest.mark.parametrize("change, exc, words", [
    (lambda xp, h, w, t: (h.astype(xp.float32), w, t), TypeError, "float16 or uint16"),
    (lambda xp, h, w, t: (h, w.astype(xp.uint16), t), TypeError, "dtype float16"),
    (lambda xp, h, w, t: (h[None], w, t), ValueError, "2 dimensions"),
    (lambda xp, h, w, t: (h, w[:, :16].copy(), t), ValueError, "d = 32"),
    (lambda xp, h, w, t: (h, w, t[:5].copy()), ValueError, "one entry per row"),
    (lambda xp, h, w, t: (h, w, t.astype(xp.float32)), TypeError, "int32 or int64"),
    (lambda xp, h, w, t: (h[:, :24].copy(), w[:, :24].copy(), t), ValueError, "multiple of 16"),
    (lambda xp, h, w, t: (h[:0], w, t[:0]), ValueError, "non-empty"),
    (lambda xp, h, w, t: (xp.zeros((8, 64), xp.float16)[:, ::2], w, t), ValueError, "contiguous"),
    (lambda xp, h, w, t: (xp.zeros((9 * 32 + 4,), xp.float16)[4:].reshape(9, 32)[1:], w, t),
     ValueError, "aligned"),
    (lambda xp, h, w, t: (h, w, t + 20), ValueError, r"targets\[0\] = 20 is outside \[0, V = 20\)"),
    (lambda xp, h, w, t: (h, w, t - 1), ValueError, "ignore_index"),
])
def test_bad_arguments_are_rejected_before_any_launch(xp, change, exc, words):
    h, w, t = change(xp, *_inputs(xp))
    with pytest.raises(exc, match=words):
        topic.fused_linear_cross_entropy(h, w, t)


@pytest.mark.parametrize("kw, exc, words", [
    (dict(reduction="avg"), ValueError, "reduction"),
    (dict(softcap=0.0), ValueError, "softcap"),
    (dict(softcap=float("inf")), ValueError, "softcap"),
    (dict(softcap="30"), TypeError, "softcap"),
    (dict(ignore_index=1.5), TypeError, "ignore_index"),
    (dict(ignore_index=2**40), ValueError, "int32"),
    (dict(splits=0), ValueError, "splits"),
])
def test_bad_options_are_rejected(xp, kw, exc, words):
    with pytest.raises(exc, match=words):
        topic.fused_linear_cross_entropy(*_inputs(xp), **kw)


def test_the_wrong_kind_of_array_is_rejected_before_any_launch(foreign):
    make, words = foreign
    h, w, t = _inputs(np)
    with pytest.raises(TypeError, match=words):
        topic.fused_linear_cross_entropy(make(h), w, t)


def test_a_gpu_older_than_sm80_is_refused_with_the_reason():
    with runs_where.simulated_gpu((7, 5)):
        ok, why = PROBLEM.supported(PROBLEM.cases[0])
        assert not ok and "compute capability 8.0" in why and "7.5" in why
        assert kernels.requires("f16") == (False, why)
    assert PROBLEM.supported(PROBLEM.cases[0]) == (True, "")


def test_torch_tensors_in_and_out(rng, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("FRAGLAB_MODE", "cpu")
    h = torch.randn(20, 32, dtype=torch.bfloat16)
    w = torch.randn(150, 32, dtype=torch.bfloat16)
    t = torch.randint(0, 150, (20,))
    got = topic.fused_linear_cross_entropy(h, w, t, reduction="none")
    ref = torch.nn.functional.cross_entropy(h.double() @ w.double().T, t, reduction="none")
    assert isinstance(got, torch.Tensor) and torch.allclose(got.double(), ref, rtol=1e-5)
    with pytest.raises(TypeError, match="all be torch tensors"):
        topic.fused_linear_cross_entropy(h, w, t.numpy())


# The lab's check on a passing and a failing step: the solution's step passes it and the step
# without the quad's second shuffle (xor 2) fails it, through the grader itself, in
# tests/test_grading_fixtures.py (solution:1 and 11_fused_lm_head/1/half_quad).


def test_the_bench_records_what_the_chapter_glues(tmp_path, monkeypatch):
    """Without a GPU the run records its checks and says why nothing was timed; the glue values
    of that record, of a GPU record, and of none at all."""
    monkeypatch.setenv("FRAGLAB_MODE", "cpu")
    # one case per Problem (the quick run's two repeat what test_every_small_case_passes_... runs)
    monkeypatch.setattr(bench, "_cases", lambda quick: lambda p: tuple(p.cases_here())[:1])
    bench.run(tmp_path, quick=True)
    doc = report.load(tmp_path / "results.json")
    checks = doc["results"]["check"]
    assert checks and all(r["ok"] for r in checks) and "timing" in doc["results"]["errors"]
    values = report.glue_values(doc)
    assert set(values) == set(report.CITED)
    assert values["ch11-checks"] == f"{len(checks)} of {len(checks)} passed, on a machine without a GPU"
    assert report.glue_values({})["ch11-checks"].startswith("none yet")
    assert "not measured yet" in report.comparison_table({})._repr_html_()


def test_glue_values_and_table_of_a_gpu_record():
    def var(ms, mib):
        return {"median_ms": ms, "peak_bytes": mib * 2**20, "p10_ms": ms, "p90_ms": ms}
    rec = {"head": "llama3_8b", "n": 8192, "variants": {
        "course": var(30.0, 12), "eager": var(40.0, 12000), "cce": var(25.5, 3)},
        "failures": {"liger": "ImportError: x"}}
    doc = {"device": {"name": "GPU X"}, "results": {"check": [{"ok": True}], "timing": [rec]}}
    values = report.glue_values(doc)
    assert values["ch11-course-8k"] == "30.0 ms, 12 MiB"
    assert values["ch11-eager-8k"] == "40.0 ms, 12,000 MiB"
    assert values["ch11-fastest-8k"] == "Cut Cross-Entropy: 25.5 ms, 3 MiB"
    html = report.comparison_table(doc)._repr_html_()
    assert "GPU X" in html and "failed" in html and "25.5 ms / 3 MiB" in html
    assert report.logits_bytes(8192, 128256) == 8192 * 128256 * 4
