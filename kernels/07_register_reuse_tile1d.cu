// Topic 07_register_reuse, rung 4 of the FP32 SGEMM ladder: tile1d (1D block tiling).
//
//   sgemm_tile1d(A, B, C, M, N, K): C = A @ B, row-major float32, A (M,K), B (K,N), C (M,N).
//   Launch: BM*BN/TM threads per block, grid (ceil(N/BN), ceil(M/BM)); any M, N, K >= 1.
//   Tiles (defines): BM = BN = 64, BK = 8, TM = 8 (the seed's and siboehm's kernel 4): 512 threads.
//   Python: fraglab.register_reuse.sgemm(a, b, variant="tile1d", BM=..., ...).
//
// Changed from rung 3 (smem): each thread owns a COLUMN of TM elements of C instead of one, and
// the loops are swapped so that k is outside: for each staged k the thread loads ONE value of
// Bs into a register and reuses it for TM FFMAs against TM values of As (rows of its column).
// Shared words per FFMA: (TM + 1) / TM = 9/8 instead of 2. The block tile grows to BM x BN
// while the thread count drops to BM*BN/TM.
#define SGEMM_RUNG_TILE1D   // its default tiles (07_register_reuse.cuh)
#include "07_register_reuse.cuh"

#define THREADS (BM * BN / TM)

SGEMM_LAUNCH(THREADS, BM, BN, 0)   // static tiles

extern "C" __global__ void __launch_bounds__(THREADS) sgemm_tile1d(SGEMM_ARGS) {
    __shared__ float As[BM * BK], Bs[BK * BN];
    const int tr = threadIdx.x / BN, tc = threadIdx.x % BN;   // rows tr*TM .. +TM-1, column tc
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[TM] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        stage_guarded<BM, BN, BK, THREADS>(As, Bs, A, B, M, N, K, row0, col0, k0);
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            const float b = Bs[k * BN + tc];           // one shared load ...
#pragma unroll
            for (int i = 0; i < TM; ++i)               // ... reused by TM FFMAs
                acc[i] += As[(tr * TM + i) * BK + k] * b;
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int row = row0 + tr * TM + i, col = col0 + tc;
        if (row < M && col < N) C[row * N + col] = acc[i];
    }
}
