// 11_fused_lm_head, rung "tma": the wgmma rung (kernels/11_fused_lm_head_wgmma.cu) with one change,
// its producer. There, 128 producer threads copy each stage 16 bytes at a time with cp.async, and
// a producer warp waits for its own copies before it announces the stage, so each warp has one
// stage in flight and the consumers' tensor cores wait for the next stage about half the time
// (ncu, Llama 3 8B's head: the tensor pipe busy about 52 % of the kernel). Here one thread asks
// the Tensor Memory Accelerator for a stage's two boxes and moves on to the next free stage at
// once; the stage's full barrier completes when the boxes' bytes have landed (mbarrier
// complete_tx). The consumers, the epilogues and the shared-memory layout are the wgmma rung's.
//
// Tensor maps (fraglab.tma.tensor_map, built by the wrapper): h as an (n, d) tensor with boxes of
// 128 x 64 values, w as a (v, d) tensor with boxes of LMW_BN x 64, both with the 128-byte swizzle
// (the layout lmw::sw128 writes); rows past n or v and columns past d land as zeros.
//
// lmhead_tma_fwd_<f16|bf16>[_softcap](h, w, targets, part, n, v, d, tiles_per_split, softcap,
//                                     bmax, nb, hmap, wmap)
//            lmhead_wgmma_fwd_*'s arguments, grid, block and shared memory, and the two maps.
// lmhead_tma_g_<f16|bf16>[_softcap](h, w, targets, lse, dl, G, ldg, flags, skipped, n, v, d, v0,
//                                   nt, ignore_index, softcap, filter_eps, bmax, nb, hmap, wmap)
//            lmhead_wgmma_g_*'s, and the two maps (the backward's rung "tma").
#define LMW_MAINLOOP_ONLY
#include "11_fused_lm_head_wgmma.cu"

LMW_KERNELS(tma, true)
