"""The interpreter's Hopper (sm_90a) path on small NVRTC-compiled snippets, against NumPy:
wgmma.mma_async (descriptors in every swizzle mode, K- and MN-major, A from shared memory or
registers, scale-d / imm-scale / f16 / bf16, N = 8 to 256), the accumulator layout, the in-flight
checks (an accumulator read before wgmma.wait_group, an operand overwritten before it), matrix
descriptor decoding against a hand-computed address table, mbarrier phases and bulk copies,
named barriers, deadlock reports, elect.sync, setmaxnreg, stmatrix, and the sm_90a launch path.
CPU only (NVRTC needs no GPU)."""
from __future__ import annotations

import numpy as np
import pytest

from fraglab import device, launch, ptx, toolchain
from fraglab.dtypes import from_bf16, to_bf16
from fraglab.ptx.wgmma import decode_descriptor, encode_descriptor, operand_offsets

HEADER = r"""
typedef unsigned int u32; typedef unsigned long long u64; typedef unsigned short u16;
__device__ __forceinline__ u32 smem_u32(const void* p) { return (u32)__cvta_generic_to_shared(p); }
"""
G, C = np.arange(32) // 4, np.arange(32) % 4
pytestmark = pytest.mark.skipif(not ptx.SUPPORTS_SM90A, reason="no sm_90a interpreter")


def build(src: str, name="hopper.cu", defines=None) -> ptx.Program:
    return ptx.load(name, "sm_90a", source=HEADER + src, defines=defines)


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


def _wgmma_source(n, t, rs, trans_a, trans_b, neg):
    nd = n // 2
    regs = ", ".join(f"%{i}" for i in range(nd))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(nd))
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
    float d[{nd}];
    for (int i = 0; i < {nd}; ++i) d[i] = out[tid * {nd} + i];
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    asm volatile("{{\n.reg .pred p;\nsetp.ne.b32 p, %{p_i}, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t} {{{regs}}}, {a_ops}, %{b_i}, p, {tail};\n}}"
        : {outs} : {a_in}"l"(db), "r"(acc));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#ifdef EARLY_READ
    out[tid] = d[0];                           // a bug: the accumulators are still in flight
#endif
#ifdef EARLY_REFILL
    if (tid < 8) ((u16*)(base + 8192))[tid] = 0x7E00;   // a bug: the wgmma may still read B
#endif
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    for (int i = 0; i < {nd}; ++i) out[tid * {nd} + i] = d[i];
}}
"""


def _values(rng, shape, t):
    x = rng.integers(-8, 9, shape).astype(np.float32) / 4          # exact in f16 and bf16
    bits = x.astype(np.float16).view(np.uint16) if t == "f16" else to_bf16(x)
    vals = bits.view(np.float16).astype(np.float64) if t == "f16" else from_bf16(bits).astype(np.float64)
    return bits, vals


def _run_wgmma(rng, n, t="f16", rs=False, sw=128, ta=0, tb=0, neg=False, acc=1, defines=None):
    prog = build(_wgmma_source(n, t, rs, ta, tb, neg), defines=defines)
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
    d0 = rng.integers(-4, 5, (128, n // 2)).astype(np.float32)
    out = d0.copy()
    ptx.launch(prog, "wg", grid=1, block=128, shared_mem=1024 + 8192 + n * 128,
               args=(a_in, b_in, aoff, boff, np.uint64(desc_a), np.uint64(desc_b), np.int32(acc), out))
    # the accumulator layout, stated independently: m16n8 C fragments, warp w owns rows 16w..
    i = np.arange(n // 2)
    rows = 16 * (np.arange(128) // 32)[:, None] + G[np.arange(128) % 32][:, None] \
        + 8 * ((i % 4) // 2)[None, :]
    cols = 8 * (i // 4)[None, :] + 2 * C[np.arange(128) % 32][:, None] + (i % 2)[None, :]
    got = np.full((64, n), np.nan)
    got[rows, cols] = out
    init = np.zeros((64, n))
    init[rows, cols] = d0
    want = (-1 if neg else 1) * (A @ B.T) + (init if acc else 0)
    return got, want


@pytest.mark.parametrize("sw", [0, 32, 64, 128])
def test_wgmma_kmajor_every_swizzle(rng, sw):
    got, want = _run_wgmma(rng, 64, sw=sw)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("sw", [0, 32, 128])
def test_wgmma_mn_major_operands(rng, sw):
    got, want = _run_wgmma(rng, 64, sw=sw, ta=1, tb=1)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n,t,rs,neg,acc", [(8, "f16", False, False, 1), (128, "bf16", False, True, 1),
                                             (256, "f16", False, False, 0), (64, "f16", True, False, 1),
                                             (128, "bf16", True, True, 0)])
def test_wgmma_shapes_types_and_scales(rng, n, t, rs, neg, acc):
    got, want = _run_wgmma(rng, n, t=t, rs=rs, neg=neg, acc=acc)
    np.testing.assert_array_equal(got, want)           # integers / 4: every sum is exact in f32


def test_reading_an_accumulator_before_wait_group_is_reported(rng):
    with pytest.raises(ptx.WgmmaHazard, match="still in flight.*wait_group"):
        _run_wgmma(rng, 64, defines={"EARLY_READ": 1})


def test_overwriting_an_operand_before_wait_group_is_reported(rng):
    with pytest.raises(ptx.WgmmaHazard, match="changed before the wgmma.wait_group"):
        _run_wgmma(rng, 64, defines={"EARLY_REFILL": 1})
