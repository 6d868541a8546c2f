"""Grading proven on stored answers: for every lab, each wrong answer (tests/fixtures/wrong_answers)
and each cheat (tests/fixtures/cheats, graded without the shortcut scan) fails its exercise, with a
reason that says what was refused or what differed; the solution passes every exercise and the
unsolved lab fails every one, through nbval (one nbval process per lab; one kernel per exercise,
the answers of an exercise graded one after the other in it, the solution last). The mutation
tests weaken one check function inside the kernels, or run the learner's cells in the kernel
again, and show that fixtures then pass: a broken grader cannot hide behind these tests."""
import functools
import os

import pytest

from conftest import SEED_ENV, seed_of
from fraglab.grading.fixtures import fixtures, grade_fixtures
from nbval_run import ROOT

LABS = [p.stem for p in sorted((ROOT / "solutions").glob("*.ipynb"))]
#: Every test here reads a grading on a seeded draw (grading_seed): `make test-seeds` grades again
#: on other seeds, and every wrong answer and cheat must fail on each of them.
pytestmark = pytest.mark.randomised


#: Fixtures that run until the time limit of the learner's process stops them: graded on their
#: own, under a limit of AT_THE_LIMIT_S seconds instead of the grader's 20 (the same code path,
#: sandbox.Child._timeout, with a smaller number: its 20 s of a process spinning on service calls
#: were the tier's most expensive fixture, 20 CPU-s).
AT_THE_LIMIT = {"00_hello_warp": {"2/endless_loop"}}
AT_THE_LIMIT_S = 4.0


def grading_seed(lab: str) -> int:
    """The seed of a lab's fixture grading (every unseeded draw of its graded notebooks:
    :func:`fraglab.grading.capture.seed_inputs`): one per lab, shared by every test that reads
    its verdicts, moved by $FRAGLAB_TEST_SEED like the rng fixture's (``make test-seeds``)."""
    return seed_of(f"grading/{lab}")


@functools.lru_cache(maxsize=None)
def graded(lab):
    slow = AT_THE_LIMIT.get(lab, set())
    seed = grading_seed(lab)
    print(f"grading seed {seed} ({SEED_ENV}={os.environ.get(SEED_ENV, '0')})")
    res = grade_fixtures(lab, skip=slow, seed=seed)
    if slow:
        alone = grade_fixtures(lab, only=slow, limit_s=AT_THE_LIMIT_S, seed=seed)
        res.update({k: v for k, v in alone.items() if k in slow})
    return res


CASES = [(lab, label) for lab in LABS for label in {**fixtures(lab), **fixtures(lab, cheats=True)}]
CHEATS = [(lab, label) for lab, label in CASES if label.startswith("cheat:")]


def each_fixture_of(table: dict):
    """The test once per (lab, fixture) key of ``table``, named lab/fixture."""
    keys = sorted(table)
    return pytest.mark.parametrize("lab, label", keys, ids=[f"{a}/{b}" for a, b in keys])

# Wrong answers whose kernel is undefined behaviour that the H100 happened to run correctly (lab 00
# exercise 3: every_lane_writes, half_mask) fail in GPU mode too: GPU-mode grading runs every CUDA
# exercise on the PTX interpreter as well (tests/test_grading_modes.py shows it with a fake GPU).


@pytest.mark.nbval
@pytest.mark.parametrize("lab", LABS)
def test_solution_passes_and_unsolved_lab_fails_every_exercise(lab):
    res = graded(lab)
    sol = {k: v for k, v in res.items() if k.startswith("solution:")}
    lab_ = {k: v for k, v in res.items() if k.startswith("lab:")}
    assert sol and all(v.ok for v in sol.values()), "\n".join(v.line() for v in sol.values())
    assert lab_ and not any(v.ok for v in lab_.values()), "\n".join(v.line() for v in lab_.values())


@pytest.mark.nbval
@pytest.mark.parametrize("lab, label", CASES, ids=[f"{a}/{b}" for a, b in CASES])
def test_wrong_answer_fails_its_exercise(lab, label):
    v = graded(lab)[label]
    assert not v.ok, f"the wrong answer {label} passes {v.exercise}: {v.text}"
    assert v.text.strip(), "a failure must say why"


#: What a cheat's reason says, by kind (any of these words): what was refused, or what differed.
CHEAT_SAYS = {"mutant_switch": ("is not solved yet",),       # no switch there: the check's words
              "cuda_escape": ("compile",),                     # the escape is CUDA: it does not build
              # the course's copy called by a name split across lines: on the region's include path
              # it is declared, not defined (fraglab.grading.cuda_region.HIDDEN)
              "splice_name": ("not defined",),
              "frame_expected": ("grading refused", "KeyError", "AttributeError"),  # no check frame
              # where Landlock hides the course's folders (seen on the H100), the search for
              # solutions/ finds nothing: StopIteration at the learner's line
              "solutions_path": ("grading refused", "StopIteration")}


