"""Values never written: registers read poison (``fraglab/ptx/poison.py``), shared and local
memory never written raise ``UninitializedRead``. A WMMA or mma.sync accumulator the kernel never
filled gives NaN on the interpreter (on a GPU: whatever the registers held), never the right
answer; an address computed from a register never written is reported as out of bounds.

The GPU tier (``-m gpu``) runs the same kernels on the hardware: it only checks that they run
(the garbage a GPU's registers hold is unpredictable, and may even be zero), and that with the
accumulator filled both agree."""
from __future__ import annotations

import numpy as np
import pytest

from fraglab import device, launch, ptx
from fraglab.dtypes import from_bf16
from fraglab.ptx.poison import PATTERN, fresh_registers, poison_value

SRC = r'''
#include <mma.h>
#include <cuda_fp16.h>
using namespace nvcuda;
// C = A B (16 x 16 x 16) with WMMA; without FILL the accumulator is never filled (a bug)
extern "C" __global__ void wmma_acc(const half* a, const half* b, float* c) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
#ifdef FILL
    wmma::fill_fragment(acc, 0.0f);
#endif
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(acc, fa, fb, acc);
    wmma::store_matrix_sync(c, acc, 16, wmma::mem_row_major);
}
// one mma.sync m16n8k16 on fragments given per lane; without FILL d starts unwritten (a bug)
extern "C" __global__ void mma_acc(const unsigned* a, const unsigned* b, float* c) {
    const int lane = threadIdx.x;
    float d[4];
#ifdef FILL
    for (int i = 0; i < 4; ++i) d[i] = 0.f;
#endif
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[4 * lane]), "r"(a[4 * lane + 1]), "r"(a[4 * lane + 2]), "r"(a[4 * lane + 3]),
          "r"(b[2 * lane]), "r"(b[2 * lane + 1]));
    for (int i = 0; i < 4; ++i) c[4 * lane + i] = d[i];
}
'''
G, Q = np.arange(32) // 4, np.arange(32) % 4


def _prog(fill: bool) -> ptx.Program:
    return ptx.load("uninit.cu", "sm_80", source=SRC, defines={"FILL": 1} if fill else None)


def _wmma_inputs(rng):
    a = rng.integers(-4, 5, (16, 16)).astype(np.float16)
    b = rng.integers(-4, 5, (16, 16)).astype(np.float16)
    # col_major B: element (k, n) at n * 16 + k
    return a, b, np.ascontiguousarray(b.T), a.astype(np.float64) @ b.astype(np.float64)


