// Topic 09_instruction_diet, rung 7: skip_rescale.
//
//   diet_skip_rescale_<f16|bf16>_d<64|128>(q, k, v, o, n, scale_log2, causal)
//
// Changed from rung 6: the largest class of the main loop is now float, and a quarter of it is
// the O rescale (O *= 2^(m_old - m_new): D/4 FMULs per row pair and tile). When no row of the
// warp found a larger maximum in this tile, every factor is 1: one vote (__any_sync) skips the
// multiplications. With scores in random order a row's maximum moves on about H_n - 1 of n
// tiles (chapter 05), so most tiles skip it; the FMULs stay in the listing behind a branch.
// Only at d = 128: at d = 64 (half the FMULs) the first H100 run found the vote a loss.
// The same idea in causal masked tiles: a warp whose 32 rows all precede the tile's first key
// leaves the tile (with two buffers no barrier follows its compute): its P would be all zeros.
#define DIET_RUNG 7
#include "09_instruction_diet.cuh"

DIET_KERNELS(skip_rescale)
