"""The interpreter's Hopper (sm_90a) path on small NVRTC-compiled snippets, against NumPy:
wgmma.mma_async (descriptors in every swizzle mode, K- and MN-major, A from shared memory or
registers, scale-d / imm-scale / f16 / bf16, N = 8 to 256), the accumulator layout, the in-flight
checks (an accumulator read before wgmma.wait_group, an operand overwritten before it), matrix
descriptor decoding against a hand-computed address table, mbarrier phases and bulk copies,
named barriers, deadlock reports, elect.sync, setmaxnreg, stmatrix, and the sm_90a launch path.
CPU only (NVRTC needs no GPU)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from fraglab import device, launch, ptx, toolchain
from fraglab.dtypes import from_bf16, to_bf16
from fraglab.ptx.wgmma import decode_descriptor, encode_descriptor, operand_offsets
from ptx_snippets import MBARRIER, TYPES

HEADER = TYPES
G, C = np.arange(32) // 4, np.arange(32) % 4
pytestmark = pytest.mark.skipif(not ptx.SUPPORTS_SM90A, reason="no sm_90a interpreter")


def build(src: str, name="hopper.cu", defines=None) -> ptx.Program:
    return ptx.load(name, "sm_90a", source=HEADER + src, defines=defines)


def run(src, name, kernel, block, args, shared_mem=0, defines=None, gpu=False, **kw):
    """Launch one block on the interpreter, or (``gpu``) on an sm_90 GPU through the course's
    launch path; NumPy array arguments receive the results in place either way."""
    if not gpu:
        return ptx.launch(build(src, name, defines), kernel, grid=1, block=block, args=args,
                          shared_mem=shared_mem, **kw)
    import cupy
    fn = launch.get_kernel(name, kernel, source=HEADER + src, defines=defines, arch="sm_90a")
    dev = [cupy.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
    launch.launch(fn, (1,), (block,), tuple(dev), shared_mem=shared_mem, sync=True)
    for a, d in zip(args, dev):
        if isinstance(a, np.ndarray):
            a[...] = d.get()


def _need_sm90(gpu):
    if gpu and not (device.gpu_available() and device.can_run("sm_90a")[0]):
        pytest.skip("needs an sm_90 GPU (compute capability 9.0)")


# ---- descriptors: a hand-computed address table ------------------------------------------------

def test_descriptor_fields_round_trip():
    d = encode_descriptor(0x12340, lbo=0x1230, sbo=0x4560, swizzle=64, base_offset=0)
    assert d == (0x1234 | (0x123 << 16) | (0x456 << 32) | (2 << 62))
    assert decode_descriptor(d) == dict(start=0x12340, lbo=0x1230, sbo=0x4560, base_offset=0,
                                        swizzle=64)
    assert decode_descriptor(1 << 62)["swizzle"] == 128 and decode_descriptor(3 << 62)["swizzle"] == 32
    assert decode_descriptor(5 << 49)["base_offset"] == 5


# (swizzle, mn_major, lbo, sbo) -> {(row, k): byte address}, start address 1024, f16 elements;
# worked by hand from the canonical layouts and the XOR of address bits [4, 4+b) with [7, 7+b).
TABLE = {
    (0, False, 128, 256): {(0, 0): 1024, (1, 0): 1040, (0, 1): 1026, (0, 8): 1152, (9, 3): 1302,
                           (7, 15): 1278},
    (32, False, 16, 256): {(0, 0): 1024, (1, 0): 1056, (3, 8): 1136, (4, 0): 1168, (4, 8): 1152,
                           (5, 9): 1186, (8, 0): 1280},
    (64, False, 16, 512): {(0, 0): 1024, (1, 0): 1088, (2, 0): 1168, (2, 8): 1152, (3, 8): 1216,
                           (6, 0): 1456, (8, 1): 1538},
    (128, False, 16, 1024): {(0, 0): 1024, (1, 0): 1168, (1, 8): 1152, (5, 8): 1728,
                             (7, 15): 2030, (9, 0): 2192},
    (0, True, 2048, 128): {(0, 0): 1024, (1, 0): 1026, (8, 0): 1152, (0, 1): 1040, (0, 8): 3072,
                           (9, 9): 3218},
    (128, True, 2048, 1024): {(0, 0): 1024, (1, 0): 1026, (8, 0): 1040, (0, 1): 1168,
                              (8, 1): 1152, (64, 0): 3072, (3, 9): 2198},
    (32, True, 512, 256): {(0, 0): 1024, (16, 0): 1536, (0, 4): 1168, (8, 4): 1152, (0, 8): 1280},
}


@pytest.mark.parametrize("key", list(TABLE), ids=[f"sw{k[0]}-{'mn' if k[1] else 'k'}" for k in TABLE])
def test_descriptor_addresses_match_the_hand_table(key):
    sw, mn, lbo, sbo = key
    d = decode_descriptor(encode_descriptor(1024, lbo, sbo, sw))
    addr = operand_offsets(128, 16, 2, mn, d)
    for (r, k), want in TABLE[key].items():
        assert addr[r, k] == want, (key, r, k, int(addr[r, k]), want)
    assert len(np.unique(addr)) == addr.size                    # a permutation: no collisions


# ---- wgmma.mma_async against NumPy -------------------------------------------------------------

def _layout_offsets(rows, sw, mn, lbo, sbo):
    """The test's own statement of the canonical layouts (rows x 16 f16), as the chapter writes
    them: rows (or K rows for MN-major) of `sw` bytes, 16-byte chunk q of row p stored at chunk
    q ^ ((p * sw / 128) % (sw / 16)); no swizzle: 8 x 16-byte core matrices."""
    r, k = np.meshgrid(np.arange(rows), np.arange(16), indexing="ij")
    if sw == 0:
        if not mn:
            return (r // 8) * sbo + (k // 8) * lbo + (r % 8) * 16 + (k % 8) * 2
        return (r // 8) * sbo + (k // 8) * lbo + (k % 8) * 16 + (r % 8) * 2
    per = sw // 2                                              # values per swizzled row
    if not mn:
        p, byte, group = r % 8, k * 2, (r // 8) * sbo
    else:
        p, byte, group = k % 8, (r % per) * 2, (r // per) * lbo + (k // 8) * sbo
    q = (byte // 16) ^ ((p * sw // 128) % (sw // 16))
    return group + p * sw + q * 16 + byte % 16


def _wgmma_source(n, t, rs, trans_a, trans_b, neg, dt="f32"):
    nd, ct, cs = (n // 2, "float", "f") if dt == "f32" else (n // 4, "u32", "r")  # f16: 2 per reg
    regs = ", ".join(f"%{i}" for i in range(nd))
    outs = ", ".join(f'"+{cs}"(d[{i}])' for i in range(nd))
    if rs:
        a_ops, a_in = "{%s, %s, %s, %s}" % tuple(f"%{nd + i}" for i in range(4)), \
            '"r"(fa[0]), "r"(fa[1]), "r"(fa[2]), "r"(fa[3]), '
        b_i, p_i, tail = nd + 4, nd + 5, f"{-1 if neg else 1}, 1, {trans_b}"
    else:
        a_ops, a_in = f"%{nd}", '"l"(da), '
        b_i, p_i, tail = nd + 1, nd + 2, f"{-1 if neg else 1}, 1, {trans_a}, {trans_b}"
    return rf"""
