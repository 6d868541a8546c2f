// Topic 07_register_reuse, rung 2 of the FP32 SGEMM ladder: coalesced.
//
//   sgemm_coalesced(A, B, C, M, N, K): C = A @ B, row-major float32, A (M,K), B (K,N), C (M,N).
//   Launch: 1024 threads per block, grid (ceil(N/32), ceil(M/32)); any M, N, K >= 1.
//   Python: fraglab.register_reuse.sgemm(a, b, variant="coalesced").
//
// Changed from rung 1 (naive): which thread takes which element, nothing else. Consecutive
// threads now take consecutive COLUMNS of C, so the 32 lanes of a warp read 32 neighbouring
// floats of a row of B (one 128-byte transaction), all read the same element of A (a
// broadcast), and write 32 neighbouring floats of C. Still two global loads per FFMA, but each
// load instruction now moves a whole line that the warp uses, instead of one float in 32.
#include "07_register_reuse.cuh"

SGEMM_LAUNCH(1024, 32, 32, 0)   // 32 x 32 threads, one element of C each

extern "C" __global__ void __launch_bounds__(1024) sgemm_coalesced(SGEMM_ARGS) {
    const int row = blockIdx.y * 32 + threadIdx.x / 32;
    const int col = blockIdx.x * 32 + threadIdx.x % 32;   // lanes walk ALONG a row of C
    dot_to_c(A, B, C, row, col, M, N, K);
}
