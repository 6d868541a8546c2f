// Topic 09_instruction_diet, rung 1: strided_swizzle (the seed's kernel 8).
//
//   diet_strided_swizzle_<f16|bf16>_d<64|128>(q, k, v, o, n, scale_log2, causal)
//
// Changed from rung 0 (fa2): the ldmatrix address of K (and V) fragment x is one per-lane offset
// XOR (x << 5) instead of swz(row, 2x + lo) for every x (09_instruction_diet.cuh, frag_off).
// Expect fewer integer instructions (LOP3, IMAD) in the main loop and fewer address registers.
#define DIET_RUNG 1
#include "09_instruction_diet.cuh"

DIET_KERNELS(strided_swizzle)
