// The WMMA fragment kinds of the course: the ONE list on the CUDA side.
//
// A *kind* is one WMMA fragment type, fragment<use, M, N, K, T[, layout]>. Its name (e.g.
// acc_16x16x16_f32, a_16x16x16_f16_row) is the name fraglab.fragments.KINDS gives it, and every
// kernel that instantiates kinds (kernels/01_tracer.cu, kernels/02_forward_mapping.cu) builds its
// entry points from the X-macro lists below, so a kind is added or removed here and nowhere else
// in CUDA. tests/test_fragments.py parses these lists and checks that they equal the Python table
// (fraglab/fragments/catalogue.py), and that every kind's kernels are in the compiled cubins.
//
// Columns (every list row starts with GUARD):
//   GUARD  FRAGLAB_ANY_ARCH, or SM80_ONLY for kinds that need sm_80 (bf16, tf32, f64): the
//          kernel keeps its name on older targets but its body traps (common.cuh).
//   NAME   the kind's name, pasted into kernel names (trace_load_<NAME>, fwd_store_<NAME>, ...).
//   USE    matrix_a or matrix_b (input kinds; accumulators are all `accumulator`).
//   M N K  the WMMA shape.
//   T      the fragment's element type, as a tag (f32 f16 bf16 tf32 f64 s8 u8 s32; see below).
//   LAYOUT row or col (input kinds only).
//   NE     num_elements, as crt/mma.h declares it; kernels static_assert it (check_kind below).
//   IN     accumulators: the input type the GPU must support and the default mma input type.
#pragma once
#include <mma.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include "common.cuh"

#define FRAGLAB_ANY_ARCH(...) __VA_ARGS__

// X(GUARD, NAME, M, N, K, T, NE, IN)
#define FRAGLAB_ACCUMULATOR_KINDS(X) \
    X(FRAGLAB_ANY_ARCH, acc_16x16x16_f32, 16, 16, 16, f32, 8, f16) \
    X(FRAGLAB_ANY_ARCH, acc_16x16x16_f16, 16, 16, 16, f16, 8, f16) \
    X(FRAGLAB_ANY_ARCH, acc_16x16x16_s32, 16, 16, 16, s32, 8, s8) \
    X(FRAGLAB_ANY_ARCH, acc_32x8x16_f32, 32, 8, 16, f32, 8, f16) \
    X(FRAGLAB_ANY_ARCH, acc_32x8x16_f16, 32, 8, 16, f16, 8, f16) \
    X(FRAGLAB_ANY_ARCH, acc_32x8x16_s32, 32, 8, 16, s32, 8, s8) \
    X(FRAGLAB_ANY_ARCH, acc_8x32x16_f32, 8, 32, 16, f32, 8, f16) \
    X(FRAGLAB_ANY_ARCH, acc_8x32x16_f16, 8, 32, 16, f16, 8, f16) \
    X(FRAGLAB_ANY_ARCH, acc_8x32x16_s32, 8, 32, 16, s32, 8, s8) \
    X(SM80_ONLY, acc_16x16x8_f32, 16, 16, 8, f32, 8, tf32) \
    X(SM80_ONLY, acc_8x8x4_f64, 8, 8, 4, f64, 2, f64)

// Accumulators the tracer also multiplies through a second input type (kernel trace_mma_<NAME>_
// <IN>in): bf16, where the paper's row*100 + col tracer is not exact.
// X(GUARD, NAME, M, N, K, T, NE, IN)
#define FRAGLAB_EXTRA_MMA_INPUTS(X) \
    X(SM80_ONLY, acc_16x16x16_f32, 16, 16, 16, f32, 8, bf16) \
    X(SM80_ONLY, acc_32x8x16_f32, 32, 8, 16, f32, 8, bf16) \
    X(SM80_ONLY, acc_8x32x16_f32, 8, 32, 16, f32, 8, bf16)

