"""Topic 11_fused_lm_head: warp_scan against its int64 reference (every case on a GPU, the small ones on
the PTX interpreter anywhere), its SASS for every target, the wrapper's argument checks, the lab's
check, and the GPU run's record as the chapter glues it."""
import numpy as np
import pytest

from fraglab import ARCHES, grade, toolchain
from fraglab import fused_lm_head as topic
from fraglab.fused_lm_head import bench, lab, report

_CASES = [(name, case) for name, p in topic.PROBLEMS.items() for case in p.cases]


@pytest.mark.parametrize("arch", ARCHES)
def test_warp_scan_is_five_shuffles_in_registers(arch):
    """Five SHFL and nothing through memory but the row's load and store, on every target."""
    build = toolchain.compile("11_fused_lm_head", arch)
    classes = build.classes("warp_scan")
    assert (build.opcodes("warp_scan")["SHFL"], classes["global"]) == (5, 2)
    assert not any(classes[c] for c in ("shared", "barrier", "local")), classes


@pytest.mark.gpu
@pytest.mark.parametrize("name, case", _CASES, ids=[f"{n}-{c}" for n, c in _CASES])
def test_kernels_match_their_reference(name, case, rng):
    topic.PROBLEMS[name].check(case, rng)


def test_the_small_cases_pass_on_the_interpreter(rng, monkeypatch):
    monkeypatch.setenv("FRAGLAB_MODE", "cpu")
    for name, p in topic.PROBLEMS.items():
        for case in p.interpreter_cases:
            p.check(case, rng)


def test_a_wrong_scan_fails_its_problem(rng):
    """The check can fail: an exclusive scan (each lane without its own element)."""
    p = topic.PROBLEMS["warp_scan"]
    with pytest.raises(AssertionError, match="WRONG"):
        p.check("rows7", rng, run=lambda x, **_: np.cumsum(x, axis=1) - x)


@pytest.mark.parametrize("make, exc, words", [
    (lambda xp: xp.zeros((4, 32), xp.float32), TypeError, "int32"),
    (lambda xp: xp.zeros((4, 31), xp.int32), ValueError, "shape"),
    (lambda xp: xp.zeros((4, 32, 1), xp.int32), ValueError, "shape"),
    (lambda xp: xp.zeros((0, 32), xp.int32), ValueError, "rows"),
    (lambda xp: xp.zeros((4, 64), xp.int32)[:, ::2], ValueError, "contiguous"),
])
def test_warp_scan_rejects_bad_arguments(xp, make, exc, words):
    with pytest.raises(exc, match=words):
        topic.warp_scan(make(xp))


def test_the_wrong_kind_of_array_is_rejected_before_any_launch(foreign):
    make, words = foreign
    with pytest.raises(TypeError, match=words):
        topic.warp_scan(make(np.zeros((4, 32), np.int32)))


def test_the_lab_check_passes_the_course_kernel_and_fails_a_short_scan(rng, monkeypatch):
    monkeypatch.setenv("FRAGLAB_MODE", "cpu")
    source = toolchain.kernel_path("11_fused_lm_head").read_text()
    assert "edge cases" in lab.check_scan("exercise 1", source, rng)
    with pytest.raises(grade.GradeError, match="SHFL"):
        lab.check_scan("exercise 1", source.replace("offset < 32", "offset < 16"), rng)


def test_the_bench_records_what_the_chapter_glues(tmp_path, monkeypatch):
    """Without a GPU the run records its checks and says why nothing was timed; the glue values
    of that record, of a GPU record, and of none at all."""
    monkeypatch.setenv("FRAGLAB_MODE", "cpu")
    bench.run(tmp_path, quick=True)
    doc = report.load(tmp_path / "results.json")
    checks = doc["results"]["check"]
    assert checks and all(r["ok"] for r in checks) and "timing" in doc["results"]["errors"]
    values = report.glue_values(doc)
    assert set(values) == set(report.CITED)
    assert values["ch11-checks"] == f"{len(checks)} of {len(checks)} passed, on a machine without a GPU"
    assert values["ch11-timing"] == values["ch11-gbs"] == report.NOT_YET
    timed = {"device": {"name": "GPU X"}, "results": {"check": checks, "timing": {
        "rows": 1 << 22, "median_ms": 0.5, "p10_ms": 0.49, "p90_ms": 0.52, "n": 300,
        "gbs": 2147.5}}}
    values = report.glue_values(timed)
    assert values["ch11-timing"] == "0.5000 ms for 4,194,304 rows (2148 GB/s)"
    assert values["ch11-gbs"] == "2148 GB/s" and values["ch11-checks"].endswith("on GPU X")
    assert "GPU X" in report.timing_table(timed)._repr_html_()
    assert report.glue_values({})["ch11-checks"].startswith("none yet")
