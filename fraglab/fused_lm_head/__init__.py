"""Chapter 11 (``11_fused_lm_head``): A fused LM head: matmul, then an in-register log-sum-exp.

    from fraglab import fused_lm_head
    y = fused_lm_head.warp_scan(x)            # x: (rows, 32) int32; CuPy on a GPU, NumPy without one

Modules: :mod:`.kernels` (wrappers), :mod:`.problems` (Problems), :mod:`.report` (the record's
glue values and tables), :mod:`.lab` (the lab's checks), :mod:`.bench` (the GPU run,
``python -m fraglab.fused_lm_head bench``).
"""
from .kernels import KERNELS, WARPS_PER_BLOCK, warp_scan
from .problems import PROBLEMS
from .report import glue_values

__all__ = ["KERNELS", "PROBLEMS", "WARPS_PER_BLOCK", "glue_values", "warp_scan"]
