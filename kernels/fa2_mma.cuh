// fa2_mma.cuh: what the FA-2 kernels of chapters 05 and 08 share, in one place (chapter 09 uses its
// PTX helpers and swizzle too): the instructions they are built from (cp.async, ldmatrix,
// mma.sync m16n8k16 with f32 accumulators, ex2.approx), the swizzled shared-memory layout, and
// three per-warp steps that act on fragments only: S += Q K^T for one 16-column block of Q, the
// causal / ragged mask, and the row sums of the
// epilogue. Fragment layouts, the swizzle and the reuse of S's accumulators as P's A fragment are
// explained at the top of kernels/05_flash_attention_fa2.cu.
//
// Everything is __forceinline__ and works on the caller's arrays. The online softmax, O += P V and
// the O store stay written out in each kernel: moved into helpers, they compiled to different
// SASS (instruction order) for chapter 08's qglobal kernels, whose H100 timings are in the book.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include "common.cuh"

namespace fa2mma {

typedef unsigned int u32;              // NVRTC has no <cstdint>
typedef unsigned short u16;            // f16 and bf16 values travel as raw 16-bit patterns
#define FA2MMA_NEG_INF (-__int_as_float(0x7f800000))   // NVRTC has no <math.h> and so no INFINITY

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
#define FA2MMA_MMA(T) "mma.sync.aligned.m16n8k16.row.col.f32." T "." T ".f32 " \
                      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
#define FA2MMA_ARGS : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) \
                    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1)
template <bool BF16>
__device__ __forceinline__ void mma16816(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1)
{
    if constexpr (BF16) asm volatile(FA2MMA_MMA("bf16") FA2MMA_ARGS);
    else asm volatile(FA2MMA_MMA("f16") FA2MMA_ARGS);
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

// ---- the steps of one key tile of BN keys, for one warp's 16 query rows ----------------------
// s[BN / 8][4]: S (then P) for 16 rows x BN keys, BN / 8 accumulators of 16 x 8.

// S += Q K^T for the 16 columns 16 kk .. 16 kk + 15 of Q (its A fragment `a`). B = K^T, and a B
// fragment holds (d = 2c, 2c+1; key g), two consecutive values of a row of K: plain ldmatrix on
// rows of K. x4: matrix 0 = keys 0-7 / cols 0-7, 1 = keys 0-7 / cols 8-15, 2 and 3 = keys 8-15.
template <int D, int BN, bool BF16>
__device__ __forceinline__ void qk_block(float (&s)[BN / 8][4], const u32 (&a)[4], u32 sK, int kk, int lane)
{
#pragma unroll
    for (int np = 0; np < BN / 16; ++np) {
        u32 b[4];
        ldsm4<false>(b, sK + swz<D>(16 * np + (lane & 7) + ((lane >> 4) << 3), 2 * kk + ((lane >> 3) & 1)));
        mma16816<BF16>(s[2 * np], a, b[0], b[1]);
        mma16816<BF16>(s[2 * np + 1], a, b[2], b[3]);
    }
}

// Keys past n, and (causal) keys after the query row, get -inf. Key tile at k0; row0 = query
// index of this lane's row g (registers 2, 3 of an accumulator are row g + 8).
template <int BN>
__device__ __forceinline__ void mask_tile(float (&s)[BN / 8][4], int k0, int n, bool causal, int row0, int c4)
{
#pragma unroll
    for (int t = 0; t < BN / 8; ++t)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int key = k0 + 8 * t + 2 * c4 + (i & 1), row = row0 + 8 * (i >> 1);
            if (key >= n || (causal && key > row)) s[t][i] = FA2MMA_NEG_INF;
        }
}

// ---- the epilogue ----------------------------------------------------------------------------
// Finish the row sums across the quad; inv = 1 / l, or 0 for a row that saw no key (not NaN).
__device__ __forceinline__ void row_inverses(float (&l)[2], float (&inv)[2])
{
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        l[r] += __shfl_xor_sync(FULL_MASK, l[r], 1);
        l[r] += __shfl_xor_sync(FULL_MASK, l[r], 2);
        inv[r] = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    }
}

#endif  // FRAGLAB_SM80
}  // namespace fa2mma
