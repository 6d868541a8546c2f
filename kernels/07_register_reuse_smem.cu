// Topic 07_register_reuse, rung 3 of the FP32 SGEMM ladder: smem (shared-memory blocking).
//
//   sgemm_smem(A, B, C, M, N, K): C = A @ B, row-major float32, A (M,K), B (K,N), C (M,N).
//   Launch: 1024 threads per block, grid (ceil(N/32), ceil(M/32)); any M, N, K >= 1.
//   Python: fraglab.register_reuse.sgemm(a, b, variant="smem").
//
// Changed from rung 2 (coalesced): the block walks K in steps of 32. At each step its 1024
// threads copy a 32x32 tile of A and one of B into shared memory (one coalesced load each,
// zeros past a ragged edge), wait at a barrier, and then each thread runs its dot product over
// the 32 staged k from shared memory. Global traffic drops 32-fold (each loaded float is used
// by 32 threads), but the inner loop still issues two shared loads (As[row][k], Bs[k][col]) per
// FFMA: the 2:1 that rung 4 attacks. (ptxas may fetch four As[row][k..k+3] with one LDS.128;
// the words moved per FFMA stay 2.)
#include "07_register_reuse.cuh"

SGEMM_LAUNCH(1024, 32, 32, 0)   // 32 x 32 threads, static tiles

extern "C" __global__ void __launch_bounds__(1024) sgemm_smem(SGEMM_ARGS) {
    __shared__ float As[32 * 32], Bs[32 * 32];
    const int tr = threadIdx.x / 32, tc = threadIdx.x % 32;   // this thread's element of the tile
    const int row0 = blockIdx.y * 32, col0 = blockIdx.x * 32;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += 32) {
        stage_guarded<32, 32, 32, 1024>(As, Bs, A, B, M, N, K, row0, col0, k0);
#pragma unroll
        for (int k = 0; k < 32; ++k)
            acc += As[tr * 32 + k] * Bs[k * 32 + tc];
        __syncthreads();   // nobody overwrites the tiles while others still read them
    }
    if (row0 + tr < M && col0 + tc < N)
        C[(row0 + tr) * N + col0 + tc] = acc;
}
