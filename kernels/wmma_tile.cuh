// The WMMA tile product the course's epilogue kernels start from (chapters 03 and 04):
// C = A[t] @ B[t] for tile t, both 16x16 row-major tiles of 16-bit values read straight from
// global memory by load_matrix_sync, accumulated in f32.
#pragma once
#include <mma.h>

typedef nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> Acc16x16;

// In is __half (any target) or __nv_bfloat16 (sm_80 and newer: keep it under FRAGLAB_SM80).
// Tile t starts at element 256 t of a and of b; both pointers must be 32-byte aligned.
template <class In>
__device__ __forceinline__ void tile_product(const In* a, const In* b, int t, Acc16x16& c)
{
    using namespace nvcuda;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, In, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, In, wmma::row_major> fb;
    wmma::load_matrix_sync(fa, a + (size_t)t * 256, 16);
    wmma::load_matrix_sync(fb, b + (size_t)t * 256, 16);
    wmma::fill_fragment(c, 0.0f);
    wmma::mma_sync(c, fa, fb, c);
}
