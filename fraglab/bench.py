"""The course's one benchmark path: GPU timings that can be trusted and compared.

Every number in the course is measured here, so every number is taken the same way:

* **GPU clocks, not host clocks.** Each repeat is bracketed by a pair of CUDA events
  recorded on the current stream; the GPU stamps them. A small "gate" kernel holds the
  stream while the host enqueues the repeats, so Python launch overhead does not leak
  into the result either (see :class:`_Gate`).
* **Warm-up in the same process** (module load, NVRTC compilation, clock ramp-up),
  then **many repeats**, reported as a median with its spread (p10/p90, IQR).
* **Optional L2 flush** before each repeat, outside the timed region, for "cold cache"
  numbers.
* **Variants are compared as ratios from one run**, interleaved in rounds whose
  order rotates, so slow drift (clocks, temperature, neighbours) hits all of them alike.
* **The machine is recorded with every result** (:func:`device_info`), and results are
  saved as JSON that the book plots (:func:`save_results` / :func:`load_results`).

Nothing here changes GPU settings (clocks, power, persistence): we measure the card as
we find it and record its state. CuPy is imported lazily and the device is only touched
when you time something, so ``import fraglab.bench`` works on a machine without a GPU.
"""
from __future__ import annotations

import ctypes
import functools
import json
import os
import platform
import socket
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from . import device, launch, nvml, stats
from .progress import Progress

__all__ = ["Timing", "Comparison", "time_kernel", "compare", "sweep", "device_info",
           "clock_check", "save_results", "load_results"]

#: A timer takes ``(fn, n, flush_l2)`` and returns ``n`` times in milliseconds.
#: Tests inject a fake one through the private ``_timer=`` argument.
TimerFn = Callable[[Callable[[], Any], int, bool], Sequence[float]]


def _cupy():
    import cupy  # lazy: importing this module never touches the GPU
    return cupy


def _require_gpu() -> None:
    device.require_gpu("timing on the GPU")


# --------------------------------------------------------------------------- statistics
@dataclass
class Timing:
    """The repeats of one timed callable, in milliseconds, and their statistics."""

    name: str | None
    times_ms: np.ndarray
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        self.times_ms = np.asarray(self.times_ms, dtype=np.float64).ravel()
        if self.times_ms.size == 0:
            raise ValueError("a Timing needs at least one sample")

    @functools.cached_property
    def stats(self) -> dict:
        """:func:`fraglab.stats.summary` of the repeats (ms)."""
        return stats.summary(self.times_ms)

    n = property(lambda self: self.stats["n"])
    median_ms = property(lambda self: self.stats["median"])
    p10_ms = property(lambda self: self.stats["p10"])
    p90_ms = property(lambda self: self.stats["p90"])
    min_ms = property(lambda self: self.stats["min"])
    mean_ms = property(lambda self: self.stats["mean"])
    std_ms = property(lambda self: self.stats["std"])  # sample standard deviation (ddof=1)
    iqr_ms = property(lambda self: self.stats["iqr"])

    def summary(self) -> str:
        return (f"{self.median_ms:.4f} ms median (p10 {self.p10_ms:.4f}, "
                f"p90 {self.p90_ms:.4f}, n={self.n})")

    def to_dict(self) -> dict:
        stats = {k: getattr(self, k) for k in
                 ("median_ms", "p10_ms", "p90_ms", "min_ms", "mean_ms", "std_ms", "iqr_ms")}
        return {"name": self.name, "n": self.n, **stats,
                "times_ms": self.times_ms.tolist(), "meta": _jsonable(self.meta)}

    @classmethod
    def from_dict(cls, d: dict) -> "Timing":
        return cls(d.get("name"), d["times_ms"], dict(d.get("meta") or {}))


# --------------------------------------------------------------------------- timing
_FLUSH_BUFFERS: dict[int, Any] = {}  # device id -> cupy buffer of 2x L2, allocated once


