"""What a chapter times beside its attention kernels, and how: PyTorch's SDPA backends and the
course's own earlier kernels, on one stream, on the same memory (:class:`Baselines`), and the
FLOPs the TFLOP/s divide by (:func:`attention_flops`).

One stream strategy for every chapter: :meth:`Baselines.stream` makes one non-blocking CuPy
stream current for CuPy *and* for torch (through ``torch.cuda.ExternalStream``), so the kernels,
SDPA, torch's input draws and :func:`fraglab.bench.compare`'s events are ordered on one queue,
with or without torch. Chapter 10's earlier ``Baselines`` ran on torch's current stream, which
is the legacy default stream: that one synchronizes implicitly with every other blocking stream
and is a different stream when torch is missing; chapter 09's strategy (kept here) has neither
difference. Each SDPA callable enters its backend's context itself, so a callable means the same
wherever :func:`fraglab.bench.compare` calls it.

A chapter imports only core modules, so the course's earlier kernels that a chapter times
(chapter 05's FA-2, chapter 09's last step) are found when the benchmark runs
(:func:`course_launcher`, from :data:`fraglab.topics.COURSE_KERNELS`, the registry of such
lookups): a chapter that is missing or broken is noted, never fatal.
"""
from __future__ import annotations

import contextlib

from ..topics import COURSE_KERNELS, lookup
from .torch_sdpa import attention_inputs, sdpa


def attention_flops(b: int, h: int, n: int, d: int, causal: bool = False) -> float:
    """4 B H N^2 d (two matrix products of 2 N^2 d each per head), halved when causal."""
    f = 4.0 * b * h * n * n * d
    return f / 2 if causal else f


def course_launcher(name: str):
    """``(launcher or None, note)`` of :data:`COURSE_KERNELS` ``[name]``, looked up at run time."""
    module, attr, what = COURSE_KERNELS[name]
    try:
        fn = lookup(module, attr)
    except Exception as exc:                              # not there, or broken
        return None, f"{what}: not importable: {type(exc).__name__}: {exc}"[:200]
    return fn, f"{what} ({module}.{attr})"


class Baselines:
    """SDPA's backends (``backends``, names of :data:`.torch_sdpa.BACKENDS`) on torch tensors and
    the course's kernels (``course``, names of :data:`COURSE_KERNELS`) on CuPy views of the same
    memory. ``notes`` says what each one is, or why it is missing (logged when ``log`` is given)."""

    def __init__(self, log=None, backends=("sdpa_flash", "cudnn"), course=()):
        self.torch, self.sdpa, self.course, self.notes = None, {}, {}, {}
        for name in backends:
            torch, pair, self.notes[name] = sdpa(name)
            self.torch = self.torch or torch
            if pair is not None:
                self.sdpa[name] = pair
        for name in course:
            fn, self.notes[name] = course_launcher(name)
            if fn is not None:
                self.course[name] = fn
        if log is not None:
            log("  baselines: " + "; ".join(f"{k}: {v}" for k, v in self.notes.items()))

    @contextlib.contextmanager
    def stream(self):
        """One non-blocking CuPy stream, current for CuPy and (when there) torch alike."""
        import cupy as cp
        s = cp.cuda.Stream(non_blocking=True)
        with contextlib.ExitStack() as stack:
            stack.enter_context(s)
            if self.torch is not None:
                stack.enter_context(self.torch.cuda.stream(self.torch.cuda.ExternalStream(s.ptr)))
            yield s

    def inputs(self, rng, shape, dtype="f16"):
        """(torch tensors or None, CuPy q, k, v) of ``shape`` (:func:`.torch_sdpa.attention_inputs`)."""
        return attention_inputs(self.torch, rng, shape, dtype)

    def sdpa_call(self, name: str, ts, causal: bool):
        """SDPA's backend ``name`` on torch tensors ``ts``, entering its context at every call."""
        context, make = self.sdpa[name]
        fn = make(*ts, causal)

        def call():
            with context():
                return fn()
        return call

    def callables(self, ts, qkv, causal: bool, refused: dict) -> dict:
        """Name -> callable of every baseline that runs here: each SDPA backend (when ``ts``, the
        torch tensors, are given) and each course kernel (on ``qkv``, CuPy arrays), run once and
        waited for; one that raises is left out, with why, in ``refused``."""
        import cupy as cp
        makers = {}
        if ts is not None:
            for name in self.sdpa:
                makers[name] = lambda name=name: self.sdpa_call(name, ts, causal)
        if qkv is not None:
            for name, launcher in self.course.items():
                makers[name] = lambda launcher=launcher: launcher(*qkv, causal=causal)[0]
        out = {}
        for name, make in makers.items():
            try:                              # a baseline that refuses this size is left out
                fn = make()
                fn()
                cp.cuda.get_current_stream().synchronize()
            except Exception as exc:          # recorded, the others still run
                refused[name] = f"{type(exc).__name__}: {exc}"[:300]
                continue
            out[name] = fn
        return out
