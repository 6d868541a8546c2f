// Topic 07_register_reuse, rung 10 of the FP32 SGEMM ladder: split_k (tiles per shape, split-K).
//
//   sgemm_split_k(A, B, C, M, N, K, k_split): slice z = blockIdx.z of C = A @ B, row-major
//   float32: the product over k in [z * k_split, min(K, (z + 1) * k_split)) into the M x N
//   slice C + z * M * N (with one split, C itself).
//   sgemm_split_k_reduce(P, C, count4, splits, stride): C = P[0] + ... + P[splits - 1].
//   Launch: (BM/WM)*(BN/WN)*32 threads, grid (ceil(N/BN), ceil(M/BM), splits), dynamic shared
//   memory as rung 9; then, with more than one split, the reduction. GUARD = 1 (the wrapper
//   sets it when M, N or K is not whole tiles) takes any M and N, K that are multiples of 4.
//   Python: fraglab.register_reuse.sgemm(a, b) (the last rung is the default); the tiles and
//   the split for the shape are fraglab.register_reuse.tiles_for(M, N, K), from the H100 sweep's
//   table (python -m fraglab.register_reuse sweep-shapes).
//
// Changed from rung 9 (autotuned): the tiles are chosen per shape, and K may be split. At 1024^3
// rung 9's 128x256 tiles make 32 blocks for 132 SMs: most of the GPU idles. Cutting K into
// `splits` slices multiplies the blocks; each slice's partial product goes to its own buffer
// and a second kernel adds them in a fixed order (no float atomics: the same bits every run).
#define SGEMM_RUNG_WARP_TILE   // its default tiles (07_register_reuse.cuh)
#include "07_register_reuse.cuh"
#ifndef GUARD
#define GUARD 0                // 1: guarded edge tiles (a shape that is not whole tiles)
#endif
// Tuning switches (all 0 by default: rung 10 is then rung 9's loop; the sweep turns them on per
// shape where they pay; sgemm_switched_tile in 07_register_reuse.cuh says what each does).
#ifndef REGDB
#define REGDB 0                // 1: register double buffering of the fragments, across steps too
#endif
#ifndef SWIZZLE
#define SWIZZLE 0              // 1: the A tile unpadded, XOR-swizzled (no bank conflicts at BK 16)
#endif
#ifndef ORDER
#define ORDER 0                // the outer product's FFMA order: 0 rows, 1 row snake, 2 columns, 3
#endif

SGEMM_LAUNCH((BM / WM) * (BN / WN) * 32, BM, BN, (ALayout<BM, BK, SWIZZLE != 0>::SMEM<BN, 2>))

extern "C" __global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, MINB)
sgemm_split_k(SGEMM_ARGS, int k_split) {
    const int k_begin = blockIdx.z * k_split;
    float* c = C + static_cast<long long>(blockIdx.z) * M * N;
    if constexpr (REGDB || SWIZZLE || ORDER)
        sgemm_switched_tile<BM, BN, BK, WM, WN, LM, GROUP, GUARD != 0, REGDB != 0, SWIZZLE != 0,
                            ORDER>(A, B, c, M, N, K, k_begin, min(K, k_begin + k_split));
    else
        sgemm_double_buffer_tile<BM, BN, BK, WM, WN, LM, GROUP, GUARD != 0>(
            A, B, c, M, N, K, k_begin, min(K, k_begin + k_split));
}

extern "C" __global__ void sgemm_split_k_reduce(const float* __restrict__ P, float* __restrict__ C,
                                                int count4, int splits, long long stride) {
    sum_splits(P, C, count4, splits, stride);
}
