// 09_instruction_diet: the FA-2 kernel of chapter 05 (kernels/05_flash_attention_fa2.cu), with
// every step of the chapter's instruction diet behind a compile-time switch. Each rung file
// kernels/09_instruction_diet_<step>.cu defines DIET_RUNG, its place on the ladder, and includes
// this header, which turns on the switch of that rung and those of every rung before it: the
// ladder reads as a diff of one switch, and the code of a step sits here beside the code it
// replaces (`if constexpr`).
//
//   diet_<step>_<f16|bf16>_d<64|128>(q, k, v, o, n, scale_log2, causal)
//
// Layout and launch as chapter 05's fa2 kernels with 4 warps: q, k, v, o are (B, H, N, D)
// contiguous 16-bit values (bf16 as raw bits); any N >= 1; grid (ceil(N / BM), B * H), 128
// threads, dynamic shared memory SMEM bytes (Cfg below; diet_d<D>_smem, which the launch reads).
//
// The switches (0 = chapter 05's code), in ladder order: rung 1 turns on the first, rung 10 the last.
//   DIET_STRIDED_SWIZZLE  ldmatrix addresses of K and V as one per-thread offset XOR a constant
//                         (the seed's kernel 8): no per-address chunk ^ row arithmetic to redo
//   DIET_STRIDED_STORE    the same for the epilogue's register -> shared stores (kernel 11)
//   DIET_POINTER_LOADS    whole K/V tiles copied without per-row bounds checks: each thread's
//                         16-byte chunks sit at fixed strides, so the cp.async addresses are one
//                         base plus immediates (the ragged last tile keeps the checked copy)
//   DIET_ROWS             query rows per warp: 16 (chapter 05) or 32 (two m-tiles: every K and
//                         V fragment loaded from shared memory feeds twice as many HMMAs)
//   DIET_STAGES           K/V buffers: 1 (V_j arrives during S, K_{j+1} during P V) or 2 (K and
//                         V of tile j+1 arrive during all of tile j, one barrier per tile)
//   DIET_WIDE_KEYS        64-key tiles at d = 128 with 32 rows a warp too (else 32 keys there):
//                         ptxas then spills a little, outside the main loop
//   DIET_SKIP_RESCALE     O is rescaled only when a row's running max moved (a warp vote)
//   DIET_ROWSUM_MMA       d = 128: row sums l = P x ones by HMMA, not one FADD per score; l's
//                         rescale and its factors (MUFU.EX2) go behind the vote too
//   DIET_SHORT_CAUSAL     beside each kernel, diet_<step>_m16_*: 16 rows a warp, 64-row blocks
//                         (the wrapper launches it for short causal problems)
//   DIET_LAZY_RESCALE     0, or a threshold in log2 units (8 from rung 10): a row's running max
//                         moves only when a tile's max beats it by more (P <= 2^threshold
//                         meanwhile), so the rescale's vote fires on a row's first keys and
//                         almost never after
// and, on no rung, DIET_MINB: blocks per SM promised to ptxas (__launch_bounds__), default 2.
#pragma once
#include "fa2_mma.cuh"     // chapter 05's PTX helpers and swizzle (shared with 05 and 08)

// The ladder: DIET_RUNG n turns on the switches of rungs 1 to n (a switch defined before this
// header, as lab 09's source does, keeps its value; no DIET_RUNG is rung 0, chapter 05's code).
#ifndef DIET_RUNG
#define DIET_RUNG 0
#endif
#ifndef DIET_STRIDED_SWIZZLE
#define DIET_STRIDED_SWIZZLE (DIET_RUNG >= 1)
#endif
#ifndef DIET_STRIDED_STORE
#define DIET_STRIDED_STORE (DIET_RUNG >= 2)
#endif
#ifndef DIET_POINTER_LOADS
#define DIET_POINTER_LOADS (DIET_RUNG >= 3)
#endif
#ifndef DIET_ROWS
#define DIET_ROWS (DIET_RUNG >= 4 ? 32 : 16)
#endif
#ifndef DIET_STAGES
#define DIET_STAGES (DIET_RUNG >= 5 ? 2 : 1)
#endif
#ifndef DIET_WIDE_KEYS
#define DIET_WIDE_KEYS (DIET_RUNG >= 6)
#endif
#ifndef DIET_SKIP_RESCALE
#define DIET_SKIP_RESCALE (DIET_RUNG >= 7)
#endif
#ifndef DIET_ROWSUM_MMA
#define DIET_ROWSUM_MMA (DIET_RUNG >= 8)
#endif
#ifndef DIET_SHORT_CAUSAL
#define DIET_SHORT_CAUSAL (DIET_RUNG >= 9)
#endif
#ifndef DIET_LAZY_RESCALE
#define DIET_LAZY_RESCALE (DIET_RUNG >= 10 ? 8 : 0)
#endif
#ifndef DIET_LAB_COPY
#define DIET_LAB_COPY 0
#endif
#ifndef DIET_MINB
#define DIET_MINB 2
#endif

