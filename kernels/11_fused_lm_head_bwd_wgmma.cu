// 11_fused_lm_head, backward rung "wgmma": the chunked rung's two GEMMs on Hopper's warpgroup MMA
// (sm_90a). Same arguments, grids (in their own tile) and results as lmhead_bwdc_dw_* and
// lmhead_bwdc_dh_* of kernels/11_fused_lm_head_bwd_chunked.cu, which they replace on Hopper:
//
// lmhead_wgmma_dw_<f16|bf16>(G, ldg, h, flags, ftiles, rows, n, d, v0, gscale, dw)
//            grid (ftiles, ceil(d / LMG_BN)): C = G[:, 128 words of the chunk]^T h over k = the
//            n tokens, times gscale, rounded once into dw's rows v0 + .. below `rows`.
// lmhead_wgmma_dh_<f16|bf16>(G, ldg, w, flags, ftiles, kw, n, d, v, v0, gscale, dh32, dh, mode)
//            grid (ceil(n / LMG_BM), ceil(d / LMG_BN)): C = G[128 tokens, chunk] w[v0 .. v0 + kw]
//            over k = the chunk's kw words (zeros past v), times gscale; mode bit 0: add dh32's
//            value, bit 1: round into dh, else store into dh32. With mode 1 (a middle chunk) a
//            block none of whose k steps counts returns at once: dh32 keeps its sums.
// Block LMG_THREADS, dynamic shared memory LMG_SMEM_BYTES. Python: fraglab.fused_lm_head.backward
// (variant="wgmma").
//
// A block is the forward's three warpgroups (kernels/11_fused_lm_head_wgmma.cu) around one
// LMG_BM x LMG_BN tile of C: warpgroup 0 copies the k steps of 64 whose G tile counts (flags, as
// the mma kernels read them) through a ring of LMG_STAGES stages with cp.async; warpgroups 1
// and 2 each own 64 rows of C (128 FP32 accumulators a thread) and issue 4 wgmma m64n256k16 a
// step. What differs from the forward is the operands' layout in shared memory:
//   B (rows of w or of h, d contiguous) is MN-major: a k step's 64 rows in panels of 64 columns
//     (128 bytes a row, hopper.cuh's sw128_offset), read with "transpose B" = 1;
//   A is G. For dh its rows are tokens and k runs along each row (K-major, the forward's
//     layout of h); for dw A is G^T: k runs over G's rows (tokens) and M along them, so the stage holds
//     G's 64 rows x 128 words MN-major (one 64-word panel per consumer warpgroup), read with
//     "transpose A" = 1.
// Each element of C has one writer; launches run in order: the sums are the same every run.
#include "11_fused_lm_head_wgmma.cuh"  // hopper.cuh, the K-major swizzle, wgmma with transposes
#include "sm80.cuh"                    // pack2

constexpr int LMG_BM = 128, LMG_BN = 256, LMG_BK = 64, LMG_STAGES = 4, LMG_THREADS = 384;
constexpr int LMG_PRODUCER_REGS = 56, LMG_CONSUMER_REGS = 224;
constexpr int LMG_A_BYTES = LMG_BM * LMG_BK * 2;                  // 16 KB
constexpr int LMG_B_BYTES = LMG_BK * LMG_BN * 2;                  // 32 KB
constexpr int LMG_STAGE_BYTES = LMG_A_BYTES + LMG_B_BYTES;
constexpr int LMG_BAR_OFF = LMG_STAGES * LMG_STAGE_BYTES;
constexpr int LMG_SMEM_BYTES = lmw::ring_smem(LMG_STAGES, LMG_STAGE_BYTES);
// The launch numbers and the setmaxnreg budgets (fraglab.fused_lm_head.config reads them back;
// the tma rung's file declares them too, by including this one).
extern "C" __device__ const int lmh_wgmma_gemm_bm = LMG_BM, lmh_wgmma_gemm_bn = LMG_BN;
extern "C" __device__ const int lmh_wgmma_gemm_bk = LMG_BK, lmh_wgmma_gemm_stages = LMG_STAGES;
extern "C" __device__ const int lmh_wgmma_gemm_threads = LMG_THREADS, lmh_wgmma_gemm_smem = LMG_SMEM_BYTES;
extern "C" __device__ const int lmh_wgmma_gemm_producer_regs = LMG_PRODUCER_REGS;
extern "C" __device__ const int lmh_wgmma_gemm_consumer_regs = LMG_CONSUMER_REGS;
static_assert(LMG_SMEM_BYTES <= 227 * 1024, "the ring fits an sm_90 block's shared memory");
static_assert(LMG_BK == 64 && LMG_BM == 128 && LMG_BN == 256,
              "a k step is one 64-value panel; G's tiles are 128 wide; m64n256 wrappers");

