"""Diagnostics of the PTX interpreter in the learner's terms (bounds, alignment, uninitialised
reads, shared-memory races, barriers, budget, unsupported PTX) and inspection. CPU only."""
from __future__ import annotations

import numpy as np
import pytest

from fraglab import ptx, toolchain

from test_ptx_semantics import HEADER, build, exchange_through_shared, line_of


def test_out_of_bounds_names_block_warp_lane_instruction_and_line():
    src = r'''
extern "C" __global__ void k(float* out)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = 1.0f;                          // OOB
}'''
    with pytest.raises(ptx.MemoryAccessError) as e:
        ptx.launch(build(src), "k", 2, 64, (np.zeros(100, np.float32),))
    msg = str(e.value)
    assert "out-of-bounds global store" in msg
    assert "block (1, 0, 0)" in msg and "warp 1" in msg and "lane 4" in msg
    assert "PTX: st.global" in msg
    assert f"sem.cu:{line_of(src, 'OOB')}" in msg
    assert "400 bytes from the start of `argument 0" in msg
    assert e.value.lane == 4 and e.value.warp == 1 and e.value.block == (1, 0, 0)


def test_misaligned_vector_access():
    prog = build(r'''
extern "C" __global__ void k(const float* in, float* out)
{
    float2 v = *reinterpret_cast<const float2*>(in + 1 + 2 * threadIdx.x);
    out[threadIdx.x] = v.x + v.y;
}''')
    with pytest.raises(ptx.MemoryAccessError, match="misaligned"):
        ptx.launch(prog, "k", 1, 32, (np.zeros(80, np.float32), np.zeros(32, np.float32)))


def test_uninitialised_shared_read():
    src = r'''
extern "C" __global__ void k(float* out)
{
    __shared__ float s[64];
    if (threadIdx.x < 31) s[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x];      // UNINIT
}'''
    with pytest.raises(ptx.UninitializedRead) as e:
        ptx.launch(build(src), "k", 1, 32, (np.zeros(32, np.float32),))
    assert "lane 31" in str(e.value) and f"sem.cu:{line_of(src, 'UNINIT')}" in str(e.value)
    out = np.zeros(32, np.float32)            # the check can be switched off
    ptx.launch(build(src), "k", 1, 32, (out,), check_uninit=False)
    assert (out[:31] == 1).all() and out[31] == 0


def test_shared_write_race_is_reported():
    src = r'''
extern "C" __global__ void k(int* out, int same)
{
    __shared__ int s;
    s = same ? 7 : threadIdx.x;             // RACE
    __syncthreads();
    out[threadIdx.x] = s;
}'''
    prog = build(src)
    with pytest.raises(ptx.SharedRace) as e:
        ptx.launch(prog, "k", 1, 64, (np.zeros(64, np.int32), np.int32(0)))
    assert f"sem.cu:{line_of(src, 'RACE')}" in str(e.value)
    out = np.zeros(64, np.int32)              # the same value from every thread is no race
    ptx.launch(prog, "k", 1, 64, (out, np.int32(1)))
    assert (out == 7).all()


def test_atomics_global_and_shared():
    prog = build(r'''
extern "C" __global__ void k(int* g, int* out)
{
    __shared__ int s;
    if (threadIdx.x == 0) s = 0;
    __syncthreads();
    atomicAdd(&s, (int)threadIdx.x);
    atomicMax(g + 1, (int)threadIdx.x * 3);
    int old = atomicAdd(g, 1);
    __syncthreads();
    if (threadIdx.x == 0) out[0] = s;
    out[1 + threadIdx.x] = old;
}''')
    g = np.zeros(2, np.int32)
    out = np.zeros(129, np.int32)
    ptx.launch(prog, "k", 1, 128, (g, out))
    assert out[0] == sum(range(128)) and g[0] == 128 and g[1] == 381
    assert sorted(out[1:]) == list(range(128))



def test_instruction_budget():
    src = r'''
extern "C" __global__ void k(volatile int* flag)
{
    unsigned i = 1;
    while (i != 0) { i *= 3; flag[1] = i; }   // endless, and never a spin: i moves every pass
}'''
    with pytest.raises(ptx.StepBudgetExceeded, match="instruction budget of 5000"):
        ptx.launch(build(src), "k", 1, 32, (np.zeros(2, np.int32),), max_steps=5000)


