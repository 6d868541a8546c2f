"""Attention kernels as :class:`fraglab.problem.Problem` s, written once for chapters 05, 08, 09
and 10: a topic gives its kernel, its cases and what the kernel requires (:func:`attention_problem`);
the inputs, the float64 reference, the tolerance and the run plumbing are these.

The inputs are NumPy: ``q``, ``k``, ``v`` of the kernel's element type (float16, or uint16 bf16
bits; random, or a peaky softmax with ``q_scale`` > 1; any N, ragged ones included), the options
``dtype``, ``causal``, ``scale``, and whatever else a case names (a topic's knobs, passed to its
kernel). The reference is float64 attention on the inputs' exact values; ``run`` returns the
kernel's output as float64. Outputs start poisoned (NaN), so an unwritten element (or a NaN from
a masked row) fails as an infinite error. :func:`check_all` runs problems over their cases and
records each result, never stopping at a failure (the benchmarks' check section); it lives in
:mod:`fraglab.problem`, for every topic.
"""
from __future__ import annotations

from typing import Callable

from .. import device, launch
from ..problem import Case, Problem, check_all  # noqa: F401  (check_all: the benchmarks' loop)
from .inputs import as_float, random_qkv
from .reference import attention_reference

#: ||out - ref|| / ||ref|| allowed for f16 and bf16 inputs and outputs (every attention kernel of
#: the course: they differ in where data lives and when, never in the arithmetic's precision).
TOL = {"f16": 2e-3, "bf16": 1.5e-2}

LABELS = ("batch", "head", "row", "col")


def inputs(rng, shape, dtype="f16", q_scale=1.0, causal=False, scale=None, **knobs) -> dict:
    """q, k, v of ``shape`` (B, H, N, d) drawn from ``rng``, the options, and the case's knobs."""
    (q, k, v), _ = random_qkv(rng, shape, dtype, q_scale=q_scale)
    return dict(q=q, k=k, v=v, dtype=dtype, causal=causal, scale=scale, **knobs)


def reference(q, k, v, dtype, causal, scale, **_):
    """float64 attention on the exact values of the inputs (knobs play no part)."""
    exact = (as_float(a, dtype) for a in (q, k, v))
    return attention_reference(*exact, causal=causal, scale=scale)


def requires_fa2(case: Case) -> tuple[bool, str]:
    """What a GPU needs to run an FA-2 style kernel (chapters 05, 08, 09): compute capability 8.0
    or newer, and bf16 support for a bf16 case."""
    cc = device.target_cc()
    if cc < (8, 0):
        return False, f"the FA-2 kernel needs compute capability 8.0 or newer; this GPU is {cc[0]}.{cc[1]}"
    return device.supports(case.params.get("dtype", "f16"), cc)


def attention_problem(name: str, spec: str, kernel: Callable, cases, *,
                      requires: Callable[[Case], tuple[bool, str]] | None = requires_fa2,
                      rows: Callable[..., slice | None] | None = None, tol=None) -> Problem:
    """The :class:`~fraglab.problem.Problem` of one attention kernel.

    ``kernel(q, k, v, *, causal, scale, **knobs)`` takes device arrays (:func:`fraglab.launch.
    to_device`) and returns O in the kernel's dtype; ``knobs`` are the case parameters beyond
    :func:`inputs`' own (``warps``, ``first_cta``, a lab's ``source``...). ``rows(**inputs)``, where
    given, picks the query rows that are compared (a slice, or None for all): of the output and
    of the reference alike. ``tol`` defaults to :data:`TOL`.
    """
    def pick(o, inp):
        sel = rows(**inp) if rows is not None else None
        return o if sel is None else o[..., sel, :]

    def run(q, k, v, dtype, causal, scale, **knobs):
        out = kernel(*map(launch.to_device, (q, k, v)), causal=causal, scale=scale, **knobs)
        return pick(as_float(out, dtype), dict(q=q, causal=causal, **knobs))

    def ref(q, k, v, dtype, causal, scale, **knobs):
        return pick(reference(q, k, v, dtype, causal, scale), dict(q=q, causal=causal, **knobs))

    return Problem(name, spec, inputs=inputs, reference=ref, run=run, cases=cases,
                   tol=TOL if tol is None else tol, requires=requires, labels=LABELS)
