// 03_permutation_and_quad_reduction: reducing the rows and columns of a WMMA accumulator without
// leaving the registers. After T. Morales, "Accelerating fused WMMA operations via in-register
// data permutation", sections 3.2-3.3: the swap of Fig. 2 and the quad reduction of Algorithm 3.
//
// Where the elements of a 16x16 f32 accumulator sit on sm_75 .. sm_120 (lane = 0..31, register
// i = 0..7, g = lane / 4, t = lane % 4):
//
//     row = g + 8 * ((i >> 1) & 1)            x[0,1]: row g     x[2,3]: row g+8
//     col = 2 * t + (i & 1) + 8 * (i >> 2)    x[4,5]: row g     x[6,7]: row g+8
//
// So one lane holds 4 elements of row g (cols 2t, 2t+1, 2t+8, 2t+9) and 4 of row g+8, and the
// four lanes of a quad (same g) hold all 16 elements of those two rows. Reducing a row is: reduce
// your 4 elements, then combine with the other 3 lanes of the quad (__shfl_xor_sync offsets 1, 2).
//
// Kernels (one warp per tile, WARPS_PER_BLOCK warps per block, `n_tiles` tiles per launch):
//
//   reduce_acc_16x16_<op>_<perm|direct>_<group|full>(acc, rows, cols, n_tiles)
//       loads chosen accumulator values (load_matrix_sync) and reduces them: isolates the
//       reduction from the matrix product. perm = the Fig. 2 swap then Algorithm 3 on x[0..3] and
//       x[4..7]; direct = no swap, reduce {x0,x1,x4,x5} and {x2,x3,x6,x7}. group = the paper's
//       per-lane masks (0xF << (lane/4)*4 for rows); full = 0xffffffff.
//   reduce_acc_32x8_<op>_<group|full>, reduce_acc_8x32_<op>_<group|full>
//       the same for the two other accumulator shapes, by the generic bit-layout code below.
//   mma_reduce_<16x16|32x8|8x32>_<f16|bf16>_<max|min|sum>(a, b, rows, cols, n_tiles)
//       tile t: C = A[t] @ B[t] on the tensor cores, then its row and column reductions, with the
//       paper's per-lane masks (and for 16x16 rows, exactly Fig. 2 + Algorithm 3).
//   rowmax_shared_16x16, rowmax_quadmask_16x16, rowmax_fullmask_16x16 (a, b, rows, n_tiles)
//       the same row maxima three ways: through shared memory (store_matrix_sync,
//       __syncthreads, loads: the textbook way), and in registers with either mask.
//   acc_layout_<16x16|32x8|8x32>(coords, out): where load_matrix_sync puts each element (GPU check
//       of the layouts assumed here).
//
// <op> is max (fmaxf), min (fminf), sum (+) or max_cmp (a > b ? a : b, to show what NaN does).
#include <mma.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include "common.cuh"
#include "wmma_tile.cuh"

using namespace nvcuda;

#define WARPS_PER_BLOCK 4
// what the launch reads back (fraglab.launch.constants): one warp per tile, 4 tiles per block
extern "C" __device__ const int warps_per_block = WARPS_PER_BLOCK;

// ------------------------------------------------------------------------------------------------
// Operators. Any associative operator works. The order of the reductions below is fixed, so an
// emulator that follows it (fraglab.permutation_and_quad_reduction) reproduces every bit, NaN
// included, even for float sums and for max_cmp, which are not associative.
// ------------------------------------------------------------------------------------------------
struct OpMax    { static __device__ __forceinline__ float apply(float a, float b) { return fmaxf(a, b); } };
struct OpMin    { static __device__ __forceinline__ float apply(float a, float b) { return fminf(a, b); } };
struct OpSum    { static __device__ __forceinline__ float apply(float a, float b) { return a + b; } };
// Not fmaxf: a NaN in `b` wins, a NaN in `a` loses. Order-dependent on purpose.
struct OpMaxCmp { static __device__ __forceinline__ float apply(float a, float b) { return a > b ? a : b; } };

