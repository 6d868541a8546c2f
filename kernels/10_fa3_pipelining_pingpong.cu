// 10_fa3_pipelining, variant "pingpong": Algorithm 2 in each consumer warpgroup (the twostage
// step), and the two consumer warpgroups take turns at the tensor cores (FlashAttention-3,
// section 3.1): a warpgroup issues its wgmma only once the previous one has passed it the turn,
// so while one runs its softmax the other's multiplies have the tensor cores to themselves. A
// turn is a named barrier of 256 threads (turn_wait: bar.sync on its own barrier; turn_pass:
// bar.arrive on the next one's, round the FA3_NC consumers). Warpgroup 0 starts. Each warpgroup
// waits T+1 times (the first multiply, T-1 steps, the last multiply), so the last warpgroup
// passes once before it starts and skips its very last pass: every bar.sync meets exactly one
// bar.arrive.
//
//   fa3_pingpong_<f16|bf16>_d<64|128>(q, k, v, o, n, scale_log2, causal)
#include "10_fa3_pipelining_attention.cuh"

#if FRAGLAB_SM90A
struct PingPong {
    template <class C> __device__ __forceinline__ static void
    step(C& c, int j, typename C::S& s, typename C::P& p_cur, typename C::P& p_next) {
        c.wait_k(j);
        c.wait_v(j - 1);
        c.turn_wait();
        c.issue_qk(s, j);
        c.issue_pv(p_cur, j - 1);
        c.turn_pass();
        float corr[2];
        softmax_beside_pv<1, 0>(c, s, p_next, j, corr);   // as twostage's step from here
    }
    template <class C> __device__ static void last(C& c, const typename C::P& p) {
        c.wait_v(c.tiles - 1);
        c.turn_wait();
        c.issue_pv(p, c.tiles - 1);
        if (FA3_NC == 2 ? c.wg == 0 : c.wg != FA3_NC - 1)
            c.turn_pass();                      // the last warpgroup's last pass would find no taker
        wgmma_wait<0>(); pin(c.o);
        c.release_v(c.tiles - 1);
    }
    template <class C> __device__ static void run(C& c) {
        typename C::S s; typename C::P pa, pb; float corr[2];
        if (c.wg == FA3_NC - 1) c.turn_pass();  // warpgroup 0 goes first
        c.wait_k(0);
        c.turn_wait();
        c.issue_qk(s, 0);
        c.turn_pass();
        wgmma_wait<0>(); pin(s);
        c.release_k(0);
        c.softmax(s, pa, 0, corr);
        int j = 1;
        for (; j + 1 < c.tiles; j += 2) { step(c, j, s, pa, pb); step(c, j + 1, s, pb, pa); }
        if (j < c.tiles) { step(c, j, s, pa, pb); last(c, pb); }
        else last(c, pa);
    }
};
#endif

#ifndef FA3_MAINLOOP_ONLY                   // the tma rung includes this file for PingPong only
FA3_KERNELS(pingpong, PingPong, 128, 128)
#endif
