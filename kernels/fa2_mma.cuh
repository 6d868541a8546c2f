// fa2_mma.cuh: what the FA-2 kernels of chapters 05 and 08 share, in one place (chapter 09 uses its
// row maxima too): the per-warp steps of a key tile and of the epilogue, built on the sm_80 PTX
// helpers of sm80.cuh (cp.async, ldmatrix, mma.sync m16n8k16 with f32 accumulators, ex2.approx,
// the swizzled shared-memory layout), which namespace fa2mma takes in: S += Q K^T for one
// 16-column block of Q, the causal / ragged mask, the online softmax, O += P V, the row sums and
// the store of O. Fragment layouts, the swizzle and the reuse of S's accumulators as P's A
// fragment are explained at the top of kernels/05_flash_attention_fa2.cu.
//
// Everything is __forceinline__ and works on the caller's arrays, and the kernels that use it
// compile to the SASS they had with these steps written out (chapter 08's timings are in the book).
#pragma once
#include "sm80.cuh"      // the PTX helpers and the swizzle (cuda_fp16.h, cuda_bf16.h, common.cuh)

namespace fa2mma {

using namespace sm80;    // u32, u16, swz, cp_async16, cp_async_commit / wait, ldsm4, mma16816, pack2, fast_exp2

#if FRAGLAB_SM80   // cp.async, ldmatrix and mma.sync with f32 accumulators (common.cuh)

// ---- the steps of one key tile of BN keys, for one warp's 16 query rows ----------------------
// s[BN / 8][4]: S (then P) for 16 rows x BN keys, BN / 8 accumulators of 16 x 8.

// S += Q K^T for the 16 columns 16 kk .. 16 kk + 15 of Q (its A fragment `a`). B = K^T, and a B
// fragment holds (d = 2c, 2c+1; key g), two consecutive values of a row of K: plain ldmatrix on
// rows of K. x4: matrix 0 = keys 0-7 / cols 0-7, 1 = keys 0-7 / cols 8-15, 2 and 3 = keys 8-15.
template <int D, int BN, bool BF16>
__device__ __forceinline__ void qk_block(float (&s)[BN / 8][4], const u32 (&a)[4], u32 sK, int kk, int lane)
{
#pragma unroll
    for (int np = 0; np < BN / 16; ++np) {
        u32 b[4];
        ldsm4<false>(b, sK + swz<D>(16 * np + (lane & 7) + ((lane >> 4) << 3), 2 * kk + ((lane >> 3) & 1)));
        mma16816<BF16>(s[2 * np], a, b[0], b[1]);
        mma16816<BF16>(s[2 * np + 1], a, b[2], b[3]);
    }
}

// Keys past n, and (causal) keys after the query row, get -inf. Key tile at k0; row0 = query
// index of this lane's row g (registers 2, 3 of an accumulator are row g + 8).
template <int BN>
__device__ __forceinline__ void mask_tile(float (&s)[BN / 8][4], int k0, int n, bool causal, int row0, int c4)
{
#pragma unroll
    for (int t = 0; t < BN / 8; ++t)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int key = k0 + 8 * t + 2 * c4 + (i & 1), row = row0 + 8 * (i >> 1);
            if (key >= n || (causal && key > row)) s[t][i] = FA2MMA_NEG_INF;
        }
}

// The row maxima of a tile of S in this lane's registers (0, 1: row g; 2, 3: row g + 8), not
// yet over the quad.
template <int BN> __device__ __forceinline__ void row_max(const float (&s)[BN / 8][4], float (&mx)[2])
{
    mx[0] = mx[1] = FA2MMA_NEG_INF;
#pragma unroll
    for (int t = 0; t < BN / 8; ++t) {
        mx[0] = fmaxf(mx[0], fmaxf(s[t][0], s[t][1]));
        mx[1] = fmaxf(mx[1], fmaxf(s[t][2], s[t][3]));
    }
}

// Row r's maximum over the quad (lanes 4g .. 4g+3 hold the row: two xor-shuffles) into mx[r], and
// the row's new running maximum max(m, mx[r] scale_log2), log2 domain.
__device__ __forceinline__ float new_max(float (&mx)[2], int r, float m, float scale_log2)
{
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(FULL_MASK, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(FULL_MASK, mx[r], 2));
    return fmaxf(m, mx[r] * scale_log2);
}

