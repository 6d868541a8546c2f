"""One :class:`fraglab.problem.Problem` per variant (rung) of the ladder
(:func:`fraglab.attention.attention_problem`: every attention chapter's inputs, float64
reference, tolerances and FA-2 requirements).

Inputs are NumPy (float16, or uint16 bf16 bits) drawn fresh for every check; outputs start
poisoned, so an unwritten element fails. The interpreter (CPU tier) runs the cases not marked
``slow``: one head, N <= 80, plus one N = 144 head at d = 64 so that the unchecked copies of
``pointer_loads`` and later (tiles whose successor is whole) run there too.
"""
from __future__ import annotations

from ..attention import attention_problem
from ..problem import Case
from .kernels import VARIANTS, attention_launcher


def _kernel(variant: str):
    """The variant's O for device arrays (``source``: the lab's kernel, with the variant's tiles)."""
    def kernel(q, k, v, *, causal, scale, source=None):
        run, out = attention_launcher(q, k, v, causal=causal, variant=variant, scale=scale,
                                      source=source)
        run()
        return out
    return kernel


def _cases() -> tuple:
    gpu = [Case(f"{t} d{d} {'causal' if c else 'full'} N={n}", shape=(2, 3, n, d), dtype=t,
                causal=c, slow=True)
           for t in ("f16", "bf16") for d in (64, 128) for c in (False, True) for n in (200, 1024)]
    gpu += [Case("N=1", shape=(1, 2, 1, 128), dtype="f16", edge=True, slow=True),
            Case("N=1 causal", shape=(1, 2, 1, 64), dtype="f16", causal=True, edge=True, slow=True),
            Case("N=1000 causal peaky", shape=(1, 2, 1000, 128), dtype="f16", causal=True, q_scale=12.0,
                 edge=True, slow=True),
            Case("N=513 peaky bf16", shape=(1, 2, 513, 64), dtype="bf16", q_scale=12.0,
                 edge=True, slow=True),
            Case("scale 0.5", shape=(1, 2, 90, 128), dtype="f16", scale=0.5, slow=True)]
    small = [Case("small f16 d128 N=72", shape=(1, 1, 72, 128), dtype="f16"),
             Case("small bf16 d64 causal N=80 peaky", shape=(1, 1, 80, 64), dtype="bf16",
                  causal=True, q_scale=8.0, edge=True),
             Case("small f16 d128 causal N=33", shape=(1, 1, 33, 128), dtype="f16", causal=True, edge=True),
             Case("small f16 d64 N=144", shape=(1, 1, 144, 64), dtype="f16", edge=True)]
    return (*gpu, *small)


CASES = _cases()

#: ``PROBLEMS[variant]``: the variant's kernel with its reference, tolerance and cases.
PROBLEMS = {variant: attention_problem(
    f"09_instruction_diet/{variant}",
    f"softmax(Q K^T * scale) V by variant {variant} of the instruction diet (f16/bf16, causal or not, "
    "any N)", _kernel(variant), CASES) for variant in VARIANTS}