def _l2_flush_buffer():
    cp = _cupy()
    dev = cp.cuda.Device().id
    if dev not in _FLUSH_BUFFERS:
        l2 = int(cp.cuda.runtime.getDeviceProperties(dev)["l2CacheSize"])
        _FLUSH_BUFFERS[dev] = cp.empty(max(2 * l2, 1 << 20), dtype=cp.uint8)
    return _FLUSH_BUFFERS[dev]


def _flush_l2(stream) -> None:
    """Overwrite a buffer twice the size of L2 (a memset, like nvbench), evicting its contents."""
    buf = _l2_flush_buffer()
    _cupy().cuda.runtime.memsetAsync(buf.data.ptr, 0, buf.nbytes, stream.ptr)


_GATE_SRC = r"""
extern "C" __global__ void fraglab_bench_gate(volatile int* flags, unsigned long long timeout_ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    while (flags[0] == 0) {                    // spin until the host opens the gate ...
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - t0 > timeout_ns) { flags[1] = 1; return; }   // ... or give up (no deadlock)
    }
}"""


class _Gate:
    """A one-thread kernel that holds the stream until the host has enqueued a chunk of repeats.

    Without it, a callable that the host launches more slowly than the GPU runs it (a tiny
    kernel launched from Python) leaves the GPU idle *between* the start event and the kernel,
    and the launch gap is timed as if it were kernel time. The gate's flags live in mapped,
    pinned host memory (on 64-bit Linux the host pointer is also the device pointer).
    """

    _instance = None
    timeout_s = 1.0

    def __init__(self):
        cp = _cupy()
        rt = cp.cuda.runtime
        self.ptr = rt.hostAlloc(8, rt.hostAllocMapped | rt.hostAllocPortable)  # kept for the process
        self.flags = (ctypes.c_int * 2).from_address(self.ptr)  # [open, timed_out]
        self.kernel = launch.get_kernel("fraglab_bench_gate.cu", "fraglab_bench_gate",
                                        source=_GATE_SRC)

    @classmethod
    def get(cls) -> "_Gate":
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    def close(self, stream) -> None:
        self.flags[0] = self.flags[1] = 0
        launch.launch(self.kernel, 1, 1, (np.uint64(self.ptr), np.uint64(int(self.timeout_s * 1e9))),
                      stream=stream)

    def open(self) -> None:
        self.flags[0] = 1


_CHUNK = 32  # repeats enqueued behind one gate: keeps well inside the driver's launch queue


def _event_timer(fn: Callable[[], Any], n: int, flush_l2: bool, hold: bool = True) -> list[float]:
    """Time ``n`` calls of ``fn`` with one pair of CUDA events per call.

    Repeats are enqueued in chunks of ``_CHUNK``; with ``hold=True`` each chunk waits behind
    :class:`_Gate`, so the GPU runs the calls back to back and each event pair measures GPU
    time only. We synchronize once per chunk, outside every timed region. The L2 flush, if
    asked for, sits between one call's end event and the next one's start event.
    """
    cp = _cupy()
    stream = cp.cuda.get_current_stream()
    gate = _Gate.get() if hold else None
    times: list[float] = []
    for first in range(0, n, _CHUNK):
        if gate:
            gate.close(stream)
        pairs = []
        for _ in range(min(_CHUNK, n - first)):
            if flush_l2:
                _flush_l2(stream)
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record(stream)
            fn()
            end.record(stream)
            pairs.append((start, end))
        if gate:
            gate.open()
        pairs[-1][1].synchronize()
        if gate and gate.flags[1]:
            warnings.warn("fraglab.bench: the host took over "
                          f"{_Gate.timeout_s:g} s to enqueue {len(pairs)} calls (does fn "
                          "synchronize?); these timings include launch gaps. Try hold=False.",
                          RuntimeWarning, stacklevel=3)
        times += [cp.cuda.get_elapsed_time(s, e) for s, e in pairs]
    return times


