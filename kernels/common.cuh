// Small helpers shared by the course's kernels. Kept tiny on purpose: each kernel file should
// read on its own.
#pragma once

// The lane of this thread within its warp (0..31). threadIdx.x % 32 is the same thing when
// blocks are one-dimensional, which every kernel of the course uses.
__device__ __forceinline__ int lane_id() { return threadIdx.x & 31; }

// The mask naming all 32 lanes: what *_sync intrinsics take when the whole warp takes part.
#define FULL_MASK 0xffffffffu

// The one sm_80 guard. bf16, tf32 and f64 tensor cores (and mma.sync with bf16, cp.async) need
// sm_80 or newer. Every kernel file compiles for every target of fraglab.ARCHES, so code that
// needs sm_80 sits under `#if FRAGLAB_SM80` (declarations, helpers), and a kernel whose body needs
// it wraps the body in SM80_ONLY(...): on older targets the kernel keeps its name, so every build
// lists the same kernels, but its body traps. The Python wrappers refuse such a GPU before
// launching (fraglab.device.supports).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define FRAGLAB_SM80 1
#define SM80_ONLY(...) __VA_ARGS__
#else
#define FRAGLAB_SM80 0
#define SM80_ONLY(...) __trap()
#endif

// The one sm_90a guard, the same way: Hopper's architecture-specific target sm_90a defines
// __CUDA_ARCH_FEAT_SM90_ALL; plain sm_90 does not, and rejects Hopper's warpgroup MMA and
// register reallocation. Code that needs sm_90a sits under `#if FRAGLAB_SM90A`, and a kernel
// whose body needs it wraps the body in SM90A_ONLY(...), which traps on every other target.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FRAGLAB_SM90A 1
#define SM90A_ONLY(...) __VA_ARGS__
#else
#define FRAGLAB_SM90A 0
#define SM90A_ONLY(...) __trap()
#endif
