"""Semantics of the PTX interpreter: shuffles, collectives, divergence and reconvergence,
barriers, local memory, multi-dimensional launches; small CUDA sources compiled by NVRTC for
sm_80 (and hand-written PTX). CPU only."""
from __future__ import annotations

import numpy as np
import pytest

from fraglab import ptx, toolchain
from ptx_snippets import pointer_kernel

HEADER = '#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#define FULL 0xffffffffu\n'


def build(src: str, name="sem.cu") -> ptx.Program:
    return ptx.Program(toolchain.compile(name, "sm_80", source=HEADER + src).ptx)


def line_of(src: str, marker: str) -> int:
    """1-based line of `marker` in HEADER + src (as NVRTC numbers it)."""
    for i, ln in enumerate((HEADER + src).splitlines(), 1):
        if marker in ln:
            return i
    raise AssertionError(marker)


def error_at(exc, src: str, marker: str, block: int, args) -> str:
    """Kernel k of `src` launched as one block must raise `exc` naming the source line of
    `marker`; returns the message."""
    with pytest.raises(exc) as e:
        ptx.launch(build(src), "k", 1, block, args)
    msg = str(e.value)
    assert f"sem.cu:{line_of(src, marker)}" in msg
    return msg


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
    shfl.sync.MODE.b32 %r3|%p1, %r2, 9, %r5, -1;
    selp.u32 %r4, 1, 0, %p1;
    mul.wide.u32 %rd2, %r1, 8;
    add.s64 %rd3, %rd1, %rd2;
    st.global.v2.u32 [%rd3], {%r3, %r4};
    ret;
}
'''


def _shfl_spec(mode, lane, b, c):
    """The PTX ISA's pseudo-code for shfl.sync, one lane at a time."""
    clamp, seg = c & 0x1F, (c >> 8) & 0x1F
    max_lane = (lane & seg) | (clamp & ~seg & 0x1F)
    min_lane = lane & seg
    if mode == "up":
        j = lane - b
        ok = j >= max_lane
    elif mode == "down":
        j = lane + b
        ok = j <= max_lane
    elif mode == "bfly":
        j = lane ^ b
        ok = j <= max_lane
    else:
        j = min_lane | (b & ~seg & 0x1F)
        ok = j <= max_lane
    return (j if ok else lane), ok


@pytest.mark.parametrize("mode", ["idx", "up", "down", "bfly"])
@pytest.mark.parametrize("c", [0x1F, 0x0, 0x1C03, 0x1807, 0x180C])
def test_shfl_c_operand_clamp_and_segment(mode, c):
    out = np.zeros((32, 2), np.uint32)
    ptx.launch(ptx.Program(SHFL_PTX.replace("MODE", mode)), "raw", 1, 32, (out, np.uint32(c)))
    for lane in range(32):
        src, ok = _shfl_spec(mode, lane, 9, c)
        assert out[lane, 1] == ok and out[lane, 0] == src * 10, (lane, src, ok)


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
    msg = error_at(ptx.CollectiveError, src, "DIVERGENT", 32, (np.zeros(32, np.int32),))
    assert "names lane 16" in msg and "diverged" in msg


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
    msg = error_at(ptx.BarrierError, src, "BARRIER", 64, (np.zeros(64, np.float32),))
    assert "32 of 64 threads wait" in msg and "32 have already exited" in msg


def exchange_through_shared(n: int, scale: str, sync: str, partner: str) -> np.ndarray:
    """Each of `n` threads (one block) stores threadIdx.x * `scale` to shared memory, runs `sync`,
    and reads back the element at `partner` (a C expression in threadIdx.x); returns out."""
    prog = build(f'''
extern "C" __global__ void k(float* out)
{{
    __shared__ float s[{n}];
    s[threadIdx.x] = threadIdx.x * {scale};
    {sync};
    out[threadIdx.x] = s[{partner}];
}}''')
    out = np.zeros(n, np.float32)
    ptx.launch(prog, "k", 1, n, (out,))
    return out


def test_barrier_orders_shared_memory_between_warps():
    out = exchange_through_shared(128, "2.0f", "__syncthreads()", "127 - threadIdx.x")
    assert (out == (127 - np.arange(128)) * 2).all()



def test_different_barriers_in_divergent_code_are_an_error():
    src = r'''
