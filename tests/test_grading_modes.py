"""GPU-mode grading runs every CUDA exercise on the PTX interpreter too (issue "Grading that a
wrong answer cannot pass", item 1). No GPU here: a fake GPU (``device._probe`` says yes, kernels
"run" by a stand-in that returns the right answer, as an H100 may for undefined behaviour) proves
the control flow; the interpreter half runs for real. The GPU tier runs the real thing."""
import os

import numpy as np
import pytest

from fraglab import device, grade, hello_warp, launch
from fraglab.grading import checks
from fraglab.grading.fixtures import FIXTURES_DIR
from fraglab.problem import Case, Problem
from nbval_run import ROOT


@pytest.fixture
def fake_gpu(monkeypatch):
    """A GPU machine in auto mode: ``gpu_available()`` is True until something forces cpu."""
    monkeypatch.delenv("FRAGLAB_MODE", raising=False)
    monkeypatch.setattr(device, "_probe", lambda: (True, ""))
    monkeypatch.setattr(device, "name", lambda: "Fake GPU")
    return device


def test_forced_mode_sets_and_restores_the_mode(monkeypatch):
    monkeypatch.setenv("FRAGLAB_MODE", "gpu")
    with device.forced_mode("cpu"):
        assert device.mode() == "cpu" and os.environ["FRAGLAB_MODE"] == "cpu"
    assert os.environ["FRAGLAB_MODE"] == "gpu"
    monkeypatch.delenv("FRAGLAB_MODE")
    with pytest.raises(RuntimeError):
        with device.forced_mode("cpu"):
            raise RuntimeError("a failing check inside")
    assert "FRAGLAB_MODE" not in os.environ
    with pytest.raises(ValueError):
        with device.forced_mode("gpu-ish"):
            pass


def _problem(wrong_on_interpreter=False):
    calls = []

    def run(x, **_):
        calls.append(device.gpu_available())
        y = x.sum(axis=1)
        return y + 1 if wrong_on_interpreter and not device.gpu_available() else y
    p = Problem("fake/rowsum", "row sums", inputs=lambda rng, rows=4: {"x": rng.standard_normal((rows, 32))},
                reference=lambda x: x.sum(axis=1), run=run, tol=1e-12,
                cases=(Case("random"), Case("big", rows=10_000, slow=True), Case("one", rows=1, edge=True)))
    return p, calls


def test_check_cases_on_a_gpu_runs_the_small_cases_on_the_interpreter_too(fake_gpu, rng):
    p, calls = _problem()
    text = checks.check_cases("exercise 9", p, p.run, rng)
    # GPU: random twice, big twice, one once; then the interpreter: random and one, once each
    assert calls == [False] * 2 + [True] * 5          # the interpreter first
    assert text == ("4 random inputs and 1 edge cases (random, big, one) on Fake GPU "
                    "and 2 cases (random, one) on the PTX interpreter")
    assert device.gpu_available(), "the mode is restored"


def test_check_cases_fails_what_only_the_interpreter_sees(fake_gpu, rng):
    p, _ = _problem(wrong_on_interpreter=True)
    with pytest.raises(grade.GradeError, match="on the PTX interpreter"):
        checks.check_cases("exercise 9", p, p.run, rng)
    assert device.gpu_available(), "the mode is restored after a failure"


def test_check_cases_without_a_gpu_runs_once_on_the_interpreter(monkeypatch, rng):
    monkeypatch.setenv("FRAGLAB_MODE", "cpu")
    p, calls = _problem()
    text = checks.check_cases("exercise 9", p, p.run, rng)
    assert calls == [False] * 3 and text.endswith("(random, one) on the PTX interpreter (no GPU)")


def test_each_mode_runs_the_body_here_then_on_the_interpreter(fake_gpu, monkeypatch):
    seen = checks.each_mode(lambda: (device.gpu_available(), checks.where()))
    assert seen == [(True, "on Fake GPU"), (False, "on the PTX interpreter")]
    assert checks.places() == "on Fake GPU and on the PTX interpreter"
    monkeypatch.setenv("FRAGLAB_MODE", "cpu")
    assert checks.each_mode(lambda: device.gpu_available()) == [False]
    assert checks.places() == "on the PTX interpreter (no GPU)"


def _warp_sum_source(region_text):
    import json
    sol = json.loads((ROOT / "solutions" / "00_hello_warp.ipynb").read_text())
    from fraglab.grading import build
    cell = next("".join(c["source"]) for c in sol["cells"] if "WARP_SUM_SOURCE = r" in "".join(c["source"]))
    if region_text is not None:
        cell = build.replace_bodies(cell, {"3": region_text})
    ns = {}
    exec(cell, ns)
    return ns["WARP_SUM_SOURCE"]


