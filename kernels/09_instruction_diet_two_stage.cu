// Topic 09_instruction_diet, rung 5: two_stage (two K/V buffers).
//
//   diet_two_stage_<f16|bf16>_d<64|128>(q, k, v, o, n, scale_log2, causal)
//
// Changed from rung 4: K and V have two buffers each. At the start of tile j one wait and one
// barrier; then K_{j+1} and V_{j+1} are copied into the other buffer while all of tile j runs
// (rung 4: V_j during S, K_{j+1} during P V, two barriers per tile). One BAR and one DEPBAR
// fewer per tile; shared memory grows by one K and one V tile.
#define DIET_RUNG 5
#include "09_instruction_diet.cuh"

DIET_KERNELS(two_stage)
