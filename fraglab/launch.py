"""The course's one launch path: load a compiled kernel (cached), check arguments, launch.

Two backends behind one interface, chosen by :func:`fraglab.device.mode`:

* ``gpu``: the kernel is compiled for the GPU in use and launched through CuPy; wrappers take and
  return CuPy arrays.
* ``cpu`` (no GPU, or ``FRAGLAB_MODE=cpu``): the same source is compiled for ``sm_80``
  (:data:`INTERPRETER_ARCH`; or ``sm_90a`` where :func:`get_kernel` is asked for it) and its PTX
  runs on the course's interpreter (:mod:`fraglab.ptx`); wrappers take and return NumPy arrays.

Every Python wrapper validates its arrays with :func:`check_array` and friends *before* calling
:func:`launch`, with the same checks in both modes, so a bad argument raises a clear
``TypeError``/``ValueError`` and never reaches a kernel, where it could read or write out of bounds.
"""
from __future__ import annotations

from typing import Iterable

from . import device, toolchain

_modules: dict[tuple[int, str], object] = {}

#: The target whose PTX the interpreter runs in GPU-less mode.
INTERPRETER_ARCH = device.INTERPRETER_ARCH


def interpreted() -> bool:
    """True when kernels run on the PTX interpreter (GPU-less mode)."""
    return not device.gpu_available()


def get_kernel(name: str, kernel: str, *, source: str | None = None,
               defines: dict | None = None, options: Iterable[str] = (), arch: str | None = None):
    """A launchable kernel for ``kernel`` in ``kernels/<name>.cu`` (or in ``source``): on a GPU a
    ``cupy.cuda.function.Function`` compiled for it (modules cached per device); without one a
    :class:`fraglab.ptx.KernelFunction` that runs the ``sm_80`` PTX on the interpreter.
    ``arch`` (e.g. ``"sm_90a"`` for wgmma) compiles for that target instead, on the GPU and for
    the interpreter alike (which runs :data:`fraglab.device.INTERPRETER_ARCHES`)."""
    if interpreted():
        from . import ptx
        target = arch or INTERPRETER_ARCH
        if target not in device.INTERPRETER_ARCHES:
            raise ValueError(f"the PTX interpreter runs {', '.join(device.INTERPRETER_ARCHES)} "
                             f"code, not {target}")
        build = toolchain.compile(name, target, source=source, defines=defines,
                                  options=tuple(options))
        _require_kernel(build, kernel)
        return ptx.load(name, target, source=source, defines=defines,
                        options=tuple(options)).function(kernel)
    build = toolchain.compile(name, arch, source=source, defines=defines, options=tuple(options))
    _require_kernel(build, kernel)
    return _module(build).get_function(kernel)


def _module(build):
    """The CuPy module of ``build`` on the current GPU (loaded once per device)."""
    import cupy
    dev = cupy.cuda.Device().id
    mod = _modules.get((dev, build.key))
    if mod is None:
        mod = cupy.cuda.function.Module()
        mod.load(build.cubin)
        _modules[(dev, build.key)] = mod
    return mod


_constants: dict[tuple, dict] = {}


def constants(name: str, prefix: str, *, source: str | None = None, defines: dict | None = None,
              options: Iterable[str] = (), arch: str | None = None) -> dict[str, int]:
    """The launch numbers a kernel file declares (``extern "C" __device__ const int``, names
    starting with ``prefix``: tiles, threads, stages, shared-memory bytes), read back from the
    module :func:`get_kernel` launches with the same arguments: on a GPU from the loaded module
    (``Module.get_global_var``), on the interpreter from the PTX it runs. The kernel file is
    their one home (``CONTRIBUTING.md``); a file that declares none raises ``KeyError``."""
    if interpreted():
        from . import ptx
        target = arch or INTERPRETER_ARCH
        build = toolchain.compile(name, target, source=source, defines=defines,
                                  options=tuple(options))
        key = ("cpu", build.key, prefix)
        if key not in _constants:
            _constants[key] = ptx.load(name, target, source=source, defines=defines,
                                       options=tuple(options)).constants(prefix)
    else:
        build = toolchain.compile(name, arch, source=source, defines=defines,
                                  options=tuple(options))
        import cupy
        key = (cupy.cuda.Device().id, build.key, prefix)
        if key not in _constants:
            import numpy as np
            mod, got = _module(build), {}
            for sym in build.constants(prefix):
                host = np.empty(1, np.int32)
                ptr = mod.get_global_var(sym)        # CuPy's Module: the device address
                cupy.cuda.runtime.memcpy(host.ctypes.data, ptr, 4,
                                         cupy.cuda.runtime.memcpyDeviceToHost)
                got[sym] = int(host[0])
            _constants[key] = got
    if not _constants[key]:
        raise KeyError(f"{build.name} declares no launch constant {prefix}* (extern \"C\" "
                       "__device__ const int)")
    return dict(_constants[key])


