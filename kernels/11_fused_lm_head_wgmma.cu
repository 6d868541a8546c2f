// 11_fused_lm_head, rung "wgmma": the forward pass of kernels/11_fused_lm_head.cu on Hopper's
// warpgroup MMA (sm_90a), with chapter 10's warp specialization.
//
// lmhead_wgmma_fwd_<f16|bf16>[_softcap](h, w, targets, part, n, v, d, tiles_per_split, softcap,
//                                       bmax, nb)
//            the arguments, grid and outputs of lmhead_fwd_* (kernels/11_fused_lm_head.cu): per
//            token and vocabulary split the partial (max in the log2 domain, sum, target logit),
//            merged by that file's lmhead_merge. Grid (ceil(n / LMW_BM), splits), block
//            LMW_THREADS, dynamic shared memory LMW_SMEM_BYTES. Tiles of LMW_BN words.
//            With nb > 0 also each 128-word block's largest logit over the CTA's tokens:
//            bmax[token block][block] (nb = ceil(v / 128) a row, -inf before the launch), for the
//            backward's filter (GradEpi::needed). nb = 0: bmax is not touched.
//            Python: fraglab.fused_lm_head.fused_linear_cross_entropy(..., variant="wgmma").
// lmhead_wgmma_g_<f16|bf16>[_softcap](h, w, targets, lse, dl, G, ldg, flags, skipped, n, v, d, v0,
//                                     nt, ignore_index, softcap, filter_eps, bmax, nb)
//            the backward's G kernel (rung "wgmma" of fraglab.fused_lm_head.backward): the same
//            mainloop, one tile a CTA, G's epilogue instead of the log-sum-exp (GradEpi, below).
//            With the filter on and the forward's bmax (nb > 0), a CTA none of whose tokens can
//            reach filter_eps in its tile returns before its mainloop.
//
// A CTA = 3 warpgroups and LMW_BM = 128 tokens:
//   warpgroup 0, the producer (setmaxnreg.dec): streams the (vocabulary tile, chunk of 64 values
//     of d) steps of its split through a ring of LMW_STAGES shared-memory stages, each stage the
//     chunk of the 128 rows of h and of the LMW_BN rows of w, in the 128-byte-swizzled K-major
//     layout wgmma reads. Producer warp p fills the steps i = p, p + 4, ... (stage i % STAGES)
//     with cp.async, waits for its own copies, fences them into the async proxy, and arrives on
//     the stage's "full" mbarrier; it refills a stage once the 256 consumer threads arrived on
//     its "empty" mbarrier.
//   warpgroups 1 and 2, the consumers (setmaxnreg.inc): each owns 64 of the tokens and keeps
//     their 64 x LMW_BN logits of the current tile in registers, accumulated by 4 wgmma
//     m64nBNk16 a step (one commit group, waited for one step later, so the tensor cores always
//     have the next group queued). After a tile's last chunk the logits are complete: soft-cap,
//     -inf past the vocabulary, the target's logit picked up by the one lane that holds it, and
//     the online log-sum-exp of each row, lse_tile of kernels/11_fused_lm_head_lse.cuh unchanged:
//     wgmma's accumulator is mma.m16n8k16's, once per 8 columns, so one warp's 16 rows x LMW_BN
//     are the mma kernel's 1 x (LMW_BN / 8) accumulators and the same quad reduction finishes
//     each row. Each consumer warp sees whole rows of every tile: the quad's shares are added
//     once at the end and written, with no merge between warps.
// No logit is stored anywhere; shared memory holds only operands.
//
// Ragged sizes as in the mma kernel: rows of h past n and of w past v are copied as zeros,
// columns of the last chunk past d too; logits of columns past v are -inf; rows past n are not
// written. d must be a multiple of 16 (wgmma's k; the wrapper checks).
#include "sm80.cuh"                    // fast_exp2, FA2MMA_NEG_INF (what lse_tile uses), pack2
#include "11_fused_lm_head_wgmma.cuh"  // hopper.cuh, the K-major swizzle, wgmma m64n{128,256}