def _timers(repeat: int, hold: bool, _timer: TimerFn | None) -> tuple[TimerFn, TimerFn]:
    """Check ``repeat`` and the GPU; return the timer for measured calls (gated unless
    ``hold=False``) and the one for warm-up calls (never gated: a first call may compile or load
    a module, which takes longer than the gate waits). A test's ``_timer`` replaces both."""
    if repeat < 1:
        raise ValueError("repeat must be >= 1")
    if _timer is None:
        _require_gpu()
    return (_timer or functools.partial(_event_timer, hold=hold),
            _timer or functools.partial(_event_timer, hold=False))


def time_kernel(fn: Callable[[], Any], *, warmup: int = 10, repeat: int = 200,
                flush_l2: bool = False, name: str | None = None, hold: bool = True,
                _timer: TimerFn | None = None) -> Timing:
    """Time ``fn()``, a zero-argument callable that enqueues GPU work on the current stream.

    ``warmup`` untimed calls come first (same flush setting, but no gate: a first call may
    compile or load a module, which takes longer than the gate waits), then ``repeat``
    timed ones.
    ``flush_l2=True`` evicts L2 before every repeat, outside the timed region.
    ``hold=False`` drops the gate (see :func:`_event_timer`); only for callables that must
    synchronize inside, whose numbers then include launch gaps.
    """
    timer, warm = _timers(repeat, hold, _timer)
    if warmup > 0:
        warm(fn, warmup, flush_l2)
    times = timer(fn, repeat, flush_l2)
    return Timing(name, times, {"warmup": warmup, "repeat": repeat, "flush_l2": flush_l2,
                                "hold": hold})


# --------------------------------------------------------------------------- comparing
def _schedule(names: Sequence[str], repeat: int, rounds: int) -> list[tuple[list[str], int]]:
    """Plan ``rounds`` rounds: (order of variants, repeats each); repeats sum to ``repeat``.

    The order rotates by one each round, so no variant always runs first (or always runs
    right after the same neighbour's first call of the round).
    """
    rounds = max(1, min(rounds, repeat))
    base, extra = divmod(repeat, rounds)
    names = list(names)
    plan = []
    for r in range(rounds):
        k = r % len(names)
        plan.append((names[k:] + names[:k], base + (1 if r < extra else 0)))
    return plan


