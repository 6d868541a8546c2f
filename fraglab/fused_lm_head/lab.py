"""The lab's checks (``solutions/11_fused_lm_head.ipynb``). Exercise 1 (CUDA): the scan loop of
``warp_scan``. :func:`check_scan` compiles the learner's kernel for every target and reads its
SASS, then runs it on the Problem's cases (on a GPU, and on the PTX interpreter, whose checks
catch a shuffle mask that leaves out a lane)."""
from __future__ import annotations

from .. import grade, launch
from .kernels import KERNELS, warp_scan
from .problems import PROBLEMS


def check_scan(exercise: str, source: str, rng) -> str:
    """Fail ``exercise`` unless ``source``'s ``warp_scan`` has five SHFL and no shared memory,
    barrier or local memory on every target, and matches the int64 prefix sums on fresh random
    rows and the edge cases, outputs poisoned. Returns what ran where (for the mode line)."""
    from ..grading import checks
    grade.check_sass(exercise, source, "warp_scan", expect={"SHFL": 5},
                     classes_zero=("shared", "barrier", "local"), name=f"{KERNELS}_lab")
    return checks.check_cases(exercise, PROBLEMS["warp_scan"],
                              lambda x, **_: warp_scan(launch.to_device(x), source=source), rng)
