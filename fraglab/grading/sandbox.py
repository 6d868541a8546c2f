"""The grader's side of the process that runs a learner's Python (``sandbox_child.py``).

Which process holds what:

* the **graded notebook's kernel** (nbval's, started by :mod:`.run`) is trusted: it runs the
  solution's cells, draws the inputs, holds the expected values, runs the checks and writes the
  verdict file (:mod:`.capture`). No line of the learner's text runs in it: a CUDA region becomes
  the text of a string (:mod:`.build`), and each cell that holds a Python region of the graded
  exercise becomes a call of :func:`bind`, with the cell's text as a string;
* one **child process per exercise** (:class:`Child`) runs that text: a fresh interpreter
  (``python -I -S``), a scrubbed environment (:func:`fraglab.child.sandbox_env`: no test
  switches, no key), a folder of its own outside the repository, the walls of :mod:`.jail`
  (no course, no solutions, no verdict files, no other process, no network), and only the
  names :mod:`.exposed` grants the exercise. It starts fresh for every exercise (and for every
  answer the test suite grades in one notebook), and is killed with its session.

What crosses, in the format of :mod:`.wire` (plain data, checked; no pickles), over two pipes:

=============================  ===============================================================
grader -> child                child -> grader
=============================  ===============================================================
``setup`` (names the cells     ``ready`` (the walls that stand)
may use)
``exec`` (a cell's text, the   ``done`` (each name: a function, plain data, or why it cannot
names the solution's cell      cross) or ``error`` (type, message, the learner's line)
defines)
``call`` (a function's name,   ``done`` (the plain-data result) or ``error``
plain-data arguments)
``reply`` / ``raise``          ``request``: call a service of :mod:`.exposed`, or call / read
(answers to a request)         an attribute of an object the grader handed out (a handle)
=============================  ===============================================================

:func:`bind` puts, in the kernel's namespace, a *proxy* for each function the cell defines (a
call sends ``call`` and waits) and the value of each plain-data name. Every wait has a limit of
:data:`LIMIT_S` seconds of the child's time (of the time spent serving its requests, only
:data:`SERVICE_S` a request counts: a slow compile is the grader's, a loop of requests the child's);
a child that dies, loops or breaks the format fails its exercise at once, with a reason that
names the exercise, the learner's cell and what happened (:class:`ExerciseProcessError`, which
no check's ``except Exception`` swallows).
"""
from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from . import exposed, limits, verdict, wire

CHILD = Path(__file__).with_name("sandbox_child.py")
#: Seconds of its own time a child may take for one cell or one call.
LIMIT_S = 20.0
if os.environ.get(verdict.LIMIT_ENV):        # the test suite's, through the grader's API only
    LIMIT_S = min(LIMIT_S, float(os.environ[verdict.LIMIT_ENV]))
#: Seconds of each service call counted against the child's limit (the rest is the grader's).
SERVICE_S = 0.05
#: Seconds a child may take to start (an interpreter and NumPy, matplotlib for a figure).
START_S = 60.0
#: The test suite's mutant (:data:`.verdict.MUTANT_ENV` ``=in_process``, set only through the
#: grader's own API): run the learner's cells in the kernel, as before this module existed.
IN_PROCESS = "in_process"

BUILTIN_ERRORS = {c.__name__: c for c in (
    ValueError, TypeError, KeyError, IndexError, ZeroDivisionError, ArithmeticError,
    OverflowError, FloatingPointError, NotImplementedError, RuntimeError, AttributeError,
    NameError, AssertionError, LookupError, PermissionError, ImportError, ModuleNotFoundError,
    OSError, FileNotFoundError, RecursionError)}


class LearnerError(Exception):
    """An exception of the learner's code of a type the grader does not know by name."""


class ExerciseProcessError(BaseException):
    """The child died, ran out of time, or broke the format: the exercise fails as a whole."""