def test_unsupported_instruction_names_opcode_and_line():
    src = r'''
extern "C" __global__ void k(unsigned* out, unsigned a, unsigned b)
{
    unsigned d;
    asm volatile("vabsdiff.u32.u32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0u)); // VID
    out[threadIdx.x] = d;
}'''
    prog = build(src)
    missing = ptx.unsupported_opcodes(toolchain.compile("sem.cu", "sm_80", source=HEADER + src).ptx)
    assert "vabsdiff.u32.u32.u32" in missing
    with pytest.raises(ptx.UnsupportedInstruction) as e:
        ptx.launch(prog, "k", 1, 32, (np.zeros(32, np.uint32), np.uint32(1), np.uint32(2)))
    assert "vabsdiff" in str(e.value) and f"sem.cu:{line_of(src, 'VID')}" in str(e.value)


def test_clock_is_a_deterministic_instruction_counter():
    prog = build(r'''
extern "C" __global__ void k(long long* out, int n)
{
    long long t0 = clock64();
    float x = threadIdx.x;
    for (int i = 0; i < n; ++i) x = x * 0.5f + 1.0f;
    long long t1 = clock64();
    out[threadIdx.x] = t1 - t0 + (x > 1e30f);
}''')
    a, b = np.zeros(32, np.int64), np.zeros(32, np.int64)
    ptx.launch(prog, "k", 1, 32, (a, np.int32(10)))
    ptx.launch(prog, "k", 1, 32, (b, np.int32(20)))
    assert (a == a[0]).all() and (b == b[0]).all() and b[0] > a[0] > 0


def test_registers_at_a_source_line():
    src = r'''
extern "C" __global__ void k(const float* in, float* out)
{
    float v = in[threadIdx.x] * 2.0f;
    v += __shfl_xor_sync(FULL, v, 1);       // LOOK
    out[threadIdx.x] = v;
}'''
    x = np.arange(32, dtype=np.float32)
    snap = ptx.registers_at(build(src), "k", line_of(src, "LOOK"), grid=1, block=32,
                            args=(x, np.zeros(32, np.float32)))
    f_regs = [r for r in snap.line_regs if r.startswith("%f")]
    assert any((snap[r] == 2 * x).all() for r in f_regs)
    table = snap.table()
    assert "lane" in table and len(table.splitlines()) >= 33


def test_local_memory_array_and_uninitialised_local_read():
    src = r'''
extern "C" __global__ void k(const int* idx, int* out, int n)
{
    int a[16];
    for (int i = 0; i < n; ++i) a[i] = i * i + threadIdx.x;
    out[threadIdx.x] = a[idx[threadIdx.x]];        // LOCAL
}'''
    prog = build(src)
    idx = (np.arange(32) % 16).astype(np.int32)
    out = np.zeros(32, np.int32)
    ptx.launch(prog, "k", 1, 32, (idx, out, np.int32(16)))
    assert (out == idx * idx + np.arange(32)).all()
    with pytest.raises(ptx.UninitializedRead, match="local memory"):
        ptx.launch(prog, "k", 1, 32, (idx, out, np.int32(8)))


def test_read_after_write_without_barrier_is_a_race():
    src = r'''
extern "C" __global__ void k(float* out, int mode)
{
    __shared__ float s[64];
    s[threadIdx.x] = threadIdx.x;
    if (mode == 1) __syncthreads();
    float v = s[(threadIdx.x + 1) % 32];        // READ
    if (mode != 0) v += s[63 - threadIdx.x];
    out[threadIdx.x] = v;
}'''
    prog = build(src)
    out = np.zeros(64, np.float32)
    ptx.launch(prog, "k", 1, 64, (out, np.int32(1)))
    assert (out == (np.arange(64) + 1) % 32 + 63 - np.arange(64)).all()
    with pytest.raises(ptx.SharedRace) as e:     # lane 0 reads what lane 1 wrote, no __syncwarp
        ptx.launch(prog, "k", 1, 64, (out, np.int32(0)))
    assert "no barrier in between" in str(e.value)
    assert f"sem.cu:{line_of(src, 'READ')}" in str(e.value)
    with pytest.raises(ptx.UninitializedRead, match="__syncthreads.. is missing"):
        ptx.launch(prog, "k", 1, 64, (out, np.int32(2)), check_race=False)


