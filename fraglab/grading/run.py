"""Run graded notebooks through nbval, each in a fresh kernel, and say what passed and why not.

All the notebooks of one call go to one ``pytest --nbval`` process (one start-up), and nbval starts
a fresh kernel per notebook: the learner's code of one exercise never shares a process with another
exercise's check.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from ..labs import REPO_ROOT
from . import verdict

SANITIZE = REPO_ROOT / "nbval_sanitize.cfg"


@dataclass
class Outcome:
    """What nbval said about one graded notebook."""
    label: str
    ok: bool
    failed_cells: tuple[int, ...]
    reason: str
    output: str = ""        # the kept lines the graded cell printed
    #: every result file the notebook's graded cells wrote, by suffix ("" for the one of
    #: :func:`fraglab.grading.build.graded_notebook`, a fixture's label in a batch notebook)
    results: dict = None
    cases: int = 0          # how many cells nbval ran


def failure_text(result: dict) -> str:
    """The reason of a failed verdict: what it is (:func:`.verdict.classify`: does not compile,
    runs but gives wrong values, crashes or hangs, not attempted), then ``Type: message``, or
    the message alone where it says what happened itself (a process or a kernel out of time, a
    learner's cell that failed, a compile error in the learner's terms); a compile error's
    whole NVRTC log follows :data:`.verdict.DETAIL`."""
    error, reason = result.get("error") or "", result.get("reason") or ""
    category, detail = result.get("category") or "", result.get("detail") or ""
    if not (not error or error in ("ExerciseProcessError", "KernelTimeout") or detail):
        reason = f"{error}: {reason}"
    head = f"{category}: " if category and not reason.startswith(category) else ""
    return head + reason + (verdict.DETAIL + detail if detail else "")


def _failure_text(case) -> str:
    node = case.find("failure")
    if node is None:
        node = case.find("error")
    if node is None:
        return ""
    return (node.get("message") or "") + "\n" + (node.text or "")


def _last_error_line(text: str) -> str:
    import re
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    for l in reversed(lines):
        if re.match(r"^[A-Za-z_.]*(Error|Exception|Exit|Interrupt)\b", l) or "Error:" in l:
            return l[:400]
    return (lines[-1] if lines else "failed")[:400]


def _verdict(path: Path, key: str) -> dict:
    """A verdict file's content, if the kernel signed it with this run's key; else a failure
    saying that the file was not the grader's."""
    try:
        got = verdict.check(json.loads(path.read_text()), key)
    except (OSError, ValueError):
        got = None
    return got if got is not None else {
        "ok": False, "error": "", "output": "",
        "reason": "the verdict file was not the grader's (changed after the check wrote it)"}


def run_notebooks(items: list[tuple[str, dict]], mode: str | None = None,
                  timeout_s: int = 1800, cell_timeout_s: int = 600,
                  mutant: str | None = None, limit_s: float | None = None,
                  seed: int | None = None) -> dict[str, Outcome]:
    """Run each ``(label, notebook)`` in a fresh kernel through nbval; ``{label: Outcome}``.
    ``mode`` sets ``FRAGLAB_MODE`` (``cpu``/``gpu``) for the kernels. ``mutant`` (the test
    suite's mutation tests only) weakens a check in the kernels (:data:`.capture.MUTANT_ENV`);
    ``limit_s`` (the test suite's only) lowers the learner's process's time limit
    (:data:`.verdict.LIMIT_ENV`); ``seed`` (the test suite's only) seeds the kernels' unseeded
    draws (:data:`.verdict.SEED_ENV`, read where a notebook calls
    :func:`.capture.seed_inputs`). Values of those variables in this process's environment are
    dropped, never passed on."""
    import secrets
    from .verdict import KEY_ENV, LIMIT_ENV, MUTANT_ENV, SEED_ENV
    env = dict(os.environ)
    for name in (MUTANT_ENV, LIMIT_ENV, SEED_ENV):
        env.pop(name, None)
    if seed is not None:
        env[SEED_ENV] = str(int(seed))
    if mutant:
        env[MUTANT_ENV] = mutant
    if limit_s:
        env[LIMIT_ENV] = f"{float(limit_s):g}"
    key = secrets.token_hex(32)
    env[KEY_ENV] = key
    if mode:
        env["FRAGLAB_MODE"] = mode
    path = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONPATH"] = path
    env.pop("MPLBACKEND", None)
    out: dict[str, Outcome] = {}
    # inside the repository, so that the setup cell finds the course from the notebook's folder
    with tempfile.TemporaryDirectory(dir=REPO_ROOT, prefix=".grading-") as tmp:
        tmp = Path(tmp)
        files = {}
        for i, (label, nb) in enumerate(items):
            f = tmp / f"g{i:03d}.ipynb"
            res = tmp / f"g{i:03d}.json"
            text = json.dumps(nb).replace("__RESULT_FILE__", str(res))
            f.write_text(text)
            files[f.name] = (label, res)
        xml = tmp / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", "--nbval", "--nbval-current-env",
               "--nbval-sanitize-with", str(SANITIZE), "--nbval-cell-timeout", str(cell_timeout_s),
               "-p", "no:cacheprovider", f"--junitxml={xml}", "--rootdir", str(tmp),
               *sorted(files)]
        r = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True,
                           timeout=timeout_s)
        cases: dict[str, list] = {name: [] for name in files}
        if xml.exists():
            for case in ET.parse(xml).getroot().iter("testcase"):
                where = (case.get("file") or "") + " " + (case.get("classname") or "")
                name = next((n for n in files if Path(n).stem in where), None)
                if name is not None:
                    cases[name].append(case)
        for name, (label, res) in files.items():
            failed, first_text = [], ""
            for case in cases[name]:
                txt = _failure_text(case)
                if case.find("failure") is not None or case.find("error") is not None:
                    cell = case.get("name", "")
                    failed.append(int(cell.split()[1]) if cell.startswith("Cell ") else -1)
                    first_text = first_text or txt
            result = _verdict(res, key) if res.exists() else None
            extra = {p.name[len(res.name) + 1:]: _verdict(p, key)
                     for p in tmp.glob(res.name + ".*")}
            ran = bool(cases[name])
            ok = ran and not failed and bool(result and result.get("ok"))
            if ok:
                reason = ""
            elif not ran:
                reason = "nbval did not run the notebook:\n" + (r.stdout + r.stderr)[-1500:]
            elif result and not result.get("ok"):
                reason = failure_text(result)
            elif result and result.get("ok"):
                reason = ("the check printed other lines than the solution's: "
                          + (result.get("output") or "(nothing)").strip())
            else:
                reason = ("a cell of the solution before the check failed (the course's fault, "
                          "not your answer's): " + _last_error_line(first_text))
            out[label] = Outcome(label, ok, tuple(sorted(failed)), reason,
                                 (result or {}).get("output", ""), extra, len(cases[name]))
    return out
