"""Hints the learner opens one by one: every exercise region of every lab has at least two hints,
each collapsed (<details>), numbered 1, 2, ... in order, all above the region's code cell, and no
hint holds a line of the answer (a line of 25 characters or more of the solution's region)."""
import json
import re

import pytest

from fraglab import labs
from fraglab.grading import build
from nbval_run import ROOT

SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
HINT = re.compile(r"<details><summary>Hint (\d+) for exercise (\S+)</summary>(.*?)</details>", re.S)
#: A hint in any other form: an unnumbered one, or one that names no exercise.
OTHER_HINT = re.compile(r"<summary>\s*Hint(?! \d+ for exercise \S+</summary>)", re.I)


def _hints(nb):
    """``{region: [(number, text, cell index), ...]}`` from the markdown cells, in order."""
    out = {}
    for k, c in enumerate(nb["cells"]):
        if c["cell_type"] == "markdown":
            for m in HINT.finditer("".join(c["source"])):
                out.setdefault(m.group(2), []).append((int(m.group(1)), m.group(3), k))
    return out


def _region_cells(nb):
    out = {}
    for k, c in enumerate(nb["cells"]):
        if c["cell_type"] == "code":
            for rid, _, _ in labs.regions("".join(c["source"])):
                out[rid] = k
    return out


def _answer_lines(body):
    """The solution's lines of a region worth hiding: not the stub, 25 characters or more."""
    lines = (" ".join(l.split()) for l in body.splitlines() if not labs.STUB.match(l))
    return [l for l in lines if len(l) >= 25]


@pytest.mark.parametrize("solution", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_every_exercise_has_progressive_collapsed_hints(solution):
    lab = ROOT / "labs" / solution.name
    for nb in (json.loads(solution.read_text()), json.loads(lab.read_text())):
        hints, cells = _hints(nb), _region_cells(nb)
        assert sorted(hints) == sorted(cells), f"hints for {sorted(hints)}, regions {sorted(cells)}"
        for rid, hs in hints.items():
            assert len(hs) >= 2, f"exercise {rid} has {len(hs)} hint(s); give at least two"
            assert [n for n, _, _ in hs] == list(range(1, len(hs) + 1)), \
                f"exercise {rid}: hints numbered {[n for n, _, _ in hs]}"
            assert all(t.strip() for _, t, _ in hs), f"exercise {rid}: an empty hint"
            assert all(k < cells[rid] for _, _, k in hs), f"exercise {rid}: a hint below its code"
        for c in nb["cells"]:
            if c["cell_type"] == "markdown":
                text = "".join(c["source"])
                assert not OTHER_HINT.search(text), f"a hint not numbered for its exercise: {text[:200]}"
                assert text.count("<details>") == text.count("</details>")


@pytest.mark.parametrize("solution", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_no_hint_gives_the_answer_away(solution):
    sol = json.loads(solution.read_text())
    hints = _hints(sol)
    bodies = build.region_bodies(sol)
    for rid, hs in hints.items():
        text = " ".join(" ".join(t.split()) for _, t, _ in hs)
        for line in _answer_lines(bodies[rid]):
            assert line not in text, f"a hint of exercise {rid} holds the answer's line {line!r}"


def test_the_answer_check_sees_a_line_of_the_answer():
    body = "    //| #error \"x\"\n    for (int offset = 16; offset > 0; offset /= 2)\n    v += 1;\n"
    assert _answer_lines(body) == ["for (int offset = 16; offset > 0; offset /= 2)"]
    nb = {"cells": [{"cell_type": "markdown", "source": "<details><summary>Hint 1 for exercise 3"
                     "</summary>\n\nwrite\n  for (int offset = 16; offset > 0;\n  offset /= 2)\n</details>"}]}
    (_, text, _), = _hints(nb)["3"]
    assert _answer_lines(body)[0] in " ".join(text.split())
