// Topic 07_register_reuse, rung 8 of the FP32 SGEMM ladder: double_buffer.
//
//   sgemm_double_buffer(A, B, C, M, N, K): C = A @ B, row-major float32 (A (M,K), B (K,N)).
//   Launch: (BM/WM)*(BN/WN)*32 threads, grid (N/BN, M/BM), dynamic shared memory
//   2*BK*((BM+4) + BN)*4 bytes. Needs M % BM == N % BN == K % BK == 0, 16-byte aligned A, B, C.
//   Tiles (defines): as rung 7, BM = BN = 128, BK = 8, WM = 32, WN = 64, LM = 4, MINB = 2,
//   and GROUP = 1 (block rows per group in the block order; 1 = the grid's own order).
//   Python: fraglab.register_reuse.sgemm(a, b, variant="double_buffer", BM=..., ...).
//
// Changed from rung 7 (warptile): two shared-memory stages and a global -> register -> shared
// prefetch, so the loads of step t+1 overlap the FFMAs of step t, and one barrier per step
// instead of two. The loop is sgemm_double_buffer_tile in 07_register_reuse.cuh (rung 9 runs the
// same function with the tiles of the H100 sweep); read it side by side with rung 7's loop.
#define SGEMM_RUNG_WARP_TILE   // its default tiles (07_register_reuse.cuh)
#include "07_register_reuse.cuh"

SGEMM_LAUNCH((BM / WM) * (BN / WN) * 32, BM, BN, (ALayout<BM, BK, false>::SMEM<BN, 2>))

extern "C" __global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, MINB)
sgemm_double_buffer(SGEMM_ARGS) {
    sgemm_double_buffer_tile<BM, BN, BK, WM, WN, LM, GROUP>(A, B, C, M, N, K);
}
