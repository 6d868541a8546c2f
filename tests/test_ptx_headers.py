"""NVIDIA's own headers through the course's toolchain and the interpreter: every function that
cuda_fp16.h, cuda_bf16.h and cuda_fp8.h declare (math, arithmetic, comparisons, conversions,
shuffles, cache loads and stores, atomics), each called by a small kernel of one module compiled
with NVRTC for sm_80 and sm_90a; and CCCL (cooperative groups, cuda::barrier, cuda::pipeline). Each kernel either runs or is refused by name (UnsupportedInstruction); never a
syntax error of the parser (their inline assembly writes `.reg.b16 hl, hu;`). CPU only; the two
modules are cached on disk by the toolchain."""
from __future__ import annotations

import re

import numpy as np
import pytest

from fraglab import ptx, toolchain, tools
from fraglab.ptx import parse
from ptx_snippets import pointer_kernel

HEADERS = ("cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h")

# a declaration: `__CUDA_[HOSTDEVICE_]FP16|BF16|FP8_DECL__ <return type> <name>(<params>);`
_DECL = re.compile(r"^__CUDA_(?:HOSTDEVICE_)?(?:FP16|BF16|FP8)_DECL__\s+(?P<ret>[\w\s]+?)\s+"
                   r"(?P<name>\w+)\(\s*(?P<params>[^)]*)\);", re.M)
# arguments chosen by parameter name: a full mask, a shuffle's lane offset, fp8's saturation,
# format and rounding; a width left default
_BY_NAME = {"mask": "0xffffffffu", "delta": "1u", "srcLane": "1", "laneMask": "1",
            "saturate": "__NV_SATFINITE", "fp8_interpretation": "__NV_E4M3",
            "rounding": "cudaRoundZero"}

