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
#include <mma.h>
#include <cuda_fp16.h>
#include "common.cuh"

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

// ---- helpers ---------------------------------------------------------------------------------
// WMMA wants 256-bit aligned pointers and a leading dimension that is a multiple of 16 bytes. A
// tile at an arbitrary column of a global matrix is neither (8 halves are 16 bytes), so the
// inputs go through shared memory, padded.
template <typename T> __host__ __device__ constexpr int padded_ld(int n)
{
    return (n * (int)sizeof(T) + 15) / 16 * 16 / (int)sizeof(T);
}

template <typename F> __device__ __forceinline__ void round_to_input_type(F&) {}
#if __CUDA_ARCH__ >= 800
template <typename Use, int M, int N, int K, typename L>
__device__ __forceinline__ void round_to_input_type(wmma::fragment<Use, M, N, K, wmma::precision::tf32, L>& f)
{
#pragma unroll
    for (int i = 0; i < f.num_elements; ++i) f.x[i] = wmma::__float_to_tf32(f.x[i]);
}
#endif

// ---- one tile: mma, then both stores ---------------------------------------------------------
template <int M, int N, int K, typename AccT, typename InFrag, typename InMem, typename Map>
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

// ---- entry points, one per accumulator kind --------------------------------------------------
#define FWD(NAME, M, N, K, AccT, InF, InM) \
    extern "C" __global__ void fwd_store_##NAME(const InM* A, const InM* B, const AccT* C, \
        AccT* out_ref, AccT* out_fwd, int rows, int cols, const int* weights) \
    { mma_then_store<M, N, K, AccT, InF, InM>(A, B, C, out_ref, out_fwd, rows, cols, BitWeights(weights)); }
#define FWD_80(NAME, M, N, K, AccT, InF, InM) \
    extern "C" __global__ void fwd_store_##NAME(const InM* A, const InM* B, const AccT* C, \
        AccT* out_ref, AccT* out_fwd, int rows, int cols, const int* weights) \
    { SM80_ONLY(mma_then_store<M, N, K, AccT, InF, InM>(A, B, C, out_ref, out_fwd, rows, cols, BitWeights(weights))); }
#define FWD_EQ12(NAME, M, N, K, AccT, InF, InM) \
    extern "C" __global__ void fwd_store_eq12_##NAME(const InM* A, const InM* B, const AccT* C, \
        AccT* out_ref, AccT* out_fwd, int rows, int cols) \
    { mma_then_store<M, N, K, AccT, InF, InM>(A, B, C, out_ref, out_fwd, rows, cols, Eq12()); }
#define FWD_EQ12_80(NAME, M, N, K, AccT, InF, InM) \
    extern "C" __global__ void fwd_store_eq12_##NAME(const InM* A, const InM* B, const AccT* C, \
        AccT* out_ref, AccT* out_fwd, int rows, int cols) \
    { SM80_ONLY(mma_then_store<M, N, K, AccT, InF, InM>(A, B, C, out_ref, out_fwd, rows, cols, Eq12())); }

FWD(acc_16x16x16_f32, 16, 16, 16, float, __half, __half)
FWD(acc_16x16x16_f16, 16, 16, 16, __half, __half, __half)
FWD(acc_16x16x16_s32, 16, 16, 16, int, signed char, signed char)
FWD(acc_32x8x16_f32, 32, 8, 16, float, __half, __half)
FWD(acc_32x8x16_f16, 32, 8, 16, __half, __half, __half)
FWD(acc_32x8x16_s32, 32, 8, 16, int, signed char, signed char)
FWD(acc_8x32x16_f32, 8, 32, 16, float, __half, __half)
FWD(acc_8x32x16_f16, 8, 32, 16, __half, __half, __half)
FWD(acc_8x32x16_s32, 8, 32, 16, int, signed char, signed char)
FWD_80(acc_16x16x8_f32, 16, 16, 8, float, wmma::precision::tf32, float)
FWD_80(acc_8x8x4_f64, 8, 8, 4, double, double, double)

FWD_EQ12(acc_16x16x16_f32, 16, 16, 16, float, __half, __half)
FWD_EQ12(acc_16x16x16_f16, 16, 16, 16, __half, __half, __half)
FWD_EQ12(acc_16x16x16_s32, 16, 16, 16, int, signed char, signed char)
FWD_EQ12_80(acc_16x16x8_f32, 16, 16, 8, float, wmma::precision::tf32, float)
