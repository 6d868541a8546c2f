// 10_fa3_pipelining, variant "twostage": FlashAttention-3's Algorithm 2. Inside one consumer
// warpgroup, the softmax of key tile j runs while the wgmma O += P_{j-1} V_{j-1} is in flight:
//
//   S = Q K_0^T; wait; P_cur = softmax(S)                      (Consumer::first)
//   for j = 1 .. T-1:                                           (TwoStage::step)
//       issue S = Q K_j^T                 (commit, no wait)
//       issue O += P_cur V_{j-1}          (commit, no wait)
//       wait for S (wait_group 1: the older group is done)     -> release K_j
//       P_next = softmax(S)               <- overlaps the P V multiply
//       wait for P V (wait_group 0)                            -> release V_{j-1}
//       rescale O; P_cur = P_next
//   O += P_cur V_{T-1}; wait                                    (Consumer::finish)
//
// The price: P_cur (read by the multiply in flight) and S / P_next are live at once, and O may
// only be rescaled once the multiply that writes it has finished. "P_cur = P_next" is no copy:
// the loop is unrolled twice and the two P buffers swap roles (a copy into registers that a
// wgmma of the running pipeline stage reads makes ptxas serialize the wgmma, warning C7513).
//
//   fa3_twostage_<f16|bf16>_d<64|128>(q, k, v, o, n, scale_log2, causal)
// (arguments, launch: kernels/10_fa3_pipelining_attention.cuh). Key tiles: 128 keys.
#include "10_fa3_pipelining_attention.cuh"

#if FRAGLAB_SM90A
struct TwoStage {
    template <class C> __device__ __forceinline__ static void
    step(C& c, int j, typename C::S& s, typename C::P& p_cur, typename C::P& p_next) {
        float corr[2];
// BEGIN MAINLOOP
        c.wait_k(j);
        c.wait_v(j - 1);
        c.issue_qk(s, j);
        c.issue_pv(p_cur, j - 1);
        wgmma_wait<1>(); pin(s);                // S_j done; P V may still run
        c.release_k(j);
        c.softmax(s, p_next, j, corr);
        wgmma_wait<0>(); pin(c.o);              // P V done
        c.release_v(j - 1);
        c.rescale(corr);
// END MAINLOOP
    }
    template <class C> __device__ static void run(C& c) {
        typename C::S s; typename C::P pa, pb;
        c.first(s, pa);
        int j = 1;
        for (; j + 1 < c.tiles; j += 2) { step(c, j, s, pa, pb); step(c, j + 1, s, pb, pa); }
        if (j < c.tiles) { step(c, j, s, pa, pb); c.finish(pb); }
        else c.finish(pa);
    }
};
#endif

FA3_KERNELS(twostage, TwoStage, 128, 128)
