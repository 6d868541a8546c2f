// 08_register_liveness: the FA-2 kernel of chapter 05 (kernels/05_flash_attention_fa2.cu: read
// its header comment for the fragment layouts, the swizzle and the pipeline) rebuilt so that one
// choice changes and nothing else: how long Q's A fragments stay live.
//
//   FA08_QREG     Q's fragments are loaded once, before the key sweep, and stay in registers
//                 until its end: D/16 x 4 registers per thread (64 at d = 256) live across both
//                 loops. This is chapter 05's kernel.
//   FA08_QRELOAD  Q stays in shared memory; each S = Q K^T step loads the one 16x16 fragment it
//                 needs with ldmatrix, right before its mma: 4 registers live, for a few
//                 instructions. The Intel pass's idea ("sink the load into the loop"), with the
//                 copy that the blog's conclusion asks for: in shared memory, not in a cache.
//   FA08_QGLOBAL  the blog's pass taken literally: the fragment is re-read from global memory
//                 (through L1/L2) at each key tile. The same short liveness, a costlier load.
//
// Each .cu file defines FA08_QMODE and includes this header; it gets the kernels
//
//   fa08_<qreg|qreload|qglobal>_<f16|bf16>_d<64|128|256>_<two|one>(q, k, v, o, n, scale_log2, causal)
//
// `two`: chapter 05's causal structure, the unmasked key tiles in one loop and the diagonal
// (and ragged last) tiles in a second, masked loop. `one`: a single loop that masks every tile
// (the comparison of the chapter). Non-causal calls differ only in the ragged last tile.
//
// Layout, launch and shared memory as chapter 05 (4 warps, 64 query rows a block; Q, K and V
// tiles in swizzled shared memory; grid (ceil(N / 64), B * H)); shared bytes (64 + 2 BN) * 2 D,
// 96 KB at d = 256 (above the 48 KB default; the launcher raises the limit). BN = 64 keys a tile,
// FA08_BN256 at d = 256 (a define, default 32). Compile-time knobs for the register sweep:
// FA08_MINB (blocks per SM asked of ptxas through __launch_bounds__, default 2), or NVRTC's
// --maxrregcount=N with FA08_NO_BOUNDS=1. FA08_ONLY_D=d compiles the kernels of one head dimension only (sweeps).
#pragma once
#include "fa2_mma.cuh"     // chapter 05's PTX helpers, swizzle and per-tile steps (shared)

#ifndef FA08_BN256
#define FA08_BN256 32
#endif
#ifndef FA08_MINB
#define FA08_MINB 2
#endif
// ptxas ignores --maxrregcount for a kernel with __launch_bounds__: the sweep's builds define
// FA08_NO_BOUNDS=1 so that the cap is the only limit.
#if defined(FA08_NO_BOUNDS) && FA08_NO_BOUNDS
#define FA08_BOUNDS
#else
#define FA08_BOUNDS __launch_bounds__(fa08::THREADS, FA08_MINB)
#endif

