// Topic 09_instruction_diet, rung 6: wide_keys (64-key tiles at d = 128).
//
//   diet_wide_keys_<f16|bf16>_d<64|128>(q, k, v, o, n, scale_log2, causal)
//
// Changed from rung 5: at d = 128 the tiles hold 64 keys again (rungs 4-5 took 32 there, so
// that O and S fit in registers). Twice the HMMAs per tile for the same per-tile work (barrier,
// max and sum shuffles, O rescale per 64 keys instead of 32), Q's fragments read once per 64
// keys. ptxas spills a few registers, outside the main loop (the chapter shows the counts).
// At d = 64 nothing changes: its tiles had 64 keys all along.
#define DIET_RUNG 6
#include "09_instruction_diet.cuh"

DIET_KERNELS(wide_keys)
