"""Chapter 11's argument checks, one home for every wrapper: the forward's (:mod:`.kernels`), the
backward's (:mod:`.backward`) and the autograd Function's (:mod:`.autograd`). Each check runs
before the first launch and raises TypeError for the wrong kind of argument, ValueError for a
wrong value, RuntimeError for a GPU that cannot run the rung asked for.

:func:`check_arguments` is the forward's whole set (arrays, shapes, ``ignore_index``,
``reduction``, ``softcap``, the GPU); :func:`check_backward_arguments` adds ``lse``, ``grad``,
``filter_eps`` and the vocabulary's tile count; :func:`check_variant`, :func:`check_rung` and
:func:`check_chunk_bytes` check the rung and the chunked rungs' budget.
"""
from __future__ import annotations

import math

import numpy as np

from .. import device, launch
from . import config, rungs, wgmma

REDUCTIONS = ("mean", "sum", "none")
#: What PyTorch's cross_entropy ignores by default.
IGNORE_INDEX = -100
#: d must be a multiple of this (mma.m16n8k16's k; the copies need 8).
D_MULTIPLE = 16
#: gridDim.y's limit: vocabulary tiles of one backward launch.
MAX_VOCAB_TILES = 65535


def _tile_width() -> int:
    """The mma rung's vocabulary tile (``lmh_bn``, read back from its kernel file's build)."""
    return config.file_constants(rungs.FORWARD["mma"].file)["lmh_bn"]


def max_rows() -> int:
    """Largest N and V the kernels' 32-bit row and column indices allow (a tile's width short
    of 2^31)."""
    return 2**31 - 1 - _tile_width()


def requires(dtype: str = "bf16") -> tuple[bool, str]:
    """Can this GPU (or the interpreter's target) run the kernel on ``dtype`` inputs? Both need
    compute capability 8.0 (cp.async, ldmatrix, mma.sync.m16n8k16 with f32 accumulators).
    ``(ok, reason)``."""
    cc = device.target_cc()
    if tuple(cc) < (8, 0):
        return False, (f"the fused LM head needs compute capability 8.0 or newer (cp.async, "
                       f"ldmatrix and mma.sync.m16n8k16 with f32 accumulators, f16 and bf16 "
                       f"alike); this GPU is {cc[0]}.{cc[1]}")
    return True, ""


def check_softcap(softcap) -> float | None:
    """``softcap`` as a float (None: no cap): a finite number above 0."""
    if softcap is None:
        return None
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float, np.integer, np.floating)):
        raise TypeError(f"softcap must be a float or None, got {type(softcap).__name__}")
    cap = float(softcap)
    if not (math.isfinite(cap) and cap > 0):
        raise ValueError(f"softcap must be finite and > 0, got {softcap}")
    return cap


def check_ignore_index(ignore_index) -> None:
    """An int (not a bool) that fits in int32."""
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, (int, np.integer)):
        raise TypeError(f"ignore_index must be an int, got {type(ignore_index).__name__}")
    if not -2**31 <= int(ignore_index) < 2**31:
        raise ValueError(f"ignore_index = {ignore_index} must fit in int32")


def check_arguments(h, w, targets, ignore_index, reduction, softcap, *, check_targets: bool = True):
    """Every check of the forward before a launch. Returns ``(dtype, (n, v, d), cap)``.
    ``check_targets=False`` leaves out the one check that reads the targets' values (a
    synchronisation with the GPU): for a caller that checks them later, or checked the same
    targets already (the autograd Function's backward)."""
    launch.check_array("h", h, dtype=(np.float16, np.uint16), ndim=2)
    launch.check_array("w", w, dtype=h.dtype, ndim=2)
    n, d = (int(s) for s in h.shape)
    v = int(w.shape[0])
    if w.shape[1] != d:
        raise ValueError(f"w must have shape (V, d) with d = {d} as h has, got {w.shape}")
    launch.check_array("targets", targets, dtype=(np.int32, np.int64), ndim=1)
    if targets.shape[0] != n:
        raise ValueError(f"targets must have one entry per row of h ({n}), got {targets.shape[0]}")
    if n < 1 or v < 1 or d < 1:
        raise ValueError(f"h and w must be non-empty, got h {h.shape} and w {w.shape}")
    if d % D_MULTIPLE:
        raise ValueError(f"d = {d} must be a multiple of {D_MULTIPLE} (the k of "
                         "mma.m16n8k16): pad h and w with zero columns")
    if max(n, v) > max_rows():
        raise ValueError(f"n = {n} and V = {v} must be at most {max_rows()}")
    for name, a in (("h", h), ("w", w)):
        launch.check_aligned(name, a, 16, "cp.async copies 16 bytes")
    check_ignore_index(ignore_index)
    launch.check_choice("reduction", reduction, REDUCTIONS)
    cap = check_softcap(softcap)
    if check_targets:
        check_target_values(targets, ignore_index, v)
    dtype = "f16" if h.dtype == np.float16 else "bf16"
    ok, why = requires(dtype)
    if not ok:
        raise RuntimeError(why)
    return dtype, (n, v, d), cap


