"""The PTX interpreter on chapters 01, 02, 04, 06 and FA-1 (kernels compiled for sm_80), checked
against NumPy and the course's recorded fragment layouts. CPU only."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fraglab import ptx

from test_ptx_kernels import LAYOUTS, attention, half_inputs, layout, program, rel_err

MEM = {"f16": np.float16, "f32": np.float32, "s32": np.int32, "f64": np.float64, "s8": np.int8,
       "u8": np.uint8, "tf32": np.float32}


def _kind_of(kernel: str, prefix: str) -> str:
    name = kernel[len(prefix):]
    for suffix in ("_f16in", "_bf16in", "_s8in", "_u8in", "_tf32in", "_f64in"):
        if name.endswith(suffix) and name[:-len(suffix)] in LAYOUTS:
            return name[:-len(suffix)]
    return name


# ---- 01_tracer: every fragment kind, both ways --------------------------------------------------

def _tracer_kernels():
    names = program("01_tracer").kernels      # a compile error fails collection, loudly
    return [k for k in names if k.startswith(("trace_load_", "trace_mma_"))]


@pytest.mark.parametrize("kernel", _tracer_kernels())
def test_tracer_recovers_recorded_layout(kernel):
    prefix = "trace_load_" if kernel.startswith("trace_load_") else "trace_mma_"
    kind = _kind_of(kernel, prefix)
    if kind not in LAYOUTS:
        pytest.skip(f"no recorded layout for {kind}")
    e = LAYOUTS[kind]
    rows, cols, ne = e["rows"], e["cols"], e["num_elements"]
    want = layout(kind)
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    for axis, enc in ((0, r), (1, c)):          # two passes: rows, then columns (exact in s8)
        out = np.full(32 * ne, np.nan, np.float32)
        ptx.launch(program("01_tracer"), kernel, 1, 32, (enc.astype(np.float32), out))
        assert (out.reshape(32, ne) == want[..., axis]).all(), (kernel, axis)


# ---- 02_forward_mapping -------------------------------------------------------------------------

def accumulator_kinds():
    """(kind, input type) of every accumulator kind, from kernels/fragment_kinds.cuh."""
    import re
    from pathlib import Path
    text = (Path(__file__).resolve().parent.parent / "kernels" / "fragment_kinds.cuh").read_text()
    body = text[text.index("#define FRAGLAB_ACCUMULATOR_KINDS"):]
    body = body[:body.index("\n\n")]
    return re.findall(r"X\(\w+,\s*(acc_\w+),\s*\d+,\s*\d+,\s*\d+,\s*\w+,\s*\d+,\s*(\w+)\)", body)


def fitted_weights(kind):
    """The bit-affine formula of a recorded layout as the kernel's 2 x 10 weights, or None."""
    lay = layout(kind)
    ne = lay.shape[1]
    w = np.zeros((2, 10), np.int32)
    for j in range(2):
        base = lay[0, 0, j]
        w[j, 0] = base
        for b in range(5):
            w[j, 1 + b] = lay[1 << b, 0, j] - base
        for b in range(4):
            w[j, 6 + b] = lay[0, 1 << b, j] - base if (1 << b) < ne else 0
    lanes, regs = np.meshgrid(np.arange(32), np.arange(ne), indexing="ij")
    bits = np.concatenate([(lanes[..., None] >> np.arange(5)) & 1, (regs[..., None] >> np.arange(4)) & 1], -1)
    pred = w[:, :1].T[None] + np.einsum("lrb,jb->lrj", bits, w[:, 1:])
    return w if (pred == lay).all() else None


def wmma_operands(kind, inp, rng, lim, c_lim):
    """(m, n, accumulator type) of an accumulator kind, and random A (2m x k), B (k x 2n) of type
    `inp` and C (2m x 2n): integers below `lim` (from -lim, or 0 for u8; C within +-c_lim), else
    standard normal."""
    m, n, k = (int(x) for x in kind.split("_")[1].split("x"))
    t = kind.split("_")[2]
    rows, cols = 2 * m, 2 * n
    if inp in ("s8", "u8"):
        A = rng.integers(0 if inp == "u8" else -lim, lim, (rows, k)).astype(MEM[inp])
        B = rng.integers(0 if inp == "u8" else -lim, lim, (k, cols)).astype(MEM[inp])
        C = rng.integers(-c_lim, c_lim, (rows, cols)).astype(np.int32)
    else:
        A = rng.standard_normal((rows, k)).astype(MEM[inp])
        B = rng.standard_normal((k, cols)).astype(MEM[inp])
        C = rng.standard_normal((rows, cols)).astype(MEM[t])
    return (m, n, t), (A, B, C)


