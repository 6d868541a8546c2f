"""The "What runs where" box (issue #27, item 3): every chapter, appendix, solution and lab shows
one, right after its first cell, and it is exactly what fraglab.runs_where renders from the facts
(so a box cannot drift from the code: change a kernel's requires, a record or a NOTES sentence and
this fails until `python -m fraglab.chapter boxes` is run). The derivation is checked against what
the kernels' wrappers say on each GPU target."""
import json

import numpy as np
import pytest

from fraglab import chapter, device, runs_where as rw
from fraglab.grading import checks
from fraglab.problem import Case, Problem
from nbval_run import ROOT

NOTEBOOKS = chapter.box_paths() + sorted((ROOT / "labs").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[f"{p.parent.name}/{p.stem}" for p in NOTEBOOKS])
def test_every_notebook_has_its_box_right_after_the_title(path):
    nb = json.loads(path.read_text())
    boxes = [k for k, c in enumerate(nb["cells"])
             if c["cell_type"] == "markdown" and rw.TITLE in "".join(c["source"])]
    assert boxes == [1], f"the box must be cell 1 (after the title and objectives), found {boxes}"
    assert rw.box_of(nb)[1] == rw.expected_box(path, nb), \
        "the box differs from the facts: run `python -m fraglab.chapter boxes`"


def test_every_chapter_and_lab_is_covered():
    """Every page has its sentences in NOTES, except a draft that `chapter new` just wrote (its
    box says what the template's example does: TEMPLATE_NOTES)."""
    chapters = {p.stem for p in (ROOT / "book").glob("*.ipynb")
                if not json.loads(p.read_text())["metadata"].get("fraglab", {}).get("draft")}
    assert chapters <= set(rw.NOTES), f"no NOTES for {sorted(chapters - set(rw.NOTES))}"
    assert {p.stem for p in (ROOT / "solutions").glob("*.ipynb")} <= set(rw.NOTES) | {
        p.stem for p in (ROOT / "book").glob("*.ipynb")} - chapters
    assert {p for p in NOTEBOOKS if p.parent.name == "book"} == \
        {p for p in (ROOT / "book").glob("*.ipynb")}
    for lab, exercises in rw.LAB_PROBLEMS.items():
        for problem in exercises.values():
            assert problem in rw._problems(lab), f"{lab}: no problem {problem}"


def test_a_changed_box_is_found_and_rewritten(tmp_path):
    src = ROOT / "book" / "05_flash_attention.ipynb"
    book = tmp_path / "book"
    book.mkdir()
    path = book / src.name
    nb = json.loads(src.read_text())
    k, text = rw.box_of(nb)
    nb["cells"][k]["source"] = text.replace("sm_75", "sm_70")
    path.write_text(json.dumps(nb))
    assert chapter.boxes(check=True, paths=[path]) == [str(path)]
    assert chapter.boxes(paths=[path], cut_labs=False) == [str(path)]
    again = json.loads(path.read_text())
    assert rw.box_of(again) == (k, text) and len(again["cells"]) == len(nb["cells"])
    assert again["cells"][3:] == nb["cells"][3:], "only the box may change"
    del again["cells"][k]                                 # no box: one is inserted after cell 0
    assert rw.box_of(rw.with_box(path, again)) == (1, text)


def test_the_derivation_follows_the_kernels_requires():
    t4, a100, h100 = (cc for _, cc, _ in rw.GPUS)
    fa = rw.refusals("05_flash_attention", t4)
    assert set(fa.skipped) == {"the FA-2 kernel needs compute capability 8.0 or newer; this GPU "
                               "is 7.5"}
    assert set(next(iter(fa.skipped.values()))) == {"fa2"}       # FA-1 runs on a T4
    assert not rw.refusals("05_flash_attention", a100).skipped
    hopper = rw.refusals("10_fa3_pipelining", a100)
    assert hopper.n_skipped == hopper.total > 0 and "sm_90a" in next(iter(hopper.skipped))
    assert not rw.refusals("10_fa3_pipelining", h100).skipped
    assert not rw.refusals("07_register_reuse", t4).skipped      # FP32 SIMT runs anywhere
    interp = rw.refusals("09_instruction_diet", None)
    assert not interp.skipped and interp.total < sum(
        len(p.cases) for p in rw._problems("09_instruction_diet").values())
    assert "«bf16 WMMA needs compute capability 8.0" in rw.chapter_box(
        "03_permutation_and_quad_reduction")


def test_a_simulated_gpu_leaves_the_device_as_it_was():
    before = (device.mode(), device._probe, device.compute_capability)
    with rw.simulated_gpu((7, 5)):
        assert device.gpu_available() and device.target_cc() == (7, 5)
        assert device.supports("bf16")[0] is False
        with device.forced_mode("cpu"):
            assert not device.gpu_available() and device.target_cc() == (8, 0)
    assert (device.mode(), device._probe, device.compute_capability) == before


def test_a_case_this_gpu_refuses_runs_on_the_interpreter_and_says_why():
    """What the lab boxes promise (a T4 and FA-2; any GPU but Hopper and lab 10): the graded check
    runs the cases the GPU refuses on the interpreter, instead of stopping with RuntimeError."""
    def needs_sm80(case):
        cc = device.target_cc()
        return (cc >= (8, 0), "" if cc >= (8, 0) else f"needs 8.0; this GPU is {cc[0]}.{cc[1]}")
    where = []

    def run(x, **_):
        where.append(device.gpu_available())
        return x * 2
    p = Problem("demo", "x * 2", inputs=lambda rng, n: {"x": rng.standard_normal(n)},
                reference=lambda x: x * 2, run=run, requires=needs_sm80,
                cases=(Case("small", n=4), Case("big", n=64, slow=True)))
    rng = np.random.default_rng(0)
    with rw.simulated_gpu((7, 5)):
        text = checks.check_cases("exercise 1", p, run, rng, repeats=1)
    assert where == [False], "the refused cases ran on the interpreter only, the small ones once"
    assert text.startswith("1 case (small) on the PTX interpreter")
    assert text.endswith("2 of the 2 cases not on a simulated sm_75 GPU: needs 8.0; this GPU is 7.5")
