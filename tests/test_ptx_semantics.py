"""Unit tests of the PTX interpreter's semantics and diagnostics, on small CUDA sources compiled
by NVRTC for sm_80 (and a few hand-written PTX snippets). CPU only."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fraglab import ptx, toolchain
from fraglab.dtypes import from_bf16, round_tf32, to_bf16

HEADER = '#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#define FULL 0xffffffffu\n'


def build(src: str, name="sem.cu") -> ptx.Program:
    return ptx.Program(toolchain.compile(name, "sm_80", source=HEADER + src).ptx)


def line_of(src: str, marker: str) -> int:
    """1-based line of `marker` in HEADER + src (as NVRTC numbers it)."""
    for i, ln in enumerate((HEADER + src).splitlines(), 1):
        if marker in ln:
            return i
    raise AssertionError(marker)


# ---- warp shuffles -------------------------------------------------------------------------------

SHFL = r'''
extern "C" __global__ void shfl(const int* src, int* out, int width)
{
    int lane = threadIdx.x, v = src[lane];
    out[0 * 32 + lane] = __shfl_sync(FULL, v, (lane * 7 + 3) % 32, width);
    out[1 * 32 + lane] = __shfl_up_sync(FULL, v, 3, width);
    out[2 * 32 + lane] = __shfl_down_sync(FULL, v, 5, width);
    out[3 * 32 + lane] = __shfl_xor_sync(FULL, v, 6, width);
}
'''


@pytest.mark.parametrize("width", [32, 16, 8, 4])
def test_shfl_modes_and_width(width):
    src = (np.arange(32) * 11 + 5).astype(np.int32)
    out = np.zeros(4 * 32, np.int32)
    ptx.launch(build(SHFL), "shfl", 1, 32, (src, out, np.int32(width)))
    lane = np.arange(32)
    base = lane - lane % width
    idx = base + ((lane * 7 + 3) % 32) % width
    up = np.where(lane % width >= 3, lane - 3, lane)
    down = np.where(lane % width + 5 < width, lane + 5, lane)
    xor = np.where(((lane ^ 6) - base) < width, lane ^ 6, lane)
    for k, want in enumerate([idx, up, down, xor]):
        assert (out[k * 32:(k + 1) * 32] == src[want]).all(), k


SHFL_PTX = r'''
.version 8.0
.target sm_80
.address_size 64
.visible .entry raw(.param .u64 out_p, .param .u32 cval)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    .reg .pred %p<2>;
    ld.param.u64 %rd1, [out_p];
    ld.param.u32 %r5, [cval];
    mov.u32 %r1, %laneid;
    mul.lo.u32 %r2, %r1, 10;
    shfl.sync.idx.b32 %r3|%p1, %r2, 9, %r5, -1;
    selp.u32 %r4, 1, 0, %p1;
    mul.wide.u32 %rd2, %r1, 8;
    add.s64 %rd3, %rd1, %rd2;
    st.global.v2.u32 [%rd3], {%r3, %r4};
    ret;
}
'''


@pytest.mark.parametrize("c", [0x1F, 0x1C03, 0x1807])
def test_shfl_c_operand_clamp_and_segment(c):
    out = np.zeros((32, 2), np.uint32)
    ptx.launch(ptx.Program(SHFL_PTX), "raw", 1, 32, (out, np.uint32(c)))
    lane = np.arange(32)
    clamp, seg = c & 0x1F, (c >> 8) & 0x1F
    max_lane = (lane & seg) | (clamp & ~seg)
    j = (lane & seg) | (9 & ~seg)
    ok = j <= max_lane
    assert (out[:, 1] == ok).all()
    assert (out[:, 0] == np.where(ok, j, lane) * 10).all()


def test_shfl_member_mask_must_name_executing_lanes():
    prog = build(r'''
extern "C" __global__ void k(int* out)
{
    int v = threadIdx.x;
    v = __shfl_sync(0x0000ffffu, v, 0);      // all 32 lanes run it, the mask names 16
    out[threadIdx.x] = v;
}''')
    with pytest.raises(ptx.CollectiveError, match="lane 16 executes it but its member mask"):
        ptx.launch(prog, "k", 1, 32, (np.zeros(32, np.int32),))


def test_shfl_in_divergent_code_is_an_error():
    src = r'''
extern "C" __global__ void k(int* out)
{
    int v = threadIdx.x;
    if (threadIdx.x < 16) v = __shfl_sync(FULL, v, 3);   // DIVERGENT
    out[threadIdx.x] = v;
}'''
    with pytest.raises(ptx.CollectiveError) as e:
        ptx.launch(build(src), "k", 1, 32, (np.zeros(32, np.int32),))
    msg = str(e.value)
    assert "names lane 16" in msg and "diverged" in msg
    assert f"sem.cu:{line_of(src, 'DIVERGENT')}" in msg


# ---- divergence, reconvergence, barriers -----------------------------------------------------------

def test_divergence_loops_and_reconvergence():
    prog = build(r'''
extern "C" __global__ void k(const int* trips, int* out)
{
    int lane = threadIdx.x & 31, acc = 0;
    if (lane & 1) acc = 100; else acc = -100;
    for (int i = 0; i < trips[threadIdx.x]; ++i) {
        if (i % 3 == lane % 3) continue;
        acc += i;
    }
    acc += __shfl_xor_sync(FULL, acc, 1);     // needs the reconverged warp
    unsigned b = __ballot_sync(FULL, acc > 0);
    out[threadIdx.x] = acc;
    out[64 + threadIdx.x] = (int)b;
}''')
    trips = np.random.default_rng(0).integers(0, 20, 64).astype(np.int32)
    out = np.zeros(128, np.int32)
    ptx.launch(prog, "k", 1, 64, (trips, out))
    lane = np.arange(64) % 32
    acc = np.where(lane & 1, 100, -100)
    for t in range(64):
        acc[t] += sum(i for i in range(trips[t]) if i % 3 != lane[t] % 3)
    want = acc + acc[np.arange(64) ^ 1]
    assert (out[:64] == want).all()
    for w in range(2):
        bits = sum(1 << i for i in range(32) if want[32 * w + i] > 0)
        assert (out[64 + 32 * w:96 + 32 * w].view(np.uint32) == bits).all()


def test_bar_sync_not_reached_by_all_threads():
    src = r'''
extern "C" __global__ void k(float* out)
{
    __shared__ float s[64];
    if (threadIdx.x >= 32) return;
    s[threadIdx.x] = 1.0f;
    __syncthreads();                       // BARRIER
    out[threadIdx.x] = s[threadIdx.x ^ 1];
}'''
    with pytest.raises(ptx.BarrierError) as e:
        ptx.launch(build(src), "k", 1, 64, (np.zeros(64, np.float32),))
    msg = str(e.value)
    assert "32 of 64 threads wait" in msg and "32 have already exited" in msg
    assert f"sem.cu:{line_of(src, 'BARRIER')}" in msg


def test_barrier_orders_shared_memory_between_warps():
    prog = build(r'''
extern "C" __global__ void k(float* out)
{
    __shared__ float s[128];
    s[threadIdx.x] = threadIdx.x * 2.0f;
    __syncthreads();
    out[threadIdx.x] = s[127 - threadIdx.x];
}''')
    out = np.zeros(128, np.float32)
    ptx.launch(prog, "k", 1, 128, (out,))
    assert (out == (127 - np.arange(128)) * 2).all()


# ---- memory diagnostics -----------------------------------------------------------------------------

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


# ---- conversions and float semantics -------------------------------------------------------------

CVT = r'''
extern "C" __global__ void k(const float* x, unsigned short* h, unsigned short* b,
                             unsigned* t, int* i, float* f)
{
    int n = threadIdx.x + blockIdx.x * blockDim.x;
    float v = x[n];
    h[4 * n + 0] = __half_as_ushort(__float2half_rn(v));
    h[4 * n + 1] = __half_as_ushort(__float2half_rz(v));
    h[4 * n + 2] = __half_as_ushort(__float2half_rd(v));
    h[4 * n + 3] = __half_as_ushort(__float2half_ru(v));
    b[4 * n + 0] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
    b[4 * n + 1] = __bfloat16_as_ushort(__float2bfloat16_rz(v));
    b[4 * n + 2] = __bfloat16_as_ushort(__float2bfloat16_rd(v));
    b[4 * n + 3] = __bfloat16_as_ushort(__float2bfloat16_ru(v));
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
    t[n] = r;
    float s = v * 1000.0f;
    i[4 * n + 0] = __float2int_rn(s);
    i[4 * n + 1] = __float2int_rz(s);
    i[4 * n + 2] = __float2int_rd(s);
    i[4 * n + 3] = __float2int_ru(s);
    f[2 * n + 0] = __int2float_rz(n * 16777259 + 1);
    f[2 * n + 1] = __int2float_rn(n * 16777259 + 1);
}
'''


def _f16_directed(x, mode):
    r = x.astype(np.float16)
    back = r.astype(np.float64)
    x = x.astype(np.float64)
    if mode == "rz":
        return np.where(np.abs(back) > np.abs(x), np.nextafter(r, np.float16(0)), r)
    if mode == "rd":
        return np.where(back > x, np.nextafter(r, np.float16(-np.inf)), r)
    return np.where(back < x, np.nextafter(r, np.float16(np.inf)), r)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_cvt_rounding_modes_bit_exact():
    rng = np.random.default_rng(11)
    x = np.concatenate([rng.standard_normal(40) * 10, rng.standard_normal(16) * 1e-6,
                        [0.5, 1.5, 2.5, -2.5, 65519.0, 70000.0, 1e-8, -0.0],
                        rng.standard_normal(64)]).astype(np.float32)
    n = len(x)
    h = np.zeros(4 * n, np.uint16)
    b = np.zeros(4 * n, np.uint16)
    t = np.zeros(n, np.uint32)
    i = np.zeros(4 * n, np.int32)
    f = np.zeros(2 * n, np.float32)
    ptx.launch(build(CVT), "k", n // 32, 32, (x, h, b, t, i, f))
    h = h.reshape(n, 4).view(np.float16)
    assert (h[:, 0].view(np.uint16) == x.astype(np.float16).view(np.uint16)).all()
    for k, mode in ((1, "rz"), (2, "rd"), (3, "ru")):
        assert (h[:, k].view(np.uint16) == _f16_directed(x, mode).view(np.uint16)).all(), mode
    b = b.reshape(n, 4)
    assert (b[:, 0] == to_bf16(x)).all()
    assert (b[:, 1] == (x.view(np.uint32) >> 16)).all()
    cand = np.stack([x.view(np.uint32) >> 16, (x.view(np.uint32) >> 16) + 1], 1).astype(np.uint16)
    vals = from_bf16(cand).astype(np.float64)
    xd = x.astype(np.float64)[:, None]
    down = np.where(vals <= xd, vals, -np.inf).max(1)
    up = np.where(vals >= xd, vals, np.inf).min(1)
    assert (from_bf16(b[:, 2]) == down).all() and (from_bf16(b[:, 3]) == up).all()
    assert (t == round_tf32(x).view(np.uint32)).all()
    s = (x * np.float32(1000)).astype(np.float64)
    i = i.reshape(n, 4)
    for k, fn in enumerate((np.rint, np.trunc, np.floor, np.ceil)):
        assert (i[:, k] == np.clip(fn(s), -2**31, 2**31 - 1)).all(), k
    ints = (np.arange(n, dtype=np.int64) * 16777259 + 1).astype(np.int32).astype(np.float64)
    f = f.reshape(n, 2)
    assert (f[:, 1] == ints.astype(np.float32)).all()
    assert (np.abs(f[:, 0].astype(np.float64)) <= np.abs(ints)).all()


def test_ex2_and_other_approximations_within_bounds():
    prog = build(r'''
extern "C" __global__ void k(const float* x, float* out)
{
    int n = threadIdx.x + blockIdx.x * blockDim.x;
    float e, l, r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x[n]));
    asm("lg2.approx.f32 %0, %1;" : "=f"(l) : "f"(fabsf(x[n]) + 0.5f));
    asm("rcp.approx.f32 %0, %1;" : "=f"(r) : "f"(x[n]));
    out[3 * n] = e; out[3 * n + 1] = l; out[3 * n + 2] = r;
}''')
    x = np.linspace(-30, 30, 128).astype(np.float32)
    out = np.zeros(3 * 128, np.float32)
    ptx.launch(prog, "k", 4, 32, (x, out))
    out = out.reshape(128, 3).astype(np.float64)
    xd = x.astype(np.float64)
    assert np.all(np.abs(out[:, 0] / np.exp2(xd) - 1) < 2.0 ** -22)
    assert np.all(np.abs(out[:, 1] - np.log2(np.abs(xd) + 0.5)) < 2.0 ** -22)
    assert np.all(np.abs(out[:, 2] * xd - 1) < 2.0 ** -23)


def test_f32_arithmetic_modifiers():
    prog = build(r'''
extern "C" __global__ void k(const float* a, const float* b, float* out)
{
    int n = threadIdx.x;
    out[4 * n + 0] = __fmul_rz(a[n], b[n]);
    out[4 * n + 1] = __fadd_rd(a[n], b[n]);
    out[4 * n + 2] = __saturatef(a[n]);
    out[4 * n + 3] = __fdiv_rn(a[n], b[n]);
}''')
    rng = np.random.default_rng(12)
    a = rng.standard_normal(32).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    out = np.zeros(128, np.float32)
    ptx.launch(prog, "k", 1, 32, (a, b, out))
    out = out.reshape(32, 4)
    p = a.astype(np.float64) * b
    assert (np.abs(out[:, 0]) <= np.abs(p)).all() and (np.abs(out[:, 0] - p) <= np.spacing(np.abs(out[:, 0]))).all()
    s = a.astype(np.float64) + b
    assert (out[:, 1] <= s).all()
    assert (out[:, 2] == np.clip(a, 0, 1)).all()
    assert (out[:, 3] == a / b).all()


# ---- budget, unsupported, clock, inspection ------------------------------------------------------

def test_instruction_budget():
    src = r'''
extern "C" __global__ void k(volatile int* flag)
{
    while (flag[0] == 0) { }                // SPIN
}'''
    with pytest.raises(ptx.StepBudgetExceeded, match="instruction budget of 5000"):
        ptx.launch(build(src), "k", 1, 32, (np.zeros(1, np.int32),), max_steps=5000)


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


def test_packed_half_arithmetic():
    prog = build(r'''
extern "C" __global__ void k(const __half2* a, const __half2* b, __half2* out,
                             const unsigned* bfa, unsigned* bfo)
{
    int n = threadIdx.x;
    out[4 * n + 0] = __hadd2(a[n], b[n]);
    out[4 * n + 1] = __hmul2(a[n], b[n]);
    out[4 * n + 2] = __hfma2(a[n], b[n], a[n]);
    out[4 * n + 3] = __hmax2(a[n], b[n]);
    __nv_bfloat162 x = *reinterpret_cast<const __nv_bfloat162*>(bfa + n);
    __nv_bfloat162 y = __hmul2(x, x);
    bfo[n] = *reinterpret_cast<unsigned*>(&y);
}''')
    rng = np.random.default_rng(13)
    a = rng.standard_normal(64).astype(np.float16)
    b = rng.standard_normal(64).astype(np.float16)
    out = np.zeros(4 * 64, np.float16)
    x = rng.standard_normal(64).astype(np.float32)
    bfa = to_bf16(x).view(np.uint32)
    bfo = np.zeros(32, np.uint32)
    ptx.launch(prog, "k", 1, 32, (a, b, out, bfa, bfo))
    out = out.reshape(32, 4, 2)
    a2, b2 = a.reshape(32, 2).astype(np.float64), b.reshape(32, 2).astype(np.float64)
    assert (out[:, 0] == (a2 + b2).astype(np.float16)).all()
    assert (out[:, 1] == (a2 * b2).astype(np.float16)).all()
    assert (out[:, 2] == (a2 * b2 + a2).astype(np.float16)).all()
    assert (out[:, 3] == np.maximum(a2, b2).astype(np.float16)).all()
    xb = from_bf16(to_bf16(x)).astype(np.float64)
    assert (bfo.view(np.uint16) == to_bf16((xb * xb).astype(np.float32))).all()


def test_lanes_parked_at_a_barrier_while_the_rest_diverge():
    prog = build(r'''
extern "C" __global__ void k(const int* trips, int* out)
{
    __shared__ int s[64];
    int lane = threadIdx.x & 31, x = 0;
    s[threadIdx.x] = threadIdx.x;
    if (lane < 16) {
        __syncthreads();
        x = s[63 - threadIdx.x];
    } else {
        for (int i = 0; i < trips[threadIdx.x]; ++i)
            if (i & lane & 1) x += i;
        __syncthreads();
        x += 1000 * s[63 - threadIdx.x];
    }
    out[threadIdx.x] = x;
}''')
    trips = np.random.default_rng(3).integers(0, 9, 64).astype(np.int32)
    out = np.zeros(64, np.int32)
    ptx.launch(prog, "k", 1, 64, (trips, out))
    t = np.arange(64)
    lane = t % 32
    loop = np.array([sum(i for i in range(trips[j]) if i & lane[j] & 1) for j in range(64)])
    want = np.where(lane < 16, 63 - t, loop + 1000 * (63 - t))
    assert (out == want).all()


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


def test_integer_and_bit_intrinsics():
    prog = build(r'''
extern "C" __global__ void k(const int* a, const int* b, long long* out)
{
    int n = threadIdx.x, x = a[n], y = b[n];
    unsigned ux = x, uy = y;
    long long* o = out + 20 * n;
    o[0] = __popc(ux);
    o[1] = __clz(x);
    o[2] = __brev(ux);
    o[3] = __byte_perm(ux, uy, 0x3175 + n);
    o[4] = __funnelshift_l(ux, uy, n);
    o[5] = __funnelshift_rc(ux, uy, n + 20);
    o[6] = __ffs(x);
    o[7] = __mulhi(x, y);
    o[8] = (long long)__umul64hi((unsigned long long)ux * 977u, (unsigned long long)uy * 1313u);
    o[9] = y != 0 ? x / y : 0;
    o[10] = y != 0 ? x % y : 0;
    o[11] = min(ux, uy);
    o[12] = max(x, y);
    o[13] = x >> (n % 40);
    o[14] = ux >> (n % 40);
    o[15] = (long long)x * y;
    o[16] = __sad(x, y, 7u);
    unsigned bf;
    asm("bfe.s32 %0, %1, %2, %3;" : "=r"(bf) : "r"(x), "r"(n % 24), "r"(9));
    o[17] = (int)bf;
    o[18] = __hadd(x, y);
    o[19] = abs(x) ^ (int)__ldg(reinterpret_cast<const unsigned*>(a) + (n ^ 1));
}''')
    rng = np.random.default_rng(14)
    a = rng.integers(-2**31, 2**31 - 1, 32, dtype=np.int64).astype(np.int32)
    b = rng.integers(-2**31, 2**31 - 1, 32, dtype=np.int64).astype(np.int32)
    b[:4] = [0, 1, -1, 7]
    a[5] = -2**31
    out = np.zeros((32, 20), np.int64)
    ptx.launch(prog, "k", 1, 32, (a, b, out))
    M32 = 0xFFFFFFFF
    for n in range(32):
        x, y = int(a[n]), int(b[n])
        ux, uy = x & M32, y & M32

        def s32(v):
            v &= M32
            return v - (1 << 32) if v >> 31 else v
        both = (uy << 32) | ux
        sel = 0x3175 + n
        bytes8 = both.to_bytes(8, "little")
        perm = sum(bytes8[(sel >> (4 * i)) & 7] << (8 * i) for i in range(4))
        want = [bin(ux).count("1"), 32 - ux.bit_length(), int(f"{ux:032b}"[::-1], 2),
                perm, ((both << (n & 31)) >> 32) & M32, (both >> min(n + 20, 32)) & M32,
                (ux & -ux).bit_length(), (x * y) >> 32,
                s32(0) if False else None,
                (abs(x) // abs(y)) * (1 if (x < 0) == (y < 0) else -1) if y else 0,
                (abs(x) % abs(y)) * (1 if x >= 0 else -1) if y else 0,
                min(ux, uy), max(x, y), x >> min(n % 40, 31), ux >> (n % 40) if n % 40 < 32 else 0,
                x * y, abs(x - y) + 7, None, (x + y) >> 1, None]
        p = (ux * 977) * (uy * 1313)
        want[8] = (p >> 64) - (1 << 64) if (p >> 64) >> 63 else p >> 64
        pos, ln = n % 24, 9
        field = (ux >> pos) & ((1 << ln) - 1)
        want[17] = field - (1 << ln) if field >> (ln - 1) else field
        want[19] = (abs(x) & M32 if x != -2**31 else 2**31) ^ (int(a[n ^ 1]) & M32)
        want[19] = s32(want[19])
        want[14] = s32(want[14]) if False else want[14]
        got = out[n].tolist()
        for j, (g, w) in enumerate(zip(got, want)):
            if j == 16:
                w = (abs(x - y) + 7) & M32
            assert g == w, (n, j, g, w)


def test_vote_match_redux_activemask():
    prog = build(r'''
extern "C" __global__ void k(const int* v, unsigned* out)
{
    int lane = threadIdx.x;
    int x = v[lane];
    unsigned* o = out + 8 * lane;
    o[0] = __all_sync(FULL, x > -1000);
    o[1] = __any_sync(FULL, x == 3);
    o[2] = __ballot_sync(FULL, x & 1);
    o[3] = __match_any_sync(FULL, x);
    int pred;
    o[4] = __match_all_sync(FULL, x, &pred);
    o[5] = __reduce_add_sync(FULL, (unsigned)x);
    o[6] = (unsigned)__reduce_max_sync(FULL, x);
    if (lane & 1) o[7] = __activemask(); else o[7] = 0;
}''')
    v = (np.arange(32) % 5 - 2).astype(np.int32)
    out = np.zeros((32, 8), np.uint32)
    ptx.launch(prog, "k", 1, 32, (v, out))
    bits = lambda sel: sum(1 << i for i in range(32) if sel[i])  # noqa: E731
    assert (out[:, 0] == 1).all() and (out[:, 1] == 0).all()
    assert (out[:, 2] == bits(v & 1)).all()
    for i in range(32):
        assert out[i, 3] == bits(v == v[i])
    assert (out[:, 4] == 0).all()
    assert (out[:, 5] == np.uint32(v.sum() & 0xFFFFFFFF)).all()
    assert (out[:, 6] == v.max()).all()
    assert (out[1::2, 7] == bits(np.arange(32) & 1)).all()


def test_float_intrinsics():
    prog = build(r'''
extern "C" __global__ void k(const float* a, const float* b, float* out)
{
    int n = threadIdx.x;
    float x = a[n], y = b[n];
    float* o = out + 12 * n;
    o[0] = sqrtf(fabsf(x));
    o[1] = rsqrtf(fabsf(x) + 1.0f);
    o[2] = __expf(x);
    o[3] = __logf(fabsf(x) + 1.0f);
    o[4] = __sinf(x);
    o[5] = __cosf(x);
    o[6] = __fdividef(x, y);
    o[7] = copysignf(x, y);
    o[8] = fminf(x, y);
    o[9] = fmaxf(x, nanf(""));
    o[10] = __frcp_rn(y);
    o[11] = __fsqrt_rn(fabsf(y));
}''')
    rng = np.random.default_rng(15)
    a = (rng.standard_normal(32) * 3).astype(np.float32)
    b = (rng.standard_normal(32) * 3).astype(np.float32)
    out = np.zeros((32, 12), np.float32)
    ptx.launch(prog, "k", 1, 32, (a, b, out))
    x, y = a.astype(np.float64), b.astype(np.float64)
    approx = [np.sqrt(np.abs(x)), 1 / np.sqrt(np.abs(x) + 1), np.exp(x), np.log(np.abs(x) + 1),
              np.sin(x), np.cos(x), x / y]
    for j, ref in enumerate(approx):
        assert np.allclose(out[:, j], ref, rtol=2e-6, atol=1e-6), j
    assert (out[:, 7] == np.copysign(a, b)).all()
    assert (out[:, 8] == np.minimum(a, b)).all()
    assert (out[:, 9] == a).all()
    assert (out[:, 10] == (1 / y).astype(np.float32)).all()
    assert (out[:, 11] == np.sqrt(np.abs(b))).all()


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
    prog = build(r'''
extern "C" __global__ void k(float* out)
{
    __shared__ float s[32];
    s[threadIdx.x] = threadIdx.x * 3.0f;
    __syncwarp();
    out[threadIdx.x] = s[threadIdx.x ^ 5];
}''')
    out = np.zeros(32, np.float32)
    ptx.launch(prog, "k", 1, 32, (out,))
    assert (out == (np.arange(32) ^ 5) * 3).all()


def test_multidimensional_grid_and_block():
    prog = build(r'''
extern "C" __global__ void k(int* out)
{
    int bx = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    int tx = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int i = bx * blockDim.x * blockDim.y * blockDim.z + tx;
    out[4 * i + 0] = threadIdx.y;
    out[4 * i + 1] = threadIdx.z;
    out[4 * i + 2] = blockIdx.y;
    out[4 * i + 3] = blockIdx.z * 100 + gridDim.z * 10 + blockDim.z;
}''')
    grid, block = (2, 3, 2), (8, 3, 2)
    out = np.zeros((12, 48, 4), np.int32)
    ptx.launch(prog, "k", grid, block, (out,))
    t = np.arange(48)
    assert (out[:, :, 0] == (t // 8) % 3).all() and (out[:, :, 1] == t // 24).all()
    b = np.arange(12)
    assert (out[:, :, 2] == ((b // 2) % 3)[:, None]).all()
    assert (out[:, :, 3] == ((b // 6) * 100 + 22)[:, None]).all()


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