namespace fa08 {

using namespace fa2mma;   // u32, u16, swz, cp_async16, ldsm4, mma16816, pack2, fast_exp2, the tile steps
constexpr int W = 4;                       // warps per block, 16 query rows each
constexpr int BM = 16 * W, THREADS = 32 * W;

template <int D> struct Cfg {
    static constexpr int BN = D == 256 ? FA08_BN256 : 64;
    static constexpr int CPR = D / 8;                     // 16-byte chunks per row
    static constexpr int OFF_K = BM * D * 2, OFF_V = OFF_K + BN * D * 2;
    static constexpr int SMEM = OFF_V + BN * D * 2;       // dynamic shared memory: Q, K, V
    static_assert(D == 64 || D == 128 || D == 256, "head dimension 64, 128 or 256");
    static_assert(BN == 32 || BN == 64, "32 or 64 keys a tile");
};

#if FRAGLAB_SM80

// x, hidden from the optimizer: addresses derived from it are recomputed in every key tile instead
// of being hoisted above the loops and kept live across both (which made the two-loop kernels
// spill at d = 256 where the one-loop kernels did not).
__device__ __forceinline__ u32 opaque(u32 x)
{
    asm volatile("mov.b32 %0, %0;" : "+r"(x));
    return x;
}

// ROWS x D rows r0.. of src (zeros past n) into a swizzled tile. Thread t copies chunk t % CPR of
// rows t / CPR, + RPI, + 2 RPI, ..: one base pointer and constant steps, so that ptxas keeps no
// per-chunk addresses alive across the key loop (it did, and spilled them, at d = 256). A row
// past n reads nothing (src-size 0) from row r0, which always exists.
template <int D, int ROWS> __device__ __forceinline__ void load_rows(u32 dst, const u16* src, int r0, int n)
{
    constexpr int CPR = D / 8, RPI = THREADS / CPR;
    const int r = threadIdx.x / CPR, c = threadIdx.x % CPR;
    const u16* first = src + (size_t)r0 * D + c * 8;
#pragma unroll
    for (int it = 0; it < ROWS / RPI; ++it) {
        const int rr = r + it * RPI;
        const bool ok = r0 + rr < n;
        cp_async16(dst + swz<D>(rr, c), ok ? first + rr * D : first, ok);
    }
}

// ---- where Q's A fragment for columns 16 kk .. 16 kk + 15 comes from: THE difference ----------
enum QMode { QREG, QRELOAD, QGLOBAL, QLAB };

// QLAB: lab 08's reload, defined by the learner's source after it includes this header
// (fraglab.register_liveness.lab.lab_source).
template <int D> __device__ __forceinline__ void lab_fetch(u32 (&a)[4], u32 sQ, int kk);

template <int D, QMode M> struct QSource {
    // QREG only: every fragment, live for the whole sweep (D/16 x 4 registers).
    u32 frag[M == QREG ? D / 16 : 1][4];
    u32 sQ;            // this block's Q tile in shared memory
    const u16* qrow;   // QGLOBAL: row g of this warp's 16 query rows in global memory
    bool ok_lo, ok_hi; // QGLOBAL: rows g and g + 8 exist (< n)

    __device__ __forceinline__ void init(u32 sq, const u16* q, int q0, int n)
    {
        const int lane = lane_id(), warp = threadIdx.x >> 5, row = q0 + 16 * warp + (lane >> 2);
        sQ = sq;
        qrow = q + (size_t)min(row, n - 1) * D + 2 * (lane & 3);
        ok_lo = row < n;
        ok_hi = row + 8 < n;
        if constexpr (M == QREG) {
#pragma unroll
            for (int kk = 0; kk < D / 16; ++kk) fetch_smem(frag[kk], kk);
        }
    }
    // ldmatrix x4 of rows 0-15 of this warp: matrix 0 = rows 0-7 / cols 0-7 (= a0), 1 = rows
    // 8-15 / cols 0-7 (a1), 2 = rows 0-7 / cols 8-15 (a2), 3 = rows 8-15 / cols 8-15 (a3).
    __device__ __forceinline__ void fetch_smem(u32 (&a)[4], int kk) const
    {
        const int lane = lane_id(), warp = threadIdx.x >> 5;
        ldsm4<false>(a, sQ + swz<D>(16 * warp + (lane & 15), 2 * kk + (lane >> 4)));
    }
    // The A layout read straight from memory: a0 = (row g, cols 2c, 2c+1), a1 = row g + 8,
    // a2 and a3 the same 8 columns further. asm volatile: the compiler may not hoist these
    // loop-invariant loads out of the key loop (which would turn this back into QREG).
    __device__ __forceinline__ void fetch_global(u32 (&a)[4], int kk) const
    {
        const u16* p = qrow + 16 * kk;
        const u16* ph = p + (ok_hi ? 8 * D : 0);
#pragma unroll
        for (int i = 0; i < 4; ++i)
            asm volatile("ld.global.nc.b32 %0, [%1];\n" : "=r"(a[i]) : "l"((i & 1 ? ph : p) + (i >> 1) * 8));
        if (!ok_lo) a[0] = a[2] = 0u;
        if (!ok_hi) a[1] = a[3] = 0u;
    }
    template <class F> __device__ __forceinline__ void with(int kk, F&& use) const
    {
        if constexpr (M == QREG) use(frag[kk]);
        else {
            u32 a[4];
            if constexpr (M == QRELOAD) fetch_smem(a, kk);
            else if constexpr (M == QLAB) lab_fetch<D>(a, sQ, kk);
            else fetch_global(a, kk);
            use(a);
        }
    }
};

// Per-warp accumulators, live for the whole sweep in every variant.
template <int D> struct Acc {
    float o[D / 8][4];    // O: D/8 accumulators of 16 rows x 8 columns
    float m[2], l[2];     // rows g, g + 8: running max (log2 domain), partial row sum
};

// One key tile: S = Q K^T, mask (MASK only), online softmax, O += P V (chapter 05's fa2_tile).
template <int D, QMode M, bool BF16, bool MASK>
__device__ __forceinline__ void tile(Acc<D>& R, const QSource<D, M>& Q, int j, int n_tiles, u32 sK,
                                     u32 sV, const u16* k, const u16* v, int n, float sl2,
                                     bool causal, int row0)
{
    constexpr int BN = Cfg<D>::BN;
    const int lane = lane_id(), c4 = lane & 3, k0 = j * BN;
    sK = opaque(sK);
    sV = opaque(sV);
    load_rows<D, BN>(sV, v, k0, n);     // V_j lands while S and the softmax run
    cp_async_commit();

    float s[BN / 8][4];
#pragma unroll
    for (int t = 0; t < BN / 8; ++t) s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
        Q.with(kk, [&](const u32 (&a)[4]) {
#pragma unroll
            qk_block<D, BN, BF16>(s, a, sK, kk, lane);
        });
    if (MASK) mask_tile<BN>(s, k0, n, causal, row0, c4);
    float mx[2], mu[2];                 // the tile's row maxima, P's reference point
    online_softmax<D, BN>(s, R.o, R.m, R.l, sl2, mx, mu);
    cp_async_wait_all();
    __syncthreads();                    // V_j is in; every warp is done with K_j
    if (j + 1 < n_tiles) load_rows<D, BN>(sK, k, k0 + BN, n);   // K_{j+1} during P V
    cp_async_commit();
    u32 p[4], b[4];
    pv_block<D, BN, BF16>(R.o, s, sV, lane, p, b);   // P straight from S's accumulators (chapter 05)
    cp_async_wait_all();
    __syncthreads();                    // K_{j+1} is in; every warp is done with V_j
}

template <int D, QMode M, bool BF16, bool ONE_LOOP>
__device__ __forceinline__ void attention(const u16* __restrict__ q, const u16* __restrict__ k,
                                          const u16* __restrict__ v, u16* __restrict__ o, int n,
                                          float sl2, int causal)
{
    using C = Cfg<D>;
    extern __shared__ __align__(128) unsigned char smem[];
    const u32 sQ = (u32)__cvta_generic_to_shared(smem), sK = sQ + C::OFF_K, sV = sQ + C::OFF_V;
    const int lane = lane_id(), warp = threadIdx.x >> 5, g = lane >> 2, c4 = lane & 3;
    const int q0 = (causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * BM;   // big blocks first
    const size_t head = (size_t)blockIdx.y * n * D;
    q += head; k += head; v += head; o += head;

    const int last_key = causal ? min(q0 + BM, n) : n;
    const int n_tiles = (last_key + C::BN - 1) / C::BN;
    const int n_full = ONE_LOOP ? 0 : min(causal ? (q0 + 1) / C::BN : n_tiles, n / C::BN);

    load_rows<D, BM>(sQ, q, q0, n);     // every variant stages Q (the epilogue reuses the tile)
    load_rows<D, C::BN>(sK, k, 0, n);
    cp_async_commit();
    cp_async_wait_all();
    __syncthreads();

    QSource<D, M> Q;
    Q.init(sQ, q, q0, n);               // QREG: Q's fragments become live here ...
    Acc<D> R;
#pragma unroll
    for (int t = 0; t < D / 8; ++t) R.o[t][0] = R.o[t][1] = R.o[t][2] = R.o[t][3] = 0.0f;
    R.m[0] = R.m[1] = FA2MMA_NEG_INF;
    R.l[0] = R.l[1] = 0.0f;
    const int row0 = q0 + 16 * warp + g;
    int j = 0;
    for (; j < n_full; ++j) tile<D, M, BF16, false>(R, Q, j, n_tiles, sK, sV, k, v, n, sl2, causal, row0);
    for (; j < n_tiles; ++j) tile<D, M, BF16, true>(R, Q, j, n_tiles, sK, sV, k, v, n, sl2, causal, row0);
    // ... and die here, after the last use in the second loop (the seed's point).

    // Epilogue: row sums, normalize, stage this warp's rows in its own rows of the Q tile (no
    // other warp reads them), then whole 16-byte chunks to global. Rows that saw no key get 0.
    float inv[2];
    row_inverses(R.l, inv);
    __syncwarp();   // QRELOAD/QGLOBAL: every lane has read its last Q fragment from these rows
    store_o<D, BF16>(o, R.o, inv, sQ, q0, n, lane, warp, g, c4);
}

#endif  // FRAGLAB_SM80
}  // namespace fa08

// fa08_<MODE>_<TYPE>_d<D>_<two|one>: one kernel of the file's Q mode.
#define FA08_KERNEL(MODE, QM, TYPE, BF16, D, LOOPS, ONE)                                          \
    extern "C" __global__ void FA08_BOUNDS                                                        \
    fa08_##MODE##_##TYPE##_d##D##_##LOOPS(const unsigned short* q, const unsigned short* k,       \
                                          const unsigned short* v, unsigned short* o, int n,     \
                                          float scale_log2, int causal)                           \
    { SM80_ONLY((fa08::attention<D, fa08::QM, BF16, ONE>(q, k, v, o, n, scale_log2, causal))); }

