"""What every FA-2 style kernel of the course (chapters 05, 08, 09, 10) and its wrapper share: the
element types, the head dimensions of the kernels built like chapter 05's FA-2, the size limits
of their indexing, and log2(e), by which the wrappers scale the scores (the kernels use exp2)."""
from __future__ import annotations

DTYPES = ("f16", "bf16")
#: Head dimensions of chapter 05's FA-2 kernel and of the kernels built like it (09, 10).
FA2_HEAD_DIMS = (64, 128)
MAX_N = 1 << 24                    # the kernels index rows with 32-bit ints
MAX_BH = 65535                     # gridDim.y: one grid row per head
LOG2E = 1.4426950408889634
