"""What chapter 11's kernel is compared with, each a callable ``f(h, w, targets, reduction)`` on
torch tensors (h (N, d), w (V, d) bf16, targets (N,) int64) returning the loss:

* ``eager``: PyTorch, ``F.linear`` then ``F.cross_entropy`` on the logits' FP32 copy (as Hugging
  Face's causal LMs upcast them; the whole logits matrix in memory, twice);
* ``compile``: ``torch.compile`` of the same function, static shapes (``dynamic=False``), compiled
  afresh for every size (:func:`fresh_compile`: a training run compiles once for its shape; the
  default would reuse a dynamic-shape graph after the second size, and stop compiling past the
  recompile limit);
* ``liger``: Liger-Kernel's ``LigerFusedLinearCrossEntropyLoss`` with its defaults (chunks of
  tokens through cuBLAS and a Triton softmax, both gradients computed during the forward, dw
  accumulated in the weight's dtype; its module takes the weight first);
* ``cce``: Apple's Cut Cross-Entropy, ``cut_cross_entropy.linear_cross_entropy`` with its
  defaults (``impl="cce"``, the README's recommended start; ``filter_eps="auto"``: the gradient
  filter on, the vocabulary sorted by average logit for it; gradients accumulated in the inputs'
  dtype);
* ``course``: :func:`fraglab.fused_lm_head.kernels.launcher` on the same memory through DLPack,
  its checks done once, so that a call is the two kernels and the reduction; for a training
  step, its ``torch.autograd.Function`` (:func:`course_autograd`), in the rungs of
  :data:`COURSE_TRAIN` (the backward's default rung with the filter off and on, and its other
  rungs).

:func:`forward_backward` makes a training step (loss, then both gradients) of any of them.
:data:`SETTINGS` says what each is run with (the record keeps it).

Each is imported lazily; one that is missing (or fails to load) is left out with the reason.
``fp32_reference`` is what every loss is compared with at full size.
"""
from __future__ import annotations

from typing import Callable

from . import backward, kernels

#: In the order of the comparison's table; the first is the ratios' baseline.
VARIANTS = ("course", "eager", "compile", "liger", "cce")
#: The course's training steps: name -> (backward rung, filter_eps); "course" is the default rung.
#: None: the default rung (``backward.default_variant``: "wgmma" on Hopper).
COURSE_TRAIN = {"course": (None, None),
                "course_filter": (None, backward.FILTER_EPS),
                "course_wgmma": ("wgmma", None),
                "course_chunked": ("chunked", None)}
#: What each variant runs with, for the record.
SETTINGS = {
    "course": "forward: default rung (tma on Hopper); backward: default rung ('tma' on "
              f"Hopper: G and both GEMMs on warpgroup MMA, their operands brought by the TMA), G "
              f"budget {backward.CHUNK_BYTES >> 20} MiB, filter off",
    "course_filter": f"as course, filter_eps = 2^-12 (tiles whose every |softmax - onehot| is below "
                     "it skipped)",
    "course_wgmma": "as course, backward rung 'wgmma' (the same GEMMs, operands copied by cp.async)",
    "course_chunked": "as course, backward rung 'chunked' (G and GEMMs on mma.sync)",
    "cce_nofilter": "linear_cross_entropy defaults but filter_eps=None (no gradient filter)",
    "eager": "F.linear (bf16, cuBLAS), .float(), F.cross_entropy",
    "compile": "torch.compile(eager, dynamic=False), default mode, recompiled per size",
    "liger": "LigerFusedLinearCrossEntropyLoss defaults (accum_dtype None)",
    "cce": "linear_cross_entropy defaults (impl='cce', filter_eps='auto', accum_*_fp32 False)",
}


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
    conv = [kernels.from_torch(k, x) for k, x in (("h", h), ("w", w), ("targets", targets))]
    run, _ = kernels.launcher(*conv, kernels.IGNORE_INDEX, reduction)
    return run


def course_autograd(h, w, targets, reduction: str = "mean", *, variant: str | None = None,
                    filter_eps: float | None = None):
    """The course's kernels through their ``torch.autograd.Function`` (forward and backward;
    ``variant`` and ``filter_eps``: the backward's rung and filter)."""
    from .autograd import FusedLinearCrossEntropy
    return FusedLinearCrossEntropy.apply(h, w, targets, kernels.IGNORE_INDEX, reduction, None,
                                         filter_eps, variant)


def course_train(name: str) -> Callable:
    """The loss of :data:`COURSE_TRAIN`'s ``name``, as :func:`forward_backward` takes it."""
    variant, eps = COURSE_TRAIN[name]
    return lambda h, w, t, reduction="mean": course_autograd(h, w, t, reduction, variant=variant,
                                                             filter_eps=eps)


def cce_without_filter() -> Callable | None:
    """Cut Cross-Entropy with its defaults but its gradient filter off (``filter_eps=None``): the
    pair to the course without its filter. None where Cut Cross-Entropy is missing."""
    try:
        from cut_cross_entropy import linear_cross_entropy
    except Exception:                  # noqa: BLE001 - make() records why
        return None
    return lambda h, w, t, reduction="mean": linear_cross_entropy(
        h, w, t, ignore_index=kernels.IGNORE_INDEX, reduction=reduction, filter_eps=None)


def fresh_compile(found: dict) -> None:
    """Forget every compiled graph (``torch._dynamo.reset``) and put a new static-shape
    ``torch.compile`` of :func:`eager_loss` in ``found["compile"]`` (when compile is there)."""
    if "compile" not in found:
        return
    import torch
    torch._dynamo.reset()
    compiled = torch.compile(eager_loss, dynamic=False)
    found["compile"] = lambda h, w, t, reduction="mean": compiled(h, w, t, reduction)


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
        compiled = torch.compile(eager_loss, dynamic=False)
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