#if FRAGLAB_SM90A

// One k step (k0 .. k0 + 63) by one producer warp: A, then B, zeros past their rows and columns.
// Each lane keeps its 16-byte chunk of the row and walks the rows with a pointer (the forward's
// load_stage does the same): about ten instructions a copy, or one warp falls behind the ring.
template <bool TRANS_A>
__device__ __forceinline__ void lmg_load(u32 st, const u16* __restrict__ G, int ldg, int m0, int a_rows,
                                         const u16* __restrict__ B, int b_row0, int b_rows, int c0, int d,
                                         int k0, int lane)
{
    if constexpr (!TRANS_A) {   // dh: G rows m0 .. (128 tokens) x columns k0 .. (64 words), K-major
        const int c = lane & 7, q = lane >> 3;
        const u16* p = G + (size_t)(m0 + q) * ldg + k0 + 8 * c;
#pragma unroll 8
        for (int r = q; r < LMG_BM; r += 4, p += 4 * (size_t)ldg) {
            const bool ok = m0 + r < a_rows;                     // k0 + 8c < kw <= ldg
            cp_async16(st + lmw::sw128(r, c), ok ? p : G, ok ? 16 : 0);
        }
    } else {                    // dw: G rows k0 .. (64 tokens) x columns m0 .. (128 words), MN-major
        const int c = lane & 15, q = lane >> 4;
        const u32 panel = st + (c >> 3) * (LMG_BK * 128);      // 64 words a panel
        const u16* p = G + (size_t)(k0 + q) * ldg + m0 + 8 * c;
#pragma unroll 8
        for (int r = q; r < LMG_BK; r += 2, p += 2 * (size_t)ldg) {
            const bool ok = k0 + r < a_rows;
            cp_async16(panel + r * 128 + (((c & 7) ^ (r & 7)) << 4), ok ? p : G, ok ? 16 : 0);
        }
    }
    // B: rows b_row0 + k0 .. (64) x columns c0 .. (LMG_BN of d), MN-major: lane = chunk
    const bool col_ok = c0 + 8 * lane < d;
    const u32 panel = st + LMG_A_BYTES + (lane >> 3) * (LMG_BK * 128);
    const u16* p = B + (size_t)(b_row0 + k0) * d + c0 + 8 * lane;
#pragma unroll 8
    for (int r = 0; r < LMG_BK; ++r, p += d) {
        const bool ok = col_ok && b_row0 + k0 + r < b_rows;
        cp_async16(panel + r * 128 + (((lane & 7) ^ (r & 7)) << 4), ok ? p : B, ok ? 16 : 0);
    }
}

