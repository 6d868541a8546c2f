// 10_fa3_pipelining: the attention kernel every variant shares, less its consumer main loop.
//
// One CTA = 3 warpgroups (384 threads) and 128 query rows of one head (the tma rung's tuning also
// builds -DFA3_CONSUMERS=3: 4 warpgroups, 512 threads, 192 rows):
//   warpgroup 0, the producer: gives registers away (setmaxnreg.dec), then copies Q once and
//     the K tiles (warps 0-1) and V tiles (warps 2-3) of BC keys with cp.async into two rings
//     of STAGES = 3 shared-memory stages, each copy signalled on an mbarrier "full" once it
//     landed;
//   warpgroups 1 and 2, the consumers: take registers (setmaxnreg.inc); each owns 64 query
//     rows and runs a variant's main loop (kernels/10_fa3_pipelining_<variant>.cu) over the key
//     tiles with wgmma: S = Q K_j^T (m64nBCk16, both operands from shared memory), softmax in
//     registers, O += P V_j (m64nDk16, P from registers, V read transposed), releasing each stage
//     on an mbarrier "empty" once its last reader finished.
// The variants differ only in the order of those steps: which wgmma group is in flight while
// the softmax runs (FlashAttention-3, section 3.2 and Algorithm 2).
//
// Arguments (the FA-2 kernel's): q, k, v, o (B, H, N, D) contiguous f16/bf16 bit patterns, n,
// scale * log2(e), causal, and three tensor maps (the tma rung). Grid (ceil(N / FA3_BR), B * H);
// block FA3_THREADS; dynamic shared memory
// Fa3Config<D, BC>::SMEM (fa3_d<D>_smem, which the launch reads back: FA3_CONSTANTS).
// Rows past N: K and V rows are zero-filled by the copy and their keys masked to -inf; query
// rows are computed on zeros and not stored.
#pragma once
#include "10_fa3_pipelining.cuh"

#ifndef FA3_CONSUMERS
#define FA3_CONSUMERS 2                    // consumer warpgroups (-DFA3_CONSUMERS=3: the tma rung's
#endif                                     // tuning builds three, 192 query rows a CTA)
constexpr int FA3_NC = FA3_CONSUMERS;
constexpr int FA3_BR = 64 * FA3_NC;       // query rows per CTA (64 per consumer warpgroup)
#ifndef FA3_ONE_SOFTMAX
#define FA3_ONE_SOFTMAX 0
#endif
#ifndef FA3_STAGES_DEF
#define FA3_STAGES_DEF 3                   // -DFA3_STAGES_DEF=2: the bench's shallower ring
#endif
constexpr int FA3_STAGES = FA3_STAGES_DEF; // K/V ring depth (d = 128: 1 KB + 32 + 6 x 32 KB of 227)
constexpr int FA3_THREADS = 128 * (1 + FA3_NC);   // the producer warpgroup and the consumers
// The launch reads its numbers from the compiled file (fraglab.launch.constants): the CTA's
// query rows and threads here, each head dimension's key tile, ring depth and shared memory
// beside its kernels (FA3_KERNELS).
extern "C" __device__ const int fa3_rows = FA3_BR;
extern "C" __device__ const int fa3_threads = FA3_THREADS;
extern "C" __device__ const int fa3_consumers = FA3_NC;
#ifndef FA3_PRODUCER_REGS_DEF
#define FA3_PRODUCER_REGS_DEF 24           // register budgets after setmaxnreg (-D to try others;
#endif                                     // 40/232 measured 3-6% slower for the overlapped loops)
#ifndef FA3_CONSUMER_REGS_DEF               // three consumers: 128 x 24 + 384 x 160 = 64512
#define FA3_CONSUMER_REGS_DEF (FA3_NC == 3 ? 160 : 240)
#endif
constexpr int FA3_PRODUCER_REGS = FA3_PRODUCER_REGS_DEF;  // 128 x 24 + 256 x 240 = 64512 <= 65536
constexpr int FA3_CONSUMER_REGS = FA3_CONSUMER_REGS_DEF;

