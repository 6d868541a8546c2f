"""Chapter 11 (``11_fused_lm_head``): a fused LM head, matmul then an in-register log-sum-exp.

    from fraglab import fused_lm_head
    loss = fused_lm_head.fused_linear_cross_entropy(h, w, targets)   # h (N, d), w (V, d), targets (N,)

Modules: :mod:`.rungs` (the rungs' files, targets and kernel names), :mod:`.config` (the launch
numbers, read back from the kernel files), :mod:`.checks` (the wrappers' argument checks),
:mod:`.kernels` (the wrapper), :mod:`.wgmma` (the
Hopper rungs' files and tensor maps), :mod:`.backward` (the gradients for h and w),
:mod:`.autograd` (a ``torch.autograd.Function`` around both; imports torch, so not imported
here), :mod:`.problems` (Problems), :mod:`.report` (the record's
glue values and tables), :mod:`.lab` (the lab's checks), :mod:`.bench` (the GPU run,
``python -m fraglab.fused_lm_head bench``).
"""
from .backward import forward_with_lse, linear_cross_entropy_backward
from .kernels import KERNELS, fused_linear_cross_entropy, requires
from .problems import PROBLEMS
from .report import glue_values

__all__ = ["KERNELS", "PROBLEMS", "forward_with_lse", "fused_linear_cross_entropy", "glue_values",
           "linear_cross_entropy_backward", "requires"]
