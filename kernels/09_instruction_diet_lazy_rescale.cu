// Topic 09_instruction_diet, rung 10: lazy_rescale.
//
//   diet_lazy_rescale_<f16|bf16>_d<64|128>(q, k, v, o, n, scale_log2, causal)
//   diet_lazy_rescale_m16_<f16|bf16>_d<64|128>(...)     the same, 16 query rows a warp
//
// Changed from rung 9: skip_rescale's vote asks whether any of a m-tile's 16 rows found a larger
// maximum in this tile, and with scores in random order one of 16 rows does on about half the
// tiles at N = 4096 (nearly all at N = 1024). Here a row's running max moves only when the tile's
// max beats it by more than 8 (log2 units): until then P = 2^(s - m) stays below 2^8 = 256, far
// inside f16, bf16 and f32, and O and l keep their old reference point, so there is nothing to
// rescale. The result is the same softmax (O / l cancels the reference point). The vote then
// fires on a row's first keys and almost never after: the O rescale (D/4 FMULs a row pair), its
// MUFU.EX2 factors and l's rescale leave the dynamic loop. At d = 64 too: there the rescale ran on
// every tile until now.
#define DIET_RUNG 10
#include "09_instruction_diet.cuh"

DIET_KERNELS(lazy_rescale)
