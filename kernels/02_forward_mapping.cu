// 02_forward_mapping: store an accumulator fragment with the layout formula (Algorithm 2).
//
// Once the layout is known as a formula, (lane, i) -> (row, col), a lane can write its own
// registers straight to their place in a global matrix, with no trip through shared memory:
//
//     out[(tile_row + row(lane, i)) * cols + tile_col + col(lane, i)] = acc.x[i]
//
// (Morales, section 3.2, Algorithm 2). Each kernel here computes one tile per warp,
// acc = A_tile * B_tile + C_tile with WMMA, then stores acc twice:
//
//   out_ref  the usual way: store_matrix_sync to shared memory, then copied to the tile;
//   out_fwd  Algorithm 2: each lane stores its own acc.x[i] with the formula.
//
// The two must agree bit for bit: they store the same registers. A wrong formula shows up as
// misplaced values, or as poison (the host fills both outputs with NaN / a sentinel) left where
// no lane wrote.
//
// Two kinds of formula:
//   fwd_store_eq12_<kind>  the paper's equations (1)-(2), compiled in (16x16 tiles only);
//   fwd_store_<kind>       any bit-affine formula, given as weights (fraglab.forward_mapping.fit):
//                          w[j][0] + sum_b w[j][1+b]*bit_b(lane) + sum_b w[j][6+b]*bit_b(i),
//                          j = 0 for the row, 1 for the column.
//
// Launch: grid (cols / N, rows / M), block 32. A is rows x K, B is K x cols, C and the outputs
// rows x cols, all row-major; the host checks every size.
#include "fragment_kinds.cuh"      // the kinds (X-macro lists), padded_ld, round_to_input_type

using namespace nvcuda;

// ---- the formulas ----------------------------------------------------------------------------
struct Eq12 {                                        // the paper's (1) and (2)
    __device__ __forceinline__ int row(int lane, int i) const { return lane / 4 + ((i >> 1) & 1) * 8; }
    __device__ __forceinline__ int col(int lane, int i) const { return (lane % 4) * 2 + i % 2 + (i >> 2) * 8; }
};

struct BitWeights {                                  // a fitted formula, as 2 x 10 weights
    int w[2][10];
    __device__ __forceinline__ explicit BitWeights(const int* g)
    {
#pragma unroll
        for (int j = 0; j < 20; ++j) w[j / 10][j % 10] = g[j];
    }
    __device__ __forceinline__ int eval(int j, int lane, int i) const
    {
        int v = w[j][0];
#pragma unroll
        for (int b = 0; b < 5; ++b) v += w[j][1 + b] * ((lane >> b) & 1);
#pragma unroll
        for (int b = 0; b < 4; ++b) v += w[j][6 + b] * ((i >> b) & 1);
        return v;
    }
    __device__ __forceinline__ int row(int lane, int i) const { return eval(0, lane, i); }
    __device__ __forceinline__ int col(int lane, int i) const { return eval(1, lane, i); }
};