// ------------------------------------------------------------------------------------------------
// The paper's way, 16x16 only: Fig. 2 then Algorithm 3.
// ------------------------------------------------------------------------------------------------

// Fig. 2: swap x[2,3] (row g+8) with x[4,5] (row g). Afterwards x[0..3] are row g and x[4..7] row
// g+8. Only names move: after inlining, the compiler just reads other registers (no instruction).
__device__ __forceinline__ void permute_fig2(float (&x)[8])
{
    float t2 = x[2], t3 = x[3];
    x[2] = x[4]; x[3] = x[5];
    x[4] = t2;   x[5] = t3;
}

// Algorithm 3 on the four registers I0..I3 of each lane (which hold 4 elements of one row): reduce
// them in the lane, then across the quad. The result is in every lane of the quad.
//
// The member mask. CUDA's rule: the mask names the lanes taking part; each calling lane must be
// in its own mask, and every non-exited lane named in a mask must execute the same intrinsic with
// the same mask. The paper's QUAD_MASK (0xF << (lane/4)*4) obeys it: the 8 quads name disjoint
// sets. The full mask obeys it too, since all 32 lanes run this code. Offsets 1 and 2 never leave
// the quad, so both give the same values, and the SHFL instruction is the same: it has no
// member-mask operand, all 8 quads always shuffle in the one instruction. What differs is around
// it: from sm_80 on, for a mask that is not known to be the same in every lane, ptxas adds a
// check (MATCH.ANY, REDUX.OR, VOTEU.ANY, BRA.DIV) and a WARPSYNC fallback.
template <class Op, bool QUAD_MASK, int I0, int I1, int I2, int I3>
__device__ __forceinline__ float quad_reduce_alg3(const float (&x)[8])
{
    const unsigned mask = QUAD_MASK ? 0xFu << ((lane_id() / 4) * 4) : FULL_MASK;
    float v = Op::apply(Op::apply(Op::apply(x[I0], x[I1]), x[I2]), x[I3]);  // stage 1: in the lane
    v = Op::apply(v, __shfl_xor_sync(mask, v, 1));                           // stage 2: the quad
    v = Op::apply(v, __shfl_xor_sync(mask, v, 2));
    return v;
}

