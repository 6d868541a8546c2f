"""``.ci/sanitize_topics.py``, the check compute-sanitizer watches on the GPU machine, on this
CPU: which topics and cases it would run (``--list``), one run on the PTX interpreter, and the
summary it writes from the logs. Neither it nor ``.ci/gpu`` names a topic: both find them."""
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fraglab import report
from fraglab.problem import topic_problems

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / ".ci" / "sanitize_topics.py"
BOOK_TOPICS = [nb.stem[3:] for nb in sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))]


def _script():
    spec = importlib.util.spec_from_file_location("sanitize_topics", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)


def test_it_finds_every_topic_with_problems():
    found = _cli("--topics").stdout.split()
    assert found == list(topic_problems())
    assert found == [t for t in BOOK_TOPICS if t != "tracer"]   # the tracer checks its traces


def test_the_listing_is_every_small_case_of_every_problem():
    out = _cli("--list").stdout.splitlines()
    want = [f"{t} {n} [{c}]" for t, ps in topic_problems().items() for n, p in ps.items()
            for c in p.cases if not c.slow]
    assert [re.sub(r"  \(skipped here: .*\)$", "", ln) for ln in out[:-1]] == want
    assert out[-1] == f"{len(want)} checks"


def test_a_listing_can_keep_some_topics_and_fewer_cases():
    items = _script().selection(["hello_warp"], limit=1)
    problems = topic_problems(["hello_warp"])["hello_warp"]
    assert [(t, n, c) for t, n, _, c in items] == \
        [("hello_warp", n, p.interpreter_cases[0]) for n, p in problems.items()]
    with pytest.raises(ValueError, match="no topic nope"):
        _script().selection(["nope"])


def test_a_run_checks_each_case_by_its_problem_and_exits_0(monkeypatch):
    monkeypatch.setenv("FRAGLAB_MODE", "cpu")
    r = _cli("hello_warp", "--limit", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[-1].startswith("0 wrong outputs")
    assert all(ln.startswith("ok  hello_warp ") for ln in lines[:-1]) and len(lines) > 1


def test_a_wrong_output_is_bad(rng):
    mod = _script()
    name, problem = next(iter(topic_problems(["hello_warp"])["hello_warp"].items()))
    case = problem.interpreter_cases[0]
    wrong = type(problem)(**{**problem.__dict__, "run": lambda **inp: problem.reference(**inp) + 1})
    line, fine = mod.check(rng, "hello_warp", name, wrong, case)
    assert not fine and line.startswith(f"BAD hello_warp {name} [{case}]: rel. error")
    broken = type(problem)(**{**problem.__dict__, "run": lambda **inp: 1 / 0})
    line, fine = mod.check(rng, "hello_warp", name, broken, case)
    assert not fine and "ZeroDivisionError" in line


def test_the_summary_is_the_record_the_chapters_cite(tmp_path):
    ok = "ok  hello_warp a [x]: exact\nskip hello_warp b [y]: needs sm_90a\n0 wrong outputs, 1 s\n"
    (tmp_path / "sanitize_topics_memcheck_hello_warp.log").write_text(
        ok + "========= ERROR SUMMARY: 0 errors\n")
    (tmp_path / "sanitize_topics_racecheck_hello_warp.log").write_text(
        ok + "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n")
    (tmp_path / "sanitize_topics_memcheck_layout_codegen.log").write_text(
        "BAD layout_codegen c [z]: rel. error 1 (tol 0)\n1 wrong outputs, 1 s\n"
        "========= ERROR SUMMARY: 0 errors\n")
    _script().summary(tmp_path)
    doc = json.loads((tmp_path / "sanitizer.json").read_text())
    assert doc["tools"]["memcheck"]["hello_warp"] == {
        "clean": True, "launches": 1, "wrong": 0, "skipped": 1, "summary": "ERROR SUMMARY: 0 errors"}
    assert not doc["tools"]["memcheck"]["layout_codegen"]["clean"]
    rec = tmp_path / "sanitizer.json"
    assert report.sanitizer_verdict("hello_warp", rec) == \
        "clean under memcheck and racecheck (1 launches each)"
    assert report.sanitizer_verdict("layout_codegen", rec).startswith("NOT clean under memcheck")


@pytest.mark.parametrize("path", [SCRIPT, ROOT / ".ci" / "gpu"], ids=["sanitize_topics", "ci_tier_script"])
def test_no_topic_is_named(path):
    text = path.read_text()
    named = [t for t in BOOK_TOPICS if re.search(rf"\b{t}\b", text)]
    assert not named, f"{path.name} names topics {named}: it should find them"
