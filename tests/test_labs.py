"""Labs are solutions with exercise regions cut out; unsolved labs fail nbval, solutions pass."""
import difflib
import json
import tempfile
from pathlib import Path

import pytest

from fraglab import labs
from fraglab.labs import LabFormatError, cut, make_lab
from nbval_run import ROOT, graded_cells, run_nbval

SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
NOTEBOOKS = sorted([*SOLUTIONS, *(ROOT / "labs").glob("*.ipynb"), *(ROOT / "book").glob("*.ipynb")])
ids = [p.stem for p in SOLUTIONS]


def test_cut_keeps_stubs_and_drops_solution_lines():
    text = ("def f(v):\n"
            "    # BEGIN EXERCISE 1\n"
            "    #| raise NotImplementedError('do it')\n"
            "    return v + 1\n"
            "    # END EXERCISE\n"
            "x = 1\n")
    assert cut(text) == ("def f(v):\n    # BEGIN EXERCISE 1\n    raise NotImplementedError('do it')\n"
                         "    # END EXERCISE\nx = 1\n")


def test_cut_handles_cuda_comments():
    text = "  // BEGIN EXERCISE k\n  //| #error \"write it\"\n  v += 1;\n  // END EXERCISE\n"
    assert cut(text) == "  // BEGIN EXERCISE k\n  #error \"write it\"\n  // END EXERCISE\n"


@pytest.mark.parametrize("text, msg", [
    ("# BEGIN EXERCISE 1\n# BEGIN EXERCISE 2\n# END EXERCISE\n", "inside exercise"),
    ("# END EXERCISE\n", "without BEGIN"),
    ("# BEGIN EXERCISE 1\nx = 1\n", "no END"),
])
def test_malformed_markers_are_errors(text, msg):
    with pytest.raises(LabFormatError, match=msg):
        cut(text)


def _nb(*cells):
    return {"cells": [{"cell_type": t, "source": s, "metadata": {}} for t, s in cells],
            "metadata": {}, "nbformat": 4, "nbformat_minor": 4}


def test_make_lab_rejects_notebooks_without_exercises_or_with_duplicate_ids():
    with pytest.raises(LabFormatError, match="no exercise"):
        make_lab(_nb(("code", "x = 1\n")))
    dup = "# BEGIN EXERCISE 1\n# END EXERCISE\n"
    with pytest.raises(LabFormatError, match="used twice"):
        make_lab(_nb(("code", dup), ("code", dup)))
    with pytest.raises(LabFormatError, match="code cells"):
        make_lab(_nb(("markdown", dup)))


def test_every_solution_has_a_lab_and_labs_are_up_to_date():
    assert SOLUTIONS, "no solution notebooks"
    assert labs.build(check_only=True) == [], "run `python -m fraglab.labs build`"
    assert sorted(p.name for p in (ROOT / "labs").glob("*.ipynb")) == [p.name for p in SOLUTIONS]


def _regions_lines(text):
    spans = set()
    for _, b, e in labs.regions(text):
        spans.update(range(b, e + 1))
    return spans


@pytest.mark.parametrize("solution", SOLUTIONS, ids=ids)
def test_lab_differs_from_solution_only_inside_exercise_regions(solution):
    """Independent of make_lab: diff the two notebooks cell by cell."""
    sol = json.loads(solution.read_text())
    lab = json.loads((ROOT / "labs" / solution.name).read_text())
    assert len(sol["cells"]) == len(lab["cells"])
    for k, (s, l) in enumerate(zip(sol["cells"], lab["cells"])):
        s_src, l_src = "".join(s["source"]), "".join(l["source"])
        assert {**s, "source": None, "outputs": None, "execution_count": None} == \
            {**l, "source": None, "outputs": None, "execution_count": None}, f"cell {k}: metadata differ"
        if l["cell_type"] == "code":
            assert l["outputs"] == [], f"cell {k}: a lab ships without outputs (no PASS line before a run)"
        if s_src == l_src:
            continue
        inside = _regions_lines(s_src)
        sm = difflib.SequenceMatcher(a=s_src.splitlines(), b=l_src.splitlines(), autojunk=False)
        for op, a0, a1, b0, b1 in sm.get_opcodes():
            if op == "equal":
                continue
            assert set(range(a0, a1)) <= inside, f"cell {k}: lines {a0}-{a1} changed outside a region"
            if a0 == a1:  # pure insertion: must sit inside a region
                assert a0 in inside, f"cell {k}: lines inserted outside a region"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[f"{p.parent.name}/{p.stem}" for p in NOTEBOOKS])
def test_first_code_cell_is_the_setup_cell(nb):
    cells = [c for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code"]
    assert "".join(cells[0]["source"]) == labs.SETUP_CELL


@pytest.mark.parametrize("solution", SOLUTIONS, ids=ids)
def test_each_solution_has_graded_cells_with_stored_pass_lines(solution):
    nb = json.loads(solution.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    graded = graded_cells(nb)
    assert graded, "no cell tagged `graded`"
    for i in graded:
        text = "".join("".join(o.get("text", "")) for o in code[i].get("outputs", []))
        assert "PASS " in text, f"graded code cell {i} stores no PASS line"


def _check_nbval(solution, mode):
    rc, failed, out = run_nbval(solution, mode)
    assert rc == 0 and not failed, f"solution fails nbval in {mode} mode:\n{out[-3000:]}"
    # the unsolved lab (no stored outputs) is graded by fraglab.grading, which fails every
    # exercise of it: tests/test_grading_fixtures.py (test_solution_passes_and_unsolved_lab_fails...)


@pytest.mark.nbval
@pytest.mark.parametrize("solution", SOLUTIONS, ids=ids)
def test_nbval_gpu_less_mode(solution):
    _check_nbval(solution, "cpu")


@pytest.mark.nbval
@pytest.mark.gpu
@pytest.mark.parametrize("solution", SOLUTIONS, ids=ids)
def test_nbval_gpu_mode(solution):
    _check_nbval(solution, "gpu")


@pytest.mark.nbval
def test_a_wrong_answer_fails_its_graded_cell():
    """Not only stubs fail: a plausible wrong answer (a butterfly missing its last step) too."""
    sol = ROOT / "solutions" / "00_hello_warp.ipynb"
    nb = json.loads(sol.read_text())
    hits = 0
    for c in nb["cells"]:
        src = "".join(c["source"])
        if "BEGIN EXERCISE 1" in src:
            c["source"] = src.replace("(16, 8, 4, 2, 1)", "(16, 8, 4, 2)")
            hits += 1
    assert hits == 1
    with tempfile.TemporaryDirectory(dir=ROOT / "tests") as tmp:  # inside the repo: setup finds it
        wrong = Path(tmp) / "00_hello_warp.ipynb"
        wrong.write_text(json.dumps(nb))
        rc, failed, _ = run_nbval(wrong, "cpu")
    assert rc != 0 and failed == {min(graded_cells(nb))}