// ---- one tile: mma, then both stores ---------------------------------------------------------
template <int M, int N, int K, typename AccT, typename InFrag, typename InMem, int NE, typename Map>
__device__ void mma_then_store(const InMem* A, const InMem* B, const AccT* C, AccT* out_ref,
                               AccT* out_fwd, int rows, int cols, const Map& map)
{
    const int lane = lane_id();
    const long long tile_row = (long long)blockIdx.y * M, tile_col = (long long)blockIdx.x * N;
    if (tile_row + M > rows || tile_col + N > cols) return;          // the whole warp leaves

    constexpr int LDA = padded_ld<InMem>(K), LDB = padded_ld<InMem>(N), LDC = padded_ld<AccT>(N);
    __shared__ __align__(128) InMem sa[M * LDA];
    __shared__ __align__(128) InMem sb[K * LDB];
    __shared__ __align__(128) AccT sc[M * LDC];
    for (int e = lane; e < M * K; e += 32)
        sa[(e / K) * LDA + e % K] = A[(tile_row + e / K) * K + e % K];
    for (int e = lane; e < K * N; e += 32)
        sb[(e / N) * LDB + e % N] = B[(long long)(e / N) * cols + tile_col + e % N];
    for (int e = lane; e < M * N; e += 32)
        sc[(e / N) * LDC + e % N] = C[(tile_row + e / N) * cols + tile_col + e % N];
    __syncwarp();

    wmma::fragment<wmma::matrix_a, M, N, K, InFrag, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, M, N, K, InFrag, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, M, N, K, AccT> acc;
    check_kind<decltype(acc), NE>();
    wmma::load_matrix_sync(a, sa, LDA);
    wmma::load_matrix_sync(b, sb, LDB);
    wmma::load_matrix_sync(acc, sc, LDC, wmma::mem_row_major);
    round_to_input_type(a);
    round_to_input_type(b);
    wmma::mma_sync(acc, a, b, acc);

    // 1. The usual way: store_matrix_sync into shared memory, then copy the tile out.
    __syncwarp();                                    // every lane has read sc before it is reused
    wmma::store_matrix_sync(sc, acc, LDC, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < M * N; e += 32)
        out_ref[(tile_row + e / N) * cols + tile_col + e % N] = sc[(e / N) * LDC + e % N];

    // 2. Algorithm 2: each lane writes its own registers where the formula says.
#pragma unroll
    for (int i = 0; i < acc.num_elements; ++i)
        out_fwd[(tile_row + map.row(lane, i)) * cols + tile_col + map.col(lane, i)] = acc.x[i];
}

// ---- entry points, one per accumulator kind (fragment_kinds.cuh) ----------------------------
// A, B: the kind's input type IN in memory (tf32 inputs are float); C and the outputs: T.
// WMMA wants 256-bit aligned pointers and 16-byte multiples as leading dimension: a tile at an
// arbitrary column of a global matrix is neither, so mma_then_store stages its inputs in
// padded shared memory (padded_ld).
#define FWD_ARGS(T, IN) \
    const FRAGLAB_MEM_T(IN)* A, const FRAGLAB_MEM_T(IN)* B, const FRAGLAB_FRAG_T(T)* C, \
    FRAGLAB_FRAG_T(T)* out_ref, FRAGLAB_FRAG_T(T)* out_fwd, int rows, int cols
#define FWD_BODY(GUARD, M, N, K, T, NE, IN, MAP) \
    { GUARD(mma_then_store<M, N, K, FRAGLAB_FRAG_T(T), FRAGLAB_FRAG_T(IN), FRAGLAB_MEM_T(IN), NE>( \
                A, B, C, out_ref, out_fwd, rows, cols, MAP)); }
#define FWD_STORE(GUARD, NAME, M, N, K, T, NE, IN) \
    extern "C" __global__ void fwd_store_##NAME(FWD_ARGS(T, IN), const int* weights) \
    FWD_BODY(GUARD, M, N, K, T, NE, IN, BitWeights(weights))
#define FWD_STORE_EQ12(GUARD, NAME, M, N, K, T, NE, IN) \
    extern "C" __global__ void fwd_store_eq12_##NAME(FWD_ARGS(T, IN)) \
    FWD_BODY(GUARD, M, N, K, T, NE, IN, Eq12())

// Equations (1)-(2) describe the 16x16 tile: the eq12 kernels exist for the accumulator kinds of
// that tile only. FWD_EQ12 pastes the tile shape into a macro name that expands to the kernel for
// 16x16 and to nothing for the other tiles.
#define FWD_EQ12_16x16(...) FWD_STORE_EQ12(__VA_ARGS__)
#define FWD_EQ12_32x8(...)
#define FWD_EQ12_8x32(...)
#define FWD_EQ12_8x8(...)
#define FWD_EQ12_PICK(M, N) FWD_EQ12_##M##x##N
#define FWD_EQ12(GUARD, NAME, M, N, K, T, NE, IN) \
    FWD_EQ12_PICK(M, N)(GUARD, NAME, M, N, K, T, NE, IN)

FRAGLAB_ACCUMULATOR_KINDS(FWD_STORE)
FRAGLAB_ACCUMULATOR_KINDS(FWD_EQ12)
