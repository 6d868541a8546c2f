"""GPU tier: the interpreter against the hardware. The same sm_80 PTX is JIT-compiled by the
driver and launched with CuPy; outputs must be bit-identical to the interpreter's (reductions,
layouts, shuffles, conversions, NaN patterns), or close where the GPU is not reproducible in
float64 (ex2.approx, tensor-core accumulation). Skipped without a GPU."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fraglab import ptx, toolchain
from fraglab.dtypes import to_bf16

from test_ptx_kernels import LAYOUTS
from test_ptx_numerics import CVT
from test_ptx_semantics import HEADER, SHFL

pytestmark = pytest.mark.gpu

_MODULES: dict = {}


def gpu_run(text: str, kernel: str, grid, block, args, shared_mem=0):
    """Launch PTX `text` on the GPU; returns the arrays of `args` after the launch."""
    import cupy
    mod = _MODULES.get(text)
    if mod is None:
        mod = _MODULES[text] = cupy.cuda.function.Module()
        mod.load(text.encode())
    fn = mod.get_function(kernel)
    dev = [cupy.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
    if shared_mem > 48 * 1024:
        from cupy_backends.cuda.api import driver
        driver.funcSetAttribute(fn.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                shared_mem)
    dim = lambda v: tuple(np.atleast_1d(v).tolist()) + (1,) * (3 - len(np.atleast_1d(v)))  # noqa: E731
    fn(dim(grid), dim(block), tuple(dev), shared_mem=shared_mem)
    cupy.cuda.get_current_stream().synchronize()
    return [d.get() if hasattr(d, "get") else d for d in dev]


def both(text, kernel, grid, block, args, shared_mem=0):
    mine = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    ptx.launch(ptx.Program(text), kernel, grid, block, tuple(mine), shared_mem=shared_mem,
               echo_printf=False)
    theirs = gpu_run(text, kernel, grid, block, args, shared_mem)
    return mine, theirs


def same_bits(a, b):
    u = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    return np.array_equal(np.ascontiguousarray(a).view(u), np.ascontiguousarray(b).view(u))


def test_warp_sum_and_03_reductions_bit_identical():
    rng = np.random.default_rng(1)
    text = toolchain.compile("00_hello_warp", "sm_80").ptx
    x = rng.standard_normal((64, 32)).astype(np.float32)
    mine, gpu = both(text, "warp_sum", 64, 32, (x, np.zeros(64, np.float32), np.int32(64)))
    assert same_bits(mine[1], gpu[1])
    text = toolchain.compile("03_permutation_and_quad_reduction", "sm_80").ptx
    for k in ptx.Program(text).kernels:
        if not k.startswith("reduce_acc_"):
            continue
        m, n = (int(v) for v in k.split("_")[2].split("x"))
        acc = rng.standard_normal((6, m, n)).astype(np.float32)
        acc[1, 2, 3] = np.nan
        mine, gpu = both(text, k, 2, 128, (acc, np.zeros((6, m), np.float32),
                                           np.zeros((6, n), np.float32), np.int32(6)))
        assert same_bits(mine[1], gpu[1]) and same_bits(mine[2], gpu[2]), k


def test_tracer_kernels_bit_identical():
    import re
    text = toolchain.compile("01_tracer", "sm_80").ptx
    for k in ptx.Program(text).kernels:
        base = re.sub(r"_(f16|bf16|s8|u8|tf32|f64)in$", "", k.split("_", 2)[-1])
        if not k.startswith(("trace_load_", "trace_mma_")) or base not in LAYOUTS:
            continue
        e = LAYOUTS[base]
        r, c = np.meshgrid(np.arange(e["rows"]), np.arange(e["cols"]), indexing="ij")
        for enc in (r, c):
            mine, gpu = both(text, k, 1, 32, (enc.astype(np.float32),
                                              np.zeros(32 * e["num_elements"], np.float32)))
            assert same_bits(mine[1], gpu[1]), k


def test_codegen_kernels_bit_identical():
    rng = np.random.default_rng(2)
    text = toolchain.compile("06_layout_codegen", "sm_80").ptx
    mem = {"f32": np.float32, "f16": np.float16, "s32": np.int32, "f64": np.float64}
    for k in ptx.Program(text).kernels:
        kind, _ = k.split("_", 1)[1].rsplit("_", 1)
        m, n, _ = (int(v) for v in kind.split("_")[1].split("x"))
        t = kind.split("_")[2]
        acc = rng.integers(-1000, 1000, (5, m, n)).astype(np.int32) if t == "s32" else \
            rng.standard_normal((5, m, n)).astype(mem[t])
        shapes = ((5, m), (5, n)) if k.startswith("reduce_") else (acc.shape, acc.shape)
        mine, gpu = both(text, k, 2, 128, (acc, np.zeros(shapes[0], acc.dtype),
                                           np.zeros(shapes[1], acc.dtype), np.int32(5)))
        assert same_bits(mine[1], gpu[1]) and same_bits(mine[2], gpu[2]), k


def test_shuffles_and_conversions_bit_identical():
    text = toolchain.compile("sem.cu", "sm_80", source=HEADER + SHFL).ptx
    for width in (32, 16, 8, 4):
        mine, gpu = both(text, "shfl", 1, 32, ((np.arange(32) * 11 + 5).astype(np.int32),
                                               np.zeros(128, np.int32), np.int32(width)))
        assert same_bits(mine[1], gpu[1]), width
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.standard_normal(60) * 10, rng.standard_normal(30) * 1e-6,
                        [0.5, 2.5, 65519.0, 70000.0, np.inf, -np.inf], np.zeros(32)]).astype(np.float32)
    x.view(np.uint32)[-2:] = [0x7FC00001, 0xFFC12345]
    n = len(x)
    text = toolchain.compile("sem.cu", "sm_80", source=HEADER + CVT).ptx
    args = (x, np.zeros(4 * n, np.uint16), np.zeros(4 * n, np.uint16), np.zeros(n, np.uint32),
            np.zeros(4 * n, np.int32), np.zeros(2 * n, np.float32))
    mine, gpu = both(text, "k", n // 32, 32, args)
    for i in range(1, 6):
        assert same_bits(mine[i], gpu[i]), i


@pytest.mark.parametrize("dtype,n,d,warps,causal", [("f16", 128, 64, 4, 0), ("bf16", 100, 64, 4, 1),
                                                    ("f16", 77, 128, 4, 1)])
def test_fa2_close_to_the_gpu(dtype, n, d, warps, causal):
    rng = np.random.default_rng(4)
    vals = [rng.standard_normal((1, 2, n, d)).astype(np.float32) for _ in range(3)]
    raw = [v.astype(np.float16) for v in vals] if dtype == "f16" else [to_bf16(v) for v in vals]
    text = toolchain.compile("05_flash_attention_fa2", "sm_80").ptx
    args = (*raw, np.zeros_like(raw[0]), np.int32(n),
            np.float32(1 / math.sqrt(d) * math.log2(math.e)), np.int32(causal))
    mine, gpu = both(text, f"fa2_{dtype}_d{d}_w{warps}", (-(-n // (16 * warps)), 2), 32 * warps,
                     args, shared_mem=(16 * warps + 128) * 2 * d)
    f = (lambda a: a.astype(np.float64)) if dtype == "f16" else \
        (lambda a: (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64))
    a, b = f(mine[3]), f(gpu[3])
    assert np.abs(a - b).max() / np.abs(b).max() < (1e-2 if dtype == "bf16" else 2e-3)


FUZZ = r'''
extern "C" __global__ void fz(const float* fa, const float* fb, const float* fc, const int* ia,
                              const int* ib, const long long* la, unsigned* o32, unsigned long long* o64)
{
    int n = threadIdx.x + blockIdx.x * blockDim.x;
    float a = fa[n], b = fb[n], c = fc[n];
    int x = ia[n], y = ib[n];
    long long l = la[n];
    unsigned* o = o32 + 72 * n;
    unsigned long long* q = o64 + 8 * n;
    int k = 0;
#define F(e) o[k++] = __float_as_uint(e)
#define I(e) o[k++] = (unsigned)(e)
    F(a + b); F(a - b); F(a * b); F(__fmaf_rn(a, b, c)); F(__fmaf_rz(a, b, c)); F(__fmaf_rd(a, b, c));
    F(__fmaf_ru(a, b, c)); F(__fadd_rz(a, b)); F(__fadd_rd(a, b)); F(__fmul_ru(a, b));
    F(__fdiv_rn(a, b)); F(__fdiv_rz(a, b)); F(__fsqrt_rn(fabsf(a))); F(__fsqrt_rd(fabsf(a)));
    F(__frcp_rn(b)); F(__frcp_rz(b)); F(fminf(a, b)); F(fmaxf(a, b)); F(__saturatef(a));
    F(fabsf(a)); F(-b); F(copysignf(a, b)); F(truncf(a)); F(floorf(a)); F(ceilf(a)); F(rintf(a));
    I(__float2int_rn(a * 1e6f)); I(__float2uint_rd(a * 1e6f)); I(__float2int_rz(b * 1e9f));
    F(__int2float_rn(x)); F(__int2float_rz(x)); F(__uint2float_rd((unsigned)x)); F(__uint2float_ru((unsigned)y));
    I(__half_as_ushort(__float2half_rn(a))); I(__half_as_ushort(__float2half_rz(b)));
    I(__bfloat16_as_ushort(__float2bfloat16_rn(a))); I(__bfloat16_as_ushort(__float2bfloat16_rd(b)));
    F(__half2float(__float2half_rn(c)));
    __half2 h1 = __floats2half2_rn(a, b), h2 = __floats2half2_rn(c, a);
    __half2 hs = __hfma2(h1, h2, h1); I(*reinterpret_cast<unsigned*>(&hs));
    __half2 hm = __hmul2(h1, h2); I(*reinterpret_cast<unsigned*>(&hm));
    __nv_bfloat162 b1 = __floats2bfloat162_rn(a, b), b2 = __floats2bfloat162_rn(c, a);
    __nv_bfloat162 bs = __hfma2(b1, b2, b1); I(*reinterpret_cast<unsigned*>(&bs));
    I(x * y); I(__mulhi(x, y)); I(__umulhi((unsigned)x, (unsigned)y)); I(y ? x / y : 0); I(y ? x % y : 0);
    I(x >> (y & 31)); I((unsigned)x >> (y & 31)); I(__funnelshift_l(x, y, x)); I(__funnelshift_r(x, y, y));
    I(__byte_perm(x, y, y)); I(__popc(x)); I(__clz(y)); I(__brev(x)); I(__ffs(y)); I(__sad(x, y, 3u));
    I(__mul24(x, y)); I(__dp4a(x, y, 5)); I(min(x, y)); I(max((unsigned)x, (unsigned)y)); I(abs(x));
    I(__hadd(x, y)); I(__rhadd(x, y));
    unsigned long long u64 = __float2ull_rz(a * 1e12f); I(u64 >> 32); I(u64);
    F(__fadd_rd(a, -a)); F(__fmaf_rd(a, b, -(a * b))); F(__saturatef(-a));
    q[0] = (unsigned long long)(l * (long long)x); q[1] = __umul64hi((unsigned long long)l, (unsigned long long)y);
    q[2] = (unsigned long long)__float2ll_rn(a * 1e15f); q[3] = __double_as_longlong(__ll2double_rn(l));
    q[4] = __float_as_uint(__ll2float_rz(l)); q[5] = __double_as_longlong(__fma_rn((double)a, (double)b, (double)c));
    q[6] = __double_as_longlong((double)a / (double)b); q[7] = (unsigned long long)__brevll(l);
#undef F
#undef I
}
'''

APPROX = r'''
extern "C" __global__ void ap(const float* fa, float* o)
{
    int n = threadIdx.x + blockIdx.x * blockDim.x;
    float a = fa[n], r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(a * 20.0f)); o[6 * n] = r;
    asm("lg2.approx.f32 %0, %1;" : "=f"(r) : "f"(fabsf(a) + 1e-3f)); o[6 * n + 1] = r;
    asm("rsqrt.approx.f32 %0, %1;" : "=f"(r) : "f"(fabsf(a) + 1e-3f)); o[6 * n + 2] = r;
    asm("sin.approx.f32 %0, %1;" : "=f"(r) : "f"(a)); o[6 * n + 3] = r;
    asm("tanh.approx.f32 %0, %1;" : "=f"(r) : "f"(a)); o[6 * n + 4] = r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(a)); o[6 * n + 5] = r;
}
'''


def _fuzz_inputs(rng, count):
    specials = np.array([0.0, -0.0, 1.0, -1.0, 0.5, 1.5, 2.5, np.inf, -np.inf, np.nan, 1e-40,
                         -1e-42, 3.4e38, -3.4e38, 1e-30, 65504.0, 65520.0, 1 + 2 ** -23, 2 ** -24,
                         16777217.0], np.float32)
    f = [np.where(rng.random(count) < 0.2, rng.choice(specials, count),
                  (rng.standard_normal(count) * 10.0 ** rng.integers(-8, 8, count))).astype(np.float32)
         for _ in range(3)]
    i = [np.where(rng.random(count) < 0.2, rng.choice([0, 1, -1, 2**31 - 1, -2**31, 255, -256], count),
                  rng.integers(-2**31, 2**31, count)).astype(np.int32) for _ in range(2)]
    ll = rng.integers(-2**63, 2**63, count, dtype=np.int64)
    ll[:4] = [2**60 - 1, -(2**53 + 1), 2**63 - 1, -2**63]
    return f, i, ll


def test_arithmetic_fuzz_bit_identical():
    rng = np.random.default_rng(5)
    count = 32 * 16
    f, i, ll = _fuzz_inputs(rng, count)
    text = toolchain.compile("fuzz.cu", "sm_80", source=HEADER + FUZZ).ptx
    args = (*f, *i, ll, np.zeros(72 * count, np.uint32), np.zeros(8 * count, np.uint64))
    mine, gpu = both(text, "fz", 16, 32, args)
    a, b = mine[6].reshape(count, 72), gpu[6].reshape(count, 72)
    bad = np.argwhere(a != b)
    assert not len(bad), [(int(r), int(c), hex(int(a[r, c])), hex(int(b[r, c]))) for r, c in bad[:12]]
    a, b = mine[7].reshape(count, 8), gpu[7].reshape(count, 8)
    bad = np.argwhere(a != b)
    assert not len(bad), [(int(r), int(c), hex(int(a[r, c])), hex(int(b[r, c]))) for r, c in bad[:12]]


def test_approximations_within_their_bounds_of_the_gpu():
    rng = np.random.default_rng(6)
    x = (rng.standard_normal(32 * 8) * 3).astype(np.float32)
    text = toolchain.compile("ap.cu", "sm_80", source=HEADER + APPROX).ptx
    mine, gpu = both(text, "ap", 8, 32, (x, np.zeros(6 * len(x), np.float32)))
    a, b = mine[1].reshape(-1, 6).astype(np.float64), gpu[1].reshape(-1, 6).astype(np.float64)
    with np.errstate(invalid="ignore"):
        rel = np.where(a == b, 0.0, np.abs(a - b) / np.maximum(np.abs(b), 1e-30))
    assert rel[:, 0].max() < 2 ** -21 and rel[:, 2].max() < 2 ** -21 and rel[:, 5].max() < 2 ** -22
    assert np.abs(a[:, 1] - b[:, 1]).max() < 2 ** -20            # lg2: absolute bound
    assert np.abs(a[:, 3] - b[:, 3]).max() < 2 ** -20            # sin: absolute bound
    assert np.abs(a[:, 4] - b[:, 4]).max() < 2 ** -10            # tanh.approx: about 2^-11 relative


SGEMM_TILES = {"naive": {}, "coalesced": {}, "smem": {},
               "tile1d": dict(BM=64, BN=64, BK=8, TM=8),
               "tile2d": dict(BM=128, BN=128, BK=8, TM=8, TN=8),
               "vectorized": dict(BM=128, BN=128, BK=8, TM=8, TN=8),
               "warptile": dict(BM=128, BN=128, BK=8, WM=32, WN=64, LM=4, MINB=2),
               "double_buffer": dict(BM=128, BN=128, BK=8, WM=32, WN=64, LM=4, MINB=2, GROUP=1)}


@pytest.mark.parametrize("rung", list(SGEMM_TILES))
def test_sgemm_bit_identical(rung):
    """FP32 SGEMM is a fixed sequence of fma.rn.f32 per output: the interpreter's correctly
    rounded fma must reproduce the GPU bit for bit."""
    from pathlib import Path
    if not (Path(__file__).resolve().parent.parent / "kernels" / f"07_register_reuse_{rung}.cu").is_file():
        pytest.skip("no such rung in this checkout")
    d = SGEMM_TILES[rung]
    m, n, k = (128, 128, 24) if "WM" in d or rung == "vectorized" else (40, 70, 20)
    if "WM" in d:
        block = (d["BM"] // d["WM"]) * (d["BN"] // d["WN"]) * 32
        smem = d["BK"] * (d["BM"] + 4 + d["BN"]) * 4 * (2 if "GROUP" in d else 1)
    elif d:
        block, smem = d["BM"] * d["BN"] // (d["TM"] * d.get("TN", 1)), 0
    else:
        block, smem = 1024, 0
    grid = (-(-n // d.get("BN", 32)), -(-m // d.get("BM", 32)))
    rng = np.random.default_rng(7)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    text = toolchain.compile(f"07_register_reuse_{rung}", "sm_80", defines=d).ptx
    mine, gpu = both(text, f"sgemm_{rung}", grid, block,
                     (a, b, np.zeros((m, n), np.float32), np.int32(m), np.int32(n), np.int32(k)),
                     shared_mem=smem)
    assert same_bits(mine[2], gpu[2])


DIVERGE = r'''
extern "C" __global__ void dv(const int* trips, float* out)
{
    int t = threadIdx.x, lane = t & 31;
    float acc = t * 0.5f;
    for (int i = 0; i < trips[t]; ++i) {
        if ((i ^ lane) & 1) continue;
        acc = __fmaf_rn(acc, 1.0001f, i * 0.25f);
        if (acc > 40.0f) break;
    }
    acc += __shfl_xor_sync(0xffffffffu, acc, 3);
    unsigned b = __ballot_sync(0xffffffffu, acc > 10.0f);
    if (lane < 16) acc = __shfl_down_sync(0x0000ffffu, acc, 2, 8);
    __syncthreads();
    out[t] = acc + __popc(b);
}
'''


def test_divergent_control_flow_bit_identical():
    rng = np.random.default_rng(8)
    trips = rng.integers(0, 40, 128).astype(np.int32)
    text = toolchain.compile("dv.cu", "sm_80", source=HEADER + DIVERGE).ptx
    mine, gpu = both(text, "dv", 1, 128, (trips, np.zeros(128, np.float32)))
    assert same_bits(mine[1], gpu[1])


PRMT = r'''
extern "C" __global__ void pm(const unsigned* a, const unsigned* b, unsigned* out)
{
    int n = threadIdx.x;
    unsigned x = a[n], y = b[n], c = n, r;
    asm("prmt.b32.f4e %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(y), "r"(c)); out[7 * n] = r;
    asm("prmt.b32.b4e %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(y), "r"(c)); out[7 * n + 1] = r;
    asm("prmt.b32.rc8 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(y), "r"(c)); out[7 * n + 2] = r;
    asm("prmt.b32.ecl %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(y), "r"(c)); out[7 * n + 3] = r;
    asm("prmt.b32.ecr %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(y), "r"(c)); out[7 * n + 4] = r;
    asm("prmt.b32.rc16 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(y), "r"(c)); out[7 * n + 5] = r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(y), "r"(c * 0x1357u)); out[7 * n + 6] = r;
}
'''


def test_prmt_modes_bit_identical():
    rng = np.random.default_rng(9)
    a = rng.integers(0, 2**32, 32, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2**32, 32, dtype=np.uint64).astype(np.uint32)
    text = toolchain.compile("pm.cu", "sm_80", source=HEADER + PRMT).ptx
    mine, gpu = both(text, "pm", 1, 32, (a, b, np.zeros(7 * 32, np.uint32)))
    bad = np.argwhere(mine[2].reshape(32, 7) != gpu[2].reshape(32, 7))
    assert not len(bad), [(int(r), int(c)) for r, c in bad[:10]]


def test_wmma_products_close_to_the_gpu():
    """02's kernels (one WMMA product per kind, stored both ways) on every accumulator kind:
    bit for bit (integers exact; f16/bf16/tf32 inputs through the tensor-core model,
    fraglab.ptx.tcmodel; tf32 inputs truncated); f64 within 1e-15."""
    from test_ptx_kernels_more import MEM, accumulator_kinds, fitted_weights, wmma_operands
    text = toolchain.compile("02_forward_mapping", "sm_80").ptx
    names = set(ptx.Program(text).kernels)
    rng = np.random.default_rng(10)
    for kind, inp in accumulator_kinds():
        if f"fwd_store_{kind}" not in names or fitted_weights(kind) is None:
            continue
        (m, n, t), (A, B, C) = wmma_operands(kind, inp, rng, 100, 5000)
        rows, cols = 2 * m, 2 * n
        args = (A, B, C, np.zeros((rows, cols), MEM[t]), np.zeros((rows, cols), MEM[t]),
                np.int32(rows), np.int32(cols), fitted_weights(kind))
        mine, gpu = both(text, f"fwd_store_{kind}", (cols // n, rows // m), 32, args)
        a, b = mine[4].astype(np.float64), gpu[4].astype(np.float64)
        tol = {"s32": 0.0, "f64": 1e-15, "f32": 1e-5, "f16": 2e-3}[t]
        assert np.abs(a - b).max() <= tol * max(1.0, np.abs(b).max()), kind
        if t != "f64":
            bad = np.argwhere(mine[4] != gpu[4])
            assert not len(bad), (kind, [(int(r), int(c)) for r, c in bad[:5]])


MMA_MORE = r'''
extern "C" __global__ void f64mma(const double* A, const double* B, const double* Cm, double* D)
{
    int l = threadIdx.x;
    double a = A[l], b = B[l], c0 = Cm[2 * l], c1 = Cm[2 * l + 1], d0, d1;
    asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%4, %5};"
                 : "=d"(d0), "=d"(d1) : "d"(a), "d"(b), "d"(c0), "d"(c1));
    D[2 * l] = d0; D[2 * l + 1] = d1;
}
extern "C" __global__ void s8mma(const unsigned* A, const unsigned* B, const int* Cm, int* D)
{
    int l = threadIdx.x;
    int d[4];
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%10, %11, %12, %13};"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(A[4 * l]), "r"(A[4 * l + 1]), "r"(A[4 * l + 2]), "r"(A[4 * l + 3]),
                   "r"(B[2 * l]), "r"(B[2 * l + 1]),
                   "r"(Cm[4 * l]), "r"(Cm[4 * l + 1]), "r"(Cm[4 * l + 2]), "r"(Cm[4 * l + 3]));
    for (int i = 0; i < 4; ++i) D[4 * l + i] = d[i];
}
'''


def test_mma_f64_and_s8_match_the_gpu():
    rng = np.random.default_rng(11)
    text = toolchain.compile("mm.cu", "sm_80", source=HEADER + MMA_MORE).ptx
    args = (rng.standard_normal(32), rng.standard_normal(32), rng.standard_normal(64), np.zeros(64))
    mine, gpu = both(text, "f64mma", 1, 32, args)
    np.testing.assert_allclose(mine[3], gpu[3], rtol=1e-14, atol=1e-14)
    args = (rng.integers(0, 2**32, 128, dtype=np.uint64).astype(np.uint32),
            rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32),
            rng.integers(-10**6, 10**6, 128).astype(np.int32), np.zeros(128, np.int32))
    mine, gpu = both(text, "s8mma", 1, 32, args)
    assert same_bits(mine[3], gpu[3])


COLLECTIVES = r'''
extern "C" __global__ void co(const int* v, unsigned* out)
{
    int lane = threadIdx.x & 31;
    int x = v[threadIdx.x];
    unsigned* o = out + 12 * threadIdx.x;
    o[0] = __all_sync(0xffffffffu, x > -3);
    o[1] = __any_sync(0xffffffffu, x == 3);
    o[2] = __ballot_sync(0xffffffffu, x & 1);
    o[3] = __match_any_sync(0xffffffffu, x);
    int pred;
    o[4] = __match_all_sync(0xffffffffu, x & 0xF0000, &pred);
    o[5] = pred;
    o[6] = __reduce_add_sync(0xffffffffu, (unsigned)x);
    o[7] = (unsigned)__reduce_min_sync(0xffffffffu, x);
    o[8] = __reduce_or_sync(0xffffffffu, (unsigned)x);
    o[9] = 0;
    if (lane & 1) o[9] = __ballot_sync(0xaaaaaaaau, x > 0);
    o[10] = (unsigned)__shfl_sync(0xffffffffu, x, x & 31);
    o[11] = __popc(__activemask());
}
'''


def test_collectives_bit_identical():
    rng = np.random.default_rng(12)
    v = rng.integers(-5, 6, 64).astype(np.int32)
    text = toolchain.compile("co.cu", "sm_80", source=HEADER + COLLECTIVES).ptx
    mine, gpu = both(text, "co", 1, 64, (v, np.zeros(12 * 64, np.uint32)))
    bad = np.argwhere(mine[1].reshape(64, 12) != gpu[1].reshape(64, 12))
    assert not len(bad), [(int(r), int(c)) for r, c in bad[:10]]