namespace diet {

using namespace fa2mma;   // u32, u16, swz, cp_async_commit/wait_all, ldsm4, mma16816, fast_exp2

constexpr bool STRIDED = DIET_STRIDED_SWIZZLE, STRIDED_STORE = DIET_STRIDED_STORE;
constexpr bool POINTER = DIET_POINTER_LOADS;
constexpr int W = 4, THREADS = 32 * W; // warps per block
constexpr int MT_DEF = DIET_ROWS / 16; // 16-row m-tiles per warp (the templates' MT)
constexpr int STAGES = DIET_STAGES;
constexpr bool WIDE = DIET_WIDE_KEYS;
constexpr bool SKIP_RESCALE = DIET_SKIP_RESCALE;
// ROWSUM_MMA at d = 128 only: at d = 64 the H100 measured the 8 extra HMMAs a tile a loss.
template <int D> constexpr bool ROWSUM = DIET_ROWSUM_MMA && D == 128;
constexpr bool LAZY = DIET_LAZY_RESCALE > 0;
constexpr float LAZY_TH = (float)DIET_LAZY_RESCALE;
static_assert(MT_DEF == 1 || MT_DEF == 2, "16 or 32 query rows per warp");
static_assert(STAGES == 1 || STAGES == 2, "one or two K/V buffers");

template <int D, int MT = MT_DEF> struct Cfg {
    static constexpr int BM = 16 * MT * W;             // query rows per block
    // Keys per K/V tile: 64, or 32 with 32 rows a warp at d = 128 (unless WIDE), where O (128
    // registers) and S of 32 x 64 (64 more) leave ptxas too few registers and it spills.
    static constexpr int BN = MT == 2 && D == 128 && !WIDE ? 32 : 64;
    static constexpr int CPR = D / 8;                  // 16-byte chunks per row
    static constexpr int RB = 2 * D;                   // bytes per row
    static constexpr int KV = BN * RB;                 // bytes of one K (or V) tile
    static constexpr int OFF_K = BM * RB, OFF_V = OFF_K + STAGES * KV;
    static constexpr int SMEM = OFF_V + STAGES * KV;
    static constexpr int RPP = THREADS / CPR;          // rows one pass of the block copies
    // With 32 rows a warp, Q's fragments (64 registers at d = 128) no longer fit beside O and
    // S: they are read again from shared memory for every tile, as FlashAttention-2 does.
    static constexpr bool Q_IN_REGS = MT == 1 || D == 64;
    static_assert(D == 64 || D == 128, "head dimension 64 or 128");
    static_assert(RPP % 8 == 0, "a pass covers whole swizzle periods (8 rows)");
};

// The offset of fragment x of a lane whose row is `row` + dr (dr a multiple of 8 known at compile
// time) and whose chunk is 2x + lo. Chapter 05 computes swz(row + dr, 2x + lo) for every x, and
// ptxas keeps D/16 such offsets per operand, or (short of registers) recomputes each with a LOP3
// and an IMAD. Strided (the seed's kernel 8): since 2x + lo = 2x ^ lo and dr only moves bits
// above the chunk, the offset is swz(row, lo) ^ (x << 5) + dr * 2D - one register per operand,
// and the XOR with a constant is the only work left per x.
template <int D> __device__ __forceinline__ u32 frag_off(int row, int lo, int x, int dr)
{
    if constexpr (STRIDED)
        return (swz<D>(row, lo) ^ (u32)(x << 5)) + (u32)(dr * 2 * D);
    else
        return swz<D>(row + dr, 2 * x + lo);
}

#if FRAGLAB_SM80   // cp.async, ldmatrix and mma.sync with f32 accumulators (common.cuh)

// 16 bytes global -> shared, asynchronously; the zfill form reads nothing and writes zeros when
// ok is false (rows past N).
__device__ __forceinline__ void cp16(u32 dst, const u16* src)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void cp16_zfill(u32 dst, const u16* src, bool ok)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(ok ? 16 : 0));
}

