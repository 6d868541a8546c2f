// 10_fa3_pipelining, building block 4: warp specialization with register reallocation, the
// skeleton of the attention kernels without the attention. Warpgroup 0 produces, warpgroups 1
// and 2 consume, through a 2-stage ring of tiles guarded by mbarriers.
//
//   warpspec_rowsum(in, out, n_tiles)
//
// in: n_tiles tiles of 128 rows x 32 float32; out[t * 128 + r] = sum of row r of tile t.
// Launch: grid 1, block 384, dynamic shared memory 2 * 16 KB + 1 KB.
//
// setmaxnreg: the kernel starts with a register cap (__launch_bounds__(384, 1): 65536 / 384 =
// 170, rounded down to 168 per thread). The producer gives registers back
// (setmaxnreg.dec 40), the consumers take them (setmaxnreg.inc 232): 128 x 40 + 256 x 232 =
// 64512 of the 65536. Each role is one branch of a single if/else, and every thread of a
// warpgroup executes the same setmaxnreg (.sync.aligned); otherwise ptxas ignores it and says
// so (warning C7508).
#include "10_fa3_pipelining.cuh"

constexpr int WS_ROWS = 128, WS_COLS = 32, WS_STAGES = 2, WS_THREADS = 384;
constexpr int WS_TILE_BYTES = WS_ROWS * WS_COLS * 4;
// The launch numbers (fraglab.launch.constants reads them): a tile's rows and columns, the
// block, and the dynamic shared memory (the stages; barriers and alignment in the 256 after).
extern "C" __device__ const int warpspec_rows = WS_ROWS;
extern "C" __device__ const int warpspec_cols = WS_COLS;
extern "C" __device__ const int warpspec_threads = WS_THREADS;
extern "C" __device__ const int warpspec_smem = WS_STAGES * WS_TILE_BYTES + 256;

#if FRAGLAB_SM90A

__device__ void rowsum(const float* __restrict__ in, float* __restrict__ out, int n_tiles) {
    extern __shared__ unsigned char smem_raw[];
    const u32 raw = smem_u32(smem_raw);
    const u32 pad = ((raw + 127) & ~127u) - raw;
    const float* buf = (const float*)(smem_raw + pad);
    const u32 sbuf = raw + pad, full = sbuf + WS_STAGES * WS_TILE_BYTES, empty = full + 8 * WS_STAGES;
    if (threadIdx.x == 0) {
        for (int s = 0; s < WS_STAGES; ++s) { mbar_init(full + 8 * s, 128); mbar_init(empty + 8 * s, 256); }
        mbar_init_fence();
    }
    __syncthreads();
    if (threadIdx.x < 128) {                         // producer warpgroup
        regs_dealloc<40>();
        const int t = threadIdx.x;
        for (int j = 0; j < n_tiles; ++j) {
            const int s = j % WS_STAGES, u = j / WS_STAGES;
            if (u > 0) mbar_wait(empty + 8 * s, (u - 1) & 1);
            const float* src = in + (long)j * WS_ROWS * WS_COLS;
            for (int i = t; i < WS_TILE_BYTES / 16; i += 128)
                cp_async16(sbuf + s * WS_TILE_BYTES + 16 * i, src + 4 * i, 16);
            cp_async_commit();
            cp_async_wait<0>();
            mbar_arrive(full + 8 * s);                // ordinary loads read it: no proxy fence
        }
    } else {                                         // two consumer warpgroups
        regs_alloc<232>();
        const int ct = threadIdx.x - 128, row = ct / 2, half = ct & 1;   // 2 threads per row
        for (int j = 0; j < n_tiles; ++j) {
            const int s = j % WS_STAGES, u = j / WS_STAGES;
            mbar_wait(full + 8 * s, u & 1);
            const float* r = buf + s * WS_ROWS * WS_COLS + row * WS_COLS + half * 16;
            float acc = 0.f;
#pragma unroll
            for (int i = 0; i < 16; ++i) acc += r[i];
            acc += __shfl_xor_sync(FULL_MASK, acc, 1);
            mbar_arrive(empty + 8 * s);   // every consumer thread releases its own reads (256)
            if (half == 0) out[(long)j * WS_ROWS + row] = acc;
        }
    }
}
#endif

extern "C" __global__ void __launch_bounds__(WS_THREADS, 1)
warpspec_rowsum(const float* in, float* out, int n_tiles) { SM90A_ONLY(rowsum(in, out, n_tiles)); }
