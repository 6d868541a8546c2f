"""The chapter-08 kernels as :class:`fraglab.problem.Problem` s, one per variant, against the
float64 attention of chapter 05 (:func:`fraglab.flash_attention.attention_reference`).

Cases: every head dimension (64, 128, 256), f16 and bf16, causal or not, on N = 200 (a ragged
last key tile) and edge sizes (N = 1, rows past N, a peaky softmax) on the GPU; on the PTX
interpreter (the CPU tier) one head of N <= 80 per head dimension, causal and ragged. Inputs and
tolerances are chapter 05's (:data:`fraglab.flash_attention.problems.TOL`): the variants change
where Q's fragments come from, never the arithmetic.
"""
from __future__ import annotations

from .. import device, launch
from ..flash_attention.kernels import as_float, random_qkv
from ..flash_attention.problems import LABELS, TOL
from ..flash_attention.reference import attention_reference
from ..problem import Case, Problem
from .kernels import HEAD_DIMS, VARIANTS, attention


def inputs(rng, shape, dtype="f16", q_scale=1.0, causal=False, scale=None, **knobs) -> dict:
    (q, k, v), _ = random_qkv(rng, shape, dtype, q_scale=q_scale)
    return dict(q=q, k=k, v=v, dtype=dtype, causal=causal, scale=scale, **knobs)


def reference(q, k, v, dtype, causal, scale, **_):
    exact = (as_float(a, dtype) for a in (q, k, v))
    return attention_reference(*exact, causal=causal, scale=scale)


def runner(variant: str):
    """``run(**inputs)`` of one variant: the kernel's output as float64."""
    def run(q, k, v, dtype, causal, scale, **knobs):
        out = attention(*map(launch.to_device, (q, k, v)), causal=causal, variant=variant,
                        scale=scale, **knobs)
        return as_float(out, dtype)
    return run


def requires(case: Case) -> tuple[bool, str]:
    cc = device.target_cc()
    if cc < (8, 0):
        return False, f"the FA-2 kernels need compute capability 8.0 or newer; this GPU is {cc[0]}.{cc[1]}"
    return device.supports(case.params.get("dtype", "f16"), cc)


def _name(t, d, causal, n=None):
    return f"{t} d{d} {'causal' if causal else 'full'}" + (f" N={n}" if n else "")


def cases() -> tuple:
    """GPU cases (``slow``) over d x dtype x causal and the edges; interpreter cases (N <= 80,
    one head): d = 64 and 256 causal on N = 72, d = 128 full on N = 80 bf16."""
    grid = [Case(_name(t, d, c), shape=(2, 3, 200, d), dtype=t, causal=c, slow=True)
            for t in ("f16", "bf16") for d in HEAD_DIMS for c in (False, True)]
    edges = [Case(f"N={n}{' causal' if c else ''}{' peaky' if qs > 1 else ''} d{d}", edge=True,
                  slow=True, shape=(1, 2, n, d), dtype="f16", causal=c, q_scale=qs)
             for n, c, qs, d in ((1, False, 1.0, 64), (1, True, 1.0, 256), (17, True, 1.0, 128),
                                 (1000, True, 1.0, 256), (513, False, 12.0, 256),
                                 (300, True, 12.0, 64))]
    small = [Case("small " + _name(t, d, c, n), shape=(1, 1, n, d), dtype=t, causal=c,
                  q_scale=qs, edge=qs > 1)
             for t, d, c, n, qs in (("f16", 64, True, 72, 1.0), ("bf16", 128, False, 80, 1.0),
                                    ("f16", 256, True, 72, 8.0))]
    return (*grid, *edges, *small)


PROBLEMS = {v: Problem(f"08_register_liveness/{v}",
                       f"softmax(Q K^T * scale) V, FA-2 with the {v} variant (f16/bf16, d 64/128/256)",
                       inputs=inputs, reference=reference, run=runner(v), cases=cases(), tol=TOL,
                       requires=requires, labels=LABELS)
            for v in VARIANTS}
