// Topic 09_instruction_diet, rung 3: pointer_loads.
//
//   diet_pointer_loads_<f16|bf16>_d<64|128>(q, k, v, o, n, scale_log2, causal)
//
// Changed from rung 2: a whole K or V tile is copied without per-row bounds checks; each
// thread's chunks are one base address plus compile-time strides (copy_whole), so every cp.async
// (LDGSTS) needs no ISETP, SEL, IMAD.WIDE or LEA of its own. Only the ragged last tile keeps
// the checked copy. Expect the main loop's integer count to fall by about 6 per LDGSTS.
#define DIET_RUNG 3
#include "09_instruction_diet.cuh"

DIET_KERNELS(pointer_loads)