def test_syncwarp_orders_lanes_of_one_warp():
    out = exchange_through_shared(32, "3.0f", "__syncwarp()", "threadIdx.x ^ 5")
    assert (out == (np.arange(32) ^ 5) * 3).all()


def test_register_plot_and_argument_errors():
    import matplotlib
    matplotlib.use("Agg")
    src = r'''
extern "C" __global__ void k(const float* in, float* out)
{
    float v = in[threadIdx.x] + 1.0f;        // HERE
    out[threadIdx.x] = v;
}'''
    prog = build(src)
    assert prog.kernels == ["k"]
    x = np.arange(32, dtype=np.float32)
    ax = ptx.plot_registers(prog, "k", line_of(src, "HERE"), regs="%f*", grid=1, block=32,
                            args=(x, np.zeros(32, np.float32)))
    assert ax.get_xticklabels()
    with pytest.raises(TypeError, match="takes 2 arguments"):
        ptx.launch(prog, "k", 1, 32, (x,))
    with pytest.raises(KeyError, match="no kernel"):
        ptx.launch(prog, "nope", 1, 32, (x, x))


def test_device_printf(capsys):
    prog = build(r'''
extern "C" __global__ void k(const float* x, int n)
{
    if (threadIdx.x % 16 == 1)
        printf("t%d x=%.3f n=%d %s %lld|%-4x|%c%%\n", threadIdx.x, x[threadIdx.x], n, "ok",
               (long long)n * -3, 255u, 'A' + threadIdx.x / 16);
}''')
    res = ptx.launch(prog, "k", 1, 32, (np.arange(32, dtype=np.float32) / 4, np.int32(7)))
    want = ["t1 x=0.250 n=7 ok -21|ff  |A%\n", "t17 x=4.250 n=7 ok -21|ff  |B%\n"]
    assert res.printf == want
    assert capsys.readouterr().out == "".join(want)


def test_noninlined_device_functions_are_inlined():
    prog = build(r'''
__device__ __noinline__ float times(float v, int k) { float s = 0; for (int i = 0; i < k; ++i) s += v; return s; }
__device__ __noinline__ void bump(int* p) { p[threadIdx.x] += 1; }
__device__ __noinline__ float mix(float v)
{
    if (threadIdx.x & 1) return v;
    return __shfl_xor_sync(0x55555555u, v, 2) + times(v, 2);   // divergent, nested
}
extern "C" __global__ void k(float* out, int* q, int n)
{ out[threadIdx.x] = times(threadIdx.x, n) + mix(threadIdx.x); bump(q); }''')
    out, q = np.zeros(32, np.float32), np.zeros(32, np.int32)
    ptx.launch(prog, "k", 1, 32, (out, q, np.int32(5)))
    t = np.arange(32)
    assert (out == 5 * t + np.where(t & 1, t, (t ^ 2) + 2 * t)).all() and (q == 1).all()


def test_recursion_is_unsupported():
    prog = build(r'''
__device__ int fact(int n) { return n <= 1 ? 1 : n * fact(n - 1); }
extern "C" __global__ void k(int* out) { out[threadIdx.x] = fact(threadIdx.x % 5); }''')
    out = np.zeros(32, np.int32)
    try:
        ptx.launch(prog, "k", 1, 32, (out,))
    except ptx.UnsupportedInstruction as e:
        assert "recursion" in str(e)
    else:                                   # NVRTC turned the recursion into a loop
        assert (out == [1, 1, 2, 6, 24] * 6 + [1, 1]).all()


def test_cupy_style_kernel_function():
    prog = ptx.load("00_hello_warp")
    fn = prog.function("warp_sum", max_steps=100_000)
    x = np.ones((3, 32), np.float32)
    out = np.zeros(3, np.float32)
    fn((3,), (32,), (x, out, np.int32(3)), shared_mem=0)
    assert (out == 32).all() and fn.last.steps > 0


def test_registers_at_the_nth_visit_of_a_loop_line():
    src = r'''
extern "C" __global__ void k(float* out, int n)
{
    float acc = threadIdx.x;
#pragma unroll 1
    for (int i = 0; i < n; ++i) {
        acc = acc * 2.0f + 1.0f;             // BODY
        out[32 * i + threadIdx.x] = acc;
    }
}'''
    prog = build(src)
    line = line_of(src, "BODY")
    for visit in range(3):
        snap = ptx.registers_at(prog, "k", line, occurrence=visit, grid=1, block=32,
                                args=(np.zeros(5 * 32, np.float32), np.int32(5)))
        want = np.arange(32, dtype=np.float64)
        for _ in range(visit):
            want = want * 2 + 1
        assert any(np.array_equal(snap[r].astype(np.float64), want)
                   for r in snap.names if r.startswith("%f")), visit


