"""Wrappers for ``kernels/01_tracer.cu`` (topic 01_tracer): which lane and register hold which
element of a WMMA fragment, found by tracing.

The idea (Morales, "Accelerating fused WMMA operations via in-register data permutation",
section 3.1, Algorithm 1): fill a matrix with values that encode their own coordinates, get it
into a fragment, let each lane write out its registers, and decode the values on the host.

    >>> from fraglab import tracer
    >>> t = tracer.trace("acc_16x16x16_f32")            # on a GPU: traced live
    >>> t.layout[5, 2]                                   # lane 5, register 2 -> (row, col)
    array([9, 2])
    >>> lay = tracer.layout("acc_16x16x16_f32")          # GPU: live; no GPU: the recording

Pieces, each usable without a GPU unless it says so:

* :data:`KINDS` - every fragment kind WMMA offers (accumulators, matrix_a, matrix_b), with its
  ``num_elements`` from the WMMA headers; :func:`get_kind` checks a name.
* Encodings (:data:`ENCODINGS`): ``linear`` (row*cols + col), ``paper`` (row*100 + col, as in
  Algorithm 1) and ``two_pass`` (rows, then columns, in two runs). :func:`exactness_problems`
  says when an encoding is too large for a type: ``row*100 + col`` in bf16 rounds.
* Rounding helpers that emulate the device conversions in NumPy (:func:`round_to`), and
  :func:`simulate_dump`, which produces the dump a GPU would give for a known layout.
* :func:`decode` turns dumps into a :class:`Trace`: the (32, num_elements, 2) layout plus the
  coverage, uniqueness and duplicate counts (built on :func:`fraglab.warp.validate_layout`).
* GPU: :func:`dump`, :func:`trace`, :func:`trace_kind` (both ways, compared), :func:`record`.
* :func:`layout`: live on a GPU (compared with the recording for that arch), the recording
  (``fraglab/layouts/<arch>.json``, default sm_90) without one.
* :func:`plot_layout`: heatmaps of lane and register per element, used by the book, the labs
  and failure messages.

Command line::

    python -m fraglab.tracer kinds                       # the num_elements table
    python -m fraglab.tracer record [--out fraglab/layouts/sm_90.json]   # needs a GPU
    python -m fraglab.tracer show [--arch sm_90] [KIND ...]
"""
from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from . import device, dtypes, launch, warp
from .dtypes import round_bf16, round_tf32  # noqa: F401  (re-exported)
from .fragments import (CPP_TYPES, KINDS, TYPES, ElemType, Kind,  # noqa: F401
                        UnsupportedKind, get_kind, kinds, num_elements_table,
                        require_supported, supported)
from .fragments import recording
from .fragments.recording import (DEFAULT_ARCH, FORMAT, LAYOUTS_DIR,  # noqa: F401
                                  RecordingMissing, compare_layouts, load_recording,
                                  recorded_layout, recording_path)

KERNELS = "01_tracer"
WAYS = ("load", "mma")


class TraceError(AssertionError):
    """A trace does not decode into a valid layout (coverage, uniqueness, bad values)."""


class LayoutMismatchWarning(UserWarning):
    """The layout traced on this GPU differs from the recording for its arch."""


