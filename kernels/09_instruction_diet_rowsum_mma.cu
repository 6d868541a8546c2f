// Topic 09_instruction_diet, rung 8: rowsum_mma.
//
//   diet_rowsum_mma_<f16|bf16>_d<64|128>(q, k, v, o, n, scale_log2, causal)
//
// Changed from rung 7: at d = 128 the row sums l took one FADD per score (64 a tile per thread:
// 32 rows a warp, 64 keys), on the pipe of the FFMAs that feed the exponentials. P x ones gives
// them on the tensor cores instead: one more HMMA per 16 keys and m-tile (8 a tile beside 256),
// B a constant register of two 1.0s, f32 accumulation. Every column of that accumulator is a
// whole row sum (the HMMA adds across the quad), so the epilogue's shuffles go too; the sums
// are those of P as rounded to f16/bf16, the very P the numerator multiplies by V. With l's
// rescale down to 4 FMULs of the accumulator, the factors 2^(m_old - m_new) (MUFU.EX2) and
// that rescale go behind skip_rescale's vote too. At d = 64 (half the HMMAs a tile to hide the
// 8 behind) the first H100 screen measured it a loss: d = 64 compiles as rung 7.
#define DIET_RUNG 8
#include "09_instruction_diet.cuh"

DIET_KERNELS(rowsum_mma)
