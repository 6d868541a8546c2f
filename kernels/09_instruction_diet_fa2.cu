// Topic 09_instruction_diet, rung 0: fa2, chapter 05's FA-2 kernel (4 warps) through the
// chapter's header with every diet switch off. Its SASS is the starting point of every count.
//
//   diet_fa2_<f16|bf16>_d<64|128>(q, k, v, o, n, scale_log2, causal)
//   Python: fraglab.instruction_diet.attention(q, k, v, causal=..., variant="fa2").
#include "09_instruction_diet.cuh"

DIET_KERNELS(fa2)