# --------------------------------------------------------------------------------------------
# Encodings
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Encoding:
    """How coordinates become tracer values, and back."""
    name: str
    formula: str
    n_passes: int

    def passes(self, shape) -> list[np.ndarray]:
        """The tracer matrices (float32, shape ``shape``), one per pass."""
        rows, cols = shape
        r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
        if self.name == "linear":
            return [(r * cols + c).astype(np.float32)]
        if self.name == "paper":
            return [(r * 100 + c).astype(np.float32)]
        return [r.astype(np.float32), c.astype(np.float32)]

    def max_value(self, shape) -> int:
        return int(max(p.max() for p in self.passes(shape)))

    def decode(self, values, shape):
        """values (n_passes, 32, n) -> (layout (32, n, 2) int64 with -1 where undecodable,
        list of messages for undecodable entries)."""
        rows, cols = shape
        v = np.asarray(values, dtype=np.float64)
        if v.ndim != 3 or v.shape[0] != self.n_passes or v.shape[1] != 32:
            raise ValueError(f"encoding {self.name} wants {self.n_passes} dump(s) of shape "
                             f"(32, num_elements), got values of shape {v.shape}")
        ok = np.isfinite(v).all(axis=0) & (v == np.round(v)).all(axis=0)
        iv = np.where(np.isfinite(v), np.round(v), -1).astype(np.int64)
        if self.name == "linear":
            row, col = iv[0] // cols, iv[0] % cols
            ok &= (iv[0] >= 0) & (iv[0] < rows * cols)
        elif self.name == "paper":
            row, col = iv[0] // 100, iv[0] % 100
            ok &= (iv[0] >= 0)
        else:
            row, col = iv[0], iv[1]
        ok &= (row >= 0) & (row < rows) & (col >= 0) & (col < cols)
        lay = np.stack([np.where(ok, row, -1), np.where(ok, col, -1)], axis=-1)
        bad = []
        for lane, reg in np.argwhere(~ok):
            got = ", ".join(f"{x:g}" for x in v[:, lane, reg])
            bad.append(f"lane {lane} reg {reg} holds {got}: not a {self.name} code of a "
                       f"{rows}x{cols} tile")
        return lay, bad


ENCODINGS = {
    "linear": Encoding("linear", "row*cols + col", 1),
    "paper": Encoding("paper", "row*100 + col (Algorithm 1)", 1),
    "two_pass": Encoding("two_pass", "pass 1: row, pass 2: col", 2),
}


def value_path(kind: str | Kind, way: str = "load", inputs: str | None = None) -> list[str]:
    """The element types a tracer value is converted to on its way into the fragment."""
    k = get_kind(kind)
    way = _check_way(k, way)
    if way == "load":
        return [k.memory_type()]
    return [_check_inputs(k, inputs), k.dtype]


def exactness_problems(encoding: str, kind: str | Kind, way: str = "load",
                       inputs: str | None = None) -> list[str]:
    """Why ``encoding`` cannot trace ``kind`` exactly ([] when it can)."""
    k, enc = get_kind(kind), _check_encoding(encoding)
    problems = []
    if enc.name == "paper" and k.shape[1] > 100:
        problems.append(f"row*100 + col needs fewer than 100 columns; the tile has {k.shape[1]}")
    top = enc.max_value(k.shape)
    for t in value_path(k, way, inputs):
        et = TYPES[t]
        if et.is_int and top > et.hi:
            problems.append(f"{enc.formula} reaches {top}, outside {t}'s range "
                            f"{et.lo}..{et.hi}: the value wraps around")
        elif top > et.exact_limit:
            problems.append(f"{enc.formula} reaches {top}, but {t} holds every integer only up "
                            f"to {et.exact_limit} ({et.note}): larger codes round to a "
                            "neighbour's code")
    return problems


def choose_encoding(kind: str | Kind, way: str = "load", inputs: str | None = None) -> str:
    """``linear`` when row*cols + col is exact all the way, else ``two_pass``."""
    if not exactness_problems("linear", kind, way, inputs):
        return "linear"
    if not exactness_problems("two_pass", kind, way, inputs):
        return "two_pass"
    raise ValueError(f"no encoding traces {get_kind(kind).name} exactly")  # pragma: no cover


def _check_encoding(encoding) -> Encoding:
    if isinstance(encoding, Encoding):
        return encoding
    if encoding not in ENCODINGS:
        raise ValueError(f"unknown encoding {encoding!r}; known: {', '.join(ENCODINGS)} "
                         "(or 'auto')")
    return ENCODINGS[encoding]


def _check_way(k: Kind, way: str) -> str:
    if way not in WAYS:
        raise ValueError(f"way must be 'load' or 'mma', got {way!r}")
    if way == "mma" and not k.is_accumulator:
        raise ValueError(f"way 'mma' traces accumulators only; {k.name} is a {k.use} fragment "
                         "(use way='load')")
    return way


def _check_inputs(k: Kind, inputs: str | None) -> str:
    if not k.mma_inputs:
        raise ValueError(f"{k.name} is not an accumulator: it has no mma inputs")
    if inputs is None:
        return k.mma_inputs[0]
    if inputs not in k.mma_inputs:
        raise ValueError(f"{k.name} can be traced through mma with inputs "
                         f"{' or '.join(k.mma_inputs)}, not {inputs!r}")
    return inputs


