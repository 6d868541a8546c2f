// Topic 07_register_reuse, rung 1 of the FP32 SGEMM ladder: naive.
//
//   sgemm_naive(A, B, C, M, N, K): C = A @ B, row-major float32, A (M,K), B (K,N), C (M,N).
//   Launch: 1024 threads per block, grid (ceil(N/32), ceil(M/32)); any M, N, K >= 1.
//   Python: fraglab.register_reuse.sgemm(a, b, variant="naive").
//
// One thread computes one element of C with a dot product over K, reading A and B straight from
// global memory (dot_to_c in 07_register_reuse.cuh). The 1024 threads of a block cover a 32x32
// tile of C, and consecutive threads take consecutive ROWS of that tile: the 32 lanes of a warp
// read 32 different rows of A (K floats apart, one memory transaction each) and write C 32 rows
// apart. Rung 2 changes only that.
#include "07_register_reuse.cuh"

SGEMM_LAUNCH(1024, 32, 32, 0)   // 32 x 32 threads, one element of C each

extern "C" __global__ void __launch_bounds__(1024) sgemm_naive(SGEMM_ARGS) {
    const int row = blockIdx.y * 32 + threadIdx.x % 32;   // lanes walk DOWN a column of C
    const int col = blockIdx.x * 32 + threadIdx.x / 32;
    dot_to_c(A, B, C, row, col, M, N, K);
}
