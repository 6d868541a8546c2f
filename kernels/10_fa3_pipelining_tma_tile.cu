// 10_fa3_pipelining, building block: one TMA copy. One elected thread initialises an mbarrier,
// announces the box's bytes (arrive.expect_tx), and asks the Tensor Memory Accelerator for one
// box of a tensor at the given coordinates (cp.async.bulk.tensor, kernels/hopper.cuh's TMA
// section); every thread waits on the mbarrier, then the block copies the raw shared-memory
// bytes out, so a test compares them with the NumPy model fraglab.tma.box_image (swizzle,
// zeros outside the tensor) byte for byte.
//
//   tma_tile_2d(map, tensor, image, c0, c1, c2, nbytes)     c2 unused
//   tma_tile_3d(map, tensor, image, c0, c1, c2, nbytes)
//
// map: the 128-byte tensor map in global memory (fraglab.tma.tensor_map(...).device).
// tensor: the array the map describes; the code never reads it (the map holds its address),
// but the PTX interpreter finds the tensor's global address among the launch's arguments.
// c0 is the innermost coordinate (elements; any may be negative or past the end). image: nbytes
// bytes = the box's size, which is what the mbarrier counts whatever the coordinates. Swizzled,
// the box's rows are exactly the swizzle span (fraglab.tma refuses other maps): narrower rows
// made the H100 write past nbytes of shared memory.
// Launch (fraglab.fa3_pipelining.tma_tile): grid 1, block 128, dynamic shared memory
// 1024 + nbytes (the box starts on a 1024-byte boundary: the 128-byte swizzle's XOR reads
// address bits [7:9]).
#include "hopper.cuh"

// The launch numbers (fraglab.launch.constants reads them): the block, and the shared memory a
// box takes beside its bytes (the 1024-byte alignment).
constexpr int TMA_TILE_THREADS = 128;
extern "C" __device__ const int tma_tile_threads = TMA_TILE_THREADS;
extern "C" __device__ const int tma_tile_smem_extra = 1024;

#if FRAGLAB_SM90A
template <int RANK>
__device__ void tma_tile(const void* map, unsigned char* image, int c0, int c1, int c2,
                         u32 nbytes) {
    extern __shared__ unsigned char smem_raw[];
    __shared__ u64 bar;
    const u32 raw = smem_u32(smem_raw);
    const u32 pad = ((raw + 1023) & ~1023u) - raw;
    const u32 box = raw + pad;
    const u32 b = smem_u32(&bar);
    if (threadIdx.x == 0) {
        tma_prefetch(map);
        mbar_init(b, 1);
        mbar_init_fence();
        tma_fence_acquire(map);
        mbar_arrive_expect_tx(b, nbytes);          // the whole box, out-of-bound zeros included
        if (RANK == 2) tma_load_2d(box, map, c0, c1, b);
        else tma_load_3d(box, map, c0, c1, c2, b);
    }
    __syncthreads();                                // the mbarrier exists before anyone waits
    mbar_wait(b, 0);
    const uint4* s = (const uint4*)(smem_raw + pad);
    for (u32 i = threadIdx.x; i < nbytes / 16; i += blockDim.x) ((uint4*)image)[i] = s[i];
}
#endif

extern "C" __global__ void __launch_bounds__(TMA_TILE_THREADS)
tma_tile_2d(const void* map, const void* tensor, unsigned char* image, int c0, int c1, int c2,
            unsigned int nbytes) {
    SM90A_ONLY(tma_tile<2>(map, image, c0, c1, c2, nbytes));
}
extern "C" __global__ void __launch_bounds__(TMA_TILE_THREADS)
tma_tile_3d(const void* map, const void* tensor, unsigned char* image, int c0, int c1, int c2,
            unsigned int nbytes) {
    SM90A_ONLY(tma_tile<3>(map, image, c0, c1, c2, nbytes));
}
