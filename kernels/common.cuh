// Small helpers shared by the course's kernels. Kept tiny on purpose: each kernel file should
// read on its own.
#pragma once

// The lane of this thread within its warp (0..31). threadIdx.x % 32 is the same thing when
// blocks are one-dimensional, which every kernel of the course uses.
__device__ __forceinline__ int lane_id() { return threadIdx.x & 31; }

// The mask naming all 32 lanes: what *_sync intrinsics take when the whole warp takes part.
#define FULL_MASK 0xffffffffu

// Code that needs sm_80 or newer (bf16, tf32 and f64 tensor cores). On older targets the kernel
// keeps its name, so every build lists the same kernels, but its body traps; the Python wrappers
// refuse such a GPU before launching (fraglab.device.supports).
#if __CUDA_ARCH__ >= 800
#define SM80_ONLY(...) __VA_ARGS__
#else
#define SM80_ONLY(...) __trap()
#endif