def _libs() -> list[str]:
    """Folders the child imports NumPy and matplotlib from (read-only there)."""
    import importlib.util
    out = []
    for name in ("numpy", "matplotlib"):         # found, not imported (matplotlib costs 0.5 s)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            out.append(str(Path(spec.origin).resolve().parent.parent))
    return list(dict.fromkeys(out))


def figure_content(fig) -> dict:
    """What a learner's code may read of a matplotlib figure, as plain data."""
    axes = []
    for ax in fig.axes:
        leg = ax.get_legend()
        axes.append({
            "position": list(ax.get_position().bounds), "title": ax.get_title(loc="left")
            or ax.get_title(), "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
            "xlim": list(ax.get_xlim()), "ylim": list(ax.get_ylim()),
            "lines": [{"x": wire.encode(np.asarray(l.get_xdata(), float)),
                       "y": wire.encode(np.asarray(l.get_ydata(), float)), "label": l.get_label(),
                       "color": l.get_color(), "linestyle": l.get_linestyle(),
                       "linewidth": l.get_linewidth()} for l in ax.get_lines()],
            "texts": [{"x": t.get_position()[0], "y": t.get_position()[1], "text": t.get_text()}
                      for t in ax.texts],
            "legend": None if leg is None else [t.get_text() for t in leg.get_texts()]})
    return {"size": list(fig.get_size_inches()), "axes": axes}