extern "C" __global__ void wg(const u16* a, const u16* b, const int* aoff, const int* boff,
                              u64 desc_a, u64 desc_b, int acc, float* out) {{
    extern __shared__ __align__(1024) unsigned char smem[];
    const u32 raw = smem_u32(smem), pad = ((raw + 1023) & ~1023u) - raw;
    unsigned char* base = smem + pad;
    const u32 sA = raw + pad, sB = sA + 8192;
    const int tid = threadIdx.x, w = tid / 32, g = (tid & 31) / 4, c = tid & 3;
    for (int i = tid; i < 64 * 16; i += 128) *(u16*)(base + aoff[i]) = a[i];
    for (int i = tid; i < {n} * 16; i += 128) *(u16*)(base + 8192 + boff[i]) = b[i];
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    u64 da = desc_a | ((sA & 0x3FFFF) >> 4), db = desc_b | ((sB & 0x3FFFF) >> 4);
    u32 fa[4];                                 // the m16n8k16 A fragment of rows 16w..16w+15
    for (int j = 0; j < 4; ++j) {{
        int row = 16 * w + g + 8 * (j & 1), col = 2 * c + 8 * (j >> 1);
        fa[j] = a[row * 16 + col] | ((u32)a[row * 16 + col + 1] << 16);
    }}
    {ct} d[{nd}];
    for (int i = 0; i < {nd}; ++i) d[i] = (({ct}*)out)[tid * {nd} + i];
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#ifdef COPY                                    // a bug: a copy into B in flight (0: before, 1: after)
    if (tid == 0 && COPY == 0) asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" :: "r"(sB), "l"(b) : "memory");
#endif
#ifdef SKIP_WARP1
    if (w != 1)                                // a bug: the warpgroup must issue it together
#endif
    asm volatile("{{\n.reg .pred p;\nsetp.ne.b32 p, %{p_i}, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n{n}k16.{dt}.{t}.{t} {{{regs}}}, {a_ops}, %{b_i}, p, {tail};\n}}"
        : {outs} : {a_in}"l"(db), "r"(acc));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#ifdef EARLY_READ
    out[tid] = d[0];                           // a bug: the accumulators are still in flight
#endif
#if COPY == 1
    if (tid == 0) asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" :: "r"(sB), "l"(b) : "memory");
#endif
#ifdef EARLY_REFILL
    if (tid < 8) ((u16*)(base + 8192))[tid] = 0x7E00;   // a bug: the wgmma may still read B
#endif
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    for (int i = 0; i < {nd}; ++i) (({ct}*)out)[tid * {nd} + i] = d[i];
}}
"""


def _values(rng, shape, t):
    x = rng.integers(-8, 9, shape).astype(np.float32) / 4          # exact in f16 and bf16
    bits = x.astype(np.float16).view(np.uint16) if t == "f16" else to_bf16(x)
    vals = bits.view(np.float16).astype(np.float64) if t == "f16" else from_bf16(bits).astype(np.float64)
    return bits, vals


def _run_wgmma(rng, n, t="f16", rs=False, sw=128, ta=0, tb=0, neg=False, acc=1, defines=None,
               gpu=False, dt="f32"):
    _need_sm90(gpu)
    src = _wgmma_source(n, t, rs, ta, tb, neg, dt)
    a_bits, A = _values(rng, (64, 16), t)
    b_bits, B = _values(rng, (n, 16), t)                              # B^T: (N, K)
    geo = {0: (128, 256), 32: (16, 256), 64: (16, 512), 128: (16, 1024)}
    mn_geo = {0: (None, 128), 32: (512, 256), 64: (1024, 512), 128: (2048, 1024)}

    def place(bits, vals, rows, mn):
        lbo, sbo = geo[sw] if not mn else mn_geo[sw]
        if mn and sw == 0:
            lbo = rows * 16
        off = _layout_offsets(rows, sw, mn, lbo, sbo)
        return np.ascontiguousarray(bits.reshape(-1)), off.reshape(-1).astype(np.int32), \
            encode_descriptor(0, lbo, sbo, sw)
    a_in, aoff, desc_a = place(a_bits, A, 64, bool(ta))
    b_in, boff, desc_b = place(b_bits, B, n, bool(tb))
    d0 = rng.integers(-4, 5, (128, n // 2)).astype(np.float32 if dt == "f32" else np.float16)
    out = d0.copy().view(np.float32)                    # f16 accumulators: as their bits
    run(src, "hopper.cu", "wg", 128, (a_in, b_in, aoff, boff, np.uint64(desc_a), np.uint64(desc_b),
                                      np.int32(acc), out),
        shared_mem=1024 + 8192 + n * 128, defines=defines, gpu=gpu)
    # the accumulator layout, stated independently: m16n8 C fragments, warp w owns rows 16w..
    i = np.arange(n // 2)
    rows = 16 * (np.arange(128) // 32)[:, None] + G[np.arange(128) % 32][:, None] \
        + 8 * ((i % 4) // 2)[None, :]
    cols = 8 * (i // 4)[None, :] + 2 * C[np.arange(128) % 32][:, None] + (i % 2)[None, :]
    got = np.full((64, n), np.nan)
    got[rows, cols] = out.view(d0.dtype)
    init = np.zeros((64, n))
    init[rows, cols] = d0
    want = (-1 if neg else 1) * (A @ B.T) + (init if acc else 0)
    return got, want


GPU = [pytest.param(False, id="interp"), pytest.param(True, id="gpu", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("gpu", GPU)
@pytest.mark.parametrize("sw", [0, 32, 64, 128])
def test_wgmma_kmajor_every_swizzle(rng, sw, gpu):
    got, want = _run_wgmma(rng, 64, sw=sw, gpu=gpu)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("gpu", GPU)
@pytest.mark.parametrize("sw", [0, 32, 64, 128])
def test_wgmma_mn_major_operands(rng, sw, gpu):
    got, want = _run_wgmma(rng, 64, sw=sw, ta=1, tb=1, gpu=gpu)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("gpu", GPU)
@pytest.mark.parametrize("n,t,rs,neg,acc,dt", [
    (8, "f16", False, False, 1, "f32"), (128, "bf16", False, True, 1, "f32"),
    (256, "f16", False, False, 0, "f32"), (64, "f16", True, False, 1, "f32"),
    (128, "bf16", True, True, 0, "f32"), (64, "f16", False, False, 1, "f16"),
    (32, "f16", True, True, 1, "f16")])
def test_wgmma_shapes_types_and_scales(rng, n, t, rs, neg, acc, dt, gpu):
    got, want = _run_wgmma(rng, n, t=t, rs=rs, neg=neg, acc=acc, gpu=gpu, dt=dt)
    np.testing.assert_array_equal(got, want)           # integers / 4: every sum is exact in f32


def test_reading_an_accumulator_before_wait_group_is_reported(rng):
    with pytest.raises(ptx.WgmmaHazard, match="still in flight.*wait_group"):
        _run_wgmma(rng, 64, defines={"EARLY_READ": 1})


@pytest.mark.parametrize("when,what", [(0, "has not finished writing"), (1, "target of a cp.async")])
def test_a_copy_in_flight_into_a_wgmma_operand_is_reported(rng, when, what):
    with pytest.raises(ptx.WgmmaHazard, match=what):
        _run_wgmma(rng, 64, defines={"COPY": when})


def test_a_wgmma_skipped_by_one_warp_of_the_warpgroup_is_reported(rng):
    with pytest.raises(ptx.WgmmaHazard, match="aligned: all 4 warps of a warpgroup"):
        _run_wgmma(rng, 64, defines={"SKIP_WARP1": 1})


def test_overwriting_an_operand_before_wait_group_is_reported(rng):
    with pytest.raises(ptx.WgmmaHazard, match="changed before the wgmma.wait_group"):
        _run_wgmma(rng, 64, defines={"EARLY_REFILL": 1})


# ---- mbarriers, bulk copies, named barriers ----------------------------------------------------

SYNC = MBARRIER + r"""
__device__ u32 test_token(u32 b, u64 s) {
    u32 r; asm volatile("{\n.reg .pred p;\nmbarrier.test_wait.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
                        : "=r"(r) : "r"(b), "l"(s) : "memory"); return r; }

