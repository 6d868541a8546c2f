"""Build graded notebooks: the solution's cells and stored outputs, with a learner's exercise
regions put in, one notebook per exercise.

An *exercise* is a graded cell of the solution (a code cell tagged ``graded``) together with the
exercise regions (``# BEGIN EXERCISE id`` ... ``# END EXERCISE``) that come before it and after the
previous graded cell. Lab 07's regions ``3a`` and ``3b`` are thus one exercise, graded by one cell.

The notebook built for one exercise holds every code cell of the solution up to its graded cell,
with

* the solution's text in every other exercise's regions: another exercise's answer never runs
  while this one is graded, and the earlier graded cells (kept: they define names that later
  cells use) pass as context;
* this exercise's cells rewritten so that the learner's text is never Python in this kernel
  (:mod:`.cells`): a CUDA region's text becomes the value of its string; a cell with a Python
  region becomes a call of :func:`.sandbox.bind`, which runs the learner's version of the cell
  in a process of its own and binds, here, proxies of its functions and its plain data;
* ``nbval-ignore-output`` on every cell but the graded one: debug prints and warnings in
  exercise and context cells never fail grading (an exception still does);
* the graded cell run through :func:`fraglab.grading.capture.run_graded`, which keeps only the
  lines a check prints (``PASS ...``, ``[gpu] ...``, ``[cpu] ...``), so a print or a warning from
  the learner's function during the check does not fail it either; its stored output is the
  solution's, reduced the same way.

Since the check cells and the stored outputs come from the solution, editing a check cell in a lab
changes nothing, and labs can ship without outputs.
"""
from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from .. import labs
from . import cells
from .cells import replace_bodies  # noqa: F401  (tests and fixtures use build.replace_bodies)

#: Appended to a graded notebook's first cell (the setup cell): without the test suite's seed
#: (:data:`.verdict.SEED_ENV`, set only through the grader's API) it does nothing, and the
#: notebook draws fresh inputs; with it, every unseeded draw of the kernel is seeded.
SEED_LINE = "from fraglab.grading.capture import seed_inputs; seed_inputs()\n"
#: Lines of a graded cell's output that grading compares (the rest is the learner's noise).
KEPT_LINE = re.compile(r"^(PASS |\[gpu\]|\[cpu\])")


@dataclass
class Exercise:
    """One graded cell and the exercise regions it grades."""
    name: str                       # as the PASS line says it: "exercise 3"
    regions: tuple[str, ...]        # region ids, in order: ("3a", "3b")
    cell: int                       # index of the graded cell among all cells of the solution
    region_cells: tuple[int, ...] = field(default=())

    @property
    def key(self) -> str:
        """A short id for file names and reports: the name's number ("3")."""
        return self.name.split()[-1]


class RegionError(ValueError):
    """A learner's notebook lacks an exercise region, or its markers are broken."""


def source(cell) -> str:
    return labs._source(cell)


def _tags(cell) -> list:
    return cell.get("metadata", {}).get("tags", [])


def _exercise_name(graded_text: str, fallback: str) -> str:
    m = re.search(r"""["'](exercise \w+)["']""", graded_text)
    return m.group(1) if m else f"exercise {fallback}"


def exercises(solution: dict) -> list[Exercise]:
    """The exercises of a solution notebook, in order."""
    out, pending, pending_cells = [], [], []
    for k, cell in enumerate(solution["cells"]):
        if cell["cell_type"] != "code":
            continue
        found = labs.regions(source(cell), f"cell {k}")
        if found:
            pending += [r[0] for r in found]
            pending_cells.append(k)
        if "graded" in _tags(cell):
            if not pending:
                raise labs.LabFormatError(f"graded cell {k} has no exercise region before it")
            name = _exercise_name(source(cell), re.sub(r"[a-z]$", "", pending[0]))
            out.append(Exercise(name, tuple(pending), k, tuple(pending_cells)))
            pending, pending_cells = [], []
    if pending:
        raise labs.LabFormatError(f"regions {pending} have no graded cell after them")
    return out


def region_bodies(nb: dict) -> dict[str, str]:
    """``{region id: the text between its BEGIN and END lines}`` of a notebook (lab or solution)."""
    out = {}
    for k, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        text = source(cell)
        lines = text.splitlines(keepends=True)
        try:
            found = labs.regions(text, f"cell {k}")
        except labs.LabFormatError as e:
            raise RegionError(str(e)) from None
        for rid, b, e in found:
            out[rid] = "".join(lines[b + 1:e])
    return out


def kept_lines(text: str) -> str:
    return "".join(l for l in text.splitlines(keepends=True) if KEPT_LINE.match(l))


