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
#define LMW_DREGS_64 "{" \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63" \
    "}"
#define LMW_DCONS_64(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define LMW_DREGS_128 "{" \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127" \
    "}"
#define LMW_DCONS_128(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
    "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
    "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
    "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
    "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
    "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
    "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
    "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

#define LMW_WGMMA(N, TY, NREG, AB, P)                                                           \
    __device__ __forceinline__ void wgmma_n##N##_##TY(float (&d)[NREG], u64 a, u64 b, int accumulate) { \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\n"                            \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #TY "." #TY " "         \
                     LMW_DREGS_##NREG ", " AB ", p, 1, 1, 0, 0;\n}\n"                          \
                     : LMW_DCONS_##NREG(d)                                                      \
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
                     LMW_DREGS_128 ", %128, %129, p, 1, 1, " #TA ", " #TB ";\n}\n"               \
                     : LMW_DCONS_128(d) : "l"(a), "l"(b), "r"(1));                                \
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
