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

from . import build, front, run, shortcuts, verdict


@dataclass
class Verdict:
    exercise: str
    ok: bool
    text: str          # the PASS lines' text, or the reason it failed

    def line(self, width: int = 12, verbose: bool = False, more: str = "") -> str:
        """The exercise's line; a failure's reason follows, one line of it per line, indented
        (``verbose``: the whole reason; else its first ~600 characters, then ``(more: <more>)``)."""
        head = f"  {self.exercise:<{width}}{'PASS' if self.ok else 'FAIL'}  "
        if self.ok:
            return head + " ".join(self.text.split())
        text, _, detail = self.text.partition(verdict.DETAIL)
        if verbose:
            lines = [l.rstrip() for l in (text + "\n" + detail).strip().splitlines() if l.strip()]
        elif detail:             # a compile error: one line per error, NVRTC's log behind -v
            lines = [" ".join(l.split()) for l in text.strip().splitlines() if l.strip()][:12]
            lines.append(f"(NVRTC's whole log: {more or 'python -m fraglab.grading LAB -v'})")
        else:
            lines = front.reason_lines(text, more or "python -m fraglab.grading LAB -v")
        return head + ("\n" + " " * len(head)).join(lines or ["(no reason given)"])

    @property
    def key(self) -> str:
        return self.exercise.split()[-1]


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
                 mode: str | None = None, seed: int | None = None) -> dict[str, list[Verdict]]:
    """Grade several sets of region bodies against one solution, in one nbval process.
    ``bodies_per_run``: ``(label, bodies, exercise keys or None for all)``. ``seed`` (the test
    suite's): the kernels' unseeded draws seeded (:func:`.capture.seed_inputs`). Returns
    ``{label: [Verdict per exercise]}``."""
    solution = build.read(solution_path)
    lab_name = Path(solution_path).stem
    exs = build.exercises(solution)
    items, static = [], {}
    stubs = build.region_bodies(build.labs.make_lab(solution))
    for label, bodies, keys in bodies_per_run:
        for ex in exs:
            if keys is not None and ex.key not in keys:
                continue
            tag = f"{label}\x00{ex.name}"
            if all(_same(bodies.get(r, ""), stubs.get(r, "")) for r in ex.regions):
                static[tag] = Verdict(ex.name, False, f"{verdict.NOT_ATTEMPTED}: region(s) "
                                      f"{', '.join(ex.regions)} still hold the lab's stub")
                continue
            probs = shortcut_problems(lab_name, solution, ex, bodies)
            if probs:
                static[tag] = Verdict(ex.name, False, "\n".join("shortcut: " + p for p in probs))
                continue
            items.append((tag, build.graded_notebook(solution, bodies, ex, "__RESULT_FILE__",
                                                     lab_name)))
    outcomes = run.run_notebooks(items, mode=mode, seed=seed) if items else {}
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


def _same(a: str, b: str) -> bool:
    return a.split() == b.split()


def grade_lab(path, mode: str | None = None, only: list[str] | None = None) -> list[Verdict]:
    """Grade the lab notebook at ``path`` (its solution is ``solutions/<the lab's name>``, see
    :func:`.front.resolve`). An exercise whose region markers are gone fails alone; the others
    are graded."""
    sol, _ = front.resolve(path)
    solution = build.read(sol)
    lab = front.read_notebook(path)
    got = build.region_bodies(lab)
    exs = [e for e in build.exercises(solution) if only is None or e.key in only]
    broken = {e.key: [r for r in e.regions if r not in got] for e in exs}
    keys = [e.key for e in exs if not broken[e.key]]
    graded = {v.exercise: v for v in grade_bodies(sol, [("lab", got, keys)], mode=mode)["lab"]} \
        if keys else {}
    return [graded.get(e.name) or Verdict(e.name, False, front.markers_message(
        broken[e.key], False, front._lab_path(sol.stem))) for e in exs]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fraglab.grading", description=__doc__.split("\n\n")[0])
    ap.add_argument("lab", help="a lab notebook, e.g. labs/00_hello_warp.ipynb")
    ap.add_argument("--mode", choices=("cpu", "gpu"), help="force GPU-less or GPU mode")
    ap.add_argument("--exercise", action="append", help="grade only this exercise (its number)")
    ap.add_argument("-v", "--verbose", action="store_true", help="the whole reason of a failure")
    args = ap.parse_args(argv)
    try:
        return _grade(args)
    except (front.UsageError, build.RegionError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _mode(asked: str | None) -> str:
    from .. import device
    ok, why = device._probe() if asked == "gpu" else (True, "")
    if not ok:
        raise front.UsageError(f"--mode gpu (MODE=gpu), but there is no usable GPU here "
                               f"({why or 'no CUDA GPU'}). Grade with --mode cpu (MODE=cpu): it runs the kernels on the PTX "
                               "interpreter")
    try:
        return asked or device.mode()
    except device.GPUUnavailable as e:
        raise front.UsageError(f"{e}. Grade with --mode cpu (MODE=cpu): it runs the kernels on "
                               "the PTX interpreter") from None


def _grade(args) -> int:
    sol, note = front.resolve(args.lab)
    lab_path = front._lab_path(sol.stem)
    solution = build.read(sol)
    got = build.region_bodies(front.read_notebook(args.lab))
    exs = build.exercises(solution)
    if args.exercise:
        unknown = [k for k in args.exercise if k not in {e.key for e in exs}]
        if unknown:
            raise front.UsageError(f"{lab_path} has no exercise {', '.join(unknown)}: its "
                                   f"exercises are {', '.join(e.key for e in exs)}")
        exs = [e for e in exs if e.key in args.exercise]
    missing = [r for e in exs for r in e.regions if r not in got]
    lost = {e.name for e in exs if any(r not in got for r in e.regions)}
    every = not any(r in got for e in build.exercises(solution) for r in e.regions)
    if every:
        raise front.UsageError(front.markers_message(missing, True, lab_path))
    mode = _mode(args.mode)
    print(f"{args.lab} ({mode} mode" + (f", {note})" if note else ")"))
    if missing:
        print("  " + front.markers_message(missing, False, lab_path))
    verdicts = grade_lab(args.lab, mode=args.mode, only=[e.key for e in exs])
    for v in verdicts:
        if v.exercise not in lost:
            more = f"python -m fraglab.grading {args.lab} -v --exercise {v.key}"
            print(v.line(verbose=args.verbose, more=more))
        else:
            print(f"  {v.exercise:<12}FAIL  its region markers are lost (see above)")
    n = sum(v.ok for v in verdicts)
    tail = "" if n == len(verdicts) or args.verbose else \
        f" (every reason in full: python -m fraglab.grading {args.lab} -v)"
    print(f"{n} of {len(verdicts)} exercises pass{tail}")
    if missing:
        return 2
    return 0 if verdicts and n == len(verdicts) else 1