template <int D, int BC> struct Fa3Config {
    // d = 256: Q is 64 KB and a K or V tile of 64 keys 32 KB, so two stages (1 KB + 64 + 4 x 32
    // KB = 193 KB of the 227) are all that fit
    static constexpr int STAGES = D == 256 && FA3_STAGES > 2 ? 2 : FA3_STAGES;
    static constexpr int Q_BYTES = FA3_BR * D * 2;
    static constexpr int KV_BYTES = BC * D * 2;
    static constexpr int K_OFF = Q_BYTES;
    static constexpr int V_OFF = Q_BYTES + STAGES * KV_BYTES;
    static constexpr int BAR_OFF = Q_BYTES + 2 * STAGES * KV_BYTES;
    // barriers: full Q, full K[S], full V[S], empty K[S], empty V[S]; + 1 KB to align the base
    static constexpr int SMEM = 1024 + BAR_OFF + 8 * (1 + 4 * STAGES);
};

#if FRAGLAB_SM90A
struct Fa3Args {
    const u16* q; const u16* k; const u16* v; u16* o; int n; float scale_log2; int causal;
    const void* qmap; const void* kmap; const void* vmap;   // tensor maps (the tma rung only)
};

// Where a CTA's pieces live in shared memory, and its place in the problem: what a producer
// needs to fill the rings.
struct Fa3Tile {
    u32 base, fullQ, fullK, fullV, emptyK, emptyV;
    int q0, tiles, bh;              // first query row, key tiles to sweep, head index (b * H + h)
    long head;                      // element offset of the head's (N x D) matrices
};

// The state and the steps of one consumer thread. The main loops call only these.
template <int D, int BC, bool BF16> struct Consumer {
    static constexpr int SN = BC / 2;          // S accumulator registers (m64nBC, f32)
    static constexpr int KT = BC / 16;         // k-steps of P V: P is KT A-fragments
    typedef float S[SN];
    typedef u32 P[KT][4];
    typedef Fa3Config<D, BC> C;
    float o[D / 2];                            // O accumulators (m64nD, f32)
    float m[2], l[2];                          // rows g and g+8: running max (log2 units), sum
    u32 sQ, sK, sV, fullK, fullV, emptyK, emptyV;
    int tiles, n, causal, q0, row[2], wg, lane, quad;
    float scale_log2;

    __device__ __forceinline__ void wait_k(int j) const { mbar_wait(fullK + 8 * (j % C::STAGES), (j / C::STAGES) & 1); }
    __device__ __forceinline__ void wait_v(int j) const { mbar_wait(fullV + 8 * (j % C::STAGES), (j / C::STAGES) & 1); }
    // one arrival per consumer warp (the barrier expects 8), after the warp's wgmma wait
    __device__ __forceinline__ void release_k(int j) const { __syncwarp(); if (lane == 0) mbar_arrive(emptyK + 8 * (j % C::STAGES)); }
    __device__ __forceinline__ void release_v(int j) const { __syncwarp(); if (lane == 0) mbar_arrive(emptyV + 8 * (j % C::STAGES)); }

    // S = Q K_j^T: D/16 wgmma (k-steps along d), one commit group. Not waited for.
    __device__ __forceinline__ void issue_qk(S& s, int j) const {
        const u32 k = sK + (j % C::STAGES) * C::KV_BYTES;
        pin(s);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks)
            wgmma_ss<BF16, 0>(s, desc_kmajor(sQ, FA3_BR, ks), desc_kmajor(k, BC, ks), ks > 0);
        wgmma_commit();
    }
    // O += P V_j: BC/16 wgmma (k-steps along the keys), A = P from registers, V transposed.
    __device__ __forceinline__ void issue_pv(const P& p, int j) {
        const u32 v = sV + (j % C::STAGES) * C::KV_BYTES;
        pin(o);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < KT; ++kk) wgmma_rs<BF16, 1>(o, p[kk], desc_mnmajor(v, BC, kk), 1);
        wgmma_commit();
    }
    // Does tile j hold keys past N, or (causal) keys after some query row of this CTA?
    __device__ __forceinline__ bool needs_mask(int j) const {
        return (j + 1) * BC > n || (causal && (j + 1) * BC - 1 > q0);
    }
    // Online softmax of S (tile j): new row maxima, P = 2^(S scale - m) packed as A fragments,
    // running sums, and corr = 2^(m_old - m_new), by which O must be rescaled (by the caller,
    // once no wgmma writing O is in flight).
    template <bool MASK> __device__ __forceinline__ void softmax_(S& s, P& p, int j, float (&corr)[2]) {
        if (MASK) {
#pragma unroll
            for (int i = 0; i < SN / 4; ++i)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int key = j * BC + 8 * i + 2 * quad + (e & 1);
                    if (key >= n || (causal && key > row[e >> 1])) s[4 * i + e] = FA2MMA_NEG_INF;
                }
        }
        float mx[2] = {FA2MMA_NEG_INF, FA2MMA_NEG_INF};
