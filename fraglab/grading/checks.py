"""Helpers for graded cells that *run* a learner's kernel, in both modes.

On a GPU the kernel runs there; without one it runs on the PTX interpreter (:mod:`fraglab.ptx`),
whose race, uninitialised-read and bounds checks then fail a kernel that a GPU might run "correctly"
by luck. Every helper raises :class:`fraglab.grade.GradeError` through :func:`fraglab.grade.fail`
and returns a short text of what was checked, for the cell's mode line.

On a GPU every kernel is run twice: on the GPU, and then again on the interpreter
(:func:`each_mode`, and :func:`check_cases` over the problem's small cases), so a wrong answer
fails in both modes.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterable

import numpy as np

from .. import device, grade, ptx, toolchain
from ..problem import Case, Problem, ProblemFailure


#: True while :func:`each_mode` or :func:`check_cases` re-runs a kernel on the interpreter on a
#: GPU machine (so :func:`where` does not say "no GPU").
_also_interpreted = False

INTERPRETER = "on the PTX interpreter"


def where() -> str:
    if device.gpu_available():
        return f"on {device.name()}"
    return INTERPRETER if _also_interpreted else f"{INTERPRETER} (no GPU)"


@contextmanager
def on_interpreter():
    """Kernels launched in this block run on the PTX interpreter, also on a GPU machine."""
    global _also_interpreted
    was = _also_interpreted
    _also_interpreted = True
    try:
        with device.forced_mode("cpu"):
            yield
    finally:
        _also_interpreted = was


def each_mode(body: Callable[[], object]) -> list:
    """Call ``body()`` where kernels run here; on a GPU, then once more with kernels on the PTX
    interpreter, whose race, uninitialised-read and bounds checks fail undefined behaviour that
    the GPU may have run correctly by luck. ``body`` must create its device arrays itself
    (:func:`fraglab.launch.to_device`, :func:`fraglab.launch.poisoned`), and may size its inputs
    by :func:`fraglab.device.gpu_available` (False on the interpreter). Returns the results of
    ``body``, one per mode; :func:`places` says where they ran."""
    if not device.gpu_available():
        return [body()]
    # the interpreter first: an out-of-bounds access is reported there before it can reach the
    # GPU, where it would leave the process's CUDA context broken for every later check
    with on_interpreter():
        interpreted = body()
    return [body(), interpreted]


def places() -> str:
    """Where :func:`each_mode` runs kernels here, e.g. ``"on NVIDIA H100 and on the PTX
    interpreter"``."""
    return f"{where()} and {INTERPRETER}" if device.gpu_available() else where()


def run_checked(exercise: str, what: str, fn: Callable, *args, **kwargs):
    """``fn(*args, **kwargs)``, turning an interpreter's diagnostic or a launch error into a
    graded failure that names ``what`` was being run."""
    try:
        return fn(*args, **kwargs)
    except ptx.PTXError as e:
        grade.fail(exercise, f"{what} on the PTX interpreter: {type(e).__name__}: {e}")
    except (ValueError, TypeError, KeyError) as e:
        grade.fail(exercise, f"{what}: {type(e).__name__}: {e}")
    except toolchain.CompileError as e:
        grade.fail(exercise, f"the CUDA code does not compile for {e.arch}:\n{e.log}")


