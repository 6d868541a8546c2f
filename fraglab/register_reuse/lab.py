"""The lab's checks (``solutions/07_register_reuse.ipynb``).

1. A learner's rung-4 kernel (``sgemm_tile1d`` in a CUDA source string): compiled for every
   target, its sm_90 main loop read (TM FFMAs per staged k, shared words per FFMA = the napkin's
   9/8, no local memory), then run against float64 through :data:`.problems.PROBLEMS` - on the
   GPU over every case of the rung, and without one on the PTX interpreter (:mod:`fraglab.ptx`)
   over small ragged sizes.
2. A learner's counter of shared words per FFMA over SASS lines, against the topic's own
   (:func:`.sass_counts.counts`) on the main loops of several rungs and on a made-up listing.
3. A learner's tile choice for rung 4 under a register budget, compiled with its defines: the
   ptxas report must show the budget kept, no spills, and agree with the learner's own report.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from .. import device, grade, launch, ptx, sass
from ..grading import checks
from ..problem import Case
from . import kernels, sass_counts
from .problems import PROBLEMS

#: The name learner sources compile under, and the kernel they define.
LAB_FILE = "07_register_reuse_lab"
KERNEL = "sgemm_tile1d"
#: Sizes the interpreter runs (a few seconds each): ragged in M, N and K, two block rows.
INTERPRETER_CASES = (Case("ragged_small", m=70, n=66, k=20, edge=True),
                     Case("k_not_multiple", m=64, n=64, k=13, edge=True))
#: Other tiles the learner's loop must also be right at (it is written for any BM, BN, BK, TM:
#: a loop right only at rung 4's 64x64x8, TM = 8, is not the exercise), on a ragged size.
OTHER_TILES = dict(BM=32, BN=32, BK=4, TM=4)
OTHER_CASES = (Case("other_tiles", m=36, n=33, k=7, edge=True),)


# --------------------------------------------------------------------------------------------
# Exercise 1: the inner loop of rung 4
# --------------------------------------------------------------------------------------------

def _grid_args(a, b, c, t: dict):
    (m, k), n = a.shape, b.shape[1]
    return (-(-n // t["BN"]), -(-m // t["BM"])), (a, b, c, np.int32(m), np.int32(n), np.int32(k))


def source_launcher(a, b, source: str, tiles: dict | None = None):
    """``(run, c)``: ``run()`` launches the ``sgemm_tile1d`` of ``source`` (rung 4's tiles, or
    ``tiles``) on the CuPy arrays ``a``, ``b`` into ``c`` (checked and compiled once: for timing
    loops)."""
    t = tiles or kernels.TILES["tile1d"]
    kernels.check_shapes("tile1d", a, b, t)
    c = launch.poisoned((a.shape[0], b.shape[1]), np.float32)
    fn = launch.get_kernel(LAB_FILE, KERNEL, source=source, defines=t)
    grid, args = _grid_args(a, b, c, t)
    return (lambda: launch.launch(fn, grid, kernels.threads("tile1d", t), args)), c


def _launch_source(a, b, source: str, interpreter: bool, tiles: dict | None = None):
    """C = a @ b by the ``sgemm_tile1d`` of ``source`` with rung 4's tiles (or ``tiles``), on the
    GPU (CuPy arrays in and out) or on the PTX interpreter (NumPy)."""
    if not interpreter:
        run, c = source_launcher(a, b, source, tiles)
        run()
        return c
    t = tiles or kernels.TILES["tile1d"]
    a, b = (np.ascontiguousarray(x, dtype=np.float32) for x in (a, b))
    c = np.full((a.shape[0], b.shape[1]), np.nan, np.float32)
    grid, args = _grid_args(a, b, c, t)
    ptx.load(LAB_FILE, "sm_80", source=source, defines=t).function(KERNEL)(
        grid, kernels.threads("tile1d", t), args)
    return c


def source_runner(source: str, interpreter: bool | None = None, tiles: dict | None = None):
    """A ``run(a, b)`` for :meth:`fraglab.problem.Problem.check` that launches the learner's
    kernel (on the interpreter when ``interpreter`` or when there is no GPU; with ``tiles``, or
    rung 4's)."""
    def run(a, b, **_):     # the mode is read at each call: graders switch it (each_mode)
        interp = not device.gpu_available() if interpreter is None else interpreter
        if not interp:
            a, b = launch.to_device(a), launch.to_device(b)
        return _launch_source(a, b, source, interp, tiles)
    return run


def loop_problems(source: str, arch: str = "sm_90") -> list[str]:
    """What the main loop of the learner's kernel lacks on ``arch`` (empty: as the napkin says)."""
    from .. import toolchain
    t = kernels.TILES["tile1d"]
    b = toolchain.compile(LAB_FILE, arch, source=source, defines=t)
    c = sass_counts.counts(sass.main_loop(b.sass(KERNEL)))
    want_ffma = t["BK"] * t["TM"]
    problems = []
    if c["ffma"] != want_ffma:
        problems.append(f"the main loop has {c['ffma']} FFMA, expected BK*TM = {want_ffma} (every "
                        "staged k times every one of the TM accumulators)")
    nap = sass_counts.napkin("tile1d", t)
    if c["ffma"] and Fraction(c["lds_words"]) / c["ffma"] != nap:
        problems.append(f"the main loop moves {c['lds_words']} shared words for {c['ffma']} FFMA, "
                        f"expected {nap} per FFMA: one Bs word and TM As words per k")
    if c["local"]:
        problems.append(f"the main loop has {c['local']} local-memory instruction(s): spills")
    return problems


def check_tile1d_source(source: str, rng, exercise: str = "exercise 1") -> str:
    """Grade exercise 1 (raises :class:`fraglab.grade.GradeError`); returns what was run."""
    p = PROBLEMS["tile1d"]
    # results first: a wrong C fails before the other targets are compiled for the SASS checks
    ran = checks.check_cases(exercise, p, source_runner(source), rng, repeats=1,
                             cases=p.cases if device.gpu_available() else INTERPRETER_CASES,
                             interpreter_cases=INTERPRETER_CASES)
    other = ", ".join(f"{k}={v}" for k, v in OTHER_TILES.items())
    try:
        also = checks.check_cases(exercise, p, source_runner(source, tiles=OTHER_TILES), rng,
                                  repeats=1, cases=OTHER_CASES, interpreter_cases=OTHER_CASES)
    except grade.GradeError as e:
        grade.fail(exercise, f"at tiles {other} (not only rung 4's): "
                             + (str(e).partition("not solved yet: ")[2] or str(e)))
    arches = grade.check_sass(exercise, source, KERNEL, classes_zero=("local",), name=LAB_FILE,
                              defines=kernels.TILES["tile1d"])
    problems = loop_problems(source)
    if problems:
        grade.fail(exercise, "\n".join(problems))
    return (f"compiled for {', '.join(arches)}; C checked against float64: {ran}; at tiles "
            f"{other}: {also}")


# --------------------------------------------------------------------------------------------
# Exercise 2: shared words per FFMA from SASS
# --------------------------------------------------------------------------------------------

#: Rungs whose main loops grade the learner's counter (the lab shows only smem and tile1d).
COUNTED_RUNGS = ("coalesced", "smem", "tile1d", "tile2d", "vectorized", "warptile", "autotuned")

#: A made-up loop body: predicated loads, 64-bit shared loads, global loads and shared stores
#: (which are not shared loads), and an FFMA that is predicated.
SYNTHETIC = ["@P0 LDS.64 R4, [R2+0x10]", "LDS R6, [R3]", "LDG.E.128 R8, desc[UR4][R12.64]",
             "STS.128 [R5], R8", "FFMA R20, R4, R6, R20", "@!P1 FFMA R21, R5, R6, R21",
             "LDS.U.128 R24, [R2+0x200]", "FFMA R22, R24, R6, R22", "FFMA R23, R25, R6, R23",
             "IMAD R2, R2, 0x4, RZ", "BAR.SYNC.DEFER_BLOCKING 0x0"]
#: A second made-up body, for the rules the first leaves out: an LDSM (a matrix load from shared
#: memory: its base is not LDS, so it is not counted), a predicated 128-bit LDS, and FMA opcodes
#: that are not FFMA (HFMA2, DFMA).
SYNTHETIC_2 = ["LDSM.16.M88.4 R40, [R2]", "@!P2 LDS.U.128 R8, [R3+0x40]", "HFMA2 R6, R6, R7, RZ",
               "FFMA R12, R8, R9, R12", "DFMA R14, R10, R10, R14", "FFMA R13, R10, R11, R13",
               "LDS R16, [R3+0x80]", "FFMA R17, R16, R16, R17"]


def main_loop_lines(variant: str, arch: str = "sm_90") -> list[str]:
    """The SASS lines (:func:`fraglab.sass.listing` form) of rung ``variant``'s main loop."""
    b = kernels.build(variant, arch)
    return sass.main_loop(b.sass(f"sgemm_{variant}"))


def words_per_ffma(lines: list[str]) -> float:
    """The topic's own count: 4-byte words moved by shared loads per FFMA over ``lines``."""
    c = sass_counts.counts(lines)
    return c["lds_words"] / c["ffma"]


def counter_problems(fn, rungs=COUNTED_RUNGS, arch: str = "sm_90") -> list[str]:
    """Where the learner's ``fn(lines) -> words per FFMA`` disagrees with :func:`words_per_ffma`."""
    listings = {f"rung {k}": main_loop_lines(k, arch) for k in rungs}
    listings["the made-up loop rr_lab.SYNTHETIC (printed in the lab, above your counter)"] = SYNTHETIC
    listings["the made-up loop rr_lab.SYNTHETIC_2 (printed in the lab, above your counter)"] = SYNTHETIC_2
    problems = []
    for name, lines in listings.items():
        want = words_per_ffma(lines)
        try:
            got = float(fn(list(lines)))
        except Exception as e:  # the learner's bug, shown with the listing it met
            problems.append(f"{name}: {type(e).__name__}: {e}")
            continue
        if not np.isclose(got, want, rtol=1e-9, atol=1e-12):
            problems.append(f"{name}: got {got:.4g} words per FFMA, expected {want:.4g}")
    return problems


# --------------------------------------------------------------------------------------------
# Exercise 3: tiles for a register budget
# --------------------------------------------------------------------------------------------

#: The budget: at most this many registers per thread (so at least 16 warps, 25 %, on sm_90)...
REGISTER_BUDGET = 128
#: ... and at most this many shared words per FFMA (TM >= 16), with no spills.
MAX_WORDS_PER_FFMA = Fraction(17, 16)


def ptxas_report(tiles: dict, arch: str = "sm_90") -> dict:
    """The course's own report of rung 4 with ``tiles``: registers, spill bytes, occupancy."""
    t = kernels.tiles("tile1d", **tiles)
    res = kernels.build("tile1d", arch, **tiles).resources[KERNEL]
    occ = sass.occupancy(res["registers"], kernels.shared_bytes("tile1d", t),
                                kernels.threads("tile1d", t))
    return {"registers": res["registers"],
            "spill_bytes": res["spill_stores"] + res["spill_loads"],
            "occupancy": occ["occupancy"]}


#: Tiles the learner's report is also checked on (the first that is not their choice; rung 4's
#: own tiles come first, compiled already for exercise 2): a report right only for the tiles
#: one picked is not the exercise.
REPORT_TILES = (dict(BM=64, BN=64, BK=8, TM=8), dict(BM=128, BN=64, BK=8, TM=16),
                dict(BM=64, BN=64, BK=8, TM=16))
#: Exercise 3b's claim: the report holds for any tiles rung 4 can run. Tiles it is checked on
#: besides (a second table, whatever the choice): one that spills (sm_90: 16 bytes of spill stores
#: and 16 of spill loads, so a count of the stores alone is wrong) and one of 64 threads a block
#: (so a thread count typed in, 256 or 512, gives the wrong occupancy).
CLAIM_TILES = (dict(BM=128, BN=128, BK=8, TM=64), dict(BM=64, BN=32, BK=8, TM=32))


def report_problems(ptxas_check, choice, arch: str = "sm_90") -> list[str]:
    """Where ``ptxas_check(tiles)`` (the learner's report) disagrees with :func:`ptxas_report` on
    a tile choice other than ``choice`` and on :data:`CLAIM_TILES`."""
    others = [t for t in REPORT_TILES if t != choice][:1] + [t for t in CLAIM_TILES if t != choice]
    problems = []
    for t in others:
        want = ptxas_report(t, arch)
        try:
            got = ptxas_check(dict(t))
        except Exception as e:  # the learner's bug, shown with the tiles it met
            problems.append(f"ptxas_check({t}): {type(e).__name__}: {e}")
            continue
        for key, value in want.items():
            g = got.get(key) if isinstance(got, dict) else None
            try:
                same = g is not None and np.isclose(float(g), float(value), rtol=1e-9, atol=0)
            except (TypeError, ValueError):
                same = False
            if not same:
                problems.append(f"ptxas_check({t})[{key!r}] = {g!r}; ptxas and the occupancy "
                                f"rules give {value!r} (the report must hold for any tiles)")
    return problems


def tile_choice_problems(tiles, learner_report=None, arch: str = "sm_90") -> list[str]:
    """What is wrong with a tile choice for rung 4 (empty: within the budget), and where the
    learner's own report (``{"registers", "spill_bytes", "occupancy"}``) disagrees with ptxas."""
    if not isinstance(tiles, dict) or set(tiles) != {"BM", "BN", "BK", "TM"}:
        return [f"give the tiles as a dict with keys BM, BN, BK, TM, got {tiles!r}"]
    try:
        kernels.tiles("tile1d", **tiles)
    except ValueError as e:
        return [str(e)]
    problems = []
    words = sass_counts.napkin("tile1d", tiles)
    if words > MAX_WORDS_PER_FFMA:
        problems.append(f"TM = {tiles['TM']} costs (TM+1)/TM = {words} shared words per FFMA; the "
                        f"budget asks for at most {MAX_WORDS_PER_FFMA}")
    mine = ptxas_report(tiles, arch)
    if mine["registers"] > REGISTER_BUDGET:
        problems.append(f"ptxas gives {mine['registers']} registers per thread on {arch}; the "
                        f"budget is {REGISTER_BUDGET}")
    if mine["spill_bytes"]:
        problems.append(f"ptxas spills {mine['spill_bytes']} bytes to local memory on {arch} "
                        f"({kernels.threads('tile1d', tiles)} threads per block may hold "
                        f"{min(255, 65536 // kernels.threads('tile1d', tiles))} registers each)")
    if learner_report is not None:
        if not isinstance(learner_report, dict):
            return problems + [f"the report must be a dict, got {type(learner_report).__name__}"]
        for key, want in mine.items():
            got = learner_report.get(key)
            if got is None or not np.isclose(float(got), float(want), rtol=1e-9, atol=0):
                problems.append(f"your report says {key} = {got!r}; ptxas and the occupancy rules "
                                f"give {want!r}")
    return problems