#ifndef LMW_BN_DEF
#define LMW_BN_DEF 256                 // -DLMW_BN_DEF=128: m64n128 tiles, 64 accumulators a thread
#endif
constexpr int LMW_BM = 128, LMW_BN = LMW_BN_DEF, LMW_BK = 64, LMW_STAGES = 4;
constexpr int LMW_THREADS = 384;
constexpr int LMW_PRODUCER_REGS = 56, LMW_CONSUMER_REGS = 224;   // 128 x 56 + 256 x 224 = 64512
constexpr int LMW_H_BYTES = LMW_BM * LMW_BK * 2;                  // 16 KB
constexpr int LMW_W_BYTES = LMW_BN * LMW_BK * 2;                  // 32 KB (BN 256)
constexpr int LMW_STAGE_BYTES = LMW_H_BYTES + LMW_W_BYTES;
constexpr int LMW_BAR_OFF = LMW_STAGES * LMW_STAGE_BYTES;
constexpr int LMW_SMEM_BYTES = lmw::ring_smem(LMW_STAGES, LMW_STAGE_BYTES);
// the G kernel: + its consumers' votes after the mbarriers, one word per 128-word block of a tile
constexpr int LMW_VOTE_OFF = LMW_BAR_OFF + 16 * LMW_STAGES;
constexpr int LMW_G_SMEM_BYTES = LMW_SMEM_BYTES + 4 * (LMW_BN / 128);
// The launch numbers and the setmaxnreg budgets (fraglab.fused_lm_head.config reads them back;
// the tma rung's file declares them too, by including this one).
extern "C" __device__ const int lmh_wgmma_bm = LMW_BM, lmh_wgmma_bn = LMW_BN, lmh_wgmma_bk = LMW_BK;
extern "C" __device__ const int lmh_wgmma_stages = LMW_STAGES, lmh_wgmma_threads = LMW_THREADS;
extern "C" __device__ const int lmh_wgmma_smem = LMW_SMEM_BYTES, lmh_wgmma_g_smem = LMW_G_SMEM_BYTES;
extern "C" __device__ const int lmh_wgmma_producer_regs = LMW_PRODUCER_REGS;
extern "C" __device__ const int lmh_wgmma_consumer_regs = LMW_CONSUMER_REGS;
static_assert(LMW_BN == 128 || LMW_BN == 256, "wgmma m64n128 or m64n256");
static_assert(LMW_SMEM_BYTES <= 227 * 1024, "the ring fits an sm_90 block's shared memory");
static_assert(LMW_H_BYTES % 1024 == 0 && LMW_W_BYTES % 1024 == 0, "tiles start on swizzle atoms");

#if FRAGLAB_SM90A

// What lse_tile (the lab's file, shared with the mma kernel) reads: one 16-row block a warp,
// LMW_BN / 8 accumulators of 16 x 8.
constexpr int LMH_MT = 1, LMH_NT = LMW_BN / 8;
constexpr float LMH_LOG2E = 1.4426950408889634f;
using sm80::fast_exp2;
#include "11_fused_lm_head_lse.cuh"
#include "11_fused_lm_head_grad.cuh"   // grad_of_logits, the G kernel's step

typedef float Acc[LMH_MT][LMH_NT][4];
typedef float AccFlat[LMW_BN / 2];

// One stage, by one producer warp: chunk k0 .. k0 + 63 of d of the LMW_BM rows m0 .. of h, then of
// the LMW_BN rows n0 .. of w, into one swizzled tile of LMW_BM + LMW_BN rows (w's rows start at
// LMW_H_BYTES, a multiple of the 1024-byte swizzle atom). Lane 8 q + c copies chunk c of rows q,
// q + 4, ... (4 rows of 128 contiguous bytes a request); zeros past row n (h), v (w) and past
// column d. One loop for both matrices, so one cp.async instruction in the source (the backward's
// GEMMs, kernels/11_fused_lm_head_bwd_wgmma.cu, use one loop per matrix instead).
__device__ __forceinline__ void load_stage(u32 st, const u16* __restrict__ h, const u16* __restrict__ w,
                                           int m0, int n, int n0, int v, int k0, int d, int lane)
{
    const int c = lane & 7, q = lane >> 3, col = k0 + 8 * c;
    const bool col_ok = col < d;
#pragma unroll 1
    for (int mat = 0; mat < 2; ++mat) {
        const u16* src = mat ? w : h;
        const int r0 = mat ? n0 : m0, rows = mat ? v : n, R = mat ? LMW_BN : LMW_BM;
        const u32 dst = st + (mat ? LMW_H_BYTES : 0);
        const u16* p = src + (size_t)(r0 + q) * d + col;
#pragma unroll 8
        for (int r = q; r < R; r += 4, p += 4 * (size_t)d) {
            const bool ok = col_ok && r0 + r < rows;
            cp_async16(dst + lmw::sw128(r, c), ok ? p : src, ok ? 16 : 0);
        }
    }
}

