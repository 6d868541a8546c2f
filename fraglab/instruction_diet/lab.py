"""The lab's material and checks (``solutions/09_instruction_diet.ipynb``).

1. Predict, per instruction class, what the ``pointer_loads`` step does to the main loop of
   ``strided_store`` (``"-"``, ``"0"`` or ``"+"``): graded against the SASS (sm_90, f16, d = 128).
2. Apply it: write ``copy_whole_lab``, the unchecked copy of a whole K/V tile, in a CUDA source
   built on ``kernels/09_instruction_diet.cuh`` (:func:`lab_source`). Graded by running the
   learner's kernel through ``PROBLEMS["pointer_loads"]`` (GPU cases and the interpreter's small
   ones, N = 144 among them, where whole tiles are copied), compiling it for every target, and
   reading its main loop: the integer class must fall as for the course's step.
3. Spot a scheduling regression: the seed's stall table of its kernels 9 and 10 (:data:`STALLS`)
   names the stall that grew; :func:`ldsm_gaps` measures, in a listing, how many instructions
   separate each ``LDSM`` from the first instruction that reads what it loaded. The learner writes
   both; graded by value, and the function against :func:`ldsm_gaps` on the seed's snippets, our
   own main loops and a made-up listing.
"""
from __future__ import annotations

import re

from .. import device, grade, toolchain
from ..grading import checks
from . import classes, kernels
from .problems import PROBLEMS

#: The classes exercise 1 asks about, and the two steps it compares.
PREDICTED = ("tensor", "shared", "global", "integer", "move", "float")
BEFORE, AFTER = "strided_store", "pointer_loads"

_PREFIX = """\
#define DIET_STRIDED_SWIZZLE 1
#define DIET_STRIDED_STORE 1
#define DIET_POINTER_LOADS 1
#define DIET_LAB_COPY 1
#include "09_instruction_diet.cuh"
"""
_SUFFIX = "\nDIET_KERNELS(lab)\n"


def lab_source(copy_whole_code: str) -> str:
    """The ``pointer_loads`` step with the learner's ``copy_whole_lab`` (its whole definition,
    inside ``namespace diet`` and the sm_80 guard) in place of the course's ``copy_whole``."""
    return (_PREFIX + "namespace diet {\n#if FRAGLAB_SM80\n" + copy_whole_code
            + "\n#endif\n}  // namespace diet\n" + _SUFFIX)


# --------------------------------------------------------------------------------------------
# 1. prediction
# --------------------------------------------------------------------------------------------

def direction(before: int, after: int) -> str:
    return "-" if after < before else "+" if after > before else "0"


def actual_directions(arch: str = "sm_90") -> dict[str, str]:
    """What :data:`AFTER` does to :data:`BEFORE`'s main loop, per class of :data:`PREDICTED`."""
    b = classes.variant_counts(BEFORE, "f16", 128, arch)["loop"]
    a = classes.variant_counts(AFTER, "f16", 128, arch)["loop"]
    return {k: direction(b[k], a[k]) for k in PREDICTED}


def prediction_problems(prediction) -> list[str]:
    """Where a prediction ``{class: "-" | "0" | "+"}`` disagrees with the SASS."""
    if not isinstance(prediction, dict) or set(prediction) != set(PREDICTED):
        return [f"give a dict with exactly the keys {list(PREDICTED)}, got {prediction!r}"]
    bad = [k for k, v in prediction.items() if v not in ("-", "0", "+")]
    if bad:
        return [f"{k}: use '-', '0' or '+', got {prediction[k]!r}" for k in bad]
    want = actual_directions()
    return [f"{k}: you predicted {prediction[k]!r}; the main loop's count went the other way"
            if want[k] != "0" and prediction[k] != "0" else
            f"{k}: you predicted {prediction[k]!r}, which is not what the SASS shows"
            for k in PREDICTED if prediction[k] != want[k]]


# --------------------------------------------------------------------------------------------
# 2. the step, applied
# --------------------------------------------------------------------------------------------

