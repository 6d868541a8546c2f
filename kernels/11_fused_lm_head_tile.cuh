// 11_fused_lm_head: the logits tile's two mma.sync steps, shared by the forward
// (kernels/11_fused_lm_head.cu) and the backward (kernels/11_fused_lm_head_bwd.cu), which
// recomputes the same tiles: one chunk of d of h and w copied into a swizzled stage, and
// acc += h w^T over that chunk; and, from 11_fused_lm_head_grad.cuh, the backward's step from a
// tile of logits to its tile of G (both backward rungs). Included after sm80.cuh (cp.async,
// ldmatrix, mma.m16n8k16, the swizzle) and 11_fused_lm_head_config.cuh, inside the kernels'
// FRAGLAB_SM80 section.
#pragma once

// ROWS x BK values of a (rows, d) matrix, rows r0 .., columns k0 .., into a swizzled stage
// (zeros past row `rows` and past column d). Consecutive threads of the block's THREADS copy
// consecutive 16-byte chunks.
template <int ROWS, int BK, int THREADS>
__device__ __forceinline__ void load_chunk(u32 dst, const u16* __restrict__ src, int r0, int rows, int k0, int d)
{
    constexpr int CHUNKS = BK / 8;
#pragma unroll
    for (int it = 0; it < ROWS * CHUNKS / THREADS; ++it) {
        const int i = threadIdx.x + it * THREADS, r = i / CHUNKS, c = i % CHUNKS;
        const int col = k0 + 8 * c;
        const bool ok = r0 + r < rows && col < d;
        cp_async16(dst + swz<BK>(r, c), src + (ok ? (size_t)(r0 + r) * d + col : 0), ok);
    }
}

// acc += h w^T for one chunk of BK values of d: a warp's MT x NT accumulators of 16 x 8.
// A fragments (rows of h) as chapter 05 loads Q's, B fragments (rows of w) as it loads K's.
template <bool BF16, int BK, int MT, int NT>
__device__ __forceinline__ void mma_chunk(float (&acc)[MT][NT][4], u32 sA, u32 sB, int lane)
{
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
        u32 a[MT][4], b[NT / 2][4];
#pragma unroll
        for (int mi = 0; mi < MT; ++mi)
            ldsm4<false>(a[mi], sA + swz<BK>(16 * mi + (lane & 15), 2 * kk + (lane >> 4)));
#pragma unroll
        for (int np = 0; np < NT / 2; ++np)
            ldsm4<false>(b[np], sB + swz<BK>(16 * np + (lane & 7) + ((lane >> 4) << 3),
                                             2 * kk + ((lane >> 3) & 1)));
#pragma unroll
        for (int mi = 0; mi < MT; ++mi)
#pragma unroll
            for (int np = 0; np < NT / 2; ++np) {
                mma16816<BF16>(acc[mi][2 * np], a[mi], b[np][0], b[np][1]);
                mma16816<BF16>(acc[mi][2 * np + 1], a[mi], b[np][2], b[np][3]);
            }
    }
}

#include "11_fused_lm_head_grad.cuh"   // grad_of_logits: a tile of logits to its tile of G
