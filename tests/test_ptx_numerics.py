"""Numerics of the PTX interpreter: conversions (f16, bf16, tf32, integer, bit exact), float
modifiers, approximate functions, packed half arithmetic, integer and bit intrinsics. CPU only."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from fraglab import ptx
from fraglab.dtypes import from_bf16, round_tf32, to_bf16

from test_ptx_semantics import build


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


def _exact_round(vals, dt):
    """Round exact Fractions to dtype dt (nearest even), by brute force over neighbours."""
    out = []
    for v in vals:
        x = np.array(float(v), np.float64).astype(dt)
        cands = [x, np.nextafter(x, dt(np.inf)), np.nextafter(x, dt(-np.inf))]
        best = min(cands, key=lambda c: (abs(Fraction(float(c)) - v),
                                          int(np.array(c).view(np.uint32 if dt == np.float32 else np.uint16)) & 1))
        out.append(best)
    return np.array(out, dt)


def test_fma_f32_is_correctly_rounded():
    prog = build(r'''
extern "C" __global__ void k(const float* a, const float* b, const float* c, float* out)
{
    int n = threadIdx.x + blockIdx.x * blockDim.x;
    out[4 * n + 0] = __fmaf_rn(a[n], b[n], c[n]);
    out[4 * n + 1] = __fmaf_rz(a[n], b[n], c[n]);
    out[4 * n + 2] = __fmaf_rd(a[n], b[n], c[n]);
    out[4 * n + 3] = __fmaf_ru(a[n], b[n], c[n]);
}''')
    rng = np.random.default_rng(17)
    a = rng.standard_normal(64).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    c = (-(a.astype(np.float64) * b)).astype(np.float32)      # cancellation: fma shows the low bits
    c[32:] = rng.standard_normal(32).astype(np.float32) * np.float32(2.0 ** -30)
    # ties for a double-rounding product: (1 + 2^-23) * (1 + 2^-23) + tiny
    a[0] = b[0] = np.float32(1 + 2.0 ** -12)
    c[0] = np.float32(2.0 ** -60)
    out = np.zeros((64, 4), np.float32)
    ptx.launch(prog, "k", 2, 32, (a, b, c, out))
    exact_vals = [Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
                  for x, y, z in zip(a, b, c)]
    assert (out[:, 0] == _exact_round(exact_vals, np.float32)).all()
    f = lambda v: Fraction(float(v))  # noqa: E731
    for i, v in enumerate(exact_vals):
        rz, rd, ru = out[i, 1], out[i, 2], out[i, 3]
        assert f(rd) <= v <= f(ru) and abs(f(rz)) <= abs(v)
        assert (f(rd) == v) == (f(ru) == v)
        assert np.nextafter(rd, np.float32(np.inf)) >= ru


def test_mul24_and_dp4a():
    prog = build(r'''
extern "C" __global__ void k(const int* a, const int* b, int* out)
{
    int n = threadIdx.x;
    out[4 * n + 0] = __mul24(a[n], b[n]);
    out[4 * n + 1] = (int)__umul24((unsigned)a[n], (unsigned)b[n]);
    out[4 * n + 2] = __dp4a(a[n], b[n], n);
    out[4 * n + 3] = (int)__dp4a((unsigned)a[n], (unsigned)b[n], 7u);
}''')
    rng = np.random.default_rng(21)
    a = rng.integers(-2**31, 2**31 - 1, 32, dtype=np.int64).astype(np.int32)
    b = rng.integers(-2**31, 2**31 - 1, 32, dtype=np.int64).astype(np.int32)
    out = np.zeros((32, 4), np.int32)
    ptx.launch(prog, "k", 1, 32, (a, b, out))

    def s24(v):
        v &= 0xFFFFFF
        return v - (1 << 24) if v >> 23 else v

    def wrap(v):
        v &= 0xFFFFFFFF
        return v - (1 << 32) if v >> 31 else v
    for n in range(32):
        x, y = int(a[n]), int(b[n])
        bx = [(x >> (8 * i)) & 0xFF for i in range(4)]
        by = [(y >> (8 * i)) & 0xFF for i in range(4)]
        sx = [v - 256 if v > 127 else v for v in bx]
        sy = [v - 256 if v > 127 else v for v in by]
        assert out[n, 0] == wrap(s24(x) * s24(y))
        assert out[n, 1] == wrap((x & 0xFFFFFF) * (y & 0xFFFFFF))
        assert out[n, 2] == wrap(n + sum(p * q for p, q in zip(sx, sy)))
        assert out[n, 3] == wrap(7 + sum(p * q for p, q in zip(bx, by)))


def test_bit_field_and_count_ops_on_edge_values():
    prog = build(r'''
extern "C" __global__ void k(const unsigned* a, const unsigned long long* b, long long* out)
{
    int n = threadIdx.x;
    unsigned x = a[n];
    unsigned long long y = b[n];
    long long* o = out + 10 * n;
    o[0] = __popcll(y);
    o[1] = __clzll(y);
    o[2] = (long long)__brevll(y);
    int sb, ub; unsigned bi;
    asm("bfe.s32 %0, %1, %2, %3;" : "=r"(sb) : "r"(x), "r"(n), "r"(40 - n));
    asm("bfe.u32 %0, %1, %2, %3;" : "=r"(ub) : "r"(x), "r"(n * 2), "r"(7));
    asm("bfi.b32 %0, %1, %2, %3, %4;" : "=r"(bi) : "r"(x), "r"(~x), "r"(n + 3), "r"(n % 9));
    o[3] = sb; o[4] = ub; o[5] = bi;
    unsigned f1, f2;
    asm("bfind.u32 %0, %1;" : "=r"(f1) : "r"(x >> n));
    asm("bfind.shiftamt.s32 %0, %1;" : "=r"(f2) : "r"((int)x >> (n % 16)));
    o[6] = f1; o[7] = f2;
    o[8] = __popc(x >> (n % 32));
    o[9] = __clz(x >> (n % 32));
}''')
    rng = np.random.default_rng(22)
    a = rng.integers(0, 2**32, 32, dtype=np.uint64).astype(np.uint32)
    a[:3] = [0, 0xFFFFFFFF, 0x80000000]
    b = rng.integers(0, 2**63, 32, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    b[:3] = [0, 2**64 - 1, 2**63]
    out = np.zeros((32, 10), np.int64)
    ptx.launch(prog, "k", 1, 32, (a, b, out))

    def sext(v, n):
        return v - (1 << n) if v >> (n - 1) & 1 else v
    for n in range(32):
        x, y = int(a[n]), int(b[n])
        assert out[n, 0] == bin(y).count("1")
        assert out[n, 1] == 64 - y.bit_length()
        assert int(out[n, 2]) & (2**64 - 1) == int(f"{y:064b}"[::-1], 2)
        pos, ln = n, 40 - n                      # bfe.s32, PTX ISA semantics
        msb = min(pos + ln - 1, 31)
        sbit = (x >> msb) & 1 if ln else 0
        want = 0
        for i in range(32):
            bit = (x >> (pos + i)) & 1 if (i < ln and pos + i <= 31) else sbit
            want |= bit << i
        assert out[n, 3] == sext(want, 32)
        assert out[n, 4] == ((x >> (2 * n)) & 0x7F if 2 * n < 32 else 0)
        pos, ln = n + 3, n % 9
        mask = ((1 << ln) - 1) << pos & 0xFFFFFFFF
        want = x ^ 0xFFFFFFFF if pos >= 32 else ((~x & 0xFFFFFFFF) & ~mask) | ((x << pos) & mask)
        assert out[n, 5] == want
        v = x >> n
        assert out[n, 6] == (v.bit_length() - 1 if v else 0xFFFFFFFF)
        s = sext(x, 32) >> (n % 16)
        m = (~s if s < 0 else s) & 0xFFFFFFFF
        assert out[n, 7] == (31 - (m.bit_length() - 1) if m else 0xFFFFFFFF)
        v = x >> (n % 32)
        assert out[n, 8] == bin(v).count("1") and out[n, 9] == 32 - v.bit_length()


def test_float_to_integer_saturates():
    prog = build(r'''
extern "C" __global__ void k(const float* x, long long* o, unsigned long long* u)
{
    int n = threadIdx.x;
    float v = x[n];
    o[4 * n + 0] = __float2int_rz(v);
    o[4 * n + 1] = (long long)__float2uint_rz(v);
    o[4 * n + 2] = __float2ll_rz(v);
    o[4 * n + 3] = (long long)(short)__float2int_rz(v);
    u[n] = __float2ull_rz(v);
}''')
    x = np.array([0.0, -0.0, 1.5, -1.5, 3e9, -3e9, 1e20, -1e20, np.inf, -np.inf, np.nan,
                  2.0 ** 31, -2.0 ** 31, 2.0 ** 63, 4294967295.0, 65537.9] + [7.25] * 16,
                 np.float32)
    o = np.zeros((32, 4), np.int64)
    u = np.zeros(32, np.uint64)
    ptx.launch(prog, "k", 1, 32, (x, o, u))
    for i, v in enumerate(x.astype(np.float64)):
        t = 0 if np.isnan(v) else (int(np.sign(v)) * 10 ** 30 if np.isinf(v) else int(np.trunc(v)))
        clip = lambda lo, hi: int(min(max(t, lo), hi))  # noqa: E731
        assert o[i, 0] == clip(-2**31, 2**31 - 1), (i, v)
        assert o[i, 1] == clip(0, 2**32 - 1), (i, v)
        want64 = -2**63 if np.isnan(v) else clip(-2**63, 2**63 - 1)   # NaN: INT64_MIN on an H100
        assert o[i, 2] == want64, (i, v)
        s = clip(-2**31, 2**31 - 1) & 0xFFFF
        assert o[i, 3] == (s - 65536 if s >= 32768 else s), (i, v)
        assert int(u[i]) == (2**63 if np.isnan(v) else clip(0, 2**64 - 1)), (i, v)


def test_64_bit_integer_to_float_rounds_once():
    prog = build(r'''
extern "C" __global__ void k(const long long* x, const unsigned long long* y, float* o, double* d)
{
    int n = threadIdx.x;
    o[4 * n + 0] = __ll2float_rn(x[n]);
    o[4 * n + 1] = __ll2float_rz(x[n]);
    o[4 * n + 2] = __ull2float_rd(y[n]);
    o[4 * n + 3] = __ull2float_ru(y[n]);
    d[n] = __ll2double_rz(x[n]);
}''')
    x = np.array([2**60 - 1, -(2**60 - 1), 2**53 + 1, 2**62 + 2**38 + 1, 2**63 - 1, -2**63,
                  (2**24 + 1) * 2**30 + 1, 1, 0, -1] + [2**40 + 3] * 22, np.int64)
    y = np.abs(x).astype(np.uint64) * np.uint64(2) + np.uint64(1)
    o = np.zeros((32, 4), np.float32)
    d = np.zeros(32, np.float64)
    ptx.launch(prog, "k", 1, 32, (x, y, o, d))
    F = lambda v: Fraction(float(v))  # noqa: E731
    for i in range(32):
        xi, yi = int(x[i]), int(y[i])
        cands = lambda v: [np.float32(v), np.nextafter(np.float32(v), np.float32(np.inf)),  # noqa: E731
                           np.nextafter(np.float32(v), np.float32(-np.inf))]
        best = min(cands(xi), key=lambda c: (abs(F(c) - xi), int(np.array(c).view(np.uint32)) & 1))
        assert o[i, 0] == best, i
        assert abs(F(o[i, 1])) <= abs(xi) and abs(xi) - abs(F(o[i, 1])) < abs(
            F(np.nextafter(o[i, 1], np.float32(np.inf if xi > 0 else -np.inf))) - F(o[i, 1])) + 1
        assert F(o[i, 2]) <= yi <= F(o[i, 3])
        assert (F(o[i, 2]) == yi) == (F(o[i, 3]) == yi)
        assert abs(F(d[i])) <= abs(xi)


def test_nan_results_follow_the_gpu():
    """NaN patterns seen on an H100 (sm_80 PTX): f32 arithmetic gives 0x7FFFFFFF, f16/bf16
    results and conversions 0x7FFF, f16 -> f32 0x7FFFFFFF, tf32 .rna truncates a NaN."""
    prog = build(r'''
extern "C" __global__ void k(const unsigned* in, unsigned* out)
{
    int n = threadIdx.x;
    float a = __uint_as_float(in[n]);
    unsigned* o = out + 8 * n;
    o[0] = __float_as_uint(a + 1.0f);
    o[1] = __float_as_uint(fmaxf(a, __uint_as_float(0x7fc12345u)));
    o[2] = __half_as_ushort(__float2half_rn(a));
    o[3] = __bfloat16_as_ushort(__float2bfloat16_rn(a));
    o[4] = __float_as_uint(__half2float(__ushort_as_half((unsigned short)in[n])));
    unsigned t; asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(t) : "f"(a)); o[5] = t;
    __half2 h = __halves2half2(__ushort_as_half((unsigned short)in[n]), __float2half(1.0f));
    __half2 s = __hadd2(h, h); o[6] = *reinterpret_cast<unsigned*>(&s);
    o[7] = __float_as_uint(-a);
}''')
    vals = np.array([0x7FC00001, 0xFFC12345, 0x7F800001, 0x7E00] * 8, np.uint32)
    out = np.zeros((32, 8), np.uint32)
    ptx.launch(prog, "k", 1, 32, (vals, out))
    nan32 = np.isnan(vals.view(np.float32))
    assert (out[nan32, 0] == 0x7FFFFFFF).all() and (out[nan32, 1] == 0x7FFFFFFF).all()
    assert (out[nan32, 2] == 0x7FFF).all() and (out[nan32, 3] == 0x7FFF).all()
    assert (out[nan32, 5] == vals[nan32] & 0xFFFFE000).all()
    assert (out[nan32, 7] == 0x7FFFFFFF).all()
    half_nan = vals == 0x7E00                          # 0x7E00 is a NaN as an f16
    assert (out[half_nan, 4] == 0x7FFFFFFF).all()
    assert (out[half_nan, 6] == 0x40007FFF).all()      # {NaN + NaN, 1 + 1}


# ---- float immediates by their bits (no cache mixes -0.0 with +0.0, nor NaN payloads) -----------

def _imm_kernel(f32: str, f64: str) -> str:
    """One warp stores four words: `mov.f32` of the literal `f32`, `add.f32` of it to itself,
    `mov.f64` of `f64`, `add.f64` of it to itself."""
    return f""".version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 out_p)
{{
    .reg .f32 %f<3>;
    .reg .f64 %fd<3>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [out_p];
    mov.f32 %f1, {f32};
    add.f32 %f2, %f1, {f32};
    mov.f64 %fd1, {f64};
    add.f64 %fd2, %fd1, {f64};
    st.global.f32 [%rd1], %f1;
    st.global.f32 [%rd1+8], %f2;
    st.global.f64 [%rd1+16], %fd1;
    st.global.f64 [%rd1+24], %fd2;
    ret;
}}"""


def _imm_bits(f32: str, f64: str) -> list:
    out = np.zeros(4, np.uint64)
    ptx.launch(ptx.Program(_imm_kernel(f32, f64)), "k", 1, 32, (out,))
    w = out.view(np.uint32)
    return [int(w[0]), int(w[2]), int(out[2]), int(out[3])]


@pytest.mark.parametrize("first", [0, 1])
def test_float_immediates_decode_by_bits_in_either_order(first):
    """-0.0 and +0.0 (and NaNs of different payloads) decoded in one process, in both orders: each
    kernel gets its own literal's bits, whatever was decoded before (a cache keyed by float value
    handed -0.0 the +0.0 array, and the reverse)."""
    plus = ("0f00000000", "0d0000000000000000")
    minus = ("0f80000000", "0d8000000000000000")
    want = {plus: [0, 0, 0, 0],
            minus: [0x80000000, 0x80000000, 1 << 63, 1 << 63]}
    order = [plus, minus] if first == 0 else [minus, plus]
    for lits in order + order:
        assert _imm_bits(*lits) == want[lits], lits
    # NaNs: a mov keeps the literal's payload (signalling ones too); arithmetic gives the
    # canonical NaN (f32) or the quieted payload (f64), as on the H100
    snan = ("0f7F800001", "0d7FF0000000000001")
    qnan = ("0fFFC00123", "0dFFF8000000000123")
    seq = [snan, qnan] if first == 0 else [qnan, snan]
    got = {lits: _imm_bits(*lits) for lits in seq}
    assert got[snan][0] == 0x7F800001 and got[snan][2] == 0x7FF0000000000001
    assert got[qnan][0] == 0xFFC00123 and got[qnan][2] == 0xFFF8000000000123
    assert got[snan][1] == got[qnan][1] == 0x7FFFFFFF
    assert got[qnan][3] == 0xFFF8000000000123
