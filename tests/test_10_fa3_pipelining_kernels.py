"""Topic 10_fa3_pipelining, kernels run: every Problem (building blocks and the four attention
main loops) against float64 with poisoned outputs. The small cases run on the PTX interpreter
(once it runs sm_90a: ``fraglab.ptx.SUPPORTS_SM90A``) and on a Hopper GPU; the large ones
(ragged N = 300, d 128, causal, bf16, N up to 1000, peaky) on a Hopper GPU only."""
import pytest

from fraglab import device
from fraglab.fa3_pipelining import problems

SMALL = [(n, c) for n, p in problems.PROBLEMS.items() for c in p.interpreter_cases]
LARGE = [(n, c) for n, p in problems.PROBLEMS.items() for c in p.cases if c.slow]


def _ids(pairs):
    return [f"{n}-{c.name}" for n, c in pairs]


@pytest.mark.parametrize("name, case", SMALL, ids=_ids(SMALL))
def test_small_cases(name, case, rng):
    ok, why = problems.interpreter_ready()
    if not ok:
        pytest.skip(why)
    problems.PROBLEMS[name].check(case, rng)


@pytest.mark.gpu
@pytest.mark.parametrize("name, case", LARGE, ids=_ids(LARGE))
def test_large_cases_on_hopper(name, case, rng):
    if device.gpu_available() and tuple(device.target_cc()) != (9, 0):
        pytest.skip("needs a Hopper GPU (compute capability 9.0, sm_90a)")
    problems.PROBLEMS[name].check(case, rng)
