"""The SGEMM ladder's :class:`fraglab.problem.Problem`s: one per rung, one float64 reference.

Every rung is checked on the same cases against ``A @ B`` computed in float64 by NumPy. Each
element's error is measured against the scale FP32 rounding works at, ``(|A| @ |B|)[i, j]``
(:func:`scaled_error`): a result that cancels to nearly zero is judged by the size of the terms
it summed, not by its own. A dot product of length K rounded at every step is off by at most
about ``K * 2**-24`` of that scale, so the tolerance is ``4 K 2**-24`` (:func:`tolerance`); a
wrong index or a missing term is off by about ``1 / K`` of it. Sizes a rung cannot take (the float4 rungs need
whole tiles) are not in its cases; their rejection is tested on its own.
"""
from __future__ import annotations

import numpy as np

from .. import launch
from ..problem import Case, Problem
from . import kernels

def tolerance(case: Case) -> float:
    """``4 K 2**-24``: a bound on FP32 rounding over a dot product of length K (see above)."""
    return 4.0 * case.params.get("k", 1) * 2.0 ** -24


def scaled_error(got, ref, inputs) -> float:
    """Largest ``|C - C_ref|`` over ``(|A| @ |B|)`` (inf where C is not finite: unwritten)."""
    got = np.asarray(got, np.float64)
    if got.shape != ref.shape or not np.isfinite(got).all():
        return float("inf")
    scale = np.abs(inputs["a"].astype(np.float64)) @ np.abs(inputs["b"].astype(np.float64))
    return float((np.abs(got - ref) / np.maximum(scale, np.finfo(np.float64).tiny)).max(initial=0))


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


#: Cases of rung 10 (split_k), which takes any M and N and K that are multiples of 4: its tiles
#: and split come from the shape table (``kernels.tiles_for``) unless ``tiles`` overrides them.
#: Splits that leave a short last slice, a last step that is part of a BK step, edge tiles in
#: M and N, and the two kernels' extremes (one split; many); the tuning switches, alone and
#: together, ragged too.
_SMALL = {"BM": 64, "BN": 64, "BK": 8, "WM": 32, "WN": 32, "MINB": 4}
SPLIT_K_CASES = (
    Case("table_1024", m=1024, n=1024, k=1024, slow=True),
    Case("table_long_k", m=1024, n=1024, k=8192, slow=True),
    Case("ragged_split", m=333, n=260, k=132, edge=True, slow=True),
    Case("split8", m=256, n=256, k=4096, tiles={"SPLIT": 8}, edge=True, slow=True),
    Case("split_large_magnitude", m=256, n=256, k=512, scale=1e15, tiles={"SPLIT": 4},
         edge=True, slow=True),
    Case("small_ragged_split", m=33, n=36, k=20, tiles={"SPLIT": 3}, edge=True),
    Case("uneven_split", m=64, n=128, k=40, tiles={"SPLIT": 3, "BM": 64, "BN": 128, "BK": 8,
                                                   "WM": 32, "WN": 64, "MINB": 4}, edge=True),
    Case("guarded_whole_tiles", m=64, n=64, k=16, tiles={"GUARD": 1, "SPLIT": 2, "BM": 64,
                                                          "BN": 64, "BK": 8, "WM": 32, "WN": 32,
                                                          "MINB": 4}, edge=True),
    # the tuning switches (kernels.SWITCHES), on small 64x64 tiles: 2 or more steps per slice
    # (the loop runs, the stage and the fragment sets alternate)
    Case("switch_regdb", m=64, n=64, k=32, tiles={"REGDB": 1, "SPLIT": 2, **_SMALL}, edge=True),
    Case("switch_swizzle_bk16", m=64, n=64, k=48,
         tiles={"SWIZZLE": 1, "REGDB": 1, "ORDER": 1, "SPLIT": 1, **_SMALL, "BK": 16}, edge=True),
    Case("switch_ragged", m=33, n=36, k=40, tiles={"SWIZZLE": 1, "ORDER": 3, "SPLIT": 2,
                                                   **_SMALL}, edge=True),
    Case("switch_lanes_8x4", m=64, n=64, k=24, tiles={"ORDER": 2, "LM": 8, "REGDB": 1, "SPLIT": 1,
                                                      **_SMALL}, edge=True),
    Case("k4", m=5, n=8, k=4, edge=True),
    Case("one_by_four", m=1, n=4, k=4, edge=True),
)


def cases(variant: str) -> tuple:
    """The cases of ``variant``: the whole-tile ones, plus the ragged ones where it takes them.
    A rung that takes ragged sizes runs its small ragged cases on the interpreter, so its "k16"
    (256 x 256, slow there for the untiled rungs) is left to GPUs."""
    if variant == "split_k":
        return (*WHOLE_TILE_CASES, *SPLIT_K_CASES)
    if variant not in kernels.RAGGED_OK:
        return WHOLE_TILE_CASES
    k16 = [Case(c.name, edge=c.edge, slow=True, **c.params) if c.name == "k16" else c
           for c in WHOLE_TILE_CASES]
    return (*k16, *RAGGED_CASES)


def _runner(variant: str):
    def run(a, b, tiles=None, **_):
        return kernels.sgemm(launch.to_device(a), launch.to_device(b), variant=variant,
                             **(tiles or {}))
    return run


PROBLEMS = {
    variant: Problem(
        f"07_register_reuse/{variant}",
        f"C = A @ B in FP32 by rung '{variant}' ({kernels.CHANGES[variant]})",
        inputs=inputs, reference=reference, run=_runner(variant), cases=cases(variant),
        tol=tolerance, error=scaled_error)
    for variant in kernels.VARIANTS
}