// One cvt.rn.{f16,bf16}x2.f32 (SASS F2FP): lo goes to the low half, hi to the high half.
template <bool BF16> __device__ __forceinline__ u32 pack(float lo, float hi)
{
    u32 r;
    if constexpr (BF16) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    else asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

#define DIET_NEG_INF (-__int_as_float(0x7f800000))

// ROWS x D rows r0 .. of src into a swizzled tile at dst, zeros past row n (chapter 05's copy:
// each chunk computes its row, checks it and builds both addresses).
template <int D, int ROWS> __device__ __forceinline__ void copy_checked(u32 dst, const u16* src, int r0, int n)
{
    using C = Cfg<D>;
#pragma unroll
    for (int it = 0; it < ROWS * C::CPR / THREADS; ++it) {
        const int i = threadIdx.x + it * THREADS, r = i / C::CPR, c = i % C::CPR;
        const bool ok = r0 + r < n;
        cp16_zfill(dst + swz<D>(r, c), src + (size_t)(ok ? r0 + r : 0) * D + c * 8, ok);
    }
}

// A whole tile, no checks: thread t copies chunk t % CPR of rows t / CPR + RPP * it. RPP is a
// multiple of 8, so the swizzle of every row is that of the first: both addresses are this
// thread's base (dst, src) plus compile-time strides, i.e. SASS immediates.
template <int D, int ROWS> __device__ __forceinline__ void copy_whole(u32 dst, const u16* src)
{
    using C = Cfg<D>;
#pragma unroll
    for (int it = 0; it < ROWS / C::RPP; ++it) cp16(dst + it * C::RPP * C::RB, src + it * C::RPP * D);
}

// Everything the tiles of one block share: shared-memory bases, this lane's fragment offsets
// and copy offsets, the global tensors and the sizes.
struct Ctx {
    u32 sQ, sK, sV;                  // tile bases (buffer 0)
    u32 q_off, k_off, v_off;         // this lane's fragment offsets (frag_off's row and lo)
    int q_row, k_row, v_row, q_lo, k_lo, v_lo;
    u32 cp_dst;                      // this thread's first chunk in a tile (copy_whole)
    int cp_src;                      // ... and in global memory (elements from the tile start)
    const u16* k;
    const u16* v;
    int n, n_tiles, row0;            // row0: query row of this lane's first row (g)
    int warp_last;                   // query row of this warp's last row
    float scale_log2;
    bool causal;
};

#if DIET_LAB_COPY   // lab 09: the learner's copy_whole, defined after this header is included
template <int D, int ROWS> __device__ __forceinline__ void copy_whole_lab(u32 dst, const u16* src);
#endif

// K or V tile t into dst: the checked copy unless POINTER and the tile is whole.
template <int D, int MT = MT_DEF>
__device__ __forceinline__ void copy_tile(const Ctx& c, u32 dst, const u16* src, int t, bool whole)
{
    constexpr int BN = Cfg<D, MT>::BN;
    if (POINTER && whole) {
#if DIET_LAB_COPY
        copy_whole_lab<D, BN>(dst + c.cp_dst, src + (size_t)t * BN * D + c.cp_src);
#else
        copy_whole<D, BN>(dst + c.cp_dst, src + (size_t)t * BN * D + c.cp_src);
#endif
    }
    else
        copy_checked<D, BN>(dst, src, t * BN, c.n);
}

template <int D, int MT = MT_DEF> struct Regs {
    static constexpr int QM = Cfg<D, MT>::Q_IN_REGS ? MT : 1, QK = Cfg<D, MT>::Q_IN_REGS ? D / 16 : 1;
    u32 q[QM][QK][4];         // A fragments of Q (when they stay in registers)
    float o[MT][D / 8][4];    // O: per m-tile D/8 accumulators of 16 rows x 8 columns
    float m[MT][2];           // rows g and g + 8: running max (log2 domain)
    // Row sums of rows g, g + 8: this lane's part, or (ROWSUM) a P x ones accumulator: 0, 1 row g.
    float l[MT][ROWSUM<D> ? 4 : 2];
};

// S += Q K^T for the m-tiles mt_lo <= mt < mt_hi (compile-time after inlining): every K fragment
// loaded from shared memory feeds all of them.
template <int D, bool BF16, int MT>
__device__ __forceinline__ void qk_tiles(float (&s)[MT][Cfg<D, MT>::BN / 8][4], Regs<D, MT>& R,
                                         const Ctx& c, u32 sK, int mt_lo, int mt_hi)
{
    using C = Cfg<D, MT>;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        u32 qf[MT][4];
        if constexpr (!C::Q_IN_REGS) {
#pragma unroll
            for (int mt = mt_lo; mt < mt_hi; ++mt) ldsm4<false>(qf[mt], c.sQ + frag_off<D>(c.q_row, c.q_lo, kk, 16 * mt));
        }
#pragma unroll
        for (int np = 0; np < C::BN / 16; ++np) {
            u32 b[4];
            ldsm4<false>(b, sK + frag_off<D>(c.k_row, c.k_lo, kk, 16 * np));
#pragma unroll
            for (int mt = mt_lo; mt < mt_hi; ++mt) {
                const u32 (&a)[4] = C::Q_IN_REGS ? R.q[mt % Regs<D, MT>::QM][kk % Regs<D, MT>::QK] : qf[mt];
                mma16816<BF16>(s[mt][2 * np], a, b[0], b[1]);
                mma16816<BF16>(s[mt][2 * np + 1], a, b[2], b[3]);
            }
        }
    }
}