// one warp walks an mbarrier (count 2) through its phases and records what the waits return
extern "C" __global__ void phases(const float* in, u32* rec, float* got) {
    __shared__ __align__(16) float buf[4];
    __shared__ __align__(8) u64 bar;
    const u32 b = smem_u32(&bar);
    if (threadIdx.x == 0) {
        init(b, 2);
        u64 t0 = arrive(b);
        rec[0] = test_token(b, t0);                    // one of two arrivals: incomplete
        arrive(b);
        rec[1] = test_token(b, t0);                    // phase 0 complete
        rec[2] = try_parity(b, 0);                     // ... and so is parity 0's
        arrive_tx(b, 16); arrive(b);                   // phase 1: arrivals done, 16 bytes due
        bulk(smem_u32(buf), in, 16, b);
        wait(b, 1);                                    // the copy lands: phase 1 completes
        rec[3] = try_parity(b, 1);
        for (int i = 0; i < 4; ++i) got[i] = buf[i];
    }
#ifdef EXTRA_ARRIVAL
    __syncwarp();
    arrive(b);                                         // 32 arrivals where 2 are due: a bug
#endif
}

// a ring of 2 stages of 32 floats: warp 1 produces (bulk copies), warp 0 consumes
extern "C" __global__ void ring(const float* in, float* out, int n) {
    __shared__ __align__(128) float buf[2][32];
    __shared__ __align__(8) u64 full[2], empty[2];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (threadIdx.x == 0)
        for (int s = 0; s < 2; ++s) { init(smem_u32(&full[s]), 1); init(smem_u32(&empty[s]), 1); }
    __syncthreads();
    for (int i = 0; i < n; ++i) {
        const int s = i % 2, u = i / 2;
        if (warp == 1) {
            if (lane == 0) {
#ifdef EMPTY_PARITY                                   // a bug: one parity for every use
                if (u > 0) wait(smem_u32(&empty[s]), EMPTY_PARITY);  // WAITS
#else
                if (u > 0) wait(smem_u32(&empty[s]), (u - 1) & 1);
#endif
                arrive_tx(smem_u32(&full[s]), 128);
                bulk(smem_u32(buf[s]), in + 32 * i, 128, smem_u32(&full[s]));
            }
        } else {
#ifndef NO_WAIT
            wait(smem_u32(&full[s]), u & 1);
#endif
            out[32 * i + lane] = buf[s][lane] + 1000.f * s;
            __syncwarp();
            if (lane == 0) arrive(smem_u32(&empty[s]));
        }
    }
}