def _require_kernel(build, kernel: str) -> None:
    if kernel not in build.kernels:
        raise KeyError(f"{build.name} defines no kernel {kernel!r} (it has {build.kernels}); "
                       'kernels must be extern "C"')


def launch(fn, grid, block, args: tuple, shared_mem: int = 0, *, sync: bool = False,
           stream=None) -> None:
    """Launch ``fn`` (from :func:`get_kernel`) on ``stream`` (default: the current one).
    ``shared_mem`` above 48 KB is allowed first (:func:`allow_dynamic_smem`). ``sync=True``
    waits and surfaces device errors. On the interpreter the launch runs to completion here."""
    grid = tuple(int(g) for g in (grid if isinstance(grid, (tuple, list)) else (grid,)))
    block = tuple(int(b) for b in (block if isinstance(block, (tuple, list)) else (block,)))
    if any(g < 1 for g in grid) or any(b < 1 for b in block):
        raise ValueError(f"grid {grid} and block {block} must be positive")
    threads = 1
    for b in block:
        threads *= b
    if threads > 1024:
        raise ValueError(f"block {block} has {threads} threads; at most 1024 are allowed")
    if interpreted():
        fn(grid, block, args, shared_mem=shared_mem)
        return
    import cupy
    allow_dynamic_smem(fn, shared_mem)
    if stream is None:
        fn(grid, block, args, shared_mem=shared_mem)
    else:
        fn(grid, block, args, shared_mem=shared_mem, stream=stream)
    if sync:
        cupy.cuda.get_current_stream().synchronize()


# --------------------------------------------------------------------------------------------
# Argument checks
# --------------------------------------------------------------------------------------------

def check_array(name: str, a, *, dtype=None, shape: tuple | None = None, ndim: int | None = None,
                contiguous: bool = True):
    """Check that ``a`` is a C-contiguous array of the current mode (a CuPy array on the current
    GPU; a NumPy array on the interpreter) with the given dtype and shape (``None`` entries in
    ``shape`` match any size). Returns ``a``."""
    import numpy as np
    if interpreted():
        if not isinstance(a, np.ndarray):
            hint = " (a CuPy array: bring it back with .get())" if _is_cupy(a) else ""
            raise TypeError(f"{name} must be a numpy.ndarray (no GPU here: kernels run on the "
                            f"PTX interpreter), got {type(a).__name__}{hint}")
    else:
        import cupy
        if not isinstance(a, cupy.ndarray):
            hint = " (a NumPy array: move it with cupy.asarray(...))" if isinstance(a, np.ndarray) else ""
            raise TypeError(f"{name} must be a cupy.ndarray on the GPU, got {type(a).__name__}{hint}")
    if dtype is not None:
        allowed = tuple(np.dtype(d) for d in (dtype if isinstance(dtype, (tuple, list)) else (dtype,)))
        if a.dtype not in allowed:
            raise TypeError(f"{name} must have dtype {' or '.join(map(str, allowed))}, "
                            f"got {a.dtype}")
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {a.shape}")
    if shape is not None:
        if a.ndim != len(shape) or any(s is not None and s != t for s, t in zip(shape, a.shape)):
            want = "(" + ", ".join("any" if s is None else str(s) for s in shape) + ")"
            raise ValueError(f"{name} must have shape {want}, got {a.shape}")
    if contiguous and not a.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous (use {'numpy' if interpreted() else 'cupy'}"
                         ".ascontiguousarray)")
    if not interpreted():
        import cupy
        if a.device.id != cupy.cuda.Device().id:
            raise ValueError(f"{name} is on GPU {a.device.id}, but the current GPU is "
                             f"{cupy.cuda.Device().id}")
    return a