// Keys past n, and (causal) keys after the query row, get -inf: m-tile mt's accumulators.
template <int BN>
__device__ __forceinline__ void mask_mtile(float (&s)[BN / 8][4], const Ctx& c, int k0, int mt, int c4)
{
#pragma unroll
    for (int t = 0; t < BN / 8; ++t)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int key = k0 + 8 * t + 2 * c4 + (i & 1), row = c.row0 + 16 * mt + 8 * (i >> 1);
            if (key >= c.n || (c.causal && key > row)) s[t][i] = DIET_NEG_INF;
        }
}

// LAZY (tuning): m-tile mt's row maxima. A row's running max moves only when the tile's max
// exceeds it by more than LAZY_TH (log2 units), so P = 2^(s - m) <= 2^LAZY_TH stays well inside
// f16/bf16 and f32 while O and l keep the old reference point: nothing to rescale. Returns
// whether a row of this lane moved, and in `shift` log2 of that row's rescale factor (0 if none).
template <int D, bool MASK, int MT>
__device__ __forceinline__ bool lazy_max(Regs<D, MT>& R, const float (&s)[Cfg<D, MT>::BN / 8][4],
                                         const Ctx& c, int mt, float (&shift)[2])
{
    float mx[2];
    row_max<Cfg<D, MT>::BN>(s, mx);
    bool moved = false;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const float m_new = new_max(mx, r, R.m[mt][r], c.scale_log2);
        const bool up = m_new > R.m[mt][r] + LAZY_TH;     // -inf + TH = -inf: the first keys move it
        // (m_new finite when up: 2^(-inf - m_new) = 0 clears a row that saw no key yet.)
        shift[r] = up ? R.m[mt][r] - m_new : 0.0f;
        R.m[mt][r] = up ? m_new : R.m[mt][r];
        moved |= up;
    }
    return moved;
}

// P = 2^(S scale - m_use) of m-tile mt, packed as A fragments (see tile), and (no ROWSUM) l += P.
template <int D, bool BF16, int MT>
__device__ __forceinline__ void exp_pack(Regs<D, MT>& R, float (&s)[Cfg<D, MT>::BN / 8][4],
                                         u32 (&p)[Cfg<D, MT>::BN / 16][4], const Ctx& c, int mt,
                                         const float (&m_use)[2])
{
#pragma unroll
    for (int t = 0; t < Cfg<D, MT>::BN / 8; ++t)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            s[t][i] = fast_exp2(fmaf(s[t][i], c.scale_log2, -m_use[i >> 1]));
            if constexpr (!ROWSUM<D>) R.l[mt][i >> 1] += s[t][i];
        }
#pragma unroll
    for (int kk = 0; kk < Cfg<D, MT>::BN / 16; ++kk) {
        p[kk][0] = pack<BF16>(s[2 * kk][0], s[2 * kk][1]);
        p[kk][1] = pack<BF16>(s[2 * kk][2], s[2 * kk][3]);
        p[kk][2] = pack<BF16>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        p[kk][3] = pack<BF16>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
}

