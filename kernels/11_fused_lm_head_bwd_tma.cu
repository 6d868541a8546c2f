// 11_fused_lm_head, backward rung "tma": the wgmma rung's two GEMMs (kernels/
// 11_fused_lm_head_bwd_wgmma.cu) with their producer on the Tensor Memory Accelerator, as the
// forward's tma rung (kernels/11_fused_lm_head_tma.cu) has it: one thread announces a k step's
// bytes on the stage's full barrier and asks for its boxes, then moves on to the next free stage.
// The shared-memory layout, the consumers and the results are the wgmma GEMMs', bit for bit.
//
// lmhead_tma_dw_<f16|bf16>(G, ldg, h, flags, ftiles, rows, n, d, v0, gscale, dw, gmap, hmap)
// lmhead_tma_dh_<f16|bf16>(G, ldg, w, flags, ftiles, kw, n, d, v, v0, gscale, dh32, dh, mode,
//                          gmap, wmap)
//            lmhead_wgmma_dw_* / lmhead_wgmma_dh_*'s arguments, grid, block and shared memory,
//            and two tensor maps (fraglab.fused_lm_head.wgmma.gemm_maps): G as (n, ldg) in boxes
//            of 64 x 64 (dw) or 128 x 64 (dh), and h or w as (rows, d) in boxes of 64 x 64, all
//            with the 128-byte swizzle.
#define LMG_GEMM_ONLY
#include "11_fused_lm_head_bwd_wgmma.cu"

#define LMT_GEMM_KERNELS(T, BF16)                                                                   \
    extern "C" __global__ void __launch_bounds__(LMG_THREADS, 1)                                    \
    lmhead_tma_dw_##T(const u16* G, int ldg, const u16* h, const unsigned char* flags, int ftiles,  \
                      int rows, int n, int d, int v0, const float* gscale, u16* dw,                 \
                      const void* gmap, const void* hmap)                                           \
    { SM90A_ONLY((lmg_gemm<BF16, true, true>(G, ldg, h, 0, n, flags, ftiles, blockIdx.x * 128, n, n, \
                                             blockIdx.y * LMG_BN, d, *gscale, rows, nullptr,        \
                                             nullptr, dw + (size_t)v0 * d, gmap, hmap))); }         \
    extern "C" __global__ void __launch_bounds__(LMG_THREADS, 1)                                    \
    lmhead_tma_dh_##T(const u16* G, int ldg, const u16* w, const unsigned char* flags, int ftiles,  \
                      int kw, int n, int d, int v, int v0, const float* gscale, float* dh32,        \
                      u16* dh, int mode, const void* gmap, const void* wmap)                        \
    { SM90A_ONLY((lmg_gemm<BF16, false, true>(G, ldg, w, v0, v, flags, ftiles, blockIdx.x * LMG_BM, \
                                              n, kw, blockIdx.y * LMG_BN, d, *gscale, n,            \
                                              (mode & 1) ? dh32 : nullptr, dh32,                    \
                                              (mode & 2) ? dh : nullptr, gmap, wmap))); }

LMT_GEMM_KERNELS(f16, false)
LMT_GEMM_KERNELS(bf16, true)
