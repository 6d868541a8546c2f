// 10_fa3_pipelining: the chapter's own sm_90a pieces on top of hopper.cuh (which holds the PTX
// helpers it builds one at a time: the 128-byte swizzle, wgmma descriptors and fence / commit /
// wait, mbarriers, cp.async and cp.async.bulk, fence.proxy.async, setmaxnreg, named barriers):
// the swizzled tile loader and the wgmma.mma_async wrappers. Kernels include this header and wrap
// their bodies in SM90A_ONLY(...) (common.cuh): on every other target (sm_75, sm_80, sm_90 without
// the "a", sm_120) the kernels keep their names but trap, and the Python wrappers refuse such
// GPUs first.
#pragma once
#include "sm80.cuh"     // pack2, fast_exp2, FA2MMA_NEG_INF (cuda_fp16.h, cuda_bf16.h)
#include "hopper.cuh"   // the shared sm_90a helpers (swizzle, descriptors, wgmma sync, mbarriers, copies)

#if FRAGLAB_SM90A

#ifndef FA3_FAST_LOAD
#define FA3_FAST_LOAD 1                    // 0: every tile through the general loop below
#endif                                     // (H100: 1.13-1.25x, /work/notes/ch10_tuning.md)
// Copies rows [row0, row0 + R) of a (n x D) matrix into a swizzled tile at `tile` (shared),
// `threads` threads with index t. Rows >= n are zero-filled (their source address is clamped
// to row 0, which stays inside the allocation, and 0 bytes of it are read).
template <int R, int D>
__device__ __forceinline__ void load_tile_sw128(u32 tile, const u16* __restrict__ g, int row0,
                                                int n, int t, int threads) {
    constexpr int CH = D / 8;                 // 16-byte chunks per row
#if FA3_FAST_LOAD
    // A full tile copied by one warp: lane t keeps its chunk column c = t % CH and walks the
    // rows r = t / CH + k * (32 / CH); no bounds test, a few integer ops per 16-byte chunk.
    if (threads == 32 && row0 + R <= n) {
        constexpr int STEP = 32 / CH;
        const int c = t % CH;
        const u32 col = tile + (c >> 3) * R * 128;
        const u16* src = g + (long)(row0 + t / CH) * D + c * 8;
#pragma unroll 8
        for (int r = t / CH; r < R; r += STEP, src += STEP * D)
            cp_async16(col + r * 128 + (((c & 7) ^ (r & 7)) << 4), src, 16);
        return;
    }
#endif
#pragma unroll 4
    for (int i = t; i < R * CH; i += threads) {
        const int r = i / CH, c = i % CH, row = row0 + r;
        const bool ok = row < n;
        cp_async16(tile + sw128_offset(r, c, R), g + (long)(ok ? row : 0) * D + c * 8, ok ? 16 : 0);
    }
}

// ------------------------------------------------------------------------------------------
// wgmma.mma_async m64nNk16, f32 accumulators, f16 or bf16 inputs. SS: A and B from shared
// memory (descriptors); RS: A from registers (4 x 32-bit per thread, the mma.m16n8k16 A
// fragment of the thread's warp's 16 rows). `accumulate` = 0 overwrites d (scale-d false).
// Accumulator layout: warp w of the warpgroup owns rows 16w .. 16w+15; lane (g = lane/4,
// c = lane%4) holds d[4i], d[4i+1] at (row 16w+g, cols 8i+2c, +1) and d[4i+2], d[4i+3] at
// row 16w+g+8, the same columns: the mma.m16n8k16 accumulator, once per 8 columns. The
// accumulator operands (WGMMA_DREGS_*, WGMMA_DCONS_*) are hopper.cuh's.
// One wrapper per (N, type): SS takes both descriptors, RS the four A registers. AB, P and T are
// the PTX operand numbers after the accumulators (of the A/B operands, the scale-d predicate's
// source and the immediate transpose-B flag).
#define FA3_WGMMA_SS(N, TY, NREG, AB, P, T)                                                     \
    template <int TRANS_B> __device__ __forceinline__ void                                     \
    wgmma_ss_n##N##_##TY(float (&d)[NREG], u64 desc_a, u64 desc_b, int accumulate) {           \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\n"                            \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #TY "." #TY " "         \
                     WGMMA_DREGS_##NREG ", " AB ", p, 1, 1, 0, " T ";\n}\n"                      \
                     : WGMMA_DCONS_##NREG(d)                                                      \
                     : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TRANS_B));                \
    }
