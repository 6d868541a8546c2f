"""What the two kernel files fix at compile time, shared by the wrappers, the emulators and the
benchmark: file names, head dimensions, tile sizes, warps per block, size limits."""
from __future__ import annotations

KERNELS_FA1 = "05_flash_attention_fa1"
KERNELS_FA2 = "05_flash_attention_fa2"

FA1_VARIANTS = ("paper_baseline", "fair_baseline", "inregister")
FA1_HEAD_DIMS = (64, 128, 512)
FA1_TILE = 16                      # query rows per block and keys per tile (one 16x16 WMMA tile)
FA2_HEAD_DIMS = (64, 128)
FA2_WARPS = (4, 8)                 # 16 query rows per warp: 64 or 128 rows per block
FA2_BN = 64                        # keys per K/V tile
DTYPES = ("f16", "bf16")
MAX_N = 1 << 24                    # the kernels index rows with 32-bit ints
MAX_BH = 65535                     # gridDim.y
LOG2E = 1.4426950408889634
