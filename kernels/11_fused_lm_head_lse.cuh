// 11_fused_lm_head: the online log-sum-exp of one vocabulary tile, on the accumulators (the
// chapter's lab exercise: fraglab.fused_lm_head.lab_source puts the learner's version of this
// file where kernels/11_fused_lm_head.cu includes it).
//
// Not a header to include on its own: it uses LMH_MT, LMH_NT and LMH_LOG2E of the kernel file,
// and sm80.cuh's fast_exp2 and FA2MMA_NEG_INF.
//
// s[mi][j]: the warp's logits of this tile, one 16 x 8 accumulator per (16-row block mi, 8-column
// block j); lane (g = lane / 4, c = lane % 4) holds registers 0, 1 = row g, columns 2c, 2c + 1
// and registers 2, 3 = row g + 8, same columns. The four lanes of a quad (4g .. 4g + 3) hold the
// whole of rows g and g + 8 between them, so two xor-shuffles (1, 2) finish a row's reduction:
// chapter 03's quad reduction.
// m[mi][r]: the running maximum of row g + 8r of block mi, log2 domain (logit * log2 e), -inf
// before the first tile; the same in the four lanes of the quad.
// l[mi][r]: this lane's share of sum 2^(logit * log2 e - m) over the tiles so far; the kernel adds
// the quad's four shares once, after the last tile (every lane scales its share by the same
// factor, so the shares need not be added before).
// Masked columns (past the vocabulary) are -inf and must add 0.
__device__ __forceinline__ void lse_tile(const float (&s)[LMH_MT][LMH_NT][4], float (&m)[LMH_MT][2],
                                         float (&l)[LMH_MT][2])
{
#pragma unroll
    for (int mi = 0; mi < LMH_MT; ++mi)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            // The tile's row maximum: this lane's 2 NT values, then across the quad.
            float mx = FA2MMA_NEG_INF;
#pragma unroll
            for (int j = 0; j < LMH_NT; ++j) mx = fmaxf(mx, fmaxf(s[mi][j][2 * r], s[mi][j][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 2));
            const float m_new = fmaxf(m[mi][r], mx * LMH_LOG2E);
            // A row whose columns so far are all masked has m_new = -inf: subtract 0 instead, so
            // that 2^(-inf - 0) = 0 and never 2^(-inf - (-inf)) = NaN.
            const float m_use = m_new == FA2MMA_NEG_INF ? 0.0f : m_new;
            float sum = l[mi][r] * fast_exp2(m[mi][r] - m_use);      // rescale the old share
#pragma unroll
            for (int j = 0; j < LMH_NT; ++j) {
                sum += fast_exp2(fmaf(s[mi][j][2 * r], LMH_LOG2E, -m_use));
                sum += fast_exp2(fmaf(s[mi][j][2 * r + 1], LMH_LOG2E, -m_use));
            }
            l[mi][r] = sum;
            m[mi][r] = m_new;
        }
}