// After a tile's last chunk (no wgmma in flight): soft-cap, -inf past the vocabulary, the target's
// logit picked up (the caller then runs the online log-sum-exp). n0: the tile's first word;
// c4 = lane % 4.
template <bool SOFTCAP>
__device__ __forceinline__ void tile_epilogue(Acc& acc, float (&m)[LMH_MT][2], float (&l)[LMH_MT][2],
                                              float (&zt)[LMH_MT][2], const int (&tgt)[2], int n0,
                                              int c4, int v, float cap, float inv_cap)
{
    const int col0 = n0 + 2 * c4;                      // the column of this lane's register 0
    if (SOFTCAP) {
#pragma unroll
        for (int j = 0; j < LMH_NT; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[0][j][i] = cap * tanhf(acc[0][j][i] * inv_cap);
    }
    if (n0 + LMW_BN > v) {   // only the vocabulary's last tile is ragged
#pragma unroll
        for (int j = 0; j < LMH_NT; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i)
                if (col0 + 8 * j + (i & 1) >= v) acc[0][j][i] = FA2MMA_NEG_INF;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int t = tgt[r] - col0;                   // 8 j + (0 or 1) when this lane holds it
        if ((unsigned)(tgt[r] - n0) < (unsigned)LMW_BN) {   // in this tile: one tile of all
#pragma unroll
            for (int j = 0; j < LMH_NT; ++j) {
                if (t == 8 * j) zt[0][r] = acc[0][j][2 * r];
                if (t == 8 * j + 1) zt[0][r] = acc[0][j][2 * r + 1];
            }
        }
    }
}

// A float's atomic maximum through integer atomics: non-negative floats order as signed ints,
// negative ones (sign bit set, -0 included) in reverse as unsigned ints. -inf is the identity.
__device__ __forceinline__ void atomic_max_f32(float* p, float x)
{
    if (__float_as_uint(x) >> 31) atomicMin(reinterpret_cast<unsigned*>(p), __float_as_uint(x));
    else atomicMax(reinterpret_cast<int*>(p), __float_as_int(x));
}

// The mainloop both kernels of this file share: a CTA's LMW_BM tokens m0 .. against the words
// w0 .. w1 - 1 of the vocabulary (w1 - w0 a multiple of LMW_BN), a tile of LMW_BN words at a time.
// Epi says which (Epi::range, from blockIdx) and what a finished tile becomes: Epi::setup runs in
// thread 0 before the block's first barrier (`ring`: the 1024-aligned start of shared memory),
// Epi's constructor in each consumer thread after its setmaxnreg (each role computes what it needs
// after its setmaxnreg: values live across it are spilled), Epi::tile once a tile's logits are complete (no wgmma in flight), Epi::finish last.
//
// TMA (the "tma" rung, kernels/11_fused_lm_head_tma.cu): the producer is one thread that asks the
// Tensor Memory Accelerator for each stage (a box of 128 rows x 64 values of h through hmap, one
// of LMW_BN rows of w through wmap, both landing swizzled as sw128 lays them out, zeros past n, v
// and d); the stage's full barrier completes on their bytes. The cp.async producer above keeps
// at most one stage a warp in flight, because each warp waits for its own copies before it can
// announce them; this one has every free stage in flight.
template <bool BF16, class Epi, bool TMA = false>
__device__ __forceinline__ void lmw_mainloop(const u16* __restrict__ h, const u16* __restrict__ w,
                                             int n, int v, int d, const typename Epi::Args& args,
                                             const void* hmap = nullptr, const void* wmap = nullptr)
{
    extern __shared__ unsigned char smem_raw[];
    const u32 base = (smem_u32(smem_raw) + 1023) & ~1023u;
    unsigned char* ring = smem_raw + (base - smem_u32(smem_raw));
    const u32 full = base + LMW_BAR_OFF, empty = full + 8 * LMW_STAGES;
    if (threadIdx.x == 0) {
        for (int s = 0; s < LMW_STAGES; ++s) {
            mbar_init(full + 8 * s, 1);       // lane 0 of the producer warp that filled it
            mbar_init(empty + 8 * s, 256);    // every consumer thread, once its wgmma read it
        }
        Epi::setup(ring);
        mbar_init_fence();
    }
    if constexpr (Epi::MAY_SKIP) {
        // every thread's say on whether the CTA has work (Epi::needed); none: nothing to do
        if (!__syncthreads_or(Epi::needed(args, n, v))) {
            Epi::skip(args, v);
            return;
        }
    } else {
        __syncthreads();
    }
    if (threadIdx.x < 128) {
        // ---- producer: warp p fills steps p, p + 4, ..., each with one cp.async group that
        // it waits for before announcing it (its other warps' steps are in flight meanwhile).
        regs_dealloc<LMW_PRODUCER_REGS>();
        int m0, w0, w1;
        Epi::range(args, v, m0, w0, w1);
        const int chunks = (d + LMW_BK - 1) / LMW_BK, steps = (w1 - w0) / LMW_BN * chunks;
        if constexpr (TMA) {
            if (threadIdx.x == 0) {
                tma_ready(hmap, wmap);
                for (int i = 0; i < steps; ++i) {
                    const int s = i % LMW_STAGES, u = i / LMW_STAGES;
                    if (u > 0) mbar_wait(empty + 8 * s, (u - 1) & 1);   // the stage's last readers
                    const int n0 = w0 + i / chunks * LMW_BN, k0 = (i % chunks) * LMW_BK;
                    const u32 st = base + s * LMW_STAGE_BYTES;
                    mbar_arrive_expect_tx(full + 8 * s, LMW_STAGE_BYTES);   // whole boxes, zeros too
                    tma_load_2d(st, hmap, k0, m0, full + 8 * s);
                    tma_load_2d(st + LMW_H_BYTES, wmap, k0, n0, full + 8 * s);
                }
            }
            return;
        }
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        for (int i = warp; i < steps; i += 4) {
            const int s = i % LMW_STAGES, u = i / LMW_STAGES;
            if (u > 0) mbar_wait(empty + 8 * s, (u - 1) & 1);
            const int n0 = w0 + i / chunks * LMW_BN, k0 = (i % chunks) * LMW_BK;
            const u32 st = base + s * LMW_STAGE_BYTES;
            load_stage(st, h, w, m0, n, n0, v, k0, d, lane);
            cp_async_commit();
            cp_async_wait<0>();
            fence_proxy_async();
            __syncwarp();
            if (lane == 0) mbar_arrive(full + 8 * s);
        }
    } else {
        // ---- consumers: warpgroup wg owns tokens m0 + 64 wg ..; warp wr of it 16 of them.
        regs_alloc<LMW_CONSUMER_REGS>();
        int m0, w0, w1;
        Epi::range(args, v, m0, w0, w1);
        const int chunks = (d + LMW_BK - 1) / LMW_BK;
        const int ct = threadIdx.x - 128, wg = ct >> 7, wr = (ct >> 5) & 3, lane = ct & 31;
        const int row0 = m0 + 64 * wg + 16 * wr + (lane >> 2);     // rows row0 and row0 + 8
        Epi epi(args, ring, n, v, row0, lane);
        Acc acc;
        AccFlat& af = reinterpret_cast<AccFlat&>(acc);
#pragma unroll
        for (int i = 0; i < LMW_BN / 2; ++i) af[i] = 0.0f;

        // Every thread arrives (one instruction a warp): a lane-0-only arrival is a divergent
        // path while the next step's wgmma is in flight, and ptxas then serializes every wgmma
        // (C7518: "compiler-inserted WG.DP in divergent path").
        const auto release = [&](int s) {
            mbar_arrive(empty + 8 * s);
        };
        // Step (tile, chunk kc) in the ring's stage `stage`: wait for it, then the 4 wgmma of its
        // k-steps in one commit group (kc = 0 overwrites the accumulators).
        int stage = 0, phase = 0;
        const auto issue = [&](int kc) {
            mbar_wait(full + 8 * stage, phase);
            const u32 a = base + stage * LMW_STAGE_BYTES + wg * 64 * 128;   // this group's 64 rows
            const u32 b = base + stage * LMW_STAGE_BYTES + LMW_H_BYTES;
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < LMW_BK / 16; ++ks)
                lmw::wgmma<BF16>(af, lmw::desc_k128(a + 32 * ks), lmw::desc_k128(b + 32 * ks),
                                 kc > 0 || ks > 0);
            wgmma_commit();
        };
        const auto advance = [&]() { if (++stage == LMW_STAGES) { stage = 0; phase ^= 1; } };
        // A tile: its first chunk issued, then each next one issued before the one before it is
        // waited for (one group always queued behind the running one) and its stage released;
        // the accumulators stay in flight only inside the chunk loop, whose every path issues
        // and waits alike (ptxas injects waits where paths that differ meet: C7517).
        for (int n0 = w0; n0 < w1; n0 += LMW_BN) {
            issue(0);
            for (int kc = 1; kc < chunks; ++kc) {
                const int prev = stage;
                advance();
                issue(kc);
                wgmma_wait<1>();                // chunk kc - 1 has landed
                release(prev);
            }
            wgmma_wait<0>();                    // the tile's logits are complete
            pin(af);
            release(stage);
            advance();
            epi.tile(acc, n0);
        }
        epi.finish();
    }
}

