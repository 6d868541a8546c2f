"""The topic's :class:`~fraglab.problem.Problem`: the store kernels of
``kernels/02_forward_mapping.cu``, described once.

- ``forward_store``: ``A @ B + C`` tile by tile on the tensor cores, stored twice (with
  ``store_matrix_sync`` and with the formula, Algorithm 2); both outputs against a float64 NumPy
  reference, for every accumulator kind with its fitted formula, for the 16x16 kinds with the
  paper's equations compiled in, and on a grid of one tile. The two outputs must also agree bit
  for bit (they store the same registers): :func:`store_both` runs a case for that comparison.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes, fragments, launch
from ..fragments import recording
from ..problem import Case, Problem
from .store import EQ12_KINDS, forward_store

#: Relative error of ``A @ B + C`` allowed, by accumulator type (s32: exact).
TOL = {"f32": 1e-5, "f16": 2e-2, "s32": 0.0, "f64": 1e-12}


def inputs(rng, kind: str, variant: str = "fitted", row_tiles: int = 3, col_tiles: int = 2,
           dtype: str | None = None) -> dict:
    """A (rows x K), B (K x cols) of the kind's input type, C (rows x cols) of its accumulator
    type; rows and cols ``row_tiles`` and ``col_tiles`` tiles. ``dtype`` names the accumulator
    type (it selects the tolerance)."""
    k = fragments.get_kind(kind)
    inp, in_dt, acc_dt = fragments.STORE_TYPES[k.name]
    rows, cols = row_tiles * k.shape[0], col_tiles * k.shape[1]
    if inp == "s8":
        a = rng.integers(-128, 128, (rows, k.k)).astype(np.int8)
        b = rng.integers(-128, 128, (k.k, cols)).astype(np.int8)
        c = rng.integers(-2**20, 2**20, (rows, cols)).astype(np.int32)
    else:
        a = rng.standard_normal((rows, k.k)).astype(in_dt)
        b = rng.standard_normal((k.k, cols)).astype(in_dt)
        c = rng.standard_normal((rows, cols)).astype(acc_dt)
    return {"a": a, "b": b, "c": c, "kind": k.name, "variant": variant}


def reference(a, b, c, kind: str, **_) -> dict:
    """float64 ``a @ b + c``, with tf32 inputs rounded as the tensor cores read them; the same
    for both stores."""
    if fragments.STORE_TYPES[kind][0] == "tf32":
        a, b = dtypes.round_tf32(a), dtypes.round_tf32(b)
    want = a.astype(np.float64) @ b.astype(np.float64) + c.astype(np.float64)
    return {"store_matrix_sync": want, "forward": want}


def store_both(a, b, c, kind: str, variant: str = "fitted", mapping=None):
    """Run :func:`forward_store` on NumPy inputs: ``{"store_matrix_sync", "forward"}`` (CuPy)."""
    ref, fwd = forward_store(kind, *(launch.to_device(x) for x in (a, b, c)), variant=variant,
                             mapping=mapping)
    return {"store_matrix_sync": ref, "forward": fwd}


def runnable(kind: str, variant: str = "fitted") -> tuple[bool, str]:
    """Can this GPU run the case: the kind is supported and, for the fitted formula, this GPU's
    arch has a recorded layout to fit (``forward_store``'s default mapping)?"""
    ok, why = fragments.supported(kind)
    if ok and variant == "fitted":
        try:
            recording.layout(kind)
        except recording.RecordingMissing as e:
            return False, f"{e} (or pass mapping=fit(fraglab.tracer.layout(kind)))"
    return ok, why


def _case(kind: str, variant: str = "fitted", tiles=(3, 2), edge: bool = False, suffix=""):
    k = fragments.get_kind(kind)
    return Case(kind + ("-eq12" if variant == "eq12" else "") + suffix, edge=edge, kind=kind,
                variant=variant, row_tiles=tiles[0], col_tiles=tiles[1], dtype=k.dtype)


FORWARD_STORE = Problem(
    "02_forward_mapping/forward_store",
    "A @ B + C per tile with WMMA, stored with store_matrix_sync and with the layout formula",
    inputs=inputs, reference=reference, run=store_both,
    cases=(*(_case(k.name) for k in fragments.kinds("accumulator")),
           *(_case(name, "eq12", (2, 3)) for name in EQ12_KINDS),
           _case("acc_16x16x16_f32", tiles=(1, 1), edge=True, suffix="-one-tile")),
    tol=TOL,
    requires=lambda case: runnable(case.params["kind"], case.params["variant"]))

PROBLEMS = {"forward_store": FORWARD_STORE}