class Child:
    """One exercise's process. ``ns`` is the kernel's namespace (where services are looked up at
    each call, so that a check's patch of a course function sees the calls)."""

    def __init__(self, exercise: str, lab: str, regions, ns: dict, context, hidden=(),
                 checks=(), code: str = ""):
        from .. import child
        self.exercise, self.lab, self.regions, self.ns = exercise, lab, tuple(regions), ns
        self.services = exposed.services(lab, regions)
        self.handles: list[tuple[object, bool]] = []
        self.ids, self.dead = 0, None
        self.dir = tempfile.mkdtemp(prefix="fraglab-exercise-")
        self.log = open(os.path.join(self.dir, ".output"), "wb")
        to_child, self.w = os.pipe()
        self.r, from_child = os.pipe()
        libs = _libs()
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-B", str(CHILD), json.dumps(libs), str(to_child),
             str(from_child)], pass_fds=(to_child, from_child), stdin=subprocess.DEVNULL,
            stdout=self.log, stderr=subprocess.STDOUT, cwd=self.dir,
            env=child.sandbox_env(self.dir), start_new_session=True)
        os.close(to_child)
        os.close(from_child)
        os.set_blocking(self.w, False)
        self.buf = b""
        names, figures = self._names(context, hidden, code)
        for name in checks:
            names.setdefault(name, {"kind": "refused", "why": f"`{name}` belongs to a check, "
                                    "which runs in another process"})
        course = sorted(m for m in sys.modules if m.partition(".")[0] == "fraglab")
        self._send({"op": "setup", "exercise": exercise, "workdir": self.dir, "names": names,
                    "figures": figures, "course_modules": course})
        msg = self._recv(time.monotonic() + START_S, "starting the process for your code")
        if msg.get("op") != "ready":
            self._broken(f"it answered {msg.get('op')!r} to its setup")
        self.layers = msg.get("layers", [])

    # ---- the names the learner's cells see -----------------------------------------------------
    def _names(self, context, hidden, code: str) -> tuple[dict, bool]:
        """What the child gets for each name of ``context``; a figure only where ``code`` names
        it (rebuilding one costs the child matplotlib)."""
        import types
        out, figures = {}, False
        for name in context:
            if name not in self.ns or name.startswith("_"):
                continue
            value = self.ns[name]
            if name in hidden:
                out[name] = {"kind": "refused", "why": f"`{name}` holds what {self.exercise} "
                             "asks you to work out"}
            elif isinstance(value, types.ModuleType):
                out[name] = self._module(name, value)
            elif type(value).__name__ == "Figure" and hasattr(value, "axes"):
                if not re.search(rf"\b{re.escape(name)}\b", code):
                    out[name] = {"kind": "refused", "why": f"the figure `{name}` goes only to "
                                 "code that names it"}
                    continue
                try:
                    out[name] = {"kind": "data", "value": {"__figure__": figure_content(value)}}
                    figures = True
                except (TypeError, ValueError, wire.WireError):
                    out[name] = {"kind": "refused", "why": f"the figure `{name}` does not cross "
                                 "to the process that runs your code"}
            else:
                try:
                    enc = wire.encode(value)
                    if len(json.dumps(enc)) > 16 << 20:
                        raise wire.WireError("too large")
                    out[name] = {"kind": "data", "value": enc}
                except (wire.WireError, TypeError, ValueError):
                    out[name] = {"kind": "refused", "why": f"`{name}` is an object of the "
                                 f"notebook ({type(value).__name__}) that does not cross to the "
                                 "process that runs your code"}
        for alias in self.services:
            if alias not in out and isinstance(self.ns.get(alias), types.ModuleType):
                out[alias] = self._module(alias, self.ns[alias])
        return out, figures

    def _module(self, name: str, mod) -> dict:
        if not mod.__name__.startswith("fraglab"):
            return {"kind": "module", "module": mod.__name__}
        if name not in self.services:
            return {"kind": "refused", "why": f"the course's `{name}` is not available to your "
                    f"code while {self.exercise} is graded (its checks run in another process)"}
        members = {}
        for attr in self.services[name]:
            obj = getattr(mod, attr)
            if isinstance(obj, type) and issubclass(obj, BaseException):
                members[attr] = {"kind": "exception"}
            elif callable(obj):
                members[attr] = {"kind": "function"}
            else:
                members[attr] = {"kind": "value", "value": wire.encode(obj)}
        return {"kind": "facade", "members": members}

    # ---- handles -------------------------------------------------------------------------------
    def _issue(self, obj, callable_ok: bool):
        self.handles.append((obj, callable_ok))
        return [len(self.handles) - 1, type(obj).__name__]

    def _issue_argument(self, obj):
        """Objects the check itself passes to the learner's function (a launcher, ...)."""
        import types
        if isinstance(obj, (types.ModuleType, type)):
            return None
        return self._issue(obj, callable(obj))

    def _issue_result(self, obj):
        """Objects a service returns: only those whose class :data:`.exposed.ATTRIBUTES` lists."""
        return self._issue(obj, False) if exposed.attributes(obj) else None

    def _resolve(self, n: int, _type: str):
        if not 0 <= n < len(self.handles):
            raise wire.WireError(f"a handle {n} that the grader never gave out")
        return self.handles[n][0]

    # ---- the pipe ------------------------------------------------------------------------------
    def _send(self, msg: dict) -> None:
        """Write one message; a child that stops reading (its code holds the pipe) fails at the
        limit, as one that stops answering does."""
        data = wire.dumps(msg)
        deadline = time.monotonic() + LIMIT_S
        try:
            while data:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._timeout("receiving work")
                _, ready, _ = select.select([], [self.w], [], left)
                if ready:
                    data = data[os.write(self.w, data[:1 << 16]):]
        except (BrokenPipeError, OSError):
            self._died("receiving work")

    def _recv(self, deadline: float, doing: str) -> dict:
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self._timeout(doing)
            ready, _, _ = select.select([self.r], [], [], left)
            if not ready:
                continue
            data = os.read(self.r, 1 << 20)
            if not data:
                self._died(doing)
            self.buf += data
            if len(self.buf) > wire.MAX_LINE:
                self._broken("it sent a line longer than the format allows")
        line, self.buf = self.buf.split(b"\n", 1)
        try:
            return wire.loads(line)
        except wire.WireError as e:
            self._broken(f"it sent {e}")

    def _fail(self, text: str):
        self.dead = ExerciseProcessError(f"{self.exercise}: {text}")
        self.close()
        raise self.dead

    def _died(self, doing: str):
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        how = (f"was killed by signal {signal.Signals(-code).name}" if code is not None and code < 0
               else f"exited with status {code}" if code is not None else "closed its pipe")
        self._fail(f"the process running your code {how} while {doing}: does your code call "
                   "os._exit or sys.exit, or crash?" + self._tail())

    def _timeout(self, doing: str):
        self._fail(f"your code did not finish within {LIMIT_S:g} s while {doing}: an endless "
                   "loop?")

    def _broken(self, what: str):
        self._fail(f"the process running your code broke the grading format: {what}")

    def _tail(self) -> str:
        try:
            self.log.flush()
            text = Path(self.dir, ".output").read_text(errors="replace").strip()
        except OSError:
            return ""
        return f" Its last output: {text[-600:]}" if text else ""

    # ---- work ----------------------------------------------------------------------------------
    def _wait(self, mid: str, doing: str):
        budget = LIMIT_S
        while True:
            t0 = time.monotonic()
            msg = self._recv(t0 + budget, doing)
            budget -= time.monotonic() - t0
            op = msg["op"]
            if op == "request":
                t1 = time.monotonic()
                self._serve(msg)
                # a quick service counts against the child (a loop of requests is its loop); of
                # a slow one (a compile), only the first SERVICE_S
                budget -= min(time.monotonic() - t1, SERVICE_S)
            elif msg.get("id") != mid or op not in ("done", "error"):
                self._broken(f"an answer {op!r} to nothing it was asked")
            elif op == "done":
                return msg
            else:
                raise self._error(msg)

    def _error(self, msg) -> Exception:
        t, text = str(msg.get("type")), str(msg.get("message"))
        cls = BUILTIN_ERRORS.get(t) or self._exception(t)
        e = cls(text) if cls is not None else LearnerError(f"{t}: {text}")
        e.learner_where = str(msg.get("where") or "")
        return e

    def _exception(self, name: str):
        for alias, names in self.services.items():
            if name in names:
                obj = getattr(self.ns[alias], name, None)
                if isinstance(obj, type) and issubclass(obj, Exception):
                    return obj
        return None

    def _serve(self, msg: dict) -> None:
        rid, kind = msg.get("id"), msg.get("kind")
        try:
            args = wire.decode(msg.get("args", []), ref=self._resolve)
            kwargs = wire.decode(msg.get("kwargs", {}), ref=self._resolve)
            if not isinstance(args, list) or not isinstance(kwargs, dict) or not all(
                    isinstance(k, str) for k in kwargs):
                raise wire.WireError("arguments must be a list and a dict of names")
            if kind == "call":
                alias, _, name = str(msg.get("service")).partition(".")
                if name not in self.services.get(alias, ()):
                    raise PermissionError(f"grading refused `{alias}.{name}`: not a service of "
                                          f"{self.exercise}")
                value = getattr(self.ns[alias], name)(*args, **kwargs)
            elif kind == "call_ref":
                obj, ok = self.handles[self._index(msg.get("ref"))]
                if not ok:
                    raise PermissionError(f"grading refused to call a {type(obj).__name__}")
                value = obj(*args, **kwargs)
            elif kind == "getattr":
                obj, _ = self.handles[self._index(msg.get("ref"))]
                name = str(msg.get("name"))
                if name not in exposed.attributes(obj):
                    raise AttributeError(f"grading refused `{type(obj).__name__}.{name}`: "
                                         "not an attribute your code may read here")
                value = getattr(obj, name)
                if callable(value):
                    self._send({"op": "reply", "id": rid,
                                "value": {"__ref__": self._issue(value, True)}})
                    return
            else:
                raise wire.WireError(f"a request of kind {kind!r}")
            out = wire.encode(value, ref=self._issue_result)
        except wire.WireError as e:
            self._send({"op": "raise", "id": rid, "type": "TypeError",
                        "message": f"grading refused: {e}"})
            return
        except Exception as e:                 # the course's error, for the learner's code
            self._send({"op": "raise", "id": rid, "type": type(e).__name__, "message": str(e)})
            return
        self._send({"op": "reply", "id": rid, "value": out})

    def _index(self, n) -> int:
        if type(n) is not int or not 0 <= n < len(self.handles):
            raise wire.WireError(f"a handle {n!r} that the grader never gave out")
        return n

    def _next(self) -> str:
        if self.dead is not None:
            raise self.dead
        self.ids += 1
        return f"p{self.ids}"

    def exec_cell(self, code: str, filename: str, names, doing: str) -> dict:
        mid = self._next()
        self._send({"op": "exec", "id": mid, "code": code, "filename": filename,
                    "names": list(names)})
        return self._wait(mid, doing)["names"]

    def call(self, name: str, args, kwargs):
        mid = self._next()
        try:
            enc = {"args": wire.encode(list(args), ref=self._issue_argument),
                   "kwargs": wire.encode(dict(kwargs), ref=self._issue_argument)}
        except wire.WireError as e:
            raise TypeError(f"grading cannot pass this argument to {name}: {e}") from None
        self._send({"op": "call", "id": mid, "name": name, **enc})
        msg = self._wait(mid, f"running {name}")
        try:
            return wire.decode(msg.get("value"), ref=self._resolve)
        except wire.WireError as e:
            raise TypeError(f"grading refused the value {name} returned: {e}") from None

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        for fd in (self.r, self.w):
            try:
                os.close(fd)
            except OSError:
                pass
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


