"""Graded checks for labs.

A check prints ``PASS <exercise>: <what was checked>`` when the answer is right and raises
:class:`GradeError` (an ``AssertionError``) naming what is wrong otherwise. Notebooks keep the
PASS line as the cell's stored output, so nbval fails an unsolved or wrong lab.

Lines that differ between a GPU machine and a GPU-less one start with ``[gpu]`` or ``[cpu]``; the
course's nbval sanitizer (``nbval_sanitize.cfg``) hides them, so the same stored outputs grade
in both modes.
"""
from __future__ import annotations

import numpy as np

from . import device, toolchain, warp
from .problem import rel_error  # noqa: F401  (graders and labs use grade.rel_error)


class GradeError(AssertionError):
    pass


def passed(exercise: str, what: str) -> None:
    print(f"PASS {exercise}: {what}")


def fail(exercise: str, message: str) -> None:
    raise GradeError(f"{exercise} is not solved yet: {message}")


def check_close(exercise: str, got, ref, *, rtol: float, atol: float = 0.0, what: str = "",
                labels=("row", "col")) -> None:
    """Pass when every element is within ``atol + rtol*|ref|`` (NaN only where ``ref`` is NaN)."""
    got = np.asarray(got)
    ref = np.asarray(ref)
    if got.shape != ref.shape:
        fail(exercise, f"result has shape {got.shape}, expected {ref.shape}")
    if not np.allclose(got.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol,
                       equal_nan=True):
        fail(exercise, warp.format_diff(got, ref, rtol=rtol, atol=atol, equal_nan=True,
                                        index_names=labels[:got.ndim]))
    passed(exercise, what or f"{got.size} values match the reference")


def check_sass(exercise: str, source: str, kernel: str, *, expect: dict[str, int] | None = None,
               classes_zero: tuple[str, ...] = (), arches=toolchain.ARCHES, name: str | None = None,
               defines: dict | None = None) -> dict:
    """Compile ``source`` for every target and check its SASS: ``expect`` maps a base opcode to
    its exact count; ``classes_zero`` lists instruction classes that must not appear. Returns the
    per-arch opcode counters. ``name`` and ``defines``: compile as the exercise's runner does
    (same name, same defines), so that the two share one build per target."""
    counts = {}
    for arch in arches:
        try:
            b = toolchain.compile(name or f"{exercise}.cu", arch, source=source, defines=defines)
        except toolchain.CompileError as e:
            fail(exercise, f"the CUDA code does not compile for {arch}:\n{e.log}")
        if kernel not in b.kernels:
            fail(exercise, f"no kernel named {kernel!r} (found {b.kernels})")
        ops, cls = b.opcodes(kernel), b.classes(kernel)
        for op, n in (expect or {}).items():
            if ops.get(op, 0) != n:
                fail(exercise, f"{arch} SASS has {ops.get(op, 0)} {op}, expected {n}")
        for c in classes_zero:
            if cls[c]:
                fail(exercise, f"{arch} SASS has {cls[c]} {c} instruction(s), expected none")
        counts[arch] = ops
    return counts


class count_calls:
    """Count calls of ``module.name`` inside a ``with`` block (e.g. shuffles in the emulator)::

        with grade.count_calls(warp, "shfl_xor_sync") as n:
            answer(v)
        n.calls  # how many shuffles the answer used
    """

    def __init__(self, module, name: str):
        self.module, self.name, self.calls = module, name, 0

    def __enter__(self):
        self.original = getattr(self.module, self.name)

        def counted(*args, **kwargs):
            self.calls += 1
            return self.original(*args, **kwargs)

        setattr(self.module, self.name, counted)
        return self

    def __exit__(self, *exc):
        setattr(self.module, self.name, self.original)
        return False


class shifted_results:
    """Inside a ``with`` block, ``module.name`` returns its true result plus a constant drawn
    afresh for each call (``shifts.values``, in call order): an answer that computes with the
    call's results moves with the constants, by an amount the check can work out; one that
    calls it and computes its answer beside it (with NumPy) does not. :func:`check_follows`
    tells the two apart::

        with grade.shifted_results(warp, "shfl_sync", rng) as shifts:
            got = rotate_left(v)
        grade.check_follows("exercise 2", got, np.roll(v, -1) + shifts.values[0],
                            np.roll(v, -1), "warp.shfl_sync")
    """

    def __init__(self, module, name: str, rng, low: int = 1, high: int = 64):
        self.module, self.name, self.rng, self.values = module, name, rng, []
        self.low, self.high = low, high

    def __enter__(self):
        self.original = getattr(self.module, self.name)

        def shifted(*args, **kwargs):
            out = np.asarray(self.original(*args, **kwargs))
            c = int(self.rng.integers(self.low, self.high))
            self.values.append(c)
            return (out + np.asarray(c).astype(out.dtype)).astype(out.dtype)

        setattr(self.module, self.name, shifted)
        return self

    def __exit__(self, *exc):
        setattr(self.module, self.name, self.original)
        return False


def check_follows(exercise: str, got, want, unshifted, what: str, *, atol: float = 0.0) -> None:
    """After :class:`shifted_results`: an answer equal to ``unshifted`` (the true answer: the
    calls' results thrown away, the answer computed beside them) and not to ``want`` (what an
    answer computed from the shifted results gives) fails with a message that says so. Any
    other answer passes here: whether it is right is the job of the check of the unshifted run
    (:func:`check_close`), which comes first."""
    g, w, u = (np.asarray(x, dtype=np.float64) for x in (got, want, unshifted))
    if g.shape == w.shape and np.all(np.abs(g - w) <= atol):
        return
    if g.shape == u.shape and np.all(np.abs(g - u) <= atol):
        fail(exercise, f"your answer does not follow the values {what} returned: the check "
             f"shifted each call's result by a constant and your answer stayed the same, so it was "
             f"computed beside the calls (with NumPy?) and their results were thrown away. Compute "
             f"it from what {what} returns")


def mode_line(gpu_text: str, cpu_text: str) -> None:
    """Print what this machine did, tagged so that nbval compares it in neither mode."""
    print(f"[gpu] {gpu_text}" if device.gpu_available() else f"[cpu] {cpu_text}")
