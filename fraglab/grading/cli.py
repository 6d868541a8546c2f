"""``python -m fraglab.grading PATH`` (and ``make grade LAB=PATH``): grade a lab notebook.

Builds one graded notebook per exercise (:mod:`.build`), checks each region for shortcuts
(:mod:`.shortcuts`), runs the notebooks through nbval, each in a fresh kernel (:mod:`.run`), and
prints one line per exercise::

    labs/00_hello_warp.ipynb (cpu mode)
      exercise 1  PASS  every lane holds the warp's sum, after 5 shuffles
      exercise 2  FAIL  GradeError: exercise 2 is not solved yet: used 2 calls of warp.shfl_sync ...
    1 of 2 exercises pass

The exit status is 0 only when every exercise passes.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from . import build, run, shortcuts


@dataclass
class Verdict:
    exercise: str
    ok: bool
    text: str          # the PASS lines' text, or the reason it failed

    def line(self, width: int = 12, verbose: bool = False, limit: int = 200) -> str:
        """One line (``verbose``: the whole reason, one line of it per line)."""
        head = f"  {self.exercise:<{width}}{'PASS' if self.ok else 'FAIL'}  "
        if verbose and not self.ok:
            return head + self.text.strip().replace("\n", "\n" + " " * len(head))
        body = " ".join(self.text.split())
        return head + (body if len(body) <= limit else body[:limit - 1] + "…")


def _pass_text(output: str) -> str:
    lines = [l[5:].split(":", 1)[-1].strip() for l in output.splitlines() if l.startswith("PASS ")]
    return "; ".join(lines) or "passed"


def shortcut_problems(lab_name: str, nb: dict, ex: build.Exercise, bodies: dict) -> list[str]:
    out = []
    begin_lines = {}
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        text = build.source(cell)
        lines = text.splitlines()
        for rid, b, _ in build.labs.regions(text):
            begin_lines[rid] = lines[b]
    for rid in ex.regions:
        out += shortcuts.problems(lab_name, rid, bodies.get(rid, ""),
                                  shortcuts.is_cuda("", begin_lines.get(rid, "")))
    return out


def grade_bodies(solution_path, bodies_per_run: list[tuple[str, dict[str, str], list[str] | None]],
                 mode: str | None = None) -> dict[str, list[Verdict]]:
    """Grade several sets of region bodies against one solution, in one nbval process.
    ``bodies_per_run``: ``(label, bodies, exercise keys or None for all)``. Returns
    ``{label: [Verdict per exercise]}``."""
    solution = build.read(solution_path)
    lab_name = Path(solution_path).stem
    exs = build.exercises(solution)
    items, static = [], {}
    for label, bodies, keys in bodies_per_run:
        for ex in exs:
            if keys is not None and ex.key not in keys:
                continue
            probs = shortcut_problems(lab_name, solution, ex, bodies)
            tag = f"{label}\x00{ex.name}"
            if probs:
                static[tag] = Verdict(ex.name, False, "shortcut: " + "; ".join(probs))
                continue
            items.append((tag, build.graded_notebook(solution, bodies, ex, "__RESULT_FILE__",
                                                     lab_name)))
    outcomes = run.run_notebooks(items, mode=mode) if items else {}
    result: dict[str, list[Verdict]] = {label: [] for label, _, _ in bodies_per_run}
    for label, bodies, keys in bodies_per_run:
        for ex in exs:
            tag = f"{label}\x00{ex.name}"
            if tag in static:
                result[label].append(static[tag])
            elif tag in outcomes:
                o = outcomes[tag]
                result[label].append(Verdict(ex.name, o.ok, _pass_text(o.output) if o.ok else o.reason))
    return result


def grade_lab(path, mode: str | None = None, only: list[str] | None = None) -> list[Verdict]:
    """Grade the lab notebook at ``path`` (its solution is ``solutions/<same name>``)."""
    sol = build.solution_for(path)
    solution = build.read(sol)
    try:
        bodies = build.learner_bodies(build.read(path), solution)
    except build.RegionError as e:
        return [Verdict(ex.name, False, str(e)) for ex in build.exercises(solution)]
    return grade_bodies(sol, [("lab", bodies, only)], mode=mode)["lab"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fraglab.grading", description=__doc__.split("\n\n")[0])
    ap.add_argument("lab", help="a lab notebook, e.g. labs/00_hello_warp.ipynb")
    ap.add_argument("--mode", choices=("cpu", "gpu"), help="force GPU-less or GPU mode")
    ap.add_argument("--exercise", action="append", help="grade only this exercise (its number)")
    ap.add_argument("-v", "--verbose", action="store_true", help="the whole reason of a failure")
    args = ap.parse_args(argv)
    from .. import device
    verdicts = grade_lab(args.lab, mode=args.mode, only=args.exercise)
    print(f"{args.lab} ({args.mode or device.mode()} mode)")
    for v in verdicts:
        print(v.line(verbose=args.verbose))
    n = sum(v.ok for v in verdicts)
    print(f"{n} of {len(verdicts)} exercises pass")
    return 0 if verdicts and n == len(verdicts) else 1