# --------------------------------------------------------------------------------------------
# Decoding and checking
# --------------------------------------------------------------------------------------------

@dataclass
class Trace:
    """A decoded trace: ``layout[lane, reg] = (row, col)``, -1 where a value did not decode."""
    kind: Kind
    layout: np.ndarray
    encoding: str = "linear"
    way: str = "load"
    bad: list[str] = field(default_factory=list)

    @property
    def counts(self) -> np.ndarray:
        """How many (lane, reg) slots hold each element, shape (rows, cols)."""
        rows, cols = self.kind.shape
        c = np.zeros((rows, cols), dtype=np.int64)
        good = (self.layout >= 0).all(axis=-1)
        np.add.at(c, (self.layout[good][:, 0], self.layout[good][:, 1]), 1)
        return c

    @property
    def holes(self) -> int:
        return int((self.counts == 0).sum())

    @property
    def duplicated(self) -> int:
        """Elements held by more than one slot."""
        return int((self.counts > 1).sum())

    @property
    def extra_copies(self) -> int:
        """Slots beyond one per held element: slots - distinct elements held - bad slots."""
        return int(self.counts.sum() - (self.counts > 0).sum())

    def problems(self) -> list[str]:
        k, out = self.kind, []
        rows, cols = k.shape
        if self.bad:
            more = f" (and {len(self.bad) - 3} more)" if len(self.bad) > 3 else ""
            out.append(f"{len(self.bad)} values do not decode: " + "; ".join(self.bad[:3]) + more)
        good_layout = np.where(self.layout < 0, 0, self.layout)
        try:
            warp.validate_layout(good_layout, k.shape, allow_duplicates=True)
        except warp.LayoutError as e:
            if not self.bad:
                out.append(str(e))
        counts = self.counts
        if self.holes and self.bad:
            out.append(f"{self.holes} of {rows * cols} elements are held by no register")
        if k.slots == k.elements and self.duplicated:
            r, c = map(int, np.argwhere(counts > 1)[0])
            held = [f"lane {l} reg {i}" for l, i in np.argwhere(
                (self.layout[..., 0] == r) & (self.layout[..., 1] == c))]
            out.append(f"{self.duplicated} elements decode more than once although "
                       f"{k.num_elements} values a lane are exactly one per element, e.g. "
                       f"({r}, {c}) from {', '.join(held)}: uniqueness fails")
        elif k.slots > k.elements and counts.max() > 0 and not self.bad:
            held = counts[counts > 0]
            if held.min() != held.max():
                out.append(f"elements are held unevenly ({held.min()} to {held.max()} copies): "
                           "a fragment that replicates should replicate every element alike")
        return out

    @property
    def ok(self) -> bool:
        return not self.problems()

    def check(self) -> "Trace":
        """Raise :class:`TraceError` naming every problem; return self when the trace is good."""
        p = self.problems()
        if p:
            raise TraceError(f"trace of {self.kind.name} ({self.way}, {self.encoding} encoding) "
                             "is not a valid layout:\n  " + "\n  ".join(p))
        return self

    def summary(self) -> str:
        k = self.kind
        s = (f"{k.name}: {k.num_elements} value{'s' if k.num_elements > 1 else ''} x 32 lanes = "
             f"{k.slots} slots for {k.elements} elements; ")
        if not self.ok:
            return s + "INVALID: " + "; ".join(self.problems())
        if self.duplicated:
            c = self.counts
            return s + (f"every element held {c.min()} times ({self.extra_copies} duplicate "
                        "slots)")
        return s + "every element held once"


def decode(kind: str | Kind, values, encoding: str = "linear", way: str = "load") -> Trace:
    """Decode dumps into a :class:`Trace` (no check: call ``.check()`` or read ``.problems()``).

    ``values``: shape (32, num_elements) for one-pass encodings or (passes, 32, num_elements).
    """
    k = get_kind(kind)
    enc = _check_encoding(encoding)
    v = np.asarray(values, dtype=np.float64)
    if v.ndim == 2:
        v = v[None]
    if v.shape[1:] != (32, k.num_elements):
        raise ValueError(f"a dump of {k.name} has shape (32, {k.num_elements}), got "
                         f"{v.shape[1:] if v.ndim == 3 else v.shape}")
    lay, bad = enc.decode(v, k.shape)
    return Trace(k, lay, enc.name, way, bad)