// cp.async into shared memory, then each lane reads its neighbour's 16 bytes
extern "C" __global__ void cpasync(const float* in, float* out) {
    __shared__ __align__(16) float s[128];
    const int t = threadIdx.x;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(smem_u32(&s[4 * t])), "l"(in + 4 * t) : "memory");
    asm volatile("cp.async.commit_group;" ::: "memory");
#ifndef NO_CP_WAIT
    asm volatile("cp.async.wait_group 0;" ::: "memory");
#endif
    __syncwarp();
    for (int i = 0; i < 4; ++i) out[4 * t + i] = s[4 * ((t + 1) % 32) + i];
}

// named barrier 1: warp 1 writes, arrives (ACOUNT threads); warp 0 waits (COUNT), reads
extern "C" __global__ void named(float* out) {
    __shared__ float x[32];
    if (threadIdx.x >= 32) {
        x[threadIdx.x - 32] = threadIdx.x;
        asm volatile("bar.arrive %0, %1;" :: "r"(1), "r"(ACOUNT) : "memory");
    } else {
        asm volatile("bar.sync %0, %1;" :: "r"(1), "r"(COUNT) : "memory");
        out[threadIdx.x] = x[31 - threadIdx.x];
    }
}
"""


def _sync(**defines):
    return build(SYNC, "hopper_sync.cu", defines={"COUNT": 64, "ACOUNT": 64, **defines})


@pytest.mark.parametrize("gpu", GPU)
def test_mbarrier_phases_tokens_parity_and_transactions(gpu):
    _need_sm90(gpu)
    rec, got = np.zeros(4, np.uint32), np.zeros(4, np.float32)
    x = np.arange(4, dtype=np.float32) + 0.5
    run(SYNC, "hopper_sync.cu", "phases", 32, (x, rec, got), defines={"COUNT": 64, "ACOUNT": 64},
        gpu=gpu)
    assert rec.tolist() == [0, 1, 1, 1]
    np.testing.assert_array_equal(got, x)


def test_more_arrivals_than_the_phase_expects_are_reported():
    with pytest.raises(ptx.BarrierError, match="more than its phase expects"):
        ptx.launch(_sync(EXTRA_ARRIVAL=1), "phases", grid=1, block=32,
                   args=(np.zeros(4, np.float32), np.zeros(4, np.uint32), np.zeros(4, np.float32)))


@pytest.mark.parametrize("how", ["interp", "reverse", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_producer_consumer_ring_through_bulk_copies(rng, how):
    _need_sm90(how == "gpu")
    n = 5
    x = rng.standard_normal(32 * n).astype(np.float32)
    out = np.full(32 * n, np.nan, np.float32)
    with ptx.options(reverse_warps=how == "reverse"):
        res = run(SYNC, "hopper_sync.cu", "ring", 64, (x, out, np.int32(n)),
                  defines={"COUNT": 64, "ACOUNT": 64}, gpu=how == "gpu")
    want = x + np.float32(1000) * (np.arange(32 * n) // 32 % 2).astype(np.float32)
    np.testing.assert_array_equal(out, want)
    assert how == "gpu" or (res.opcode_counts()["cp"] == n and res.reverse_warps == (how == "reverse"))


@pytest.mark.parametrize("schedule", ["fixed", "reverse", 0, 2, 7])
def test_a_refill_after_a_wait_on_an_older_phase_fails_in_every_order(schedule):
    """The producer waits for a stage to be free with a constant parity: right for the stage's
    second use, wrong for its third (the wait is satisfied by the phase of the first release,
    which orders nothing about the second use's reads). In every warp order the interpreter
    fails it: the refill is a write after the consumer's reads, naming the mbarrier and the
    phase the producer observed; or the consumer reads while the refill is in flight; or the
    refill announces its bytes in a phase whose arrival has come; or (the consumer having
    released already) the wait can never end: a deadlock naming the mbarrier. (Seed 2 gives the
    first, seed 0 the second, seed 7 the third, the others the fourth.)"""
    x, out = np.zeros(32 * 5, np.float32), np.zeros(32 * 5, np.float32)
    with pytest.raises((ptx.SharedRace, ptx.BarrierError)) as e:
        ptx.launch(_sync(EMPTY_PARITY=0), "ring", grid=1, block=64,
                   args=(x, out, np.int32(5)), schedule=schedule)
    msg = str(e.value)
    if "is still writing" in msg:          # the consumer reads while the refill is in flight
        assert "ld.shared.f32 reads" in msg and "cp.async.bulk" in msg and "of warp 1 at" in msg
        assert re.search(r"completion of phase 2 of the mbarrier at shared address 0x", msg), msg
    elif isinstance(e.value, ptx.SharedRace):
        assert re.search(r"write after read\): warp 1 copies into shared address \d+, which warp "
                         r"0 read with no wait in between: its last mbarrier wait observed phase 0 "
                         r"of the mbarrier at shared address 0x[0-9a-f]+ completed", msg), msg
        assert "the copy: `cp.async.bulk" in msg and "the read: `ld.shared" in msg
    elif isinstance(e.value, ptx.Deadlock):
        assert re.search(r"parity 0 of the mbarrier at shared address 0x[0-9a-f]+ \(phase 2", msg)
    else:
        assert re.search(r"more than its phase expects|mbarrier at shared address 0x[0-9a-f]+ "
                         r"\(phase 1", msg), msg


def test_a_ring_with_the_right_parities_passes_the_phase_checks():
    x = np.arange(32 * 7, dtype=np.float32)
    for schedule in ("fixed", "reverse", 3):
        out = np.zeros(32 * 7, np.float32)
        ptx.launch(_sync(), "ring", grid=1, block=64, args=(x, out, np.int32(7)), schedule=schedule)
        np.testing.assert_array_equal(out, x + 1000 * (np.arange(32 * 7) // 32 % 2))


def test_reading_a_stage_without_waiting_sees_no_data():
    with pytest.raises(ptx.UninitializedRead):
        ptx.launch(_sync(NO_WAIT=1), "ring", grid=1, block=64,
                   args=(np.zeros(64, np.float32), np.zeros(64, np.float32), np.int32(2)))


def test_cp_async_lands_at_its_wait_group_on_sm90():
    x = np.arange(128, dtype=np.float32)
    out = np.zeros(128, np.float32)
    ptx.launch(_sync(), "cpasync", grid=1, block=32, args=(x, out))
    np.testing.assert_array_equal(out, np.roll(x, -4))
    with pytest.raises(ptx.UninitializedRead):          # no wait: nothing has landed yet
        ptx.launch(_sync(NO_CP_WAIT=1), "cpasync", grid=1, block=32, args=(x, out))
    ptx.launch(_sync(NO_CP_WAIT=1), "cpasync", grid=1, block=32, args=(x, out),
               lazy_copies=False)                        # sm_80's model: copies land at issue


def test_a_wait_nobody_completes_is_a_deadlock():
    x, out = np.zeros(32 * 3, np.float32), np.zeros(32 * 3, np.float32)
    # one warp only: the consumer waits for copies that no producer warp issues
    with pytest.raises(ptx.Deadlock, match=r"(?s)parity 0 of the mbarrier at shared address.*warp 0"):
        ptx.launch(_sync(), "ring", grid=1, block=32, args=(x, out, np.int32(3)))


@pytest.mark.parametrize("gpu", GPU)
def test_named_barrier_orders_producer_and_consumer(gpu):
    _need_sm90(gpu)
    out = np.zeros(32, np.float32)
    run(SYNC, "hopper_sync.cu", "named", 64, (out,), defines={"COUNT": 64, "ACOUNT": 64}, gpu=gpu)
    np.testing.assert_array_equal(out, 63 - np.arange(32))


def test_named_barrier_with_a_count_never_reached_is_a_deadlock():
    with pytest.raises(ptx.Deadlock, match="named barrier 1 .64 of 96 threads arrived"):
        ptx.launch(_sync(COUNT=96, ACOUNT=96), "named", grid=1, block=64,
                   args=(np.zeros(32, np.float32),))
    with pytest.raises(ptx.BarrierError, match="thread counts 96 and 64"):
        ptx.launch(_sync(COUNT=96), "named", grid=1, block=64, args=(np.zeros(32, np.float32),))


# A stage released on an mbarrier before its wgmma completed, and refilled: tests/test_ptx_hazards.py
# (refill, with plain stores, cp.async and a bulk copy).


# ---- elect.sync, setmaxnreg, stmatrix, griddepcontrol -------------------------------------------

MISC = r"""
extern "C" __global__ void misc(u32* elected, u16* st, u16* stt) {
    const int lane = threadIdx.x % 32;
    asm volatile("griddepcontrol.wait;" ::: "memory");
#ifndef NO_SETMAXNREG     // (not on a GPU: inc waits for registers a small kernel's CTA lacks)
    if (threadIdx.x < 128) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    else asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
#endif
#ifdef BAD_SETMAXNREG
    if (threadIdx.x >= 32 && threadIdx.x < 64) asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");
#endif
    if (threadIdx.x < 32 && lane >= 5) {             // lanes 5..31 take part; lane 5 is elected
        u32 who, me;
        asm volatile("{\n.reg .pred p;\nelect.sync %0|p, %2;\nselp.u32 %1, 1, 0, p;\n}"
                     : "=r"(who), "=r"(me) : "r"(0xFFFFFFE0u));
        elected[lane] = who * 100 + me;
    }
    __syncwarp();
    if (threadIdx.x < 32) {                          // stmatrix x4 (.trans): lane l holds 4 words
        __shared__ __align__(16) u16 m[2][4 * 64];
        u32 r[4];
        for (int i = 0; i < 4; ++i) r[i] = (u32)(1000 * i + 2 * lane) | ((u32)(1000 * i + 2 * lane + 1) << 16);
        u32 p = smem_u32(&m[0][(lane / 8) * 64 + (lane % 8) * 8]), q = p + 4 * 64 * 2;
        asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
                     :: "r"(p), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
        asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};"
                     :: "r"(q), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
        __syncwarp();
        for (int i = lane; i < 256; i += 32) { st[i] = m[0][i]; stt[i] = m[1][i]; }
    }
    asm volatile("griddepcontrol.launch_dependents;");
}
"""


def _misc(defines=None, gpu=False):
    e = np.zeros(32, np.uint32)
    st, stt = np.zeros(256, np.uint16), np.zeros(256, np.uint16)
    run(MISC, "hopper_misc.cu", "misc", 256, (e, st, stt), defines=defines, gpu=gpu)
    return e, st, stt


@pytest.mark.parametrize("gpu", GPU)
def test_elect_setmaxnreg_stmatrix_griddepcontrol(gpu):
    _need_sm90(gpu)
    e, st, stt = _misc({"NO_SETMAXNREG": 1} if gpu else None, gpu=gpu)
    assert e[:5].tolist() == [0] * 5 and e[5] == 501 and (e[6:] == 500).all()
    # matrix i, row r, col c: element c of row r is half (c % 2) of word i of lane 4r + c // 2
    i, r, c = np.meshgrid(np.arange(4), np.arange(8), np.arange(8), indexing="ij")
    val = 1000 * i + 2 * (4 * r + c // 2) + c % 2
    np.testing.assert_array_equal(st.reshape(4, 8, 8), val)
    np.testing.assert_array_equal(stt.reshape(4, 8, 8), val.transpose(0, 2, 1))


ELECT_TILES = r"""
extern "C" __global__ void elect_tiles(u32* out) {
    const u32 lane = threadIdx.x % 32, tile = lane / 8;
    const u32 mask = 0xffu << (8 * tile);                // four tiles of 8 lanes, one mask each
    u32 who, me;
    asm volatile("{\n.reg .pred p;\nelect.sync %0|p, %2;\nselp.u32 %1, 1, 0, p;\n}"
                 : "=r"(who), "=r"(me) : "r"(mask));
    out[lane] = who * 100 + me;
}
"""


@pytest.mark.parametrize("gpu", GPU)
def test_elect_per_lane_masks(gpu):
    """Each lane's own member mask: every tile of 8 lanes elects its lowest lane."""
    _need_sm90(gpu)
    out = np.zeros(32, np.uint32)
    run(ELECT_TILES, "hopper_elect.cu", "elect_tiles", 32, (out,), gpu=gpu)
    lane = np.arange(32)
    np.testing.assert_array_equal(out, (lane // 8 * 8) * 100 + (lane % 8 == 0))


def test_setmaxnreg_must_match_across_a_warpgroup():
    with pytest.raises(ptx.BarrierError, match="all 4 warps of a warpgroup"):
        _misc({"BAD_SETMAXNREG": 1})


# ---- the sm_90a launch path -----------------------------------------------------------------------

def test_get_kernel_interprets_sm90a_and_device_answers(monkeypatch):
    monkeypatch.setenv("FRAGLAB_MODE", "cpu")
    assert device.target_cc("sm_90a") == (9, 0) and device.target_cc() == (8, 0)
    assert device.can_run("sm_90a") == (True, "") and not device.can_run("sm_100a")[0]
    fn = launch.get_kernel("hopper_misc.cu", "misc", source=HEADER + MISC, arch="sm_90a")
    assert isinstance(fn, ptx.program.KernelFunction) and fn.prog.module.target.startswith("sm_90a")
    with pytest.raises(ValueError, match="interpreter runs"):
        launch.get_kernel("hopper_misc.cu", "misc", source=HEADER + MISC, arch="sm_75")
    assert ptx.interpreter_arch("10_fa3_pipelining_wgmma") == "sm_90a"
    assert ptx.interpreter_arch("00_hello_warp") == "sm_80"
    assert toolchain.compile("hopper_misc.cu", "sm_90a", source=HEADER + MISC).arch == "sm_90a"