def _is_cupy(a) -> bool:
    return type(a).__module__.startswith("cupy")


def _offset_in_allocation(a) -> int:
    """Where ``a`` starts, modulo its allocation's alignment: a CuPy pointer (allocations are
    256-byte aligned), or a NumPy view's byte offset from the array that owns its memory (the
    interpreter gives every array its own aligned base, so only the offset matters there)."""
    if _is_cupy(a):
        return int(a.data.ptr)
    owner = a
    while getattr(owner, "base", None) is not None and hasattr(owner.base, "ctypes"):
        owner = owner.base
    return int(a.ctypes.data - owner.ctypes.data)


def check_aligned(name: str, a, nbytes: int, why: str = "") -> None:
    """``a`` must start on an ``nbytes`` boundary: fresh allocations do, offset views may not.
    ``why`` says which instruction needs it."""
    if _offset_in_allocation(a) % nbytes:
        raise ValueError(f"{name} must start at a {nbytes}-byte aligned address"
                         + (f" ({why})" if why else "")
                         + f"; this view starts at an offset: pass a copy ({name}.copy())")


def check_choice(name: str, value, choices) -> object:
    """``value`` must be one of ``choices``; returns it."""
    if value not in tuple(choices):
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def check_multiple(name: str, value: int, multiple: int) -> int:
    if value % multiple:
        raise ValueError(f"{name} = {value} must be a multiple of {multiple}")
    return value


def check_range(name: str, value: int, lo: int, hi: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} = {value} must be between {lo} and {hi}")
    return value


_smem_allowed: set = set()

#: Dynamic shared memory a kernel may take without opting in.
DEFAULT_SMEM_LIMIT = 48 * 1024


def allow_dynamic_smem(fn, nbytes: int) -> None:
    """Raise a kernel's dynamic shared-memory limit to ``nbytes`` when it needs more than the
    48 KB every GPU allows by default (once per kernel and size)."""
    if nbytes <= DEFAULT_SMEM_LIMIT or (fn.ptr, nbytes) in _smem_allowed:
        return
    from cupy_backends.cuda.api import driver
    driver.funcSetAttribute(fn.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes)
    _smem_allowed.add((fn.ptr, nbytes))


def to_device(x):
    """An array where kernels read it: on the GPU (CuPy arrays pass through unchanged), or a
    NumPy array for the interpreter. Non-array values pass through."""
    import numpy as np
    if interpreted():
        return x.get() if _is_cupy(x) else x
    import cupy
    if isinstance(x, (np.ndarray, list)) or _is_cupy(x):
        return cupy.asarray(x)
    return x


def to_host(x):
    """A NumPy array of ``x`` (CuPy arrays are copied back; tuples and dicts element-wise)."""
    if isinstance(x, tuple):
        return tuple(to_host(v) for v in x)
    if isinstance(x, dict):
        return {k: to_host(v) for k, v in x.items()}
    if hasattr(x, "get") and type(x).__module__.startswith("cupy"):
        return x.get()
    return x


def poisoned(shape, dtype, value=float("nan")):
    """A new array of the current mode (CuPy on a GPU, NumPy on the interpreter) filled with a
    poison value (NaN for floats, a sentinel for ints): use it for outputs, so an element a kernel
    forgot to write cannot pass a check by luck."""
    import numpy as np
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        value = np.iinfo(dt).min if dt.kind == "i" else np.iinfo(dt).max
    if interpreted():
        return np.full(shape, value, dtype=dt)
    import cupy
    return cupy.full(shape, value, dtype=dt)


def sm_count() -> int:
    """Multiprocessors to fill: the GPU's, or :data:`INTERPRETER_SMS` on the interpreter (where
    grid-stride kernels then run few, long blocks)."""
    if interpreted():
        return INTERPRETER_SMS
    import cupy
    return int(cupy.cuda.Device().attributes["MultiProcessorCount"])


#: How many multiprocessors wrappers size grids for on the interpreter.
INTERPRETER_SMS = 2