def simulate_dump(kind: str | Kind, layout, encoding: str = "linear", way: str = "load",
                  inputs: str | None = None) -> np.ndarray:
    """The dump(s) a GPU would produce for a known ``layout``: each pass's tracer value of the
    element every slot holds, converted along :func:`value_path` exactly as the device does.
    Shape (passes, 32, num_elements). No GPU needed: this is how the exactness pitfall is shown
    on any machine."""
    k = get_kind(kind)
    lay = np.asarray(layout)
    if lay.shape != (32, k.num_elements, 2):
        raise ValueError(f"layout of {k.name} must have shape (32, {k.num_elements}, 2), "
                         f"got {lay.shape}")
    rows, cols = k.shape
    if lay.dtype.kind not in "iu" or lay.min() < 0 or (lay[..., 0] >= rows).any() \
            or (lay[..., 1] >= cols).any():
        raise ValueError(f"layout entries must be integer coordinates inside the {rows}x{cols} tile")
    out = []
    for p in _check_encoding(encoding).passes(k.shape):
        v = p[lay[..., 0], lay[..., 1]].astype(np.float64)
        for t in value_path(k, way, inputs):
            v = dtypes.round_to(v, t)
        out.append(v)
    return np.stack(out)


# --------------------------------------------------------------------------------------------
# On the GPU
# --------------------------------------------------------------------------------------------

def dump(kind: str | Kind, tracer, *, way: str = "load", inputs: str | None = None,
         source: str | None = None):
    """Run one tracer pass on the GPU; returns the (32, num_elements) float32 dump (NumPy).

    ``tracer``: a float32 CuPy array of the fragment's tile shape, row-major; the kernel converts
    it to the fragment's type. ``way``: "load" (load_matrix_sync into the fragment) or "mma"
    (Algorithm 1: tracer times identity; accumulators only), with ``inputs`` the mma input type.
    ``source`` replaces the kernel file (labs pass the learner's CUDA here).
    """
    k = get_kind(kind)
    way = _check_way(k, way)
    if way == "mma":
        inputs = _check_inputs(k, inputs)
    elif inputs is not None:
        raise ValueError("inputs= only applies to way='mma'")
    launch.check_array("tracer", tracer, dtype=np.float32, shape=k.shape)
    require_supported(k, inputs)
    fn = launch.get_kernel(KERNELS, k.kernel(way, inputs), source=source)
    out = launch.poisoned((32, k.num_elements), np.float32)
    launch.launch(fn, 1, 32, (tracer, out), sync=True)
    return out.get()


