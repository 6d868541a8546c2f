"""The SGEMM ladder's :class:`fraglab.problem.Problem`s: one per rung, one float64 reference.

Every rung is checked on the same cases against ``A @ B`` computed in float64 by NumPy. The
relative error ``‖C − C_ref‖ / ‖C_ref‖`` of an FP32 dot product of length K grows like
``sqrt(K) * 2**-24`` for random signs (about 1e-6 at K = 4096), so the tolerance is 1e-5 scaled
up for long dot products (:func:`tolerance`). Sizes a rung cannot take (the float4 rungs need
whole tiles) are not in its cases; their rejection is tested on its own.
"""
from __future__ import annotations

import numpy as np

from .. import launch
from ..problem import Case, Problem
from . import kernels

#: Relative-error tolerance of FP32 SGEMM against float64 at K <= 4096 (see :func:`tolerance`).
TOL = 1e-5


def tolerance(case: Case) -> float:
    """:data:`TOL`, grown with sqrt(K / 4096) for longer dot products."""
    return TOL * max(1.0, (case.params.get("k", 1) / 4096) ** 0.5)


def inputs(rng, m: int, n: int, k: int, scale: float = 1.0, **options) -> dict:
    """Random float32 A (m, k) and B (k, n), standard normal times ``scale``."""
    a = (rng.standard_normal((m, k)) * scale).astype(np.float32)
    b = (rng.standard_normal((k, n)) * scale).astype(np.float32)
    return {"a": a, "b": b, **options}


def reference(a, b, **_) -> np.ndarray:
    """A @ B in float64: independent of every kernel."""
    return a.astype(np.float64) @ b.astype(np.float64)


#: Cases every rung runs: sizes that are whole tiles of every rung (multiples of 256 in M and
#: N, of 16 in K) plus a large-magnitude one. 1e15 * 1e15 * K stays below float32's 3.4e38.
#: ``slow``: too large for the PTX interpreter (a GPU-only case); "k16" is the one whole-tile
#: case the interpreter runs in the CPU tier (a few seconds per rung).
WHOLE_TILE_CASES = (
    Case("square256", m=256, n=256, k=256, slow=True),
    Case("square512", m=512, n=512, k=512, slow=True),
    Case("tall_skinny", m=1024, n=256, k=64, slow=True),
    Case("wide", m=256, n=768, k=128, slow=True),
    Case("long_k", m=256, n=256, k=4096, slow=True),
    Case("k16", m=256, n=256, k=16, edge=True),
    Case("large_magnitude", m=256, n=256, k=256, scale=1e15, edge=True, slow=True),
)

#: Cases for the rungs that take any size (:data:`kernels.RAGGED_OK`).
RAGGED_CASES = (
    Case("ragged", m=333, n=257, k=131, edge=True, slow=True),
    Case("k1", m=64, n=96, k=1, edge=True),
    Case("odd", m=31, n=33, k=17, edge=True),
    Case("one_by_one", m=1, n=1, k=7, edge=True),
    Case("one_row", m=1, n=300, k=65, edge=True, slow=True),
)


def cases(kernel: str) -> tuple:
    """The cases of ``kernel``: the whole-tile ones, plus the ragged ones where it takes them."""
    return WHOLE_TILE_CASES + (RAGGED_CASES if kernel in kernels.RAGGED_OK else ())


def _runner(kernel: str):
    def run(a, b, **_):
        return kernels.sgemm(launch.to_device(a), launch.to_device(b), kernel=kernel)
    return run


PROBLEMS = {
    kernel: Problem(
        f"07_register_reuse/{kernel}",
        f"C = A @ B in FP32 by rung '{kernel}' ({kernels.CHANGES[kernel]})",
        inputs=inputs, reference=reference, run=_runner(kernel), cases=cases(kernel),
        tol=tolerance)
    for kernel in kernels.LADDER
}
