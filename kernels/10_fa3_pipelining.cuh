// 10_fa3_pipelining: Hopper (sm_90a) building blocks shared by the chapter's kernels.
//
// Everything here is PTX the sm_90a target accepts: wgmma.mma_async (warpgroup matrix multiply
// from shared-memory descriptors), its fence / commit_group / wait_group, mbarriers, cp.async
// (16 bytes, zero-filled past the last row) and cp.async.bulk (1-D, completing on an mbarrier),
// fence.proxy.async, setmaxnreg and named barriers. Kernels include this header and wrap their
// bodies in SM90A_ONLY(...) (common.cuh): on every other target (sm_75, sm_80, sm_90 without
// the "a", sm_120) the kernels keep their names but trap, and the Python wrappers refuse such
// GPUs first.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include "common.cuh"

typedef unsigned int u32;               // NVRTC has no <cstdint>
typedef unsigned long long u64;
typedef unsigned short u16;             // f16 / bf16 values travel as raw 16-bit patterns

#define FA3_NEG_INF (-__int_as_float(0x7f800000))

#if FRAGLAB_SM90A

__device__ __forceinline__ u32 smem_u32(const void* p) { return (u32)__cvta_generic_to_shared(p); }

// ------------------------------------------------------------------------------------------
// The 128-byte swizzle.
//
// A tile of 16-bit values is stored as "column panels" of 64 values (128 bytes) per row:
// panel p holds columns 64p .. 64p+63 of every row, rows 128 bytes apart, so a panel of R rows
// is R * 128 bytes and panels follow each other. Inside a row the eight 16-byte chunks are
// permuted: logical chunk c of row r sits at physical chunk c ^ (r % 8). Eight rows (1024
// bytes) make one swizzle atom; the hardware applies the same XOR to address bits [4:6] with
// bits [7:9] of the *absolute* shared-memory address, so every panel must start on a 1024-byte
// boundary (then the descriptor's "base offset" field stays 0).
// Byte offset of (row r, 16-byte chunk c of the full row) in a tile of R rows:
__device__ __forceinline__ u32 sw128_offset(int r, int c, int R) {
    return (u32)((c >> 3) * R * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// ------------------------------------------------------------------------------------------
// wgmma matrix descriptors (PTX ISA, "Matrix Descriptor Format"), 64 bits:
//   bits  0-13  start address >> 4          bits 16-29  leading dimension byte offset >> 4
//   bits 32-45  stride dimension byte offset >> 4
//   bits 49-51  base offset (0: atoms 1024-aligned)   bits 62-63  swizzle: 1 = 128-byte
// K-major operand (Q as A, K as B of S = Q K^T; rows are M or N, the 16 values of one k-step
// lie in one row): 8-row groups are SBO = 1024 bytes apart; the LBO is unused with the 128-byte
// swizzle (set to 1 by convention). A k-step of 16 values = 32 bytes is taken by moving the
// start address 32 bytes along the row (the hardware swizzles the address it computes), and
// the next 64-value panel by R * 128 bytes.
// MN-major operand (V as B of O += P V: keys are K, d is N and contiguous; "transpose B" = 1):
// 64 N-values per 128-byte row, consecutive keys 128 bytes apart, 8-key groups SBO = 1024
// apart, and the next panel of 64 N-values LBO = R * 128 bytes away. A k-step of 16 keys
// moves the start address by 16 * 128 = 2048 bytes.
__device__ __forceinline__ u64 make_desc(u32 saddr, u32 lbo_bytes, u32 sbo_bytes) {
    u64 d = 0;
    d |= (u64)((saddr & 0x3FFFF) >> 4);
    d |= (u64)((lbo_bytes >> 4) & 0x3FFF) << 16;
    d |= (u64)((sbo_bytes >> 4) & 0x3FFF) << 32;
    d |= (u64)1 << 62;                       // 128-byte swizzle
    return d;
}
__device__ __forceinline__ u64 desc_kmajor(u32 tile, int R, int kstep) {
    return make_desc(tile + (kstep >> 2) * R * 128 + (kstep & 3) * 32, 16, 1024);
}
__device__ __forceinline__ u64 desc_mnmajor(u32 tile, int R, int kstep) {
    return make_desc(tile + kstep * 16 * 128, R * 128, 1024);
}

// ------------------------------------------------------------------------------------------
// wgmma: fence, commit, wait. wgmma.fence orders earlier register writes (accumulators, the A
// fragments) before the asynchronous multiply reads them; commit_group closes a group of issued
// wgmma; wait_group N returns when at most N groups of this warpgroup are still in flight.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory");
}
// Pins registers in place around the asynchronous multiply: the compiler cannot see that a
// wgmma in flight still writes (or reads) them, so it must neither move arithmetic on them across
// a commit or a wait, nor reuse them early.
template <int R> __device__ __forceinline__ void pin(float (&x)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(x[i]) :: "memory");
}
template <int R> __device__ __forceinline__ void pin(u32 (&x)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+r"(x[i]) :: "memory");
}