@pytest.mark.nbval
@pytest.mark.parametrize("lab, label", CHEATS, ids=[f"{a}/{b}" for a, b in CHEATS])
def test_a_cheat_is_told_what_was_refused_or_what_differed(lab, label):
    v = graded(lab)[label]
    kind = label.rsplit("/", 1)[1]
    assert any(w in v.text for w in CHEAT_SAYS.get(kind, ("grading refused",))), v.text


#: Wrong answers that end their process or never end: each fails at once, or at the limit, with a
#: reason that names the exercise and what happened (not "a cell before the check").
ENDINGS = {("00_hello_warp", "1/calls_os_exit"): "exited with status 3",
           ("00_hello_warp", "2/endless_loop"): f"did not finish within {AT_THE_LIMIT_S:g} s",
           ("00_hello_warp", "3/deadlock"): "deadlock"}


@pytest.mark.nbval
@each_fixture_of(ENDINGS)
def test_a_process_or_kernel_that_never_returns_is_told_what_happened(lab, label):
    v = graded(lab)[label]
    assert ENDINGS[lab, label] in v.text and v.exercise in v.text, v.text
    assert "before the check" not in v.text


#: Wrong answers whose failure must be the check's own words (a table of the wrong values), not a
#: crash of the grader: lab 03 grades with one tolerance per element, which the table once
#: could not print ("The truth value of an array ... is ambiguous").
SAYS = {("03_permutation_and_quad_reduction", "3/no_swap"): "values wrong",
        ("03_permutation_and_quad_reduction", "4/cols_swapped"): "values wrong",
        # the shuffles made and their results thrown away, the answer computed with NumPy: the
        # check shifts each shuffle's result by a constant and the answer does not move
        ("00_hello_warp", "1/numpy_beside_shuffles"): "does not follow the values",
        ("00_hello_warp", "2/numpy_beside_shuffle"): "does not follow the values"}


@pytest.mark.nbval
@each_fixture_of(SAYS)
def test_a_wrong_answer_is_told_what_is_wrong(lab, label):
    v = graded(lab)[label]
    assert SAYS[lab, label] in v.text and "GradeError" in v.text, v.text


#: (mutant, lab, fixture): the weakened check is what catches that fixture, so with the mutant the
#: fixture passes - and test_wrong_answer_fails_its_exercise would fail.
MUTANTS = [
    ("check_close", "00_hello_warp", "2/rotate_right"),
    ("fail", "00_hello_warp", "1/missing_last_step"),
    ("check_sass", "00_hello_warp", "3/through_shared_memory"),
    ("problem_check", "00_hello_warp", "3/every_lane_writes"),
    ("check_equal", "02_forward_mapping", "2/missing_tile_offset"),
    ("in_process", "00_hello_warp", "cheat:1/alias_patch"),     # the learner's cell in the kernel
]


@pytest.mark.nbval
@pytest.mark.parametrize("mutant, lab, label", MUTANTS, ids=[f"{m[1]}/{m[0]}" for m in MUTANTS])
def test_a_weakened_check_lets_a_wrong_answer_pass(mutant, lab, label):
    assert not graded(lab)[label].ok                 # caught by the real checks
    res = grade_fixtures(lab, only={label}, mutant=mutant, seed=grading_seed(lab))
    assert res[label].ok, (f"with {mutant} weakened, {label} still fails: the test suite cannot see "
                           f"that check broken ({res[label].text})")
    assert all(v.ok for k, v in res.items() if k.startswith("solution:"))


@pytest.mark.nbval
def test_the_mutation_switch_is_not_taken_from_the_environment(monkeypatch):
    """FRAGLAB_GRADING_MUTANT in the environment of `make grade` (a learner's shell) weakens
    nothing: the grader passes it to its kernels only through its API (mutant=)."""
    from fraglab.grading import verdict
    monkeypatch.setenv(verdict.MUTANT_ENV, "fail")
    res = grade_fixtures("00_hello_warp", only={"1/missing_last_step"},
                         seed=grading_seed("00_hello_warp"))
    assert not res["1/missing_last_step"].ok, res["1/missing_last_step"].text


