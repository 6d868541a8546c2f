// 11_fused_lm_head: the mma.sync tile that the forward (kernels/11_fused_lm_head.cu) and both
// backward rungs (kernels/11_fused_lm_head_bwd.cu, kernels/11_fused_lm_head_bwd_chunked.cu) share,
// declared once, and declared for the launch as lmh_* globals (fraglab.fused_lm_head.config reads
// them back from the module). The Hopper rung (kernels/11_fused_lm_head_wgmma.cu) has tiles of its
// own (LMW_*).
#pragma once

constexpr int LMH_BM = 128, LMH_BN = 128, LMH_BK = 64, LMH_STAGES = 3;
constexpr int LMH_WARPS_M = 4, LMH_WARPS_N = 2, LMH_THREADS = 32 * LMH_WARPS_M * LMH_WARPS_N;
constexpr int LMH_WTM = LMH_BM / LMH_WARPS_M, LMH_WTN = LMH_BN / LMH_WARPS_N;   // 32 x 64 a warp
constexpr int LMH_MT = LMH_WTM / 16, LMH_NT = LMH_WTN / 8;   // accumulators: 2 x 8 of 16 x 8
constexpr int LMH_CHUNKS = LMH_BK / 8;                       // 16-byte chunks of a row's chunk of d
constexpr int LMH_STAGE_BYTES = (LMH_BM + LMH_BN) * LMH_BK * 2;
constexpr float LMH_LOG2E = 1.4426950408889634f;

extern "C" __device__ const int lmh_bm = LMH_BM, lmh_bn = LMH_BN, lmh_bk = LMH_BK;
extern "C" __device__ const int lmh_stages = LMH_STAGES, lmh_threads = LMH_THREADS;
