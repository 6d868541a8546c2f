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

from .build import kept_lines


def _write(result_file, **obj) -> None:
    if result_file:
        with open(result_file, "w") as f:
            json.dump(obj, f)


def run_graded(code: str, exercise: str, result_file: str | None = None) -> None:
    """Execute ``code`` (the solution's graded cell) in the caller's namespace."""
    namespace = sys._getframe(1).f_globals
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
