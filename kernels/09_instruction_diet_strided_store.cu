// Topic 09_instruction_diet, rung 2: strided_store (the seed's kernel 11).
//
//   diet_strided_store_<f16|bf16>_d<64|128>(q, k, v, o, n, scale_log2, causal)
//
// Changed from rung 1: the epilogue's register -> shared stores of O use the same trick, chunk t
// of a row at (chunk 0's offset) XOR (t << 4). Only the epilogue changes: the main loop's counts
// stay, the kernel's integer count drops.
#define DIET_RUNG 2
#include "09_instruction_diet.cuh"

DIET_KERNELS(strided_store)
