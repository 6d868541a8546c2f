"""Stored answers that grading must fail, each the text of one exercise region:

* wrong answers, ``tests/fixtures/wrong_answers/NN_name/<region>/<name>.txt``: a plausible
  mistake, or a shortcut (labelled ``<region>/<name>``);
* cheats, ``tests/fixtures/cheats/NN_name/<region>/<kind>.txt``: code that tries to pass without
  solving, by reaching the grader (a patch of the checks, their frames or globals, builtins, an
  IPython transformer, the mutation switch, a forked process that rewrites the verdict, a CUDA
  region that leaves its string), the answer (the solutions, the course's function that
  computes it) or the comparison (an object equal to anything). Labelled ``cheat:<region>/<kind>``
  and graded *without* the static scan of :mod:`.shortcuts`: what fails them is the isolation
  of :mod:`.sandbox` and the checks alone.

:func:`grade_fixtures` grades every fixture of a lab, with the solution's text in every other
region, in one nbval process: one kernel per exercise, the answers one after the other in it
(none of them runs in the kernel, so none can change what the next one meets), the solution last.
"""
from __future__ import annotations

from pathlib import Path

from ..labs import REPO_ROOT, SOLUTIONS_DIR
from . import build
from . import run
from .cli import Verdict, shortcut_problems

FIXTURES_DIR = REPO_ROOT / "tests" / "fixtures" / "wrong_answers"
CHEATS_DIR = REPO_ROOT / "tests" / "fixtures" / "cheats"
CHEAT = "cheat:"


def fixtures(lab: str, cheats: bool = False) -> dict[str, tuple[str, str]]:
    """``{"<region>/<fixture>": (region, text)}`` of a lab's wrong answers (``NN_name``), or
    ``{"cheat:<region>/<kind>": ...}`` of its cheats."""
    out = {}
    folder, prefix = (CHEATS_DIR, CHEAT) if cheats else (FIXTURES_DIR, "")
    for f in sorted((folder / lab).glob("*/*.txt")):
        out[f"{prefix}{f.parent.name}/{f.stem}"] = (f.parent.name, f.read_text())
    return out


def grade_fixtures(lab: str, mode: str | None = None, solutions_dir=None, labs_dir=None,
                   only: set[str] | None = None, mutant: str | None = None,
                   skip: set[str] = frozenset(), limit_s: float | None = None,
                   seed: int | None = None) -> dict[str, Verdict]:
    """Grade every fixture of ``lab`` (wrong answers and cheats), the unsolved lab
    (``lab:<exercise>``) and the solution (``solution:<exercise>``, graded last in each
    notebook: the answers before it must not have broken anything). One batch notebook per
    exercise, all in one nbval process. ``only``: grade just these fixtures (and the solution of
    their exercises), not the unsolved lab. ``skip``: leave these fixtures out. ``mutant``:
    weaken a check in the kernels (the mutation tests). ``limit_s``: a shorter time limit for
    the learner's process (a fixture that runs until the limit stops it). ``seed``: the
    kernels' unseeded draws seeded (:func:`.capture.seed_inputs`: the same seed grades the same
    inputs). Returns ``{label: Verdict of that exercise}``."""
    sol_path = Path(solutions_dir or SOLUTIONS_DIR) / f"{lab}.ipynb"
    solution = build.read(sol_path)
    good = build.region_bodies(solution)
    unsolved = build.region_bodies(build.read(Path(labs_dir or REPO_ROOT / "labs") / f"{lab}.ipynb"))
    fx = {k: v for k, v in {**fixtures(lab), **fixtures(lab, cheats=True)}.items()
          if (only is None or k in only) and k not in skip}
    out: dict[str, Verdict] = {}
    items, where = [], {}
    for ex in build.exercises(solution):
        variants = []
        candidates = [(label, {**good, region: text}) for label, (region, text) in fx.items()
                      if region in ex.regions]
        if only is not None and not candidates:
            continue
        if only is None:
            candidates.append((f"lab:{ex.key}", {**good, **{r: unsolved[r] for r in ex.regions}}))
        for label, bodies in candidates:
            probs = [] if label.startswith(CHEAT) else shortcut_problems(lab, solution, ex, bodies)
            if probs:
                out[label] = Verdict(ex.name, False, "shortcut: " + "; ".join(probs))
            else:
                variants.append((label, bodies))
        variants.append((f"solution:{ex.key}", good))
        nb, cells = build.batch_notebook(solution, ex, variants, lab)
        items.append((ex.key, nb))
        where[ex.key] = (ex, cells)
    outcomes = run.run_notebooks(items, mode=mode, mutant=mutant, limit_s=limit_s, seed=seed)
    for key, (ex, cells) in where.items():
        o = outcomes[key]
        for n, (label, cell) in enumerate(cells.items()):
            res = (o.results or {}).get(f"v{n}")
            ok = o.cases > cell and cell not in o.failed_cells and bool(res and res.get("ok"))
            if ok:
                text = res.get("output", "")
            elif res and not res.get("ok"):
                text = run.failure_text(res)
            elif res:
                text = "the check printed other lines than the solution's: " + res.get("output", "")
            else:
                text = o.reason or "the cells before the check failed"
            out[label] = Verdict(ex.name, ok, text)
    return out


def main() -> int:
    import sys
    import os
    labs = sys.argv[1:] or sorted(p.name for p in FIXTURES_DIR.iterdir())
    stage = os.environ.get("FRAGLAB_STAGE")   # a folder with solutions/ and labs/ to try instead
    dirs = {"solutions_dir": f"{stage}/solutions", "labs_dir": f"{stage}/labs"} if stage else {}
    bad = 0
    for lab in labs:
        for label, v in grade_fixtures(lab, **dirs).items():
            want_ok = label.startswith("solution:")
            flag = "ok " if v.ok == want_ok else "BAD"
            bad += v.ok != want_ok
            print(f"{flag} {lab} {label:40} {'PASS' if v.ok else 'FAIL'} {' '.join(v.text.split())[:150]}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