// Rows of a 16x16 tile; writes rows[0..15]. PERMUTE: the paper's way, Fig. 2 then Algorithm 3 on
// x[0..3] (row g) and x[4..7] (row g+8). Without it: the same reduction of {x0,x1,x4,x5} and
// {x2,x3,x6,x7}, the very same elements in the very same order, so the results are identical.
template <class Op, bool PERMUTE, bool QUAD_MASK>
__device__ __forceinline__ void rows_16x16(const float (&acc)[8], float* rows)
{
    float x[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = acc[i];
    float a, b;
    if constexpr (PERMUTE) {
        permute_fig2(x);
        a = quad_reduce_alg3<Op, QUAD_MASK, 0, 1, 2, 3>(x);
        b = quad_reduce_alg3<Op, QUAD_MASK, 4, 5, 6, 7>(x);
    } else {
        a = quad_reduce_alg3<Op, QUAD_MASK, 0, 1, 4, 5>(x);
        b = quad_reduce_alg3<Op, QUAD_MASK, 2, 3, 6, 7>(x);
    }
    if (lane_id() % 4 == 0) {                                 // the quad's first lane writes
        rows[lane_id() / 4] = a;
        rows[lane_id() / 4 + 8] = b;
    }
}

// ------------------------------------------------------------------------------------------------
// Any shape: a "bit layout". In all three f32 accumulators each of the 5 lane-id bits and each of
// the 3 register-index bits picks one bit of the row or of the column. SPEC holds one nibble per
// source bit (nibble k = lane bit k for k < 5, register bit k-5 for k >= 5): its low 3 bits say
// which bit it sets, and 0x8 means "of the column" (else of the row).
//
//   16x16  0xB38210A9  (the layout above)
//   32x8   0x438210A9  row = g + 8*(i>>1), col = 2t + (i&1)
//   8x32   0xCB0A9821  row = 2t + (i&1),   col = g + 8*(i>>1)     (the transpose of 32x8)
//
// NVIDIA documents none of them for WMMA. The 32x8 and 8x32 ones are read off the SASS that ptxas
// emits for load_matrix_sync / store_matrix_sync of those fragments (the address of each load as a
// function of SR_LANEID), the same on sm_75, sm_80, sm_90 and sm_120; the GPU tests check them
// (acc_layout_* below, and every reduction against NumPy). Override with -DFRAGLAB_SPEC_32X8=...
// ------------------------------------------------------------------------------------------------
#ifndef FRAGLAB_SPEC_32X8
#define FRAGLAB_SPEC_32X8 0x438210A9u
#endif
#ifndef FRAGLAB_SPEC_8X32
#define FRAGLAB_SPEC_8X32 0xCB0A9821u
#endif
#define FRAGLAB_SPEC_16X16 0xB38210A9u

template <unsigned SPEC, int M, int N>
struct BitLayout {
    __host__ __device__ static constexpr unsigned nib(int k) { return (SPEC >> (4 * k)) & 0xFu; }
    __host__ __device__ static constexpr unsigned sources(bool col)   // source bits (lane 0-4, register 5-7) of row/col
    {
        unsigned m = 0;
        for (int k = 0; k < 8; ++k)
            if (((nib(k) & 8u) != 0) == col) m |= 1u << k;
        return m;
    }
    __host__ __device__ static constexpr unsigned targets(bool col)   // which bits of the row / col index are set
    {
        unsigned m = 0;
        for (int k = 0; k < 8; ++k)
            if (((nib(k) & 8u) != 0) == col) m |= 1u << (nib(k) & 7u);
        return m;
    }
    // Moving along a row changes the column: these source bits.
    static constexpr unsigned LANE_COL = sources(true) & 31u, REG_COL = sources(true) >> 5;
    static constexpr unsigned LANE_ROW = sources(false) & 31u, REG_ROW = sources(false) >> 5;
    static_assert(M * N == 256 && targets(false) == unsigned(M - 1) &&
                  targets(true) == unsigned(N - 1),
                  "SPEC must send the 8 source bits to distinct bits of row (M) and column (N)");

    // Row (COL = false) or column (COL = true) of register i in lane `lane`.
    template <bool COL>
    static __device__ __forceinline__ int coord(int lane, int i)
    {
        int v = 0;
#pragma unroll
        for (int k = 0; k < 8; ++k)
            if (((nib(k) & 8u) != 0) == COL)
                v |= (k < 5 ? (lane >> k) & 1 : (i >> (k - 5)) & 1) << (nib(k) & 7u);
        return v;
    }
};

using Layout16x16 = BitLayout<FRAGLAB_SPEC_16X16, 16, 16>;
using Layout32x8  = BitLayout<FRAGLAB_SPEC_32X8, 32, 8>;
using Layout8x32  = BitLayout<FRAGLAB_SPEC_8X32, 8, 32>;

// All lanes that differ from lane 0 only in the bits of B: the lanes of one group when B are the
// bits a reduction runs across (B = 0b00011: 0x0000000F, a quad; B = 0b11100: 0x11111111).
__host__ __device__ constexpr unsigned group_mask0(unsigned B)
{
    unsigned m = 0;
    for (unsigned l = 0; l < 32; ++l)
        if ((l & ~B) == 0) m |= 1u << l;
    return m;
}

// Reduce along rows (ALONG_ROW, one value per row) or along columns. Register i is a
// "representative" when its across-bits are 0; out[i] then holds the reduction of the line that
// x[i] lies on, in every lane of the group. Other out[i] are left as x[i].
// Order: x[i] op x[j] for j increasing, then shuffle offsets from the lowest bit up.
template <class L, class Op, bool ALONG_ROW, bool GROUP_MASK>
__device__ __forceinline__ void reduce_lines(const float (&x)[8], float (&out)[8])
{
    constexpr unsigned REG_ACROSS = ALONG_ROW ? L::REG_COL : L::REG_ROW;
    constexpr unsigned LANE_ACROSS = ALONG_ROW ? L::LANE_COL : L::LANE_ROW;
    const unsigned mask = GROUP_MASK ? group_mask0(LANE_ACROSS) << (lane_id() & ~LANE_ACROSS)
                                     : FULL_MASK;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        out[i] = x[i];
        if (i & REG_ACROSS) continue;
#pragma unroll
        for (int j = i + 1; j < 8; ++j)                       // stage 1: in the lane
            if ((j & ~REG_ACROSS) == i) out[i] = Op::apply(out[i], x[j]);
#pragma unroll
        for (int bit = 0; bit < 5; ++bit)                     // stage 2: across the group
            if ((LANE_ACROSS >> bit) & 1u)
                out[i] = Op::apply(out[i], __shfl_xor_sync(mask, out[i], 1 << bit));
    }
}