// The block's tile: C = A B over the k steps whose G tile counts, times gscale, into rows m0 ..
// below `rows` (row-major, d a row) and columns c0 .. below d; prev (or nullptr): FP32 values
// to add; out16 (or nullptr): where the result goes in 16 bits, else f32_out.
//
// TMA (the "tma" rung, kernels/11_fused_lm_head_bwd_tma.cu): one producer thread asks for each k
// step's boxes instead: A through amap (dh: G in boxes of 128 tokens x 64 words, K-major; dw: G
// in boxes of 64 tokens x 64 words, two panels), B through bmap (w or h in boxes of 64 rows x 64
// columns, LMG_BN / 64 panels); the same layout as the cp.async copies, zeros past n, V and d.
template <bool BF16, bool TRANS_A, bool TMA = false>
__device__ __forceinline__ void lmg_gemm(const u16* __restrict__ G, int ldg, const u16* __restrict__ B,
                                         int b_row0, int b_rows, const unsigned char* __restrict__ flags,
                                         int ftiles, int m0, int a_rows, int k_len, int c0, int d,
                                         float gscale, int rows, const float* prev, float* f32_out,
                                         u16* out16, const void* amap = nullptr,
                                         const void* bmap = nullptr)
{
    extern __shared__ unsigned char smem_raw[];
    const u32 base = (smem_u32(smem_raw) + 1023) & ~1023u;
    const u32 full = base + LMG_BAR_OFF, empty = full + 8 * LMG_STAGES;
    if (threadIdx.x == 0) {
        for (int s = 0; s < LMG_STAGES; ++s) {
            mbar_init(full + 8 * s, 1);
            mbar_init(empty + 8 * s, 256);
        }
        mbar_init_fence();
    }
    __syncthreads();
    // Whether k step s reads a G tile that counts: (token block, tile of the chunk) of the G
    // kernel's grid; blockIdx.x is this block's words (dw) or tokens (dh).
    const int steps = (k_len + LMG_BK - 1) / LMG_BK;
    const auto counts = [&](int s) {
        const int kt = s * LMG_BK / 128;
        return flags[TRANS_A ? (size_t)kt * ftiles + blockIdx.x : (size_t)blockIdx.x * ftiles + kt] != 0;
    };
    if (threadIdx.x < 128) {
        regs_dealloc<LMG_PRODUCER_REGS>();
        if constexpr (TMA) {
            if (threadIdx.x == 0) {
                tma_ready(amap, bmap);
                int i = 0;
                for (int s = 0; s < steps; ++s) {
                    const bool skip = !counts(s);      // a k step whose G tile the filter left out
                    if (skip) continue;
                    const int st = i % LMG_STAGES, u = i / LMG_STAGES, k0 = s * LMG_BK;
                    if (u > 0) mbar_wait(empty + 8 * st, (u - 1) & 1);
                    const u32 a = base + st * LMG_STAGE_BYTES, bar = full + 8 * st;
                    mbar_arrive_expect_tx(bar, LMG_STAGE_BYTES);          // whole boxes, zeros too
                    if constexpr (TRANS_A) {         // dw: G rows k0 .. x words m0 .., two panels
                        tma_load_2d(a, amap, m0, k0, bar);
                        tma_load_2d(a + LMG_BK * 128, amap, m0 + 64, k0, bar);
                    } else {                         // dh: G rows m0 .. x words k0 ..
                        tma_load_2d(a, amap, k0, m0, bar);
                    }
#pragma unroll
                    for (int p = 0; p < LMG_BN / 64; ++p)   // B: rows b_row0 + k0 .., columns c0 + 64 p ..
                        tma_load_2d(a + LMG_A_BYTES + p * LMG_BK * 128, bmap, c0 + 64 * p,
                                    b_row0 + k0, bar);
                    ++i;
                }
            }
            return;
        }
        // producer: the i-th step that counts goes to stage i % STAGES, by warp i % 4
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        int i = 0;
        for (int s = 0; s < steps; ++s) {
            if (!counts(s)) continue;
            if (i % 4 == warp) {
                const int st = i % LMG_STAGES, u = i / LMG_STAGES;
                if (u > 0) mbar_wait(empty + 8 * st, (u - 1) & 1);
                lmg_load<TRANS_A>(base + st * LMG_STAGE_BYTES, G, ldg, m0, a_rows, B, b_row0, b_rows,
                                  c0, d, s * LMG_BK, lane);
                cp_async_commit();
                cp_async_wait<0>();
                fence_proxy_async();
                __syncwarp();
                if (lane == 0) mbar_arrive(full + 8 * st);
            }
            ++i;
        }
    } else {
        regs_alloc<LMG_CONSUMER_REGS>();
        const int ct = threadIdx.x - 128, wg = ct >> 7, wr = (ct >> 5) & 3, lane = ct & 31;
        int live = 0;
        for (int s = 0; s < steps; ++s) live += counts(s);
        // dh of a middle chunk (sums in, sums out) where the filter left out every G tile of
        // this token block: nothing to add, so the 128 KB of FP32 sums are neither read nor
        // written (the round trip that dominates dh at large n when most tiles are skipped)
        if (live == 0 && prev != nullptr && out16 == nullptr) return;
        float acc[128];
#pragma unroll
        for (int j = 0; j < 128; ++j) acc[j] = 0.0f;
        int stage = 0, phase = 0;
        const auto issue = [&]() {
            mbar_wait(full + 8 * stage, phase);
            const u32 a = base + stage * LMG_STAGE_BYTES, b = a + LMG_A_BYTES;
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < LMG_BK / 16; ++ks) {
                // A: this warpgroup's 64 rows of C. K-major: rows 64 wg .. of the stage, the k
                // step 32 bytes along them; MN-major: panel wg (64 words), 16 k rows a step.
                const u64 da = TRANS_A ? desc_mnmajor(a + wg * LMG_BK * 128, LMG_BK, ks)
                                       : lmw::desc_k128(a + wg * 64 * 128 + 32 * ks);
                lmw::wgmma_mn<BF16, TRANS_A>(acc, da, desc_mnmajor(b, LMG_BK, ks));
            }
            wgmma_commit();
        };
        const auto advance = [&]() { if (++stage == LMG_STAGES) { stage = 0; phase ^= 1; } };
        if (live > 0) {
            issue();
            for (int i = 1; i < live; ++i) {
                const int prev_stage = stage;
                advance();
                issue();
                wgmma_wait<1>();               // step i - 1 has landed
                mbar_arrive(empty + 8 * prev_stage);
            }
            wgmma_wait<0>();
            pin(acc);
            mbar_arrive(empty + 8 * stage);
        }
        // lane (g, c4): registers 4j .. 4j + 3 = rows g and g + 8, columns 8j + 2c4, + 1
        const int g = lane >> 2, c4 = lane & 3;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = m0 + 64 * wg + 16 * wr + g + 8 * r;
            if (row >= rows) continue;
#pragma unroll
            for (int j = 0; j < LMG_BN / 8; ++j) {
                const int col = c0 + 8 * j + 2 * c4;        // even, and d is a multiple of 16
                if (col >= d) continue;
                const size_t at = (size_t)row * d + col;
                float x0 = acc[4 * j + 2 * r] * gscale, x1 = acc[4 * j + 2 * r + 1] * gscale;
                if (prev) {
                    const float2 p = *reinterpret_cast<const float2*>(prev + at);
                    x0 += p.x;
                    x1 += p.y;
                }
                if (out16) *reinterpret_cast<u32*>(out16 + at) = sm80::pack2<BF16>(x0, x1);
                else *reinterpret_cast<float2*>(f32_out + at) = make_float2(x0, x1);
            }
        }
    }
}

