// 11_fused_lm_head, the backward pass's second rung: the vocabulary in chunks, G written for one
// chunk at a time, then two plain GEMMs. No float atomics, no (V, d) FP32 buffer, deterministic.
//
//   G[i, v] = dl[i] (softmax(z_i)_v - [v == target[i]]) z'(i, v)    (as kernels/11_fused_lm_head_bwd.cu)
//   dw[chunk] = G[:, chunk]^T h          written once, in the inputs' 16-bit type
//   dh       += G[:, chunk] w[chunk]     in an (n, d) FP32 buffer, rounded to 16 bits after the last chunk
//
// The first rung (kernels/11_fused_lm_head_bwd.cu) adds every (token block, vocabulary tile)'s
// share of dh and dw to FP32 buffers with atomics: (n / 128 + V / 128) x 128 x d x 4 bytes of
// red.global traffic per tile pair, and a (V, d) FP32 buffer (2.1 GB at Llama 3's head). Here a
// host loop walks the vocabulary in chunks of LMC_TILES_MAX tiles or fewer (the wrapper picks the
// size from a memory budget) and, per chunk, launches three kernels:
//
// lmhead_bwdc_g_<f16|bf16>[_softcap](h, w, targets, lse, dl, G, ldg, flags, skipped, n, v, d, v0,
//                                     ignore_index, softcap, filter_eps)
//            grid (ceil(n / LMH_BM), tiles of the chunk), block LMH_THREADS, shared LMH_STAGES
//            stages: one (token block, vocabulary tile) per block, its logits recomputed as the
//            forward computes them (11_fused_lm_head_tile.cuh), G's tile from them
//            (grad_of_logits), stored to G (n, ldg) 16-bit at columns (tile - first tile of the
//            chunk) x LMH_BN ..; flags[token block][tile of the chunk] = 1 when the tile counts,
//            0 when filter_eps > 0 and every |softmax - onehot| of it is below filter_eps (its G
//            is then not written; both GEMMs skip it; skipped += 1). v0: the chunk's first word.
// lmhead_bwdc_dw_<f16|bf16>(G, ldg, h, flags, ftiles, rows, n, d, v0, gscale, dw)
//            grid (tiles of the chunk, ceil(d / LMC_BN)): C = G[:, chunk]^T h, a (rows, d) GEMM
//            over k = the n tokens, FP32 in registers, times gscale, rounded once into dw's rows
//            v0 .. v0 + rows (the chunk's words).
// lmhead_bwdc_dh_<f16|bf16>(G, ldg, w, flags, ftiles, kw, n, d, v, v0, gscale, dh32, dh, mode)
//            grid (ceil(n / LMH_BM), ceil(d / LMC_BN)): C = G[:, chunk] w[v0 .. v0 + kw], over
//            k = the chunk's kw words (a multiple of LMH_BN; words past v are zeros), times gscale;
//            mode bit 0: add dh32's value (not the first chunk), bit 1: round into dh (the last
//            chunk), else store into dh32.
// Python: fraglab.fused_lm_head.backward (variant="chunked").
//
// The GEMMs: a block computes an LMH_BM x LMC_BN tile of C over k in steps of LMC_BK through a
// cp.async pipeline of LMH_STAGES stages, warp (wm, wn) a 32 x 64 block of it (the forward's warp
// tile, the same accumulators). A is G: for dh its rows are tokens (plain ldmatrix, as the forward
// reads h); for dw it is G^T, read from G's rows of tokens with ldmatrix .trans (as the first
// rung's step 3). B is rows of w or of h, k x LMC_BN, read with ldmatrix .trans (as chapter 05
// reads V). A k step whose G tile was filtered out is not loaded at all. Each element of dw and
// dh32 has one writer per launch, and launches run in order: the sums are the same every run.
#include "sm80.cuh"        // cp.async, ldmatrix, mma.m16n8k16, the swizzle, pack2, ex2

using namespace sm80;

#include "11_fused_lm_head_config.cuh"   // LMH_*: the forward's tile, which the G kernel recomputes

constexpr int LMC_BN = 128, LMC_BK = 64;                   // C's columns (of d) and k a step
constexpr int LMC_A_BYTES = LMH_BM * LMC_BK * 2, LMC_B_BYTES = LMC_BK * LMC_BN * 2;
constexpr int LMC_STAGE_BYTES = LMC_A_BYTES + LMC_B_BYTES;
constexpr int LMC_SMEM_BYTES = LMH_STAGES * LMC_STAGE_BYTES;      // 96 KB
constexpr int LMC_G_SMEM_BYTES = LMH_STAGES * LMH_STAGE_BYTES;    // the G kernel: the forward's 96 KB
extern "C" __device__ const int lmh_gemm_bn = LMC_BN, lmh_gemm_bk = LMC_BK;
extern "C" __device__ const int lmh_gemm_smem = LMC_SMEM_BYTES, lmh_g_smem = LMC_G_SMEM_BYTES;
static_assert(LMH_BM == 128 && LMH_BN == 128 && LMC_BN == 128 && LMC_BK == 64,
              "swz<128> and swz<64> XOR 3 bits of the chunk index; a G tile is 2 k steps");
