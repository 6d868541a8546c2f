"""The topic's kernels as :class:`fraglab.problem.Problem` s: one per FA-1 softmax path and one for
the FA-2 kernel, each with every case the tests run (ragged N, N = 1, causal, bf16, peaky
softmax, rows masked past N, d 64/128/512, 4 or 8 warps, an explicit scale).

Inputs, the float64 reference, the tolerances (:data:`TOL`) and the run plumbing are every
attention chapter's (:func:`fraglab.attention.attention_problem`): NumPy inputs of the kernel's
element type, float64 attention on their exact values, outputs poisoned (NaN) so that an
unwritten element fails as an infinite error.
"""
from __future__ import annotations

from ..attention import TOL, attention_problem  # noqa: F401  (TOL: tests)
from ..problem import Case
from .constants import DTYPES, FA2_HEAD_DIMS, FA2_WARPS, VARIANTS
from .kernels import fa1, fa2


def _fa1(variant: str):
    def kernel(q, k, v, *, causal, scale):
        return fa1(q, k, v, variant, scale=scale)        # non-causal: no case sets causal
    return kernel


#: FA-1 (f16, non-causal, N a multiple of 16): a few heads of each head dimension.
FA1_CASES = (
    Case("d64", shape=(2, 2, 96, 64), dtype="f16", slow=True),
    Case("d128 peaky", shape=(1, 3, 64, 128), dtype="f16", q_scale=6.0, edge=True, slow=True),
    Case("d512", shape=(1, 1, 128, 512), dtype="f16", slow=True),
    Case("d512 N=48 peaky", shape=(1, 2, 48, 512), dtype="f16", q_scale=4.0, edge=True, slow=True),
    # small enough for the PTX interpreter: each head dimension once
    Case("small d64", shape=(1, 1, 32, 64), dtype="f16"),
    Case("small d128 peaky", shape=(1, 1, 16, 128), dtype="f16", q_scale=6.0, edge=True),
    Case("small d512", shape=(1, 1, 16, 512), dtype="f16"),
)


def _fa2_cases() -> tuple:
    # every compiled kernel (dtype x d x warps), full and causal, on N = 200: a ragged last tile
    grid = [Case(f"{t} d{d} {'causal' if c else 'full'} w{w}", shape=(2, 3, 200, d), dtype=t,
                 causal=c, warps=w, slow=True)
            for t in DTYPES for d in FA2_HEAD_DIMS for c in (False, True) for w in FA2_WARPS]
    # the same kernels on one head of N = 72 (a ragged second tile): small enough for the
    # PTX interpreter, which runs these in the CPU tier
    small = [Case(f"small {t} d{d} {'causal' if c else 'full'} w{w}", shape=(1, 1, 72, d),
                  dtype=t, causal=c, warps=w)
             for t in DTYPES for d in FA2_HEAD_DIMS for c, w in ((False, 4), (True, 8))]
    # edge sizes (rows past N are masked and must give 0, not NaN) and peaky softmax, d = 64
    edges = [Case(f"N={n}{' causal' if c else ''}{' peaky' if qs > 1 else ''} w{w}", edge=True,
                  shape=(1, 2, n, 64), dtype="f16", causal=c, q_scale=qs, warps=w)
             for n, c, qs, w in ((1, False, 1.0, 4), (1, True, 1.0, 8), (17, True, 1.0, 4),
                                 (64, False, 1.0, 4), (128, True, 1.0, 8), (1000, True, 1.0, 4),
                                 (513, False, 12.0, 4), (300, True, 12.0, 8))]
    edges = [Case(c.name, edge=True, slow=c.params["shape"][2] > 128, **c.params) for c in edges]
    return (*grid, *small, *edges,
            Case("scale 0.5", shape=(1, 2, 90, 64), dtype="f16", scale=0.5, slow=True))


PROBLEMS = {
    **{f"fa1_{v}": attention_problem(
        f"05_flash_attention/fa1_{v}",
        f"softmax(Q K^T * scale) V with the FA-1 kernel's {v} softmax path (f16, N % 16 == 0)",
        _fa1(v), FA1_CASES, requires=None) for v in VARIANTS},
    "fa2": attention_problem(
        "05_flash_attention/fa2",
        "softmax(Q K^T * scale) V with the FA-2 kernel (f16/bf16, causal or not, any N)",
        fa2, _fa2_cases()),
}
