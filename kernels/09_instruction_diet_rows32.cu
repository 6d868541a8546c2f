// Topic 09_instruction_diet, rung 4: rows32 (more query rows per warp).
//
//   diet_rows32_<f16|bf16>_d<64|128>(q, k, v, o, n, scale_log2, causal)
//
// Changed from rung 3: each warp owns 32 query rows (two m-tiles), a block 128. Every K and V
// fragment read from shared memory now feeds 4 HMMAs instead of 2, and the per-tile costs (copies,
// barriers, loop control) are shared by twice the HMMAs. At d = 128, Q's fragments are read from
// shared memory for every tile (they no longer fit in registers beside O and S).
#define DIET_RUNG 4
#include "09_instruction_diet.cuh"

DIET_KERNELS(rows32)
