// sm80.cuh: the Ampere (sm_80) PTX building blocks, one helper each, that kernels on mma.sync share:
// cp.async (16-byte copies, commit, wait), ldmatrix x4 (plain and .trans), mma.sync m16n8k16 with
// f32 accumulators (f16 or bf16), two floats packed to one register of 16-bit values, ex2.approx,
// and the XOR swizzle of 16-byte chunks that ldmatrix reads without bank conflicts. Chapters 05,
// 08 and 09 use them through fa2_mma.cuh (which builds FA-2's steps on them), chapter 11 directly.
// Fragment layouts and the swizzle are explained at the top of kernels/05_flash_attention_fa2.cu.
// The PTX helpers need sm_80 (FRAGLAB_SM80, common.cuh); on older targets they do not exist.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include "common.cuh"

namespace sm80 {

typedef unsigned int u32;              // NVRTC has no <cstdint>
typedef unsigned short u16;            // f16 and bf16 values travel as raw 16-bit patterns
// -inf (NVRTC has no <math.h> and so no INFINITY), for every chapter that includes this header
// (chapter 10's FA-3 too); the name is chapter 05's, where it began.
#define FA2MMA_NEG_INF (-__int_as_float(0x7f800000))

// Byte offset of 16-byte chunk `c` (8 values) of row `r` in a tile with D values a row: chunk
// positions XOR-swizzled by r % 8, so the 8 rows of an ldmatrix 8x8 matrix hit 8 bank groups.
template <int D> __device__ __forceinline__ u32 swz(int r, int c)
{
    return (u32)(r * D * 2 + ((c ^ (r & 7)) << 4));
}

#if FRAGLAB_SM80   // cp.async, ldmatrix and mma.sync with f32 accumulators (common.cuh)

// ---- the PTX instructions, one helper each ---------------------------------------------------
__device__ __forceinline__ void cp_async16(u32 dst, const void* src, bool valid)
{
    // src-size 0 writes 16 zero bytes and reads nothing (rows past N).
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
// cp.async.wait_group N: all but the N most recent groups of this thread have landed.
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Four 8x8 matrices of 16-bit values; lanes 8i .. 8i+7 give the row addresses of matrix i, and
// register i of every lane receives (row g, cols 2c, 2c+1) of matrix i (TRANS: of its transpose).
template <bool TRANS> __device__ __forceinline__ void ldsm4(u32 (&r)[4], u32 addr)
{
    if constexpr (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// d += a b: one 16x8x16 product, f16 or bf16 operands, f32 accumulators.
#define SM80_MMA(T) "mma.sync.aligned.m16n8k16.row.col.f32." T "." T ".f32 " \
                      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
#define SM80_MMA_ARGS : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) \
                    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1)
template <bool BF16>
__device__ __forceinline__ void mma16816(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1)
{
    if constexpr (BF16) asm volatile(SM80_MMA("bf16") SM80_MMA_ARGS);
    else asm volatile(SM80_MMA("f16") SM80_MMA_ARGS);
}

// Two floats -> one register of two 16-bit values, `lo` in the low half.
template <bool BF16> __device__ __forceinline__ u32 pack2(float lo, float hi)
{
    if constexpr (BF16) {
        __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<u32*>(&h);
    } else {
        __half2 h = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<u32*>(&h);
    }
}

// 2^x with the single MUFU.EX2 instruction (flush-to-zero; 2^-inf = +0).
__device__ __forceinline__ float fast_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

#endif  // FRAGLAB_SM80
}  // namespace sm80