// ------------------------------------------------------------------------------------------
// Ordering between the generic proxy (ordinary loads and stores, cp.async) and the async proxy
// (wgmma operand reads, bulk copies): a thread that wrote shared memory which wgmma reads next
// fences before it signals the reader.
__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ------------------------------------------------------------------------------------------
// mbarriers: a 64-bit word in shared memory with an expected arrival count and a phase bit.
// A phase completes when `count` arrivals (and every expected transaction byte) have come; a
// waiter asks "has the phase with parity P completed?" (try_wait.parity), so a ring of stages
// waits with parity (use / stages) & 1.
__device__ __forceinline__ void mbar_init(u32 bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n"
                 :: "r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n"
                 :: "r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    asm volatile("{\n.reg .pred done;\n"
                 "WAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WAIT_%=;\n}\n" :: "r"(bar), "r"(parity) : "memory");
}

// Plain shared-memory accesses by address (the kernels keep shared addresses as u32).
__device__ __forceinline__ void st_shared_u32(u32 addr, u32 v) {
    asm volatile("st.shared.u32 [%0], %1;\n" :: "r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ uint4 ld_shared_v4(u32 addr) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr) : "memory");
    return v;
}

// ------------------------------------------------------------------------------------------
// Copies. cp.async (sm_80): 16 bytes global -> shared per thread, `src_bytes` of them read and
// the rest zero-filled (0 past the last row). cp.async.bulk (sm_90): one thread moves a
// contiguous run of bytes (a multiple of 16) and the mbarrier counts them as transactions.
__device__ __forceinline__ void cp_async16(u32 dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}
__device__ __forceinline__ void bulk_copy_g2s(u32 dst, const void* src, u32 bytes, u32 bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

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
// Warp specialization: setmaxnreg moves registers between warpgroups. It needs a register cap
// at kernel entry (__launch_bounds__(threads, 1)) and each role in one branch of an if/else.
template <int R> __device__ __forceinline__ void regs_dealloc() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(R));
}
template <int R> __device__ __forceinline__ void regs_alloc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(R));
}
// Named barriers (ids 1..15; 0 is __syncthreads): `threads` arrive in all, some only arriving
// (bar.arrive, no wait), others waiting (bar.sync).
__device__ __forceinline__ void named_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" :: "r"(id), "r"(threads) : "memory");
}

// ------------------------------------------------------------------------------------------
// wgmma.mma_async m64nNk16, f32 accumulators, f16 or bf16 inputs. SS: A and B from shared
// memory (descriptors); RS: A from registers (4 x 32-bit per thread, the mma.m16n8k16 A
// fragment of the thread's warp's 16 rows). `accumulate` = 0 overwrites d (scale-d false).
// Accumulator layout: warp w of the warpgroup owns rows 16w .. 16w+15; lane (g = lane/4,
// c = lane%4) holds d[4i], d[4i+1] at (row 16w+g, cols 8i+2c, +1) and d[4i+2], d[4i+3] at
// row 16w+g+8, the same columns: the mma.m16n8k16 accumulator, once per 8 columns.
// The accumulator operands of m64n64 (32 registers) and m64n128 (64 registers), as PTX text
// and as asm constraints.
#define FA3_DREGS_32 "{" \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define FA3_DREGS_64 "{" \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define FA3_DCONS_32(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define FA3_DCONS_64(d) FA3_DCONS_32(d), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// One wrapper per (N, type): SS takes both descriptors, RS the four A registers. AB, P and T are
// the PTX operand numbers after the accumulators (of the A/B operands, the scale-d predicate's
// source and the immediate transpose-B flag).
#define FA3_WGMMA_SS(N, TY, NREG, AB, P, T)                                                     \
    template <int TRANS_B> __device__ __forceinline__ void                                     \
    wgmma_ss_n##N##_##TY(float (&d)[NREG], u64 desc_a, u64 desc_b, int accumulate) {           \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\n"                            \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #TY "." #TY " "         \
                     FA3_DREGS_##NREG ", " AB ", p, 1, 1, 0, " T ";\n}\n"                      \
                     : FA3_DCONS_##NREG(d)                                                      \
                     : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TRANS_B));                \
    }
#define FA3_WGMMA_RS(N, TY, NREG, AB, P, T)                                                     \
    template <int TRANS_B> __device__ __forceinline__ void                                     \
    wgmma_rs_n##N##_##TY(float (&d)[NREG], const u32 (&a)[4], u64 desc_b, int accumulate) {    \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\n"                            \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #TY "." #TY " "         \
                     FA3_DREGS_##NREG ", " AB ", p, 1, 1, " T ";\n}\n"                         \
                     : FA3_DCONS_##NREG(d)                                                      \
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

// Dispatch on the element type (BF16) and N (64 or 128).
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
    else { static_assert(NREG == 64, "N = 64 or 128");
           if constexpr (BF16) wgmma_rs_n128_bf16<TRANS_B>(d, a, b, acc);
           else wgmma_rs_n128_f16<TRANS_B>(d, a, b, acc); }
}

// Two floats -> one register of two 16-bit values (the lower column in the low half).
template <bool BF16> __device__ __forceinline__ u32 pack2(float lo, float hi) {
    if constexpr (BF16) { __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi); return *(u32*)&h; }
    else { __half2 h = __floats2half2_rn(lo, hi); return *(u32*)&h; }
}
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

#endif  // FRAGLAB_SM90A
