// 06_layout_codegen: a harness for register code written by a program, not by hand.
//
// fraglab/layout_codegen/ reads a fragment layout (traced live on a GPU, or the H100 recording)
// and emits, for each accumulator kind, a struct of device functions: row and column reductions
// (a fold inside the lane, then a __shfl_xor_sync butterfly over exactly the lane bits that vary
// along the line), a broadcast of per-row values back to the fragment, and the forward-mapped
// store. The committed header 06_layout_codegen_generated.cuh holds that code for every
// accumulator kind of the H100 recording (`python -m fraglab.layout_codegen header` rewrites it;
// a test checks it is current). For a layout given at run time, the Python wrappers prepend
// freshly generated code to this file, and the #include below is skipped.
//
// Kernels, for each generated kind KIND and operator OP in {max, min, sum} (one warp per tile,
// WARPS_PER_BLOCK warps per block; acc is (n_tiles, M, N) of the kind's type, row-major):
//
//   reduce_KIND_OP(acc, rows, cols, n_tiles)   load_matrix_sync, then store_rows / store_cols:
//       rows (n_tiles, M), cols (n_tiles, N). Same signature and output format as chapter 3's
//       reduce_acc_16x16_* kernels, so the SASS of the two compares like for like.
//   bcast_KIND_OP(acc, copy, bcast, n_tiles)   copy = the tile written back by the generated
//       store; bcast = every element replaced by its row's reduction (reduce_rows, expand_rows,
//       store): what a softmax needs before exp(x - rowmax).
//
// Kinds with tf32 or f64 fragments exist from sm_80 on; on older targets their kernels trap (the
// Python wrappers refuse those GPUs first).
#include <mma.h>
#include <cuda_fp16.h>
#include "common.cuh"
#include "fragment_kinds.cuh"
#ifndef FRAGLAB_LAYOUT_CODEGEN_GENERATED
#include "06_layout_codegen_generated.cuh"
#endif

using namespace nvcuda;

#define WARPS_PER_BLOCK 4
// what the launch reads back (fraglab.launch.constants): one warp per tile, 4 tiles per block
extern "C" __device__ const int warps_per_block = WARPS_PER_BLOCK;

// Tile of this warp, or -1 when the grid has more warps than tiles (the whole warp leaves, so
// every full-mask shuffle names only lanes that run).
__device__ __forceinline__ int codegen_warp_tile(int n_tiles)
{
    const int t = blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    return t < n_tiles ? t : -1;
}

template <class G, class Op>
__device__ __forceinline__ void codegen_reduce(Op, const typename G::T* acc, typename G::T* rows,
                                               typename G::T* cols, int n_tiles)
{
    const int t = codegen_warp_tile(n_tiles);
    if (t < 0) return;
    wmma::fragment<wmma::accumulator, G::M, G::N, G::K, typename G::T> c;
    wmma::load_matrix_sync(c, acc + (size_t)t * G::M * G::N, G::N, wmma::mem_row_major);
    G::template store_rows<Op>(c.x, rows + (size_t)t * G::M);
    G::template store_cols<Op>(c.x, cols + (size_t)t * G::N);
}

template <class G, class Op>
__device__ __forceinline__ void codegen_bcast(Op, const typename G::T* acc, typename G::T* copy,
                                              typename G::T* bcast, int n_tiles)
{
    using T = typename G::T;
    const int t = codegen_warp_tile(n_tiles);
    if (t < 0) return;
    wmma::fragment<wmma::accumulator, G::M, G::N, G::K, T> c;
    wmma::load_matrix_sync(c, acc + (size_t)t * G::M * G::N, G::N, wmma::mem_row_major);
    G::store(c.x, copy + (size_t)t * G::M * G::N, G::N);
    T v[G::ROW_GROUPS], y[G::NREGS];
    G::template reduce_rows<Op>(c.x, v);
    G::expand_rows(v, y);
    G::store(y, bcast + (size_t)t * G::M * G::N, G::N);
}

// One reduce_ and one bcast_ kernel per generated kind and operator. The generated header lists
// its kinds as X(GUARD, KIND, M, N, K, T), GUARD being FRAGLAB_ANY_ARCH or SM80_ONLY as in
// fragment_kinds.cuh: a kind whose WMMA type needs sm_80 keeps its kernels on older targets, but
// their bodies trap (common.cuh).
#define CODEGEN_OP(GUARD, KIND, T, OPNAME, OPTYPE)                                                 \
    extern "C" __global__ void __launch_bounds__(32 * WARPS_PER_BLOCK)                             \
    reduce_##KIND##_##OPNAME(const T* acc, T* rows, T* cols, int n_tiles)                          \
    { GUARD(codegen_reduce<fraglab_gen::KIND>(OPTYPE{}, acc, rows, cols, n_tiles)); }              \
    extern "C" __global__ void __launch_bounds__(32 * WARPS_PER_BLOCK)                             \
    bcast_##KIND##_##OPNAME(const T* acc, T* copy, T* bcast, int n_tiles)                          \
    { GUARD(codegen_bcast<fraglab_gen::KIND>(OPTYPE{}, acc, copy, bcast, n_tiles)); }
#define CODEGEN_KIND(GUARD, KIND, M, N, K, T)                                                      \
    CODEGEN_OP(GUARD, KIND, T, max, fraglab_gen::Max)                                              \
    CODEGEN_OP(GUARD, KIND, T, min, fraglab_gen::Min)                                              \
    CODEGEN_OP(GUARD, KIND, T, sum, fraglab_gen::Sum)

FRAGLAB_GEN_KINDS(CODEGEN_KIND)
