"""What the two kernel files fix at compile time, shared by the wrappers, the emulators and the
benchmark: file names, head dimensions, tile sizes, warps per block. The element types, the FA-2
head dimensions, the size limits and ``LOG2E`` are every attention chapter's
(:mod:`fraglab.attention.constants`), re-exported here."""
from __future__ import annotations

from ..attention.constants import DTYPES, FA2_HEAD_DIMS, LOG2E, MAX_BH, MAX_N  # noqa: F401

KERNELS_FA1 = "05_flash_attention_fa1"
KERNELS_FA2 = "05_flash_attention_fa2"

#: The rungs, chosen with ``variant=`` (:func:`.kernels.fa1`): the FA-1 kernel's softmax paths,
#: the paper's shared-memory baseline, a fair shared-memory baseline, then the in-register
#: softmax of Alg. 4 (:data:`FINAL`). The FA-2 kernel (:func:`.kernels.fa2`) is no rung of this
#: ladder: it takes other arguments (dtype, causal, warps); it is the first rung of chapter 09's.
VARIANTS = ("paper_baseline", "fair_baseline", "inregister")
FINAL = VARIANTS[-1]
FA1_HEAD_DIMS = (64, 128, 512)
FA1_TILE = 16                      # query rows per block and keys per tile (one 16x16 WMMA tile)
FA2_WARPS = (4, 8)                 # 16 query rows per warp: 64 or 128 rows per block
FA2_BN = 64                        # keys per K/V tile