PRELUDE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
typedef unsigned long long u64;
template <class T> __device__ T get(const u64* p) { T v; memcpy(&v, p, sizeof(T)); return v; }
template <class T> __device__ void put(u64* p, T v) { u64 w = 0; memcpy(&w, &v, sizeof(T)); *p = w; }
"""


def declarations() -> list[tuple[str, str, str, list[str]]]:
    """(header, return type's last word, name, parameter declarations) of every function the two headers declare, from
    the header folder the toolchain compiles with."""
    out = []
    for h in HEADERS:
        path = next(d / h for d in tools.include_dirs() if (d / h).is_file())
        for m in _DECL.finditer(path.read_text()):
            params = [" ".join(p.split()) for p in m.group("params").split(",") if p.strip()]
            out.append((h, m.group("ret").split()[-1], m.group("name"), params))
    return out


def _argument(param: str, j: int) -> str | None:
    """The expression passed for one parameter declaration (None: left to its default)."""
    if "=" in param:
        return None
    words = param.replace("*", " * ").split()
    name = words[-1]
    if name in _BY_NAME:
        return _BY_NAME[name]
    ty = " ".join(w for w in words[:-1] if w != "const")
    if ty.endswith("*"):                         # a pointer: this lane's word of the scratch buffer
        return f"reinterpret_cast<{ty}>(s + i)"
    return f"get<{ty}>(a + 4 * i + {j})"


def module() -> tuple[str, list[tuple[str, str]]]:
    """The CUDA source (one kernel per declaration) and [(kernel, 'header: name(params)')]."""
    src, names = [PRELUDE], []
    for n, (h, ret, name, params) in enumerate(declarations()):
        args = [a for j, p in enumerate(params) if (a := _argument(p, j)) is not None]
        call = f"{name}({', '.join(args)})"
        k = f"k{n}_{name}"
        src.append(f'extern "C" __global__ void {k}(const u64* a, u64* o, u64* s) {{\n'
                   f"    int i = threadIdx.x;\n"
                   f"    {call if ret == 'void' else f'put(o + i, {call})'};\n}}\n")
        names.append((k, f"{h}: {name}({', '.join(params)})"))
    return "".join(src), names


def _inputs(rng) -> np.ndarray:
    """Four words a lane of f16 patterns of finite values in [-4, 4] (their bits read as every
    type the functions take)."""
    return rng.uniform(-4, 4, (32, 16)).astype(np.float16).view(np.uint64).copy()


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_fp16_bf16_and_fp8_header_functions_run_or_are_refused_by_name(arch, rng):
    src, names = module()
    assert len(names) > 300, "the declarations were not found in the headers"
    build = toolchain.compile("ptx_headers_fp16_bf16_fp8", arch, source=src)
    prog = ptx.Program(build.ptx)              # a syntax error here fails every function at once
    a = _inputs(rng)
    ran, refused, failed = [], [], []
    for k, what in names:
        o, s = np.zeros(32, np.uint64), np.zeros(32, np.uint64)
        try:
            ptx.launch(prog, k, 1, 32, (a, o, s))
            ran.append(what)
        except ptx.UnsupportedInstruction as e:         # refused by name: the opcode in the message
            opcode = (e.instr or "").split(" ")[0].lstrip("@!%p0123456789 ")
            (refused if opcode and f"`{opcode}`" in str(e) else failed).append(f"{what}: {e}")
        except ptx.PTXError as e:
            failed.append(f"{what}: {type(e).__name__}: {e}")
    assert not failed, "\n".join(failed)
    # with CUDA 12.9's headers, 425 of 480 run at sm_80 and 369 at sm_90a; the others are refused
    # for `set` on f16/f16x2 (comparisons, and the special cases of hexp, hlog, hsin, ...),
    # `atom.add.noftz` on f16/bf16 (x2) and, at sm_90a, `set` on bf16, `cvt.r*i.bf16.bf16` and
    # the fp8 conversions' `cvt.rn.satfinite.e4m3x2.f32` (sm_80 converts fp8 in software)
    assert len(ran) > 0.7 * len(names), "\n".join(refused)


def test_the_parser_reads_reg_declarations_without_a_space():
    """`.reg.b16 hl, hu;` inside braces, as cuda_fp16.hpp's h2exp2 writes it: the registers are
    declared in the block's scope and the kernel runs."""
    text = pointer_kernel("""    .reg .b32 %r<3>;
    .reg.b64 %rd<3>;""", """    mov.b32 %r1, 0x40003C00;
    {
    .reg.b16 hl, hu;
    mov.b32 {hl, hu}, %r1;
    ex2.approx.f16 hl, hl;
    ex2.approx.f16 hu, hu;
    mov.b32 %r2, {hl, hu};
    }
    st.global.u32 [%rd1], %r2;""")
    prog = ptx.Program(text)
    out = np.zeros(2, np.uint32)
    ptx.launch(prog, "k", 1, 32, (out,))
    assert out[0] == 0x44004000                 # (2^1, 2^2) from (1, 2)
    assert [r for r, _ in parse.parse(text).kernels["k"].regs if r.startswith("h")]


# ---- CCCL: cooperative groups, cuda::barrier, cuda::pipeline in a learner's kernel -------------

CCCL = r'''
#include <cooperative_groups.h>
#include <cuda/barrier>
#include <cuda/pipeline>
namespace cg = cooperative_groups;
extern "C" __global__ void tile_sum(const float* x, float* out) {
    auto tile = cg::tiled_partition<8>(cg::this_thread_block());
    float v = x[threadIdx.x];
    for (int d = 4; d > 0; d /= 2) v += tile.shfl_down(v, d);
    if (tile.thread_rank() == 0) out[threadIdx.x / 8] = v;
}
extern "C" __global__ void barrier_copy(const float* x, float* out) {
    __shared__ float s[64];
    __shared__ cuda::barrier<cuda::thread_scope_block> bar;
    auto block = cg::this_thread_block();
    if (block.thread_rank() == 0) init(&bar, block.size());
    block.sync();
    cuda::memcpy_async(block, s, x, sizeof(s), bar);
    bar.arrive_and_wait();
    out[threadIdx.x] = 2.0f * s[threadIdx.x];
}
extern "C" __global__ void pipeline_copy(const float* x, float* out) {
    __shared__ float s[64];
    auto pipe = cuda::make_pipeline();
    pipe.producer_acquire();
    cuda::memcpy_async(s + threadIdx.x, x + threadIdx.x, sizeof(float), pipe);
    pipe.producer_commit();
    pipe.consumer_wait();
    out[threadIdx.x] = s[threadIdx.x] + 1.0f;
    pipe.consumer_release();
}
'''


def test_the_toolchain_finds_cccl():
    """fraglab.tools names a CCCL folder (libcu++'s <nv/target>, <cuda/barrier>) among the
    include folders on any machine that compiles: a CUDA toolkit's, a wheel's or CuPy's copy."""
    d = tools.cccl_dir()
    assert d is not None and d in tools.include_dirs()
    assert (d / "nv" / "target").is_file() and (d / "cuda" / "pipeline").is_file()


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_cooperative_groups_barrier_and_pipeline_compile_and_run(arch):
    """A learner's kernel that includes <cooperative_groups.h>, <cuda/barrier> and
    <cuda/pipeline> compiles through the course's toolchain with no option of its own, and runs
    on the interpreter: a tile of 8 lanes sums by shuffles, a block copies through
    cuda::memcpy_async on a cuda::barrier and on a cuda::pipeline."""
    prog = ptx.Program(toolchain.compile("ptx_headers_cccl", arch, source=CCCL).ptx)
    x = np.arange(64, dtype=np.float32)
    out = np.full(8, np.nan, np.float32)
    ptx.launch(prog, "tile_sum", 1, 64, (x, out))
    np.testing.assert_array_equal(out, x.reshape(8, 8).sum(1))
    for k, want in (("barrier_copy", 2 * x), ("pipeline_copy", x + 1)):
        out = np.full(64, np.nan, np.float32)
        ptx.launch(prog, k, 1, 64, (x, out))
        np.testing.assert_array_equal(out, want, err_msg=k)