#define FA3_WGMMA_RS(N, TY, NREG, AB, P, T)                                                     \
    template <int TRANS_B> __device__ __forceinline__ void                                     \
    wgmma_rs_n##N##_##TY(float (&d)[NREG], const u32 (&a)[4], u64 desc_b, int accumulate) {    \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\n"                            \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #TY "." #TY " "         \
                     WGMMA_DREGS_##NREG ", " AB ", p, 1, 1, " T ";\n}\n"                         \
                     : WGMMA_DCONS_##NREG(d)                                                      \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), \
                       "n"(TRANS_B));                                                           \
    }
FA3_WGMMA_SS(64, f16, 32, "%32, %33", "%34", "%35")
FA3_WGMMA_SS(64, bf16, 32, "%32, %33", "%34", "%35")
FA3_WGMMA_SS(128, f16, 64, "%64, %65", "%66", "%67")
FA3_WGMMA_SS(128, bf16, 64, "%64, %65", "%66", "%67")
FA3_WGMMA_RS(64, f16, 32, "{%32, %33, %34, %35}, %36", "%37", "%38")
FA3_WGMMA_RS(64, bf16, 32, "{%32, %33, %34, %35}, %36", "%37", "%38")
FA3_WGMMA_RS(128, f16, 64, "{%64, %65, %66, %67}, %68", "%69", "%70")
FA3_WGMMA_RS(128, bf16, 64, "{%64, %65, %66, %67}, %68", "%69", "%70")
FA3_WGMMA_RS(256, f16, 128, "{%128, %129, %130, %131}, %132", "%133", "%134")
FA3_WGMMA_RS(256, bf16, 128, "{%128, %129, %130, %131}, %132", "%133", "%134")

// Dispatch on the element type (BF16) and N (64 or 128; 256 for P V only: O at d = 256).
template <bool BF16, int TRANS_B, int NREG> __device__ __forceinline__ void
wgmma_ss(float (&d)[NREG], u64 a, u64 b, int acc) {
    if constexpr (NREG == 32) { if constexpr (BF16) wgmma_ss_n64_bf16<TRANS_B>(d, a, b, acc);
                                else wgmma_ss_n64_f16<TRANS_B>(d, a, b, acc); }
    else { static_assert(NREG == 64, "N = 64 or 128");
           if constexpr (BF16) wgmma_ss_n128_bf16<TRANS_B>(d, a, b, acc);
           else wgmma_ss_n128_f16<TRANS_B>(d, a, b, acc); }
}
template <bool BF16, int TRANS_B, int NREG> __device__ __forceinline__ void
wgmma_rs(float (&d)[NREG], const u32 (&a)[4], u64 b, int acc) {
    if constexpr (NREG == 32) { if constexpr (BF16) wgmma_rs_n64_bf16<TRANS_B>(d, a, b, acc);
                                else wgmma_rs_n64_f16<TRANS_B>(d, a, b, acc); }
    else if constexpr (NREG == 64) { if constexpr (BF16) wgmma_rs_n128_bf16<TRANS_B>(d, a, b, acc);
                                     else wgmma_rs_n128_f16<TRANS_B>(d, a, b, acc); }
    else { static_assert(NREG == 128, "N = 64, 128 or 256");
           if constexpr (BF16) wgmma_rs_n256_bf16<TRANS_B>(d, a, b, acc);
           else wgmma_rs_n256_f16<TRANS_B>(d, a, b, acc); }
}

// Two floats -> one register of two 16-bit values, and ex2.approx: sm80.cuh's.
using sm80::pack2;
using sm80::fast_exp2;

#endif  // FRAGLAB_SM90A