#pragma unroll
        for (int i = 0; i < SN / 4; ++i) {
            mx[0] = fmaxf(mx[0], fmaxf(s[4 * i], s[4 * i + 1]));
            mx[1] = fmaxf(mx[1], fmaxf(s[4 * i + 2], s[4 * i + 3]));
        }
        float use[2], sum[2] = {0.f, 0.f};
#pragma unroll
        for (int h = 0; h < 2; ++h) {            // the 4 lanes of a quad share a row
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(FULL_MASK, mx[h], 1));
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(FULL_MASK, mx[h], 2));
            const float mn = fmaxf(m[h], mx[h] * scale_log2);
            use[h] = mn == FA2MMA_NEG_INF ? 0.f : mn;     // a row with no key yet: no NaN
            corr[h] = fast_exp2(m[h] - use[h]);
            m[h] = mn;
        }
#pragma unroll
        for (int i = 0; i < SN / 4; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                s[4 * i + e] = fast_exp2(fmaf(s[4 * i + e], scale_log2, -use[e >> 1]));
                sum[e >> 1] += s[4 * i + e];
            }
#pragma unroll
        for (int h = 0; h < 2; ++h) l[h] = l[h] * corr[h] + sum[h];
        // accumulator -> A fragment, no data between lanes (see 05_flash_attention_fa2.cu)
#pragma unroll
        for (int kk = 0; kk < KT; ++kk)