// LAZY: S, mask and softmax of a tile into P, per m-tile: the max, one warp vote (some row's max
// moved by more than LAZY_TH: a row's first keys, then almost never) guarding the rescale of O and
// l, the exponentials.
template <int D, bool BF16, bool MASK, int MT>
__device__ __forceinline__ void lazy_softmax(Regs<D, MT>& R, const Ctx& c, float (&s)[MT][Cfg<D, MT>::BN / 8][4],
                                             u32 (&p)[MT][Cfg<D, MT>::BN / 16][4], u32 sK, int k0, int c4)
{
    qk_tiles<D, BF16, MT>(s, R, c, sK, 0, MT);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        if (MASK) mask_mtile<Cfg<D, MT>::BN>(s[mt], c, k0, mt, c4);
        float shift[2], alpha[2], m_use[2];
        if (__any_sync(FULL_MASK, lazy_max<D, MASK, MT>(R, s[mt], c, mt, shift))) {
#pragma unroll
            for (int r = 0; r < 2; ++r) alpha[r] = fast_exp2(shift[r]);   // 1 for rows that stayed
#pragma unroll
            for (int i = 0; i < (ROWSUM<D> ? 4 : 2); ++i) R.l[mt][i] *= alpha[ROWSUM<D> ? i >> 1 : i];
#pragma unroll
            for (int t = 0; t < D / 8; ++t)
#pragma unroll
                for (int i = 0; i < 4; ++i) R.o[mt][t][i] *= alpha[i >> 1];
        }
        // No -inf - (-inf) = NaN: only a masked tile can leave a row's max at -inf.
#pragma unroll
        for (int r = 0; r < 2; ++r) m_use[r] = MASK && R.m[mt][r] == DIET_NEG_INF ? 0.0f : R.m[mt][r];
        exp_pack<D, BF16, MT>(R, s[mt], p[mt], c, mt, m_use);
    }
}

