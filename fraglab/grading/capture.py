"""Run a graded cell's check inside a graded notebook (see :mod:`fraglab.grading.build`).

The check runs in the notebook's namespace with its output captured; afterwards only the lines a
check prints (``PASS ...``, ``[gpu] ...``, ``[cpu] ...``) are printed, so a learner's debug print
or a NumPy ``RuntimeWarning`` raised while the check calls the learner's function cannot make a
correct answer fail. An exception (a :class:`fraglab.grade.GradeError`, or any error of the
learner's code) still propagates, so nbval fails the cell. When ``result_file`` is given, the
outcome is also written there as JSON for the one-line report (nbval's verdict stays the
engine's; the file only supplies the reason).
"""
from __future__ import annotations

import contextlib
import io
import json
import sys
import warnings

import numpy as np

from .build import kept_lines


def _write(result_file, **obj) -> None:
    if result_file:
        with open(result_file, "w") as f:
            json.dump(obj, f)


#: For the course's mutation tests only: ``FRAGLAB_GRADING_MUTANT=<name>`` weakens one check
#: function in the kernel so that it always succeeds; the fixture tests must then fail.
MUTANT_ENV = "FRAGLAB_GRADING_MUTANT"


def _weaken(name: str) -> None:
    from .. import grade, problem
    from . import checks
    if name == "check_close":
        grade.check_close = lambda exercise, got, ref, *a, what="", **k: grade.passed(
            exercise, what or f"{np.asarray(got).size} values match the reference")
    elif name == "fail":
        grade.fail = lambda exercise, message: None
    elif name == "check_sass":
        original = grade.check_sass

        def check_sass(exercise, source, kernel, *a, arches=None, **k):
            from .. import toolchain
            try:
                return original(exercise, source, kernel, *a, **({"arches": arches} if arches else {}))
            except AssertionError:
                import collections
                return {arch: collections.Counter() for arch in (arches or toolchain.ARCHES)}
        grade.check_sass = check_sass
    elif name == "problem_check":
        problem.Problem.check = lambda self, case, rng, run=None: None
    elif name == "check_equal":
        checks.check_equal = lambda *a, **k: None
    else:
        raise ValueError(f"unknown mutant {name!r}")


def run_graded(code: str, exercise: str, result_file: str | None = None) -> None:
    """Execute ``code`` (the solution's graded cell) in the caller's namespace."""
    namespace = sys._getframe(1).f_globals
    import os
    if os.environ.get(MUTANT_ENV):
        _weaken(os.environ[MUTANT_ENV])
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(code, f"<graded cell of {exercise}>", "exec"), namespace)
    except BaseException as e:
        out = kept_lines(buf.getvalue())
        print(out, end="")
        _write(result_file, exercise=exercise, ok=False, error=type(e).__name__,
               reason=str(e).strip() or type(e).__name__, output=out)
        raise
    out = kept_lines(buf.getvalue())
    print(out, end="")
    try:   # figures the learner's code left open would be shown (and compared) after the cell
        import matplotlib.pyplot as plt
        plt.close("all")
    except Exception:
        pass
    _write(result_file, exercise=exercise, ok=True, output=out)
