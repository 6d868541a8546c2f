// 04_microbenchmark: the two kernels of the paper's micro-benchmark (Morales 2025, section 4.2),
// written for the course and measured two ways in fraglab/microbenchmark/.
//
// Both kernels compute, for tile t, C = A[t] @ B[t] with one WMMA 16x16x16 (f16 or bf16 in, f32
// accumulate) and write the 16 row maxima of C to rows[16 t .. 16 t + 15]. They are identical up
// to the accumulator and differ only in how the row maxima leave it (the "epilogue"):
//
//   rowmax_smem_<f16|bf16>   the baseline: store_matrix_sync to shared memory, __syncthreads,
//                            then lane r < 16 reads row r back and reduces it.
//   rowmax_regs_<f16|bf16>   in registers: swap x[2,3] with x[4,5] (the paper's Fig. 2), reduce
//                            four registers in the lane, then across the quad with
//                            __shfl_xor_sync offsets 1 and 2 (its Algorithm 3); lane 4g writes
//                            rows g and g + 8 straight to global memory.
//
// One warp per block and one tile per warp, as in the paper's code: a launch of n_tiles blocks
// of 32 threads is "one block" for n_tiles = 1 and fills the GPU for n_tiles in the thousands.
// A and B are read from global memory by load_matrix_sync (no shared memory), so the in-register
// kernel touches no shared memory and has no barrier at all.
//
//   rowmax_<smem|regs>_<f16|bf16>_clock   the same kernels, plus the SM cycle counter read just
//                            before and just after the epilogue; lane 0 writes the difference to
//                            cycles[t]. See "Timing the epilogue" below for why the timed region
//                            can neither start early, end early, nor be optimised away.
//
// bf16 tensor cores need sm_80: on sm_75 the bf16 kernels exist (every file compiles for every
// target) but trap; the Python wrapper refuses such GPUs before launching.
#include <mma.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include "common.cuh"
#include "wmma_tile.cuh"    // tile_product: C = A[t] @ B[t], the same MMA as chapter 03's kernels

using namespace nvcuda;

// The 16x16 f32 accumulator tile_product fills (one WMMA per warp).
typedef Acc16x16 Acc;

// ------------------------------------------------------------------------------------------------
// The two epilogues. Each returns a value that depends on every row maximum this lane computed
// (the clock variants make their second clock read wait for it).
// ------------------------------------------------------------------------------------------------

// Baseline: through shared memory. The tile is stored column-major (element (r, j) at
// tile[16 j + r]), so when lanes 0..15 read "their" row r at column j they read 16 consecutive
// words: no bank conflict, and every address is the lane's base plus a constant (64 j bytes).
// 16 x 16 floats = 1024 bytes, the footprint of the paper's Table 3.
__device__ __forceinline__ float epilogue_smem(const Acc& c, float* tile, float* rows)
{
    wmma::store_matrix_sync(tile, c, 16, wmma::mem_col_major);
    __syncthreads();                  // the block is one warp, but this is the textbook code
    const int r = lane_id();
    float m = 0.0f;
    if (r < 16) {
        m = tile[r];
#pragma unroll
        for (int j = 1; j < 16; ++j) m = fmaxf(m, tile[16 * j + r]);
        rows[r] = m;
    }
    return m;
}

// In registers. Lane l holds (g = l / 4, t = l % 4):
//     x[0,1] row g, cols 2t, 2t+1        x[2,3] row g+8, cols 2t, 2t+1
//     x[4,5] row g, cols 2t+8, 2t+9      x[6,7] row g+8, cols 2t+8, 2t+9
// After the swap, x[0..3] are 4 elements of row g and x[4..7] 4 of row g+8; the 4 lanes of a
// quad together hold both rows whole. The swap only renames registers: it costs no instruction.
__device__ __forceinline__ float epilogue_regs(const Acc& c, float* rows)
{
    float x[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = c.x[i];
    float s;
    s = x[2]; x[2] = x[4]; x[4] = s;
    s = x[3]; x[3] = x[5]; x[5] = s;
    float a = fmaxf(fmaxf(x[0], x[1]), fmaxf(x[2], x[3]));       // row g, this lane's 4
    float b = fmaxf(fmaxf(x[4], x[5]), fmaxf(x[6], x[7]));       // row g + 8
    // Offsets 1 and 2 stay inside the quad; all 32 lanes execute both shuffles, so the full
    // mask is correct (topic 03 shows the paper's per-quad masks give the same values).
    a = fmaxf(a, __shfl_xor_sync(FULL_MASK, a, 1));
    b = fmaxf(b, __shfl_xor_sync(FULL_MASK, b, 1));
    a = fmaxf(a, __shfl_xor_sync(FULL_MASK, a, 2));
    b = fmaxf(b, __shfl_xor_sync(FULL_MASK, b, 2));
    const int lane = lane_id();
    if (lane % 4 == 0) {
        rows[lane / 4] = a;
        rows[lane / 4 + 8] = b;
    }
    return __int_as_float(__float_as_int(a) ^ __float_as_int(b));
}

// ------------------------------------------------------------------------------------------------
// Timing the epilogue with the SM's cycle counter. Three things could make clock64() lie:
//   1. the first read issuing before the MMA has finished (the epilogue would be charged for the
//      tail of the MMA): the read is predicated on a value computed from all 8 accumulator
//      registers, so it cannot issue before they are ready;
//   2. epilogue instructions moving above the first read: every accumulator register is XORed
//      with a value derived from that read (zero at run time, as `zero` is a kernel argument the
//      compiler cannot see), so nothing of the epilogue can start before it;
//   3. the second read issuing before the results exist (instructions issue in order, but a
//      shuffle or a shared load completes later): it is predicated on the epilogue's result.
// The results are still written to `rows`, so nothing can be optimised away. tests check in the
// SASS that the two clock reads enclose every STS, BAR, LDS and SHFL of the epilogue.
// ------------------------------------------------------------------------------------------------
__device__ __forceinline__ long long clock_after(unsigned dep)
{
    long long t = -1;
    if (dep != 0xFFFFFFFFu) t = clock64();   // dep is 0 at run time: always taken, never early
    return t;
}

__device__ __forceinline__ unsigned fold_bits(const Acc& c)
{
    unsigned v = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) v ^= __float_as_uint(c.x[i]);
    return v;
}

