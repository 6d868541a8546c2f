"""Topic 00_hello_warp: the kernels against NumPy (GPU), their SASS (anywhere), wrapper checks."""
import numpy as np
import pytest

from fraglab import ARCHES, hello_warp, toolchain
from fraglab.device import GPUUnavailable, gpu_available


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
def test_without_gpu_wrappers_say_so():
    with pytest.raises(GPUUnavailable, match="needs a CUDA GPU"):
        hello_warp.hello_warp()


def test_numpy_input_is_rejected_before_any_launch():
    with pytest.raises(TypeError, match="cupy.asarray"):
        hello_warp.warp_sum(np.zeros((4, 32), np.float32))


@pytest.mark.gpu
def test_hello_warp_writes_the_register_table():
    lanes, regs = hello_warp.hello_warp()
    np.testing.assert_array_equal(lanes, np.arange(32))
    np.testing.assert_array_equal(regs, 100.0 * np.arange(32)[:, None] + np.arange(8))


@pytest.mark.gpu
@pytest.mark.parametrize("strided", [False, True], ids=["block_per_row", "strided"])
@pytest.mark.parametrize("rows", [1, 7, 1000, 65537])
def test_warp_sum_matches_numpy(rows, strided, rng):
    import cupy as cp
    x = rng.standard_normal((rows, 32)).astype(np.float32)
    got = hello_warp.warp_sum(cp.asarray(x), strided=strided, warps_per_block=3).get()
    ref = x.astype(np.float64).sum(axis=1)
    assert not np.isnan(got).any(), "some rows were not written"
    err = np.abs(got - ref) / np.abs(x).sum(axis=1)
    assert err.max() < 1e-6


@pytest.mark.gpu
def test_warp_sum_propagates_inf_and_nan(rng):
    import cupy as cp
    x = rng.standard_normal((3, 32)).astype(np.float32)
    x[0, 5] = np.inf
    x[1, 9] = np.nan
    x[2, 0], x[2, 1] = np.inf, -np.inf
    got = hello_warp.warp_sum(cp.asarray(x)).get()
    assert got[0] == np.inf and np.isnan(got[1]) and np.isnan(got[2])


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