def _stored_output(cell) -> list:
    """The solution's stored output of a graded cell, reduced to the kept lines (one stream)."""
    text = "".join("".join(o.get("text", "")) for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream" and o.get("name") == "stdout")
    text = kept_lines(text)
    return [{"output_type": "stream", "name": "stdout", "text": text}] if text else []


def _is_cuda(text: str, begin: int) -> bool:
    return text.splitlines()[begin].lstrip().startswith("//")


def graded_notebook(solution: dict, learner: dict[str, str], exercise: Exercise,
                    result_file: str | None = None, lab: str = "") -> dict:
    """The notebook that grades ``exercise`` with the learner's region bodies ``learner``
    (``lab``: the lab's name, ``NN_name``, which names the services the exercise may use)."""
    stubs = None
    session = result_file or f"exercise {exercise.key}"
    context: list[str] = []
    checks = [n for c in solution["cells"][:exercise.cell + 1] if c["cell_type"] == "code"
              and "graded" in _tags(c) for n in cells.all_names(source(c))]
    nb = {"cells": [], "metadata": copy.deepcopy(solution.get("metadata", {})),
          "nbformat": solution.get("nbformat", 4), "nbformat_minor": solution.get("nbformat_minor", 5)}
    needed = _needed_checks(solution["cells"][:exercise.cell + 1])
    for k, cell in enumerate(solution["cells"][:exercise.cell + 1]):
        if cell["cell_type"] != "code":
            continue
        text = source(cell)
        graded_here = k == exercise.cell
        if not graded_here and "graded" in _tags(cell) and k not in needed:
            continue
        found = labs.regions(text, f"cell {k}")
        mine = [(rid, b) for rid, b, _ in found if rid in exercise.regions]
        if mine and not graded_here:
            cuda = {rid: learner[rid] for rid, b in mine if _is_cuda(text, b)}
            python = {rid: learner[rid] for rid, b in mine if not _is_cuda(text, b)}
            if cuda and python:
                raise labs.LabFormatError(f"cell {k} holds CUDA and Python regions of one exercise")
            if cuda:
                text = cells.cuda_cell(text, cuda, f"cell {k}", lab=lab, cell=k)
            else:
                if stubs is None:
                    stubs = region_bodies(labs.make_lab(solution))
                rest = {rid: stubs[rid] for rid, _, _ in found if rid not in python}
                text = cells.python_cell(text, replace_bodies(text, {**python, **rest}),
                                         exercise=exercise.name, lab=lab, regions=tuple(python),
                                         cell=k, context=context, session=session,
                                         checks=checks)
        elif not found and not graded_here and "graded" not in _tags(cell):
            context += [n for n in cells.all_names(text) if n not in context]
        if not nb["cells"]:    # the setup cell: the test suite's seed, if any, before any draw
            text = text.rstrip("\n") + "\n" + SEED_LINE
        new = {"cell_type": "code", "execution_count": k + 1, "id": f"g{k}",
               "metadata": {"tags": []}, "source": text, "outputs": []}
        if graded_here:
            new["source"] = ("from fraglab.grading.capture import run_graded\n"
                             f"run_graded({text!r}, {exercise.name!r}, {session!r})")
            new["outputs"] = _stored_output(cell)
        else:
            new["metadata"]["tags"] = ["nbval-ignore-output"]
        nb["cells"].append(new)
    return nb


def _needed_checks(cells_: list) -> set[int]:
    """The earlier exercises' graded cells that the exercise's notebook needs: those that last
    bind a name a kept cell reads (a word of its text that it does not bind itself), followed
    back transitively. The others are left out: they would only run the solution's checks of
    exercises that have notebooks of their own again."""
    code = {k: source(c) for k, c in enumerate(cells_) if c["cell_type"] == "code"}
    graded = {k for k in code if "graded" in _tags(cells_[k]) and k != len(cells_) - 1}

    def binds(k):
        try:
            return set(cells.all_names(code[k]))
        except SyntaxError:
            return set()
    bound = {k: binds(k) for k in code}
    todo = [k for k in code if k not in graded]
    needed: set[int] = set()
    while todo:
        j = todo.pop()
        for word in set(re.findall(r"\b[A-Za-z_]\w*\b", code[j])) - bound[j]:
            i = next((i for i in sorted(code, reverse=True) if i < j and word in bound[i]), None)
            if i in graded and i not in needed:
                needed.add(i)
                todo.append(i)
    return needed


def learner_bodies(lab: dict, solution: dict) -> dict[str, str]:
    """The learner's region bodies, checked against the solution's regions; a region the learner
    deleted raises :class:`RegionError` naming it."""
    want = [rid for e in exercises(solution) for rid in e.regions]
    got = region_bodies(lab)
    missing = [r for r in want if r not in got]
    if missing:
        raise RegionError("the lab has lost the markers of exercise region(s) " + ", ".join(missing)
                          + ": keep the BEGIN EXERCISE / END EXERCISE lines")
    return got


#: A notebook file as a dict (the one reader: fraglab.labs.read).
read = labs.read


def batch_notebook(solution: dict, exercise: Exercise, variants: list[tuple[str, dict[str, str]]],
                   lab: str = "") -> tuple[dict, dict[str, int]]:
    """One notebook that grades several answers to one exercise in turn (for the course's own
    tests of wrong-answer fixtures: one kernel start instead of one per answer). The cells before
    the exercise's first region run once; then, for each ``(label, bodies)``, the cells from the
    exercise's first region cell to its graded cell, with those bodies. Returns the notebook and
    ``{label: index of its graded cell among code cells}`` (as nbval numbers cells); the graded
    cell of the n-th variant writes its result to the result file's name plus ``.v<n>``."""
    first = min(exercise.region_cells)
    base = graded_notebook(solution, region_bodies(solution), exercise, lab=lab)
    cells = [c for c in base["cells"] if int(c["id"][1:]) < first]
    where = {}
    for label, bodies in variants:
        nb = graded_notebook(solution, bodies, exercise, f"__RESULT_FILE__.v{len(where)}", lab)
        part = [copy.deepcopy(c) for c in nb["cells"] if int(c["id"][1:]) >= first]
        for c in part:
            c["id"] = f"{c['id']}-{len(where)}"
        cells += part
        where[label] = len(cells) - 1
    base["cells"] = cells
    return base, where
