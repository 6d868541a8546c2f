// 11_fused_lm_head: the logits tile's two mma.sync steps, shared by the forward
// (kernels/11_fused_lm_head.cu) and the backward (kernels/11_fused_lm_head_bwd.cu), which
// recomputes the same tiles: one chunk of d of h and w copied into a swizzled stage, and
// acc += h w^T over that chunk; and the backward's step from a tile of logits to its tile of G
// (both backward rungs). Included after fa2_mma.cuh (cp.async, ldmatrix, mma.m16n8k16, the
// swizzle) and 11_fused_lm_head_config.cuh, inside the kernels' FRAGLAB_SM80 section.
#pragma once

// cp.async.wait_group N: all but the N most recent groups of this thread have landed.
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

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

// The backward's G from a warp's MT x NT accumulators of logits, in place, each element from its
// logit alone (the forward did the reductions):
//   G = dl (2^(z log2 e - lse2) - [col == target]) z'      (z, z': soft-cap, tanh, else x and 1)
// tgt[mi][r]: the target of row g + 8r of block mi, -1 for a row without a gradient (ignored or
// past n); lse2: its log-sum-exp in the log2 domain; scale: its dl. col0: the column of register 0
// of accumulator j = 0 (columns at or past v get 0). Returns whether any |softmax - onehot| of
// this lane is at least filter_eps (Cut Cross-Entropy's filter; the caller decides what to skip).
template <bool SOFTCAP, int MT, int NT>
__device__ __forceinline__ bool grad_of_logits(float (&acc)[MT][NT][4], const int (&tgt)[MT][2],
                                               const float (&lse2)[MT][2], const float (&scale)[MT][2],
                                               int col0, int v, float cap, float filter_eps)
{
    const float inv_cap = SOFTCAP ? 1.0f / cap : 0.0f;
    bool big = false;
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = e >> 1, col = col0 + 8 * j + (e & 1);
                float z = acc[mi][j][e], dz = 1.0f;
                if (SOFTCAP) {
                    const float th = tanhf(z * inv_cap);
                    z = cap * th;
                    dz = 1.0f - th * th;
                }
                float p = fast_exp2(fmaf(z, LMH_LOG2E, -lse2[mi][r])) - (col == tgt[mi][r] ? 1.0f : 0.0f);
                if (tgt[mi][r] < 0 || col >= v) p = 0.0f;       // ignored or padded row, padded word
                big |= fabsf(p) >= filter_eps;
                acc[mi][j][e] = p * scale[mi][r] * dz;
            }
    return big;
}
