// Helpers shared by the rungs of the FP32 SGEMM ladder (topic 07_register_reuse).
//
// Every rung computes C = A @ B for row-major float32 A (M,K), B (K,N), C (M,N). Tile sizes are
// compile-time constants: each kernels/07_register_reuse_<rung>.cu gives defaults with
// #ifndef, and fraglab/register_reuse/kernels.py (TILES) passes the values it launches with as
// defines, so an autotuning sweep recompiles the same source with other tiles.
#pragma once
#include "common.cuh"

// Default tiles, for a compile without the wrapper's defines (the compile tests). The wrapper
// always passes all of TILES[rung] (fraglab/register_reuse/kernels.py, the home of these
// numbers; a test keeps the two equal). A rung file names its family before the #include.
#if !defined(BM) && defined(SGEMM_RUNG_TILE1D)            // rung 4: the seed's tiles
#define BM 64
#define BN 64
#define BK 8
#define TM 8
#elif !defined(BM) && defined(SGEMM_RUNG_THREAD_TILE)     // rungs 5-6
#define BM 128
#define BN 128
#define BK 8
#define TM 8
#define TN 8
#elif !defined(BM) && defined(SGEMM_RUNG_WARP_TILE)       // rungs 7-9 (GROUP: rungs 8-9)
#define BM 128
#define BN 128
#define BK 8
#define WM 32
#define WN 64
#define LM 4
#define MINB 2
#define GROUP 1
#endif

#define SGEMM_ARGS const float* __restrict__ A, const float* __restrict__ B, \
                   float* __restrict__ C, int M, int N, int K

// A rung's launch numbers, which the wrapper reads back from the build of its tiles
// (fraglab.launch.constants, prefix sgemm_launch_): threads a block, the tile of C a block computes
// (grid: ceil(N / tile_n) x ceil(M / tile_m)) and the dynamic shared memory to launch with (0
// where the tiles are static arrays). Each rung file states them once, from its kernel's own
// expressions.
#define SGEMM_LAUNCH(THREADS_, TILE_M, TILE_N, SMEM_)                                        \
    extern "C" __device__ const int sgemm_launch_threads = (THREADS_);                             \
    extern "C" __device__ const int sgemm_launch_tile_m = (TILE_M);                                \
    extern "C" __device__ const int sgemm_launch_tile_n = (TILE_N);                                \
    extern "C" __device__ const int sgemm_launch_smem = (SMEM_);

// ---- rungs 1-2: one thread, one element of C, straight from global memory --------------------
__device__ __forceinline__ void dot_to_c(const float* __restrict__ A, const float* __restrict__ B,
                                         float* __restrict__ C, int row, int col,
                                         int M, int N, int K) {
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k)
        acc += A[row * K + k] * B[k * N + col];
    C[row * N + col] = acc;
}

// ---- rungs 3-5: scalar, bounds-checked tile loads (any M, N, K) -------------------------------
// Copy the ROWS x COLS tile of a row-major matrix (rows x cols, leading dimension cols) that
// starts at (r0, c0) into shared memory `dst` (row-major, COLS wide), with kThreads threads;
// elements outside the matrix are stored as 0, so a ragged edge adds nothing to a dot product.
template <int ROWS, int COLS, int kThreads>
__device__ __forceinline__ void load_tile_guarded(float* dst, const float* __restrict__ src,
                                                  int rows, int cols, int r0, int c0) {
#pragma unroll
    for (int i = threadIdx.x; i < ROWS * COLS; i += kThreads) {
        const int r = r0 + i / COLS, c = c0 + i % COLS;
        dst[i] = (r < rows && c < cols) ? src[r * cols + c] : 0.0f;
    }
}

// Stage the tiles of step k0 for a block whose tile of C starts at (row0, col0): the BM x BK
// tile of A and the BK x BN tile of B, row-major, then a barrier (rungs 3-5).
template <int BM_, int BN_, int BK_, int kThreads>
__device__ __forceinline__ void stage_guarded(float* As, float* Bs, const float* __restrict__ A,
                                              const float* __restrict__ B, int M, int N, int K,
                                              int row0, int col0, int k0) {
    load_tile_guarded<BM_, BK_, kThreads>(As, A, M, K, row0, k0);
    load_tile_guarded<BK_, BN_, kThreads>(Bs, B, K, N, k0, col0);
    __syncthreads();
}

