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
