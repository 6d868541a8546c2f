"""Is there a GPU, which one, and what can it do? Also the course's two modes.

Mode ``gpu`` runs CUDA kernels; mode ``cpu`` (no GPU, or ``FRAGLAB_MODE=cpu``) compiles them, reads
their SASS and runs the NumPy warp emulator instead, and says plainly what it did not run.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from functools import lru_cache


class GPUUnavailable(RuntimeError):
    """Raised by code that needs a CUDA GPU when none is visible (or FRAGLAB_MODE=cpu)."""


@lru_cache(maxsize=None)
def _probe() -> tuple[bool, str]:
    try:
        import cupy
    except ImportError as e:
        return False, f"CuPy is not installed ({e})"
    if not _driver_present():
        return False, "no NVIDIA driver/GPU found"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # a driver too old for this CuPy, a broken install, ...
        return False, f"{type(e).__name__}: {e}".strip()
    if n == 0:
        return False, "CUDA driver found, but no GPU"
    return True, ""


def _driver_present() -> bool:
    """Is the NVIDIA driver's library loadable? Without it CUDA reports "driver version is
    insufficient", which misleads on a machine that has no GPU at all."""
    import ctypes
    import ctypes.util
    for name in ("libcuda.so.1", "libcuda.so", ctypes.util.find_library("cuda") or "",
                 "nvcuda.dll"):
        if not name:
            continue
        try:
            ctypes.CDLL(name)
            return True
        except OSError:
            pass
    return False


def gpu_available() -> bool:
    """True when CuPy sees a CUDA GPU and ``FRAGLAB_MODE`` is not ``cpu``."""
    return mode() == "gpu"


def mode() -> str:
    """``'gpu'`` or ``'cpu'``. ``FRAGLAB_MODE=cpu`` forces GPU-less mode on a GPU machine;
    ``FRAGLAB_MODE=gpu`` makes a missing GPU an error instead of a silent fallback."""
    forced = os.environ.get("FRAGLAB_MODE", "").strip().lower()
    if forced not in ("", "auto", "cpu", "gpu"):
        raise ValueError(f"FRAGLAB_MODE must be cpu, gpu or auto, not {forced!r}")
    if forced == "cpu":
        return "cpu"
    ok, why = _probe()
    if forced == "gpu" and not ok:
        raise GPUUnavailable(f"FRAGLAB_MODE=gpu but no CUDA GPU is usable ({why})")
    return "gpu" if ok else "cpu"


@contextmanager
def forced_mode(forced: str):
    """Run a ``with`` block in mode ``forced`` (``"cpu"``: kernels on the PTX interpreter even on a
    GPU machine), by setting ``FRAGLAB_MODE``, which :func:`mode` reads on every call; the old value
    is restored afterwards. Compiles and loaded modules are cached per target, so switching is safe.
    Graders use it to run a learner's kernel on the interpreter too (its race and uninitialised-read
    checks catch undefined behaviour that a GPU may run correctly by luck)."""
    if forced not in ("cpu", "gpu", "auto"):
        raise ValueError(f"forced_mode takes cpu, gpu or auto, not {forced!r}")
    old = os.environ.get("FRAGLAB_MODE")
    os.environ["FRAGLAB_MODE"] = forced
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("FRAGLAB_MODE", None)
        else:
            os.environ["FRAGLAB_MODE"] = old


def why_no_gpu() -> str:
    if os.environ.get("FRAGLAB_MODE", "").lower() == "cpu":
        return "FRAGLAB_MODE=cpu"
    ok, why = _probe()
    return "" if ok else (why or "no CUDA GPU")


def require_gpu(what: str = "this") -> None:
    if not gpu_available():
        raise GPUUnavailable(f"{what} needs a CUDA GPU, and none is usable here ({why_no_gpu()}). "
                             "On a GPU-less machine the course compiles kernels and runs the warp "
                             "emulator instead.")


def compute_capability() -> tuple[int, int]:
    require_gpu("reading the compute capability")
    import cupy
    cc = cupy.cuda.Device().compute_capability  # e.g. '90'
    return int(cc[:-1]), int(cc[-1])


def arch() -> str:
    """The current GPU's target, e.g. ``'sm_90'``."""
    major, minor = compute_capability()
    return f"sm_{major}{minor}"


def name() -> str:
    require_gpu("reading the GPU name")
    import cupy
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    n = props["name"]
    return n.decode() if isinstance(n, bytes) else str(n)


#: The target the PTX interpreter runs (GPU-less mode): NVRTC compiles kernels for it.
INTERPRETER_ARCH = "sm_80"

