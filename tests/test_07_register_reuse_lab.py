"""Topic 07_register_reuse, the lab's checks: the solution passes and plausible wrong answers fail,
each exercise (on the CPU where the check can run there: the PTX interpreter runs exercise 1's
kernel; on a GPU the same answers are run over all of rung 4's cases)."""
import json

import pytest

from fraglab import grade, sass
from fraglab import register_reuse as rr
from fraglab.register_reuse import lab
from nbval_run import ROOT

SOLUTION = ROOT / "solutions" / "07_register_reuse.ipynb"


def _solution_namespace():
    """The solution notebook's exercise cells, executed (the answers the lab expects)."""
    ns: dict = {"rr": rr}
    for cell in json.loads(SOLUTION.read_text())["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "code" and ("BEGIN EXERCISE" in src):
            exec(src, ns)
    return ns


SOL = _solution_namespace()
SOURCE = SOL["TILE1D_SOURCE"]
LOOP = "acc[i] += As[(tr * TM + i) * BK + k] * b;"


def _edit(old, new):
    assert old in SOURCE
    return SOURCE.replace(old, new)


# ------------------------------------------------------------------------------------------------
# Exercise 1: the inner loop (SASS everywhere, the kernel on the PTX interpreter or the GPU)
# ------------------------------------------------------------------------------------------------

WRONG_LOOPS = {
    "accumulates into one register": _edit(LOOP, "acc[0] += As[(tr * TM + i) * BK + k] * b;"),
    "wrong B index (row instead of column)": _edit("Bs[k * BN + tc]", "Bs[k * BN + tr]"),
    "TM stride missing (rows overlap)": _edit(LOOP, "acc[i] += As[(tr + i) * BK + k] * b;"),
    "off by one along k": _edit(LOOP, "acc[i] += As[(tr * TM + i) * BK + (k + 1) % BK] * b;"),
}


def test_the_solution_passes(rng):
    assert "float64" in lab.check_tile1d_source(SOURCE, rng)
    assert lab.loop_problems(SOURCE) == []


@pytest.mark.parametrize("name", WRONG_LOOPS)
def test_wrong_inner_loops_fail(name, rng):
    with pytest.raises(grade.GradeError, match="exercise 1"):
        lab.check_tile1d_source(WRONG_LOOPS[name], rng)


def test_a_loop_that_is_not_unrolled_spills():
    """Without unrolling, acc[i] is indexed at run time: the array lives in local memory."""
    src = SOURCE.replace("#pragma unroll\n", "#pragma unroll 1\n")
    with pytest.raises(grade.GradeError, match="local"):
        grade.check_sass("exercise 1", src, lab.KERNEL, classes_zero=("local",))


def test_a_loop_that_reads_b_per_output_is_caught_in_sass():
    """B read once per k is what the loop check counts: a second Bs read per FFMA that the
    compiler cannot merge (a different element) shows as extra shared words."""
    src = _edit(LOOP, "acc[i] += As[(tr * TM + i) * BK + k] * Bs[k * BN + (tc + i) % BN];")
    assert any("shared words" in p for p in lab.loop_problems(src))


def test_an_unsolved_stub_fails(rng):
    stub = SOURCE.replace("// BEGIN EXERCISE 1", "#error \"Exercise 1\"\n// BEGIN EXERCISE 1")
    with pytest.raises(grade.GradeError, match="does not compile"):
        lab.check_tile1d_source(stub, rng)


@pytest.mark.gpu
@pytest.mark.parametrize("name", WRONG_LOOPS)
def test_wrong_inner_loops_fail_on_the_gpu(name, rng):
    with pytest.raises(grade.GradeError, match="exercise 1"):
        lab.check_tile1d_source(WRONG_LOOPS[name], rng)


@pytest.mark.gpu
@pytest.mark.parametrize("case", rr.PROBLEMS["tile1d"].cases, ids=str)
def test_the_solution_matches_float64_on_the_gpu(case, rng):
    rr.PROBLEMS["tile1d"].check(case, rng, run=lab.source_runner(SOURCE, interpreter=False))


def test_the_interpreter_runner_matches_float64(rng):
    for case in lab.INTERPRETER_CASES:
        rr.PROBLEMS["tile1d"].check(case, rng, run=lab.source_runner(SOURCE, interpreter=True))


# ------------------------------------------------------------------------------------------------
# Exercise 2: shared words per FFMA from SASS
# ------------------------------------------------------------------------------------------------

def _width(line):
    return 4 if ".128" in line else 2 if ".64" in line else 1


def lds_128_as_one_word(lines):
    words = sum(sass.base_opcode(l) == "LDS" for l in lines)
    return words / sum(sass.base_opcode(l) == "FFMA" for l in lines)


def global_loads_counted_too(lines):
    words = sum(_width(l) for l in lines if sass.base_opcode(l) in ("LDS", "LDG"))
    return words / sum(sass.base_opcode(l) == "FFMA" for l in lines)


def predicated_lines_missed(lines):
    words = sum(_width(l) for l in lines if l.split()[0].split(".")[0] == "LDS")
    return words / sum(l.split()[0].split(".")[0] == "FFMA" for l in lines)


def shared_stores_counted_too(lines):
    words = sum(_width(l) for l in lines if sass.base_opcode(l) in ("LDS", "STS"))
    return words / sum(sass.base_opcode(l) == "FFMA" for l in lines)


def instructions_per_instruction(lines):
    return sum("LDS" in l for l in lines) / max(1, sum("FFMA" in l for l in lines))


def test_the_solution_counter_passes():
    assert lab.counter_problems(SOL["shared_words_per_ffma"]) == []


@pytest.mark.parametrize("wrong", [lds_128_as_one_word, global_loads_counted_too,
                                   predicated_lines_missed, shared_stores_counted_too,
                                   instructions_per_instruction], ids=lambda f: f.__name__)
def test_wrong_counters_fail(wrong):
    assert lab.counter_problems(wrong)


def test_a_counter_that_raises_is_reported():
    def broken(lines):
        raise NotImplementedError("Exercise 2")
    problems = lab.counter_problems(broken)
    assert problems and all("NotImplementedError" in p for p in problems)


# ------------------------------------------------------------------------------------------------
# Exercise 3: tiles for a register budget
# ------------------------------------------------------------------------------------------------

def test_the_solution_choice_and_report_pass():
    tiles = SOL["my_tiles"]()
    assert lab.tile_choice_problems(tiles, SOL["ptxas_check"](tiles)) == []


@pytest.mark.parametrize("tiles, why", [
    (dict(BM=64, BN=64, BK=8, TM=8), "shared words per FFMA"),          # the seed's: TM too small
    (dict(BM=128, BN=128, BK=8, TM=16), "spills"),                      # 1024 threads: 64 regs max
    (dict(BM=128, BN=32, BK=8, TM=32), "registers per thread"),         # over the budget
    (dict(BM=256, BN=32, BK=8, TM=64), "spills"),                       # over 255: spills
    (dict(BM=60, BN=64, BK=8, TM=16), "multiple of TM"),                # not a rung-4 tile
    (dict(BM=64, BN=64, BK=8), "keys BM, BN, BK, TM"),
])
def test_wrong_tile_choices_fail(tiles, why):
    problems = lab.tile_choice_problems(tiles)
    assert problems and any(why in p for p in problems), problems


def test_a_wrong_ptxas_report_fails():
    tiles = SOL["my_tiles"]()
    good = lab.ptxas_report(tiles)
    t = rr.tiles("tile1d", **tiles)
    # occupancy without the allocation granularity and the whole-block rule
    naive = dict(good, occupancy=min(1.0, 65536 / good["registers"] / 2048))
    assert any("occupancy" in p for p in lab.tile_choice_problems(tiles, naive))
    wrong_regs = dict(good, registers=good["registers"] + 8)
    assert any("registers" in p for p in lab.tile_choice_problems(tiles, wrong_regs))
    assert lab.tile_choice_problems(tiles, {"registers": good["registers"]})  # missing keys
    assert rr.threads("tile1d", t) == t["BM"] * t["BN"] // t["TM"]


@pytest.mark.gpu
def test_source_launcher_launches_the_learner_kernel(rng):
    import cupy as cp
    import numpy as np
    a = cp.asarray(rng.standard_normal((130, 70), dtype=np.float32))
    b = cp.asarray(rng.standard_normal((70, 66), dtype=np.float32))
    run, c = lab.source_launcher(a, b, SOURCE)
    assert bool(cp.isnan(c).all())                      # poisoned until launched
    run()
    ref = a.get().astype(np.float64) @ b.get().astype(np.float64)
    assert grade.rel_error(c.get(), ref) < 1e-5
    with pytest.raises(TypeError):
        lab.source_launcher(a.get(), b, SOURCE)         # NumPy input: rejected before launch