static_assert(LMH_WARPS_N * LMH_WTN == LMC_BN, "a warp's 64 columns of C");
static_assert((LMH_BM * LMC_BK / 8) % LMH_THREADS == 0 && (LMC_BK * LMC_BN / 8) % LMH_THREADS == 0,
              "whole chunks per thread");

#if FRAGLAB_SM80   // cp.async, ldmatrix and mma.sync with f32 accumulators (common.cuh)

#include "11_fused_lm_head_tile.cuh"   // load_chunk, mma_chunk, grad_of_logits

// ---- the G kernel ------------------------------------------------------------------------------

template <bool BF16, bool SOFTCAP>
__device__ __forceinline__ void bwdc_g(const u16* __restrict__ h, const u16* __restrict__ w,
                                       const int* __restrict__ targets, const float* __restrict__ lse,
                                       const float* __restrict__ dl, u16* __restrict__ G, int ldg,
                                       unsigned char* __restrict__ flags, unsigned* __restrict__ skipped,
                                       int n, int v, int d, int v0, int ignore_index, float cap,
                                       float filter_eps)
{
    extern __shared__ __align__(128) unsigned char smem[];
    const u32 base = (u32)__cvta_generic_to_shared(smem);
    const int lane = lane_id(), warp = threadIdx.x >> 5, g = lane >> 2, c4 = lane & 3;
    const int wm = warp / LMH_WARPS_N, wn = warp % LMH_WARPS_N;
    const int m0 = blockIdx.x * LMH_BM, n0 = v0 + blockIdx.y * LMH_BN;
    const int chunks = (d + LMH_BK - 1) / LMH_BK;

    int tgt[LMH_MT][2];
    float lse2[LMH_MT][2], scale[LMH_MT][2];
    grad_rows(tgt, lse2, scale, targets, lse, dl, m0 + wm * LMH_WTM, g, n, ignore_index);

    // The tile's logits: the forward's pipeline over d, for one tile.
    LogitsRing<1> ring(base, h, w, m0, n0, n, v, d, chunks);
    float acc[LMH_MT][LMH_NT][4];
    ring.logits<BF16>(acc, wm, wn, lane);
    cp_async_wait<0>();

    const bool big = grad_of_logits<SOFTCAP>(acc, tgt, lse2, scale, n0 + wn * LMH_WTN + 2 * c4, v, cap,
                                             filter_eps);
    const bool keep = filter_eps <= 0.0f || __syncthreads_or(big);
    if (threadIdx.x == 0) {
        flags[(size_t)blockIdx.x * gridDim.y + blockIdx.y] = keep ? 1 : 0;
        if (!keep) atomicAdd(skipped, 1u);
    }
    if (!keep) return;
    // G's tile to global memory: lane (g, c4) holds two neighbouring columns of rows g and g + 8.
    const int gcol0 = blockIdx.y * LMH_BN + wn * LMH_WTN + 2 * c4;
#pragma unroll
    for (int mi = 0; mi < LMH_MT; ++mi)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = m0 + wm * LMH_WTM + 16 * mi + g + 8 * r;
            if (row < n) {
                unsigned* dst = reinterpret_cast<unsigned*>(G + (size_t)row * ldg + gcol0);
#pragma unroll
                for (int j = 0; j < LMH_NT; ++j)
                    dst[4 * j] = pack2<BF16>(acc[mi][j][2 * r], acc[mi][j][2 * r + 1]);
            }
        }
}

// ---- the two GEMMs -----------------------------------------------------------------------------