// ---- the forward: each tile's online log-sum-exp; per token and split the partials -------------

template <bool SOFTCAP>
struct LseEpi {
    struct Args { const int* targets; float* part; int tiles_per_split; float cap; float* bmax; int nb; };
    static constexpr bool MAY_SKIP = false;
    static constexpr int BLOCKS = LMW_BN / 128, NTB = LMH_NT / BLOCKS;   // 128-word blocks a tile
    // The split's tiles t0 .. t1 - 1 (none when t0 is past the last tile).
    static __device__ __forceinline__ void setup(unsigned char*) {}
    static __device__ __forceinline__ void range(const Args& a, int v, int& m0, int& w0, int& w1) {
        const int n_tiles = (v + LMW_BN - 1) / LMW_BN, t0 = blockIdx.y * a.tiles_per_split;
        m0 = blockIdx.x * LMW_BM;
        w0 = t0 * LMW_BN;
        w1 = min(t0 + a.tiles_per_split, n_tiles) * LMW_BN;
    }
    float* part;
    float* bmax;
    int n, v, row0, lane, c4, nb, tgt[2];
    float cap, inv_cap, m[LMH_MT][2], l[LMH_MT][2], zt[LMH_MT][2];
    __device__ __forceinline__ LseEpi(const Args& a, unsigned char*, int n_, int v_, int row0_, int lane_)
        : part(a.part), bmax(a.bmax), n(n_), v(v_), row0(row0_), lane(lane_), c4(lane_ & 3),
          nb(a.nb), cap(a.cap), inv_cap(SOFTCAP ? 1.0f / a.cap : 0.0f) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            tgt[r] = row0 + 8 * r < n ? a.targets[row0 + 8 * r] : -1;
            m[0][r] = FA2MMA_NEG_INF;
            l[0][r] = zt[0][r] = 0.0f;
        }
    }
    __device__ __forceinline__ void tile(Acc& acc, int n0) {
        tile_epilogue<SOFTCAP>(acc, m, l, zt, tgt, n0, c4, v, cap, inv_cap);
        if (nb > 0) block_max(acc, n0);
        lse_tile(acc, m, l);
    }
    // Each 128-word block's largest logit over the warp's rows below n (rows past n are zeros,
    // not tokens; words past v are -inf already): the lane's, the warp's by xor-shuffles, then
    // one atomic maximum a warp into bmax[token block][block].
    __device__ __forceinline__ void block_max(const Acc& acc, int n0) {
#pragma unroll
        for (int b = 0; b < BLOCKS; ++b) {
            float mx = FA2MMA_NEG_INF;
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                if (row0 + 8 * r >= n) continue;
#pragma unroll
                for (int j = b * NTB; j < (b + 1) * NTB; ++j)
                    mx = fmaxf(mx, fmaxf(acc[0][j][2 * r], acc[0][j][2 * r + 1]));
            }
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, o));
            const int blk = n0 / 128 + b;
            if (lane == 0 && blk < nb) atomic_max_f32(bmax + (size_t)blockIdx.x * nb + blk, mx);
        }
    }
    // The quad's shares of l and of the target logit (m is the quad's already); the warp saw
    // whole rows, so lane c4 = 0 writes its two rows' partials.
    __device__ __forceinline__ void finish() {
        const int split = blockIdx.y, splits = gridDim.y;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            l[0][r] += __shfl_xor_sync(FULL_MASK, l[0][r], 1);
            l[0][r] += __shfl_xor_sync(FULL_MASK, l[0][r], 2);
            zt[0][r] += __shfl_xor_sync(FULL_MASK, zt[0][r], 1);
            zt[0][r] += __shfl_xor_sync(FULL_MASK, zt[0][r], 2);
            const int row = row0 + 8 * r;
            if (c4 == 0 && row < n) {
                const size_t at = (size_t)split * n + row, plane = (size_t)splits * n;
                part[at] = m[0][r];
                part[plane + at] = l[0][r];
                part[2 * plane + at] = zt[0][r];
            }
        }
    }
};

