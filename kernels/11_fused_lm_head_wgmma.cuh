// 11_fused_lm_head, Hopper (sm_90a): what kernels/11_fused_lm_head_wgmma.cu needs beyond the
// shared sm_90a helpers of hopper.cuh (mbarriers, cp.async, wgmma fence / commit / wait, register
// pins, setmaxnreg; chapter 10 builds them one at a time): the 128-byte swizzle and descriptor of
// a K-major 64-value panel (h and w are both row-major with d contiguous, so both are "K-major"),
// and wgmma m64nNk16 with N = 128 or 256 (64 or 128 f32 accumulators a thread), both operands
// from shared memory, K-major or (for the backward's GEMMs) MN-major, in their own namespace.
#pragma once
#include "hopper.cuh"

namespace lmw {

// Dynamic shared memory of a ring of `stages` stages of `stage_bytes` each (the forward's, the G
// kernel's and the backward's GEMMs'): + 1 KB to align the ring on the swizzle's 1024-byte atoms,
// + a full and an empty mbarrier a stage after it.
__host__ __device__ constexpr int ring_smem(int stages, int stage_bytes) { return 1024 + stages * stage_bytes + 16 * stages; }

#if FRAGLAB_SM90A

// The 128-byte swizzle of a tile of R rows x 64 16-bit values (128 bytes a row, rows 128 bytes
// apart): logical 16-byte chunk c of row r sits at chunk c ^ (r % 8). The hardware XORs with the
// bits of the absolute address, so a tile starts on a 1024-byte boundary.
__device__ __forceinline__ u32 sw128(int r, int c) { return (u32)(r * 128 + ((c ^ (r & 7)) << 4)); }

// The descriptor of a K-major, 128-byte-swizzled operand whose rows start at `saddr` (PTX ISA,
// "Matrix Descriptor Format": start >> 4 in bits 0-13, LBO >> 4 in 16-29 (unused with this
// swizzle: 1), SBO >> 4 in 32-45 (8-row groups 1024 bytes apart), swizzle mode 1 in 62-63).
// The k-step ks (16 values = 32 bytes) of a 64-value panel starts at saddr + 32 ks.
__device__ __forceinline__ u64 desc_k128(u32 saddr) {
    return (u64)((saddr & 0x3FFFF) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}

// wgmma.mma_async m64nNk16, f32 accumulators d, A and B from shared memory (descriptors), both
// K-major (no transpose). `accumulate` = 0 overwrites d (scale-d false). Accumulator layout
// (each warp w of the warpgroup owns rows 16w .. 16w + 15): lane (g = lane / 4, c = lane % 4)
// holds d[4j], d[4j + 1] at (row g, columns 8j + 2c, + 1) and d[4j + 2], d[4j + 3] at row g + 8,
// the same columns: mma.m16n8k16's accumulator once per 8 columns j.
#define LMW_WGMMA(N, TY, NREG, AB, P)                                                           \
    __device__ __forceinline__ void wgmma_n##N##_##TY(float (&d)[NREG], u64 a, u64 b, int accumulate) { \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\n"                            \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #TY "." #TY " "         \
                     WGMMA_DREGS_##NREG ", " AB ", p, 1, 1, 0, 0;\n}\n"                          \
                     : WGMMA_DCONS_##NREG(d)                                                      \
                     : "l"(a), "l"(b), "r"(accumulate));                                        \
    }
LMW_WGMMA(128, f16, 64, "%64, %65", "%66")
LMW_WGMMA(128, bf16, 64, "%64, %65", "%66")
LMW_WGMMA(256, f16, 128, "%128, %129", "%130")
LMW_WGMMA(256, bf16, 128, "%128, %129", "%130")

// m64n256k16 with the transpose bits of A and B as given (PTX "imm-trans-a", "imm-trans-b": 1
// reads that operand MN-major, hopper.cuh's desc_mnmajor layout; 16-bit types only): the
// backward's GEMMs (kernels/11_fused_lm_head_bwd_wgmma.cu), whose B (w or h, d contiguous) is
// MN-major, and whose A is G (K-major, for dh) or G^T (MN-major, for dw).
#define LMW_WGMMA_T(TY, TA, TB)                                                                  \
    __device__ __forceinline__ void wgmma_n256_##TY##_t##TA##TB(float (&d)[128], u64 a, u64 b) {  \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                \
                     "wgmma.mma_async.sync.aligned.m64n256k16.f32." #TY "." #TY " "               \
                     WGMMA_DREGS_128 ", %128, %129, p, 1, 1, " #TA ", " #TB ";\n}\n"               \
                     : WGMMA_DCONS_128(d) : "l"(a), "l"(b), "r"(1));                                \
    }
LMW_WGMMA_T(f16, 0, 1)
LMW_WGMMA_T(bf16, 0, 1)
LMW_WGMMA_T(f16, 1, 1)
LMW_WGMMA_T(bf16, 1, 1)

// Accumulating (scale-d 1) m64n256k16, B MN-major, A MN-major when TRANS_A.
template <bool BF16, bool TRANS_A> __device__ __forceinline__ void wgmma_mn(float (&d)[128], u64 a, u64 b) {
    if constexpr (TRANS_A) { if constexpr (BF16) wgmma_n256_bf16_t11(d, a, b); else wgmma_n256_f16_t11(d, a, b); }
    else { if constexpr (BF16) wgmma_n256_bf16_t01(d, a, b); else wgmma_n256_f16_t01(d, a, b); }
}

// Dispatch on the element type and on N = 2 NREG.
template <bool BF16, int NREG> __device__ __forceinline__ void wgmma(float (&d)[NREG], u64 a, u64 b, int acc) {
    if constexpr (NREG == 64) { if constexpr (BF16) wgmma_n128_bf16(d, a, b, acc); else wgmma_n128_f16(d, a, b, acc); }
    else { static_assert(NREG == 128, "N = 128 or 256");
           if constexpr (BF16) wgmma_n256_bf16(d, a, b, acc); else wgmma_n256_f16(d, a, b, acc); }
}

#endif  // FRAGLAB_SM90A

}  // namespace lmw
