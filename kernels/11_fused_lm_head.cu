// 11_fused_lm_head: the LM head and its cross-entropy in one pass, logits never in global memory.
//
//   loss[i] = logsumexp_v(h_i . w_v) - h_i . w_target[i]     (0 where target[i] == ignore_index)
//
// lmhead_fwd_<f16|bf16>[_softcap](h, w, targets, part, n, v, d, tiles_per_split, softcap)
//            h (n, d), w (v, d) row-major 16-bit (bf16 as raw bit patterns), targets (n) int32,
//            part (3, splits, n) float32. Grid (ceil(n / LMH_BM), splits), block LMH_THREADS,
//            dynamic shared memory LMH_SMEM_BYTES. A block owns LMH_BM tokens and the
//            vocabulary tiles [split * tiles_per_split, ...) of LMH_BN words; it writes, per
//            token, the partial (max, sum, target logit) of its tiles: part[0] = max (log2
//            domain), part[1] = sum of 2^(logit log2 e - max), part[2] = the target's logit (0
//            when the target is not in its tiles). _softcap: logits become cap tanh(logit / cap).
// lmhead_merge(part, targets, loss, n, splits, ignore_index)
//            one thread per token: the log-sum-exp merge of the splits' partials, minus the target
//            logit. Python: fraglab.fused_lm_head.fused_linear_cross_entropy.
//
// The loop is a GEMM's (logits = h w^T, tile by tile, d in chunks of LMH_BK through a cp.async
// pipeline of LMH_STAGES stages); what is new is what happens after each tile's last chunk. The
// tile's logits sit in the mma accumulators, and each warp folds them into the online
// log-sum-exp of its rows (kernels/11_fused_lm_head_lse.cuh): chapter 05's online softmax with
// nothing to rescale but the sum, since there is no P V to accumulate. The accumulators are then
// reused for the next tile; no logit is stored anywhere.
//
// Warps: LMH_WARPS_M x LMH_WARPS_N; warp (wm, wn) computes rows wm LMH_WTM .. and columns
// wn LMH_WTN .. of each tile. Its LMH_WTM rows keep their own running (max, sum, target logit)
// over its columns of every tile; the LMH_WARPS_N warps that share rows merge once, at the end,
// through shared memory. Fragment layouts (PTX ISA mma.m16n8k16; g = lane / 4, c = lane % 4):
// accumulator registers 0, 1 = (row g, cols 2c, 2c + 1), registers 2, 3 = (row g + 8, same cols),
// as in kernels/05_flash_attention_fa2.cu, whose top comment explains the A and B operands, the
// ldmatrix addresses and the swizzle (sm80.cuh: ldsm4, mma16816, swz, cp_async16).
//
// Ragged sizes: rows past n and vocabulary rows past v are copied as zeros (cp.async with a
// source size of 0); logits of columns past v are set to -inf before the log-sum-exp; rows past
// n are never written. d must be a multiple of 8 (16-byte copies; the wrapper asks for 16);
// columns of the last chunk past d are zeros and add nothing.
#include "sm80.cuh"        // cp.async, ldmatrix, mma.m16n8k16, the swizzle, ex2 (chapters 05, 08, 09 too)

using namespace sm80;

#include "11_fused_lm_head_config.cuh"   // LMH_*: the tile, shared with the backward

constexpr int LMH_SMEM_BYTES = LMH_STAGES * LMH_STAGE_BYTES;  // 96 KB
extern "C" __device__ const int lmh_fwd_smem = LMH_SMEM_BYTES;
constexpr float LMH_LN2 = 0.6931471805599453f;
static_assert(LMH_BK == 64, "swz<LMH_BK> XORs 3 bits of the chunk index: rows of 8 chunks");
static_assert((LMH_BM * LMH_CHUNKS) % LMH_THREADS == 0 && (LMH_BN * LMH_CHUNKS) % LMH_THREADS == 0,
              "whole chunks per thread");
static_assert(LMH_WARPS_N * 3 * LMH_BM * 4 <= LMH_SMEM_BYTES, "the final merge fits the buffers");

#if FRAGLAB_SM80   // cp.async, ldmatrix and mma.sync with f32 accumulators (common.cuh)

#include "11_fused_lm_head_lse.cuh"   // lse_tile: the online log-sum-exp of one tile (the lab's)

#include "11_fused_lm_head_tile.cuh"   // load_chunk, mma_chunk (the backward's too)


