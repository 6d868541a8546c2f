// 11_fused_lm_head, the backward pass: the gradients of the fused loss for h and w, the logits
// recomputed tile by tile and never stored, nor their gradient but one tile of it in shared memory.
//
//   G[i, v] = dl[i] (softmax(z_i)_v - [v == target[i]]) z'(i, v)    (0 where target[i] == ignore_index)
//   dh = G w,  dw = G^T h        (z = h w^T; soft-cap: z = cap tanh(x / cap), z' = 1 - tanh^2, else 1)
//
// lmhead_bwd_<f16|bf16>[_softcap](h, w, targets, lse, dl, dh, dw, skipped, n, v, d, ignore_index,
//                                  softcap, filter_eps, gscale)
//            h (n, d), w (v, d) row-major 16-bit (bf16 as raw bit patterns), targets (n) int32,
//            lse (n) float32: the forward's log-sum-exp of each token's logits (natural log),
//            dl (n) float32 and gscale (one float32): the loss's gradient for token i is gscale dl[i] (the
//            wrapper scales dl to at most 1 in magnitude, so that G's 16-bit tile neither
//            overflows nor loses small values to underflow, and gscale is applied in FP32 after
//            the products), dh (n, d) and dw (v, d) float32, zeroed by the caller: the kernel
//            ADDS (red.global.add.f32). skipped: one unsigned counter, +1 per skipped tile.
//            Grid (ceil(n / LMH_BM), ceil(v / LMH_BN)), block LMH_THREADS, dynamic shared memory
//            LMB_SMEM_BYTES. filter_eps > 0: a tile whose every |softmax - onehot| is below it
//            adds nothing and is skipped (Cut Cross-Entropy's filter); <= 0: never skipped.
// lmhead_bwd_cast_<f16|bf16>(src, dst, count)
//            the float32 sums rounded (to nearest even) to the inputs' 16-bit type.
// Python: fraglab.fused_lm_head.backward (linear_cross_entropy_backward).
//
// A block owns one (token block, vocabulary tile) pair and works in three steps:
//  1. the tile's logits S = h_blk w_tile^T, exactly the forward's loop (11_fused_lm_head.cu: d in
//     chunks of LMH_BK through a cp.async pipeline, warp (wm, wn) holding rows wm LMH_WTM .. and
//     columns wn LMH_WTN .. in mma accumulators);
//  2. G's tile from the accumulators, element by element (the row's lse and dl in registers: no
//     reduction at all, the forward did it), rounded to 16 bits into shared memory (swizzled,
//     LMH_BN values a row);
//  3. d in chunks again (the same cp.async pipeline, the same h and w chunks re-read): per chunk
//     dh_blk[:, chunk] += G w_tile[:, chunk] and dw_tile[:, chunk] += G^T h_blk[:, chunk], two
//     mma products whose A operand is G from shared memory (plain ldmatrix for G, .trans for G^T)
//     and whose B operand is the chunk read with ldmatrix .trans (as chapter 05 reads V), added to
//     the float32 gradients with red.global.add.f32.
// Every block adds into its dh rows and dw rows: the sums over vocabulary tiles and token blocks
// happen in global memory, in FP32, in an order that varies from run to run (last-bit noise).
#include "sm80.cuh"        // cp.async, ldmatrix, mma.m16n8k16, the swizzle, pack2, ex2

using namespace sm80;

#include "11_fused_lm_head_config.cuh"   // LMH_*: the forward's tile, which step 1 recomputes

constexpr int LMB_G_BYTES = LMH_BM * LMH_BN * 2;              // G's tile, 16-bit
constexpr int LMB_SMEM_BYTES = LMH_STAGES * LMH_STAGE_BYTES + LMB_G_BYTES;   // 128 KB
extern "C" __device__ const int lmh_atomic_smem = LMB_SMEM_BYTES;
// Step 3: each warp computes a 32 x 32 block of dh's chunk (BM x BK) and one of dw's (BN x BK).
constexpr int LMB_GM = 32, LMB_GN = 32, LMB_GMT = LMB_GM / 16, LMB_GNT = LMB_GN / 8;
static_assert(LMH_BK == 64 && LMH_BN == 128, "swz XORs 3 bits of the chunk index");
static_assert((LMH_BM / LMB_GM) * (LMH_BK / LMB_GN) == LMH_WARPS_M * LMH_WARPS_N &&
              (LMH_BN / LMB_GM) * (LMH_BK / LMB_GN) == LMH_WARPS_M * LMH_WARPS_N, "a block a warp");
