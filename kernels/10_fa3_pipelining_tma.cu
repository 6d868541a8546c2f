// 10_fa3_pipelining, variant "tma": ping-pong's consumers, unchanged, and a producer that no
// longer copies. Up to ping-pong, 128 producer threads move every tile 16 bytes at a time with
// cp.async, wait for their copies, fence them into the async proxy and arrive on the stage's
// full barrier (32 arrivals a tile). Here one thread per operand asks the Tensor Memory
// Accelerator for a whole tile, once per 64-column panel (the 128-byte swizzle spans 64 16-bit
// values): cp.async.bulk.tensor reads the box through a tensor map (shape, strides, box,
// swizzle: fraglab.tma builds it on the host), writes it to shared memory already swizzled for
// wgmma, and reports its bytes to the stage's full barrier as completed transactions. The
// thread's only other work is the barrier's bookkeeping: it announces the bytes it expects
// (mbarrier.arrive.expect_tx, the one arrival the barrier waits for), then issues the copies;
// the phase completes when the arrival has come and every announced byte has landed.
//
// Tensor maps (one per operand, the (B*H, N, d) array as a 3-d tensor, box 1 x rows x 64):
// rows past N lie outside the tensor, land as zeros and still count as transaction bytes, so a
// ragged last tile announces the full box like any other. No fence after the copies: the TMA
// writes through the async proxy, which wgmma reads.
//
// Roles in the producer warpgroup: warp 0's lane 0 loads Q, then the K tiles; warp 1's lane 0
// the V tiles (K never waits for V, as in the cp.async producer); every other producer thread
// has nothing to do and returns.
//
//   fa3_tma_<f16|bf16>_d<64|128|256>(q, k, v, o, n, scale_log2, causal, qmap, kmap, vmap)
#define FA3_MAINLOOP_ONLY
#include "10_fa3_pipelining_pingpong.cu"

#if FRAGLAB_SM90A
struct TmaProducer {
    enum { Q_ARRIVALS = 1, KV_ARRIVALS = 1 };       // the expect_tx arrival of the one thread
    template <int D, int BC> __device__ __forceinline__ static void run(const Fa3Args& a, const Fa3Tile& t) {
        typedef Fa3Config<D, BC> C;
        const int warp = threadIdx.x / 32;
        if (warp > 1 || threadIdx.x % 32 != 0) return;
        const bool is_k = warp == 0;
        const void* map = is_k ? a.kmap : a.vmap;
        tma_prefetch(map);
        if (is_k) {                                  // Q: FA3_BR rows, D / 64 panels of R x 128 B
            mbar_arrive_expect_tx(t.fullQ, C::Q_BYTES);
            for (int p = 0; p < D / 64; ++p)
                tma_load_3d(t.base + p * FA3_BR * 128, a.qmap, 64 * p, t.q0, t.bh, t.fullQ);
        }
        const u32 full = is_k ? t.fullK : t.fullV, empty = is_k ? t.emptyK : t.emptyV;
        const u32 ring = t.base + (is_k ? C::K_OFF : C::V_OFF);
        for (int j = 0; j < t.tiles; ++j) {          // BEGIN PRODUCER (lab 10, exercise 3)
            const int s = j % C::STAGES, u = j / C::STAGES;
            if (u > 0) mbar_wait(empty + 8 * s, (u - 1) & 1);     // the stage's last readers
            mbar_arrive_expect_tx(full + 8 * s, C::KV_BYTES);
            for (int p = 0; p < D / 64; ++p)
                tma_load_3d(ring + s * C::KV_BYTES + p * BC * 128, map, 64 * p, j * BC, t.bh,
                            full + 8 * s);            // END PRODUCER
        }
    }
};
#endif

// Key tiles: the defaults here; the tuning sweep (fraglab.fa3_pipelining.tuning) builds others
// with -DFA3_TMA_BC64=64 etc., and the ring depth with -DFA3_STAGES_DEF.
#ifndef FA3_TMA_BC64
#define FA3_TMA_BC64 128
#endif
#ifndef FA3_TMA_BC128
#define FA3_TMA_BC128 128
#endif
#undef FA3_PRODUCER
#define FA3_PRODUCER TmaProducer
FA3_KERNELS(tma, PingPong, FA3_TMA_BC64, FA3_TMA_BC128)
#if FA3_CONSUMERS == 2                     // three consumers' 160 registers cannot hold O at d = 256
FA3_KERNELS_D256(tma, PingPong, 64)
#endif