def source_runner(source: str):
    """``run`` for :meth:`fraglab.problem.Problem.check`: the learner's kernel, launched where
    kernels run now (the grader may switch to the interpreter between calls)."""
    return lambda **inputs: PROBLEMS[AFTER].run(**inputs, source=source)


def loop_problems(source: str, arch: str = "sm_90") -> list[str]:
    """What the learner's main loop lacks on ``arch`` (empty: the integer diet took place)."""
    b = toolchain.compile(kernels.LAB_FILE, arch, source=source)
    name = "diet_lab_f16_d128"
    mine = classes.counts(b.sass(name))["loop"]
    before = classes.variant_counts(BEFORE, "f16", 128, arch)["loop"]
    after = classes.variant_counts(AFTER, "f16", 128, arch)["loop"]
    problems = []
    limit = (before["integer"] + after["integer"]) // 2
    if mine["integer"] > limit:
        problems.append(f"the main loop has {mine['integer']} integer instructions "
                        f"({BEFORE}: {before['integer']}); whole-tile copies should need at most "
                        f"{limit}: a base address plus compile-time strides, no per-row checks")
    if mine["global"] != after["global"]:
        problems.append(f"the main loop has {mine['global']} global-memory instructions, "
                        f"expected {after['global']} (one cp.async per 16-byte chunk)")
    if mine["local"]:
        problems.append(f"the main loop has {mine['local']} local-memory instructions: spills")
    return problems


#: The interpreter's cases: N = 144 copies whole tiles (and a ragged one), N = 72 only one whole.
INTERPRETER_CASES = tuple(PROBLEMS[AFTER].case(n) for n in
                          ("small f16 d64 N=144", "small bf16 d64 causal N=80 peaky",
                           "small f16 d128 N=72"))


def check_copy_source(source: str, rng, exercise: str = "exercise 2") -> str:
    """Grade exercise 2 (raises :class:`fraglab.grade.GradeError`); returns what was run."""
    p = PROBLEMS[AFTER]
    gpu_cases = tuple(c for c in p.cases if c.slow)[:8] + INTERPRETER_CASES
    # results first: a wrong O fails before the other targets are compiled for the SASS checks,
    # which then share the runner's builds (one name, kernels.LAB_FILE)
    ran = checks.check_cases(exercise, p, source_runner(source), rng, repeats=1,
                             cases=gpu_cases if device.gpu_available() else INTERPRETER_CASES,
                             interpreter_cases=INTERPRETER_CASES)
    arches = grade.check_sass(exercise, source, "diet_lab_f16_d128", classes_zero=("local",),
                              name=kernels.LAB_FILE)
    problems = loop_problems(source)
    if problems:
        grade.fail(exercise, "\n".join(problems))
    return f"compiled for {', '.join(arches)}; O checked against float64: {ran}"


# --------------------------------------------------------------------------------------------
# 3. a scheduling regression
# --------------------------------------------------------------------------------------------

#: The seed's stall profile of its kernels 9 and 10 (share of stalled cycles, %, A100; part 8,
#: "Regression Analysis"): kernel 10 removed instructions and ran 1.46 % slower.
STALLS = {"short_scoreboard": {"kernel 9": 2.36, "kernel 10": 7.79},
          "wait": {"kernel 9": 36.99, "kernel 10": 38.48}}
#: The seed's two snippets (the same place in kernels 9 and 10).
SNIPPETS = {
    "kernel 9": ["LDSM.16.M88.4 R216, [R213+0x2000]", "HMMA.16816.F32 R60, R204, R4, R60",
                 "HMMA.16816.F32 R64, R204, R6, R64", "LDSM.16.M88.4 R4, [R213+0x3000]",
                 "LDSM.16.M88.4 R204, [R235+-0x40]", "HMMA.16816.F32 R92, R228, R224, R92",
                 "HMMA.16816.F32 R96, R228, R226, R96", "HMMA.16816.F32 R68, R228, R220, R68",
                 "HMMA.16816.F32 R72, R228, R222, R72", "HMMA.16816.F32 R76, R228, R216, R76"],
    "kernel 10": ["LDSM.16.M88.4 R136, [R242]", "LDSM.16.M88.4 R4, [R232+-0x40]",
                  "HMMA.16816.F32 R128, R224, R136, R128"],
}
#: A made-up listing: predicates, .reuse flags, a transposed LDSM read as a B pair (R10 = the
#: third register of R8's group), and an LDSM nothing reads.
SYNTHETIC = ["@P0 LDSM.16.M88.4 R8, [R2]", "IMAD R3, R3, 0x4, RZ", "LDSM.16.MT88.4 R20, [R3]",
             "FFMA R5, R6, R7, R5", "HMMA.16816.F32 R40, R12.reuse, R10, R40",
             "HMMA.16816.F32 R44, R20, R22, RZ", "LDSM.16.M88.4 R60, [R4]", "EXIT"]
