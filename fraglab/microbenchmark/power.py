"""Power through NVML (:class:`fraglab.nvml.PowerSampler`): during a sustained loop of warm
launches in this process, and during the paper's loop of fresh processes."""
from __future__ import annotations

import time
from typing import Callable

from ..child import ChildError
from ..nvml import PowerSampler
from .kernels import VARIANTS
from .processes import run_child
from .setups import setup_config


def mean_power(r: dict) -> float | None:
    """Mean power (W) of a :meth:`PowerSampler.result`: from the energy counter when there is
    one, else from the samples."""
    return r.get("mean_w_energy") or r.get("mean_w_samples")


def _w(x) -> str:
    return "n/a" if x is None else f"{x:.1f}"


def sustained_power(launches: dict[str, Callable], seconds: float = 4.0, *, idle_s: float = 2.0,
                    pci_bus_id: str | None = None, period_s: float = 0.025,
                    log: Callable = print) -> dict:
    """Mean power while each callable is launched back to back for ``seconds`` (in this process,
    warm), and while the GPU idles for ``idle_s`` first. Each entry adds ``launches`` (count)
    and ``launch_rate_hz``."""
    import cupy as cp
    out = {}
    with PowerSampler(pci_bus_id, period_s=period_s) as s:
        time.sleep(idle_s)
    out["idle"] = s.result()
    log(f"  [power] idle: {_w(mean_power(out['idle']))} W")
    for name, go in launches.items():
        for _ in range(20):
            go()
        cp.cuda.runtime.deviceSynchronize()
        n = 0
        with PowerSampler(pci_bus_id, period_s=period_s) as s:
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                for _ in range(256):
                    go()
                n += 256
                cp.cuda.get_current_stream().synchronize()
        r = s.result()
        r["launches"] = n
        r["launch_rate_hz"] = n / r["seconds"]
        out[name] = r
        log(f"  [power] {name}: {_w(mean_power(r))} W, {n} launches "
            f"({r['launch_rate_hz'] / 1e3:.0f} k/s)")
    return out


def relaunch_power(cubin, seconds: float = 6.0, *, variants=VARIANTS, config: dict | None = None,
                   pci_bus_id: str | None = None, period_s: float = 0.05, log: Callable = print,
                   _command: Callable | None = None) -> dict:
    """The paper's power method, short: for each kernel, fresh processes that each launch it once
    are started back to back for ``seconds`` while NVML is sampled. Measures mostly what the GPU
    draws while processes start and stop, not the kernel."""
    out = {}
    for variant in variants:
        cfg = setup_config({**(config or {}), "order": (variant,)})
        n = fails = 0
        with PowerSampler(pci_bus_id, period_s=period_s) as s:
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                try:
                    run_child(cfg, cubin, later=0, _command=_command)
                    n += 1
                except ChildError:
                    fails += 1
        r = s.result()
        r.update(processes=n, failures=fails)
        out[variant] = r
        log(f"  [power, relaunch loop] {variant}: {_w(mean_power(r))} W over {n} processes")
    return out