// The lanes whose across-bits are 0 write the lines they hold: out[t * lines + line].
template <class L, bool ALONG_ROW>
__device__ __forceinline__ void store_lines(const float (&v)[8], float* out)
{
    constexpr unsigned REG_ACROSS = ALONG_ROW ? L::REG_COL : L::REG_ROW;
    constexpr unsigned LANE_ACROSS = ALONG_ROW ? L::LANE_COL : L::LANE_ROW;
    const int lane = lane_id();
    if (lane & LANE_ACROSS) return;
#pragma unroll
    for (int i = 0; i < 8; ++i)
        if (!(i & REG_ACROSS)) out[L::template coord<!ALONG_ROW>(lane, i)] = v[i];
}

template <class L, class Op, bool ALONG_ROW, bool GROUP_MASK>
__device__ __forceinline__ void lines_generic(const float (&acc)[8], float* out)
{
    float x[8], v[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = acc[i];
    reduce_lines<L, Op, ALONG_ROW, GROUP_MASK>(x, v);
    store_lines<L, ALONG_ROW>(v, out);
}

// Tile of this warp, or -1 when the grid has more warps than tiles (the whole warp then leaves
// together, so every mask it would have used names only lanes that still run).
__device__ __forceinline__ int warp_tile(int n_tiles)
{
    const int t = blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    return t < n_tiles ? t : -1;
}

// ------------------------------------------------------------------------------------------------
// Reductions of chosen accumulator values: acc is (n_tiles, M, N) float32, row-major.
// ------------------------------------------------------------------------------------------------
template <int M, int N, class L, class Op, bool SQUARE, bool PERMUTE, bool GROUP_MASK>
__device__ __forceinline__ void reduce_acc(const float* acc, float* rows, float* cols, int n_tiles)
{
    const int t = warp_tile(n_tiles);
    if (t < 0) return;
    wmma::fragment<wmma::accumulator, M, N, 16, float> c;
    wmma::load_matrix_sync(c, acc + (size_t)t * M * N, N, wmma::mem_row_major);
    if constexpr (SQUARE) rows_16x16<Op, PERMUTE, GROUP_MASK>(c.x, rows + (size_t)t * M);
    else lines_generic<L, Op, true, GROUP_MASK>(c.x, rows + (size_t)t * M);
    lines_generic<L, Op, false, GROUP_MASK>(c.x, cols + (size_t)t * N);
}

#define REDUCE_ACC_16(OPNAME, OP, VAR, PERMUTE, GROUP)                                               \
    extern "C" __global__ void __launch_bounds__(32 * WARPS_PER_BLOCK)                             \
    reduce_acc_16x16_##OPNAME##_##VAR(const float* acc, float* rows, float* cols, int n_tiles)     \
    { reduce_acc<16, 16, Layout16x16, OP, true, PERMUTE, GROUP>(acc, rows, cols, n_tiles); }
#define REDUCE_ACC_SHAPE(SHAPE, M, N, OPNAME, OP, VAR, GROUP)                                      \
    extern "C" __global__ void __launch_bounds__(32 * WARPS_PER_BLOCK)                             \
    reduce_acc_##SHAPE##_##OPNAME##_##VAR(const float* acc, float* rows, float* cols, int n_tiles) \
    { reduce_acc<M, N, Layout##SHAPE, OP, false, false, GROUP>(acc, rows, cols, n_tiles); }
#define REDUCE_ACC_ALL(OPNAME, OP)                                                                 \
    REDUCE_ACC_16(OPNAME, OP, perm_group, true, true)                                              \
    REDUCE_ACC_16(OPNAME, OP, perm_full, true, false)                                              \
    REDUCE_ACC_16(OPNAME, OP, direct_group, false, true)                                           \
    REDUCE_ACC_16(OPNAME, OP, direct_full, false, false)                                           \
    REDUCE_ACC_SHAPE(32x8, 32, 8, OPNAME, OP, group, true)                                         \
    REDUCE_ACC_SHAPE(32x8, 32, 8, OPNAME, OP, full, false)                                         \
    REDUCE_ACC_SHAPE(8x32, 8, 32, OPNAME, OP, group, true)                                         \
    REDUCE_ACC_SHAPE(8x32, 8, 32, OPNAME, OP, full, false)

REDUCE_ACC_ALL(max, OpMax)
REDUCE_ACC_ALL(min, OpMin)
REDUCE_ACC_ALL(sum, OpSum)
REDUCE_ACC_ALL(max_cmp, OpMaxCmp)

// ------------------------------------------------------------------------------------------------
// Matrix product then reductions: a is (n_tiles, M, 16), b is (n_tiles, 16, N), row-major,
// f16 or bf16 (bf16 needs sm_80). C = A @ B accumulates in f32 on the tensor cores.
// ------------------------------------------------------------------------------------------------
template <int M, int N, class In, class L, class Op>
__device__ __forceinline__ void mma_reduce(const In* a, const In* b, float* rows, float* cols,
                                           int n_tiles)
{
    const int t = warp_tile(n_tiles);
    if (t < 0) return;
    wmma::fragment<wmma::matrix_a, M, N, 16, In, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, M, N, 16, In, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, M, N, 16, float> c;
    wmma::load_matrix_sync(fa, a + (size_t)t * M * 16, 16);
    wmma::load_matrix_sync(fb, b + (size_t)t * 16 * N, N);
    wmma::fill_fragment(c, 0.0f);
    wmma::mma_sync(c, fa, fb, c);
    if constexpr (M == 16 && N == 16) rows_16x16<Op, true, true>(c.x, rows + (size_t)t * M);
    else lines_generic<L, Op, true, true>(c.x, rows + (size_t)t * M);
    lines_generic<L, Op, false, true>(c.x, cols + (size_t)t * N);
}

#define MMA_REDUCE_F16(SHAPE, M, N, OPNAME, OP)                                                    \
    extern "C" __global__ void __launch_bounds__(32 * WARPS_PER_BLOCK)                             \
    mma_reduce_##SHAPE##_f16_##OPNAME(const __half* a, const __half* b, float* rows, float* cols,  \
                                      int n_tiles)                                                 \
    { mma_reduce<M, N, __half, Layout##SHAPE, OP>(a, b, rows, cols, n_tiles); }
// bf16 WMMA exists from sm_80 on; on older targets the kernel exists but traps (SM80_ONLY; the
// Python wrapper refuses those GPUs before launching).
#define MMA_REDUCE_BF16(SHAPE, M, N, OPNAME, OP)                                                   \
    extern "C" __global__ void __launch_bounds__(32 * WARPS_PER_BLOCK)                             \
    mma_reduce_##SHAPE##_bf16_##OPNAME(const __nv_bfloat16* a, const __nv_bfloat16* b,             \
                                       float* rows, float* cols, int n_tiles)                      \
    { SM80_ONLY(mma_reduce<M, N, __nv_bfloat16, Layout##SHAPE, OP>(a, b, rows, cols, n_tiles)); }
#define MMA_REDUCE_ALL(SHAPE, M, N)                                                                \
    MMA_REDUCE_F16(SHAPE, M, N, max, OpMax) MMA_REDUCE_F16(SHAPE, M, N, min, OpMin)                \
    MMA_REDUCE_F16(SHAPE, M, N, sum, OpSum) MMA_REDUCE_BF16(SHAPE, M, N, max, OpMax)               \
    MMA_REDUCE_BF16(SHAPE, M, N, min, OpMin) MMA_REDUCE_BF16(SHAPE, M, N, sum, OpSum)

MMA_REDUCE_ALL(16x16, 16, 16)
MMA_REDUCE_ALL(32x8, 32, 8)
MMA_REDUCE_ALL(8x32, 8, 32)

// ------------------------------------------------------------------------------------------------
// Why it matters: the row maxima of C = A @ B (f16 in, f32 accumulate), three ways.
// ------------------------------------------------------------------------------------------------
#define SMEM_LD 20   // floats per shared row: 16 + 4 of padding, so the 16 reading lanes hit 2-way
                     // bank conflicts at most (ldm must be a multiple of 4 for float)

// The textbook way: store the tile to shared memory, wait, and let lane r read row r.
extern "C" __global__ void __launch_bounds__(32 * WARPS_PER_BLOCK)
rowmax_shared_16x16(const __half* a, const __half* b, float* rows, int n_tiles)
{
    __shared__ __align__(32) float tiles[WARPS_PER_BLOCK][16 * SMEM_LD];   // WMMA wants 32-byte alignment
    const int t = blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    float* tile = tiles[threadIdx.x / 32];
    const bool active = t < n_tiles;   // no early return: every thread must reach __syncthreads
    if (active) {
        Acc16x16 c;
        tile_product(a, b, t, c);                  // C = A[t] @ B[t] (wmma_tile.cuh)
        wmma::store_matrix_sync(tile, c, SMEM_LD, wmma::mem_row_major);
    }
    __syncthreads();
    const int r = lane_id();
    if (active && r < 16) {
        float m = tile[r * SMEM_LD];
#pragma unroll
        for (int j = 1; j < 16; ++j) m = fmaxf(m, tile[r * SMEM_LD + j]);
        rows[(size_t)t * 16 + r] = m;
    }
}

template <bool QUAD_MASK>
__device__ __forceinline__ void rowmax_registers(const __half* a, const __half* b, float* rows,
                                                 int n_tiles)
{
    const int t = warp_tile(n_tiles);
    if (t < 0) return;
    Acc16x16 c;
    tile_product(a, b, t, c);
    rows_16x16<OpMax, true, QUAD_MASK>(c.x, rows + (size_t)t * 16);
}

extern "C" __global__ void __launch_bounds__(32 * WARPS_PER_BLOCK)
rowmax_quadmask_16x16(const __half* a, const __half* b, float* rows, int n_tiles)
{ rowmax_registers<true>(a, b, rows, n_tiles); }

extern "C" __global__ void __launch_bounds__(32 * WARPS_PER_BLOCK)
rowmax_fullmask_16x16(const __half* a, const __half* b, float* rows, int n_tiles)
{ rowmax_registers<false>(a, b, rows, n_tiles); }

// ------------------------------------------------------------------------------------------------
// Layout check: coords is (M, N) float32 (any values, e.g. row * N + col); lane l writes its x[i]
// to out[l * 8 + i]. One warp.
// ------------------------------------------------------------------------------------------------
#define ACC_LAYOUT(SHAPE, M, N)                                                                    \
    extern "C" __global__ void acc_layout_##SHAPE(const float* coords, float* out)                 \
    {                                                                                              \
        wmma::fragment<wmma::accumulator, M, N, 16, float> c;                                      \
        wmma::load_matrix_sync(c, coords, N, wmma::mem_row_major);                                 \
        _Pragma("unroll") for (int i = 0; i < 8; ++i) out[lane_id() * 8 + i] = c.x[i];             \
    }
ACC_LAYOUT(16x16, 16, 16)
ACC_LAYOUT(32x8, 32, 8)
ACC_LAYOUT(8x32, 8, 32)
