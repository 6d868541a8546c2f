// 11_fused_lm_head: A fused LM head: matmul, then an in-register log-sum-exp.
//
// warp_scan: one warp per row of a (rows, 32) int32 matrix, WARPS_PER_BLOCK warps per block
//            (fraglab.fused_lm_head.kernels). Lane i loads element i and ends holding the sum of
//            elements 0..i of its row (an inclusive prefix sum) after five __shfl_up_sync steps,
//            distances 1, 2, 4, 8, 16: no shared memory, no barrier.
//            Python: fraglab.fused_lm_head.warp_scan(x) -> (rows, 32) int32.
#include "common.cuh"

extern "C" __global__ void warp_scan(const int* in, int* out, int rows)
{
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= rows) return;              // a whole warp leaves together: every mask stays full
    const int lane = lane_id();
    int v = in[row * 32 + lane];
#pragma unroll
    for (int offset = 1; offset < 32; offset *= 2) {
        const int up = __shfl_up_sync(FULL_MASK, v, offset);   // lane - offset's partial sum
        if (lane >= offset) v += up;      // lanes below offset get their own value back
    }
    out[row * 32 + lane] = v;
}