static_assert((LMH_BM * LMH_CHUNKS) % LMH_THREADS == 0 && (LMH_BN * LMH_CHUNKS) % LMH_THREADS == 0,
              "whole chunks per thread");

#if FRAGLAB_SM80   // cp.async, ldmatrix and mma.sync with f32 accumulators (common.cuh)

#include "11_fused_lm_head_tile.cuh"   // the forward's load_chunk and mma_chunk


// out (32 x 32 block of a chunk's product) += A B over k = 0 .. K: A (32 x K) from the G tile
// in shared memory, B (K x 32) = rows of a chunk (K rows of LMH_BK values) read with .trans.
// TRANS_A: A = G^T (rows: vocabulary words, k: tokens), read with ldmatrix .trans; else A = G
// (rows: tokens, k: words). a_row0: A's first row; b_col0: B's first column (of the chunk).
template <bool BF16, bool TRANS_A, int K>
__device__ __forceinline__ void grad_block(float (&out)[LMB_GMT][LMB_GNT][4], u32 sG, u32 sChunk,
                                           int a_row0, int b_col0, int lane)
{
#pragma unroll
    for (int kk = 0; kk < K / 16; ++kk) {
        u32 a[LMB_GMT][4];
#pragma unroll
        for (int mi = 0; mi < LMB_GMT; ++mi) {
            if constexpr (TRANS_A)   // matrix q = lane / 8: tokens + 8 (q / 2), words + 8 (q % 2)
                ldsm4<true>(a[mi], sG + swz<LMH_BN>(16 * kk + (lane & 7) + (((lane >> 4) & 1) << 3),
                                                    (a_row0 + 16 * mi) / 8 + ((lane >> 3) & 1)));
            else
                ldsm4<false>(a[mi], sG + swz<LMH_BN>(a_row0 + 16 * mi + (lane & 15), 2 * kk + (lane >> 4)));
        }
#pragma unroll
        for (int dp = 0; dp < LMB_GNT / 2; ++dp) {
            u32 b[4];
            ldsm4<true>(b, sChunk + swz<LMH_BK>(16 * kk + (lane & 7) + (((lane >> 3) & 1) << 3),
                                                b_col0 / 8 + 2 * dp + (lane >> 4)));
#pragma unroll
            for (int mi = 0; mi < LMB_GMT; ++mi) {
                mma16816<BF16>(out[mi][2 * dp], a[mi], b[0], b[1]);
                mma16816<BF16>(out[mi][2 * dp + 1], a[mi], b[2], b[3]);
            }
        }
    }
}

// A warp's 32 x 32 block added to the float32 gradient (rows r0 .. of `rows`, columns c0 .. of d).
__device__ __forceinline__ void add_block(float* __restrict__ grad, const float (&out)[LMB_GMT][LMB_GNT][4],
                                          float gscale, int r0, int rows, int c0, int d, int g, int c4)
{
#pragma unroll
    for (int mi = 0; mi < LMB_GMT; ++mi)
#pragma unroll
        for (int j = 0; j < LMB_GNT; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int row = r0 + 16 * mi + g + 8 * (i >> 1), col = c0 + 8 * j + 2 * c4 + (i & 1);
                if (row < rows && col < d) atomicAdd(grad + (size_t)row * d + col, out[mi][j][i] * gscale);
            }
}