def check_cases(exercise: str, problem: Problem, run: Callable, rng, *,
                cases: Iterable[Case] | None = None, repeats: int = 2,
                interpreter_cases: Iterable[Case] | None = None) -> str:
    """Check ``run`` against ``problem``'s reference over its cases for this machine (all on a
    GPU, the small ones on the interpreter), each non-edge case ``repeats`` times on fresh random
    inputs. On a GPU the cases that are not ``slow`` then run once more on the PTX interpreter
    (:func:`on_interpreter`), or ``interpreter_cases`` where given: ``run`` must move its inputs
    with :func:`fraglab.launch.to_device` (or choose its backend by ``device.gpu_available()``).
    Outputs are poisoned by the wrappers. Returns e.g. ``"4 random inputs and 2 edge cases
    (rows7, inf_nan) on the PTX interpreter (no GPU)"``, or on a GPU ``"... on NVIDIA H100 and 3
    cases (random, rows7, inf_nan) on the PTX interpreter"``."""
    cases = tuple(problem.cases_here() if cases is None else cases)
    small, refused = (), ""
    if device.gpu_available():
        # cases this GPU cannot run (a T4 and the FA-2 kernel, any GPU but Hopper and sm_90a):
        # the interpreter runs them instead, and the line says why (fraglab.runs_where's lab box)
        why = [w for ok, w in map(problem.supported, cases) if not ok]
        if why:
            refused = (f"; {len(why)} of the {len(cases)} cases not on {device.name()}: "
                       f"{why[0]}")
            if interpreter_cases is None:
                interpreter_cases = tuple(c for c in cases if not c.slow)
            cases = tuple(c for c in cases if problem.supported(c)[0])
        # the interpreter first: an out-of-bounds access is reported there before it can reach
        # the GPU, where it would leave the process's CUDA context broken for later checks
        small = tuple(c for c in cases if not c.slow) if interpreter_cases is None \
            else tuple(interpreter_cases)
        with on_interpreter():
            _run_cases(exercise, problem, run, rng, small, 1)
    n_random, n_edge = _run_cases(exercise, problem, run, rng, cases, repeats)
    names = ", ".join(c.name for c in cases)
    text = f"{n_random} random inputs and {n_edge} edge cases ({names}) {where()}" if cases else ""
    if small:
        text += (f"{' and ' if cases else ''}{len(small)} case{'s' * (len(small) != 1)} "
                 f"({', '.join(c.name for c in small)}) {INTERPRETER}")
    return text + refused


def _run_cases(exercise: str, problem: Problem, run: Callable, rng, cases: tuple,
               repeats: int) -> tuple[int, int]:
    """Check every case (non-edge ones ``repeats`` times) where kernels run now; returns how
    many random and edge checks ran. The edge cases run first: they are where a subtle mistake
    shows (rows past exp's overflow, masked rows, a ring's last slot) and an answer wrong
    everywhere fails on them as well, so a wrong answer stops at its first failure sooner."""
    import warnings
    n_random = n_edge = 0
    on = "" if device.gpu_available() else f" {INTERPRETER}"
    for case in sorted(cases, key=lambda c: not c.edge):     # stable: each kind in its order
        for _ in range(1 if case.edge else repeats):
            try:
                with warnings.catch_warnings():      # inf/NaN edge cases warn in the reference
                    warnings.simplefilter("ignore", RuntimeWarning)
                    problem.check(case, rng, run=run)
            except ProblemFailure as e:
                grade.fail(exercise, f"case {case.name} {dict(case.params)}{on}: {e}")
            except ptx.PTXError as e:
                grade.fail(exercise, f"case {case.name}{on}: {type(e).__name__}: {e}")
            except toolchain.CompileError as e:     # the source is compiled at its first run
                grade.fail(exercise, f"the CUDA code does not compile for {e.arch}:\n{e.log}")
            n_edge += case.edge
            n_random += not case.edge
    return n_random, n_edge


def check_equal(exercise: str, got, want, what: str, labels=("row", "col"), rtol: float = 0.0,
                atol: float = 0.0) -> None:
    """Fail with a table of the wrong elements unless ``got`` matches ``want`` (NaN, a poisoned
    element never written, matches only NaN)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        grade.fail(exercise, f"{what}: shape {got.shape}, expected {want.shape}")
    if not np.any(rtol) and not np.any(atol):     # atol may be an array (per element)
        same = np.array_equal(got.astype(np.float64), want.astype(np.float64), equal_nan=True)
    else:
        same = np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol,
                           equal_nan=True)
    if not same:
        from .. import warp
        grade.fail(exercise, f"{what}:\n" + warp.format_diff(got, want, rtol=rtol, atol=atol,
                                                             equal_nan=True,
                                                             index_names=labels[:got.ndim]))
