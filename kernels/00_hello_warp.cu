// 00_hello_warp: a warp is 32 lanes, each with its own registers.
//
// hello_warp: every lane writes its lane id and the contents of 8 of its registers, so the host
//             can see a warp as a (32, 8) table: the picture every later chapter uses.
// warp_sum:   one warp per row of a (rows, 32) matrix; lane i holds element i, and a butterfly of
//             five __shfl_xor_sync steps (offsets 16, 8, 4, 2, 1) leaves the row's sum in every
//             lane, with no shared memory and no __syncthreads.
// warp_sum_strided: the same butterfly, but blocks of several warps, each warp looping over
//             rows: more work per block, fewer blocks to schedule. Only the indexing differs.
#include "common.cuh"

extern "C" __global__ void hello_warp(int* lane_ids, float* regs)
{
    const int lane = lane_id();
    float x[8];                        // eight registers (the loop is unrolled, so no local memory)
#pragma unroll
    for (int r = 0; r < 8; ++r) x[r] = 100.0f * lane + r;
    lane_ids[lane] = lane;
#pragma unroll
    for (int r = 0; r < 8; ++r) regs[lane * 8 + r] = x[r];
}

// Launch with blockDim.x = 32 and gridDim.x = rows: block b reduces row b.
extern "C" __global__ void warp_sum(const float* in, float* out, int rows)
{
    const int row = blockIdx.x;
    if (row >= rows) return;           // the whole warp leaves together: the masks stay full
    float v = in[row * 32 + lane_id()];
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
        v += __shfl_xor_sync(FULL_MASK, v, offset);    // lane i adds lane i^offset's partial sum
    if (lane_id() == 0) out[row] = v;
}

// Launch with blockDim.x a multiple of 32 and any gridDim.x: warp w of the grid reduces rows
// w, w + (number of warps in the grid), ... The loop condition is the same for all lanes of a
// warp, so every shuffle still has the full warp behind it.
extern "C" __global__ void warp_sum_strided(const float* in, float* out, int rows)
{
    const int warps = gridDim.x * (blockDim.x / 32);
    for (int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; row < rows; row += warps) {
        float v = in[row * 32 + lane_id()];
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2)
            v += __shfl_xor_sync(FULL_MASK, v, offset);
        if (lane_id() == 0) out[row] = v;
    }
}