#endif  // FRAGLAB_SM90A

#ifndef LMG_GEMM_ONLY   // kernels/11_fused_lm_head_bwd_tma.cu includes this file for lmg_gemm
#define LMG_KERNELS(T, BF16)                                                                        \
    extern "C" __global__ void __launch_bounds__(LMG_THREADS, 1)                                    \
    lmhead_wgmma_dw_##T(const u16* G, int ldg, const u16* h, const unsigned char* flags, int ftiles, \
                        int rows, int n, int d, int v0, const float* gscale, u16* dw)               \
    { SM90A_ONLY((lmg_gemm<BF16, true>(G, ldg, h, 0, n, flags, ftiles, blockIdx.x * 128, n, n,      \
                                       blockIdx.y * LMG_BN, d, *gscale, rows, nullptr, nullptr,     \
                                       dw + (size_t)v0 * d))); }                                    \
    extern "C" __global__ void __launch_bounds__(LMG_THREADS, 1)                                    \
    lmhead_wgmma_dh_##T(const u16* G, int ldg, const u16* w, const unsigned char* flags, int ftiles, \
                        int kw, int n, int d, int v, int v0, const float* gscale, float* dh32,      \
                        u16* dh, int mode)                                                          \
    { SM90A_ONLY((lmg_gemm<BF16, false>(G, ldg, w, v0, v, flags, ftiles, blockIdx.x * LMG_BM, n, kw, \
                                        blockIdx.y * LMG_BN, d, *gscale, n,                         \
                                        (mode & 1) ? dh32 : nullptr, dh32,                          \
                                        (mode & 2) ? dh : nullptr))); }

LMG_KERNELS(f16, false)
LMG_KERNELS(bf16, true)
#endif  // LMG_GEMM_ONLY
