"""The kernels of ``kernels/06_layout_codegen.cu`` as :class:`fraglab.problem.Problem`\\ s: every
accumulator kind x operator, with the code of the committed header and with code generated at run
time for the recorded layout of this GPU's arch, passed as a user table."""
from __future__ import annotations

import numpy as np

from .. import fragments, launch
from ..fragments import recording
from ..problem import Case, Problem
from .emulate import reference
from .kernels import broadcast_rows, reduce
from .plan import KINDS, NP_TYPES, OPS

#: Tolerance of a float sum: |got - ref| <= RTOL * (the sum of the magnitudes of the line).
SUM_RTOL = {"f16": 1e-2, "f32": 1e-5, "f64": 1e-12}


def _inputs(rng, kind: str, op: str, n: int = 37, user_layout: bool = False) -> dict:
    """``n`` random tiles of ``kind`` (37: the last block of 4 warps is partly empty); integers
    in [-1000, 1000] for s32, so that sums are exact. ``user_layout``: the recorded layout table of
    this GPU's arch, for which the wrappers generate and compile code at run time."""
    kd = fragments.get_kind(kind)
    shape = (n,) + kd.shape
    if kd.dtype == "s32":
        acc = rng.integers(-1000, 1001, shape).astype(np.int32)
    else:
        acc = rng.standard_normal(shape).astype(NP_TYPES[kd.dtype])
    return {"kind": kind, "acc": acc, "op": op,
            "layout": recording.layout(kind) if user_layout else None}


def _tolerance(case: Case) -> float:
    """Exact for max, min and integer sums; float sums within SUM_RTOL of the line's magnitude."""
    dtype = fragments.get_kind(case.params["kind"]).dtype
    return SUM_RTOL[dtype] if case.params["op"] == "sum" and dtype != "s32" else 0.0


def _line_error(scale):
    """The error of a reduction: max |got - ref| / (sum of |x| over the reduced line), where
    ``scale(|acc|)`` gives that sum in the output's shape; inf where an output is not finite."""
    def error(got, ref, inputs):
        if not np.isfinite(got).all():
            return float("inf")
        s = scale(np.abs(inputs["acc"].astype(np.float64)))
        return float((np.abs(got - ref) / s).max())
    return error


def _requires(case: Case) -> tuple[bool, str]:
    """The GPU has the kind's WMMA type; for a user-layout case, its arch has a recording."""
    ok, why = fragments.supported(case.params["kind"])
    if ok and case.params["user_layout"]:
        try:
            recording.layout(case.params["kind"])
        except recording.RecordingMissing as e:
            return False, str(e)
    return ok, why


_CASES = tuple(Case(f"{kind}-{op}" + ("-user_layout" if user else ""), kind=kind, op=op,
                    user_layout=user, **({"n": 9} if user else {}))
               for user in (False, True) for kind in KINDS for op in OPS)


def _run(wrapper, output: int):
    """A Problem's run: ``wrapper`` on the inputs moved to the GPU; output ``output`` of two."""
    return lambda kind, acc, op, layout: \
        wrapper(kind, launch.to_device(acc), op, layout=layout)[output]


def _problem(name: str, spec: str, run, reference_fn, scale, labels) -> Problem:
    return Problem(f"06_layout_codegen/{name}", spec, inputs=_inputs, reference=reference_fn,
                   run=run, cases=_CASES, tol=_tolerance if scale else 0.0, requires=_requires,
                   labels=labels, error=_line_error(scale) if scale else None)


PROBLEMS = {
    "reduce_rows": _problem(
        "reduce_rows", "store_rows: the reduction of every row of each tile, one lane per row "
                       "writing it",
        _run(reduce, 0),
        lambda acc, op, **_: reference(acc, op)[0],
        lambda a: a.sum(axis=2), ("tile", "row")),
    "reduce_cols": _problem(
        "reduce_cols", "store_cols: the reduction of every column of each tile",
        _run(reduce, 1),
        lambda acc, op, **_: reference(acc, op)[1],
        lambda a: a.sum(axis=1), ("tile", "col")),
    "broadcast_rows": _problem(
        "broadcast_rows", "reduce_rows + expand_rows + store: every element replaced by the "
                          "reduction of its row",
        _run(broadcast_rows, 1),
        lambda acc, op, **_: np.broadcast_to(reference(acc, op)[0][:, :, None], acc.shape),
        lambda a: a.sum(axis=2, keepdims=True), ("tile", "row", "col")),
    "store": _problem(
        "store", "the forward-mapped store: each tile written back unchanged",
        _run(broadcast_rows, 0),
        lambda acc, **_: acc, None, ("tile", "row", "col")),
}
