// 10_fa3_pipelining, variant "threestage": both multiplies overlap the softmax (the 3-stage
// pipeline of the FlashAttention-3 paper, appendix B.3). While the softmax of tile j runs, the
// wgmma S_{j+1} = Q K_{j+1}^T and O += P_{j-1} V_{j-1} are in flight:
//
//   S_0 = Q K_0^T; wait; P_cur = softmax(S_0); issue S_1 = Q K_1^T
//   for j = 1 .. T-1:
//       issue O += P_cur V_{j-1}; issue S_{j+1} = Q K_{j+1}^T (if j+1 < T)
//       wait for S_j (the oldest group)                        -> release K_j
//       P_next = softmax(S_j)             <- overlaps both multiplies
//       wait for P V                                           -> release V_{j-1}
//       rescale O; P_cur = P_next
//   O += P_cur V_{T-1}; wait
//
// Two S tiles (f32) and two P tiles live at once: another BR x BC x 4 bytes of registers per
// CTA, so the key tile is 64 for d = 128 (128 for d = 64). The loop is unrolled twice (the
// buffers swap roles, no register copies) and its last step, which issues no S_{j+1}, is peeled.
//
//   fa3_threestage_<f16|bf16>_d<64|128>(q, k, v, o, n, scale_log2, causal)
#include "10_fa3_pipelining_attention.cuh"

#if FRAGLAB_SM90A
struct ThreeStage {
    // j + 1 < T: three groups in flight (S_j, P V, S_{j+1}) while S_j is awaited
    template <class C> __device__ __forceinline__ static void
    mid(C& c, int j, typename C::S& s_j, typename C::S& s_next, typename C::P& p_cur,
        typename C::P& p_next) {
        float corr[2];
        c.wait_v(j - 1);
        c.wait_k(j + 1);
        c.issue_pv(p_cur, j - 1);
        c.issue_qk(s_next, j + 1);
        // S_j (issued in the step before) done once 2 groups are left, P V once 1 (S_{j+1} may run)
        softmax_beside_pv<2, 1>(c, s_j, p_next, j, corr);
    }
    // the last tile: nothing left to prefetch
    template <class C> __device__ __forceinline__ static void
    last(C& c, int j, typename C::S& s_j, typename C::P& p_cur, typename C::P& p_next) {
        float corr[2];
        c.wait_v(j - 1);
        c.issue_pv(p_cur, j - 1);
        softmax_beside_pv<1, 0>(c, s_j, p_next, j, corr);
    }
    template <class C> __device__ static void run(C& c) {
        typename C::S sa, sb; typename C::P pa, pb;
        c.first(sa, pa);
        if (c.tiles > 1) { c.wait_k(1); c.issue_qk(sb, 1); }
        int j = 1;                              // here S_j is in sb (in flight), P_{j-1} in pa
        for (; j + 2 < c.tiles; j += 2) {
            mid(c, j, sb, sa, pa, pb);
            mid(c, j + 1, sa, sb, pb, pa);
        }
        if (j + 1 < c.tiles) { mid(c, j, sb, sa, pa, pb); last(c, j + 1, sa, pb, pa); c.finish(pa); }
        else if (j < c.tiles) { last(c, j, sb, pa, pb); c.finish(pb); }
        else c.finish(pa);
    }
};
#endif

FA3_KERNELS(threestage, ThreeStage, 128, 64)
