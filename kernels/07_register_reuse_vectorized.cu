// Topic 07_register_reuse, rung 6 of the FP32 SGEMM ladder: vectorized.
//
//   sgemm_vectorized(A, B, C, M, N, K): C = A @ B, row-major float32, A (M,K), B (K,N), C (M,N).
//   Launch: BM*BN/(TM*TN) threads per block, grid (N/BN, M/BM).
//   Needs M % BM == N % BN == K % BK == 0 and 16-byte aligned A, B, C (float4 loads and stores).
//   Tiles (defines): BM = BN = 128, BK = 8, TM = TN = 8: 256 threads.
//   Python: fraglab.register_reuse.sgemm(a, b, variant="vectorized", BM=..., ...).
//
// Changed from rung 5 (tile2d): the same thread tile, but the memory instructions are 128 bits
// wide. Global tiles come in as float4 (LDG.E.128), B goes to shared memory as float4
// (STS.128), and A is stored TRANSPOSED (As[k][m]), so that a thread's TM rows of A for one k
// are consecutive and come back as TM/4 LDS.128, like its TN columns of B. Shared words per FFMA
// stay 1/4; shared load INSTRUCTIONS per FFMA drop from 16/64 to 4/64. The bounds checks go:
// the wrapper only launches whole tiles.
#define SGEMM_RUNG_THREAD_TILE   // its default tiles (07_register_reuse.cuh)
#include "07_register_reuse.cuh"

#define THREADS (BM * BN / (TM * TN))

SGEMM_LAUNCH(THREADS, BM, BN, 0)   // static tiles

extern "C" __global__ void __launch_bounds__(THREADS) sgemm_vectorized(SGEMM_ARGS) {
    __shared__ __align__(16) float As[BK * BM], Bs[BK * BN];   // As is k-major: As[k][m]
    const int tr = threadIdx.x / (BN / TN), tc = threadIdx.x % (BN / TN);
    A += blockIdx.y * BM * K;                  // this block's rows of A ...
    B += blockIdx.x * BN;                      // ... and columns of B
    float acc[TM][TN] = {}, a[TM], b[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        stage_float4<BM, BN, BK, THREADS, BM>(As, Bs, A + k0, B + k0 * N, N, K);
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; i += 4)
                *reinterpret_cast<float4*>(&a[i]) = *reinterpret_cast<const float4*>(&As[k * BM + tr * TM + i]);
#pragma unroll
            for (int j = 0; j < TN; j += 4)
                *reinterpret_cast<float4*>(&b[j]) = *reinterpret_cast<const float4*>(&Bs[k * BN + tc * TN + j]);
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
    C += (blockIdx.y * BM + tr * TM) * N + blockIdx.x * BN + tc * TN;
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; j += 4)
            *reinterpret_cast<float4*>(&C[i * N + j]) =
                make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
}