// ---- the backward's G kernel: one tile a CTA, its logits turned into G ---------------------------
//
// As lmhead_bwdc_g_* of kernels/11_fused_lm_head_bwd_chunked.cu computes it (grad_of_logits), in
// 128-word blocks (that file's LMH_BN, the unit of its flags and of its GEMMs' k steps): a tile of
// LMW_BN words is LMW_BN / 128 of them. A block counts when filter_eps <= 0 or any |softmax -
// onehot| of its 128 x 128 is at least filter_eps: each consumer warp votes, lane 0 of a warp
// with a vote ORs a flag in shared memory, and after the consumers' named barrier every thread
// reads it. Blocks past the chunk's nt are neither computed into G nor flagged.
template <bool BF16, bool SOFTCAP>
struct GradEpi {
    struct Args {
        const int* targets; const float* lse; const float* dl; u16* G; int ldg;
        unsigned char* flags; unsigned* skipped; int v0, nt, ignore_index; float cap, filter_eps;
        const float* bmax; int nb;
    };
    static constexpr bool MAY_SKIP = true;
    static constexpr int BLOCKS = LMW_BN / 128, NTB = LMH_NT / BLOCKS;   // 128-word blocks a tile
    // Whether this thread's token can have a |softmax - onehot| at or above filter_eps in the
    // CTA's tile (thread t < LMW_BM speaks for token m0 + t): its target lies in the tile, or the
    // tile's largest logit (the forward's bmax, the same bits as the logits the mainloop makes)
    // gives a softmax at or above filter_eps against the token's lse. 2^(z log2 e - lse2) grows
    // with z, so no logit below bmax gets there either; the margin of 2^-10 in the exponent
    // covers fast_exp2's error. Without the forward's bmax or the filter, every CTA works.
    static __device__ __forceinline__ bool needed(const Args& a, int n, int v) {
        if (a.nb == 0 || a.filter_eps <= 0.0f) return true;
        int m0, w0, w1;
        range(a, v, m0, w0, w1);
        const int row = m0 + (int)threadIdx.x;
        if (threadIdx.x >= LMW_BM || row >= n) return false;
        const int t = a.targets[row];
        if (t == a.ignore_index) return false;              // no gradient: it never votes
        if (t >= w0 && t < w1) return true;                 // its target's |p - 1| is there
        const float lse2 = a.lse[row] * LMH_LOG2E, lim = log2f(a.filter_eps) - 1.0f / 1024;
        bool any = false;
#pragma unroll
        for (int b = 0; b < BLOCKS; ++b) {
            const int blk = w0 / 128 + b;
            if (blk < a.nb)
                any |= fmaf(a.bmax[(size_t)blockIdx.x * a.nb + blk], LMH_LOG2E, -lse2) >= lim;
        }
        return any;
    }
    // A CTA with nothing to do: its blocks stay unflagged (the wrapper zeroed the flags) and are
    // counted as skipped, as the vote would have.
    static __device__ __forceinline__ void skip(const Args& a, int) {
        if (threadIdx.x == 0) {
            const int first = blockIdx.y * BLOCKS, left = a.nt - first;
            atomicAdd(a.skipped, (unsigned)(left < BLOCKS ? left : BLOCKS));
        }
    }
    static __device__ __forceinline__ void setup(unsigned char* ring) {
        unsigned* vote = reinterpret_cast<unsigned*>(ring + LMW_VOTE_OFF);
        for (int b = 0; b < BLOCKS; ++b) vote[b] = 0;
    }
    static __device__ __forceinline__ void range(const Args& a, int, int& m0, int& w0, int& w1) {
        m0 = blockIdx.x * LMW_BM;
        w0 = a.v0 + blockIdx.y * LMW_BN;
        w1 = w0 + LMW_BN;
    }
    const Args a;
    unsigned* vote;
    int n, v, row0, lane, tgt[1][2];
    float lse2[1][2], scale[1][2];
    __device__ __forceinline__ GradEpi(const Args& a_, unsigned char* ring, int n_, int v_, int row0_,
                                       int lane_)
        : a(a_), vote(reinterpret_cast<unsigned*>(ring + LMW_VOTE_OFF)), n(n_), v(v_), row0(row0_),
          lane(lane_) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = row0 + 8 * r;
            const int t = row < n ? a.targets[row] : a.ignore_index;
            const bool live = row < n && t != a.ignore_index;
            tgt[0][r] = live ? t : -1;
            lse2[0][r] = live ? a.lse[row] * LMH_LOG2E : 0.0f;
            scale[0][r] = live ? a.dl[row] : 0.0f;
        }
    }
    __device__ __forceinline__ void tile(Acc& acc, int n0) {
        typedef float Block[1][NTB][4];
        const int c4 = lane & 3, first = (n0 - a.v0) / 128;     // the tile's first block of the chunk
        bool keep[BLOCKS];
#pragma unroll
        for (int b = 0; b < BLOCKS; ++b) {
            Block& blk = *reinterpret_cast<Block*>(&acc[0][b * NTB][0]);
            const bool big = grad_of_logits<SOFTCAP>(blk, tgt, lse2, scale, n0 + 128 * b + 2 * c4,
                                                     v, a.cap, a.filter_eps);
            if (__any_sync(FULL_MASK, big) && lane == 0) atomicOr(&vote[b], 1u);
        }
        named_sync(1, 256);                     // the consumers' votes are in
#pragma unroll
        for (int b = 0; b < BLOCKS; ++b) keep[b] = a.filter_eps <= 0.0f || vote[b] != 0;
        const bool first_thread = threadIdx.x == 128;
#pragma unroll
        for (int b = 0; b < BLOCKS; ++b) {
            const int blk = first + b;
            if (blk >= a.nt) continue;          // past the chunk (its last tile, half used)
            if (first_thread) {
                a.flags[(size_t)blockIdx.x * a.nt + blk] = keep[b] ? 1 : 0;
                if (!keep[b]) atomicAdd(a.skipped, 1u);
            }
            if (!keep[b]) continue;
            // lane (g, c4) holds two neighbouring columns of rows row0 and row0 + 8
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int row = row0 + 8 * r;
                if (row < n) {
                    unsigned* dst = reinterpret_cast<unsigned*>(a.G + (size_t)row * a.ldg + 128 * blk + 2 * c4);
#pragma unroll
                    for (int j = 0; j < NTB; ++j)
                        dst[4 * j] = sm80::pack2<BF16>(acc[0][b * NTB + j][2 * r], acc[0][b * NTB + j][2 * r + 1]);
                }
            }
        }
    }
    __device__ __forceinline__ void finish() {}
};

