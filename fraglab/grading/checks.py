"""Helpers for graded cells that *run* a learner's kernel, in both modes.

On a GPU the kernel runs there; without one it runs on the PTX interpreter (:mod:`fraglab.ptx`),
whose race, uninitialised-read and bounds checks then fail a kernel that a GPU might run "correctly"
by luck. Every helper raises :class:`fraglab.grade.GradeError` through :func:`fraglab.grade.fail`
and returns a short text of what was checked, for the cell's mode line.
"""
from __future__ import annotations

from typing import Callable, Iterable

import numpy as np

from .. import device, grade, ptx
from ..problem import Case, Problem, ProblemFailure


def where() -> str:
    return f"on {device.name()}" if device.gpu_available() else "on the PTX interpreter (no GPU)"


def run_checked(exercise: str, what: str, fn: Callable, *args, **kwargs):
    """``fn(*args, **kwargs)``, turning an interpreter's diagnostic or a launch error into a
    graded failure that names ``what`` was being run."""
    try:
        return fn(*args, **kwargs)
    except ptx.PTXError as e:
        grade.fail(exercise, f"{what} on the PTX interpreter: {type(e).__name__}: {e}")
    except (ValueError, TypeError, KeyError) as e:
        grade.fail(exercise, f"{what}: {type(e).__name__}: {e}")


def check_cases(exercise: str, problem: Problem, run: Callable, rng, *,
                cases: Iterable[Case] | None = None, repeats: int = 2) -> str:
    """Check ``run`` against ``problem``'s reference over its cases for this machine (all on a
    GPU, the small ones on the interpreter), each non-edge case ``repeats`` times on fresh random
    inputs. Outputs are poisoned by the wrappers. Returns e.g. ``"4 random inputs and 2 edge cases
    (rows7, inf_nan) on the PTX interpreter (no GPU)"``."""
    import warnings
    cases = tuple(problem.cases_here() if cases is None else cases)
    n_random = n_edge = 0
    for case in cases:
        for _ in range(1 if case.edge else repeats):
            try:
                with warnings.catch_warnings():      # inf/NaN edge cases warn in the reference
                    warnings.simplefilter("ignore", RuntimeWarning)
                    problem.check(case, rng, run=run)
            except ProblemFailure as e:
                grade.fail(exercise, f"case {case.name} {dict(case.params)}: {e}")
            except ptx.PTXError as e:
                grade.fail(exercise, f"case {case.name} on the PTX interpreter: "
                           f"{type(e).__name__}: {e}")
            n_edge += case.edge
            n_random += not case.edge
    names = ", ".join(c.name for c in cases)
    return f"{n_random} random inputs and {n_edge} edge cases ({names}) {where()}"


def check_equal(exercise: str, got, want, what: str, labels=("row", "col"), rtol: float = 0.0,
                atol: float = 0.0) -> None:
    """Fail with a table of the wrong elements unless ``got`` matches ``want`` (NaN, a poisoned
    element never written, matches only NaN)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        grade.fail(exercise, f"{what}: shape {got.shape}, expected {want.shape}")
    if rtol == 0 and atol == 0:
        same = np.array_equal(got.astype(np.float64), want.astype(np.float64), equal_nan=True)
    else:
        same = np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol,
                           equal_nan=True)
    if not same:
        from .. import warp
        grade.fail(exercise, f"{what}:\n" + warp.format_diff(got, want, rtol=rtol, atol=atol,
                                                             equal_nan=True,
                                                             index_names=labels[:got.ndim]))
