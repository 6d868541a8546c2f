// 08_register_liveness, variant qreg: Q's A fragments loaded once and held in registers for the whole key sweep (chapter 05's kernel).
// The kernel body and the kernel names are in 08_register_liveness.cuh; this file only picks the
// Q mode and instantiates it for d = 64, 128, 256 (f16, bf16; two-loop and one-loop causal).
//
//   fa08_qreg_<f16|bf16>_d<64|128|256>_<two|one>(q, k, v, o, n, scale_log2, causal)
#include "08_register_liveness.cuh"

FA08_ALL_KERNELS(qreg, QREG)
