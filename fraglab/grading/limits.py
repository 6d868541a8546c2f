"""Wall-clock limits on the kernels a graded check launches (installed in the graded notebook's
kernel by :func:`install`, once): a kernel that never finishes fails its exercise within the
limit, saying so, instead of holding grading until nbval's cell limit.

* **On a GPU** every :func:`fraglab.launch.launch` is followed by a wait on an event polled
  until :data:`GPU_LIMIT_S` (``"the kernel K did not finish within 20 s: a deadlock?"``), except
  behind :mod:`fraglab.bench`'s gate, whose closed stream is meant to wait. The check's own
  waits (``sync=True``, copies to the host) then return at once.
* **On the PTX interpreter** a deadlock is the interpreter's own report
  (:class:`fraglab.ptx.Deadlock`: every warp spins or waits, and which line); a kernel that
  runs on and on without repeating itself meets the interpreter's instruction budget, or this
  module's :data:`INTERPRETER_LIMIT_S`, whichever comes first.
"""
from __future__ import annotations

import signal
import sys
import threading
import time

GPU_LIMIT_S = 20.0
INTERPRETER_LIMIT_S = 120.0

_installed = None              # the launch paths as they were, while installed


class KernelTimeout(BaseException):
    """A kernel did not finish within its limit (no check's ``except Exception`` takes it)."""


def _name(fn) -> str:
    return str(getattr(fn, "name", None) or getattr(fn, "kernel", "") or "launched")


def _gate_closed() -> bool:
    from .. import bench
    gate = getattr(bench, "_Gate", None)
    g = getattr(gate, "_instance", None) if gate else None
    return g is not None and g.flags[0] == 0 and g.flags[1] == 0


def wait_gpu(stream, what: str, limit_s: float | None = None) -> None:
    """Wait until the work queued on ``stream`` is done, or raise :class:`KernelTimeout`
    (after ``limit_s``, default :data:`GPU_LIMIT_S`)."""
    import cupy as cp
    limit_s = GPU_LIMIT_S if limit_s is None else limit_s
    ev = cp.cuda.Event(block=False, disable_timing=True)
    ev.record(stream if stream is not None else cp.cuda.get_current_stream())
    end = time.monotonic() + limit_s
    while not ev.done:
        if time.monotonic() > end:
            raise KernelTimeout(f"the kernel {what} did not finish within {limit_s:g} s: "
                                "a deadlock?")
        time.sleep(0.0002)


class _alarm:
    """Raise :class:`KernelTimeout` in the main thread after ``seconds`` (nests: inner ones are
    no-ops)."""
    depth = 0

    def __init__(self, seconds: float, what: str):
        self.seconds, self.what = seconds, what

    def __enter__(self):
        _alarm.depth += 1
        self.armed = _alarm.depth == 1 and threading.current_thread() is threading.main_thread()
        if self.armed:
            def ring(signum, frame):
                raise KernelTimeout(f"the kernel {self.what} did not finish within "
                                    f"{self.seconds:g} s on the PTX interpreter: an endless loop?")
            self.old = signal.signal(signal.SIGALRM, ring)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc):
        _alarm.depth -= 1
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.old)
        return False


class _OnImport:
    """Patch the interpreter's launch when :mod:`fraglab.ptx.program` is first imported (the
    interpreter costs half a second to import: a Python exercise's check never needs it)."""

    def find_spec(self, name, path=None, target=None):
        if name != "fraglab.ptx.program":
            return None
        import importlib.util
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        real = spec.loader.exec_module

        def exec_module(module):
            real(module)
            _patch_interpreter(module)
        spec.loader.exec_module = exec_module
        return spec


def _patch_interpreter(program) -> None:
    global _real_call
    if _real_call is not None:
        return
    _real_call = real_call = program.KernelFunction.__call__

    def call_with_limit(self, *args, **kwargs):
        with _alarm(INTERPRETER_LIMIT_S, self.name):
            return real_call(self, *args, **kwargs)
    program.KernelFunction.__call__ = call_with_limit


_real_call = None


def install() -> None:
    """Wrap the launch paths of this process (the graded notebook's kernel) with the limits."""
    global _installed
    if _installed:
        return
    from .. import launch

    real_launch = launch.launch
    _installed = real_launch

    def real_sync(stream):
        import cupy as cp
        (stream if stream is not None else cp.cuda.get_current_stream()).synchronize()

    def launch_with_limit(fn, grid, block, args, shared_mem=0, *, sync=False, stream=None):
        if launch.interpreted():
            return real_launch(fn, grid, block, args, shared_mem, sync=sync, stream=stream)
        real_launch(fn, grid, block, args, shared_mem, sync=False, stream=stream)
        if not _gate_closed():
            wait_gpu(stream, _name(fn))
        if sync:
            real_sync(stream)
    launch.launch = launch_with_limit
    if "fraglab.ptx.program" in sys.modules:
        _patch_interpreter(sys.modules["fraglab.ptx.program"])
    else:
        sys.meta_path.insert(0, _OnImport())


def uninstall() -> None:
    """Put the launch paths back (for tests in a process that goes on)."""
    global _installed, _real_call
    if not _installed:
        return
    from .. import launch
    launch.launch = _installed
    _installed = None
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _OnImport)]
    if _real_call is not None:
        sys.modules["fraglab.ptx.program"].KernelFunction.__call__ = _real_call
        _real_call = None