#: Every target whose PTX the interpreter runs: sm_80 (the default) and sm_90a, Hopper's
#: wgmma / mbarrier / bulk-copy PTX (chapter 10), asked for with ``get_kernel(..., arch=)``.
INTERPRETER_ARCHES = ("sm_80", "sm_90a")


def _cc_of(arch: str) -> tuple[int, int]:
    digits = arch[3:].rstrip("a")
    return int(digits[:-1]), int(digits[-1])


def target_cc(arch: str | None = None) -> tuple[int, int]:
    """Compute capability kernels run at: the GPU's, or the interpreter's (8, 0) without one.
    Without a GPU, ``arch`` names the target a kernel will be interpreted at (one of
    :data:`INTERPRETER_ARCHES`, e.g. ``target_cc("sm_90a")`` is (9, 0)); on a GPU it is ignored."""
    if gpu_available():
        return compute_capability()
    if arch is not None:
        if arch not in INTERPRETER_ARCHES:
            raise ValueError(f"the PTX interpreter runs {', '.join(INTERPRETER_ARCHES)}, not {arch!r}")
        return _cc_of(arch)
    return _cc_of(INTERPRETER_ARCH)


#: The architecture-specific targets: the GPU each runs on, and what it has that no other target
#: has (what a refusal says).
ARCH_SPECIFIC = {
    "sm_90a": ("a Hopper GPU", "wgmma.mma_async and setmaxnreg exist only on that target")}


def can_run(arch: str, what: str | None = None, instead: str | None = None) -> tuple[bool, str]:
    """Can kernels compiled for ``arch`` (e.g. ``'sm_90a'``) run here? On a GPU: its compute
    capability must be at least the target's, and exactly it for an architecture-specific ``a``
    target (:data:`ARCH_SPECIFIC`); without one: the PTX interpreter's :data:`INTERPRETER_ARCHES`.
    Returns ``(ok, reason)``: the reason a sentence that names ``what`` needs the target and why,
    what this GPU is, and ``instead``, what runs here instead (e.g. the rung below)."""
    need = _cc_of(arch)
    subject = f"{arch} code" + (f" ({what})" if what else "")
    if not gpu_available():
        if arch in INTERPRETER_ARCHES:
            return True, ""
        reason = (f"{subject} does not run on the PTX interpreter, which runs "
                  f"{', '.join(INTERPRETER_ARCHES)}")
    else:
        cc = compute_capability()
        specific = arch.endswith("a")
        if (cc == need) if specific else (cc >= need):
            return True, ""
        gpu, why = ARCH_SPECIFIC.get(arch, ("", ""))
        reason = (f"{subject} needs {gpu + ', ' if gpu else ''}compute capability {need[0]}.{need[1]}"
                  f"{'' if specific else ' or newer'}{f' ({why})' if why else ''}; "
                  f"this GPU is {cc[0]}.{cc[1]}")
    return False, reason + "." + (f" {instead}" if instead else "")


def require(arch: str, what: str | None = None, instead: str | None = None) -> None:
    """:func:`can_run`, or a ``RuntimeError`` with its reason (before a launch)."""
    ok, why = can_run(arch, what, instead)
    if not ok:
        raise RuntimeError(why)


#: Lowest compute capability for each input type of WMMA.
_WMMA_MIN_CC = {"f16": (7, 0), "s8": (7, 2), "u8": (7, 2), "bf16": (8, 0), "tf32": (8, 0),
                "f64": (8, 0)}


def supports(dtype: str, cc: tuple[int, int] | None = None) -> tuple[bool, str]:
    """Can WMMA use inputs of ``dtype`` (f16, bf16, tf32, s8, u8, f64) on this GPU (or on ``cc``)?

    Without a GPU the interpreter's sm_80 is asked. Returns ``(ok, reason)``; the reason is a
    sentence fit for a skip message.
    """
    need = _WMMA_MIN_CC.get(dtype)
    if need is None:
        raise ValueError(f"unknown WMMA input type {dtype!r}; known: {sorted(_WMMA_MIN_CC)}")
    cc = cc or target_cc()
    if tuple(cc) >= need:
        return True, ""
    return False, (f"{dtype} WMMA needs compute capability {need[0]}.{need[1]} or newer; "
                   f"this GPU is {cc[0]}.{cc[1]}")


def status_line() -> str:
    """One line saying where code runs. Notebooks print it; nbval sanitizes it (it differs by machine)."""
    if gpu_available():
        return f"[gpu] kernels run on {name()} ({arch()})"
    return f"[cpu] no GPU ({why_no_gpu()}): kernels run on the PTX interpreter ({INTERPRETER_ARCH})"