def test_instruction_counts_by_opcode_and_line():
    prog = ptx.load("00_hello_warp")
    x = np.ones((4, 32), np.float32)
    res = ptx.launch(prog, "warp_sum", 4, 32, (x, np.zeros(4, np.float32), np.int32(4)))
    ops = res.opcode_counts()
    assert ops["shfl"] == 4 * 5 and sum(ops.values()) == res.steps
    lines = res.line_counts()
    assert sum(lines.values()) == res.steps
    assert any(k.startswith("kernels/00_hello_warp.cu:") for k in lines)


def test_device_function_with_local_array_and_shared_variable():
    prog = build(r'''
__device__ __noinline__ int pick(int i, int k)
{
    int a[8];
    for (int j = 0; j < 8; ++j) a[j] = j * k;
    return a[i & 7];
}
__device__ __noinline__ int total(int v)
{
    __shared__ int acc;
    if (threadIdx.x == 0) acc = 0;
    __syncthreads();
    atomicAdd(&acc, v);
    __syncthreads();
    return acc;
}
extern "C" __global__ void k(const int* idx, int* out)
{
    int a = pick(idx[threadIdx.x], 3), b = pick(idx[threadIdx.x] + 1, 5);
    out[threadIdx.x] = a + b + total(1);
}''')
    idx = np.arange(64, dtype=np.int32) * 3
    out = np.zeros(64, np.int32)
    ptx.launch(prog, "k", 1, 64, (idx, out))
    assert (out == (idx & 7) * 3 + ((idx + 1) & 7) * 5 + 64).all()


def test_device_assert():
    src = r'''
extern "C" __global__ void k(const int* x)
{
    assert(x[threadIdx.x] >= 0);                // ASSERT
}'''
    x = np.arange(32, dtype=np.int32)
    ptx.launch(build(src), "k", 1, 32, (x,))
    x[7] = -1
    with pytest.raises(ptx.PTXError) as e:
        ptx.launch(build(src), "k", 1, 32, (x,))
    msg = str(e.value)
    assert "device-side assert failed: `x[threadIdx.x] >= 0`" in msg
    assert "lane 7" in msg and f"sem.cu:{line_of(src, 'ASSERT')}" in msg


def test_running_selected_blocks_only():
    prog = ptx.load("00_hello_warp")
    x = np.ones((8, 32), np.float32)
    out = np.full(8, -1, np.float32)
    res = ptx.launch(prog, "warp_sum", 8, 32, (x, out, np.int32(8)), blocks=[(5,), 2])
    assert out[5] == 32 and out[2] == 32 and (np.delete(out, [2, 5]) == -1).all()
    with pytest.raises(ValueError, match="outside the grid"):
        ptx.launch(prog, "warp_sum", 8, 32, (x, out, np.int32(8)), blocks=[(9, 0, 0)])
    assert res.steps > 0


TILED = r'''
extern "C" __global__ void tiled(const float* a, float* out, int tiles, int second_sync)
{
    __shared__ float tile[64];
    float acc = 0.0f;
    for (int t = 0; t < tiles; ++t) {
        tile[threadIdx.x] = a[t * 64 + threadIdx.x];
        __syncthreads();
        acc += tile[63 - threadIdx.x];                 // READ
        if (second_sync) __syncthreads();              // the classic bug: without it, a fast
    }                                                  // warp overwrites the tile being read
    out[threadIdx.x] = acc;
}
'''


def test_missing_second_syncthreads_in_a_tiled_loop_is_caught():
    prog = build(TILED)
    a = np.arange(3 * 64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    ptx.launch(prog, "tiled", 1, 64, (a, out, np.int32(3), np.int32(1)))
    assert (out == a.reshape(3, 64)[:, ::-1].sum(0)).all()
    with pytest.raises(ptx.SharedRace) as e:
        ptx.launch(prog, "tiled", 1, 64, (a, out, np.int32(3), np.int32(0)))
    assert f"sem.cu:{line_of(TILED, 'READ')}" in str(e.value)