// One key tile j: S = Q K^T, mask (MASK), online softmax, O += P V (chapter 05's comments say
// why P goes from the accumulators straight into the A operand).
template <int D, bool BF16, bool MASK, int MT = MT_DEF>
__device__ __forceinline__ void tile(Regs<D, MT>& R, const Ctx& c, int j)
{
    using C = Cfg<D, MT>;
    constexpr bool ROWSUM_MMA = ROWSUM<D>, LEAN = ROWSUM<D>;
    constexpr int BN = C::BN;
    const int lane = lane_id(), c4 = lane & 3, k0 = j * BN;
    const u32 buf = STAGES == 2 ? (u32)(j & 1) * C::KV : 0u;
    const u32 sK = c.sK + buf, sV = c.sV + buf;
    // POINTER: the unmasked loop stops before the tile whose successor could be ragged, so in it
    // tile j + 1 exists and is whole, and the copies need no check at all.
    constexpr bool CLEAN = POINTER && !MASK;
    if constexpr (STAGES == 1) {          // V_j arrives while S and the softmax run
        copy_tile<D, MT>(c, c.sV, c.v, j, !MASK || k0 + BN <= c.n);
        cp_async_commit();
    } else {                              // tile j has landed; tile j - 1's buffer is free
        cp_async_wait_all();
        __syncthreads();
        if (CLEAN || j + 1 < c.n_tiles) {
            const bool whole = CLEAN || k0 + 2 * BN <= c.n;
            copy_tile<D, MT>(c, c.sK + (C::KV - buf), c.k, j + 1, whole);
            copy_tile<D, MT>(c, c.sV + (C::KV - buf), c.v, j + 1, whole);
        }
        cp_async_commit();
    }

    // SKIP_RESCALE skips work that changes nothing here too. With two buffers nothing follows the
    // compute of a tile, so a warp whose rows all come before the tile's first key (causal,
    // 128-row blocks: the last diagonal tile for the first warps) leaves now: its S would be all
    // -inf, P all 0 and O unchanged.
    if constexpr (SKIP_RESCALE && MASK && STAGES == 2 && MT == 2) {
        if (c.causal && k0 > c.warp_last) return;
    }

    // S = Q K^T: per m-tile 16 rows x 64 keys = 8 accumulators of 16 x 8.
    float s[MT][BN / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int t = 0; t < BN / 8; ++t) s[mt][t][0] = s[mt][t][1] = s[mt][t][2] = s[mt][t][3] = 0.0f;
    u32 p[MT][BN / 16][4];
    if constexpr (LAZY) {
        lazy_softmax<D, BF16, MASK, MT>(R, c, s, p, sK, k0, c4);
    } else {
        qk_tiles<D, BF16, MT>(s, R, c, sK, 0, MT);
        if (MASK) {   // keys past n, and (causal) keys after the query row, get -inf
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) mask_mtile<BN>(s[mt], c, k0, mt, c4);
        }

        // Online softmax, per m-tile and row (registers 0, 1: row g; 2, 3: row g + 8).
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            float mx[2], m_use[2];
            row_max<BN>(s[mt], mx);
            float alpha[2], m_old[2];
            bool moved = false;
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const float m_new = new_max(mx, r, R.m[mt][r], c.scale_log2);
                // No -inf - (-inf) = NaN: only a masked tile can leave a row's max at -inf.
                m_use[r] = (MASK || !LEAN) && m_new == DIET_NEG_INF ? 0.0f : m_new;
                m_old[r] = R.m[mt][r];
                if constexpr (!LEAN) {   // (LEAN is ROWSUM_MMA: l has one register a row here)
                    alpha[r] = fast_exp2(m_old[r] - m_use[r]);
                    R.l[mt][r] *= alpha[r];
                }
                moved |= m_new != R.m[mt][r];
                R.m[mt][r] = m_new;
            }
            // O *= alpha: D/4 FMULs a row pair. SKIP_RESCALE: only when some row of the warp has a
            // new maximum (a warp-uniform branch); once the maxima settle, most tiles skip it. At
            // d = 64 the H100 measured the vote and branch costing more than the 32 FMULs they save.
            if (!SKIP_RESCALE || D < 128 || __any_sync(FULL_MASK, moved)) {
                if constexpr (LEAN) {   // the factors (2 MUFU.EX2) and l's rescale: here only
#pragma unroll
                    for (int r = 0; r < 2; ++r) alpha[r] = fast_exp2(m_old[r] - m_use[r]);
#pragma unroll
                    for (int i = 0; i < (ROWSUM_MMA ? 4 : 2); ++i) R.l[mt][i] *= alpha[ROWSUM_MMA ? i >> 1 : i];
                }
#pragma unroll
                for (int t = 0; t < D / 8; ++t)
#pragma unroll
                    for (int i = 0; i < 4; ++i) R.o[mt][t][i] *= alpha[i >> 1];
            }
            // The scale is folded into the FFMA that feeds MUFU.EX2. P as A fragments (16 keys each):
            // a0 = keys 2c, 2c+1 of row g, a1 = row g + 8, a2, a3 = keys 2c+8, 2c+9. Packed here, P
            // takes half the registers S took.
            exp_pack<D, BF16, MT>(R, s[mt], p[mt], c, mt, m_use);
        }
    }

    if constexpr (STAGES == 1) {
        cp_async_wait_all();          // V_j has landed (every thread's part, after the barrier) ...
        __syncthreads();     // ... and every warp is done reading K_j
        if (CLEAN || j + 1 < c.n_tiles)                                   // K_{j+1} during P V
            copy_tile<D, MT>(c, c.sK, c.k, j + 1, CLEAN || k0 + 2 * BN <= c.n);
        cp_async_commit();
    }

    // O += P V: P from the accumulators (converted and packed above), V with ldmatrix.trans.
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
            u32 b[4];
            ldsm4<true>(b, sV + frag_off<D>(c.v_row, c.v_lo, dp, 16 * kk));
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                mma16816<BF16>(R.o[mt][2 * dp], p[mt][kk], b[0], b[1]);
                mma16816<BF16>(R.o[mt][2 * dp + 1], p[mt][kk], b[2], b[3]);
            }
        }
        if constexpr (ROWSUM_MMA) {   // l += P x ones: every column of the result is the row sum
            const u32 one2 = BF16 ? 0x3f803f80u : 0x3c003c00u;   // two 1.0s, bf16 or f16
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) mma16816<BF16>(R.l[mt], p[mt][kk], one2, one2);
        }
    }
    if constexpr (STAGES == 1) {
        cp_async_wait_all();          // K_{j+1} has landed ...
        __syncthreads();     // ... and every warp is done reading V_j
    }
}

