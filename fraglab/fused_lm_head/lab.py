"""The lab's checks (``solutions/11_fused_lm_head.ipynb``). Exercise 1 (CUDA): ``lse_tile``, the
online log-sum-exp of one vocabulary tile on the mma accumulators (the per-tile update of the
running max and sum, and the quad reduction of the tile's row maxima).

:func:`lab_source` puts the learner's ``lse_tile`` where ``kernels/11_fused_lm_head.cu`` includes
``kernels/11_fused_lm_head_lse.cuh``; :func:`check_lse` runs that kernel on the Problem's cases
(on a GPU, and on the PTX interpreter) and reads its SASS for every target."""
from __future__ import annotations

import dataclasses

import numpy as np

from .. import device, grade, toolchain
from ..problem import Case
from .kernels import KERNELS
from .problems import PROBLEMS, lm_head_inputs, rounded, run_kernel

#: The line of the kernel file that the learner's step replaces.
INCLUDE = '#include "11_fused_lm_head_lse.cuh"'
STEP_FILE = "11_fused_lm_head_lse.cuh"
#: The lab's kernels compile under this name (one build per target, shared by the checks).
LAB_NAME = f"{KERNELS}_lab"
#: The function a learner's source must define.
LSE_SIGNATURE = ("__device__ __forceinline__ void lse_tile(const float (&s)[LMH_MT][LMH_NT][4], "
                 "float (&m)[LMH_MT][2], float (&l)[LMH_MT][2])")
#: The cases the interpreter runs for the lab: several tiles and splits, a peaky row, a ragged
#: vocabulary, one word only (a warp whose columns are all masked: -inf everywhere), and the
#: extreme rows of :data:`EXTREME`.
INTERPRETER_CASES = ("random", "peaky", "ragged", "splits", "one_word", "extreme_rows")
#: The exercise's claim: lse_tile's running max and sum give the log-sum-exp of any row the kernel
#: can meet. Beyond the Problem's cases (logits ~ N(0, 9), peaks of +40, masked columns): rows
#: whose every logit is near or past float32's exp overflow (e^88.7; shifted by +86, +96, +120,
#: peaks up to +170) and rows whose every logit lies below -69 (shifted by -125, -130, -160, the
#: peak of +40 and the spread included), where 2^(logit log2 e) leaves float32's normal range: an
#: answer without the max shift, or one that clamps the running max, is wrong there and nowhere
#: else.
EXTREME_SHIFTS = (96.0, -130.0, 120.0, -125.0, 86.0, -160.0, 0.0)
EXTREME = Case("extreme_rows", shift=EXTREME_SHIFTS, peaky=True, edge=True)


def shifted_inputs(rng, shift=(0.0,), d: int = 64, **params) -> dict:
    """The Problem's inputs with one more feature: h's is the row's shift (``shift`` cycled over
    the rows), w's is 1, so every logit of a row moves by its shift (values exact in bf16 and
    f16); the float64 reference reads the same rounded inputs."""
    inp = lm_head_inputs(rng, d=d - 1, **params)
    n, v, dtype = inp["h"].shape[0], inp["w"].shape[0], inp["dtype"]
    h_col, _ = rounded(np.resize(np.asarray(shift, np.float64), n)[:, None], dtype)
    w_col, _ = rounded(np.ones((v, 1)), dtype)
    return {**inp, "h": np.ascontiguousarray(np.concatenate([inp["h"], h_col], axis=1)),
            "w": np.ascontiguousarray(np.concatenate([inp["w"], w_col], axis=1))}


def lab_problem():
    """The Problem the lab's check runs: the course's, with :data:`EXTREME` among its cases."""
    p = PROBLEMS["fused_linear_cross_entropy"]
    return dataclasses.replace(p, inputs=shifted_inputs, cases=p.cases + (EXTREME,))
#: SHFL of the kernel with the course's step: 8 in the tile's step (2 rows x 2 blocks x 2), 16 after.
SHFL = 24


def course_step() -> str:
    """The course's own ``lse_tile`` (the file the lab's exercise replaces)."""
    return (toolchain.KERNELS_DIR / STEP_FILE).read_text()


def lab_source(step_source: str) -> str:
    """``kernels/11_fused_lm_head.cu`` with ``step_source`` (which must define
    :data:`LSE_SIGNATURE`) in place of its include of the course's step."""
    if not isinstance(step_source, str):
        raise TypeError(f"the step must be a str of CUDA code, got {type(step_source).__name__}")
    text = toolchain.kernel_path(KERNELS).read_text()
    if text.count(INCLUDE) != 1:
        raise RuntimeError(f"{KERNELS}.cu no longer includes {STEP_FILE} once; update lab_source")
    return text.replace(INCLUDE, "// ---- the lab's lse_tile (fraglab.fused_lm_head.lab) ----\n"
                        + step_source + "\n// ---- end of the lab's lse_tile ----")


def check_lse(step_source: str, rng, exercise: str = "exercise 1") -> str:
    """Fail ``exercise`` unless the kernel with ``step_source``'s ``lse_tile`` matches the float64
    losses on fresh random inputs and the edge cases (ragged vocabulary, a warp with every column
    masked, several splits), outputs poisoned, on the GPU when there is one and on the PTX
    interpreter; and unless its SASS has no local memory on any target and exactly
    :data:`SHFL` SHFL on sm_80 and sm_90. Returns what ran where."""
    from ..grading import checks
    source = lab_source(step_source)
    p = lab_problem()
    small = tuple(p.case(c) for c in INTERPRETER_CASES)
    cases = small + tuple(c for c in p.cases if c.slow) if device.gpu_available() else small
    ran = checks.check_cases(exercise, p, lambda **inp: run_kernel(**inp, source=source,
                                                                   name=LAB_NAME),
                             rng, repeats=1, cases=cases, interpreter_cases=small)
    grade.check_sass(exercise, source, "lmhead_fwd_bf16", classes_zero=("local",), name=LAB_NAME)
    grade.check_sass(exercise, source, "lmhead_fwd_bf16", expect={"SHFL": SHFL},
                     arches=("sm_80", "sm_90"), name=LAB_NAME)
    return f"losses checked against float64: {ran}; SASS: no local memory, {SHFL} SHFL"
