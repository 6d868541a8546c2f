"""Every topic's kernels on the PTX interpreter, and the interpreter against the GPU.

CPU tier: each Problem of each topic runs on the interpreter (GPU-less mode, forced even on a GPU
machine) on a sample of its small cases, against its float64 reference - the same checks the GPU
tier makes. GPU tier: the same inputs through the GPU and through the interpreter must agree: bit
for bit where the hardware is deterministic and documented, within the problem's tolerance where
tensor cores (accumulation order) or approximate functions (ex2.approx) are involved. With
``FRAGLAB_AGREEMENT_OUT=file.json`` the GPU tier writes its per-kernel table there.
"""
from __future__ import annotations

import importlib
import json
import os
import pkgutil

import numpy as np
import pytest

import fraglab
from fraglab import launch, ptx
from fraglab.problem import named_outputs, rel_error

#: Cases per problem in one CPU-tier run (sampled from the interpreter cases by the test's seed).
SAMPLE = 3
#: Topics whose own tests run every interpreter case of every Problem (topic: that test file's
#: list of (problem, case)): here each of their Problems runs one case, under a random warp
#: interleaving, which is what this file adds to them (test_the_topics_named_run_every_case...).
EVERY_CASE_ELSEWHERE = {"fa3_pipelining": ("test_10_fa3_pipelining_kernels", "SMALL"),
                        "fused_lm_head": ("test_11_fused_lm_head", "SMALL")}


def _topic_problems():
    out = []
    for m in sorted(pkgutil.iter_modules(fraglab.__path__), key=lambda m: m.name):
        mod = importlib.import_module(f"fraglab.{m.name}")
        for name, p in sorted(getattr(mod, "PROBLEMS", {}).items()):
            out.append((f"{m.name}.{name}", p))
    return out


PROBLEMS = _topic_problems()
IDS = [n for n, _ in PROBLEMS]

#: Problems whose GPU and interpreter results must be bit-equal: integer, layout, shuffle and
#: memory work, and f32 add/mul/fma in a fixed order (the SGEMM ladder). The others use tensor
#: cores (accumulation order is the hardware's) or ex2.approx, and agree within tolerance.
BIT_EXACT_TOPICS = ("hello_warp", "layout_codegen", "register_reuse")
BIT_EXACT = {"permutation_and_quad_reduction.reduce_acc"}


def _bit_exact(name: str) -> bool:
    return name in BIT_EXACT or name.split(".")[0] in BIT_EXACT_TOPICS


def test_every_topic_with_kernels_has_problems():
    topics = {n.split(".")[0] for n in IDS}
    for nb in sorted((fraglab.tools.REPO_ROOT / "book").glob("[0-9][0-9]_*.ipynb")):
        name = nb.stem[3:]
        if name == "tracer":        # the tracer's kernels are checked through its own traces
            continue
        assert name in topics, f"topic {nb.stem} defines no PROBLEMS"


@pytest.fixture
def interpreter(monkeypatch):
    monkeypatch.setenv("FRAGLAB_MODE", "cpu")
    assert launch.interpreted()


@pytest.mark.parametrize("name, problem", PROBLEMS, ids=IDS)
def test_problem_on_the_interpreter(name, problem, rng, interpreter):
    cases = [c for c in problem.interpreter_cases if problem.supported(c)[0]]
    assert cases, f"{name} has no case small enough for the interpreter (all are slow=True)"
    sample = 1 if name.split(".")[0] in EVERY_CASE_ELSEWHERE else SAMPLE
    picks = rng.choice(len(cases), size=min(sample, len(cases)), replace=False)
    for n, i in enumerate(sorted(picks)):
        # the first case also under one random warp interleaving (its seed is in any failure)
        with ptx.options(seeds=(int(rng.integers(1 << 16)),) if n == 0 else ()):
            res = problem.check(cases[i], rng)
        print(res.line())


@pytest.mark.parametrize("topic", sorted(EVERY_CASE_ELSEWHERE))
def test_the_topics_named_run_every_case_in_their_own_tests(topic):
    """What lets :func:`test_problem_on_the_interpreter` run one case of their Problems: every
    interpreter case of every one of them is in the topic's own test list."""
    module, attr = EVERY_CASE_ELSEWHERE[topic]
    listed = {(n, c.name) for n, c in getattr(importlib.import_module(module), attr)}
    want = {(n.split(".", 1)[1], c.name) for n, p in PROBLEMS if n.split(".")[0] == topic
            for c in p.interpreter_cases}
    assert want and want <= listed, sorted(want - listed)


def test_the_tracer_runs_on_the_interpreter(interpreter):
    from fraglab import fragments, tracer
    for k in fragments.kinds("accumulator"):
        t = tracer.trace(k, way="load")
        assert np.array_equal(t.layout, fragments.recording.recorded_layout(k)), k.name


def _agreement_cases(problem):
    cases = [c for c in problem.interpreter_cases if problem.supported(c)[0]]
    plain = [c for c in cases if not c.edge][:1]
    edge = [c for c in cases if c.edge][:1]
    return plain + edge


_AGREEMENT: list[dict] = []


def _same(a, b) -> bool:
    """Bit-for-bit equal (NaN equal to NaN, in float arrays)."""
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and \
        np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")


@pytest.mark.gpu
@pytest.mark.parametrize("name, problem", PROBLEMS, ids=IDS)
def test_interpreter_agrees_with_the_gpu(name, problem, rng, monkeypatch):
    exact = _bit_exact(name)
    for case in _agreement_cases(problem):
        inp = problem.inputs(rng, **case.params)
        monkeypatch.delenv("FRAGLAB_MODE", raising=False)
        gpu = launch.to_host(problem.run(**inp))
        monkeypatch.setenv("FRAGLAB_MODE", "cpu")
        cpu = launch.to_host(problem.run(**inp))
        monkeypatch.delenv("FRAGLAB_MODE", raising=False)
        gpu, cpu = list(named_outputs(gpu).values()), list(named_outputs(cpu).values())
        same = all(_same(g, c) for g, c in zip(gpu, cpu))
        err = max(rel_error(c, g) for g, c in zip(gpu, cpu)) if not same else 0.0
        tol = problem.tolerance(case)
        row = {"problem": name, "case": case.name, "bit_equal": bool(same),
               "rel_error": err, "required": "bit-equal" if exact else f"<= {tol:g}"}
        _AGREEMENT.append(row)
        out = os.environ.get("FRAGLAB_AGREEMENT_OUT")
        if out:   # one file per pytest-xdist worker
            out = out.replace(".json", f"_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.json")
            with open(out, "w") as f:
                json.dump(_AGREEMENT, f, indent=1)
        if exact:
            assert same, f"{name} [{case}]: the interpreter differs from the GPU (rel {err:.2e})"
        else:
            assert err <= tol, f"{name} [{case}]: interpreter vs GPU rel. error {err:.2e} > {tol:g}"
