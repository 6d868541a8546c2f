"""Chapter 10 (``10_fa3_pipelining``): FlashAttention-3's pipelined main loop on Hopper (sm_90a).

    from fraglab import fa3_pipelining as fa3
    o = fa3.attention(q, k, v, causal=True, variant="twostage")   # fa3.VARIANTS

Modules: :mod:`.kernels` (wrappers, the swizzle model), :mod:`.config` (variants, files, the
launch numbers read back from them, a launch's checks), :mod:`.tuning` (the tma rung's
candidates and measured table), :mod:`.maps` (its tensor maps), :mod:`.problems` (Problems),
:mod:`.sass_evidence` (HGMMA beside the softmax in SASS), :mod:`.bench` (the H100 run),
:mod:`.report` (glue values, tables), :mod:`.plots`, :mod:`.lab` (the lab's checks).
"""
from .config import ARCH, DESCRIPTIONS, HEAD_DIMS, VARIANTS, head_dims, key_tile
from .kernels import (attention, attention_launcher, mbarrier_ring, sw128_image, sw128_offset,
                      swizzle_tile, warpspec_rowsum, wgmma_gemm)
from .problems import PROBLEMS
from .report import glue_values

__all__ = ["PROBLEMS", "ARCH", "DESCRIPTIONS", "HEAD_DIMS", "VARIANTS", "head_dims", "key_tile",
           "attention",
           "attention_launcher", "glue_values", "mbarrier_ring", "sw128_image",
           "sw128_offset", "swizzle_tile", "warpspec_rowsum", "wgmma_gemm"]

# the TMA building block (one cp.async.bulk.tensor box; fraglab.tma builds the maps)
from .tma_tile import TMA_TILE, tma_tile  # noqa: E402

__all__ += ["TMA_TILE", "tma_tile"]
