// Topic 07_register_reuse, rung 5 of the FP32 SGEMM ladder: tile2d (2D block tiling).
//
//   sgemm_tile2d(A, B, C, M, N, K): C = A @ B, row-major float32, A (M,K), B (K,N), C (M,N).
//   Launch: BM*BN/(TM*TN) threads per block, grid (ceil(N/BN), ceil(M/BM)); any M, N, K >= 1.
//   Tiles (defines): BM = BN = 128, BK = 8, TM = TN = 8: 256 threads.
//   Python: fraglab.register_reuse.sgemm(a, b, variant="tile2d", BM=..., ...).
//
// Changed from rung 4 (tile1d): each thread owns a TM x TN block of C instead of a TM column.
// For each staged k it loads TM values of As and TN values of Bs into registers and does the
// TM*TN FFMAs of their outer product: (TM + TN) / (TM * TN) = 16/64 = 1/4 shared words per FFMA
// (rung 4: 9/8). 64 accumulators per thread; the block tile doubles to 128 x 128.
#define SGEMM_RUNG_THREAD_TILE   // its default tiles (07_register_reuse.cuh)
#include "07_register_reuse.cuh"

#define THREADS (BM * BN / (TM * TN))

SGEMM_LAUNCH(THREADS, BM, BN, 0)   // static tiles

extern "C" __global__ void __launch_bounds__(THREADS) sgemm_tile2d(SGEMM_ARGS) {
    __shared__ float As[BM * BK], Bs[BK * BN];
    const int tr = threadIdx.x / (BN / TN), tc = threadIdx.x % (BN / TN);
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[TM][TN] = {}, a[TM], b[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        stage_guarded<BM, BN, BK, THREADS>(As, Bs, A, B, M, N, K, row0, col0, k0);
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[(tr * TM + i) * BK + k];
#pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = Bs[k * BN + tc * TN + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)               // the outer product of a and b
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int row = row0 + tr * TM + i, col = col0 + tc * TN + j;
            if (row < M && col < N) C[row * N + col] = acc[i][j];
        }
}