#: A second made-up listing, for the rules the first leaves out: a register of an LDSM's group
#: written (as a destination: not a read) before anything reads the group, and an LDSM whose
#: address comes from another LDSM's registers (an LDSM reads its operands too).
SYNTHETIC_2 = ["LDSM.16.M88.4 R8, [R2]", "IMAD R9, R4, 0x2, RZ", "FFMA R5, R6, R7, R5",
               "LDSM.16.M88.4 R16, [R4]", "LDSM.16.M88.4 R24, [R17+0x100]",
               "HMMA.16816.F32 R40, R8, R26, R40", "EXIT"]

_REG = re.compile(r"\bR(\d+)\b")


def _sources(line: str) -> set[int]:
    """Registers an instruction reads: every R operand after the first (the destination)."""
    parts = line.split(None, 2 if line.startswith("@") else 1)
    ops = parts[-1] if len(parts) > (2 if line.startswith("@") else 1) else ""
    regs = [int(m) for m in _REG.findall(ops.replace(".reuse", ""))]
    return set(regs[1:])


def ldsm_gaps(lines: list[str]) -> list[int]:
    """For each LDSM (in order) that something later reads: the number of instructions strictly
    between it and the first later instruction that reads one of the four registers it wrote."""
    out = []
    for i, line in enumerate(lines):
        op = classes.opcode_of(line)
        if not op.startswith("LDSM"):
            continue
        dst = int(_REG.search(line.split(op, 1)[1]).group(1))
        group = set(range(dst, dst + 4))
        for j in range(i + 1, len(lines)):
            if _sources(lines[j]) & group:
                out.append(j - i - 1)
                break
    return out


def gap_listings(arch: str = "sm_90") -> dict[str, list[str]]:
    """The listings exercise 3 is graded on: the seed's snippets, two of our main loops, SYNTHETIC."""
    out = dict(SNIPPETS)
    for variant in ("fa2", kernels.FINAL):
        b = kernels.build(variant, arch)
        name = kernels.kernel_name(variant, "f16", 128)
        out[f"{variant} main loop"] = classes.main_loop(b.sass(name))
    out["the made-up listing diet_lab.SYNTHETIC (printed in the lab, above your code)"] = SYNTHETIC
    out["the made-up listing diet_lab.SYNTHETIC_2 (printed in the lab, above your code)"] = SYNTHETIC_2
    return out


def regression_problems(grew_most, gaps_fn) -> list[str]:
    """Where exercise 3's answers disagree: the stall that grew most (a key of :data:`STALLS`),
    and the learner's ``gaps_fn(lines)`` against :func:`ldsm_gaps`."""
    problems = []
    growth = {k: v["kernel 10"] - v["kernel 9"] for k, v in STALLS.items()}
    if grew_most != max(growth, key=growth.get):
        problems.append(f"grew_most = {grew_most!r} is not the stall reason whose share grew the "
                        "most from kernel 9 to kernel 10")
    for name, lines in gap_listings().items():
        want = ldsm_gaps(lines)
        try:
            got = [int(x) for x in gaps_fn(list(lines))]
        except Exception as e:          # the learner's bug, shown with the listing it met
            problems.append(f"{name}: {type(e).__name__}: {e}")
            continue
        if got != want:
            shown = lambda x: str(x if len(x) <= 8 else x[:8] + ["..."])
            problems.append(f"{name}: got {shown(got)}, expected {shown(want)}")
    return problems
