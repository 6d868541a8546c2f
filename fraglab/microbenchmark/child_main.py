"""What one fresh process of the paper's measurement runs (``python -m fraglab.microbenchmark
_child``): time the first launch of each kernel, as the paper's executable does."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from .kernels import kernel_name, storage_dtype
from .setups import setup_config


def _loading_mode() -> str | None:
    """The driver's module loading mode (cuModuleGetLoadingMode): EAGER, LAZY, or None."""
    try:
        import ctypes
        mode = ctypes.c_int(0)
        ctypes.CDLL("libcuda.so.1").cuModuleGetLoadingMode(ctypes.byref(mode))
        return {1: "EAGER", 2: "LAZY"}.get(mode.value, str(mode.value))
    except Exception:
        return None


def time_first_launches(config: dict, cubin_path, later: int = 3) -> dict:
    """In a fresh process: create the context, then time one launch of each kernel of the cubin
    at ``cubin_path``, in ``config["order"]``, with CUDA events (and ``later`` more of each).
    Returns the record the parent reads: ``first``, ``later`` (ms), ``host_us``,
    ``loading_mode``, ``order``, ``startup_s``."""
    t_start = time.perf_counter()
    cfg = setup_config(config)
    import cupy as cp
    t_import = time.perf_counter()
    cubin = Path(cubin_path).read_bytes()
    n, dtype = cfg["tiles"], cfg["dtype"]
    store = storage_dtype(dtype)
    # Like the paper's cudaMalloc: creates the context; no kernel runs (cupy.empty launches none).
    a = cp.empty((n, 16, 16), dtype=store)
    b = cp.empty((n, 16, 16), dtype=store)
    rows = cp.empty((n, 16), dtype=np.float32)
    cp.cuda.runtime.deviceSynchronize()
    t_ctx = time.perf_counter()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    state: dict = {"module": None, "fns": {}}
    args_k = (a, b, rows, np.int32(n))
    grid, block = (n,), (32,)

    # The module is loaded from the cubin, as the CUDA runtime loads a program's own module:
    # with LAZY loading at the first launch of one of its kernels, with EAGER at initialisation.
    # The child loads it itself (not through launch.get_kernel) because *when* that happens is
    # the variable under test.
    def function(variant):
        if variant not in state["fns"]:
            if state["module"] is None:
                state["module"] = cp.cuda.function.Module()
                state["module"].load(cubin)
            state["fns"][variant] = state["module"].get_function(kernel_name(variant, dtype))
        return state["fns"][variant]

    if cfg["module_loading"] == "EAGER":
        state["module"] = cp.cuda.function.Module()
        state["module"].load(cubin)
    if cfg["preload"]:
        for w in cfg["order"]:
            function(w)
    if cfg["warmup"]:
        for w in cfg["order"]:
            function(w)(grid, block, args_k)
        cp.cuda.runtime.deviceSynchronize()

    def timed(variant):
        # CUDA events around one launch; the function is looked up (and, lazily, loaded) inside,
        # where the runtime does it for a program like the paper's. Called directly (not through
        # launch.launch) to keep Python's share of the window as small as the paper's C++.
        start.record()
        h0 = time.perf_counter_ns()
        fn = function(variant)
        h1 = time.perf_counter_ns()
        fn(grid, block, args_k)
        h2 = time.perf_counter_ns()
        stop.record()
        stop.synchronize()
        return cp.cuda.get_elapsed_time(start, stop), (h1 - h0) / 1e3, (h2 - h1) / 1e3

    first, host_load, host_launch = {}, {}, {}
    for w in cfg["order"]:
        first[w], host_load[w], host_launch[w] = timed(w)
    later_ms = {w: [] for w in cfg["order"]}
    later_launch = {w: [] for w in cfg["order"]}
    for _ in range(later):
        for w in cfg["order"]:
            ms, _, hl = timed(w)
            later_ms[w].append(ms)
            later_launch[w].append(hl)
    return {"first": first, "host_us": {"load": host_load, "launch": host_launch,
                                        "later_launch": later_launch},
            "later": later_ms, "loading_mode": _loading_mode(),
            "order": list(cfg["order"]),
            "startup_s": {"import": t_import - t_start, "context": t_ctx - t_import}}