extern "C" __global__ void k(const int* trips, int* out)
{
    __shared__ int s[64];
    int lane = threadIdx.x & 31, x = 0;
    s[threadIdx.x] = threadIdx.x;
    if (lane < 16) {
        __syncthreads();                        // FIRST
        x = s[63 - threadIdx.x];
    } else {
        for (int i = 0; i < trips[threadIdx.x]; ++i)
            if (i & lane & 1) x += i;
        __syncthreads();                        // SECOND
        x += 1000 * s[63 - threadIdx.x];
    }
    out[threadIdx.x] = x;
}'''
    trips = np.random.default_rng(3).integers(0, 9, 64).astype(np.int32)
    msg = error_at(ptx.BarrierError, src, "FIRST", 64, (trips, np.zeros(64, np.int32)))
    assert "different bar.sync" in msg and "32 threads at" in msg
    assert f"sem.cu:{line_of(src, 'SECOND')}" in msg


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


def test_constant_memory_and_more_atomics():
    prog = build(r'''
__constant__ float weights[4] = {0.5f, 1.5f, -2.0f, 4.0f};
__device__ int counter = 5;
extern "C" __global__ void k(float* acc, int* cas, int* out)
{
    int l = threadIdx.x;
    atomicAdd(acc, weights[l % 4]);
    int old = atomicCAS(cas, l, l + 1);      // succeeds in lane order: 0 -> 1 -> 2 ...
    out[l] = old;
    atomicAdd(&counter, 1);
    __syncthreads();
    if (l == 0) out[64] = atomicExch(&counter, 0);
}''')
    acc = np.zeros(1, np.float32)
    cas = np.zeros(1, np.int32)
    out = np.zeros(65, np.int32)
    ptx.launch(prog, "k", 1, 64, (acc, cas, out))
    assert acc[0] == 16 * (0.5 + 1.5 - 2.0 + 4.0)
    assert cas[0] == 64 and (out[:64] == np.arange(64)).all()
    assert out[64] == 5 + 64


def test_generic_pointer_to_constant_memory():
    prog = build(r'''
__constant__ int table[8] = {3, 1, 4, 1, 5, 9, 2, 6};
__device__ __noinline__ int pick(const int* p, int i) { return p[i]; }
extern "C" __global__ void k(int* out) { out[threadIdx.x] = pick(table, threadIdx.x % 8); }''')
    out = np.zeros(32, np.int32)
    ptx.launch(prog, "k", 1, 32, (out,))
    assert (out == np.tile([3, 1, 4, 1, 5, 9, 2, 6], 4)).all()


def test_syncthreads_count_and_or():
    prog = build(r'''
extern "C" __global__ void k(const int* v, int* out)
{
    int x = v[threadIdx.x];
    int c = __syncthreads_count(x > 0);
    int a = __syncthreads_and(x > -5);
    int o = __syncthreads_or(x == 7);
    out[3 * threadIdx.x] = c; out[3 * threadIdx.x + 1] = a; out[3 * threadIdx.x + 2] = o;
}''')
    v = (np.arange(96) % 9 - 4).astype(np.int32)
    out = np.zeros((96, 3), np.int32)
    ptx.launch(prog, "k", 1, 96, (v, out))
    assert (out[:, 0] == (v > 0).sum()).all() and (out[:, 1] == 1).all() and (out[:, 2] == 0).all()


def odd_lanes_ptx(name: str, nregs: int, body: str) -> np.ndarray:
    """Hand-written PTX: kernel `name`(out) with %rd1 = out, %r1 = %laneid, %p1 = (lane is odd),
    then `body` (registers up to %r<nregs>, %rd3); run on one warp, returns its 32 u32 words."""
    prog = ptx.Program(f'''
