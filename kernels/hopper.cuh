// hopper.cuh: the Hopper (sm_90a) PTX building blocks the course's wgmma kernels share
// (chapter 10's FlashAttention-3 kernels and chapter 11's LM head): shared addresses, the 128-byte
// swizzle, wgmma descriptors and fence / commit / wait, register pins, the async-proxy fence,
// mbarriers, cp.async and cp.async.bulk, setmaxnreg and named barriers. Chapter 10 builds them one
// at a time (book/10_fa3_pipelining.ipynb). Kernels wrap their bodies in SM90A_ONLY(...)
// (common.cuh): on every other target these helpers do not exist and the kernels trap.
#pragma once
#include "common.cuh"

typedef unsigned int u32;               // NVRTC has no <cstdint>
typedef unsigned long long u64;
typedef unsigned short u16;             // f16 / bf16 values travel as raw 16-bit patterns

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
// wgmma's f32 accumulator operands, N / 2 registers a thread: m64n64 (32), m64n128 (64) and
// m64n256 (128), as PTX text ("{%0, ..., %31}": the operands after them are numbered from N / 2)
// and as the asm constraints of an array d. Chapter 10's and chapter 11's wgmma wrappers.
#define WGMMA_DREGS_32 "{" \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define WGMMA_DREGS_64 "{" \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define WGMMA_DCONS_32(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define WGMMA_DCONS_64(d) WGMMA_DCONS_32(d), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

#define WGMMA_DREGS_128 "{" \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127" \
    "}"
#define WGMMA_DCONS_128(d) WGMMA_DCONS_64(d), \
    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
    "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
    "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
    "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
    "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
    "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
    "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
    "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

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

// ------------------------------------------------------------------------------------------
// TMA: cp.async.bulk.tensor. One thread asks the Tensor Memory Accelerator for a whole box of a
// 2- to 5-dimensional tensor. The tensor's shape, strides, element type, box and swizzle are in
// a 128-byte tensor map built on the host (fraglab.tma.tensor_map: cuTensorMapEncodeTiled on a
// GPU, the course's own encoding on the interpreter) and kept in GLOBAL memory (64-byte
// aligned), so `map` is an ordinary device pointer. Coordinates are signed element indices,
// c0 the innermost (contiguous) one; the box lands in shared memory at `dst` (128-byte aligned;
// 1024 with the 128-byte swizzle, whose XOR reads address bits [7:9]), rows of box[-1] elements
// back to back, swizzled as the map says. Elements outside the tensor (a coordinate < 0 or past
// its end) land as zeros and still count: the mbarrier `bar` receives the FULL box's bytes as
// completed transactions whatever the coordinates, so the producer's mbar_arrive_expect_tx
// always announces box bytes (a ragged last tile included).
__device__ __forceinline__ void tma_load_2d(u32 dst, const void* map, int c0, int c1, u32 bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];\n"
                 :: "r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(bar) : "memory");
}
__device__ __forceinline__ void tma_load_3d(u32 dst, const void* map, int c0, int c1, int c2, u32 bar) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];\n"
                 :: "r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(bar) : "memory");
}
// Brings the map into the TMA unit's cache ahead of the first copy (a hint).
__device__ __forceinline__ void tma_prefetch(const void* map) {
    asm volatile("prefetch.tensormap [%0];\n" :: "l"(map) : "memory");
}
// A map in global memory is read through the tensor-map proxy: this fence makes the map's bytes
// as written through ordinary (generic-proxy) writes, the host's copy included, visible to the
// copies that follow. The issuing thread calls it once per map before the map's first copy.
__device__ __forceinline__ void tma_fence_acquire(const void* map) {
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" :: "l"(map) : "memory");
}
// Both, for a thread about to copy through two maps (the producers of chapter 11's tma rung).
__device__ __forceinline__ void tma_ready(const void* a, const void* b) {
    tma_prefetch(a);
    tma_prefetch(b);
    tma_fence_acquire(a);
    tma_fence_acquire(b);
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

#endif  // FRAGLAB_SM90A