// ---- rungs 6-9: float4 tiles (M, N, K multiples of the tile; 16-byte aligned A and B) ---------
// A ROWS x COLS tile read as float4s along a row: kThreads threads take LOADS float4s each.
template <int ROWS, int COLS, int kThreads>
struct Float4Tile {
    static_assert(COLS % 4 == 0, "a float4 tile needs a width that is a multiple of 4");
    static_assert((ROWS * COLS / 4) % kThreads == 0, "the threads must share the tile evenly");
    static constexpr int LOADS = ROWS * COLS / 4 / kThreads;

    // global -> registers: float4 number i of this thread, from the tile at src (leading dim ld).
    // kGuard (rung 10, a tile at the matrix's edge): only the first `rows` rows and `cols`
    // columns of the tile exist; the float4s past them are zeros and are not read (cols and the
    // tile's columns are multiples of 4, so a float4 is wholly inside or wholly outside).
    template <bool kGuard = false>
    __device__ __forceinline__ static void fetch(float4 (&r)[LOADS], const float* __restrict__ src,
                                                 int ld, int rows = ROWS, int cols = COLS) {
#pragma unroll
        for (int i = 0; i < LOADS; ++i) {
            const int f = threadIdx.x + i * kThreads;
            const int row = f / (COLS / 4), col = (f % (COLS / 4)) * 4;
            if (!kGuard)
                r[i] = *reinterpret_cast<const float4*>(src + (f / (COLS / 4)) * ld + (f % (COLS / 4)) * 4);
            else
                r[i] = row < rows && col < cols ? *reinterpret_cast<const float4*>(src + row * ld + col)
                                                : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    }
    // registers -> shared, same layout (row-major, leading dimension LD >= COLS): one STS.128
    template <int LD>
    __device__ __forceinline__ static void store(float* dst, const float4 (&r)[LOADS]) {
#pragma unroll
        for (int i = 0; i < LOADS; ++i) {
            const int f = threadIdx.x + i * kThreads;
            *reinterpret_cast<float4*>(dst + (f / (COLS / 4)) * LD + (f % (COLS / 4)) * 4) = r[i];
        }
    }
    // registers -> shared, TRANSPOSED (dst[c][r], leading dimension LD >= ROWS): four STS.32.
    // The A tile is stored this way so that a thread's TM consecutive rows of A for one k are
    // consecutive in shared memory, and come back with LDS.128.
    template <int LD>
    __device__ __forceinline__ static void store_transposed(float* dst, const float4 (&r)[LOADS]) {
#pragma unroll
        for (int i = 0; i < LOADS; ++i) {
            const int f = threadIdx.x + i * kThreads;
            const int row = f / (COLS / 4), col = (f % (COLS / 4)) * 4;
            dst[(col + 0) * LD + row] = r[i].x;
            dst[(col + 1) * LD + row] = r[i].y;
            dst[(col + 2) * LD + row] = r[i].z;
            dst[(col + 3) * LD + row] = r[i].w;
        }
    }
};

// Stage one step (rungs 6-7): the float4s of the A tile at A (leading dimension K) go to As
// transposed (k-major, leading dimension LDA), those of the B tile at B to Bs, then a barrier.
template <int BM_, int BN_, int BK_, int kThreads, int LDA>
__device__ __forceinline__ void stage_float4(float* As, float* Bs, const float* __restrict__ A,
                                             const float* __restrict__ B, int N, int K) {
    float4 ra[Float4Tile<BM_, BK_, kThreads>::LOADS], rb[Float4Tile<BK_, BN_, kThreads>::LOADS];
    Float4Tile<BM_, BK_, kThreads>::fetch(ra, A, K);
    Float4Tile<BK_, BN_, kThreads>::fetch(rb, B, N);
    Float4Tile<BM_, BK_, kThreads>::template store_transposed<LDA>(As, ra);
    Float4Tile<BK_, BN_, kThreads>::template store<BN_>(Bs, rb);
    __syncthreads();
}

// ---- rungs 7-9: the warp tile ------------------------------------------------------------------
// A warp owns a WM x WN tile of C. Its 32 lanes form an LM x (32/LM) grid; each lane owns 4x4
// chunks of C, repeated WMITER times down (every LM*4 rows) and WNITER times across (every
// (32/LM)*4 columns). For one k a lane reads WMITER float4 of A (As is k-major) and WNITER
// float4 of B: lanes that share a row of the lane grid read the same A float4 (a broadcast) and
// the lanes of a row read neighbouring B float4s, so every LDS.128 is free of bank conflicts.
template <int kWM, int kWN, int kLM>
struct WarpTile {
    static constexpr int LN = 32 / kLM;
    static constexpr int WMITER = kWM / (kLM * 4), WNITER = kWN / (LN * 4);
    static_assert(32 % kLM == 0 && WMITER * kLM * 4 == kWM && WNITER * LN * 4 == kWN,
                  "the warp tile must be a whole number of 4x4 chunks per lane");
    static constexpr int LANE_M = WMITER * 4, LANE_N = WNITER * 4;   // a lane's outputs: LANE_M x LANE_N

