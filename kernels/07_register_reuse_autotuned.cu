// Topic 07_register_reuse, rung 9 of the FP32 SGEMM ladder: autotuned.
//
//   sgemm_autotuned(A, B, C, M, N, K): C = A @ B, row-major float32 (A (M,K), B (K,N)).
//   Launch and requirements as rung 8 (double_buffer), with its own tiles.
//   Python: fraglab.register_reuse.sgemm(a, b, variant="autotuned"); the tiles it launches with
//   are TILES["autotuned"] in fraglab/register_reuse/kernels.py, the winner of the H100 sweep
//   (python -m fraglab.register_reuse bench), passed as defines. The header's defaults (rung
//   8's tiles) only serve a compile without defines (the compile tests).
//
// Changed from rung 8: nothing in the code. The block tile (BM x BN x BK), the warp tile
// (WM x WN), the lane grid (LM), the blocks per SM asked of ptxas (MINB) and the block order
// (GROUP block rows per group, for L2 reuse) are chosen by timing ~36 configurations on the
// H100 instead of by hand.
#define SGEMM_RUNG_WARP_TILE   // its default tiles (07_register_reuse.cuh)
#include "07_register_reuse.cuh"

SGEMM_LAUNCH((BM / WM) * (BN / WN) * 32, BM, BN, (ALayout<BM, BK, false>::SMEM<BN, 2>))

extern "C" __global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, MINB)
sgemm_autotuned(SGEMM_ARGS) {
    sgemm_double_buffer_tile<BM, BN, BK, WM, WN, LM, GROUP>(A, B, C, M, N, K);
}