// Input fragments. f16 keeps the Volta sizes (16 values a lane for every shape); the later types
// hold tile/32 values a lane.
// X(GUARD, NAME, USE, M, N, K, T, LAYOUT, NE)
#define FRAGLAB_INPUT_KINDS(X) \
    X(FRAGLAB_ANY_ARCH, a_16x16x16_f16_row, matrix_a, 16, 16, 16, f16, row, 16) \
    X(FRAGLAB_ANY_ARCH, a_16x16x16_f16_col, matrix_a, 16, 16, 16, f16, col, 16) \
    X(FRAGLAB_ANY_ARCH, b_16x16x16_f16_row, matrix_b, 16, 16, 16, f16, row, 16) \
    X(FRAGLAB_ANY_ARCH, b_16x16x16_f16_col, matrix_b, 16, 16, 16, f16, col, 16) \
    X(FRAGLAB_ANY_ARCH, a_32x8x16_f16_row, matrix_a, 32, 8, 16, f16, row, 16) \
    X(FRAGLAB_ANY_ARCH, a_32x8x16_f16_col, matrix_a, 32, 8, 16, f16, col, 16) \
    X(FRAGLAB_ANY_ARCH, b_32x8x16_f16_row, matrix_b, 32, 8, 16, f16, row, 16) \
    X(FRAGLAB_ANY_ARCH, b_32x8x16_f16_col, matrix_b, 32, 8, 16, f16, col, 16) \
    X(FRAGLAB_ANY_ARCH, a_8x32x16_f16_row, matrix_a, 8, 32, 16, f16, row, 16) \
    X(FRAGLAB_ANY_ARCH, a_8x32x16_f16_col, matrix_a, 8, 32, 16, f16, col, 16) \
    X(FRAGLAB_ANY_ARCH, b_8x32x16_f16_row, matrix_b, 8, 32, 16, f16, row, 16) \
    X(FRAGLAB_ANY_ARCH, b_8x32x16_f16_col, matrix_b, 8, 32, 16, f16, col, 16) \
    X(SM80_ONLY, a_16x16x16_bf16_row, matrix_a, 16, 16, 16, bf16, row, 8) \
    X(SM80_ONLY, a_16x16x16_bf16_col, matrix_a, 16, 16, 16, bf16, col, 8) \
    X(SM80_ONLY, b_16x16x16_bf16_row, matrix_b, 16, 16, 16, bf16, row, 8) \
    X(SM80_ONLY, b_16x16x16_bf16_col, matrix_b, 16, 16, 16, bf16, col, 8) \
    X(SM80_ONLY, a_32x8x16_bf16_row, matrix_a, 32, 8, 16, bf16, row, 16) \
    X(SM80_ONLY, a_32x8x16_bf16_col, matrix_a, 32, 8, 16, bf16, col, 16) \
    X(SM80_ONLY, b_32x8x16_bf16_row, matrix_b, 32, 8, 16, bf16, row, 4) \
    X(SM80_ONLY, b_32x8x16_bf16_col, matrix_b, 32, 8, 16, bf16, col, 4) \
    X(SM80_ONLY, a_8x32x16_bf16_row, matrix_a, 8, 32, 16, bf16, row, 4) \
    X(SM80_ONLY, a_8x32x16_bf16_col, matrix_a, 8, 32, 16, bf16, col, 4) \
    X(SM80_ONLY, b_8x32x16_bf16_row, matrix_b, 8, 32, 16, bf16, row, 16) \
    X(SM80_ONLY, b_8x32x16_bf16_col, matrix_b, 8, 32, 16, bf16, col, 16) \
    X(FRAGLAB_ANY_ARCH, a_16x16x16_s8_row, matrix_a, 16, 16, 16, s8, row, 8) \
    X(FRAGLAB_ANY_ARCH, a_16x16x16_s8_col, matrix_a, 16, 16, 16, s8, col, 8) \
    X(FRAGLAB_ANY_ARCH, b_16x16x16_s8_row, matrix_b, 16, 16, 16, s8, row, 8) \
    X(FRAGLAB_ANY_ARCH, b_16x16x16_s8_col, matrix_b, 16, 16, 16, s8, col, 8) \
    X(FRAGLAB_ANY_ARCH, a_32x8x16_s8_row, matrix_a, 32, 8, 16, s8, row, 16) \
    X(FRAGLAB_ANY_ARCH, a_32x8x16_s8_col, matrix_a, 32, 8, 16, s8, col, 16) \
    X(FRAGLAB_ANY_ARCH, b_32x8x16_s8_row, matrix_b, 32, 8, 16, s8, row, 4) \
    X(FRAGLAB_ANY_ARCH, b_32x8x16_s8_col, matrix_b, 32, 8, 16, s8, col, 4) \
    X(FRAGLAB_ANY_ARCH, a_8x32x16_s8_row, matrix_a, 8, 32, 16, s8, row, 4) \
    X(FRAGLAB_ANY_ARCH, a_8x32x16_s8_col, matrix_a, 8, 32, 16, s8, col, 4) \
    X(FRAGLAB_ANY_ARCH, b_8x32x16_s8_row, matrix_b, 8, 32, 16, s8, row, 16) \
    X(FRAGLAB_ANY_ARCH, b_8x32x16_s8_col, matrix_b, 8, 32, 16, s8, col, 16) \
    X(FRAGLAB_ANY_ARCH, a_16x16x16_u8_row, matrix_a, 16, 16, 16, u8, row, 8) \
    X(FRAGLAB_ANY_ARCH, a_16x16x16_u8_col, matrix_a, 16, 16, 16, u8, col, 8) \
    X(FRAGLAB_ANY_ARCH, b_16x16x16_u8_row, matrix_b, 16, 16, 16, u8, row, 8) \
    X(FRAGLAB_ANY_ARCH, b_16x16x16_u8_col, matrix_b, 16, 16, 16, u8, col, 8) \
    X(FRAGLAB_ANY_ARCH, a_32x8x16_u8_row, matrix_a, 32, 8, 16, u8, row, 16) \
    X(FRAGLAB_ANY_ARCH, a_32x8x16_u8_col, matrix_a, 32, 8, 16, u8, col, 16) \
    X(FRAGLAB_ANY_ARCH, b_32x8x16_u8_row, matrix_b, 32, 8, 16, u8, row, 4) \
    X(FRAGLAB_ANY_ARCH, b_32x8x16_u8_col, matrix_b, 32, 8, 16, u8, col, 4) \
    X(FRAGLAB_ANY_ARCH, a_8x32x16_u8_row, matrix_a, 8, 32, 16, u8, row, 4) \
    X(FRAGLAB_ANY_ARCH, a_8x32x16_u8_col, matrix_a, 8, 32, 16, u8, col, 4) \
    X(FRAGLAB_ANY_ARCH, b_8x32x16_u8_row, matrix_b, 8, 32, 16, u8, row, 16) \
    X(FRAGLAB_ANY_ARCH, b_8x32x16_u8_col, matrix_b, 8, 32, 16, u8, col, 16) \
    X(SM80_ONLY, a_16x16x8_tf32_row, matrix_a, 16, 16, 8, tf32, row, 4) \
    X(SM80_ONLY, a_16x16x8_tf32_col, matrix_a, 16, 16, 8, tf32, col, 4) \
    X(SM80_ONLY, b_16x16x8_tf32_row, matrix_b, 16, 16, 8, tf32, row, 4) \
    X(SM80_ONLY, b_16x16x8_tf32_col, matrix_b, 16, 16, 8, tf32, col, 4) \
    X(SM80_ONLY, a_8x8x4_f64_row, matrix_a, 8, 8, 4, f64, row, 1) \
    X(SM80_ONLY, a_8x8x4_f64_col, matrix_a, 8, 8, 4, f64, col, 1) \
    X(SM80_ONLY, b_8x8x4_f64_row, matrix_b, 8, 8, 4, f64, row, 1) \
    X(SM80_ONLY, b_8x8x4_f64_col, matrix_b, 8, 8, 4, f64, col, 1)