def _mma_inputs(rng):
    """Per-lane fragments of m16n8k16 (PTX ISA figures) and the exact product (16 x 8)."""
    a = rng.integers(-4, 5, (16, 16)).astype(np.float16)
    b = rng.integers(-4, 5, (16, 8)).astype(np.float16)
    au = a.view(np.uint16).astype(np.uint32)
    bu = b.view(np.uint16).astype(np.uint32)
    fa = np.zeros((32, 4), np.uint32)
    for r in range(4):
        row, col = G + 8 * (r % 2), 2 * Q + 8 * (r // 2)
        fa[:, r] = au[row, col] | (au[row, col + 1] << 16)
    fb = np.zeros((32, 2), np.uint32)
    for r in range(2):
        k = 2 * Q + 8 * r
        fb[:, r] = bu[k, G] | (bu[k + 1, G] << 16)
    return fa.ravel(), fb.ravel(), a.astype(np.float64) @ b.astype(np.float64)


def _mma_result(out):
    """(16, 8) from the per-lane C fragments (c0, c1: row g, cols 2q, 2q+1; c2, c3: row g+8)."""
    c = np.full((16, 8), np.nan)
    o = out.reshape(32, 4)
    for i in range(4):
        c[G + 8 * (i // 2), 2 * Q + i % 2] = o[:, i]
    return c


# ---- the poison itself -------------------------------------------------------------------------

def test_poison_patterns_are_nan_in_every_float_reading():
    regs = fresh_registers([np.dtype(t) for t in ("f4", "u4", "f2", "u2", "f8", "u8", "i4", "?")])
    f32, u32, f16, u16, f64, u64, s32, pred = regs
    assert np.isnan(f32).all() and f32.view(np.uint32)[0] == PATTERN[4] == u32[0]
    assert np.isnan(u32.view(np.float32)).all()
    assert np.isnan(u32.view(np.float16)).all()          # both halves of f16x2
    assert (u32.view(np.uint16) == 0x7FF0).all()         # both halves of bf16x2: NaN
    assert np.isnan(f16).all() and (u16 == 0x7FF0).all()
    assert np.isnan(from_bf16(u16)).all()
    assert np.isnan(f64).all() and np.isnan(u64.view(np.float64)).all()
    assert np.isnan(u64.view(np.float32)).all() and s32[0] == 0x7FF07FF0
    assert not pred.any()                                # predicates: False (documented)
    assert poison_value(np.uint8) == 0x70
    # registers of one type share a block, but each is its own row
    f32[0] = 1.0
    assert np.isnan(regs[0][1:]).all()


# ---- accumulators never filled -----------------------------------------------------------------

def test_wmma_accumulator_never_filled_gives_nan(rng):
    a, b, bt, want = _wmma_inputs(rng)
    for fill in (True, False):
        c = np.zeros((16, 16), np.float32)
        ptx.launch(_prog(fill), "wmma_acc", 1, 32, (a.view(np.uint16), bt.view(np.uint16), c))
        if fill:
            np.testing.assert_array_equal(c, want)
        else:
            assert np.isnan(c).all(), "an unfilled accumulator must not give the right answer"


def test_mma_sync_accumulator_never_filled_gives_nan(rng):
    fa, fb, want = _mma_inputs(rng)
    for fill in (True, False):
        out = np.zeros(128, np.float32)
        ptx.launch(_prog(fill), "mma_acc", 1, 32, (fa, fb, out))
        got = _mma_result(out)
        if fill:
            np.testing.assert_array_equal(got, want)
        else:
            assert np.isnan(got).all()


# ---- an address from a register never written ---------------------------------------------------

def _hand(body: str, regs: str) -> ptx.Program:
    return ptx.Program(f"""
.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 k_param_0)
{{
{regs}
{body}
    ret;
}}
""")


@pytest.mark.parametrize("how", ["global", "offset", "generic", "shared"])
def test_an_address_from_a_register_never_written_is_out_of_bounds(how):
    regs = "    .reg .b64 %rd<6>;\n    .reg .b32 %r<4>;\n    .reg .f32 %f<3>;"
    body = {
        # st.global through a pointer register never set
        "global": "    mov.f32 %f1, 0f3F800000;\n    st.global.f32 [%rd2], %f1;",
        # the argument plus an index never set (a 32-bit index widened, as NVRTC does)
        "offset": "    ld.param.u64 %rd1, [k_param_0];\n    cvta.to.global.u64 %rd3, %rd1;\n"
                  "    mul.wide.s32 %rd4, %r1, 4;\n    add.s64 %rd5, %rd3, %rd4;\n"
                  "    ld.global.f32 %f1, [%rd5];\n    st.global.f32 [%rd3], %f1;",
        # a generic load through a pointer never set
        "generic": "    ld.f32 %f1, [%rd2];",
        # a shared offset never set
        "shared": "    ld.shared.f32 %f1, [%r2];",
    }[how]
    prog = _hand(body, regs + "\n    .shared .align 4 .b8 buf[128];")
    with pytest.raises(ptx.MemoryAccessError, match="out-of-bounds") as e:
        ptx.launch(prog, "k", 1, 32, (np.zeros(4, np.float32),))
    if how != "offset":
        assert "never wrote" in str(e.value)


# ---- memory never written ----------------------------------------------------------------------

MEM = r'''
extern "C" __global__ void shared_gap(float* out) {
    __shared__ float s[64];
    if (threadIdx.x != 7) s[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x];          // thread 7 reads a slot nobody wrote
}
extern "C" __global__ void local_gap(const int* idx, int* out, int n) {
    int a[16];
    for (int i = 0; i < n; ++i) a[i] = i + threadIdx.x;
    out[threadIdx.x] = a[idx[threadIdx.x]];     // past n: never written
}
'''


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_shared_and_local_memory_never_written_are_reported(arch):
    prog = ptx.load("uninit_mem.cu", arch, source=MEM)
    with pytest.raises(ptx.UninitializedRead, match="shared memory") as e:
        ptx.launch(prog, "shared_gap", 1, 32, (np.zeros(32, np.float32),))
    assert e.value.lane == 7
    idx = (np.arange(32) % 16).astype(np.int32)
    out = np.zeros(32, np.int32)
    ptx.launch(prog, "local_gap", 1, 32, (idx, out, np.int32(16)))
    assert (out == idx + np.arange(32)).all()
    with pytest.raises(ptx.UninitializedRead, match="local memory"):
        ptx.launch(prog, "local_gap", 1, 32, (idx, out, np.int32(8)))


# ---- the same kernels on a GPU -----------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["wmma_acc", "mma_acc"])
def test_unfilled_accumulators_on_the_gpu(rng, kernel):
    """On the GPU the unfilled kernels run (their result is garbage or, by luck, right: not
    checked), the filled ones give the exact product; the interpreter never gives the right
    answer for the unfilled ones."""
    if not device.gpu_available():
        pytest.skip("needs a CUDA GPU")
    import cupy
    if kernel == "wmma_acc":
        a, b, bt, want = _wmma_inputs(rng)
        args, n_out, shape = (a.view(np.uint16), bt.view(np.uint16)), 256, lambda o: o.reshape(16, 16)
    else:
        fa, fb, want = _mma_inputs(rng)
        args, n_out, shape = (fa, fb), 128, _mma_result
    results = {}
    for fill in (True, False):
        fn = launch.get_kernel("uninit.cu", kernel, source=SRC, defines={"FILL": 1} if fill else None)
        dev = [cupy.asarray(x) for x in args] + [cupy.zeros(n_out, cupy.float32)]
        launch.launch(fn, 1, 32, tuple(dev), sync=True)
        results[fill] = shape(dev[-1].get())
    np.testing.assert_array_equal(results[True], want)
    assert results[False].shape == want.shape           # it ran; the values are the GPU's garbage
    with device.forced_mode("cpu"):
        interp = np.zeros(n_out, np.float32)
        ptx.launch(_prog(False), kernel, 1, 32, (*args, interp))
    assert not np.array_equal(shape(interp), want)