template <bool BF16, bool SOFTCAP>
__device__ __forceinline__ void lmhead_bwd(const u16* __restrict__ h, const u16* __restrict__ w,
                                           const int* __restrict__ targets, const float* __restrict__ lse,
                                           const float* __restrict__ dl, float* __restrict__ dh,
                                           float* __restrict__ dw, unsigned* __restrict__ skipped,
                                           int n, int v, int d, int ignore_index, float cap, float filter_eps,
                                           const float* __restrict__ gscale_p)
{
    extern __shared__ __align__(128) unsigned char smem[];
    const u32 base = (u32)__cvta_generic_to_shared(smem);
    const u32 sG = base + LMH_STAGES * LMH_STAGE_BYTES;
    const int lane = lane_id(), warp = threadIdx.x >> 5, g = lane >> 2, c4 = lane & 3;
    const int wm = warp / LMH_WARPS_N, wn = warp % LMH_WARPS_N;
    const int m0 = blockIdx.x * LMH_BM, n0 = blockIdx.y * LMH_BN;
    const int chunks = (d + LMH_BK - 1) / LMH_BK;
    const int steps = 2 * chunks;              // step 1's chunks, then step 3's: the same chunks

    // Per lane: rows g + 8r of the warp's 16-row blocks mi: target (-1: no gradient), lse in the
    // log2 domain, dl.
    int tgt[LMH_MT][2];
    float lse2[LMH_MT][2], scale[LMH_MT][2];
#pragma unroll
    for (int mi = 0; mi < LMH_MT; ++mi)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = m0 + wm * LMH_WTM + 16 * mi + g + 8 * r;
            const int t = row < n ? targets[row] : ignore_index;
            const bool live = row < n && t != ignore_index;
            tgt[mi][r] = live ? t : -1;
            lse2[mi][r] = live ? lse[row] * LMH_LOG2E : 0.0f;
            scale[mi][r] = live ? dl[row] : 0.0f;
        }

    int ld_kc = 0, ld_stage = 0;
    auto load_next = [&]() {
        const u32 st = base + ld_stage * LMH_STAGE_BYTES;
        load_chunk<LMH_BM, LMH_BK, LMH_THREADS>(st, h, m0, n, ld_kc * LMH_BK, d);
        load_chunk<LMH_BN, LMH_BK, LMH_THREADS>(st + LMH_BM * LMH_BK * 2, w, n0, v, ld_kc * LMH_BK, d);
        if (++ld_kc == chunks) ld_kc = 0;
        if (++ld_stage == LMH_STAGES) ld_stage = 0;
    };
#pragma unroll
    for (int i = 0; i < LMH_STAGES - 1; ++i) {
        if (i < steps) load_next();
        cp_async_commit();
    }

    // Step 1: the logits of the tile.
    float acc[LMH_MT][LMH_NT][4];
#pragma unroll
    for (int mi = 0; mi < LMH_MT; ++mi)
#pragma unroll
        for (int j = 0; j < LMH_NT; ++j) acc[mi][j][0] = acc[mi][j][1] = acc[mi][j][2] = acc[mi][j][3] = 0.0f;
    int stage = 0, i = 0;
    for (; i < chunks; ++i) {
        cp_async_wait<LMH_STAGES - 2>();
        __syncthreads();
        if (i + LMH_STAGES - 1 < steps) load_next();
        cp_async_commit();
        const u32 st = base + stage * LMH_STAGE_BYTES;
        mma_chunk<BF16, LMH_BK>(acc, st + swz<LMH_BK>(wm * LMH_WTM, 0),
                               st + LMH_BM * LMH_BK * 2 + swz<LMH_BK>(wn * LMH_WTN, 0), lane);
        if (++stage == LMH_STAGES) stage = 0;
    }

    // Step 2: G's tile, each element from its logit alone (11_fused_lm_head_tile.cuh).
    const bool big = grad_of_logits<SOFTCAP>(acc, tgt, lse2, scale, n0 + wn * LMH_WTN + 2 * c4, v, cap,
                                             filter_eps);
    if (filter_eps > 0.0f && !__syncthreads_or(big)) {
        if (threadIdx.x == 0) atomicAdd(skipped, 1u);
        cp_async_wait<0>();              // no copy may land after the block has gone
        return;
    }
#pragma unroll
    for (int mi = 0; mi < LMH_MT; ++mi)
