"""The Hopper rung of the fused LM head's forward, ``kernels/11_fused_lm_head_wgmma.cu``: what the
wrapper (:func:`fraglab.fused_lm_head.fused_linear_cross_entropy`, ``variant="wgmma"``) needs to
launch it, and what a GPU that cannot run it is told.

Its kernels take the arguments of the mma rung's and write the same partials, merged by the same
``lmhead_merge``; a block is 3 warpgroups (a cp.async producer, two wgmma consumers of 64 tokens
each) and 128 tokens x ``lmh_wgmma_bn`` words a tile, through a ring of ``lmh_wgmma_stages``
stages of (128 + bn) rows x 64 values of d: the numbers of the kernel file, read back from its
build (:func:`constants`, :mod:`.config`).
"""
from __future__ import annotations

from .. import launch
from . import config, rungs

#: The Hopper rungs (forward and the backward's G kernel): rung -> kernel file (``rungs.FORWARD``).
RUNG_FILES = {r: rungs.FORWARD[r].file for r in ("wgmma", "tma")}
FILE = RUNG_FILES["wgmma"]
#: The "tma" rung: the same mainloop with a TMA producer (one thread, two tensor maps a launch).
TMA_FILE = RUNG_FILES["tma"]
#: wgmma.mma_async and setmaxnreg exist only on Hopper's architecture-specific target: whether it
#: runs here is ``device.can_run(ARCH, NEEDS, INSTEAD.format(rung))`` (a GPU of compute capability
#: 9.0 exactly, or the PTX interpreter), whose reason names the rung that runs instead ("mma" for
#: the forward, "chunked" for the backward).
ARCH = config.HOPPER_ARCH
NEEDS = "the fused LM head's Hopper rungs, wgmma and tma"
INSTEAD = "variant={!r} runs from compute capability 8.0."
#: The backward's Hopper rungs: rung -> the GEMMs' kernel file (``rungs.BACKWARD``).
GEMM_RUNG_FILES = {r: rungs.BACKWARD[r].gemm_file for r in ("wgmma", "tma")}
#: The backward's two GEMMs on wgmma (``kernels/11_fused_lm_head_bwd_wgmma.cu``).
GEMM_FILE = GEMM_RUNG_FILES["wgmma"]
#: The same GEMMs with their producer on the TMA (the backward's "tma" rung).
GEMM_TMA_FILE = GEMM_RUNG_FILES["tma"]


def constants(gemm: bool = False) -> dict[str, int]:
    """The Hopper rungs' launch numbers, read back from the kernel file's build for :data:`ARCH`:
    the forward's and the G kernel's (:data:`FILE`, the tma rung's file the same) ``lmh_wgmma_bm``
    (tokens a block), ``_bn`` (words a tile), ``_bk`` (values of d a stage), ``_stages``,
    ``_threads``, ``_smem`` (the ring, its alignment and mbarriers), ``_g_smem`` (and the G
    kernel's votes); ``gemm``: the backward's GEMMs' (:data:`GEMM_FILE`), ``lmh_wgmma_gemm_bm``,
    ``_bn``, ``_bk``, ``_stages``, ``_threads``, ``_smem`` (C's tile, k a step, ...)."""
    return config.file_constants(GEMM_FILE if gemm else FILE, ARCH)


#: ``wgmma.BM`` and the like: the numbers as this module named them before the kernel files became
#: their one home, read from the builds on use (:func:`constants`).
__getattr__ = config.lazy_names(__name__, FILE, {
    **{k.upper(): f"lmh_wgmma_{k}" for k in ("bm", "bn", "bk", "stages", "threads")},
    "SMEM_BYTES": "lmh_wgmma_smem", "G_SMEM_BYTES": "lmh_wgmma_g_smem",
    **{f"GEMM_{k.upper()}": (GEMM_FILE, f"lmh_wgmma_gemm_{k}")
       for k in ("bm", "bn", "bk", "stages", "threads")},
    "GEMM_SMEM_BYTES": (GEMM_FILE, "lmh_wgmma_gemm_smem")}, arch=ARCH)


def kernel_name(dtype: str, softcap: bool, rung: str = "wgmma", kind: str = "fwd") -> str:
    """The forward kernel (``kind="fwd"``) or the backward's G kernel (``kind="g"``) of the Hopper
    ``rung`` (:data:`RUNG_FILES`) for ``dtype`` ('f16' or 'bf16'), with or without the soft-cap."""
    launch.check_choice("rung", rung, tuple(RUNG_FILES))
    launch.check_choice("kind", kind, ("fwd", "g"))
    return rungs.kernel_name((rungs.FORWARD if kind == "fwd" else rungs.BACKWARD)[rung], kind,
                             dtype, softcap)


def tensor_maps(h, w, c: dict | None = None) -> tuple:
    """The "tma" rung's two tensor maps (:func:`fraglab.tma.tensor_map`): h as (n, d) in boxes of
    bm x bk, w as (V, d) in boxes of bn x bk, 128-byte swizzle (rows past n or V and columns past
    d land as zeros); ``c``: the launched module's ``lmh_wgmma_*`` (default :func:`constants`).
    Keep them alive while launches use them."""
    from .. import tma
    c = c or constants()
    bm, bn, bk = c["lmh_wgmma_bm"], c["lmh_wgmma_bn"], c["lmh_wgmma_bk"]
    return (tma.tensor_map(h, (bm, bk), swizzle=128),
            tma.tensor_map(w, (bn, bk), swizzle=128))


def gemm_maps(G, h, w, c: dict | None = None) -> dict:
    """The tma rung's GEMMs' tensor maps: ``{"dw": (G, h), "dh": (G, w)}``, G in boxes of 64 x bk
    (dw reads it MN-major, two boxes a k step) or bm x bk (dh, K-major), h and w in boxes of bk
    rows x 64 columns (MN-major panels), all with the 128-byte swizzle; ``c``: the launched
    module's ``lmh_wgmma_gemm_*`` (default ``constants(gemm=True)``)."""
    from .. import tma
    c = c or constants(gemm=True)
    bm, bk = c["lmh_wgmma_gemm_bm"], c["lmh_wgmma_gemm_bk"]
    panel = lambda a, rows: tma.tensor_map(a, (rows, 64), swizzle=128)    # noqa: E731
    return {"dw": (panel(G, bk), panel(h, bk)),
            "dh": (panel(G, bm), panel(w, bk))}
