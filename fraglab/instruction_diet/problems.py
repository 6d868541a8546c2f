"""One :class:`fraglab.problem.Problem` per step of the ladder, all against chapter 05's float64
attention reference (:func:`fraglab.flash_attention.attention_reference`).

Inputs are NumPy (float16, or uint16 bf16 bits) drawn fresh for every check; outputs start
poisoned, so an unwritten element fails. The interpreter (CPU tier) runs the cases not marked
``slow``: one head, N <= 80, plus one N = 144 head at d = 64 so that the unchecked copies of
``pointer_loads`` and later (tiles whose successor is whole) run there too.
"""
from __future__ import annotations

from .. import launch
from ..flash_attention.kernels import as_float, random_qkv
from ..flash_attention.problems import TOL, requires_fa2
from ..flash_attention.reference import attention_reference
from ..problem import Case, Problem
from .kernels import STEPS, attention

LABELS = ("batch", "head", "row", "col")


def inputs(rng, shape, dtype="f16", causal=False, q_scale=1.0, scale=None) -> dict:
    """q, k, v of ``shape`` (B, H, N, d); ``q_scale`` > 1 makes the softmax peaky."""
    (q, k, v), _ = random_qkv(rng, shape, dtype, q_scale=q_scale)
    return {"q": q, "k": k, "v": v, "dtype": dtype, "causal": causal, "scale": scale}


def reference(q, k, v, dtype, causal, scale) -> object:
    return attention_reference(*(as_float(a, dtype) for a in (q, k, v)), causal=causal, scale=scale)


def _run(step: str):
    def run(q, k, v, dtype, causal, scale):
        out = attention(*map(launch.to_device, (q, k, v)), causal=causal, step=step, scale=scale)
        return as_float(out, dtype)
    return run


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

#: ``PROBLEMS[step]``: the step's kernel with its reference, tolerance and cases.
PROBLEMS = {step: Problem(
    f"09_instruction_diet/{step}",
    f"softmax(Q K^T * scale) V by step {step} of the instruction diet (f16/bf16, causal or not, "
    "any N)",
    inputs=inputs, reference=reference, run=_run(step), cases=CASES, tol=TOL,
    requires=requires_fa2, labels=LABELS) for step in STEPS}