// After a tile's last chunk: soft-cap (SOFTCAP), -inf past the vocabulary, the target's logit
// picked up by the one lane that holds it, then the online log-sum-exp (lse_tile). col0: the
// column of this lane's register 0 of accumulator j = 0; tgt[mi][r]: the target of row g + 8r.
template <bool SOFTCAP>
__device__ __forceinline__ void tile_epilogue(float (&acc)[LMH_MT][LMH_NT][4], float (&m)[LMH_MT][2],
                                              float (&l)[LMH_MT][2], float (&zt)[LMH_MT][2],
                                              const int (&tgt)[LMH_MT][2], int col0, int v,
                                              float cap, float inv_cap)
{
    if (SOFTCAP) {
#pragma unroll
        for (int mi = 0; mi < LMH_MT; ++mi)
#pragma unroll
            for (int j = 0; j < LMH_NT; ++j)
#pragma unroll
                for (int i = 0; i < 4; ++i) acc[mi][j][i] = cap * tanhf(acc[mi][j][i] * inv_cap);
    }
    if (col0 + LMH_NT * 8 > v) {         // only the last tile of the vocabulary is ragged
#pragma unroll
        for (int mi = 0; mi < LMH_MT; ++mi)
#pragma unroll
            for (int j = 0; j < LMH_NT; ++j)
#pragma unroll
                for (int i = 0; i < 4; ++i)
                    if (col0 + 8 * j + (i & 1) >= v) acc[mi][j][i] = FA2MMA_NEG_INF;
    }
#pragma unroll
    for (int mi = 0; mi < LMH_MT; ++mi)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int t = tgt[mi][r] - col0;          // 8 j + (0 or 1) when this lane holds it
#pragma unroll
            for (int j = 0; j < LMH_NT; ++j) {
                if (t == 8 * j) zt[mi][r] = acc[mi][j][2 * r];
                if (t == 8 * j + 1) zt[mi][r] = acc[mi][j][2 * r + 1];
            }
        }
    lse_tile(acc, m, l);
}

// Two partials (m in the log2 domain, l, target logit) of the same row, merged into the first
// (as lmhead_merge merges the splits). A partial that saw only masked columns has m = -inf and
// l = 0 (lse_tile's guard), so that its l times 2^(-inf) adds 0.
__device__ __forceinline__ void merge_into(float& m, float& l, float& zt, float m2, float l2, float zt2)
{
    const float mm = fmaxf(m, m2);
    if (mm != FA2MMA_NEG_INF) l = (m == mm ? l : l * exp2f(m - mm)) + (m2 == mm ? l2 : l2 * exp2f(m2 - mm));
    m = mm;
    zt += zt2;
}

template <bool BF16, bool SOFTCAP>
__device__ __forceinline__ void lmhead_fwd(const u16* __restrict__ h, const u16* __restrict__ w,
                                           const int* __restrict__ targets, float* __restrict__ part,
                                           int n, int v, int d, int tiles_per_split, float cap)
{
    extern __shared__ __align__(128) unsigned char smem[];
    const u32 base = (u32)__cvta_generic_to_shared(smem);
    const int lane = lane_id(), warp = threadIdx.x >> 5, g = lane >> 2, c4 = lane & 3;
    const int wm = warp / LMH_WARPS_N, wn = warp % LMH_WARPS_N;
    const int m0 = blockIdx.x * LMH_BM, split = blockIdx.y, splits = gridDim.y;
    const int n_tiles = (v + LMH_BN - 1) / LMH_BN;
    const int t0 = split * tiles_per_split, t1 = min(t0 + tiles_per_split, n_tiles);
    const int chunks = (d + LMH_BK - 1) / LMH_BK;
    const int steps = (t1 - t0) * chunks;          // (tile, chunk) pairs, one pipeline over all
    const float inv_cap = SOFTCAP ? 1.0f / cap : 0.0f;

    // Per lane: rows g + 8r of the warp's 16-row blocks mi; their targets, and the running state.
    int tgt[LMH_MT][2];
    float m[LMH_MT][2], l[LMH_MT][2], zt[LMH_MT][2];
#pragma unroll
    for (int mi = 0; mi < LMH_MT; ++mi)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = m0 + wm * LMH_WTM + 16 * mi + g + 8 * r;
            tgt[mi][r] = row < n ? targets[row] : -1;
            m[mi][r] = FA2MMA_NEG_INF;
            l[mi][r] = zt[mi][r] = 0.0f;
        }

    // The copies run LMH_STAGES - 1 steps ahead of the mma: step i is chunk i % chunks of tile
    // t0 + i / chunks, in stage i % LMH_STAGES (counters, not divisions).
    int ld_kc = 0, ld_n0 = t0 * LMH_BN, ld_stage = 0;
    auto load_next = [&]() {
        const u32 st = base + ld_stage * LMH_STAGE_BYTES;
        load_chunk<LMH_BM, LMH_BK, LMH_THREADS>(st, h, m0, n, ld_kc * LMH_BK, d);
        load_chunk<LMH_BN, LMH_BK, LMH_THREADS>(st + LMH_BM * LMH_BK * 2, w, ld_n0, v, ld_kc * LMH_BK, d);
        if (++ld_kc == chunks) { ld_kc = 0; ld_n0 += LMH_BN; }
        if (++ld_stage == LMH_STAGES) ld_stage = 0;
    };
