"""Topic 00_hello_warp: the kernels against NumPy (GPU), their SASS (anywhere), wrapper checks."""
import numpy as np
import pytest

from fraglab import ARCHES, hello_warp, toolchain
import fraglab
from fraglab.device import gpu_available


@pytest.mark.parametrize("arch", ARCHES)
def test_warp_sum_sass_is_five_shuffles_and_no_shared_memory(arch):
    b = toolchain.compile("00_hello_warp", arch)
    assert b.opcodes("warp_sum")["SHFL"] == 5
    cls = b.classes("warp_sum")
    assert cls["shared"] == cls["barrier"] == cls["local"] == 0
    assert b.resources["warp_sum"]["smem"] == 0 and b.resources["warp_sum"]["stack_frame"] == 0


@pytest.mark.parametrize("arch", ARCHES)
def test_hello_warp_keeps_its_registers_in_registers(arch):
    b = toolchain.compile("00_hello_warp", arch)
    assert b.classes("hello_warp")["local"] == 0 and b.opcodes("hello_warp")["STG"] == 9


@pytest.mark.skipif(gpu_available(), reason="checks the GPU-less behaviour")
def test_without_gpu_the_kernels_run_on_the_interpreter():
    lanes, regs = hello_warp.hello_warp()
    assert (lanes == np.arange(32)).all() and regs[3, 5] == 305.0
    assert "PTX interpreter" in fraglab.status_line()


def test_the_wrong_kind_of_array_is_rejected_before_any_launch(foreign):
    make, words = foreign
    with pytest.raises(TypeError, match=words):
        hello_warp.warp_sum(make(np.zeros((4, 32), np.float32)))


_CASES = [(name, case) for name, p in hello_warp.PROBLEMS.items() for case in p.cases]


@pytest.mark.gpu
@pytest.mark.parametrize("name, case", _CASES, ids=[f"{n}-{c}" for n, c in _CASES])
def test_kernels_match_numpy(name, case, rng):
    """hello_warp's register table; warp_sum (both launch shapes) against float64 on 1, 7, 1000
    and 65537 rows, and inf/NaN propagation, with every output poisoned first."""
    hello_warp.PROBLEMS[name].check(case, rng)


def test_a_wrong_sum_fails_its_problem(rng):
    """The check can fail: a sum that drops a lane, and one that leaves a row unwritten."""
    p = hello_warp.PROBLEMS["warp_sum"]
    with pytest.raises(AssertionError, match="WRONG"):
        p.check("rows7", rng, run=lambda x, **_: x[:, 1:].sum(axis=1))
    def unwritten(x, **_):
        out = x.sum(axis=1)
        out[3] = np.nan
        return out
    with pytest.raises(AssertionError, match="row 3"):
        p.check("rows7", rng, run=unwritten)


@pytest.mark.gpu
@pytest.mark.parametrize("bad, exc, msg", [
    (lambda cp: cp.zeros((4, 32), cp.float64), TypeError, "float32"),
    (lambda cp: cp.zeros((4, 31), cp.float32), ValueError, "shape"),
    (lambda cp: cp.zeros((4, 32, 1), cp.float32), ValueError, "shape"),
    (lambda cp: cp.zeros((0, 32), cp.float32), ValueError, "rows"),
    (lambda cp: cp.zeros((32, 8), cp.float32).T, ValueError, "contiguous"),
    (lambda cp: cp.zeros((4, 64), cp.float32)[:, ::2], ValueError, "contiguous"),
    (lambda cp: cp.zeros((2**26, 32), cp.float32), ValueError, "rows"),
])
def test_warp_sum_rejects_bad_arguments(bad, exc, msg):
    import cupy as cp
    with pytest.raises(exc, match=msg):
        hello_warp.warp_sum(bad(cp))


@pytest.mark.gpu
@pytest.mark.parametrize("wpb, exc", [(0, ValueError), (33, ValueError), (2.0, TypeError)])
def test_warp_sum_rejects_bad_block_shapes(wpb, exc):
    import cupy as cp
    with pytest.raises(exc, match="warps_per_block"):
        hello_warp.warp_sum(cp.zeros((4, 32), cp.float32), strided=True, warps_per_block=wpb)