def _lucky_gpu_run(source):
    """The H100's behaviour on the UB fixtures: the right sums. On the interpreter: the real kernel."""
    def run(x, **_):
        if device.gpu_available():
            return x.astype(np.float64).sum(axis=1).astype(np.float32)
        return hello_warp.warp_sum(launch.to_device(x), source=source)
    return run


@pytest.mark.parametrize("fixture", ["every_lane_writes", "half_mask"])
def test_undefined_behaviour_a_gpu_runs_correctly_fails_in_gpu_mode(fixture, fake_gpu, rng):
    body = (FIXTURES_DIR / "00_hello_warp" / "3" / f"{fixture}.txt").read_text()
    P = hello_warp.PROBLEMS["warp_sum"]
    with pytest.raises(grade.GradeError, match="PTX interpreter"):
        checks.check_cases("exercise 3", P, _lucky_gpu_run(_warp_sum_source(body)), rng)


def test_the_solution_passes_in_gpu_mode_with_its_interpreter_half(fake_gpu, rng):
    P = hello_warp.PROBLEMS["warp_sum"]
    text = checks.check_cases("exercise 3", P, _lucky_gpu_run(_warp_sum_source(None)), rng)
    assert "on Fake GPU and" in text and text.endswith("on the PTX interpreter")


def test_lab07_grader_runs_the_interpreter_cases_on_a_gpu(fake_gpu, monkeypatch, rng):
    from fraglab.register_reuse import lab
    runs = []
    real = lab._launch_source

    def launch_source(a, b, source, interpreter, tiles=None):
        runs.append(interpreter)
        if interpreter:
            return real(a, b, source, True, tiles)
        return (np.asarray(a, np.float64) @ np.asarray(b, np.float64)).astype(np.float32)
    monkeypatch.setattr(lab, "_launch_source", launch_source)
    monkeypatch.setattr(launch, "to_device", lambda x: x)
    from test_07_register_reuse_lab import SOURCE
    text = lab.check_tile1d_source(SOURCE, rng)
    n, m = len(lab.INTERPRETER_CASES), len(lab.OTHER_CASES)
    k = len(runs) - 2 * m                             # rung 4's tiles, then the other tiles
    assert runs[:n] == [True] * n and not any(runs[n:k]) and k > n     # interpreter first
    assert runs[k:] == [True] * m + [False] * m
    assert "float64" in text and "on Fake GPU and" in text and text.endswith("on the PTX interpreter")


GPU_ONLY = ROOT / "tests" / "fixtures" / "gpu_only"


@pytest.mark.gpu
@pytest.mark.nbval
def test_an_answer_that_detects_the_interpreter_fails_in_gpu_mode(seed):
    """Lab 00 exercise 3, right on the interpreter (its %globaltimer counts instructions) and one
    butterfly step short on a GPU: GPU-mode grading runs the GPU's cases and fails it, for its values (its SASS is the
    solution's five SHFL). GPU-less grading passes it: the interpreter is all it has."""
    from fraglab.grading import build, grade_bodies
    sol = ROOT / "solutions" / "00_hello_warp.ipynb"
    bodies = build.region_bodies(build.read(sol))
    bodies["3"] = (GPU_ONLY / "00_hello_warp" / "3" / "detects_interpreter.txt").read_text()
    v = grade_bodies(sol, [("interpreter-aware", bodies, ["3"])], mode="gpu",
                     seed=seed)["interpreter-aware"][0]
    assert not v.ok and v.text.startswith("runs but gives wrong values"), v.text


@pytest.mark.nbval
def test_an_answer_that_detects_the_interpreter_passes_without_a_gpu(seed):
    """The other half: GPU-less grading passes that answer (it does detect the interpreter), so
    the GPU-mode test above fails it for its GPU values, not for a mistake on every machine."""
    from fraglab.grading import build, grade_bodies
    sol = ROOT / "solutions" / "00_hello_warp.ipynb"
    bodies = build.region_bodies(build.read(sol))
    bodies["3"] = (GPU_ONLY / "00_hello_warp" / "3" / "detects_interpreter.txt").read_text()
    v = grade_bodies(sol, [("interpreter-aware", bodies, ["3"])], mode="cpu",
                     seed=seed)["interpreter-aware"][0]
    assert v.ok, v.text
