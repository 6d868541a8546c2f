"""Child processes: run ``python -m fraglab...`` in a fresh process that finds the course, and read
back the one JSON result it prints; and the scrubbed environment of the process that runs a
learner's code while it is graded (:func:`sandbox_env`).

A child prints its result as one line ``FRAGLAB_CHILD {json}`` (:func:`emit`); the parent reads
the last such line (:func:`parse`). Everything else the child prints is free text.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from .tools import REPO_ROOT

MARKER = "FRAGLAB_CHILD "


class ChildError(RuntimeError):
    """A child process failed, timed out, or printed no result line."""


def env(**extra: str) -> dict:
    """Our environment, plus a ``PYTHONPATH`` that finds the course first, unbuffered output, and
    ``extra`` (e.g. ``CUDA_MODULE_LOADING="EAGER"``, ``FRAGLAB_MODE="cpu"``)."""
    path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, PYTHONPATH=path, PYTHONUNBUFFERED="1", **extra)


def sandbox_env(home: str) -> dict:
    """The whole environment of a process that runs a learner's code (:mod:`fraglab.grading.sandbox`):
    nothing of ours (no course path, no test switch, no grading key), its own folder as home and
    temporary folder, one thread for the numeric libraries, matplotlib without a display."""
    return {"PATH": "/usr/bin:/bin", "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg", "MPLCONFIGDIR": home}


def python_command(module: str, *args: str) -> list[str]:
    """``[python, -m, module, *args]`` with this interpreter."""
    return [sys.executable, "-m", module, *map(str, args)]


def run(cmd: list[str], *, timeout_s: float, extra_env: dict | None = None, cwd=None,
        check: bool = True) -> subprocess.CompletedProcess:
    """Run ``cmd`` with :func:`env`, capturing text output. ``check``: a non-zero exit raises
    :class:`ChildError` with the last lines of its output. ``.wall_s`` is added to the result."""
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env(**(extra_env or {})),
                           cwd=str(cwd or REPO_ROOT), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise ChildError(f"{' '.join(cmd[:4])} ... ran longer than {timeout_s} s") from None
    r.wall_s = time.perf_counter() - t0
    if check and r.returncode != 0:
        raise ChildError(f"the child exited with status {r.returncode}:\n{tail(r)}")
    return r


def tail(r: subprocess.CompletedProcess, lines: int = 8) -> str:
    """The last ``lines`` lines of a finished child's stdout and stderr."""
    return "\n".join(((r.stdout or "") + (r.stderr or "")).strip().splitlines()[-lines:])


def emit(result) -> None:
    """In a child: print the result line the parent reads."""
    print(MARKER + json.dumps(result), flush=True)


def parse(stdout: str) -> dict:
    """In the parent: the JSON after the last line that starts with :data:`MARKER`."""
    found = None
    for line in stdout.splitlines():
        if line.startswith(MARKER):
            found = line[len(MARKER):]
    if found is None:
        last = "\n".join(stdout.strip().splitlines()[-8:])
        raise ChildError(f"the child printed no line starting with {MARKER.strip()!r}; "
                         f"its last output:\n{last or '(nothing)'}")
    try:
        rec = json.loads(found)
    except json.JSONDecodeError as e:
        raise ChildError(f"the child's result line is not JSON ({e}): {found[:200]!r}") from None
    if not isinstance(rec, dict):
        raise ChildError(f"the child's result is not a JSON object: {found[:200]!r}")
    return rec