def _fwd_cases():
    try:
        names = set(program("02_forward_mapping").kernels)
    except Exception:                   # pragma: no cover - shown by the coverage test
        return []
    return [(k, inp, f) for k, inp in accumulator_kinds() for f in ("weights", "eq12")
            if (f"fwd_store_eq12_{k}" if f == "eq12" else f"fwd_store_{k}") in names]


@pytest.mark.parametrize("kind,inp,formula", _fwd_cases())
def test_forward_mapping_store(kind, inp, formula):
    name = f"fwd_store_eq12_{kind}" if formula == "eq12" else f"fwd_store_{kind}"
    (m, n, t), (A, B, C) = wmma_operands(kind, inp, np.random.default_rng(2), 5, 50)
    rows, cols = 2 * m, 2 * n
    out_ref = np.zeros((rows, cols), MEM[t])
    out_fwd = np.zeros((rows, cols), MEM[t])
    args = (A, B, C, out_ref, out_fwd, np.int32(rows), np.int32(cols))
    if formula == "weights":
        w = fitted_weights(kind)
        if w is None:
            pytest.skip(f"the recorded {kind} layout is not bit-affine")
        args = args + (w,)
    ptx.launch(program("02_forward_mapping"), name, (cols // n, rows // m), 32, args)
    assert (out_ref == out_fwd).all()
    Af, Bf = A.astype(np.float64), B.astype(np.float64)
    if inp == "tf32":
        Af = (A.view(np.uint32) & 0xFFFFE000).view(np.float32).astype(np.float64)
        Bf = (B.view(np.uint32) & 0xFFFFE000).view(np.float32).astype(np.float64)
    ref = Af @ Bf + C
    np.testing.assert_allclose(out_ref.astype(np.float64), ref, rtol=2e-3, atol=2e-2)


# ---- 04_microbenchmark --------------------------------------------------------------------------

@pytest.mark.parametrize("way", ["smem", "regs"])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("clock", [False, True])
def test_microbenchmark_rowmax(way, dtype, clock):
    n_tiles = 3
    rng = np.random.default_rng(6)
    a = rng.standard_normal((n_tiles, 16, 16)).astype(np.float32)
    b = rng.standard_normal((n_tiles, 16, 16)).astype(np.float32)
    (ra, rb), (ea, eb) = half_inputs(dtype, a, b)
    rows = np.full((n_tiles, 16), np.nan, np.float32)
    name = f"rowmax_{way}_{dtype}" + ("_clock" if clock else "")
    cycles = np.full(n_tiles, -7, np.int64)
    args = (ra, rb, rows, cycles, np.int32(n_tiles), np.uint32(0)) if clock else \
        (ra, rb, rows, np.int32(n_tiles))
    ptx.launch(program("04_microbenchmark"), name, n_tiles, 32, args)
    np.testing.assert_allclose(rows, (ea @ eb).max(axis=2), rtol=1e-5, atol=1e-4)
    if clock:          # %clock64 counts the warp's instructions: positive and deterministic
        assert (cycles > 0).all() and (cycles == cycles[0]).all()


# ---- 06_layout_codegen --------------------------------------------------------------------------

def _codegen_kernels(prefix):
    try:
        return [k for k in program("06_layout_codegen").kernels if k.startswith(prefix)]
    except Exception:                   # pragma: no cover - shown by the coverage test
        return []


def _acc(kind, n_tiles, rng):
    m, n, _ = (int(x) for x in kind.split("_")[1].split("x"))
    t = kind.split("_")[2]
    if t == "s32":
        return rng.integers(-1000, 1000, (n_tiles, m, n)).astype(np.int32)
    return rng.standard_normal((n_tiles, m, n)).astype(MEM[t])


def _codegen_case(kernel, prefix, n_tiles, seed):
    """A reduce_/bcast_ kernel's random accumulator tiles, its NumPy reduction, the tolerance."""
    kind, op = kernel[len(prefix):].rsplit("_", 1)
    acc = _acc(kind, n_tiles, np.random.default_rng(seed))
    f = {"max": np.max, "min": np.min, "sum": np.sum}[op]
    return acc, f, 2e-2 if acc.dtype == np.float16 else 1e-5


@pytest.mark.parametrize("kernel", _codegen_kernels("reduce_"))
def test_codegen_reduce(kernel):
    n_tiles = 5
    acc, f, tol = _codegen_case(kernel, "reduce_", n_tiles, seed=8)
    rows = np.zeros(acc.shape[:2], acc.dtype)
    cols = np.zeros((n_tiles, acc.shape[2]), acc.dtype)
    ptx.launch(program("06_layout_codegen"), kernel, 2, 128, (acc, rows, cols, np.int32(n_tiles)))
    np.testing.assert_allclose(rows.astype(np.float64), f(acc.astype(np.float64), axis=2),
                               rtol=tol, atol=tol)
    np.testing.assert_allclose(cols.astype(np.float64), f(acc.astype(np.float64), axis=1),
                               rtol=tol, atol=tol)


@pytest.mark.parametrize("kernel", _codegen_kernels("bcast_"))
def test_codegen_bcast(kernel):
    n_tiles = 2
    acc, f, tol = _codegen_case(kernel, "bcast_", n_tiles, seed=9)
    copy = np.zeros_like(acc)
    bcast = np.zeros_like(acc)
    ptx.launch(program("06_layout_codegen"), kernel, 1, 128, (acc, copy, bcast, np.int32(n_tiles)))
    assert (copy == acc).all()
    want = f(acc.astype(np.float64), axis=2, keepdims=True) + np.zeros(acc.shape)
    np.testing.assert_allclose(bcast.astype(np.float64), want, rtol=tol, atol=tol)


# ---- 05_flash_attention_fa1 ---------------------------------------------------------------------

def fa1_smem_bytes(d):
    try:                                  # the topic's own figure, when it provides one
        from fraglab.flash_attention.kernels import fa1_smem_bytes as topic_bytes
        return topic_bytes(d)
    except (ImportError, AttributeError):
        return 16 * (d + 4) * 4 + 16 * (d + 8) * 2 + 16 * 20 * 4 + 16 * 24 * 2 + 3 * 16 * 4


@pytest.mark.parametrize("variant", ["paper_baseline", "fair_baseline", "inregister"])
def test_fa1(variant):
    d, n = 64, 32
    rng = np.random.default_rng(10)
    q, k, v = (rng.standard_normal((1, 1, n, d)).astype(np.float16) for _ in range(3))
    o = np.full_like(q, np.nan)
    scale = 1 / math.sqrt(d)
    ptx.launch(program("05_flash_attention_fa1"), f"fa1_{variant}_d{d}", (n // 16, 1), 32,
               (q, k, v, o, np.int32(n), np.float32(scale * math.log2(math.e))),
               shared_mem=fa1_smem_bytes(d))
    ref = attention(*(x[0, 0].astype(np.float64) for x in (q, k, v)), False, scale)
    assert rel_err(o[0, 0], ref) < 2e-3


# ---- 07_register_reuse: the SGEMM ladder (the rungs whose launch needs only the tile sizes) ----

SGEMM_TILES = {"tile1d": dict(BM=64, BN=64, BK=8, TM=8),
               "tile2d": dict(BM=128, BN=128, BK=8, TM=8, TN=8),
               "vectorized": dict(BM=128, BN=128, BK=8, TM=8, TN=8),
               "warptile": dict(BM=128, BN=128, BK=8, WM=32, WN=64, LM=4, MINB=2),
               "double_buffer": dict(BM=128, BN=128, BK=8, WM=32, WN=64, LM=4, MINB=2, GROUP=1),
               "autotuned": dict(BM=128, BN=128, BK=8, WM=64, WN=32, LM=4, MINB=2, GROUP=8)}


@pytest.mark.parametrize("rung,shape", [("naive", (20, 40, 12)), ("coalesced", (20, 40, 12)),
                                        ("smem", (30, 40, 20)), ("tile1d", (40, 70, 12)),
                                        ("tile2d", (100, 128, 12)), ("vectorized", (128, 128, 8)),
                                        ("warptile", (128, 128, 8)),
                                        ("double_buffer", (128, 128, 16)),
                                        ("autotuned", (128, 128, 16))])
def test_sgemm_ladder(rung, shape):
    from pathlib import Path
    path = Path(__file__).resolve().parent.parent / "kernels" / f"07_register_reuse_{rung}.cu"
    if not path.is_file():
        pytest.skip(f"{path.name} is not in this checkout")
    m, n, k = shape
    smem = 0
    if rung in ("naive", "coalesced", "smem"):
        grid, block = (-(-n // 32), -(-m // 32)), 1024
        defines = {}
    else:
        d = defines = SGEMM_TILES[rung]
        grid = (-(-n // d["BN"]), -(-m // d["BM"]))
        if "WM" in d:
            block = (d["BM"] // d["WM"]) * (d["BN"] // d["WN"]) * 32
            smem = d["BK"] * (d["BM"] + 4 + d["BN"]) * 4 * (2 if "GROUP" in d else 1)
        else:
            block = d["BM"] * d["BN"] // (d["TM"] * d.get("TN", 1))
    rng = np.random.default_rng(16)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = np.full((m, n), np.nan, np.float32)
    from fraglab import toolchain
    prog = ptx.Program(toolchain.compile(f"07_register_reuse_{rung}", "sm_80", defines=defines).ptx)
    ptx.launch(prog, f"sgemm_{rung}", grid, block,
               (a, b, c, np.int32(m), np.int32(n), np.int32(k)), shared_mem=smem)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
