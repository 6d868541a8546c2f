"""Tracing on the GPU: the wrappers of ``kernels/01_tracer.cu`` (:func:`dump`, :func:`trace`,
:func:`trace_kind`), and :func:`layout`, live on a GPU (checked against the recording for its
arch), the recording without one."""
from __future__ import annotations

import warnings

import numpy as np

from .. import device, launch, warp
from ..fragments import Kind, get_kind, require_supported
from ..fragments import recording
from .decode import Trace, TraceError, decode
from .encoding import (ENCODINGS, check_encoding, check_inputs, check_way, choose_encoding,
                       exactness_problems)

KERNELS = "01_tracer"


class LayoutMismatchWarning(UserWarning):
    """The layout traced on this GPU differs from the recording for its arch."""


def dump(kind: str | Kind, tracer, *, way: str = "load", inputs: str | None = None,
         source: str | None = None):
    """Run one tracer pass on the GPU; returns the (32, num_elements) float32 dump (NumPy).

    ``tracer``: a float32 CuPy array of the fragment's tile shape, row-major; the kernel converts
    it to the fragment's type. ``way``: "load" (load_matrix_sync into the fragment) or "mma"
    (Algorithm 1: tracer times identity; accumulators only), with ``inputs`` the mma input type.
    ``source`` replaces the kernel file (labs pass the learner's CUDA here).
    """
    k = get_kind(kind)
    way = check_way(k, way)
    if way == "mma":
        inputs = check_inputs(k, inputs)
    elif inputs is not None:
        raise ValueError("inputs= only applies to way='mma'")
    launch.check_array("tracer", tracer, dtype=np.float32, shape=k.shape)
    require_supported(k, inputs)
    fn = launch.get_kernel(KERNELS, k.kernel(way, inputs), source=source)
    out = launch.poisoned((32, k.num_elements), np.float32)
    launch.launch(fn, 1, 32, (tracer, out), sync=True)
    return launch.to_host(out)


def trace(kind: str | Kind, *, way: str = "load", encoding: str = "auto",
          inputs: str | None = None, allow_inexact: bool = False, check: bool = True,
          source: str | None = None) -> Trace:
    """Trace ``kind`` on the GPU (or, without one, on the PTX interpreter) and decode it.

    ``encoding="auto"`` picks one that is exact along the value's path. A named encoding that is
    not exact raises ``ValueError`` before anything runs, unless ``allow_inexact=True`` (to watch
    the pitfall happen); ``check=False`` returns a bad trace instead of raising.
    """
    k = get_kind(kind)
    way = check_way(k, way)
    if way == "mma":
        inputs = check_inputs(k, inputs)
    enc = choose_encoding(k, way, inputs) if encoding == "auto" else check_encoding(encoding).name
    problems = exactness_problems(enc, k, way, inputs)
    if problems and not allow_inexact:
        raise ValueError(f"encoding {enc} cannot trace {k.name} exactly: " + "; ".join(problems)
                         + " (pass allow_inexact=True to see what goes wrong)")
    values = [dump(k, launch.to_device(p), way=way, inputs=inputs, source=source)
              for p in ENCODINGS[enc].passes(k.shape)]
    t = decode(k, np.stack(values), enc, way)
    return t.check() if check else t


def trace_kind(kind: str | Kind) -> dict:
    """Trace one kind every way it allows (load, and mma with each input type for accumulators),
    check each trace and that all ways agree. Returns ``{"layout", "ways": {label: encoding}}``."""
    k = get_kind(kind)
    traces = {"load": trace(k, way="load")}
    for inp in k.mma_inputs:
        traces[f"mma_{inp}"] = trace(k, way="mma", inputs=inp)
    ref = traces["load"].layout
    for label, t in traces.items():
        if not np.array_equal(t.layout, ref):
            diff = warp.format_diff(t.layout.reshape(32, -1), ref.reshape(32, -1))
            raise TraceError(f"{k.name}: way {label} and way load disagree:\n{diff}")
    return {"layout": ref, "ways": {label: t.encoding for label, t in traces.items()},
            "trace": traces["load"]}


# Layouts traced live in this process, by (device id, kind): tracing all ways takes a moment.
_live: dict[tuple, np.ndarray] = {}


def layout(kind: str | Kind, arch: str | None = None) -> np.ndarray:
    """The (32, num_elements, 2) layout of ``kind``: ``layout[lane, reg] = (row, col)``.

    ``arch=None`` means this machine: on a GPU, traced live (every way, checked) and compared with
    the recording for its arch, a difference being reported as a :class:`LayoutMismatchWarning`
    that shows the slots that differ; without a GPU, the recording for ``DEFAULT_ARCH`` (sm_90).
    A named ``arch`` always means its recording.
    """
    k = get_kind(kind)
    if arch is None and device.gpu_available():
        import cupy
        key = (cupy.cuda.Device().id, k.name)
        if key not in _live:
            require_supported(k)
            _live[key] = trace_kind(k)["layout"]
            _warn_if_not_recorded(_live[key], k)
        return _live[key].copy()
    return recording.layout(k, arch)


def _warn_if_not_recorded(lay: np.ndarray, k: Kind) -> None:
    here = device.arch()
    try:
        rec = recording.recorded_layout(k, here)
    except recording.RecordingMissing:
        return
    diff = recording.compare_layouts(lay, rec, k)
    if diff:
        warnings.warn(LayoutMismatchWarning(
            f"the layout traced on this GPU ({device.name()}, {here}) differs from the "
            f"recording {recording.recording_path(here).name}:\n{diff}"), stacklevel=3)


def source_line(arch: str | None = None) -> str:
    """Where :func:`layout` gets its tables, as a [gpu]/[cpu] line for notebooks."""
    if arch is None and device.gpu_available():
        return f"[gpu] layouts traced live on {device.name()} ({device.arch()})"
    return recording.source_line(arch or recording.DEFAULT_ARCH)