// C (LMH_BM x LMC_BN tile at rows m0, columns c0) = A B over the k steps whose G tile counts.
// TRANS_A = false (dh): A = G rows m0 .. (tokens), k = words of the chunk; B = w rows v0 + k ...
// TRANS_A = true  (dw): A = G^T, k = tokens; the stage holds G rows k .. (tokens) x columns m0 ..
// (words), read with ldmatrix .trans; B = h rows k ...
// flag(s): whether k step s reads a G tile that counts (two k steps a tile).
template <bool BF16, bool TRANS_A>
__device__ __forceinline__ void bwdc_gemm(float (&acc)[LMH_MT][LMH_NT][4], const u16* __restrict__ G, int ldg,
                                          const u16* __restrict__ B, int b_row0, int b_rows,
                                          const unsigned char* __restrict__ flags, int ftiles,
                                          int m0, int a_rows, int k_len, int c0, int d)
{
    extern __shared__ __align__(128) unsigned char smem[];
    const u32 base = (u32)__cvta_generic_to_shared(smem);
    const int lane = lane_id(), warp = threadIdx.x >> 5;
    const int wm = warp / LMH_WARPS_N, wn = warp % LMH_WARPS_N;
    const int steps = (k_len + LMC_BK - 1) / LMC_BK;
    // The G tile of k step s: (token block, tile of the chunk) of the G kernel's grid.
    auto counts = [&](int s) {
        const int kt = s * LMC_BK / LMH_BN;
        return flags[TRANS_A ? (size_t)kt * ftiles + blockIdx.x : (size_t)blockIdx.x * ftiles + kt] != 0;
    };
    int live = 0;
    for (int s = 0; s < steps; ++s) live += counts(s);

    int ld_s = 0, ld_stage = 0;
    auto load_next = [&]() {
        while (!counts(ld_s)) ++ld_s;
        const int k0 = ld_s * LMC_BK;
        const u32 st = base + ld_stage * LMC_STAGE_BYTES;
        if constexpr (TRANS_A)      // G rows k0 .. (tokens, at most n), columns m0 .. (words)
            load_tile<LMC_BK, LMH_BM, LMH_THREADS>(st, G, k0, a_rows, m0, ldg, ldg);
        else                        // G rows m0 .. (tokens), columns k0 .. (words)
            load_tile<LMH_BM, LMC_BK, LMH_THREADS>(st, G, m0, a_rows, k0, ldg, ldg);
        load_tile<LMC_BK, LMC_BN, LMH_THREADS>(st + LMC_A_BYTES, B, b_row0 + k0, b_rows, c0, d, d);
        ++ld_s;
        if (++ld_stage == LMH_STAGES) ld_stage = 0;
    };
#pragma unroll
    for (int i = 0; i < LMH_STAGES - 1; ++i) {
        if (i < live) load_next();
        cp_async_commit();
    }
#pragma unroll
    for (int mi = 0; mi < LMH_MT; ++mi)
#pragma unroll
        for (int j = 0; j < LMH_NT; ++j) acc[mi][j][0] = acc[mi][j][1] = acc[mi][j][2] = acc[mi][j][3] = 0.0f;
    int stage = 0;
    for (int i = 0; i < live; ++i) {
        cp_async_wait<LMH_STAGES - 2>();
        __syncthreads();
        if (i + LMH_STAGES - 1 < live) load_next();
        cp_async_commit();
        const u32 sA = base + stage * LMC_STAGE_BYTES, sB = sA + LMC_A_BYTES;
#pragma unroll
        for (int kk = 0; kk < LMC_BK / 16; ++kk) {
            u32 a[LMH_MT][4];
#pragma unroll
            for (int mi = 0; mi < LMH_MT; ++mi) {
                const int r0 = wm * LMH_WTM + 16 * mi;
                if constexpr (TRANS_A)   // matrix q = lane / 8: tokens + 8 (q / 2), words + 8 (q % 2)
                    ldsm4<true>(a[mi], sA + swz<LMH_BM>(16 * kk + (lane & 7) + (((lane >> 4) & 1) << 3),
                                                        r0 / 8 + ((lane >> 3) & 1)));
                else
                    ldsm4<false>(a[mi], sA + swz<LMC_BK>(r0 + (lane & 15), 2 * kk + (lane >> 4)));
            }
#pragma unroll
            for (int dp = 0; dp < LMH_NT / 2; ++dp) {
                u32 b[4];
                ldsm4<true>(b, sB + swz<LMC_BN>(16 * kk + (lane & 7) + (((lane >> 3) & 1) << 3),
                                                (wn * LMH_WTN) / 8 + 2 * dp + (lane >> 4)));
#pragma unroll
                for (int mi = 0; mi < LMH_MT; ++mi) {
                    mma16816<BF16>(acc[mi][2 * dp], a[mi], b[0], b[1]);
                    mma16816<BF16>(acc[mi][2 * dp + 1], a[mi], b[2], b[3]);
                }
            }
        }
        if (++stage == LMH_STAGES) stage = 0;
    }
    cp_async_wait<0>();
}

