"""The fused loss as a PyTorch ``autograd.Function``, for a training step (needs torch):

    from fraglab.fused_lm_head.autograd import FusedLinearCrossEntropy, LinearCrossEntropyLoss
    loss = FusedLinearCrossEntropy.apply(h, w, targets)          # h (N, d), w (V, d) bf16 or f16
    loss = LinearCrossEntropyLoss(reduction="mean")(h, w, targets)
    loss.backward()                                              # h.grad, w.grad in h's dtype

The forward is :func:`fraglab.fused_lm_head.fused_linear_cross_entropy` keeping each token's
log-sum-exp (N floats, the only thing saved besides the inputs); the backward is
:func:`fraglab.fused_lm_head.backward.linear_cross_entropy_backward` (its rung: ``variant``),
writing straight into the gradient tensors (not poisoned first, the targets not checked again:
the forward checked them). CUDA tensors on a GPU (through DLPack, no copies;
both passes launch on torch's current stream, :func:`fraglab.fused_lm_head.kernels.torch_stream`,
which matters in the backward: autograd runs it on a thread of its own), CPU tensors on the PTX
interpreter. Arguments are checked as the wrappers check them (:mod:`.checks`).
"""
from __future__ import annotations

import torch

from . import backward, checks, kernels, rungs


class FusedLinearCrossEntropy(torch.autograd.Function):
    """``apply(h, w, targets, ignore_index=-100, reduction='mean', softcap=None, filter_eps=None,
    variant=None)``: the cross-entropy of ``h w^T`` against ``targets`` (PyTorch's
    ``F.cross_entropy`` of ``F.linear(h, w)``, soft-capped when ``softcap`` is given),
    differentiable in h and w. ``filter_eps``: the backward's skip of negligible vocabulary tiles
    (None: off); ``variant``: the backward's rung (:data:`fraglab.fused_lm_head.backward.VARIANTS`,
    None: its default)."""

    @staticmethod
    def forward(ctx, h, w, targets, ignore_index: int = kernels.IGNORE_INDEX,
                reduction: str = "mean", softcap: float | None = None,
                filter_eps: float | None = None, variant: str | None = None):
        for name, x in (("h", h), ("w", w), ("targets", targets)):
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"{name} must be a torch tensor, got {type(x).__name__}")
        checks.check_variant(variant, rungs.BACKWARD)
        arrays = [kernels.from_torch(k, x) for k, x in (("h", h), ("w", w), ("targets", targets))]
        # with the filter on, the forward keeps each block's largest logit (a few hundred KB),
        # which lets the backward skip the tiles no token can reach
        keep = {} if filter_eps is not None else None
        with kernels.torch_stream():
            loss, lse = backward.forward_with_lse(*arrays, ignore_index, reduction, softcap,
                                                  keep=keep)
        ctx.bmax = keep["bmax"] if keep else None
        ctx.save_for_backward(h, w, targets, kernels.to_torch(lse, h))
        ctx.options = (ignore_index, reduction, softcap, filter_eps, variant)
        return kernels.to_torch(loss, h)

    @staticmethod
    def backward(ctx, grad_out):
        h, w, targets, lse = ctx.saved_tensors
        ignore_index, reduction, softcap, filter_eps, variant = ctx.options
        dh, dw = torch.empty_like(h), torch.empty_like(w)
        conv = [kernels.from_torch(k, x) for k, x in
                (("h", h), ("w", w), ("targets", targets), ("lse", lse),
                 ("grad", grad_out.detach().float().contiguous()), ("dh", dh), ("dw", dw))]
        with kernels.torch_stream():
            run, _ = backward.backward_launcher(*conv[:5], ignore_index, reduction, softcap,
                                                filter_eps=filter_eps, out=(conv[5], conv[6]),
                                                variant=variant, poison=False, check_targets=False,
                                                bmax=ctx.bmax)
            run()
        return (dh if ctx.needs_input_grad[0] else None,
                dw if ctx.needs_input_grad[1] else None, None, None, None, None, None, None)


def fused_linear_cross_entropy_loss(h, w, targets, ignore_index: int = kernels.IGNORE_INDEX,
                                    reduction: str = "mean", softcap: float | None = None,
                                    filter_eps: float | None = None, variant: str | None = None):
    """:class:`FusedLinearCrossEntropy` with keyword arguments."""
    return FusedLinearCrossEntropy.apply(h, w, targets, ignore_index, reduction, softcap,
                                         filter_eps, variant)


class LinearCrossEntropyLoss(torch.nn.Module):
    """The module form: ``LinearCrossEntropyLoss(reduction=...)(h, w, targets)`` (the hidden
    states first, then the head's weight, as ``F.linear`` takes them)."""

    def __init__(self, ignore_index: int = kernels.IGNORE_INDEX, reduction: str = "mean",
                 softcap: float | None = None, filter_eps: float | None = None,
                 variant: str | None = None):
        super().__init__()
        self.ignore_index, self.reduction = ignore_index, reduction
        self.softcap, self.filter_eps, self.variant = softcap, filter_eps, variant

    def forward(self, h, w, targets):
        return FusedLinearCrossEntropy.apply(h, w, targets, self.ignore_index, self.reduction,
                                             self.softcap, self.filter_eps, self.variant)