// The launch reads its numbers from the compiled file (fraglab.launch.constants): a block's
// query rows and threads, and per head dimension D the keys a tile and the shared memory.
extern "C" __device__ const int fa08_rows = fa08::BM;
extern "C" __device__ const int fa08_threads = fa08::THREADS;
#define FA08_KERNELS_D(MODE, QM, D)                                                               \
    FA08_KERNEL(MODE, QM, f16, false, D, two, false)                                              \
    FA08_KERNEL(MODE, QM, bf16, true, D, two, false)                                              \
    FA08_KERNEL(MODE, QM, f16, false, D, one, true)                                               \
    FA08_KERNEL(MODE, QM, bf16, true, D, one, true)                                               \
    extern "C" __device__ const int fa08_d##D##_key_tile = fa08::Cfg<D>::BN;                     \
    extern "C" __device__ const int fa08_d##D##_smem = fa08::Cfg<D>::SMEM;

// Every kernel of a Q mode: d = 64, 128, 256 (or only FA08_ONLY_D), f16 and bf16, two and one loops.
#if !defined(FA08_ONLY_D) || FA08_ONLY_D == 64
#define FA08_D64(MODE, QM) FA08_KERNELS_D(MODE, QM, 64)
#else
#define FA08_D64(MODE, QM)
#endif
#if !defined(FA08_ONLY_D) || FA08_ONLY_D == 128
#define FA08_D128(MODE, QM) FA08_KERNELS_D(MODE, QM, 128)
#else
#define FA08_D128(MODE, QM)
#endif
#if !defined(FA08_ONLY_D) || FA08_ONLY_D == 256
#define FA08_D256(MODE, QM) FA08_KERNELS_D(MODE, QM, 256)
#else
#define FA08_D256(MODE, QM)
#endif
#define FA08_ALL_KERNELS(MODE, QM) FA08_D64(MODE, QM) FA08_D128(MODE, QM) FA08_D256(MODE, QM)
