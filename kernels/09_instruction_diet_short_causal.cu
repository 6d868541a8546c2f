// Topic 09_instruction_diet, rung 9: short_causal.
//
//   diet_short_causal_<f16|bf16>_d<64|128>(q, k, v, o, n, scale_log2, causal)
//   diet_short_causal_m16_<f16|bf16>_d<64|128>(...)     the same, 16 query rows a warp
//
// Changed from rung 8: a causal block of 128 query rows at N = 1024 has 1 to 16 key tiles of
// work, and B * H = 32 heads make 256 blocks: one wave on 132 SMs of 2 blocks, whose time is
// that of the longest blocks, each alone on an SM for its last tiles with 4 warps to hide
// every latency. The first H100 run measured the 16-rows-a-warp rungs about 14% faster there,
// the 32-row ones faster everywhere else. So the rung compiles both shapes from the same
// templates, and the wrapper (fraglab.instruction_diet.kernels.uses_m16) launches the 16-row
// kernel, on 64-row blocks, for causal problems of few 128-row blocks per SM.
#define DIET_RUNG 9
#include "09_instruction_diet.cuh"

DIET_KERNELS(short_causal)
