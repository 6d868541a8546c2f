"""Writing a recording: trace every kind this GPU supports and save the layouts as JSON
(``fraglab/layouts/<arch>.json``; reading and checking them is :mod:`fraglab.fragments.recording`)."""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from .. import device
from ..fragments import KINDS, get_kind, supported
from ..fragments import recording
from .decode import TraceError
from .live import trace_kind


def _device_record() -> dict:
    try:
        from .. import bench
        info = dict(bench.device_info())
    except Exception as e:  # bench missing or partial: the minimum, straight from CuPy
        import cupy
        rt = cupy.cuda.runtime
        props = rt.getDeviceProperties(cupy.cuda.Device().id)
        name = props["name"]
        info = {"name": name.decode() if isinstance(name, bytes) else str(name),
                "compute_capability": f"{props['major']}.{props['minor']}",
                "cuda_driver_api_version": rt.driverGetVersion(),
                "cuda_runtime_version": rt.runtimeGetVersion(),
                "note": f"fraglab.bench.device_info unavailable ({type(e).__name__})"}
    for private in ("hostname", "pci_bus_id", "clocks"):
        info.pop(private, None)
    return info


def record(path: str | Path | None = None, kinds_to_trace=None, *, verbose: bool = True,
           keep_going: bool = False) -> dict:
    """Trace every kind the GPU supports (both ways for accumulators), check, and write JSON.

    The file holds the layouts, the GPU name, compute capability, driver and CUDA versions, and
    the kinds this GPU could not run (with the reason). A kind whose trace fails stops the
    recording (nothing is written) unless ``keep_going``: then the failures are written under
    ``"failed"`` and the recording is incomplete (the tests refuse to treat it as complete).
    GPU only.
    """
    device.require_gpu("recording fragment layouts")
    arch = device.arch()
    path = Path(path) if path else recording.recording_path(arch)
    out = {"format": recording.FORMAT, "arch": arch, "traced": True,
           "how": "traced on the GPU by `python -m fraglab.tracer record` (kernels/01_tracer.cu)",
           "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "device": _device_record(), "kinds": {}, "unsupported": {}, "failed": {}}
    names = [get_kind(k).name for k in (kinds_to_trace or KINDS)]
    for name in names:
        k = KINDS[name]
        ok, why = supported(k)
        if not ok:
            out["unsupported"][name] = why
            if verbose:
                print(f"  {name:22s} unsupported: {why}")
            continue
        try:
            res = trace_kind(k)
        except (TraceError, ValueError) as e:
            out["failed"][name] = str(e)
            if verbose:
                print(f"  {name:22s} FAILED: {e}")
            if not keep_going:
                raise
            continue
        lay = res["layout"]
        out["kinds"][name] = {
            "fragment": k.describe(), "rows": k.shape[0], "cols": k.shape[1],
            "num_elements": k.num_elements, "ways": res["ways"],
            "copies": int(res["trace"].counts.max()),
            "row": lay[..., 0].tolist(), "col": lay[..., 1].tolist(),
        }
        if verbose:
            print(f"  {name:22s} {res['trace'].summary().split(': ', 1)[1]}")
    if not out["failed"]:
        del out["failed"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(recording.dumps(out))
    recording.load_recording.cache_clear()
    return out