def trace(kind: str | Kind, *, way: str = "load", encoding: str = "auto",
          inputs: str | None = None, allow_inexact: bool = False, check: bool = True,
          source: str | None = None) -> Trace:
    """Trace ``kind`` on the GPU and decode it (GPU only).

    ``encoding="auto"`` picks one that is exact along the value's path. A named encoding that is
    not exact raises ``ValueError`` before anything runs, unless ``allow_inexact=True`` (to watch
    the pitfall happen); ``check=False`` returns a bad trace instead of raising.
    """
    k = get_kind(kind)
    way = _check_way(k, way)
    if way == "mma":
        inputs = _check_inputs(k, inputs)
    enc = choose_encoding(k, way, inputs) if encoding == "auto" else _check_encoding(encoding).name
    problems = exactness_problems(enc, k, way, inputs)
    if problems and not allow_inexact:
        raise ValueError(f"encoding {enc} cannot trace {k.name} exactly: " + "; ".join(problems)
                         + " (pass allow_inexact=True to see what goes wrong)")
    device.require_gpu(f"tracing {k.name}")
    import cupy
    values = [dump(k, cupy.asarray(p), way=way, inputs=inputs, source=source)
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


# --------------------------------------------------------------------------------------------
# Recordings
# --------------------------------------------------------------------------------------------

def _device_record() -> dict:
    try:
        from . import bench
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
    path = Path(path) if path else recording_path(arch)
    out = {"format": FORMAT, "arch": arch, "traced": True,
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
    load_recording.cache_clear()
    return out


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
            here = device.arch()
            try:
                rec = recorded_layout(k, here)
            except RecordingMissing:
                rec = None
            if rec is not None:
                diff = compare_layouts(_live[key], rec, k)
                if diff:
                    warnings.warn(LayoutMismatchWarning(
                        f"the layout traced on this GPU ({device.name()}, {here}) differs from "
                        f"the recording {recording_path(here).name}:\n{diff}"), stacklevel=2)
        return _live[key].copy()
    return recorded_layout(k, arch or DEFAULT_ARCH)


def source_line(arch: str | None = None) -> str:
    """Where :func:`layout` gets its tables, as a [gpu]/[cpu] line for notebooks."""
    if arch is None and device.gpu_available():
        return f"[gpu] layouts traced live on {device.name()} ({device.arch()})"
    a = arch or DEFAULT_ARCH
    try:
        d = load_recording(a)["device"]
        return (f"[cpu] layouts from the recording {a}.json, traced on {d.get('name')} "
                f"(driver {d.get('driver_version')}, CUDA runtime {d.get('cuda_runtime')})")
    except RecordingMissing:
        return f"[cpu] no recording for {a} yet: layouts need a GPU or a recording"


# --------------------------------------------------------------------------------------------
# Pictures and tables
# --------------------------------------------------------------------------------------------

def holders(layout, shape) -> list[list[list[tuple[int, int]]]]:
    """``h[row][col]`` = the (lane, reg) slots holding that element (see warp.inverse_layout)."""
    return warp.inverse_layout(np.asarray(layout), shape)


def element_table(layout, shape, what: str = "lane") -> np.ndarray:
    """(rows, cols) int array: the lane (``what="lane"``) or register (``"reg"``) of the first
    slot holding each element, -1 for an element no slot holds."""
    if what not in ("lane", "reg"):
        raise ValueError(f"what must be 'lane' or 'reg', got {what!r}")
    rows, cols = shape
    out = np.full((rows, cols), -1, dtype=np.int64)
    lay = np.asarray(layout)
    for lane in range(31, -1, -1):              # backwards, so the first holder wins
        for reg in range(lay.shape[1] - 1, -1, -1):
            r, c = lay[lane, reg]
            if 0 <= r < rows and 0 <= c < cols:
                out[r, c] = lane if what == "lane" else reg
    return out


def format_table(layout, shape, what: str = "lane") -> str:
    """The element table as text, like the paper's Figure 1 (rows R00.., columns C00..)."""
    t = element_table(layout, shape, what)
    rows, cols = shape
    head = "     " + " ".join(f"C{c:02d}" for c in range(cols))
    lines = [head] + [f"R{r:02d}  " + " ".join(f"{v:3d}" if v >= 0 else "  ." for v in t[r])
                      for r in range(rows)]
    return "\n".join(lines)


def plot_layout(layout, shape=None, *, kind: str | Kind | None = None, title: str | None = None,
                highlight=None, annotate: bool = True, what=("lane", "reg")):
    """Heatmaps of the lane and the register holding each element; returns the Figure.

    ``highlight``: optional bool (rows, cols) array; those elements get a red frame (failure
    messages use it to point at wrong elements). Elements held by several slots show the first
    holder and a ``+n`` for the n other copies.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    k = get_kind(kind) if kind is not None else None
    shape = tuple(shape) if shape is not None else (k.shape if k else None)
    if shape is None:
        raise ValueError("give shape=(rows, cols) or kind=")
    lay = np.asarray(layout)
    rows, cols = shape
    counts = np.zeros(shape, dtype=np.int64)
    ok = (lay[..., 0] >= 0) & (lay[..., 0] < rows) & (lay[..., 1] >= 0) & (lay[..., 1] < cols)
    np.add.at(counts, (lay[ok][:, 0], lay[ok][:, 1]), 1)
    what = (what,) if isinstance(what, str) else tuple(what)
    cell = 0.36 if max(rows, cols) <= 16 else 0.3
    fig, axes = plt.subplots(1, len(what), figsize=(len(what) * (cols * cell + 1.2),
                                                   rows * cell + 1.0), squeeze=False)
    for ax, w in zip(axes[0], what):
        t = element_table(lay, shape, w)
        vmax = 31 if w == "lane" else max(lay.shape[1] - 1, 1)
        cmap = plt.get_cmap("tab20b" if w == "lane" else "tab10").with_extremes(under="white")
        ax.imshow(np.where(t < 0, -1, t), cmap=cmap, vmin=0, vmax=vmax, aspect="equal")
        if annotate:
            fs = 6 if max(rows, cols) <= 16 else 4.5
            for r in range(rows):
                for c in range(cols):
                    if t[r, c] < 0:
                        continue
                    s = str(t[r, c]) + (f"+{counts[r, c] - 1}" if counts[r, c] > 1 else "")
                    ax.text(c, r, s, ha="center", va="center", fontsize=fs, color="white")
        if highlight is not None:
            for r, c in np.argwhere(np.asarray(highlight)):
                ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, ec="red", lw=1.5))
        ax.set_title({"lane": "lane holding each element",
                      "reg": "register (x[i]) holding each element"}[w], fontsize=9)
        step = 1 if max(rows, cols) <= 16 else 4
        ax.set_xticks(range(0, cols, step))
        ax.set_yticks(range(0, rows, step))
        ax.tick_params(labelsize=7)
        ax.set_xlabel("col", fontsize=8)
        ax.set_ylabel("row", fontsize=8)
        for x in range(8, cols, 8):
            ax.axvline(x - 0.5, color="k", lw=0.6)
        for y in range(8, rows, 8):
            ax.axhline(y - 0.5, color="k", lw=0.6)
    fig.suptitle(title or (k.describe() if k else ""), fontsize=10)
    fig.tight_layout()
    return fig


def plot_mismatch(got, want, kind: str | Kind, title: str | None = None):
    """The expected layout with the elements whose holder differs in ``got`` framed in red."""
    k = get_kind(kind)
    g, w = np.asarray(got), np.asarray(want)
    bad = np.zeros(k.shape, dtype=bool)
    for lane, reg in np.argwhere((g != w).any(axis=-1)):
        for r, c in (w[lane, reg], g[lane, reg]):
            if 0 <= r < k.shape[0] and 0 <= c < k.shape[1]:
                bad[r, c] = True
    return plot_layout(w, k.shape, kind=k, highlight=bad,
                       title=title or f"{k.name}: expected layout, wrong elements framed")


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------

def _main(argv=None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python -m fraglab.tracer", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("kinds", help="print every fragment kind and its num_elements")
    r = sub.add_parser("record", help="trace every kind on this GPU and write the JSON recording")
    r.add_argument("--out", help="output file (default fraglab/layouts/<arch>.json)")
    r.add_argument("--kinds", help="comma-separated kind names (default: all)")
    r.add_argument("--keep-going", action="store_true",
                   help="record the kinds that trace well, list the failures, exit 1")
    s = sub.add_parser("show", help="print layouts and fitted formulas")
    s.add_argument("--arch", default=None, help="a recording's arch (default: this machine)")
    s.add_argument("kind", nargs="*")
    a = p.parse_args(argv)
    if a.cmd == "kinds":
        print(num_elements_table())
        return 0
    if a.cmd == "record":
        names = a.kinds.split(",") if a.kinds else None
        print(device.status_line())
        rec = record(a.out, names, keep_going=a.keep_going)
        dest = Path(a.out) if a.out else recording_path(rec["arch"])
        print(f"wrote {dest}: {len(rec['kinds'])} kinds traced, "
              f"{len(rec['unsupported'])} unsupported, {len(rec.get('failed', {}))} failed")
        return 1 if rec.get("failed") else 0
    from . import forward_mapping
    print(source_line(a.arch))
    for name in a.kind or list(KINDS):
        k = get_kind(name)
        try:
            lay = layout(k, a.arch)
        except (RecordingMissing, UnsupportedKind, TraceError) as e:
            print(f"{name}: {e}")
            continue
        print(f"\n{k.name}  {k.describe()}")
        print(format_table(lay, k.shape, "lane"))
        print(forward_mapping.describe_fit(lay, k))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
