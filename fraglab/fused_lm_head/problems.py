"""The chapter's kernels as :class:`fraglab.problem.Problem` s: what the tests, the lab's graded
cell, the benchmark's check and ``.ci/sanitize_topics.py`` check, each the same way."""
from __future__ import annotations

import numpy as np

from .. import launch
from ..problem import Case, Problem
from . import kernels

#: Inputs stay within +-2^25 so that no prefix sum leaves int32 (the reference need not wrap).
BOUND = 2**20


def rows_of_ints(rng, rows: int = 40, largest: bool = False) -> dict:
    """A (rows, 32) int32 matrix: random in [-BOUND, BOUND), or every element BOUND - 1."""
    if largest:
        return {"x": np.full((rows, 32), BOUND - 1, np.int32)}
    return {"x": rng.integers(-BOUND, BOUND, (rows, 32), dtype=np.int32)}


def scan_reference(x):
    """The inclusive prefix sums in int64, independent of the kernel."""
    return np.cumsum(x.astype(np.int64), axis=1)


#: Random rows, one row, rows that leave a block part empty, the largest sums, and (GPU only)
#: more rows than the interpreter runs in reasonable time.
CASES = (Case("rows40"), Case("rows1", rows=1, edge=True), Case("rows7", rows=7, edge=True),
         Case("rows33", rows=33, edge=True), Case("largest", rows=3, largest=True, edge=True),
         Case("rows65537", rows=65537, slow=True))

PROBLEMS = {
    "warp_scan": Problem(
        "11_fused_lm_head/warp_scan", "the inclusive prefix sum of each row of a (rows, 32) int32 matrix",
        inputs=rows_of_ints, reference=scan_reference, tol=0, labels=("row", "lane"),
        run=lambda x, **_: kernels.warp_scan(launch.to_device(x)), cases=CASES),
}