#pragma unroll
        for (int j = 0; j < LMH_NT; ++j)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int row = wm * LMH_WTM + 16 * mi + g + 8 * r, col = wn * LMH_WTN + 8 * j;
                const u32 val = pack2<BF16>(acc[mi][j][2 * r], acc[mi][j][2 * r + 1]);
                asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sG + swz<LMH_BN>(row, col / 8) + 4 * c4),
                             "r"(val) : "memory");
            }
    // (step 3's first barrier makes G visible to every warp)

    // Step 3: warp (gm, gn): rows 32 gm .. of dh's chunk and of dw's, columns 32 gn .. of it.
    const int gm = warp >> 1, gn = warp & 1;
    const float gscale = *gscale_p;
    for (int kc = 0; i < steps; ++i, ++kc) {
        cp_async_wait<LMH_STAGES - 2>();
        __syncthreads();
        if (i + LMH_STAGES - 1 < steps) load_next();
        cp_async_commit();
        const u32 st = base + stage * LMH_STAGE_BYTES;
        float out[LMB_GMT][LMB_GNT][4];
#pragma unroll
        for (int mi = 0; mi < LMB_GMT; ++mi)
#pragma unroll
            for (int j = 0; j < LMB_GNT; ++j) out[mi][j][0] = out[mi][j][1] = out[mi][j][2] = out[mi][j][3] = 0.0f;
        // dh_blk[:, chunk] += G (BM x BN) w_tile[:, chunk] (BN x BK)
        grad_block<BF16, false, LMH_BN>(out, sG, st + LMH_BM * LMH_BK * 2, LMB_GM * gm, LMB_GN * gn, lane);
        add_block(dh, out, gscale, m0 + LMB_GM * gm, n, kc * LMH_BK + LMB_GN * gn, d, g, c4);
#pragma unroll
        for (int mi = 0; mi < LMB_GMT; ++mi)
#pragma unroll
            for (int j = 0; j < LMB_GNT; ++j) out[mi][j][0] = out[mi][j][1] = out[mi][j][2] = out[mi][j][3] = 0.0f;
        // dw_tile[:, chunk] += G^T (BN x BM) h_blk[:, chunk] (BM x BK)
        grad_block<BF16, true, LMH_BM>(out, sG, st, LMB_GM * gm, LMB_GN * gn, lane);
        add_block(dw, out, gscale, n0 + LMB_GM * gm, v, kc * LMH_BK + LMB_GN * gn, d, g, c4);
        if (++stage == LMH_STAGES) stage = 0;
    }
    cp_async_wait<0>();
}

#endif  // FRAGLAB_SM80

#define LMB_KERNEL(NAME, BF16, SOFTCAP)                                                             \
    extern "C" __global__ void __launch_bounds__(LMH_THREADS, 1)                                    \
    NAME(const u16* h, const u16* w, const int* targets, const float* lse, const float* dl,         \
         float* dh, float* dw, unsigned* skipped, int n, int v, int d, int ignore_index,            \
         float softcap, float filter_eps, const float* gscale)                                      \
    { SM80_ONLY(lmhead_bwd<BF16, SOFTCAP>(h, w, targets, lse, dl, dh, dw, skipped, n, v, d,         \
                                          ignore_index, softcap, filter_eps, gscale)); }

LMB_KERNEL(lmhead_bwd_f16, false, false)
LMB_KERNEL(lmhead_bwd_bf16, true, false)
LMB_KERNEL(lmhead_bwd_f16_softcap, false, true)
LMB_KERNEL(lmhead_bwd_bf16_softcap, true, true)

// float32 -> the 16-bit type, round to nearest even, 2 values a thread and iteration (grid-stride).
template <bool BF16>
__device__ __forceinline__ void cast_pairs(const float* __restrict__ src, u16* __restrict__ dst, long long count)
{
    const long long pairs = count / 2, stride = (long long)gridDim.x * blockDim.x;
    for (long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x; p < pairs; p += stride) {
        const float2 x = reinterpret_cast<const float2*>(src)[p];
        u16 lo, hi;
        if constexpr (BF16) {
            lo = __bfloat16_as_ushort(__float2bfloat16_rn(x.x));
            hi = __bfloat16_as_ushort(__float2bfloat16_rn(x.y));
        } else {
            lo = __half_as_ushort(__float2half_rn(x.x));
            hi = __half_as_ushort(__float2half_rn(x.y));
        }
        reinterpret_cast<unsigned*>(dst)[p] = (unsigned)lo | ((unsigned)hi << 16);
    }
}

// count: even (d is a multiple of 16, so every gradient's size is).
extern "C" __global__ void lmhead_bwd_cast_f16(const float* src, u16* dst, long long count)
{ cast_pairs<false>(src, dst, count); }
extern "C" __global__ void lmhead_bwd_cast_bf16(const float* src, u16* dst, long long count)
{ cast_pairs<true>(src, dst, count); }