#endif  // FRAGLAB_SM90A

// The kernels of a rung on lmw_mainloop, named lmhead_<RUNG>_<fwd|g>_<f16|bf16>[_softcap], their
// producer on cp.async (TMA false) or on the Tensor Memory Accelerator (TMA true: two tensor maps,
// hmap and wmap, as the last arguments; kernels/11_fused_lm_head_tma.cu).
//  - the forward: grid, block and shared memory as described at the top of this file;
//  - the backward's G kernel (the chunked rung's lmhead_bwdc_g_* on wgmma): grid (ceil(n / LMW_BM),
//    ceil(nt * 128 / LMW_BN)), block LMW_THREADS, dynamic shared memory LMW_G_SMEM_BYTES; the
//    chunk's nt blocks of 128 words from v0, flags (ceil(n / LMW_BM), nt) as that kernel writes them.
#define LMW_MAPS_false
#define LMW_MAPS_true , const void* hmap, const void* wmap
#define LMW_MAP_ARGS_false
#define LMW_MAP_ARGS_true , hmap, wmap
#define LMW_FWD_KERNEL(NAME, BF16, SOFTCAP, TMA)                                                    \
    extern "C" __global__ void __launch_bounds__(LMW_THREADS, 1)                                    \
    NAME(const unsigned short* h, const unsigned short* w, const int* targets, float* part, int n,  \
         int v, int d, int tiles_per_split, float softcap, float* bmax, int nb LMW_MAPS_##TMA)       \
    { SM90A_ONLY((lmw_mainloop<BF16, LseEpi<SOFTCAP>, TMA>(h, w, n, v, d,                           \
          {targets, part, tiles_per_split, softcap, bmax, nb} LMW_MAP_ARGS_##TMA))); }
#define LMW_G_KERNEL(NAME, BF16, SOFTCAP, TMA)                                                      \
    extern "C" __global__ void __launch_bounds__(LMW_THREADS, 1)                                    \
    NAME(const unsigned short* h, const unsigned short* w, const int* targets, const float* lse,    \
         const float* dl, unsigned short* G, int ldg, unsigned char* flags, unsigned* skipped,       \
         int n, int v, int d, int v0, int nt, int ignore_index, float softcap, float filter_eps,     \
         const float* bmax, int nb LMW_MAPS_##TMA)                                                  \
    { SM90A_ONLY((lmw_mainloop<BF16, GradEpi<BF16, SOFTCAP>, TMA>(h, w, n, v, d,                    \
          {targets, lse, dl, G, ldg, flags, skipped, v0, nt, ignore_index, softcap, filter_eps,     \
           bmax, nb} LMW_MAP_ARGS_##TMA))); }
#define LMW_KERNELS(RUNG, TMA)                                                                      \
    LMW_FWD_KERNEL(lmhead_##RUNG##_fwd_f16, false, false, TMA)                                      \
    LMW_FWD_KERNEL(lmhead_##RUNG##_fwd_bf16, true, false, TMA)                                      \
    LMW_FWD_KERNEL(lmhead_##RUNG##_fwd_f16_softcap, false, true, TMA)                               \
    LMW_FWD_KERNEL(lmhead_##RUNG##_fwd_bf16_softcap, true, true, TMA)                               \
    LMW_G_KERNEL(lmhead_##RUNG##_g_f16, false, false, TMA)                                          \
    LMW_G_KERNEL(lmhead_##RUNG##_g_bf16, true, false, TMA)                                          \
    LMW_G_KERNEL(lmhead_##RUNG##_g_f16_softcap, false, true, TMA)                                   \
    LMW_G_KERNEL(lmhead_##RUNG##_g_bf16_softcap, true, true, TMA)

#ifndef LMW_MAINLOOP_ONLY   // kernels/11_fused_lm_head_tma.cu includes this file for the mainloop
LMW_KERNELS(wgmma, false)
#endif