template <int D, bool BF16, int MT = MT_DEF>
__device__ __forceinline__ void attention(const u16* __restrict__ q, const u16* __restrict__ k,
                                          const u16* __restrict__ v, u16* __restrict__ o, int n,
                                          float scale_log2, int causal)
{
    using C = Cfg<D, MT>;
    constexpr int BN = C::BN;
    constexpr bool ROWSUM_MMA = ROWSUM<D>;
    extern __shared__ __align__(128) unsigned char smem[];
    const u32 base = (u32)__cvta_generic_to_shared(smem);
    const int lane = lane_id(), warp = threadIdx.x >> 5, g = lane >> 2, c4 = lane & 3;
    const int qb = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;   // big causal blocks first
    const int q0 = qb * C::BM;
    const size_t head = (size_t)blockIdx.y * n * D;
    q += head; k += head; v += head; o += head;

    Ctx c;
    c.sQ = base; c.sK = base + C::OFF_K; c.sV = base + C::OFF_V;
    c.q_row = 16 * MT * warp + (lane & 15); c.q_lo = lane >> 4;
    c.k_row = (lane & 7) + ((lane >> 4) << 3); c.k_lo = (lane >> 3) & 1;
    c.v_row = (lane & 7) + (((lane >> 3) & 1) << 3); c.v_lo = lane >> 4;
    c.cp_dst = swz<D>(threadIdx.x / C::CPR, threadIdx.x % C::CPR);
    c.cp_src = (threadIdx.x / C::CPR) * D + (threadIdx.x % C::CPR) * 8;
    c.k = k; c.v = v; c.n = n; c.scale_log2 = scale_log2; c.causal = causal;
    c.row0 = q0 + 16 * MT * warp + g;
    c.warp_last = q0 + 16 * MT * (warp + 1) - 1;

    // Key tiles [0, n_full) need no mask; [n_full, n_tiles) are masked (causal diagonal, ragged end).
    const int last_key = causal ? min(q0 + C::BM, n) : n;
    c.n_tiles = (last_key + BN - 1) / BN;
    const int n_full = min(causal ? (q0 + 1) / BN : c.n_tiles, n / BN);
    const int n_clean = POINTER ? max(0, min(n_full, n / BN - 1)) : n_full;   // see tile's CLEAN

    copy_checked<D, C::BM>(c.sQ, q, q0, n);
    copy_tile<D, MT>(c, c.sK, k, 0, BN <= n);
    if constexpr (STAGES == 2) copy_tile<D, MT>(c, c.sV, v, 0, BN <= n);
    cp_async_commit();
    cp_async_wait_all();
    __syncthreads();

    Regs<D, MT> R;
    if constexpr (C::Q_IN_REGS) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk)
                ldsm4<false>(R.q[mt][kk], c.sQ + swz<D>(c.q_row + 16 * mt, 2 * kk + c.q_lo));
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int t = 0; t < D / 8; ++t) R.o[mt][t][0] = R.o[mt][t][1] = R.o[mt][t][2] = R.o[mt][t][3] = 0.0f;
        R.m[mt][0] = R.m[mt][1] = DIET_NEG_INF;
#pragma unroll
        for (int i = 0; i < (ROWSUM_MMA ? 4 : 2); ++i) R.l[mt][i] = 0.0f;
    }

    int j = 0;
    for (; j < n_clean; ++j) tile<D, BF16, false, MT>(R, c, j);
    for (; j < c.n_tiles; ++j) tile<D, BF16, true, MT>(R, c, j);

    // Epilogue: finish the row sums, normalize, stage O through this warp's own rows of sQ and
    // store whole 16-byte chunks. A row that saw no key (rows past n) gets 0, not NaN.
    if constexpr (!C::Q_IN_REGS) __syncwarp();   // this warp's last Q fragment reads are done
    const u32 e_off = swz<D>(16 * MT * warp + g, 0) + 4 * c4;     // (strided store) chunk 0
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        float inv[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float l = R.l[mt][ROWSUM_MMA ? 2 * r : r];
            if constexpr (!ROWSUM_MMA) {
                l += __shfl_xor_sync(FULL_MASK, l, 1);
                l += __shfl_xor_sync(FULL_MASK, l, 2);
            }
            inv[r] = l > 0.0f ? 1.0f / l : 0.0f;
        }