// Online softmax on the accumulators (Alg. 4 of the in-register paper, FA-2 form): registers
// 0, 1 of each accumulator are row g, registers 2, 3 row g + 8; the quad (lanes 4g .. 4g+3)
// holds the whole row, so two xor-shuffles finish each row reduction. m (log2 domain) becomes
// max(m, rowmax(S) scale_log2); O and l are rescaled by 2^(m_old - m_new); S becomes P = 2^(S
// scale_log2 - m) in place, and l += rowsum(P): a per-lane partial sum until the epilogue (every
// lane of a quad scales it by the same factor). Out too: mx, the tile's row maxima (unscaled),
// and m_use, what P's exponents subtract. (The caller declares them: as the helper's own arrays
// they changed the instruction order of chapter 08's qglobal kernels, and a register count.)
template <int D, int BN>
__device__ __forceinline__ void online_softmax(float (&s)[BN / 8][4], float (&o)[D / 8][4], float (&m)[2],
                                               float (&l)[2], float scale_log2, float (&mx)[2], float (&m_use)[2])
{
    row_max<BN>(s, mx);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const float m_new = new_max(mx, r, m[r], scale_log2);
        // A row with no visible key yet has m_new = -inf; subtract 0 instead, so that every
        // exponent is -inf - 0 = -inf -> 0 and never -inf - (-inf) = NaN.
        m_use[r] = m_new == FA2MMA_NEG_INF ? 0.0f : m_new;
        const float alpha = fast_exp2(m[r] - m_use[r]);
        m[r] = m_new;
        l[r] *= alpha;
#pragma unroll
        for (int t = 0; t < D / 8; ++t) { o[t][2 * r] *= alpha; o[t][2 * r + 1] *= alpha; }
    }
#pragma unroll
    for (int t = 0; t < BN / 8; ++t)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            s[t][i] = fast_exp2(fmaf(s[t][i], scale_log2, -m_use[i >> 1]));
            l[i >> 1] += s[t][i];
        }
}

// O += P V for a tile of BN keys. A = P straight from S's accumulators (the top of
// kernels/05_flash_attention_fa2.cu says why that is allowed), packed 16 keys at a time into p.
// B = V (keys x d) and a B fragment holds (keys 2c, 2c+1; column g): two values of one column of
// V, so ldmatrix .trans on rows of V into b. x4: matrix 0 = keys 0-7 / cols 0-7, 1 = keys 8-15 /
// cols 0-7, 2 and 3 = the same for cols 8-15. (The caller declares p and b, as online_softmax's
// mx and m_use: where these arrays are declared changes ptxas's code for chapter 08's kernels.)
template <int D, int BN, bool BF16>
__device__ __forceinline__ void pv_block(float (&o)[D / 8][4], const float (&s)[BN / 8][4], u32 sV, int lane,
                                         u32 (&p)[4], u32 (&b)[4])
{
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
        p[0] = pack2<BF16>(s[2 * kk][0], s[2 * kk][1]);
        p[1] = pack2<BF16>(s[2 * kk][2], s[2 * kk][3]);
        p[2] = pack2<BF16>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        p[3] = pack2<BF16>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
            ldsm4<true>(b, sV + swz<D>(16 * kk + (lane & 7) + (((lane >> 3) & 1) << 3), 2 * dp + (lane >> 4)));
            mma16816<BF16>(o[2 * dp], p, b[0], b[1]);
            mma16816<BF16>(o[2 * dp + 1], p, b[2], b[3]);
        }
    }
}

// ---- the epilogue ----------------------------------------------------------------------------
// Finish the row sums across the quad; inv = 1 / l, or 0 for a row that saw no key (not NaN).
__device__ __forceinline__ void row_inverses(float (&l)[2], float (&inv)[2])
{
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        l[r] += __shfl_xor_sync(FULL_MASK, l[r], 1);
        l[r] += __shfl_xor_sync(FULL_MASK, l[r], 2);
        inv[r] = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    }
}

// O of this warp's 16 rows, times inv (row_inverses), to rows q0 + 16 warp .. of o (rows >= n are
// not written): staged in the warp's own 16 rows of the swizzled tile at sQ (no other warp reads
// them), so that the global stores are whole 16-byte chunks of rows. lane, warp, g = lane / 4 and
// c4 = lane % 4 come from the caller (computed here, they changed chapter 08's qglobal SASS).
template <int D, bool BF16>
__device__ __forceinline__ void store_o(u16* o, const float (&acc)[D / 8][4], const float (&inv)[2], u32 sQ,
                                       int q0, int n, int lane, int warp, int g, int c4)
{
    constexpr int CPR = D / 8;
#pragma unroll
    for (int t = 0; t < D / 8; ++t)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const u32 val = pack2<BF16>(acc[t][2 * r] * inv[r], acc[t][2 * r + 1] * inv[r]);
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sQ + swz<D>(16 * warp + g + 8 * r, t) + 4 * c4),
                         "r"(val) : "memory");
        }
    __syncwarp();
#pragma unroll
    for (int it = 0; it < 16 * CPR / 32; ++it) {
        const int i = lane + 32 * it, r = i / CPR, c = i % CPR, row = q0 + 16 * warp + r;
        uint4 val;
        asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(val.x), "=r"(val.y), "=r"(val.z), "=r"(val.w)
                     : "r"(sQ + swz<D>(16 * warp + r, c)) : "memory");
        if (row < n) *reinterpret_cast<uint4*>(o + (size_t)row * D + c * 8) = val;
    }
}

#endif  // FRAGLAB_SM80
}  // namespace fa2mma
