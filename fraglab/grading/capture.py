"""Run a graded cell's check inside a graded notebook (see :mod:`fraglab.grading.build`).

The check runs in the notebook's namespace (the trusted kernel: the learner's code runs in
another process, :mod:`.sandbox`) with its output captured; afterwards only the lines a check
prints (``PASS ...``, ``[gpu] ...``, ``[cpu] ...``) are printed, so a learner's debug print or a
NumPy ``RuntimeWarning`` cannot make a correct answer fail. An exception (a
:class:`fraglab.grade.GradeError`, an error of the learner's code, a process or kernel that
ran out of time) still propagates, so nbval fails the cell. Kernels launched here have
wall-clock limits (:mod:`.limits`).

When ``result_file`` is given, the outcome is also written there for the one-line report
(:mod:`.verdict`; nbval's verdict stays the engine's, the file supplies the reason). The mutation
tests' switch (:data:`.verdict.MUTANT_ENV`) weakens a check here (:func:`_weaken`).
"""
from __future__ import annotations

import contextlib
import io
import sys
import warnings

import numpy as np

from .build import kept_lines


from .verdict import KEY_ENV, MUTANT_ENV, SEED_ENV, reason as _reason, secret, write as _write  # noqa: F401


def seed_inputs() -> None:
    """With :data:`.verdict.SEED_ENV` set (the test suite's fixture grading, through
    :func:`.run.run_notebooks`'s ``seed`` only), every ``np.random.default_rng()`` this kernel
    calls without a seed draws from a child of that seed instead of fresh entropy: the n-th such
    call the n-th child, so one notebook repeats its draws and another seed draws others. An
    explicit seed is kept. Without the variable (a learner's grading) nothing changes. The batch
    notebooks of the fixture tests call it at the end of their setup cell
    (:func:`.build.batch_notebook`), before any cell draws."""
    import os
    value = os.environ.get(SEED_ENV)
    if not value:
        return
    base, original = np.random.SeedSequence(int(value)), np.random.default_rng
    if getattr(original, "seeded_by_grading", False):
        return

    def default_rng(seed=None):
        return original(base.spawn(1)[0] if seed is None else seed)
    default_rng.seeded_by_grading = True
    np.random.default_rng = default_rng


def install_limits() -> None:
    from . import limits
    secret()
    limits.install()




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
    elif name == "in_process":
        pass                                   # read by fraglab.grading.sandbox.bind
    else:
        raise ValueError(f"unknown mutant {name!r}")


def run_graded(code: str, exercise: str, result_file: str | None = None) -> None:
    """Execute ``code`` (the solution's graded cell) in the caller's namespace."""
    namespace = sys._getframe(1).f_globals
    import os
    from . import sandbox
    install_limits()
    if os.environ.get(MUTANT_ENV):
        _weaken(os.environ[MUTANT_ENV])
    from .. import toolchain
    buf = io.StringIO()
    try:
        # ptxas waits until a check reads a build's cubin, or a pass (toolchain.deferred_ptxas):
        # an answer the interpreter fails never pays for it, one that passes still assembles
        with contextlib.redirect_stdout(buf), warnings.catch_warnings(), \
                toolchain.deferred_ptxas() as builds:
            warnings.simplefilter("ignore")
            exec(compile(code, f"<graded cell of {exercise}>", "exec"), namespace)
            toolchain.assemble_deferred(builds)
    except BaseException as e:
        out = kept_lines(buf.getvalue())
        print(out, end="")
        from .verdict import classify
        category, summary, detail = classify(e)
        _write(result_file, exercise=exercise, ok=False, error=type(e).__name__,
               reason=summary or _reason(e), output=out, category=category,
               detail=detail or "")
        raise
    finally:
        sandbox.close(result_file)
    out = kept_lines(buf.getvalue())
    print(out, end="")
    try:   # figures the learner's code left open would be shown (and compared) after the cell
        import matplotlib.pyplot as plt
        plt.close("all")
    except Exception:
        pass
    _write(result_file, exercise=exercise, ok=True, output=out)
