"""Topic 09_instruction_diet, the lab's checks: the solution's answers pass and plausible wrong
ones fail, exercise by exercise (the notebook-level grading is tests/test_grading_fixtures.py)."""
import json
from pathlib import Path

import pytest

from fraglab import grade
from fraglab.instruction_diet import lab

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "solutions" / "09_instruction_diet.ipynb"


def _cell(marker: str) -> str:
    nb = json.loads(SOLUTION.read_text())
    return next("".join(c["source"]) for c in nb["cells"]
                if c["cell_type"] == "code" and marker in "".join(c["source"]))


def _solution_copy() -> str:
    ns = {}
    exec(_cell("COPY_WHOLE = r"), {"diet_lab": lab}, ns)
    return ns["COPY_WHOLE"]


def test_the_prediction_of_the_solution_is_the_sass():
    ns = {}
    exec(_cell("PREDICTION = {"), {}, ns)
    assert lab.prediction_problems(ns["PREDICTION"]) == []
    assert lab.actual_directions()["integer"] == "-"


@pytest.mark.parametrize("wrong", [
    {k: "0" for k in lab.PREDICTED},
    {**{k: "0" for k in lab.PREDICTED}, "integer": "-", "move": "-", "global": "-"},
    {"integer": "-"},
    {**{k: "0" for k in lab.PREDICTED}, "integer": "fewer"},
])
def test_wrong_predictions_fail(wrong):
    assert lab.prediction_problems(wrong)


def test_the_solution_copy_passes(rng):
    what = lab.check_copy_source(lab.lab_source(_solution_copy()), rng)
    assert "float64" in what


def test_a_checked_copy_is_caught_in_sass():
    """Copying with the row check kept runs correctly but does not take the integer diet."""
    body = """
template <int D, int ROWS> __device__ __forceinline__ void copy_whole_lab(u32 dst, const u16* src)
{
#pragma unroll
    for (int it = 0; it < ROWS * Cfg<D>::CPR / THREADS; ++it) {
        const int i = threadIdx.x + it * THREADS, r = i / Cfg<D>::CPR, c = i % Cfg<D>::CPR;
        const u16* base = src - (threadIdx.x / Cfg<D>::CPR) * D - (threadIdx.x % Cfg<D>::CPR) * 8;
        const u32 d0 = dst - swz<D>(threadIdx.x / Cfg<D>::CPR, threadIdx.x % Cfg<D>::CPR);
        cp16_zfill(d0 + swz<D>(r, c), base + (size_t)r * D + c * 8, r < 100000);
    }
}
"""
    problems = lab.loop_problems(lab.lab_source(body))
    assert problems and "integer" in problems[0]


def test_an_unsolved_copy_fails(rng):
    stub = ("template <int D, int ROWS> __device__ __forceinline__ void copy_whole_lab(u32 dst, "
            "const u16* src)\n{\n#error \"not written\"\n}\n")
    with pytest.raises(grade.GradeError):
        lab.check_copy_source(lab.lab_source(stub), rng)


def test_the_gap_counter_and_the_stall_answer():
    assert lab.ldsm_gaps(lab.SNIPPETS["kernel 9"]) == [8]
    assert lab.ldsm_gaps(lab.SNIPPETS["kernel 10"]) == [1]
    assert lab.ldsm_gaps(lab.SYNTHETIC) == [3, 2]
    assert lab.regression_problems("short_scoreboard", lab.ldsm_gaps) == []
    problems = lab.regression_problems("wait", lambda lines: [0])
    assert len(problems) >= 3 and "grew_most" in problems[0]


def test_a_gap_counter_that_raises_is_reported():
    problems = lab.regression_problems("short_scoreboard", lambda lines: 1 / 0)
    assert all("ZeroDivisionError" in p for p in problems)
