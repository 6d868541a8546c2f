"""Lab 08's checks (``solutions/08_register_liveness.ipynb``).

1. Predict, then measure: the learner's count of Q's registers a thread (D/4) and their
   ``measure(variant, d)`` (ptxas registers, spill bytes, LDL + STL in SASS) against
   :func:`.resources.resources`.
2. The Q reload in CUDA: the learner's body of ``fa08::lab_fetch`` (one ldmatrix of this warp's
   16x16 block of Q from the swizzled tile), compiled into the FA-2 kernel (:func:`lab_source`)
   for every target, without local memory, and run against float64 through
   :data:`.problems.PROBLEMS` (``qreload``'s cases of d 64 and 128; on the PTX interpreter
   without a GPU).
3. Reading the liveness figure: two values read off it, against the figure's own data.
"""
from __future__ import annotations

import numpy as np

from .. import device, grade, toolchain
from ..grading import checks
from ..problem import Case
from . import kernels, liveness, resources
from .problems import PROBLEMS

#: What the learner's source is wrapped in: the header, then their lab_fetch, then the kernels.
LAB_HEAD = '''#include "08_register_liveness.cuh"
#if FRAGLAB_SM80
template <int D> __device__ __forceinline__ void fa08::lab_fetch(u32 (&a)[4], u32 sQ, int kk)
{
    const int lane = lane_id(), warp = threadIdx.x >> 5;
'''
LAB_TAIL = '''
}
#endif
FA08_KERNELS_D(lab, QLAB, 64)
FA08_KERNELS_D(lab, QLAB, 128)
'''
KERNEL = "fa08_lab_f16_d64_two"
#: Cases the interpreter runs for exercise 2 (a few seconds each).
INTERPRETER_CASES = (Case("lab d64 causal N=72", shape=(1, 1, 72, 64), dtype="f16", causal=True),
                     Case("lab d128 bf16 N=40", shape=(1, 1, 40, 128), dtype="bf16", edge=True))
#: Where exercise 1 is graded: (variant, d) pairs.
MEASURED = (("qreg", 128), ("qreg", 256), ("qreload", 256), ("qglobal", 256), ("qreg_oneloop", 256))
#: Exercise 1b's claim: ``measure`` reads ptxas and the SASS of any variant and head dimension.
#: Besides :data:`MEASURED` (the table the lab shows), each check draws this many more pairs
#: afresh from the other variants and dimensions: a table typed in from the lab's is wrong there.
DRAWN = 2


def measured_pairs(rng=None) -> tuple:
    """:data:`MEASURED` and :data:`DRAWN` pairs drawn from the rest of variants x dimensions."""
    rng = np.random.default_rng() if rng is None else rng
    rest = [(v, d) for v in kernels.VARIANTS for d in kernels.HEAD_DIMS if (v, d) not in MEASURED]
    return MEASURED + tuple(rest[i] for i in sorted(rng.choice(len(rest), DRAWN, replace=False)))


def lab_source(body: str) -> str:
    """The CUDA file for the learner's ``lab_fetch`` body (``a``, ``sQ``, ``kk``, ``lane``, ``warp``
    in scope; ``ldsm4<false>`` and ``swz<D>`` from the header)."""
    return LAB_HEAD + body + LAB_TAIL


# ---- exercise 1 ---------------------------------------------------------------------------------

def prediction_problems(q_registers) -> list[str]:
    out = []
    for d in kernels.HEAD_DIMS:
        try:
            got = int(q_registers(d))
        except Exception as e:
            return [f"q_registers({d}): {type(e).__name__}: {e}"]
        if got != d // 4:
            out.append(f"q_registers({d}) = {got}; count the A fragments of a warp's 16 rows "
                       "(one per 16 columns) and the registers each holds in one lane")
    return out


def measure_problems(measure, rng=None) -> list[str]:
    out = []
    for variant, d in measured_pairs(rng):
        want = resources.resources(variant, d)
        want = {"registers": want["registers"],
                "spill_bytes": want["spill_stores"] + want["spill_loads"],
                "local_instructions": want["ldl"] + want["stl"]}
        try:
            got = measure(variant, d)
        except Exception as e:
            out.append(f"measure({variant!r}, {d}): {type(e).__name__}: {e}")
            continue
        for key, value in want.items():
            if not isinstance(got, dict) or got.get(key) != value:
                out.append(f"measure({variant!r}, {d})[{key!r}] = "
                           f"{got.get(key) if isinstance(got, dict) else got!r}; ptxas and the "
                           f"SASS give {value}")
    return out


# ---- exercise 2 ---------------------------------------------------------------------------------

def check_reload_source(body: str, rng, exercise: str = "exercise 2") -> str:
    """Grade the learner's Q reload (raises :class:`fraglab.grade.GradeError`)."""
    source = lab_source(body)
    p = PROBLEMS["qreload"]
    gpu_cases = tuple(c for c in p.cases if c.params["shape"][3] in kernels.LAB_HEAD_DIMS and c.slow)

    def run(**kw):
        return p.run(**kw, source=source)
    # results first: a wrong O fails before the other targets are compiled for the SASS checks
    ran = checks.check_cases(exercise, p, run, rng, repeats=1,
                             cases=gpu_cases if device.gpu_available() else INTERPRETER_CASES,
                             interpreter_cases=INTERPRETER_CASES)
    grade.check_sass(exercise, source, KERNEL, classes_zero=("local",), name=kernels.LAB_NAME)
    b = toolchain.compile(kernels.LAB_NAME, "sm_90", source=source)
    mine = toolchain.compile("08_register_liveness_qreload", "sm_90")
    if b.opcodes(KERNEL).get("LDSM", 0) < mine.opcodes("fa08_qreload_f16_d64_two").get("LDSM", 0):
        grade.fail(exercise, "the kernel has fewer ldmatrix than the course's qreload: Q's fragment "
                             "must be loaded from shared memory at each use")
    return f"compiled for every target, no local memory; O checked against float64: {ran}"


# ---- exercise 3 ---------------------------------------------------------------------------------

def figure_data(d: int = 256) -> dict:
    """Peak PTX live registers of ``qreg`` and ``qreload`` at ``d`` (what the figure's legend says)."""
    out = {}
    for mode in ("qreg", "qreload"):
        b = toolchain.compile(f"08_register_liveness_{mode}", "sm_90")
        k = f"fa08_{mode}_f16_d{d}_two"
        out[mode] = max(liveness.live_counts(liveness.parse_ptx(liveness.ptx_function(b.ptx, k))))
    return out


def reading_problems(answer) -> list[str]:
    if not isinstance(answer, dict) or set(answer) != {"gap", "first_over_255"}:
        return [f"give a dict with keys 'gap' and 'first_over_255', got {answer!r}"]
    peaks = {d: figure_data(d) for d in kernels.HEAD_DIMS}
    gap = peaks[256]["qreg"] - peaks[256]["qreload"]
    first = next((d for d in kernels.HEAD_DIMS if peaks[d]["qreg"] > 255), None)
    out = []
    try:
        if abs(float(answer["gap"]) - gap) > 3:
            out.append(f"gap = {answer['gap']!r}: read the two peaks in panel (a)'s legend and "
                       "subtract; the figure is the measurement, not the napkin")
    except (TypeError, ValueError):
        out.append(f"gap must be a number, got {answer['gap']!r}")
    if answer["first_over_255"] != first:
        out.append(f"first_over_255 = {answer['first_over_255']!r}: which head dimension's qreg "
                   "curve in panel (a) is the first to cross the dotted line?")
    return out
