"""NVML, the driver's management library: clocks, their throttle reasons, and power.

The one place the course talks to NVML (``pynvml``, from the ``nvidia-ml-py`` wheel). Readings are
only ever taken: nothing here changes a GPU setting.
"""
from __future__ import annotations

import threading
import time

import numpy as np


class NVMLUnavailable(RuntimeError):
    """pynvml is not installed, or the driver's NVML library cannot be loaded."""


def _pynvml():
    try:
        import pynvml
    except ImportError as e:
        raise NVMLUnavailable("pynvml is not installed (pip install nvidia-ml-py)") from e
    return pynvml


def _handle(nv, pci_bus_id: str | None, index: int):
    """A device handle by PCI bus id (robust to CUDA_VISIBLE_DEVICES), else by index."""
    if pci_bus_id:
        try:
            return nv.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
        except Exception:
            pass
    return nv.nvmlDeviceGetHandleByIndex(index)


def _text(x) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


# NVML "clocks event reasons" bits that mean the clock was held down by power/heat/hardware.
_THROTTLE_BITS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal_slowdown",
                  0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown"}
_OTHER_BITS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x10: "sync_boost",
               0x100: "display_clock_setting"}
_THROTTLE_MASK = sum(_THROTTLE_BITS)


def read_clocks(pci_bus_id: str | None, index: int = 0) -> dict:
    """Clocks (MHz) and state from NVML; raises if pynvml or the driver library is missing."""
    nv = _pynvml()
    nv.nvmlInit()
    try:
        h = _handle(nv, pci_bus_id, index)
        out = {"source": "nvml",
               "sm_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
               "mem_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
               "sm_max_mhz": nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM),
               "mem_max_mhz": nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM),
               "driver_version": _text(nv.nvmlSystemGetDriverVersion())}
        for getter in ("nvmlDeviceGetCurrentClocksEventReasons",
                       "nvmlDeviceGetCurrentClocksThrottleReasons"):
            if hasattr(nv, getter):
                try:
                    out["clock_reasons_mask"] = int(getattr(nv, getter)(h))
                    break
                except Exception:
                    pass
        try:
            out["temperature_c"] = nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)
        except Exception:
            pass
        return out
    finally:
        nv.nvmlShutdown()



def throttle_reasons(mask: int | None) -> list[str] | None:
    """Names of the bits set in a clocks-event-reasons mask (None when unknown)."""
    if mask is None:
        return None
    return [n for b, n in {**_THROTTLE_BITS, **_OTHER_BITS}.items() if mask & b]


def is_throttled(mask: int | None) -> bool | None:
    """Whether power, heat or the hardware held the clock down (None when unknown)."""
    return None if mask is None else bool(mask & _THROTTLE_MASK)


class PowerSampler:
    """Sample the GPU's power in a thread every ``period_s`` while a ``with`` block runs, and
    read NVML's energy counter at both ends (mean power = energy / time, independent of sampling).

    ``result()`` gives ``seconds``, ``t_s``/``power_w`` (the samples), ``mean_w_samples``,
    ``mean_w_energy`` (None if the counter is unavailable) and ``source`` (which NVML reading).
    Raises :class:`NVMLUnavailable` on entry when NVML (``pynvml``, from nvidia-ml-py) is not usable.
    """

    def __init__(self, pci_bus_id: str | None = None, index: int = 0, period_s: float = 0.025):
        self.pci_bus_id, self.index, self.period_s = pci_bus_id, index, period_s
        self.t, self.p = [], []

    def __enter__(self):
        self.nv = nv = _pynvml()
        try:
            nv.nvmlInit()
        except Exception as e:
            raise NVMLUnavailable(f"NVML is not usable here: {e}") from e
        self.h = _handle(nv, self.pci_bus_id, self.index)
        self.source = self._pick_source()
        self.e0 = self._energy()
        self.t0 = time.perf_counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _pick_source(self) -> str:
        nv = self.nv
        fid = getattr(nv, "NVML_FI_DEV_POWER_INSTANT", None)
        if fid is not None:
            try:
                if self._instant(fid) is not None:
                    self.fid = fid
                    return "nvml field POWER_INSTANT"
            except Exception:
                pass
        return "nvmlDeviceGetPowerUsage"

    def _instant(self, fid):
        v = self.nv.nvmlDeviceGetFieldValues(self.h, [fid])[0]
        if getattr(v, "nvmlReturn", 1) != 0:
            return None
        kind = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}.get(
            getattr(v, "valueType", 1), "uiVal")
        return float(getattr(v.value, kind)) / 1000.0

    def read_w(self) -> float:
        if self.source.startswith("nvml field"):
            w = self._instant(self.fid)
            if w is not None:
                return w
        return self.nv.nvmlDeviceGetPowerUsage(self.h) / 1000.0

    def _energy(self):
        try:
            return self.nv.nvmlDeviceGetTotalEnergyConsumption(self.h) / 1000.0   # mJ -> J
        except Exception:
            return None

    def _run(self):
        while not self._stop.is_set():
            try:
                w = self.read_w()
                self.t.append(time.perf_counter() - self.t0)
                self.p.append(w)
            except Exception:
                pass
            self._stop.wait(self.period_s)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.t1 = time.perf_counter()
        self.e1 = self._energy()
        try:
            self.nv.nvmlShutdown()
        except Exception:
            pass
        return False

    def result(self) -> dict:
        secs = self.t1 - self.t0
        energy = (self.e1 - self.e0) if (self.e0 is not None and self.e1 is not None) else None
        return {"seconds": secs, "t_s": self.t, "power_w": self.p, "source": self.source,
                "period_s": self.period_s,
                "mean_w_samples": float(np.mean(self.p)) if self.p else None,
                "mean_w_energy": energy / secs if energy is not None and secs > 0 else None,
                "energy_j": energy}