    // acc += (column k of the warp's A tile) x (row k of its B tile), for this lane's chunks.
    // a_k, b_k: row k of As (k-major) and Bs, already offset to the warp's tile and this lane.
    __device__ __forceinline__ static void fma_step(float (&acc)[LANE_M][LANE_N], const float* a_k,
                                                    const float* b_k) {
        float a[LANE_M], b[LANE_N];
#pragma unroll
        for (int i = 0; i < WMITER; ++i)
            *reinterpret_cast<float4*>(&a[i * 4]) = *reinterpret_cast<const float4*>(a_k + i * kLM * 4);
#pragma unroll
        for (int j = 0; j < WNITER; ++j)
            *reinterpret_cast<float4*>(&b[j * 4]) = *reinterpret_cast<const float4*>(b_k + j * LN * 4);
#pragma unroll
        for (int m = 0; m < LANE_M; ++m)
#pragma unroll
            for (int n = 0; n < LANE_N; ++n)
                acc[m][n] += a[m] * b[n];
    }

    // acc += the whole staged tile: fma_step for each of its KB k (A k-major with leading
    // dimension LDA, B with LDB), a_k and b_k as for fma_step at k = 0.
    template <int KB, int LDA, int LDB>
    __device__ __forceinline__ static void fma_tile(float (&acc)[LANE_M][LANE_N], const float* a_k,
                                                    const float* b_k) {
#pragma unroll
        for (int k = 0; k < KB; ++k)
            fma_step(acc, a_k + k * LDA, b_k + k * LDB);
    }

    // Rung 10's tuning switches (sgemm_switched_tile below) take fma_step apart: the fragments of
    // one k into registers (a_xor: XOR of the A offsets, the swizzled layout's), then the outer
    // product in the order kOrder: 0 row by row (as fma_step: a[m] kept for LANE_N FFMAs),
    // 1 row by row with every other row backwards (a snake: b[n] kept across a row change too),
    // 2 column by column (b[n] kept for LANE_M FFMAs), 3 column snake.
    __device__ __forceinline__ static void load_frags(float (&a)[LANE_M], float (&b)[LANE_N],
                                                      const float* a_k, const float* b_k,
                                                      int a_xor = 0) {
#pragma unroll
        for (int i = 0; i < WMITER; ++i)
            *reinterpret_cast<float4*>(&a[i * 4]) =
                *reinterpret_cast<const float4*>(a_k + ((i * kLM * 4) ^ a_xor));
#pragma unroll
        for (int j = 0; j < WNITER; ++j)
            *reinterpret_cast<float4*>(&b[j * 4]) = *reinterpret_cast<const float4*>(b_k + j * LN * 4);
    }
    template <int kOrder>
    __device__ __forceinline__ static void outer(float (&acc)[LANE_M][LANE_N], const float (&a)[LANE_M],
                                                 const float (&b)[LANE_N]) {
        static_assert(kOrder >= 0 && kOrder <= 3, "ORDER is 0 (rows), 1 (row snake), 2 (columns) or 3");
        constexpr int OUTER = kOrder < 2 ? LANE_M : LANE_N, INNER = kOrder < 2 ? LANE_N : LANE_M;
#pragma unroll
        for (int o = 0; o < OUTER; ++o)
#pragma unroll
            for (int q = 0; q < INNER; ++q) {
                const int in = (kOrder % 2 == 1 && o % 2 == 1) ? INNER - 1 - q : q;
                const int m = kOrder < 2 ? o : in, n = kOrder < 2 ? in : o;
                acc[m][n] += a[m] * b[n];
            }
    }

