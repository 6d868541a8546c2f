"""The Hopper rung of the fused LM head's forward, ``kernels/11_fused_lm_head_wgmma.cu``: what the
wrapper (:func:`fraglab.fused_lm_head.fused_linear_cross_entropy`, ``variant="wgmma"``) needs to
launch it, and whether it can run here.

Its kernels take the arguments of the mma rung's and write the same partials, merged by the same
``lmhead_merge``; a block is 3 warpgroups (a cp.async producer, two wgmma consumers of 64 tokens
each) and 128 tokens x :data:`BN` words a tile, through a ring of :data:`STAGES` stages of
(128 + BN) rows x 64 values of d.
"""
from __future__ import annotations

import re

from .. import device, launch, toolchain

FILE = "11_fused_lm_head_wgmma"
#: The "tma" rung: the same mainloop with a TMA producer (one thread, two tensor maps a launch).
TMA_FILE = "11_fused_lm_head_tma"
#: The Hopper rungs (forward and the backward's G kernel): rung -> kernel file.
RUNG_FILES = {"wgmma": FILE, "tma": TMA_FILE}
#: wgmma.mma_async and setmaxnreg exist only on Hopper's architecture-specific target.
ARCH = "sm_90a"
#: Tokens a block, words a tile, values of d a stage, stages, threads (the .cu file's LMW_*
#: constants; a test keeps them equal).
BM, BN, BK, STAGES, THREADS = 128, 256, 64, 4, 384
#: 1 KB to align the ring on the 128-byte swizzle's 1024-byte atoms, the ring, two mbarriers a stage.
SMEM_BYTES = 1024 + STAGES * (BM + BN) * BK * 2 + 16 * STAGES
#: The backward's G kernel (``lmhead_wgmma_g_*``): the same, and its consumers' votes (a word per
#: 128-word block of a tile).
G_SMEM_BYTES = SMEM_BYTES + 4 * (BN // 128)
#: The backward's two GEMMs on wgmma (``kernels/11_fused_lm_head_bwd_wgmma.cu``, its LMG_*
#: constants): a block's tile of C (rows, columns of d), k a step, stages, threads, shared memory.
GEMM_FILE = "11_fused_lm_head_bwd_wgmma"
#: The same GEMMs with their producer on the TMA (the backward's "tma" rung).
GEMM_TMA_FILE = "11_fused_lm_head_bwd_tma"
#: The backward's Hopper rungs: rung -> the GEMMs' kernel file.
GEMM_RUNG_FILES = {"wgmma": GEMM_FILE, "tma": GEMM_TMA_FILE}
GEMM_BM, GEMM_BN, GEMM_BK, GEMM_STAGES, GEMM_THREADS = 128, 256, 64, 4, 384
GEMM_SMEM_BYTES = 1024 + GEMM_STAGES * (GEMM_BM + GEMM_BN) * GEMM_BK * 2 + 16 * GEMM_STAGES


def kernel_name(dtype: str, softcap: bool, rung: str = "wgmma", kind: str = "fwd") -> str:
    """The forward kernel (``kind="fwd"``) or the backward's G kernel (``kind="g"``) of the Hopper
    ``rung`` (:data:`RUNG_FILES`) for ``dtype`` ('f16' or 'bf16'), with or without the soft-cap."""
    launch.check_choice("dtype", dtype, ("f16", "bf16"))
    launch.check_choice("rung", rung, tuple(RUNG_FILES))
    launch.check_choice("kind", kind, ("fwd", "g"))
    return f"lmhead_{rung}_{kind}_{dtype}" + ("_softcap" if softcap else "")


def tensor_maps(h, w) -> tuple:
    """The "tma" rung's two tensor maps (:func:`fraglab.tma.tensor_map`): h as (n, d) in boxes of
    :data:`BM` x :data:`BK`, w as (V, d) in boxes of :data:`BN` x :data:`BK`, 128-byte swizzle
    (rows past n or V and columns past d land as zeros). Keep them alive while launches use them."""
    from .. import tma
    return (tma.tensor_map(h, (BM, BK), swizzle=128),
            tma.tensor_map(w, (BN, BK), swizzle=128))


def requires(dtype: str = "bf16", fallback: str = "mma") -> tuple[bool, str]:
    """Can the wgmma rung run here on ``dtype`` inputs? A GPU of compute capability 9.0 exactly
    (H100, H200), or the PTX interpreter if it runs sm_90a. ``(ok, reason)``; the reason names
    ``fallback``, the rung that runs instead ("mma" for the forward, "chunked" for the backward)."""
    launch.check_choice("dtype", dtype, ("f16", "bf16"))
    ok, why = device.can_run(ARCH)
    if not ok:
        return False, (f"the fused LM head's Hopper rungs (wgmma, tma) need sm_90a (wgmma.mma_async and "
                       f"setmaxnreg exist only there): {why}. variant={fallback!r} runs from "
                       "compute capability 8.0")
    return True, ""


def cu_constants() -> dict[str, int]:
    """The LMW_* integer constants of the kernel file, ``LMW_BN`` from its default
    ``LMW_BN_DEF``, and the LMG_* ones of the GEMMs' file (a test compares them with this
    module's)."""
    text = toolchain.kernel_path(FILE).read_text()
    out = {k: int(v) for k, v in re.findall(r"\b(LMW_[A-Z_]+) = (\d+)\b", text)}
    out["LMW_BN"] = int(re.search(r"#define LMW_BN_DEF (\d+)", text).group(1))
    gemm = toolchain.kernel_path(GEMM_FILE).read_text()
    out.update({k: int(v) for k, v in re.findall(r"\b(LMG_[A-Z_]+) = (\d+)\b", gemm)})
    return out


def gemm_maps(G, h, w) -> dict:
    """The tma rung's GEMMs' tensor maps: ``{"dw": (G, h), "dh": (G, w)}``, G in boxes of 64 x
    :data:`GEMM_BK` (dw reads it MN-major, two boxes a k step) or :data:`GEMM_BM` x :data:`GEMM_BK`
    (dh, K-major), h and w in boxes of :data:`GEMM_BK` rows x 64 columns (MN-major panels), all
    with the 128-byte swizzle."""
    from .. import tma
    panel = lambda a, rows: tma.tensor_map(a, (rows, 64), swizzle=128)    # noqa: E731
    return {"dw": (panel(G, GEMM_BK), panel(h, GEMM_BK)),
            "dh": (panel(G, GEMM_BM), panel(w, GEMM_BK))}
