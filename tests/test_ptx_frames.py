"""The interpreter's diagnostics name the learner's line when the fault happens in code inlined
from CUDA's headers (cuda_fp16.hpp, sm_*_intrinsics.hpp, crt/mma.hpp, cooperative_groups) or
from the course's headers (kernels/*.cuh): the whole `.loc ... inlined_at` chain is kept and the
"CUDA source:" line starts with the innermost frame in the kernel's own file. CPU only."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from fraglab import ptx, toolchain
from fraglab.ptx.frames import function_name, is_builtin, source_line, source_of

KERNELS = Path(__file__).resolve().parents[1] / "kernels"
HEADER = "#include <cuda_fp16.h>\n"


def build(src: str, options=()) -> ptx.Program:
    return ptx.Program(toolchain.compile("frames.cu", "sm_80", source=HEADER + src,
                                         options=tuple(options)).ptx)


def line_of(src: str, marker: str) -> int:
    for i, ln in enumerate((HEADER + src).splitlines(), 1):
        if marker in ln:
            return i
    raise AssertionError(marker)


def header_line(name: str, text: str) -> int:
    for i, ln in enumerate((KERNELS / name).read_text().splitlines(), 1):
        if text in ln:
            return i
    raise AssertionError(text)


def cuda_source(exc) -> str:
    """The 'CUDA source:' line of an interpreter error."""
    m = re.search(r"^  CUDA source: (.*)$", str(exc), re.M)
    assert m, str(exc)
    return m.group(1)


# ---- CUDA's own headers ------------------------------------------------------------------------

def test_shfl_sync_with_a_wrong_mask_names_the_learners_line():
    src = r'''
extern "C" __global__ void k(const float* in, float* out)
{
    float v = in[threadIdx.x];
    v += __shfl_sync(0x0000ffffu, v, threadIdx.x ^ 1);       // BADMASK
    out[threadIdx.x] = v;
}'''
    with pytest.raises(ptx.CollectiveError) as e:
        ptx.launch(build(src), "k", 1, 32, (np.zeros(32, np.float32), np.zeros(32, np.float32)))
    assert "member mask" in str(e.value)
    assert cuda_source(e.value).startswith(f"frames.cu:{line_of(src, 'BADMASK')}")


def test_half_ldg_out_of_bounds_names_the_learners_line():
    # __ldg(const __half*) is cuda_fp16.hpp's (inline PTX ld.global.nc.b16)
    src = r'''
extern "C" __global__ void k(const __half* p, float* out)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    __half h = __ldg(&p[i + 1]);                               // LDG
    out[i] = __half2float(__hadd(h, h));
}'''
    with pytest.raises(ptx.MemoryAccessError) as e:
        ptx.launch(build(src), "k", 2, 32, (np.zeros(64, np.float16), np.zeros(64, np.float32)))
    assert "out-of-bounds global load of 2 bytes" in str(e.value)
    assert e.value.block == (1, 0, 0) and e.value.lane == 31
    assert cuda_source(e.value).startswith(f"frames.cu:{line_of(src, 'LDG')}")


def test_wmma_load_out_of_bounds_is_reported_at_the_call_with_the_header_frame():
    src = r'''
#include <mma.h>
using namespace nvcuda;
extern "C" __global__ void k(const __half* a, float* out, int tile)
{
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
    wmma::load_matrix_sync(fa, a + tile * 256, 16);            // LOAD
    out[threadIdx.x] = __half2float(fa.x[0]);
}'''
    with pytest.raises(ptx.MemoryAccessError) as e:
        ptx.launch(build(src), "k", 1, 32,
                   (np.zeros(256, np.float16), np.zeros(32, np.float32), np.int32(1)))
    assert re.fullmatch(rf"frames\.cu:{line_of(src, 'LOAD')} \(in nvcuda::wmma::load_matrix_sync, "
                        r"CUDA header crt/mma\.hpp:\d+\)", cuda_source(e.value))
    assert e.value.source == cuda_source(e.value)


def test_cooperative_groups_tile_shuffle_in_divergent_code_names_the_learners_line():
    src = r'''
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void k(const float* in, float* out)
{
    auto tile = cg::tiled_partition<16>(cg::this_thread_block());
    float v = in[threadIdx.x];
    if (threadIdx.x < 24)
        v += tile.shfl(v, 0);                                  // TILE
    out[threadIdx.x] = v;
}'''
    prog = build(src)                   # <cooperative_groups.h>: CCCL from fraglab.tools
    with pytest.raises(ptx.CollectiveError) as e:
        ptx.launch(prog, "k", 1, 32, (np.zeros(32, np.float32), np.zeros(32, np.float32)))
    where = cuda_source(e.value)
    assert where.startswith(f"frames.cu:{line_of(src, 'TILE')} (in cooperative_groups::"), where
    assert "CUDA header cooperative_groups" in where and "__v1" not in where


# ---- the course's headers ----------------------------------------------------------------------

def test_course_helper_with_a_bad_pointer_names_the_call_and_the_helper_line():
    src = r'''
#include "sm80.cuh"
extern "C" __global__ void k(const __half* src, float* out, int row)
{
    __shared__ __align__(16) __half tile[16 * 8];
    unsigned dst = (unsigned)__cvta_generic_to_shared(tile) + 16 * (threadIdx.x % 16);
    sm80::cp_async16(dst, src + 8 * (row + threadIdx.x % 16), true);   // COPY
    sm80::cp_async_wait_all();
    __syncthreads();
    out[threadIdx.x] = __half2float(tile[threadIdx.x]);
}'''
    with pytest.raises(ptx.MemoryAccessError) as e:
        ptx.launch(build(src), "k", 1, 32,
                   (np.zeros(16 * 8, np.float16), np.zeros(32, np.float32), np.int32(4)))
    m = re.fullmatch(rf"frames\.cu:{line_of(src, 'COPY')} "
                     r"\(in sm80::cp_async16, kernels/sm80\.cuh:(\d+)\)", cuda_source(e.value))
    assert m, cuda_source(e.value)
    first, last = header_line("sm80.cuh", "void cp_async16"), header_line("sm80.cuh",
                                                                          "void cp_async_commit")
    assert first <= int(m.group(1)) < last               # a line of cp_async16's body
    assert e.value.lane == 12                              # row 4 + 12 = 16: one past the end


def test_course_helper_reading_unwritten_shared_memory_names_the_call():
    src = r'''
#include "sm80.cuh"
extern "C" __global__ void k(float* out)
{
    __shared__ __align__(16) unsigned short tile[32 * 8];
    for (int i = threadIdx.x; i < 31 * 8; i += 32) tile[i] = 1;  // row 31 is never written
    __syncwarp();
    unsigned r[4];
    sm80::ldsm4<false>(r, (unsigned)__cvta_generic_to_shared(tile) + 16 * threadIdx.x);   // LDSM
    out[threadIdx.x] = (float)(r[0] + r[1] + r[2] + r[3]);
}'''
    with pytest.raises(ptx.UninitializedRead) as e:
        ptx.launch(build(src), "k", 1, 32, (np.zeros(32, np.float32),))
    assert re.fullmatch(rf"frames\.cu:{line_of(src, 'LDSM')} "
                        r"\(in sm80::ldsm4, kernels/sm80\.cuh:\d+\)", cuda_source(e.value)), \
        cuda_source(e.value)


TWO_LEVEL = r'''
#include "wmma_tile.cuh"
__device__ void stage(const __half* a, const __half* b, int t, float* out)
{
    Acc16x16 c;
    tile_product(a, b, t, c);                                  // HELPER
    nvcuda::wmma::store_matrix_sync(out, c, 16, nvcuda::wmma::mem_row_major);
}
extern "C" __global__ void k(const __half* a, const __half* b, float* out, int tiles)
{
    for (int t = 0; t <= tiles; ++t)                            // off by one: t == tiles
        stage(a, b, t, out);                                   // CALL
}'''


def test_two_level_chain_learner_then_course_header_then_cuda_header():
    prog = build(TWO_LEVEL)
    with pytest.raises(ptx.MemoryAccessError) as e:
        ptx.launch(prog, "k", 1, 32, (np.zeros(2 * 256, np.float16), np.zeros(2 * 256, np.float16),
                                      np.zeros(256, np.float32), np.int32(2)))
    where = cuda_source(e.value)
    wmma_line = header_line("wmma_tile.cuh", "load_matrix_sync(fa")
    assert re.fullmatch(rf"frames\.cu:{line_of(TWO_LEVEL, 'HELPER')} "
                        rf"\(inlined at frames\.cu:{line_of(TWO_LEVEL, 'CALL')}; "
                        rf"in tile_product, kernels/wmma_tile\.cuh:{wmma_line}; "
                        r"in nvcuda::wmma::load_matrix_sync, CUDA header crt/mma\.hpp:\d+\)",
                        where), where
    assert "argument 0" in str(e.value)                   # a, tile 2 of 2


def test_chain_is_kept_and_lines_counted_and_inspected_at_the_learners_line():
    prog = build(TWO_LEVEL)
    k = prog.module.kernels["k"]
    loads = [i for i in k.instrs if i.opcode.startswith("wmma.load.a")]
    assert loads
    fr = loads[0].loc.frames()
    files = [prog.files[f.file] for f in fr]
    assert len(fr) == 4 and is_builtin(files[0]) and files[1].endswith("kernels/wmma_tile.cuh")
    assert files[2] == files[3] and files[3].endswith("frames.cu")
    assert [function_name(f.func) for f in fr] == ["nvcuda::wmma::load_matrix_sync",
                                                   "tile_product", "stage", None]
    assert fr[3].line == line_of(TWO_LEVEL, "CALL") and fr[2].line == line_of(TWO_LEVEL, "HELPER")
    assert source_line(loads[0], prog.files) == ("frames.cu", line_of(TWO_LEVEL, "HELPER"))

    args = (np.zeros(2 * 256, np.float16), np.zeros(2 * 256, np.float16),
            np.zeros(256, np.float32), np.int32(1))
    res = ptx.launch(prog, "k", 1, 32, args)
    lines = res.line_counts()
    assert sum(lines.values()) == res.steps
    assert all(key.startswith("frames.cu:") for key in lines), lines
    helper = line_of(TWO_LEVEL, "HELPER")
    assert sum(n for key, n in lines.items() if key.startswith(f"frames.cu:{helper} ")) >= 2

    # registers_at the learner's call line stops at the first instruction inlined from it; a line
    # of CUDA's header counts only when its file is named
    snap = ptx.registers_at(prog, "k", helper, file="frames.cu", grid=1, block=32, args=args)
    assert f"line {helper}," in snap.where and snap.active.all()
    crt = fr[0].line
    assert crt > len((HEADER + TWO_LEVEL).splitlines())
    with pytest.raises(ValueError, match="no instruction"):
        ptx.registers_at(prog, "k", crt, grid=1, block=32, args=args)
    ptx.registers_at(prog, "k", crt, file="crt/mma.hpp", grid=1, block=32, args=args)


# ---- the .loc chain and the rule, on PTX written by hand ---------------------------------------

def _debug_str(*names: str) -> str:
    out = []
    for i, n in enumerate(names):
        out.append(f"$L__info_string{i}:\n.b8 " + ",".join(str(b) for b in n.encode() + b"\0"))
    return "\t.section\t.debug_str\n\t{\n" + "\n".join(out) + "\n\t}\n"


HAND = r'''
.version 8.0
.target sm_80
.address_size 64

.visible .entry k(
	.param .u32 k_param_0
)
{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<8>;

	.loc	1 10 0
	ld.param.u32 	%r1, [k_param_0];
	.loc	1 12 5
	mov.u32 	%r2, %laneid;
	.loc	2 150 3, function_name $L__info_string0, inlined_at 1 12 5
	shfl.sync.idx.b32 	%r3|%p1, %r2, 0, 31, %r1;
	.loc	1 20 5
	.loc	3 17 5, function_name $L__info_string1, inlined_at 1 20 5
	.loc	2 150 3, function_name $L__info_string0, inlined_at 3 17 5
	shfl.sync.idx.b32 	%r4|%p2, %r2, 1, 31, %r1;
	.loc	1 30 5
	.loc	3 17 5, function_name $L__info_string1, inlined_at 1 30 5
	.loc	2 150 3, function_name $L__info_string0, inlined_at 3 17 5
	shfl.sync.idx.b32 	%r5|%p2, %r2, 2, 31, %r1;
	.loc	1 31 1
	ret;
}
	.file	1 "my_kernel.cu"
	.file	2 "/usr/local/cuda/include/sm_30_intrinsics.hpp"
	.file	3 "/somewhere/fraglab/kernels/helpers.cuh"
''' + _debug_str("_Z11__shfl_syncjiii", "_ZN6course4pickEji")


def test_hand_written_chain_resolves_each_call_site_and_names_functions():
    prog = ptx.Program(HAND)
    shfl = [i for i in prog.module.kernels["k"].instrs if i.opcode.startswith("shfl")]
    assert [source_of(i, prog.files) for i in shfl] == [
        "my_kernel.cu:12 (in __shfl_sync, CUDA header sm_30_intrinsics.hpp:150)",
        "my_kernel.cu:20 (in course::pick, kernels/helpers.cuh:17; "
        "in __shfl_sync, CUDA header sm_30_intrinsics.hpp:150)",
        "my_kernel.cu:30 (in course::pick, kernels/helpers.cuh:17; "
        "in __shfl_sync, CUDA header sm_30_intrinsics.hpp:150)"]
    assert shfl[1].loc.inlined_at == (3, 17, 5) and shfl[1].loc.caller.inlined_at == (1, 20, 5)


def test_hand_written_shuffle_with_a_bad_mask():
    with pytest.raises(ptx.CollectiveError) as e:
        ptx.launch(ptx.Program(HAND), "k", 1, 32, (np.uint32(0xFFFF),))
    assert cuda_source(e.value) == \
        "my_kernel.cu:12 (in __shfl_sync, CUDA header sm_30_intrinsics.hpp:150)"


def test_which_files_are_cudas_own():
    for path in ("/usr/local/cuda/include/cuda_fp16.hpp", "/usr/local/cuda-12.4/include/mma.h",
                 "/opt/x/include/crt/mma.hpp", "/x/site-packages/nvidia/cuda_runtime/include/"
                 "cooperative_groups/details/helpers.h", "sm_30_intrinsics.hpp",
                 "/usr/local/cuda/targets/x86_64-linux/include/cuda_bf16.hpp",
                 "/x/include/cccl/cuda/std/__cuda/api_wrapper.h", "/x/include/nv/target"):
        assert is_builtin(path), path
    for path in ("my_kernel.cu", "/work/main/kernels/fa2_mma.cuh", "/work/main/kernels/common.cuh",
                 "/content/cuda/lab.cu", "/home/me/mma_lab.cu", "09_instruction_diet_lab", None):
        assert not is_builtin(path), path


def test_function_names():
    assert function_name("_ZN6nvcuda4wmma16load_matrix_syncERNS0_8fragmentINS0_8matrix_aELi16ELi16"
                         "ELi16E6__halfNS0_9row_majorEEEPKS3_j") == "nvcuda::wmma::load_matrix_sync"
    assert function_name("_Z12tile_productI6__halfEvPKT_S3_iRN6nvcuda4wmma8fragmentINS4_11"
                         "accumulatorELi16ELi16ELi16EfvEE") == "tile_product"
    assert function_name("_Z7lane_idv") == "lane_id"
    assert function_name("_ZN6__halfC1Ef") == "__half::__half"
    assert function_name("_ZmlRK6__halfS1_") == "operator*"
    assert function_name("__nv_fast_expf") == "__nv_fast_expf"
    assert function_name("_Zbroken") == "_Zbroken"
