// Topic 07_register_reuse, rung 7 of the FP32 SGEMM ladder: warptile (warp tiling).
//
//   sgemm_warptile(A, B, C, M, N, K): C = A @ B, row-major float32, A (M,K), B (K,N), C (M,N).
//   Launch: (BM/WM)*(BN/WN)*32 threads, grid (N/BN, M/BM), dynamic shared memory
//   BK*((BM+4) + BN)*4 bytes. Needs M % BM == N % BN == K % BK == 0, 16-byte aligned A, B, C.
//   Tiles (defines): BM = BN = 128, BK = 8, WM = 32, WN = 64, LM = 4 (lanes as 4 x 8), MINB = 2
//   (blocks per SM asked of ptxas): 8 warps, 8x8 outputs per thread.
//   Python: fraglab.register_reuse.sgemm(a, b, variant="warptile", BM=..., ...).
//
// Changed from rung 6 (vectorized): the same 8x8 outputs per thread, but not as one contiguous
// 8x8 block. The block tile is cut into warp tiles (WM x WN) and each lane owns 4x4 chunks of
// its warp's tile spaced LM*4 rows and (32/LM)*4 columns apart (WarpTile in
// 07_register_reuse.cuh). In rung 6, neighbouring lanes read B float4s 32 bytes apart (bank
// conflicts) and the A reads of a warp spread over 8 addresses; here the lanes of a warp read
// contiguous float4s of B and 4 broadcast float4s of A, and each warp touches only its own
// slice of the shared tiles. As gets 4 floats of padding per row, which makes its transposed
// store conflict-free. The tiles live in dynamic shared memory, so bigger tiles than 48 KB fit.
#define SGEMM_RUNG_WARP_TILE   // its default tiles (07_register_reuse.cuh)
#include "07_register_reuse.cuh"

#define THREADS ((BM / WM) * (BN / WN) * 32)

SGEMM_LAUNCH(THREADS, BM, BN, (ALayout<BM, BK, false>::SMEM<BN, 1>))   // one stage, A padded

extern "C" __global__ void __launch_bounds__(THREADS, MINB) sgemm_warptile(SGEMM_ARGS) {
    using Warp = WarpTile<WM, WN, LM>;
    constexpr int LDA = BM + 4;                // padded row of the k-major A tile
    extern __shared__ float4 smem4[];
    float* As = reinterpret_cast<float*>(smem4);
    float* Bs = As + BK * LDA;
    const int warp = threadIdx.x / 32;
    const int wm0 = warp / (BN / WN) * WM, wn0 = warp % (BN / WN) * WN;   // the warp's tile
    A += blockIdx.y * BM * K;
    B += blockIdx.x * BN;
    float acc[Warp::LANE_M][Warp::LANE_N] = {};
    const float* a_lane = As + wm0 + Warp::lane_row();
    const float* b_lane = Bs + wn0 + Warp::lane_col();
    for (int k0 = 0; k0 < K; k0 += BK) {
        stage_float4<BM, BN, BK, THREADS, LDA>(As, Bs, A + k0, B + k0 * N, N, K);
        Warp::fma_tile<BK, LDA, BN>(acc, a_lane, b_lane);   // fma_step for each staged k
        __syncthreads();
    }
    Warp::store(C + (blockIdx.y * BM + wm0) * N + blockIdx.x * BN + wn0, N, acc);
}