#pragma unroll
            for (int r = 0; r < 4; ++r) p[kk][r] = pack2<BF16>(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
    }
    // Two copies of the softmax, masked and not, so that the tiles inside the sequence pay no
    // mask; -DFA3_ONE_SOFTMAX=1 keeps one masked copy (half the code of a loop unrolled twice:
    // the bench times it, the instruction cache being a suspect).
    __device__ __forceinline__ void softmax(S& s, P& p, int j, float (&corr)[2]) {
#if FA3_ONE_SOFTMAX
        softmax_<true>(s, p, j, corr);
#else
        if (needs_mask(j)) softmax_<true>(s, p, j, corr);
        else softmax_<false>(s, p, j, corr);
#endif
    }
    __device__ __forceinline__ void rescale(const float (&corr)[2]) {
#pragma unroll
        for (int i = 0; i < D / 8; ++i) {
            o[4 * i] *= corr[0]; o[4 * i + 1] *= corr[0];
            o[4 * i + 2] *= corr[1]; o[4 * i + 3] *= corr[1];
        }
    }
    // The last multiply of the sweep: O += P V_{T-1}, waited for.
    __device__ __forceinline__ void finish(const P& p) {
        wait_v(tiles - 1);
        issue_pv(p, tiles - 1);
        wgmma_wait<0>(); pin(o);
        release_v(tiles - 1);
    }
    // The first S tile: S = Q K_0^T, waited for, and its softmax (O is 0: nothing to rescale).
    __device__ __forceinline__ void first(S& s, P& p) {
        float corr[2];
        wait_k(0);
        issue_qk(s, 0);
        wgmma_wait<0>(); pin(s);
        release_k(0);
        softmax(s, p, 0, corr);
    }
    // Ping-pong: the two consumer warpgroups take turns issuing their wgmma (named barriers 1, 2;
    // 256 threads: one warpgroup waits, the other arrives).
    __device__ __forceinline__ void turn_wait() const { named_sync(1 + wg, 256); }
    __device__ __forceinline__ void turn_pass() const {     // to the next warpgroup's barrier
        named_arrive(FA3_NC == 2 ? 2 - wg : 1 + (wg + 1) % FA3_NC, 256);
    }

    // Epilogue: O / l, as 16-bit values, staged in this warpgroup's own 64 rows of the Q tile
    // (no wgmma of the warpgroup is in flight any more, and the other warpgroup never reads
    // them), in the same swizzled layout (conflict-free: the 8 rows a store instruction writes
    // land in 8 different chunks), then written to global memory in 16-byte coalesced pieces.
    __device__ __forceinline__ void store(u16* og) {
        float inv[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float t = l[h];
            t += __shfl_xor_sync(FULL_MASK, t, 1);
            t += __shfl_xor_sync(FULL_MASK, t, 2);
            inv[h] = t > 0.f ? 1.f / t : 0.f;
        }
        const u32 qtile = sQ - wg * 64 * 128;              // row 0 of the Q tile
        const int r0 = row[0] - q0;                         // row in the tile (0..127)
#pragma unroll
        for (int i = 0; i < D / 8; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                st_shared_u32(qtile + sw128_offset(r0 + 8 * h, i, FA3_BR) + 4 * quad,
                              pack2<BF16>(o[4 * i + 2 * h] * inv[h], o[4 * i + 2 * h + 1] * inv[h]));
        named_sync(1 + FA3_NC + wg, 128);                   // this warpgroup's rows are staged
        const int ct = (threadIdx.x - 128) & 127;
#pragma unroll 4
        for (int idx = ct; idx < 64 * D / 8; idx += 128) {
            const int r = 64 * wg + idx / (D / 8), ch = idx % (D / 8);
            if (q0 + r < n)
                *(uint4*)(og + (long)(q0 + r) * D + ch * 8) = ld_shared_v4(qtile + sw128_offset(r, ch, FA3_BR));
        }
    }
};

// The second half of an overlapped step, once S_j = Q K_j^T and O += P_{j-1} V_{j-1} are issued:
// S_j has landed when at most S_LEFT wgmma groups are still in flight (K_j is free again), P_next
// = softmax(S_j) runs beside the P V multiply, which has landed when at most PV_LEFT remain
// (V_{j-1} is free), and O is rescaled. pingpong and threestage end their steps with it; twostage
// writes it out (lab 10's exercise).
template <int S_LEFT, int PV_LEFT, class C>
__device__ __forceinline__ void softmax_beside_pv(C& c, typename C::S& s, typename C::P& p_next, int j,
                                                  float (&corr)[2]) {
    wgmma_wait<S_LEFT>(); pin(s);
    c.release_k(j);
    c.softmax(s, p_next, j, corr);
    wgmma_wait<PV_LEFT>(); pin(c.o);
    c.release_v(j - 1);
    c.rescale(corr);
}

