"""The chapter-08 kernels as :class:`fraglab.problem.Problem` s, one per variant
(:func:`fraglab.attention.attention_problem`: every attention chapter's inputs, float64
reference and tolerances, :data:`fraglab.attention.TOL`; the variants change where Q's fragments
come from, never the arithmetic).

Cases: every head dimension (64, 128, 256), f16 and bf16, causal or not, on N = 200 (a ragged
last key tile) and edge sizes (N = 1, rows past N, a peaky softmax) on the GPU; on the PTX
interpreter (the CPU tier) one head of N <= 80 per head dimension, causal and ragged. A case's
other parameters (``bn``, ``maxrregcount``, ``minb``, a lab's ``source``) go to the kernel.
"""
from __future__ import annotations

from ..attention import attention_problem
from ..problem import Case
from .kernels import HEAD_DIMS, VARIANTS, attention


def _kernel(variant: str):
    def kernel(q, k, v, *, causal, scale, **knobs):
        return attention(q, k, v, causal=causal, variant=variant, scale=scale, **knobs)
    return kernel


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


PROBLEMS = {v: attention_problem(
    f"08_register_liveness/{v}",
    f"softmax(Q K^T * scale) V, FA-2 with the {v} variant (f16/bf16, d 64/128/256)",
    _kernel(v), cases()) for v in VARIANTS}
