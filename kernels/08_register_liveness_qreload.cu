// 08_register_liveness, variant qreload: Q's A fragment reloaded from shared memory with ldmatrix right before each use.
// The kernel body and the kernel names are in 08_register_liveness.cuh; this file only picks the
// Q mode and instantiates it for d = 64, 128, 256 (f16, bf16; two-loop and one-loop causal).
//
//   fa08_qreload_<f16|bf16>_d<64|128|256>_<two|one>(q, k, v, o, n, scale_log2, causal)
#include "08_register_liveness.cuh"

FA08_ALL_KERNELS(qreload, QRELOAD)
