// 10_fa3_pipelining, building block 3: the copy path of the attention kernels. cp.async moves
// 16 bytes per thread from global memory into the 128-byte-swizzled panels that wgmma reads,
// zero-filling rows past the end of the sequence (src-size 0), and each thread fences the async
// proxy once its copies have landed (cp.async.wait_group) before it signals anyone.
//
//   swizzle_tile_d<64|128>(src, image, n_valid)
//
// src: 128 rows x D f16/bf16 values (u16), row-major; rows >= n_valid are not read (zeros land
// there). image: the tile's shared memory byte for byte (128 * D * 2 bytes as u16), so a test
// compares it with the swizzle formula (fraglab.fa3_pipelining.layouts.sw128_image). Launch:
// grid 1, block 128, dynamic shared memory 1024 + 128 * D * 2.
//
// Why cp.async and not the TMA (cp.async.bulk.tensor with a cuTensorMapEncodeTiled map): the
// tensor map is built on the host through the driver API, which CuPy does not expose and the
// course's PTX interpreter cannot see into; cp.async is one instruction per 16 bytes whose
// addresses are plain arithmetic in the kernel, swizzle and ragged-row masking included.
#include "10_fa3_pipelining.cuh"

// The launch numbers (fraglab.launch.constants reads them): the tile's rows, the block, and the
// dynamic shared memory of each D (the tile and 1 KB to align it).
constexpr int SWIZZLE_ROWS = 128, SWIZZLE_THREADS = 128;
extern "C" __device__ const int swizzle_tile_rows = SWIZZLE_ROWS;
extern "C" __device__ const int swizzle_tile_threads = SWIZZLE_THREADS;
extern "C" __device__ const int swizzle_tile_smem_d64 = 1024 + SWIZZLE_ROWS * 64 * 2;
extern "C" __device__ const int swizzle_tile_smem_d128 = 1024 + SWIZZLE_ROWS * 128 * 2;

#if FRAGLAB_SM90A
// load_tile_sw128 (the header) is the copy the attention producers use.
template <int D>
__device__ void swizzle_tile(const u16* __restrict__ src, u16* __restrict__ image, int n_valid) {
    extern __shared__ unsigned char smem_raw[];
    const u32 raw = smem_u32(smem_raw);
    const u32 pad = ((raw + 1023) & ~1023u) - raw;
    load_tile_sw128<SWIZZLE_ROWS, D>(raw + pad, src, 0, n_valid, threadIdx.x, blockDim.x);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    const uint4* s = (const uint4*)(smem_raw + pad);
    for (int i = threadIdx.x; i < SWIZZLE_ROWS * D / 8; i += blockDim.x) ((uint4*)image)[i] = s[i];
}
#endif

extern "C" __global__ void __launch_bounds__(SWIZZLE_THREADS)
swizzle_tile_d64(const u16* src, u16* image, int n_valid) { SM90A_ONLY(swizzle_tile<64>(src, image, n_valid)); }
extern "C" __global__ void __launch_bounds__(SWIZZLE_THREADS)
swizzle_tile_d128(const u16* src, u16* image, int n_valid) { SM90A_ONLY(swizzle_tile<128>(src, image, n_valid)); }