// The producer of every rung up to ping-pong: Q by all 128 threads, then two warps per
// operand: warps 0-1 copy the K tiles, warps 2-3 the V tiles, warp w taking the tiles j with
// j % 2 == w % 2 into stage j % STAGES of its ring. Each warp copies its tile with cp.async,
// waits for it (wait_group 0), fences it into the async proxy and announces it on the stage's
// full barrier before it waits for its next free stage: a warp never blocks while holding a
// tile it has not announced, and K never waits for V (the three-stage loop needs K_{j+1} before
// it releases V_{j-1}; one K,V,K,V stream deadlocks there). Two tiles of each operand are in
// flight, up to STAGES in the ring. Every thread of a warp arrives: full barriers count 32
// arrivals (KV_ARRIVALS), Q's 128.
struct CpAsyncProducer {
    enum { Q_ARRIVALS = 128, KV_ARRIVALS = 32 };
    template <int D, int BC> __device__ __forceinline__ static void run(const Fa3Args& a, const Fa3Tile& t) {
        typedef Fa3Config<D, BC> C;
        const int tid = threadIdx.x;
        load_tile_sw128<FA3_BR, D>(t.base, a.q + t.head, t.q0, a.n, tid, 128);
        cp_async_commit();
        cp_async_wait<0>(); fence_proxy_async(); mbar_arrive(t.fullQ);
        const bool is_k = tid < 64;
        const u32 full = is_k ? t.fullK : t.fullV, empty = is_k ? t.emptyK : t.emptyV;
        const u32 ring = t.base + (is_k ? C::K_OFF : C::V_OFF);
        const u16* src = (is_k ? a.k : a.v) + t.head;
        for (int j = (tid >> 5) & 1; j < t.tiles; j += 2) {
            const int s = j % C::STAGES, u = j / C::STAGES;
            if (u > 0) mbar_wait(empty + 8 * s, (u - 1) & 1);
            load_tile_sw128<BC, D>(ring + s * C::KV_BYTES, src, j * BC, a.n, tid & 31, 32);
            cp_async_commit();
            cp_async_wait<0>(); fence_proxy_async(); mbar_arrive(full + 8 * s);
        }
    }
};

template <int D, int BC, bool BF16, class Mainloop, class Producer = CpAsyncProducer>
__device__ void fa3_attention(const Fa3Args a) {
    typedef Fa3Config<D, BC> C;
    extern __shared__ unsigned char smem_raw[];
    const u32 raw = smem_u32(smem_raw);
    const u32 base = (raw + 1023) & ~1023u;
    const u32 bars = base + C::BAR_OFF;
    const u32 fullQ = bars, fullK = bars + 8, fullV = fullK + 8 * C::STAGES,
              emptyK = fullV + 8 * C::STAGES, emptyV = emptyK + 8 * C::STAGES;
    // causal: the CTAs with the most key tiles first
    const int qb = a.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int q0 = qb * FA3_BR;
    const long head = (long)blockIdx.y * a.n * D;
    int tiles = (a.n + BC - 1) / BC;
    if (a.causal) tiles = min(tiles, (q0 + FA3_BR + BC - 1) / BC);
    if (threadIdx.x == 0) {
        mbar_init(fullQ, Producer::Q_ARRIVALS);
        for (int s = 0; s < C::STAGES; ++s) {
            mbar_init(fullK + 8 * s, Producer::KV_ARRIVALS);                // its producer
            mbar_init(fullV + 8 * s, Producer::KV_ARRIVALS);
            mbar_init(emptyK + 8 * s, 4 * FA3_NC);                          // every consumer warp
            mbar_init(emptyV + 8 * s, 4 * FA3_NC);
        }
        mbar_init_fence();
    }
    __syncthreads();
    const Fa3Tile t{base, fullQ, fullK, fullV, emptyK, emptyV, q0, tiles, (int)blockIdx.y, head};
    if (threadIdx.x < 128) {
        regs_dealloc<FA3_PRODUCER_REGS>();      // ---- producer (a policy: cp.async or TMA)
        Producer::template run<D, BC>(a, t);
    } else {
        // ---- consumers
        regs_alloc<FA3_CONSUMER_REGS>();
        Consumer<D, BC, BF16> c;
        const int ct = threadIdx.x - 128;
        c.wg = ct / 128;
        const int w = (ct / 32) % 4;
        c.lane = ct & 31; c.quad = c.lane & 3;
        c.row[0] = q0 + 64 * c.wg + 16 * w + c.lane / 4; c.row[1] = c.row[0] + 8;
        c.sQ = base + c.wg * 64 * 128;        // this warpgroup's 64 rows of each Q panel
        c.sK = base + C::K_OFF; c.sV = base + C::V_OFF;
        c.fullK = fullK; c.fullV = fullV; c.emptyK = emptyK; c.emptyV = emptyV;
        c.tiles = tiles; c.n = a.n; c.causal = a.causal; c.q0 = q0; c.scale_log2 = a.scale_log2;
        c.m[0] = c.m[1] = FA2MMA_NEG_INF; c.l[0] = c.l[1] = 0.f;
#pragma unroll
        for (int i = 0; i < D / 2; ++i) c.o[i] = 0.f;
        mbar_wait(fullQ, 0);
        Mainloop::run(c);
        c.store(a.o + head);
    }
}
#endif  // FRAGLAB_SM90A