#pragma unroll
        for (int t = 0; t < D / 8; ++t)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const u32 val = pack<BF16>(R.o[mt][t][2 * r] * inv[r], R.o[mt][t][2 * r + 1] * inv[r]);
                // Strided (the seed's kernel 11): chunk t of row g is chunk 0 XOR t << 4.
                const u32 addr = STRIDED_STORE
                    ? c.sQ + (e_off ^ (u32)(t << 4)) + (u32)((16 * mt + 8 * r) * C::RB)
                    : c.sQ + swz<D>(16 * (MT * warp + mt) + g + 8 * r, t) + 4 * c4;
                asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(val) : "memory");
            }
    }
    __syncwarp();
#pragma unroll
    for (int it = 0; it < 16 * MT * C::CPR / 32; ++it) {
        const int i = lane + 32 * it, r = i / C::CPR, ch = i % C::CPR, row = q0 + 16 * MT * warp + r;
        uint4 val;
        asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(val.x), "=r"(val.y), "=r"(val.z), "=r"(val.w)
                     : "r"(c.sQ + swz<D>(16 * MT * warp + r, ch)) : "memory");
        if (row < n) *reinterpret_cast<uint4*>(o + (size_t)row * D + ch * 8) = val;
    }
}

#endif  // FRAGLAB_SM80

}  // namespace diet

#define DIET_KERNEL(STEP, TYPE, D, BF16)                                                           \
    extern "C" __global__ void __launch_bounds__(diet::THREADS, DIET_MINB)                         \
    diet_##STEP##_##TYPE##_d##D(const unsigned short* q, const unsigned short* k,                  \
                                const unsigned short* v, unsigned short* o, int n,                 \
                                float scale_log2, int causal)                                      \
    { SM80_ONLY(diet::attention<D, BF16>(q, k, v, o, n, scale_log2, causal)); }
// The launch reads its numbers from the compiled file (fraglab.launch.constants): the block's
// threads, and per head dimension D its query rows, keys a tile and shared memory (diet_d<D>_*;
// diet_m16_d<D>_* for the 16-rows-a-warp kernels of the rungs that have them).
extern "C" __device__ const int diet_threads = diet::THREADS;
#define DIET_CONSTANTS(NAME, D, MT)                                                                \
    extern "C" __device__ const int NAME##_rows = diet::Cfg<D, MT>::BM;                          \
    extern "C" __device__ const int NAME##_key_tile = diet::Cfg<D, MT>::BN;                      \
    extern "C" __device__ const int NAME##_smem = diet::Cfg<D, MT>::SMEM;
#if DIET_SHORT_CAUSAL   // the same with 16 rows a warp: diet_<step>_m16_<type>_d<d>
#define DIET_CONSTANTS_M16 DIET_CONSTANTS(diet_m16_d64, 64, 1) DIET_CONSTANTS(diet_m16_d128, 128, 1)
#define DIET_KERNEL_M16(STEP, TYPE, D, BF16)                                                       \
    extern "C" __global__ void __launch_bounds__(diet::THREADS, DIET_MINB)                         \
    diet_##STEP##_m16_##TYPE##_d##D(const unsigned short* q, const unsigned short* k,              \
                                    const unsigned short* v, unsigned short* o, int n,             \
                                    float scale_log2, int causal)                                  \
    { SM80_ONLY((diet::attention<D, BF16, 1>(q, k, v, o, n, scale_log2, causal))); }
#else
#define DIET_CONSTANTS_M16
#define DIET_KERNEL_M16(STEP, TYPE, D, BF16)
#endif

// The four kernels of a rung: f16 and bf16, d = 64 and 128.
#define DIET_KERNELS(STEP)                                                                         \
    DIET_KERNEL(STEP, f16, 64, false)                                                              \
    DIET_KERNEL(STEP, f16, 128, false)                                                             \
    DIET_KERNEL(STEP, bf16, 64, true)                                                              \
    DIET_KERNEL(STEP, bf16, 128, true)                                                             \
    DIET_KERNEL_M16(STEP, f16, 64, false)                                                          \
    DIET_KERNEL_M16(STEP, f16, 128, false)                                                         \
    DIET_KERNEL_M16(STEP, bf16, 64, true)                                                          \
    DIET_KERNEL_M16(STEP, bf16, 128, true)                                                         \
    DIET_CONSTANTS(diet_d64, 64, diet::MT_DEF) DIET_CONSTANTS(diet_d128, 128, diet::MT_DEF)        \
    DIET_CONSTANTS_M16