def check_target_values(targets, ignore_index, v: int) -> None:
    """Every target in [0, V) or ``ignore_index``, else ValueError naming the first that is not.
    On a GPU this reads the targets back: it waits for the work queued before."""
    xp = np if launch.interpreted() else __import__("cupy")
    bad = (targets != ignore_index) & ((targets < 0) | (targets >= v))
    if bool(bad.any()):
        i = int(xp.argmax(bad))
        raise ValueError(f"targets[{i}] = {int(targets[i])} is outside [0, V = {v}) and is not "
                         f"ignore_index ({ignore_index})")


def grad_array(grad, reduction: str, n: int):
    """The loss's gradient as a float32 array of this mode: shape () for 'mean' and 'sum', (n,)
    for 'none'."""
    xp = np if launch.interpreted() else __import__("cupy")
    if isinstance(grad, (bool, np.bool_)) or not (
            isinstance(grad, (int, float, np.integer, np.floating)) or hasattr(grad, "shape")):
        raise TypeError(f"grad must be a number or an array, got {type(grad).__name__}")
    if not hasattr(grad, "shape"):
        grad = np.float32(grad)
    if launch.interpreted() and type(grad).__module__.split(".")[0] == "cupy":
        raise TypeError("grad is a CuPy array, but kernels run on the PTX interpreter here")
    g = xp.asarray(grad)
    if g.dtype.kind != "f":
        raise TypeError(f"grad must be a floating-point array, got dtype {g.dtype}")
    want = (n,) if reduction == "none" else ()
    if reduction != "none" and g.size == 1:
        g = g.reshape(())
    if tuple(g.shape) != want:
        raise ValueError(f"grad of reduction={reduction!r} must have shape {want}, got {tuple(g.shape)}")
    return g.astype(xp.float32)


def check_filter_eps(filter_eps) -> None:
    """None (the filter off), or a number in (0, 1)."""
    if filter_eps is None:
        return
    if isinstance(filter_eps, bool) or not isinstance(filter_eps, (float, int, np.floating)):
        raise TypeError(f"filter_eps must be a float or None, got {type(filter_eps).__name__}")
    if not 0 < float(filter_eps) < 1:
        raise ValueError(f"filter_eps must be in (0, 1), got {filter_eps}")


def check_backward_arguments(h, w, targets, lse, grad, ignore_index, reduction, softcap, filter_eps,
                             check_targets: bool = True):
    """The forward's checks, then lse, grad and filter_eps. Returns ``(dtype, (n, v, d), cap, g)``
    with ``g`` the gradient as :func:`grad_array` makes it. ``check_targets``: as
    :func:`check_arguments` takes it."""
    dtype, (n, v, d), cap = check_arguments(h, w, targets, ignore_index, reduction, softcap,
                                            check_targets=check_targets)
    launch.check_array("lse", lse, dtype=np.float32, shape=(n,))
    g = grad_array(grad, reduction, n)
    check_filter_eps(filter_eps)
    bn = _tile_width()
    if -(-v // bn) > MAX_VOCAB_TILES:
        raise ValueError(f"V = {v} needs more than {MAX_VOCAB_TILES} vocabulary tiles of {bn}")
    return dtype, (n, v, d), cap, g


def check_chunk_bytes(chunk_bytes) -> None:
    """The chunked rungs' budget for G: a positive int."""
    if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, (int, np.integer)) \
            or chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be a positive int, got {chunk_bytes!r}")


def check_variant(variant: str | None, table: dict, default=None) -> str | None:
    """``variant``, one of ``table``'s rungs (``rungs.FORWARD`` or ``rungs.BACKWARD``); None:
    what ``default()`` names (None where no default is given)."""
    if variant is None:
        return default() if default is not None else None
    launch.check_choice("variant", variant, tuple(table))
    return variant


def check_rung(rung: rungs.Rung, instead: str) -> None:
    """A Hopper rung refused where it cannot run (RuntimeError naming ``instead``, the rung that
    runs from compute capability 8.0); the others run wherever :func:`requires` lets them."""
    if rung.hopper:
        device.require(rung.arch, wgmma.NEEDS, wgmma.INSTEAD.format(instead))
