// 10_fa3_pipelining, building block 1: one warpgroup multiplies with wgmma.mma_async.
//
//   wgmma_gemm_<kmajor|mnmajor>_n<64|128>(a, b, c, k)
//
// C (64 x N, f32) = A (64 x K) . B, f16 inputs, K a multiple of 16 up to 128. A is row-major
// 64 x K (K-major). B is given either as N x K row-major ("kmajor": the layout of K in
// S = Q K^T) or as K x N row-major ("mnmajor": the layout of V in O = P V; the multiply reads
// it transposed, imm-trans-b = 1). Launch: grid 1, block 128 (one warpgroup), dynamic shared
// memory wgmma_gemm_smem (below).
//
// The four steps every wgmma kernel takes: (1) operands into shared memory in the 128-byte
// swizzled layout (kernels/10_fa3_pipelining.cuh: sw128_offset), here with ordinary 16-byte
// stores; (2) fence.proxy.async by every writing thread, then a barrier, because wgmma reads
// shared memory through the async proxy; (3) wgmma.fence, K/16 wgmma.mma_async (each reading a
// 64x16 slice of A and a 16xN slice of B through descriptors), commit_group; (4) wait_group 0,
// and the accumulators are the result, laid out as mma.m16n8k16's, one 16-row slab per warp.
// sm_90a only: on other targets the kernels trap (the wrapper refuses first).
#include "10_fa3_pipelining.cuh"

// The launch numbers (fraglab.launch.constants reads them): one warpgroup, and the dynamic
// shared memory: 1 KB to align, A (64 rows) and B (up to 128 rows), 128 16-bit values a row.
extern "C" __device__ const int wgmma_gemm_threads = 128;
extern "C" __device__ const int wgmma_gemm_smem = 1024 + 64 * 128 * 2 + 128 * 128 * 2;

#if FRAGLAB_SM90A
template <int N, bool MN>
__device__ void wgmma_gemm(const u16* __restrict__ a, const u16* __restrict__ b,
                           float* __restrict__ c, int K) {
    extern __shared__ unsigned char smem_raw[];
    // swizzle atoms need 1024-byte alignment of the *shared* address: round the base up
    const u32 raw = smem_u32(smem_raw);
    const u32 pad = ((raw + 1023) & ~1023u) - raw;
    unsigned char* base = smem_raw + pad;
    const u32 sA = raw + pad, sB = sA + 64 * 128 * 2;     // A: 64 rows, up to 2 panels
    const int tid = threadIdx.x, kc = K / 8;               // 16-byte chunks per row of A
    for (int i = tid; i < 64 * kc; i += 128) {
        int r = i / kc, ch = i % kc;
        *(uint4*)(base + sw128_offset(r, ch, 64)) = *(const uint4*)(a + r * K + ch * 8);
    }
    // B: N rows of K (kmajor) or K rows of N (mnmajor), the same swizzled panels
    const int rows = MN ? K : N, rc = MN ? N / 8 : kc;
    for (int i = tid; i < rows * rc; i += 128) {
        int r = i / rc, ch = i % rc;
        *(uint4*)(base + (sB - sA) + sw128_offset(r, ch, rows)) =
            *(const uint4*)(b + r * (MN ? N : K) + ch * 8);
    }
    fence_proxy_async();      // these generic-proxy stores are read next by the async proxy
    __syncthreads();
    float d[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; ++i) d[i] = 0.f;
    wgmma_fence();
    for (int ks = 0; ks < K / 16; ++ks) {
        u64 da = desc_kmajor(sA, 64, ks);
        u64 db = MN ? desc_mnmajor(sB, K, ks) : desc_kmajor(sB, N, ks);
        wgmma_ss<false, MN ? 1 : 0>(d, da, db, ks > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    pin(d);
    const int w = tid / 32, g = (tid & 31) / 4, q = tid & 3;
#pragma unroll
    for (int i = 0; i < N / 8; ++i) {
        int col = 8 * i + 2 * q, r0 = 16 * w + g;
        *(float2*)(c + r0 * N + col) = make_float2(d[4 * i], d[4 * i + 1]);
        *(float2*)(c + (r0 + 8) * N + col) = make_float2(d[4 * i + 2], d[4 * i + 3]);
    }
}
#endif

#define WGMMA_GEMM(NAME, N, MN)                                                              \
    extern "C" __global__ void __launch_bounds__(128)                                        \
    NAME(const u16* a, const u16* b, float* c, int k) { SM90A_ONLY(wgmma_gemm<N, MN>(a, b, c, k)); }
WGMMA_GEMM(wgmma_gemm_kmajor_n64, 64, false)
WGMMA_GEMM(wgmma_gemm_kmajor_n128, 128, false)
WGMMA_GEMM(wgmma_gemm_mnmajor_n64, 64, true)
WGMMA_GEMM(wgmma_gemm_mnmajor_n128, 128, true)
