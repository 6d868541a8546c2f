// 11_fused_lm_head: the backward's step from a tile of logits to its tile of G, on accumulators in
// mma.m16n8k16's layout (which wgmma's is too, once per 8 columns): shared by both backward rungs'
// mma.sync kernels (through 11_fused_lm_head_tile.cuh) and by the Hopper G kernel
// (kernels/11_fused_lm_head_wgmma.cu). Uses the including file's LMH_LOG2E and fast_exp2.
#pragma once

// What grad_of_logits needs of rows r0 + 16 mi + g + 8 r (mi < MT, r < 2: lane g's rows of a
// warp's accumulators from row r0): tgt, the target (-1: no gradient, the row is ignored
// or at or past n), lse2, the forward's log-sum-exp in the log2 domain, scale, dl. (The Hopper G
// kernel reads its rows the same way, through pointers that are not __restrict__.)
template <int MT>
__device__ __forceinline__ void grad_rows(int (&tgt)[MT][2], float (&lse2)[MT][2], float (&scale)[MT][2],
                                          const int* __restrict__ targets, const float* __restrict__ lse,
                                          const float* __restrict__ dl, int r0, int g, int n,
                                          int ignore_index)
{
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = r0 + 16 * mi + g + 8 * r;
            const int t = row < n ? targets[row] : ignore_index;
            const bool live = row < n && t != ignore_index;
            tgt[mi][r] = live ? t : -1;
            lse2[mi][r] = live ? lse[row] * LMH_LOG2E : 0.0f;
            scale[mi][r] = live ? dl[row] : 0.0f;
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