    // Offsets of this lane's first chunk inside the warp tile (row, column).
    __device__ __forceinline__ static int lane_row() { return (threadIdx.x % 32) / LN * 4; }
    __device__ __forceinline__ static int lane_col() { return (threadIdx.x % 32) % LN * 4; }

    // Write the lane's chunks to C (leading dimension ldc) at the warp tile's corner c0, one
    // STG.128 per 4 floats of a row. kGuard: only `rows` x `cols` of the warp tile are inside C.
    template <bool kGuard = false>
    __device__ __forceinline__ static void store(float* __restrict__ c0, int ldc,
                                                 const float (&acc)[LANE_M][LANE_N],
                                                 int rows = kWM, int cols = kWN) {
#pragma unroll
        for (int m = 0; m < LANE_M; ++m)
#pragma unroll
            for (int j = 0; j < WNITER; ++j) {
                const int row = (m / 4) * kLM * 4 + lane_row() + m % 4;
                const int col = j * LN * 4 + lane_col();
                if (!kGuard || (row < rows && col < cols))
                    *reinterpret_cast<float4*>(c0 + row * ldc + col) =
                        make_float4(acc[m][j * 4], acc[m][j * 4 + 1], acc[m][j * 4 + 2], acc[m][j * 4 + 3]);
            }
    }
};

// ---- rungs 8-9: block order ---------------------------------------------------------------------
// The (x, y) tile of C this block computes when blocks are taken in groups of kGroup block rows:
// the GPU starts blocks in order of their linear id, and here consecutive ids walk DOWN the
// columns of a group (Triton's "grouped ordering"), so the blocks resident at one time share
// rows of A and columns of B in L2. kGroup = 1 gives (blockIdx.x, blockIdx.y) unchanged.
template <int kGroup>
__device__ __forceinline__ int2 grouped_block() {
    const int id = blockIdx.y * gridDim.x + blockIdx.x;
    const int per_group = kGroup * gridDim.x, first_row = id / per_group * kGroup;
    const int rows = min(static_cast<int>(gridDim.y) - first_row, kGroup);
    return make_int2(id % per_group / rows, first_row + id % per_group % rows);
}

// ---- rungs 8-10: the warp-tiled kernel with two shared-memory stages -------------------------
// Rung 7's loop, changed in one way: the shared tiles have two stages. While the warps compute
// on one stage, the next tiles of A and B are already on their way from global memory into
// registers (the LDGs are issued before the FFMAs and only waited for after them), and are
// written into the other stage at the end of the step. That stage was last read in the step
// before, which ended with a barrier, so one barrier per step is enough (rung 7 needs two).
// The last step has nothing to prefetch and is peeled off the loop.
// Rung 8 (double_buffer) and rung 9 (autotuned) are this function with different tiles.
// kGroup > 1 also changes the ORDER of the blocks (grouped_block below); 1 keeps the grid's.
// Rung 10 (split_k) also passes a slice [k_begin, k_end) of K (rungs 8-9: all of it) and, for
// a shape that is not whole tiles, kGuard: edge tiles read zeros past M, N and k_end, and store
// only inside C (M any, N and K multiples of 4).
template <int kBM, int kBN, int kBK, int kWM, int kWN, int kLM, int kGroup, bool kGuard = false>
__device__ __forceinline__ void sgemm_double_buffer_tile(SGEMM_ARGS, int k_begin = 0, int k_end = -1) {
    constexpr int kThreads = (kBM / kWM) * (kBN / kWN) * 32;
    using TileA = Float4Tile<kBM, kBK, kThreads>;
    using TileB = Float4Tile<kBK, kBN, kThreads>;
    using Warp = WarpTile<kWM, kWN, kLM>;
    constexpr int LDA = kBM + 4;
    constexpr int STAGE = kBK * (LDA + kBN);     // floats of one stage: As then Bs
    extern __shared__ float4 smem4[];
    float* smem = reinterpret_cast<float*>(smem4);
    const int warp = threadIdx.x / 32;
    const int wm0 = warp / (kBN / kWN) * kWM, wn0 = warp % (kBN / kWN) * kWN;
    const int2 blk = grouped_block<kGroup>();
    if (k_end < 0) k_end = K;
    const int rows = M - blk.y * kBM, cols = N - blk.x * kBN;   // of this block's tile inside C
    int k_left = k_end - k_begin;              // of this slice of K, from the tiles' first column
    const int steps = kGuard ? (k_left + kBK - 1) / kBK : k_left / kBK;
    A += blk.y * kBM * K;
    B += blk.x * kBN;
    A += k_begin;                              // rungs 8-9: 0
    B += k_begin * N;
    float acc[Warp::LANE_M][Warp::LANE_N] = {};
    float4 ra[TileA::LOADS], rb[TileB::LOADS];
    TileA::template fetch<kGuard>(ra, A, K, rows, k_left);   // the prologue fills stage 0
    TileB::template fetch<kGuard>(rb, B, N, k_left, cols);
    TileA::template store_transposed<LDA>(smem, ra);
    TileB::template store<kBN>(smem + kBK * LDA, rb);
    __syncthreads();
    const float* a_lane = smem + wm0 + Warp::lane_row();            // in stage 0
    const float* b_lane = smem + kBK * LDA + wn0 + Warp::lane_col();
    int stage = 0;                             // offset of the stage read in this step
    for (int t = 1; t < steps; ++t) {          // every step but the last prefetches the next
        A += kBK;                              // next tiles: global -> registers, in flight
        B += kBK * N;
        k_left -= kBK;
        TileA::template fetch<kGuard>(ra, A, K, rows, k_left);
        TileB::template fetch<kGuard>(rb, B, N, k_left, cols);
        Warp::template fma_tile<kBK, LDA, kBN>(acc, a_lane + stage, b_lane + stage);
        stage ^= STAGE;                        // registers -> the other stage (0 <-> STAGE)
        TileA::template store_transposed<LDA>(smem + stage, ra);
        TileB::template store<kBN>(smem + stage + kBK * LDA, rb);
        __syncthreads();
    }
    Warp::template fma_tile<kBK, LDA, kBN>(acc, a_lane + stage, b_lane + stage);
    Warp::template store<kGuard>(C + (blk.y * kBM + wm0) * N + blk.x * kBN + wn0, N, acc,
                                 rows - wm0, cols - wn0);
}

// ---- rung 10's tuning switches -----------------------------------------------------------------
// The k-major A tile's layout. Padded (kSwizzle false, rungs 7-9): row k at k * (BM + 4). The
// transposed store writes, per STS.32 of a warp, 32/(BK/4) rows of A for each of BK/4 values
// of k; with BK = 16 the rows k and k + 8 land in the same banks (8 * (BM + 4) is a multiple of
// 32 words): 2-way conflicts, and no padding that keeps LDS.128 aligned (a multiple of 4) avoids
// them. Swizzled (kSwizzle true): row k at k * BM, unpadded, its float4 slots permuted by an XOR
// with xor_of(k) (k / 4 * 32 / BK, mod 8, in float4s): the BK/4 groups of k a warp writes at
// once go to different 4-word bank groups, and a float4 stays whole (an LDS.128 still reads it).
// fraglab/register_reuse/banks.py computes the banks of every access, lane by lane.
template <int kBM, int kBK, bool kSwizzle>
struct ALayout {
    static_assert(!kSwizzle || (kBM % 32 == 0 && 32 % kBK == 0),
                  "the swizzled A tile needs BM a multiple of 32 and BK dividing 32");
    static constexpr int LD = kSwizzle ? kBM : kBM + 4;
    // dynamic shared memory of kStages stages: the A tile (BK rows of LD) and the B tile
    template <int kBN, int kStages> static constexpr int SMEM = kStages * kBK * (LD + kBN) * 4;
    __host__ __device__ static constexpr int xor_of(int k) {
        return kSwizzle ? ((k / 4) * (32 / kBK) % 8) * 4 : 0;
    }
    // registers -> shared: the float4s of the A tile (Float4Tile<BM, BK>'s, row-major in A)
    template <int kThreads, int LOADS>
    __device__ __forceinline__ static void store(float* dst, const float4 (&r)[LOADS]) {
#pragma unroll
        for (int i = 0; i < LOADS; ++i) {
            const int f = threadIdx.x + i * kThreads;
            const int row = f / (kBK / 4), col = (f % (kBK / 4)) * 4;
            const int x = row ^ xor_of(col);                    // the same for col .. col + 3
            dst[(col + 0) * LD + x] = r[i].x;
            dst[(col + 1) * LD + x] = r[i].y;
            dst[(col + 2) * LD + x] = r[i].z;
            dst[(col + 3) * LD + x] = r[i].w;
        }
    }
};

// Rung 10 with its switches (any of them on; all off, rung 10 runs sgemm_double_buffer_tile):
//   kSwizzle: the swizzled A layout (ALayout). A lane's A float4 i of row k sits at
//     (wm0 + lane_row + i*LM*4) ^ xor_of(k): the XOR's bits below LM*4 fall in lane_row (one
//     register per value, outside the loop), those above in i*LM*4 (a constant offset).
//   kRegDB: register double buffering. The fragments of k + 1 are loaded while the FFMAs of k
//     run (two sets of fragment registers), and across steps too: the last k's FFMAs come after
//     the barrier and the loads of the next stage's first fragments, so those loads' latency
//     hides behind them instead of stalling the first FFMAs of the step.
//   kOrder: the outer product's FFMA order (WarpTile::outer).
template <int kBM, int kBN, int kBK, int kWM, int kWN, int kLM, int kGroup, bool kGuard,
          bool kRegDB, bool kSwizzle, int kOrder>
__device__ __forceinline__ void sgemm_switched_tile(SGEMM_ARGS, int k_begin, int k_end) {
    constexpr int kThreads = (kBM / kWM) * (kBN / kWN) * 32;
    using TileA = Float4Tile<kBM, kBK, kThreads>;
    using TileB = Float4Tile<kBK, kBN, kThreads>;
    using Warp = WarpTile<kWM, kWN, kLM>;
    using Lay = ALayout<kBM, kBK, kSwizzle>;
    static_assert(!kSwizzle || (kWM >= 32 && (Warp::WMITER & (Warp::WMITER - 1)) == 0),
                  "the swizzled A tile needs WM >= 32 and WM / (4*LM) a power of two");
    static_assert(kBK % 2 == 0, "register double buffering alternates two fragment sets");
    constexpr int LDA = Lay::LD;
    constexpr int STAGE = kBK * (LDA + kBN);
    extern __shared__ float4 smem4[];
    float* smem = reinterpret_cast<float*>(smem4);
    const int warp = threadIdx.x / 32;
    const int wm0 = warp / (kBN / kWN) * kWM, wn0 = warp % (kBN / kWN) * kWN;
    const int2 blk = grouped_block<kGroup>();
    const int rows = M - blk.y * kBM, cols = N - blk.x * kBN;
    int k_left = k_end - k_begin;
    const int steps = kGuard ? (k_left + kBK - 1) / kBK : k_left / kBK;
    A += blk.y * kBM * K + k_begin;
    B += blk.x * kBN + k_begin * N;
    float acc[Warp::LANE_M][Warp::LANE_N] = {};
    float4 ra[TileA::LOADS], rb[TileB::LOADS];
    TileA::template fetch<kGuard>(ra, A, K, rows, k_left);
    TileB::template fetch<kGuard>(rb, B, N, k_left, cols);
    Lay::template store<kThreads>(smem, ra);
    TileB::template store<kBN>(smem + kBK * LDA, rb);
    __syncthreads();
    const int lane_m = Warp::lane_row();
    const float* b_lane = smem + kBK * LDA + wn0 + Warp::lane_col();
    // the fragments of row k of the stage at offset st
    auto frags = [&](float (&a)[Warp::LANE_M], float (&b)[Warp::LANE_N], int st, int k) {
        const int x = Lay::xor_of(k), lo = x % (kLM * 4);
        Warp::load_frags(a, b, smem + st + k * LDA + wm0 + (lane_m ^ lo), b_lane + st + k * kBN,
                         x - lo);
    };
    auto next_stage = [&](int st) {            // registers -> the stage at st, then the barrier
        Lay::template store<kThreads>(smem + st, ra);
        TileB::template store<kBN>(smem + st + kBK * LDA, rb);
        __syncthreads();
    };
    float fa[2][Warp::LANE_M], fb[2][Warp::LANE_N];
    if (kRegDB) frags(fa[0], fb[0], 0, 0);
    int stage = 0;
    for (int t = 1; t < steps; ++t) {
        A += kBK;
        B += kBK * N;
        k_left -= kBK;
        TileA::template fetch<kGuard>(ra, A, K, rows, k_left);
        TileB::template fetch<kGuard>(rb, B, N, k_left, cols);
#pragma unroll
        for (int k = 0; k < kBK; ++k) {
            if (!kRegDB) {
                frags(fa[0], fb[0], stage, k);
                Warp::template outer<kOrder>(acc, fa[0], fb[0]);
                continue;
            }
            if (k + 1 < kBK) {
                frags(fa[(k + 1) % 2], fb[(k + 1) % 2], stage, k + 1);
            } else {                           // the next stage, then its first fragments
                next_stage(stage ^ STAGE);
                frags(fa[0], fb[0], stage ^ STAGE, 0);
            }
            Warp::template outer<kOrder>(acc, fa[k % 2], fb[k % 2]);
        }
        stage ^= STAGE;
        if (!kRegDB) next_stage(stage);
    }
#pragma unroll
    for (int k = 0; k < kBK; ++k) {            // the last step: nothing to prefetch
        const int cur = kRegDB ? k % 2 : 0;
        if (!kRegDB) frags(fa[0], fb[0], stage, k);
        else if (k + 1 < kBK) frags(fa[(k + 1) % 2], fb[(k + 1) % 2], stage, k + 1);
        Warp::template outer<kOrder>(acc, fa[cur], fb[cur]);
    }
    Warp::template store<kGuard>(C + (blk.y * kBM + wm0) * N + blk.x * kBN + wn0, N, acc,
                                 rows - wm0, cols - wn0);
}

// ---- rung 10: the split-K reduction -------------------------------------------------------------
// C = P[0] + P[1] + ... + P[splits-1], summed in that order (no atomics: the same bits on every
// run), count4 float4s each, slice s at P + s * stride floats; a grid-stride loop.
__device__ __forceinline__ void sum_splits(const float* __restrict__ P, float* __restrict__ C,
                                           int count4, int splits, long long stride) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < count4; i += gridDim.x * blockDim.x) {
        float4 s = reinterpret_cast<const float4*>(P)[i];
        for (int z = 1; z < splits; ++z) {
            const float4 p = reinterpret_cast<const float4*>(P + z * stride)[i];
            s.x += p.x; s.y += p.y; s.z += p.z; s.w += p.w;
        }
        reinterpret_cast<float4*>(C)[i] = s;
    }
}
