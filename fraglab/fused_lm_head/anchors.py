"""What chapter 11's kernel is compared with, each a callable ``f(h, w, targets, reduction)`` on
torch tensors (h (N, d), w (V, d) bf16, targets (N,) int64) returning the loss:

* ``eager``: PyTorch, ``F.linear`` then ``F.cross_entropy`` on FP32 logits (the whole logits
  matrix in memory, twice);
* ``compile``: ``torch.compile`` of the same function;
* ``liger``: Liger-Kernel's ``LigerFusedLinearCrossEntropyLoss`` (chunks of tokens through cuBLAS
  and a Triton softmax; its module takes the weight first);
* ``cce``: Apple's Cut Cross-Entropy, ``cut_cross_entropy.linear_cross_entropy`` (logits tile by
  tile in on-chip memory);
* ``course``: :func:`fraglab.fused_lm_head.kernels.launcher` on the same memory through DLPack,
  its checks done once, so that a call is the two kernels and the reduction; for a training
  step, its ``torch.autograd.Function`` (:func:`course_autograd`).

:func:`forward_backward` makes a training step (loss, then both gradients) of any of them.

Each is imported lazily; one that is missing (or fails to load) is left out with the reason.
``fp32_reference`` is what every loss is compared with at full size.
"""
from __future__ import annotations

from typing import Callable

from . import kernels

#: In the order of the comparison's table; the first is the ratios' baseline.
VARIANTS = ("course", "eager", "compile", "liger", "cce")


def torch_or_reason():
    """``(torch, "")`` with a CUDA device, else ``(None, why)``."""
    try:
        import torch
    except Exception as exc:           # noqa: BLE001 - the reason is recorded
        return None, f"torch is not installed ({type(exc).__name__}: {exc})"
    if not torch.cuda.is_available():
        return None, "torch sees no CUDA device"
    return torch, ""


def eager_loss(h, w, targets, reduction: str = "mean"):
    """PyTorch eager: logits in bf16 by cuBLAS, then cross-entropy on their FP32 copy."""
    import torch.nn.functional as F
    return F.cross_entropy(F.linear(h, w).float(), targets, ignore_index=kernels.IGNORE_INDEX,
                           reduction=reduction)


def fp32_reference(h, w, targets, reduction: str = "none"):
    """The FP32 PyTorch loss (FP32 inputs and matmul, TF32 off): the full-size reference."""
    import torch
    import torch.nn.functional as F
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return F.cross_entropy(F.linear(h.float(), w.float()), targets,
                               ignore_index=kernels.IGNORE_INDEX, reduction=reduction)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def course_loss(h, w, targets, reduction: str = "mean") -> Callable[[], object]:
    """A zero-argument call of the course's kernels on these tensors (checked here, once)."""
    conv = [kernels._from_torch(k, x) for k, x in (("h", h), ("w", w), ("targets", targets))]
    run, _ = kernels.launcher(*conv, kernels.IGNORE_INDEX, reduction)
    return run


def course_autograd(h, w, targets, reduction: str = "mean"):
    """The course's kernels through their ``torch.autograd.Function`` (forward and backward)."""
    from .autograd import FusedLinearCrossEntropy
    return FusedLinearCrossEntropy.apply(h, w, targets, kernels.IGNORE_INDEX, reduction, None)


def forward_backward(f: Callable, h, w, targets) -> Callable[[], tuple]:
    """A zero-argument training step of the loss ``f``: the 'mean' loss of fresh leaves on h's
    and w's memory, then ``torch.autograd.grad`` for both; returns ``(loss, dh, dw)`` (new
    gradient tensors each call, nothing accumulated). Every anchor computes both gradients
    (Liger-Kernel during its forward, the others in their backward)."""
    import torch

    def step():
        hh, ww = h.detach().requires_grad_(), w.detach().requires_grad_()
        loss = f(hh, ww, targets, "mean")
        dh, dw = torch.autograd.grad(loss, (hh, ww))
        return loss.detach(), dh, dw
    return step


def make(log=None) -> tuple[dict[str, Callable], dict[str, str]]:
    """``({name: f(h, w, targets, reduction)}, {name: why it is missing})`` over
    :data:`VARIANTS` but ``course`` (which :func:`course_loss` makes per input)."""
    torch, why = torch_or_reason()
    found, missing = {}, {}
    if torch is None:
        return {}, {name: why for name in VARIANTS}
    found["eager"] = eager_loss
    try:
        compiled = torch.compile(eager_loss)
        found["compile"] = lambda h, w, t, reduction="mean": compiled(h, w, t, reduction)
    except Exception as exc:           # noqa: BLE001
        missing["compile"] = f"torch.compile failed: {type(exc).__name__}: {exc}"[:300]
    try:
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss
        modules = {r: LigerFusedLinearCrossEntropyLoss(ignore_index=kernels.IGNORE_INDEX,
                                                       reduction=r) for r in kernels.REDUCTIONS}
        found["liger"] = lambda h, w, t, reduction="mean": modules[reduction](w, h, t)
    except Exception as exc:           # noqa: BLE001
        missing["liger"] = f"liger_kernel not importable: {type(exc).__name__}: {exc}"[:300]
    try:
        from cut_cross_entropy import linear_cross_entropy
        found["cce"] = lambda h, w, t, reduction="mean": linear_cross_entropy(
            h, w, t, ignore_index=kernels.IGNORE_INDEX, reduction=reduction)
    except Exception as exc:           # noqa: BLE001
        missing["cce"] = f"cut_cross_entropy not importable: {type(exc).__name__}: {exc}"[:300]
    if log is not None:
        log(f"  anchors: {', '.join(found)}" + "".join(f"; {k} skipped: {v}" for k, v in missing.items()))
    return found, missing
