// 10_fa3_pipelining, variant "nooverlap": the consumer waits for every wgmma right after issuing
// it, so the softmax never runs beside a matrix multiply of its own warpgroup (the other
// consumer warpgroup and the producer still run beside it). The baseline of the ladder.
//
//   fa3_nooverlap_<f16|bf16>_d<64|128>(q, k, v, o, n, scale_log2, causal)
// (arguments, launch: kernels/10_fa3_pipelining_attention.cuh). Key tiles: 128 keys.
#include "10_fa3_pipelining_attention.cuh"

#if FRAGLAB_SM90A
struct NoOverlap {
    template <class C> __device__ static void run(C& c) {
        for (int j = 0; j < c.tiles; ++j) {
            typename C::S s; typename C::P p; float corr[2];
            c.wait_k(j);
            c.issue_qk(s, j);
            wgmma_wait<0>(); pin(s);            // S_j complete: K_j is free again
            c.release_k(j);
            c.softmax(s, p, j, corr);
            c.rescale(corr);
            c.wait_v(j);
            c.issue_pv(p, j);
            wgmma_wait<0>(); pin(c.o);          // O complete: V_j is free again
            c.release_v(j);
        }
    }
};
#endif

FA3_KERNELS(nooverlap, NoOverlap, 128, 128)
