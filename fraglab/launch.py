"""The course's one launch path: load a compiled kernel on the GPU (cached) and check arguments.

Every Python wrapper validates its arrays with :func:`check_array` and friends *before* calling
:func:`launch`, so a bad argument raises a clear ``TypeError``/``ValueError`` and never reaches the
GPU, where it could read or write out of bounds.
"""
from __future__ import annotations

from typing import Iterable

from . import device, toolchain

_modules: dict[tuple[int, str], object] = {}


def get_kernel(name: str, kernel: str, *, source: str | None = None,
               defines: dict | None = None, options: Iterable[str] = ()):
    """A launchable ``cupy.cuda.function.Function`` for ``kernel`` in ``kernels/<name>.cu``
    (or in ``source``), compiled for the current GPU. Loaded modules are cached per device."""
    device.require_gpu(f"launching {kernel}")
    import cupy
    build = toolchain.compile(name, None, source=source, defines=defines, options=tuple(options))
    dev = cupy.cuda.Device().id
    mod = _modules.get((dev, build.key))
    if mod is None:
        mod = cupy.cuda.function.Module()
        mod.load(build.cubin)
        _modules[(dev, build.key)] = mod
    if kernel not in build.kernels:
        raise KeyError(f"{build.name} defines no kernel {kernel!r} (it has {build.kernels}); "
                       'kernels must be extern "C"')
    return mod.get_function(kernel)


def launch(fn, grid, block, args: tuple, shared_mem: int = 0, *, sync: bool = False,
           stream=None) -> None:
    """Launch ``fn`` (from :func:`get_kernel`) on ``stream`` (default: the current one).
    ``shared_mem`` above 48 KB is allowed first (:func:`allow_dynamic_smem`). ``sync=True``
    waits and surfaces device errors."""
    import cupy
    grid = tuple(int(g) for g in (grid if isinstance(grid, (tuple, list)) else (grid,)))
    block = tuple(int(b) for b in (block if isinstance(block, (tuple, list)) else (block,)))
    if any(g < 1 for g in grid) or any(b < 1 for b in block):
        raise ValueError(f"grid {grid} and block {block} must be positive")
    threads = 1
    for b in block:
        threads *= b
    if threads > 1024:
        raise ValueError(f"block {block} has {threads} threads; at most 1024 are allowed")
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
    """Check that ``a`` is a C-contiguous CuPy array on the current GPU with the given dtype and
    shape (``None`` entries in ``shape`` match any size). Returns ``a``."""
    import cupy
    import numpy as np
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
        raise ValueError(f"{name} must be C-contiguous (use cupy.ascontiguousarray)")
    if a.device.id != cupy.cuda.Device().id:
        raise ValueError(f"{name} is on GPU {a.device.id}, but the current GPU is "
                         f"{cupy.cuda.Device().id}")
    return a


def check_aligned(name: str, a, nbytes: int, why: str = "") -> None:
    """``a`` (a CuPy array) must start on an ``nbytes`` boundary: fresh allocations do, offset
    views may not. ``why`` says which instruction needs it."""
    if a.data.ptr % nbytes:
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
    """A NumPy array (or anything array-like) on the GPU; CuPy arrays pass through unchanged."""
    import cupy
    return x if isinstance(x, cupy.ndarray) else cupy.asarray(x)


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
    """A new CuPy array filled with a poison value (NaN for floats, a sentinel for ints): use it
    for outputs, so an element a kernel forgot to write cannot pass a check by luck."""
    import cupy
    import numpy as np
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        value = np.iinfo(dt).min if dt.kind == "i" else np.iinfo(dt).max
    return cupy.full(shape, value, dtype=dt)
