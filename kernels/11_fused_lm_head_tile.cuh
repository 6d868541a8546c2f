// 11_fused_lm_head: the logits tile's two mma.sync steps, shared by the forward
// (kernels/11_fused_lm_head.cu) and the backward (kernels/11_fused_lm_head_bwd*.cu), which
// recomputes the same tiles: one chunk of d of h and w copied into a swizzled stage, and
// acc += h w^T over that chunk; the backward's ring of such stages (LogitsRing); and, from
// 11_fused_lm_head_grad.cuh, the backward's step from a tile of logits to its tile of G (both
// backward rungs). Included after sm80.cuh (cp.async, ldmatrix, mma.m16n8k16, the swizzle) and
// 11_fused_lm_head_config.cuh, inside the kernels' FRAGLAB_SM80 section.
#pragma once

// ROWS x COLS 16-bit values of a row-major matrix with `ld` values a row, rows r0 .. (zeros at
// and past row `rows`), columns c0 .. (zeros at and past column `cols`, a multiple of 8), into a
// swizzled stage of COLS values a row. Consecutive threads of the block's THREADS copy
// consecutive 16-byte chunks.
template <int ROWS, int COLS, int THREADS>
__device__ __forceinline__ void load_tile(u32 dst, const u16* __restrict__ src, int r0, int rows,
                                          int c0, int cols, size_t ld)
{
    constexpr int CH = COLS / 8;
#pragma unroll
    for (int it = 0; it < ROWS * CH / THREADS; ++it) {
        const int i = threadIdx.x + it * THREADS, r = i / CH, c = i % CH;
        const int col = c0 + 8 * c;
        const bool ok = r0 + r < rows && col < cols;
        cp_async16(dst + swz<COLS>(r, c), src + (ok ? (size_t)(r0 + r) * ld + col : 0), ok);
    }
}

// ROWS x BK values of a (rows, d) matrix, rows r0 .., columns k0 ..: one chunk of d.
template <int ROWS, int BK, int THREADS>
__device__ __forceinline__ void load_chunk(u32 dst, const u16* __restrict__ src, int r0, int rows, int k0, int d)
{
    load_tile<ROWS, BK, THREADS>(dst, src, r0, rows, k0, d, d);
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

// A warp's MT x NT accumulators of 16 x 8 set to zero.
template <int MT, int NT>
__device__ __forceinline__ void zero_acc(float (&acc)[MT][NT][4])
{
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int j = 0; j < NT; ++j) acc[mi][j][0] = acc[mi][j][1] = acc[mi][j][2] = acc[mi][j][3] = 0.0f;
}

// The backward's cp.async ring over d for one (token block m0, vocabulary tile n0): LMH_STAGES
// stages, each one chunk of d of h's rows and of w's, the copies LMH_STAGES - 1 steps ahead of
// their use. Step s holds chunk s % chunks: PASSES = 2 walks d twice (the atomic rung reads every
// chunk again for its GEMMs), 1 once. (The forward's own loop walks many tiles this way.)
template <int PASSES>
struct LogitsRing {
    u32 base;
    const u16* __restrict__ h;
    const u16* __restrict__ w;
    int m0, n0, n, v, d, chunks, steps;
    int ld_kc, ld_stage, stage;

    // Sets the ring up and starts the copies of its first LMH_STAGES - 1 steps; chunks: of d,
    // (d + LMH_BK - 1) / LMH_BK (what the kernel computes first).
    __device__ __forceinline__ LogitsRing(u32 base_, const u16* h_, const u16* w_, int m0_, int n0_,
                                          int n_, int v_, int d_, int chunks_)
        : base(base_), h(h_), w(w_), m0(m0_), n0(n0_), n(n_), v(v_), d(d_),
          chunks(chunks_), steps(PASSES * chunks_), ld_kc(0), ld_stage(0), stage(0)
    {
#pragma unroll
        for (int i = 0; i < LMH_STAGES - 1; ++i) {
            if (i < steps) load_next();
            cp_async_commit();           // empty groups too: the waits count groups
        }
    }
    __device__ __forceinline__ void load_next()
    {
        const u32 st = base + ld_stage * LMH_STAGE_BYTES;
        load_chunk<LMH_BM, LMH_BK, LMH_THREADS>(st, h, m0, n, ld_kc * LMH_BK, d);
        load_chunk<LMH_BN, LMH_BK, LMH_THREADS>(st + LMH_BM * LMH_BK * 2, w, n0, v, ld_kc * LMH_BK, d);
        if (++ld_kc == chunks && PASSES > 1) ld_kc = 0;
        if (++ld_stage == LMH_STAGES) ld_stage = 0;
    }
    // Step i: waits until its stage has landed (everyone's copies) and step i - 1's stage is
    // free, starts the copies of step i + LMH_STAGES - 1, and returns the stage's address.
    __device__ __forceinline__ u32 wait(int i)
    {
        cp_async_wait<LMH_STAGES - 2>();
        __syncthreads();
        if (i + LMH_STAGES - 1 < steps) load_next();
        cp_async_commit();
        return base + stage * LMH_STAGE_BYTES;
    }
    // The stage of the step just used, given back.
    __device__ __forceinline__ void release()
    {
        if (++stage == LMH_STAGES) stage = 0;
    }
    // Steps 0 .. chunks - 1: the tile's logits h_blk w_tile^T in warp (wm, wn)'s accumulators.
    // Returns the next step (the second pass's first).
    template <bool BF16>
    __device__ __forceinline__ int logits(float (&acc)[LMH_MT][LMH_NT][4], int wm, int wn, int lane)
    {
        zero_acc(acc);
        int i = 0;
        for (; i < chunks; ++i) {
            const u32 st = wait(i);
            mma_chunk<BF16, LMH_BK>(acc, st + swz<LMH_BK>(wm * LMH_WTM, 0),
                                   st + LMH_BM * LMH_BK * 2 + swz<LMH_BK>(wn * LMH_WTN, 0), lane);
            release();
        }
        return i;
    }
};

#include "11_fused_lm_head_grad.cuh"   // grad_of_logits: a tile of logits to its tile of G