.version 8.0
.target sm_80
.address_size 64
.visible .entry {name}(.param .u64 out_p)
{{
    .reg .b32 %r<{nregs}>;
    .reg .b64 %rd<4>;
    .reg .pred %p<2>;
    ld.param.u64 %rd1, [out_p];
    mov.u32 %r1, %laneid;
    and.b32 %r2, %r1, 1;
    setp.eq.u32 %p1, %r2, 1;
{body}
}}''')
    out = np.zeros(32, np.uint32)
    ptx.launch(prog, name, 1, 32, (out,))
    return out


def test_guarded_instruction_writing_its_own_predicate():
    out = odd_lanes_ptx("g", 4, r'''
    @%p1 setp.lt.u32 %p1, %r1, 16;
    selp.u32 %r3, 1, 0, %p1;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r3;
    ret;''')
    lane = np.arange(32)
    assert (out == ((lane & 1) == 1) & (lane < 16)).all()


def test_scalar_parameters_of_every_width():
    prog = build(r'''
extern "C" __global__ void k(float* out, __half h, bool b, char c, short s, unsigned long long u,
                             double d, float f)
{
    out[0] = __half2float(h); out[1] = b; out[2] = c; out[3] = s;
    out[4] = (float)(u >> 40); out[5] = (float)d; out[6] = f;
}''')
    out = np.zeros(7, np.float32)
    ptx.launch(prog, "k", 1, 1, (out, np.float16(1.5), True, np.int8(-3), -300,
                                 np.uint64(5 << 40), 2.5, np.float32(-0.25)))
    assert out.tolist() == [1.5, 1.0, -3.0, -300.0, 5.0, 2.5, -0.25]


def test_shuffle_waits_for_lanes_coming_back_from_a_later_block():
    """A join point laid out before one branch of an if (a 'cold' block at the end that jumps
    back): the lanes that reach the full-mask shuffle first wait there for the others, as the
    hardware's convergence does."""
    out = odd_lanes_ptx("j", 8, r'''
    @%p1 bra THEN;
    add.u32 %r1, %r1, 100;
JOIN:
    shfl.sync.bfly.b32 %r3, %r1, 1, 31, -1;
    add.u32 %r4, %r1, %r3;
    mov.u32 %r5, %laneid;
    mul.wide.u32 %rd2, %r5, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r4;
    ret;
THEN:
    add.u32 %r1, %r1, 1000;
    bra.uni JOIN;''')
    lane = np.arange(32)
    v = np.where(lane & 1, lane + 1000, lane + 100)
    assert (out == v + v[lane ^ 1]).all()


def test_sm_ids_are_what_a_gpu_could_read():
    """%nsmid is the 132 SMs the interpreter models (an H100 SXM), not 1: an answer that branches on
    it reads a value a GPU could give (the ISA: %smid in 0 .. %nsmid - 1, not contiguous, %nsmid
    maybe above the SM count). A block's warps share one %smid; 300 blocks spread over every SM."""
    from fraglab.ptx import program as P
    text = pointer_kernel("""    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;""", """    mov.u32 %r1, %nsmid;
    mov.u32 %r2, %smid;
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %tid.x;
    mov.u32 %r5, %ntid.x;
    mad.lo.u32 %r6, %r3, %r5, %r4;
    mul.wide.u32 %rd2, %r6, 8;
    add.u64 %rd3, %rd1, %rd2;
    st.global.v2.u32 [%rd3], {%r1, %r2};""", param="out")
    out = np.zeros((300, 64, 2), np.uint32)
    P.launch(P.Program(text), "k", (300,), (64,), (out,))
    nsmid, smid = out[..., 0], out[..., 1]
    assert (nsmid == P.SMS).all() and P.SMS == 132
    assert (smid < nsmid).all()
    assert (smid == smid[:, :1]).all()                        # one SM per block, every warp
    assert len(np.unique(smid)) == P.SMS                       # every SM gets blocks
    assert (smid[:, 0] == np.arange(300) % P.SMS).all()