template <class In, bool SMEM, bool CLOCK>
__device__ __forceinline__ void rowmax_tile(const In* a, const In* b, float* rows,
                                            long long* cycles, int n_tiles, unsigned zero,
                                            float* tile)
{
    const int t = blockIdx.x;
    if (t >= n_tiles) return;      // the block is this one warp: it leaves whole
    Acc c;
    tile_product(a, b, t, c);
    long long t0 = 0;
    if constexpr (CLOCK) {
        t0 = clock_after(fold_bits(c) & zero);
        const unsigned dep = (unsigned)t0 & zero;
#pragma unroll
        for (int i = 0; i < 8; ++i) c.x[i] = __uint_as_float(__float_as_uint(c.x[i]) ^ dep);
    }
    float result;
    if constexpr (SMEM) result = epilogue_smem(c, tile, rows + (size_t)t * 16);
    else result = epilogue_regs(c, rows + (size_t)t * 16);
    if constexpr (CLOCK) {
        const long long t1 = clock_after(__float_as_uint(result) & zero);
        if (lane_id() == 0) cycles[t] = t1 - t0;
    }
}

// ------------------------------------------------------------------------------------------------
// The kernels. a, b: (n_tiles, 16, 16) row-major; rows: (n_tiles, 16); cycles: (n_tiles,).
// Launch n_tiles blocks of 32 threads. `zero` must be 0 (the wrapper passes it).
// GUARD wraps each body: ANY_TARGET for f16, SM80_ONLY (common.cuh) for bf16, whose WMMA needs
// sm_80 (on older targets those kernels trap, as said at the top of this file).
// ------------------------------------------------------------------------------------------------
#define ANY_TARGET(...) __VA_ARGS__

#define ROWMAX_KERNELS(NAME, IN, GUARD)                                                            \
    extern "C" __global__ void __launch_bounds__(32)                                               \
    rowmax_smem_##NAME(const IN* a, const IN* b, float* rows, int n_tiles)                         \
    {                                                                                              \
        GUARD(__shared__ __align__(32) float tile[256];                                            \
              rowmax_tile<IN, true, false>(a, b, rows, nullptr, n_tiles, 0u, tile));               \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(32)                                               \
    rowmax_regs_##NAME(const IN* a, const IN* b, float* rows, int n_tiles)                         \
    {                                                                                              \
        GUARD(rowmax_tile<IN, false, false>(a, b, rows, nullptr, n_tiles, 0u, nullptr));           \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(32)                                               \
    rowmax_smem_##NAME##_clock(const IN* a, const IN* b, float* rows, long long* cycles,           \
                               int n_tiles, unsigned zero)                                         \
    {                                                                                              \
        GUARD(__shared__ __align__(32) float tile[256];                                            \
              rowmax_tile<IN, true, true>(a, b, rows, cycles, n_tiles, zero, tile));               \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(32)                                               \
    rowmax_regs_##NAME##_clock(const IN* a, const IN* b, float* rows, long long* cycles,           \
                               int n_tiles, unsigned zero)                                         \
    {                                                                                              \
        GUARD(rowmax_tile<IN, false, true>(a, b, rows, cycles, n_tiles, zero, nullptr));           \
    }

ROWMAX_KERNELS(f16, __half, ANY_TARGET)
ROWMAX_KERNELS(bf16, __nv_bfloat16, SM80_ONLY)