// ---- element types by tag --------------------------------------------------------------------
// FRAGLAB_FRAG_T(T): the fragment's element type (the WMMA template argument);
// FRAGLAB_MEM_T(T): the type of the tile load/store_matrix_sync reads (tf32 fragments read float).
#define FRAGLAB_FRAG_T(T) fraglab_frag_##T
#define FRAGLAB_MEM_T(T) fraglab_mem_##T
typedef float fraglab_frag_f32;                    typedef float fraglab_mem_f32;
typedef double fraglab_frag_f64;                   typedef double fraglab_mem_f64;
typedef __half fraglab_frag_f16;                   typedef __half fraglab_mem_f16;
typedef __nv_bfloat16 fraglab_frag_bf16;           typedef __nv_bfloat16 fraglab_mem_bf16;
typedef signed char fraglab_frag_s8;               typedef signed char fraglab_mem_s8;
typedef unsigned char fraglab_frag_u8;             typedef unsigned char fraglab_mem_u8;
typedef int fraglab_frag_s32;                      typedef int fraglab_mem_s32;
typedef float fraglab_mem_tf32;
#if FRAGLAB_SM80                  // mma.h declares precision::tf32 for sm_80 and newer only
typedef nvcuda::wmma::precision::tf32 fraglab_frag_tf32;
#endif

// ---- helpers every kind-instantiating kernel needs -------------------------------------------
// The list's NE must be what the WMMA headers declare: a fragment type checked against it.
template <typename F, int NE> __device__ __forceinline__ void check_kind()
{
    static_assert(F::num_elements == NE, "fragment_kinds.cuh: NE differs from crt/mma.h");
}

// load/store_matrix_sync want the leading dimension to be a multiple of 16 bytes, and the
// pointer 256-bit aligned: an 8-wide tile of signed char (8 bytes a row) must be padded, and a
// tile at an arbitrary column of a global matrix goes through padded shared memory.
template <typename T> __host__ __device__ constexpr int padded_ld(int n)
{
    return (n * (int)sizeof(T) + 15) / 16 * 16 / (int)sizeof(T);
}

// tf32 fragments are loaded from float memory; mma_sync wants their elements rounded to tf32
// first (small integers are exact either way). Other fragments pass unchanged.
template <typename F> __device__ __forceinline__ void round_to_input_type(F&) {}
#if FRAGLAB_SM80
template <typename Use, int M, int N, int K, typename L>
__device__ __forceinline__ void round_to_input_type(
    nvcuda::wmma::fragment<Use, M, N, K, nvcuda::wmma::precision::tf32, L>& f)
{
#pragma unroll
    for (int i = 0; i < f.num_elements; ++i) f.x[i] = nvcuda::wmma::__float_to_tf32(f.x[i]);
}
#endif