// The block's C tile times gscale: rows m0 .. below `rows`, columns c0 .. below d. prev (or
// nullptr): FP32 values to add; f32_out (or nullptr): where the FP32 sums go; out16 (or nullptr):
// where they go rounded to 16 bits. Lane (g, c4): two neighbouring columns of rows g and g + 8.
template <bool BF16>
__device__ __forceinline__ void bwdc_store(const float (&acc)[LMH_MT][LMH_NT][4], float gscale, int m0,
                                           int rows, int c0, int d, const float* prev, float* f32_out,
                                           u16* out16)
{
    const int lane = lane_id(), warp = threadIdx.x >> 5, g = lane >> 2, c4 = lane & 3;
    const int wm = warp / LMH_WARPS_N, wn = warp % LMH_WARPS_N;
#pragma unroll
    for (int mi = 0; mi < LMH_MT; ++mi)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = m0 + wm * LMH_WTM + 16 * mi + g + 8 * r;
            if (row >= rows) continue;
#pragma unroll
            for (int j = 0; j < LMH_NT; ++j) {
                const int col = c0 + wn * LMH_WTN + 8 * j + 2 * c4;   // even, and d is a multiple of 16
                if (col >= d) continue;
                const size_t at = (size_t)row * d + col;
                float x0 = acc[mi][j][2 * r] * gscale, x1 = acc[mi][j][2 * r + 1] * gscale;
                if (prev) {
                    const float2 p = *reinterpret_cast<const float2*>(prev + at);
                    x0 += p.x;
                    x1 += p.y;
                }
                if (out16) *reinterpret_cast<u32*>(out16 + at) = pack2<BF16>(x0, x1);
                else *reinterpret_cast<float2*>(f32_out + at) = make_float2(x0, x1);
            }
        }
}

template <bool BF16>
__device__ __forceinline__ void bwdc_dw(const u16* G, int ldg, const u16* h, const unsigned char* flags,
                                        int ftiles, int rows, int n, int d, int v0, const float* gscale,
                                        u16* dw)
{
    float acc[LMH_MT][LMH_NT][4];
    const int m0 = blockIdx.x * LMH_BN, c0 = blockIdx.y * LMC_BN;
    bwdc_gemm<BF16, true>(acc, G, ldg, h, 0, n, flags, ftiles, m0, n, n, c0, d);
    bwdc_store<BF16>(acc, *gscale, m0, rows, c0, d, nullptr, nullptr, dw + (size_t)v0 * d);
}

template <bool BF16>
__device__ __forceinline__ void bwdc_dh(const u16* G, int ldg, const u16* w, const unsigned char* flags,
                                        int ftiles, int kw, int n, int d, int v, int v0,
                                        const float* gscale, float* dh32, u16* dh, int mode)
{
    float acc[LMH_MT][LMH_NT][4];
    const int m0 = blockIdx.x * LMH_BM, c0 = blockIdx.y * LMC_BN;
    bwdc_gemm<BF16, false>(acc, G, ldg, w, v0, v, flags, ftiles, m0, n, kw, c0, d);
    bwdc_store<BF16>(acc, *gscale, m0, n, c0, d, (mode & 1) ? dh32 : nullptr, dh32,
                     (mode & 2) ? dh : nullptr);
}

#endif  // FRAGLAB_SM80

#define LMC_G_KERNEL(NAME, BF16, SOFTCAP)                                                           \
    extern "C" __global__ void __launch_bounds__(LMH_THREADS, 1)                                    \
    NAME(const u16* h, const u16* w, const int* targets, const float* lse, const float* dl, u16* G, \
         int ldg, unsigned char* flags, unsigned* skipped, int n, int v, int d, int v0,             \
         int ignore_index, float softcap, float filter_eps)                                         \
    { SM80_ONLY(bwdc_g<BF16, SOFTCAP>(h, w, targets, lse, dl, G, ldg, flags, skipped, n, v, d, v0,  \
                                      ignore_index, softcap, filter_eps)); }

LMC_G_KERNEL(lmhead_bwdc_g_f16, false, false)
LMC_G_KERNEL(lmhead_bwdc_g_bf16, true, false)
LMC_G_KERNEL(lmhead_bwdc_g_f16_softcap, false, true)
LMC_G_KERNEL(lmhead_bwdc_g_bf16_softcap, true, true)

#define LMC_GEMM_KERNELS(T, BF16)                                                                   \
    extern "C" __global__ void __launch_bounds__(LMH_THREADS, 1)                                    \
    lmhead_bwdc_dw_##T(const u16* G, int ldg, const u16* h, const unsigned char* flags, int ftiles, \
                       int rows, int n, int d, int v0, const float* gscale, u16* dw)                \
    { SM80_ONLY(bwdc_dw<BF16>(G, ldg, h, flags, ftiles, rows, n, d, v0, gscale, dw)); }             \
    extern "C" __global__ void __launch_bounds__(LMH_THREADS, 1)                                    \
    lmhead_bwdc_dh_##T(const u16* G, int ldg, const u16* w, const unsigned char* flags, int ftiles, \
                       int kw, int n, int d, int v, int v0, const float* gscale, float* dh32,       \
                       u16* dh, int mode)                                                           \
    { SM80_ONLY(bwdc_dh<BF16>(G, ldg, w, flags, ftiles, kw, n, d, v, v0, gscale, dh32, dh, mode)); }

LMC_GEMM_KERNELS(f16, false)
LMC_GEMM_KERNELS(bf16, true)