#: Live children, by session (the verdict file's name: one per graded answer).
_SESSIONS: dict[str, Child] = {}


def _proxy(child: Child, name: str):
    def proxy(*args, **kwargs):
        return child.call(name, args, kwargs)
    proxy.__name__ = proxy.__qualname__ = name
    proxy.__doc__ = f"{name} of your cell, run in the process that runs your code"
    return proxy


def hidden_names(lab: str, regions, names) -> set:
    """Names of the notebook that hold what the exercise asks for (its references in
    :mod:`.shortcuts`), which its process does not get."""
    from .shortcuts import REFERENCES
    pats = [p for r in regions for p, _ in REFERENCES.get(lab, {}).get(r, ())]
    return {n for n in names if any(re.fullmatch(p, n) or re.search(p, n) for p in pats)}


def bind(ns: dict, *, exercise: str, lab: str, regions, cell: int, code: str, names,
         context, session: str, checks=()) -> None:
    """Run a cell of the learner (``code``) in the exercise's child and bind, in ``ns``, a proxy
    for each function and the value of each plain-data name of ``names``. On failure the
    verdict file (``session``) gets the reason, naming the learner's cell. ``context``: names of
    the notebook's earlier cells the child gets (as :meth:`Child._names` allows); ``checks``:
    names of the graded cells, which the child sees as stand-ins that refuse."""
    limits.install()
    verdict.secret()
    where = f"your cell of exercise region {', '.join(regions)} (notebook cell {cell})"
    if os.environ.get(verdict.MUTANT_ENV) == IN_PROCESS:
        exec(compile(code, f"<exercise cell {cell}>", "exec"), ns)
        return
    for name in names:                       # nothing of an answer graded before stays bound
        ns.pop(name, None)
    try:
        child = _SESSIONS.get(session)
        if child is None:
            child = _SESSIONS[session] = Child(exercise, lab, regions, ns, context,
                                               hidden_names(lab, regions, context), checks, code)
        got = child.exec_cell(code, f"<exercise {', '.join(regions)}, notebook cell {cell}>",
                              names, f"running {where}")
        for name in names:
            kind = got.get(name, {}).get("kind")
            if kind == "function":
                ns[name] = _proxy(child, name)
            elif kind == "data":
                ns[name] = wire.decode(got[name]["value"], ref=child._resolve)
            elif kind == "missing":
                raise NameError(f"{where} does not define {name}")
            else:
                raise TypeError(f"grading refused the value of {name} from {where}: "
                                f"{got.get(name, {}).get('why', 'not plain data')}")
    except BaseException as e:
        verdict.write_failure(session, exercise, e, where, isinstance(e, ExerciseProcessError))
        raise


def close(session: str) -> None:
    child = _SESSIONS.pop(session, None)
    if child is not None:
        child.close()