#pragma unroll
    for (int i = 0; i < LMH_STAGES - 1; ++i) {
        if (i < steps) load_next();
        cp_async_commit();               // empty groups too: the wait below counts groups
    }

    float acc[LMH_MT][LMH_NT][4];
    int kc = 0, n0 = t0 * LMH_BN, stage = 0;
    for (int i = 0; i < steps; ++i) {
        cp_async_wait<LMH_STAGES - 2>(); // step i has landed (this thread's copies) ...
        __syncthreads();                 // ... everyone's, and step i - 1's stage is free
        if (i + LMH_STAGES - 1 < steps) load_next();
        cp_async_commit();
        if (kc == 0) {
#pragma unroll
            for (int mi = 0; mi < LMH_MT; ++mi)
#pragma unroll
                for (int j = 0; j < LMH_NT; ++j) acc[mi][j][0] = acc[mi][j][1] = acc[mi][j][2] = acc[mi][j][3] = 0.0f;
        }
        const u32 st = base + stage * LMH_STAGE_BYTES;
        mma_chunk<BF16, LMH_BK>(acc, st + swz<LMH_BK>(wm * LMH_WTM, 0),
                        st + LMH_BM * LMH_BK * 2 + swz<LMH_BK>(wn * LMH_WTN, 0), lane);
        if (++stage == LMH_STAGES) stage = 0;
        if (++kc == chunks) {            // the tile's logits are complete, in acc
            tile_epilogue<SOFTCAP>(acc, m, l, zt, tgt, n0 + wn * LMH_WTN + 2 * c4, v, cap, inv_cap);
            kc = 0;
            n0 += LMH_BN;
        }
    }

    // The quad's shares of l and of the target logit (m is the same in the quad already), then
    // the LMH_WARPS_N warps that share these rows merge through shared memory (the stages are
    // free: every copy has landed and every warp has left the loop).
#pragma unroll
    for (int mi = 0; mi < LMH_MT; ++mi)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            l[mi][r] += __shfl_xor_sync(FULL_MASK, l[mi][r], 1);
            l[mi][r] += __shfl_xor_sync(FULL_MASK, l[mi][r], 2);
            zt[mi][r] += __shfl_xor_sync(FULL_MASK, zt[mi][r], 1);
            zt[mi][r] += __shfl_xor_sync(FULL_MASK, zt[mi][r], 2);
        }
    cp_async_wait<0>();
    __syncthreads();
    float* red = reinterpret_cast<float*>(smem);     // [LMH_WARPS_N][3][LMH_BM]
    if (c4 == 0) {
#pragma unroll
        for (int mi = 0; mi < LMH_MT; ++mi)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int row = wm * LMH_WTM + 16 * mi + g + 8 * r;
                red[(wn * 3 + 0) * LMH_BM + row] = m[mi][r];
                red[(wn * 3 + 1) * LMH_BM + row] = l[mi][r];
                red[(wn * 3 + 2) * LMH_BM + row] = zt[mi][r];
            }
    }
    __syncthreads();
    for (int row = threadIdx.x; row < LMH_BM; row += LMH_THREADS) {
        float pm = red[row], pl = red[LMH_BM + row], pt = red[2 * LMH_BM + row];
#pragma unroll
        for (int k = 1; k < LMH_WARPS_N; ++k)
            merge_into(pm, pl, pt, red[(3 * k) * LMH_BM + row], red[(3 * k + 1) * LMH_BM + row],
                       red[(3 * k + 2) * LMH_BM + row]);
        if (m0 + row < n) {
            const size_t at = (size_t)split * n + m0 + row, plane = (size_t)splits * n;
            part[at] = pm;
            part[plane + at] = pl;
            part[2 * plane + at] = pt;
        }
    }
}

#endif  // FRAGLAB_SM80

#define LMH_KERNEL(NAME, BF16, SOFTCAP)                                                             \
    extern "C" __global__ void __launch_bounds__(LMH_THREADS, 1)                                    \
    NAME(const u16* h, const u16* w, const int* targets, float* part, int n, int v, int d,          \
         int tiles_per_split, float softcap)                                                        \
    { SM80_ONLY(lmhead_fwd<BF16, SOFTCAP>(h, w, targets, part, n, v, d, tiles_per_split, softcap)); }

LMH_KERNEL(lmhead_fwd_f16, false, false)
LMH_KERNEL(lmhead_fwd_bf16, true, false)
LMH_KERNEL(lmhead_fwd_f16_softcap, false, true)
LMH_KERNEL(lmhead_fwd_bf16_softcap, true, true)

// The splits' partials of each token merged (the same merge as the warps' above, in a fixed
// order), then loss = ln 2 (m + log2 l) - target logit; 0 for an ignored token.
extern "C" __global__ void lmhead_merge(const float* __restrict__ part, const int* __restrict__ targets,
                                        float* __restrict__ loss, int n, int splits, int ignore_index)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= n) return;
    const size_t plane = (size_t)splits * n;
    float m = -__int_as_float(0x7f800000), l = 0.0f, zt = 0.0f;
    for (int s = 0; s < splits; ++s) {
        const size_t at = (size_t)s * n + row;
        const float m2 = part[at], l2 = part[plane + at];
        const float mm = fmaxf(m, m2);
        if (mm != -__int_as_float(0x7f800000))
            l = (m == mm ? l : l * exp2f(m - mm)) + (m2 == mm ? l2 : l2 * exp2f(m2 - mm));
        m = mm;
        zt += part[2 * plane + at];
    }
    loss[row] = targets[row] == ignore_index ? 0.0f : (m + log2f(l)) * LMH_LN2 - zt;
}