@pytest.mark.nbval
def test_a_patch_in_one_exercise_cannot_pass_another():
    """Exercise 1's function weakens grade.check_close in a way the static checks do not see;
    exercise 2 is wrong. Run as one notebook, exercise 2's check then passes; graded exercise by
    exercise, each in its own kernel, exercise 2 fails."""
    import json
    import tempfile
    from pathlib import Path

    from fraglab.grading import build, grade_bodies
    from nbval_run import graded_cells, run_nbval
    sol_path = ROOT / "solutions" / "00_hello_warp.ipynb"
    sol = build.read(sol_path)
    bodies = build.region_bodies(sol)
    bodies["1"] = ('    vars(grade)["check_close"] = lambda ex, *a, what="", **k: grade.passed(ex, what)\n'
                   + bodies["1"])
    bodies["2"] = bodies["2"].replace("(warp.lane_id() + 1) % 32", "(warp.lane_id() - 1) % 32")
    whole = json.loads(json.dumps(sol))
    for c in whole["cells"]:
        if c["cell_type"] == "code" and labs_regions(c):
            c["source"] = build.replace_bodies("".join(c["source"]), bodies)
    with tempfile.TemporaryDirectory(dir=ROOT / "tests") as tmp:
        nb = Path(tmp) / "00_hello_warp.ipynb"
        nb.write_text(json.dumps(whole))
        _, failed, _ = run_nbval(nb, "cpu")
    ex2_cell = sorted(graded_cells(sol))[1]
    assert ex2_cell not in failed, "the attack should work on a single kernel (else this test shows nothing)"
    verdicts = {v.exercise: v for v in grade_bodies(sol_path, [("mixed", bodies, ["1", "2"])],
                                                           seed=grading_seed("00_hello_warp"))["mixed"]}
    assert not verdicts["exercise 2"].ok, verdicts["exercise 2"].text


def labs_regions(cell):
    from fraglab import labs
    return labs.regions("".join(cell["source"]))


@pytest.mark.nbval
def test_debug_prints_and_warnings_in_exercise_cells_never_fail_grading():
    """The solution with a debug print and a NumPy RuntimeWarning in each of lab 00's Python
    exercises (inside the functions the checks call) still passes every one of them."""
    from fraglab.grading import build, grade_bodies
    sol_path = ROOT / "solutions" / "00_hello_warp.ipynb"
    bodies = build.region_bodies(build.read(sol_path))
    noisy = ('    print("debug: my input", v[:4], "shape", np.shape(v))\n'
             '    np.log(np.zeros(2))                      # RuntimeWarning: divide by zero\n'
             '    np.float32(3e38) * np.float32(10)         # RuntimeWarning: overflow\n')
    for r in ("1", "2"):
        begin = bodies[r].index("\n") + 1 if bodies[r].lstrip().startswith("#|") else 0
        bodies[r] = bodies[r][:begin] + noisy + bodies[r][begin:]
    verdicts = grade_bodies(sol_path, [("noisy", bodies, ["1", "2"])],
                            seed=grading_seed("00_hello_warp"))["noisy"]
    assert len(verdicts) == 2 and all(v.ok for v in verdicts), "\n".join(v.line() for v in verdicts)


#: Compile errors of three labs' CUDA exercises: a syntax error, an undeclared name, a type error.
COMPILE_ERRORS = [(lab, f"{region}/compile_{kind}")
                  for lab, region in (("00_hello_warp", "3"), ("09_instruction_diet", "2"),
                                      ("11_fused_lm_head", "1"))
                  for kind in ("syntax", "undeclared", "type")]


@pytest.mark.nbval
@pytest.mark.parametrize("lab, label", COMPILE_ERRORS, ids=[f"{a}/{b}" for a, b in COMPILE_ERRORS])
def test_a_compile_error_is_one_line_per_error_in_the_learners_cell(lab, label):
    """Each error is one line, ``cell N, line L: message``, N the learner's notebook cell and L
    the line in it (NVRTC's whole log only behind -v)."""
    import re

    from fraglab.grading import build, verdict
    v = graded(lab)[label]
    text, _, detail = v.text.partition(verdict.DETAIL)
    lines = text.strip().splitlines()
    assert lines[0].startswith(verdict.NOT_COMPILED + ": cell "), v.text
    sol = build.read(ROOT / "solutions" / f"{lab}.ipynb")
    region = label.split("/")[0]
    cell = next(k for k, c in enumerate(sol["cells"]) if c["cell_type"] == "code"
                and any(r == region for r, _, _ in build.labs.regions(build.source(c))))
    first = next(b for r, b, _ in build.labs.regions(build.source(sol["cells"][cell])) if r == region)
    for line in lines:
        m = re.fullmatch(r"(?:does not compile: )?cell (\d+), line (\d+): \S.*", line)
        assert m and int(m[1]) == cell and int(m[2]) > first + 1, line
    assert "NVRTC's log" in detail and "error" in detail
    shown = v.line(more="X").splitlines()
    assert len(shown) == len(lines) + 1 and "NVRTC's whole log: X" in shown[-1], shown
    assert "NVRTC's log" in v.line(verbose=True)


#: What kind of failure a fixture is, in the verdict's first words.
KINDS = {("00_hello_warp", "3/compile_syntax"): "does not compile",
         ("00_hello_warp", "2/rotate_right"): "runs but gives wrong values",
         ("00_hello_warp", "3/deadlock"): "crashes or hangs",
         ("00_hello_warp", "1/calls_os_exit"): "crashes or hangs",
         ("00_hello_warp", "lab:1"): "not attempted",
         ("00_hello_warp", "lab:3"): "not attempted"}


@pytest.mark.nbval
@each_fixture_of(KINDS)
def test_a_failure_says_what_kind_it_is(lab, label):
    v = graded(lab)[label]
    assert v.text.startswith(KINDS[lab, label] + ":"), v.text