@dataclass
class Comparison:
    """Timings of several variants measured in one interleaved run."""

    timings: dict[str, Timing]
    baseline: str
    settings: dict = field(default_factory=dict)
    clocks: dict | None = None  # clock_check() read right after the run, if a GPU was used

    def ratios(self) -> dict[str, float]:
        """Speedup of each variant: baseline median / variant median (>1 = faster)."""
        base = self.timings[self.baseline].median_ms
        return {k: base / t.median_ms for k, t in self.timings.items()}

    def table(self) -> str:
        width = max(len("variant"), *(len(k) for k in self.timings))
        lines = [f"{'variant':<{width}}  {'median ms':>10}  {'p10-p90 ms':>19}  {'n':>5}  speedup"]
        ratios = self.ratios()
        for k, t in self.timings.items():
            mark = "  (baseline)" if k == self.baseline else ""
            spread = f"{t.p10_ms:.4f}-{t.p90_ms:.4f}"
            lines.append(f"{k:<{width}}  {t.median_ms:>10.4f}  {spread:>19}  {t.n:>5}  "
                         f"{ratios[k]:.2f}x{mark}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"kind": "comparison", "baseline": self.baseline,
                "ratios": self.ratios(), "settings": _jsonable(self.settings),
                "clocks": _jsonable(self.clocks),
                "timings": {k: t.to_dict() for k, t in self.timings.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> "Comparison":
        timings = {k: Timing.from_dict(v) for k, v in d["timings"].items()}
        return cls(timings, d["baseline"], dict(d.get("settings") or {}), d.get("clocks"))

    def save(self, path, extra: dict | None = None, *, device: dict | None = None) -> None:
        save_results(path, self, extra, device=device)


def compare(variants: dict[str, Callable[[], Any]], *, baseline: str | None = None,
            warmup: int = 10, repeat: int = 200, rounds: int = 5, flush_l2: bool = False,
            progress: bool = True, hold: bool = True,
            _timer: TimerFn | None = None) -> Comparison:
    """Time several variants in interleaved rounds and compare them as ratios.

    Each variant is warmed up, then ``rounds`` rounds run; in each round every variant is
    timed about ``repeat // rounds`` times (each gets exactly ``repeat`` samples in all),
    in an order that rotates per round. Times are pooled per variant.
    """
    names = list(variants)
    if not names:
        raise ValueError("compare() needs at least one variant")
    baseline = names[0] if baseline is None else baseline
    if baseline not in variants:
        raise KeyError(f"baseline {baseline!r} is not one of {names}")
    timer, warm = _timers(repeat, hold, _timer)
    for name in names:
        if warmup > 0:
            warm(variants[name], warmup, flush_l2)
    plan = _schedule(names, repeat, rounds)
    samples: dict[str, list[float]] = {k: [] for k in names}
    bar = Progress(len(plan), enabled=progress)
    for r, (order, count) in enumerate(plan, 1):
        bar.show(r, "round ...", final=False)
        for name in order:
            samples[name].extend(timer(variants[name], count, flush_l2))
        bar.show(r, "round: " + ", ".join(
            f"{k} {_fmt_ms(float(np.median(v)))} ms" for k, v in samples.items()))
    bar.close()
    settings = {"warmup": warmup, "repeat": repeat, "rounds": len(plan),
                "flush_l2": flush_l2, "hold": hold, "orders": [o for o, _ in plan]}
    timings = {k: Timing(k, v, {"warmup": warmup, "flush_l2": flush_l2, "hold": hold})
               for k, v in samples.items()}
    clocks = clock_check() if _timer is None else None
    return Comparison(timings, baseline, settings, clocks)


def sweep(fn_of_param: Callable[[Any], Callable[[], Any]], params: Iterable[Any], *,
          label: str, progress: bool = True, **time_kernel_kwargs) -> list[dict]:
    """Time ``fn_of_param(p)()`` for each ``p``; return one record per parameter value.

    Each record is ``Timing.to_dict()`` plus ``label`` and ``param``.
    """
    params = list(params)
    bar = Progress(len(params), enabled=progress)
    records = []
    for i, p in enumerate(params, 1):
        bar.show(i, f"{label}={p} ...", final=False)
        t = time_kernel(fn_of_param(p), name=f"{label}={p}", **time_kernel_kwargs)
        records.append({"label": label, "param": p, **t.to_dict()})
        bar.show(i, f"{label}={p} ... {_fmt_ms(t.median_ms)} ms")
    bar.close()
    return records


def _fmt_ms(x: float) -> str:
    return f"{x:.4g}" if abs(x) < 1e4 else f"{x:.0f}"


# --------------------------------------------------------------------------- the machine
def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def _read_clocks(dev: int, pci_bus_id: str) -> dict:
    try:
        return nvml.read_clocks(pci_bus_id, dev)
    except Exception as exc:  # no pynvml, no libnvidia-ml, ...: fall back to CUDA attributes
        rt = _cupy().cuda.runtime
        def attr(a):
            try:
                return rt.deviceGetAttribute(a, dev) / 1000.0  # kHz -> MHz
            except Exception:
                return None
        return {"source": "cuda_device_attribute (max clocks only; current unknown)",
                "nvml_error": f"{type(exc).__name__}: {exc}",
                "sm_mhz": None, "mem_mhz": None,
                "sm_max_mhz": attr(rt.cudaDevAttrClockRate),
                "mem_max_mhz": attr(rt.cudaDevAttrMemoryClockRate)}


def _decoded(x) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def device_info(device: int | None = None) -> dict:
    """Describe the GPU and software stack, to be stored next to every result."""
    _require_gpu()
    cp = _cupy()
    rt = cp.cuda.runtime
    dev = cp.cuda.Device().id if device is None else int(device)
    props = rt.getDeviceProperties(dev)
    pci = rt.deviceGetPCIBusId(dev)
    clocks = _read_clocks(dev, pci)
    try:
        from cupy_backends.cuda.libs import nvrtc
        nvrtc_version = ".".join(str(v) for v in nvrtc.getVersion())
    except Exception as exc:
        nvrtc_version = f"unavailable ({exc})"
    drv = rt.driverGetVersion()
    run = rt.runtimeGetVersion()
    return {
        "name": _decoded(props["name"]), "device_id": dev, "pci_bus_id": pci,
        "compute_capability": f"{props['major']}.{props['minor']}",
        "sm_count": int(props["multiProcessorCount"]),
        "l2_cache_bytes": int(props["l2CacheSize"]),
        "total_memory_bytes": int(props["totalGlobalMem"]),
        "clocks": {k: v for k, v in clocks.items() if k != "driver_version"},
        "driver_version": clocks.get("driver_version"),
        "cuda_driver_api_version": drv, "cuda_driver_api": _cuda_version(drv),
        "cuda_runtime_version": run, "cuda_runtime": _cuda_version(run),
        "nvrtc_version": nvrtc_version, "cupy_version": cp.__version__,
        "numpy_version": np.__version__, "python_version": platform.python_version(),
        "hostname": socket.gethostname(), "timestamp_utc": _utc_now(),
    }


def clock_check(device: int | None = None) -> dict:
    """Current vs max SM clock, to tell whether a run was throttled.

    Call it right after the timed work: an idle GPU lowers its clocks on its own
    (reason ``gpu_idle``), which is not throttling. ``throttled`` is None when unknown.
    """
    _require_gpu()
    cp = _cupy()
    dev = cp.cuda.Device().id if device is None else int(device)
    c = _read_clocks(dev, cp.cuda.runtime.deviceGetPCIBusId(dev))
    sm, top = c.get("sm_mhz"), c.get("sm_max_mhz")
    mask = c.get("clock_reasons_mask")
    return {"source": c["source"], "sm_mhz": sm, "sm_max_mhz": top,
            "sm_fraction_of_max": (sm / top) if sm and top else None,
            "reasons": nvml.throttle_reasons(mask), "temperature_c": c.get("temperature_c"),
            "throttled": nvml.is_throttled(mask)}


# --------------------------------------------------------------------------- JSON
def _utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _jsonable(x):
    """Turn NumPy scalars/arrays, tuples and Timing/Comparison objects into plain JSON types."""
    if isinstance(x, (Timing, Comparison)):
        return x.to_dict()
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, np.bool_):
        return bool(x)
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    return x


def save_results(path, records_or_comparison, extra: dict | None = None, *,
                 device: dict | None = None) -> None:
    """Write ``{"device", "created_utc", "results", "extra"}`` as JSON.

    ``device`` defaults to :func:`device_info` (so it needs a GPU); pass a dict to override.
    """
    doc = {"format": "fraglab.bench/1", "created_utc": _utc_now(),
           "device": device_info() if device is None else device,
           "results": _jsonable(records_or_comparison), "extra": _jsonable(extra or {})}
    path = os.fspath(path)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(_jsonable(doc), f, indent=1)
        f.write("\n")


def load_results(path) -> dict:
    """Read a file written by :func:`save_results` (plain dicts and lists).

    For a saved comparison, ``Comparison.from_dict(doc["results"])`` rebuilds the object.
    """
    with open(os.fspath(path), encoding="utf-8") as f:
        return json.load(f)