// The variant files name their kernels fa3_<variant>_<f16|bf16>_d<64|128|256> with these macros;
// BC64, BC128 and BC256 are the key-tile sizes for d = 64, 128 and 256. Every kernel takes the
// same arguments; the tensor maps (qmap, kmap, vmap) are read by the TMA producer only (the other
// variants are launched with null pointers there). A variant file picks its producer by
// defining FA3_PRODUCER before these lines (the tma rung: TmaProducer).
#ifndef FA3_PRODUCER
#define FA3_PRODUCER CpAsyncProducer
#endif
// -DFA3_CONSTANTS_ONLY=1 builds the constants without the kernels: how Python plans a launch
// or a tuning sweep in a moment (fraglab.fa3_pipelining.config.file_constants).
#if defined(FA3_CONSTANTS_ONLY) && FA3_CONSTANTS_ONLY
#define FA3_KERNEL(NAME, D, BC, BF16, MAINLOOP)
#else
#define FA3_KERNEL(NAME, D, BC, BF16, MAINLOOP)                                                 \
    extern "C" __global__ void __launch_bounds__(FA3_THREADS, 1)                               \
    NAME(const u16* q, const u16* k, const u16* v, u16* o, int n, float scale_log2, int causal, \
         const void* qmap, const void* kmap, const void* vmap) {                               \
        SM90A_ONLY((fa3_attention<D, BC, BF16, MAINLOOP, FA3_PRODUCER>(                         \
            Fa3Args{q, k, v, o, n, scale_log2, causal, qmap, kmap, vmap})));                    \
    }
#endif
// fa3_d<D>_key_tile, fa3_d<D>_stages, fa3_d<D>_smem: the launch constants of head dimension D.
#define FA3_CONSTANTS(D, BC)                                                                    \
    extern "C" __device__ const int fa3_d##D##_key_tile = BC;                                  \
    extern "C" __device__ const int fa3_d##D##_stages = Fa3Config<D, BC>::STAGES;              \
    extern "C" __device__ const int fa3_d##D##_smem = Fa3Config<D, BC>::SMEM;
#define FA3_KERNELS(VARIANT, MAINLOOP, BC64, BC128)                                            \
    FA3_KERNEL(fa3_##VARIANT##_f16_d64, 64, BC64, false, MAINLOOP)                            \
    FA3_KERNEL(fa3_##VARIANT##_bf16_d64, 64, BC64, true, MAINLOOP)                            \
    FA3_KERNEL(fa3_##VARIANT##_f16_d128, 128, BC128, false, MAINLOOP)                         \
    FA3_KERNEL(fa3_##VARIANT##_bf16_d128, 128, BC128, true, MAINLOOP)                         \
    FA3_CONSTANTS(64, BC64) FA3_CONSTANTS(128, BC128)
// d = 256, in the variants whose registers hold it (chapter 10, "Head dimension 256"): O is
// m64n256 (128 f32 registers a consumer thread), the ring two stages deep (Fa3Config::STAGES).
#define FA3_KERNELS_D256(VARIANT, MAINLOOP, BC256)                                             \
    FA3_KERNEL(fa3_##VARIANT##_f16_d256, 256, BC256, false, MAINLOOP)                         \
    FA3_KERNEL(fa3_##VARIANT##_bf16_d256, 256, BC256, true, MAINLOOP)                         \
    FA3_CONSTANTS(256, BC256)
