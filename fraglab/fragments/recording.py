"""Recorded fragment layouts: the tables traced on real GPUs, one JSON file per arch.

``fraglab/layouts/<arch>.json`` (see its README) holds, for every kind a GPU supports, the
``(32, num_elements, 2)`` table ``layout[lane, reg] = (row, col)`` read back from the hardware by
the tracer (topic 01, ``python -m fraglab.tracer record``). Chapters 02, 03, 05 and 06 use these
tables as a fact: this module reads and checks them, and knows their file format
(:func:`dumps` writes it). Tracing live on a GPU is the tracer's job
(:func:`fraglab.tracer.layout`).

    >>> from fraglab.fragments import recording
    >>> recording.recorded_layout("acc_16x16x16_f32", "sm_90")[5, 2]     # lane 5, register 2
    array([9, 2])

Not re-exported by :mod:`fraglab.fragments`: it checks tables with :mod:`fraglab.warp`, which
itself uses the documented layouts of that package; import it as ``fraglab.fragments.recording``.
"""
from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

import numpy as np

from .. import device, warp
from .catalogue import Kind, get_kind

LAYOUTS_DIR = Path(__file__).resolve().parent.parent / "layouts"
#: The recording GPU-less machines use when no arch is named (the course's H100).
DEFAULT_ARCH = "sm_90"
FORMAT = "fraglab.tracer/1"


class RecordingMissing(FileNotFoundError):
    """No recorded layouts for this arch (they are made on a GPU by ``record``)."""


def recording_path(arch: str = DEFAULT_ARCH) -> Path:
    return LAYOUTS_DIR / f"{arch}.json"


def dumps(rec: dict) -> str:
    """A recording as JSON text, one line per lane, so that it reads (and diffs) as a table."""
    text = json.dumps(rec, indent=1)
    return re.sub(r"\[\s+([-\d,\s]+?)\s+\]", lambda m: "[" + " ".join(m.group(1).split()) + "]",
                  text) + "\n"


@lru_cache(maxsize=None)
def load_recording(arch: str = DEFAULT_ARCH, path: str | None = None) -> dict:
    """The recording for ``arch`` (``fraglab/layouts/<arch>.json``), checked.

    Raises :class:`RecordingMissing` when there is none: recordings are made by tracing a real
    GPU (``python -m fraglab.tracer record``), never written by hand.
    """
    p = Path(path) if path else recording_path(arch)
    if not p.is_file():
        have = sorted(q.stem for q in LAYOUTS_DIR.glob("sm_*.json"))
        raise RecordingMissing(
            f"no recorded layouts for {arch} ({p} does not exist; recordings here: "
            f"{', '.join(have) or 'none'}). Make one on a GPU of that arch with "
            "`python -m fraglab.tracer record`.")
    rec = json.loads(p.read_text())
    if rec.get("format") != FORMAT or not rec.get("traced"):
        raise ValueError(f"{p} is not a traced fraglab layout recording (format {FORMAT})")
    for name in rec["kinds"]:
        _entry_layout(rec, name, str(p))      # validates every entry
    return rec


def _entry_layout(rec: dict, name: str, where: str = "recording") -> np.ndarray:
    k = get_kind(name)
    e = rec["kinds"][name]
    lay = np.stack([np.asarray(e["row"]), np.asarray(e["col"])], axis=-1).astype(np.int64)
    if lay.shape != (32, k.num_elements, 2):
        raise ValueError(f"{where}: {name} has shape {lay.shape}, expected (32, {k.num_elements}, 2)")
    warp.validate_layout(lay, k.shape, allow_duplicates=True)
    return lay


def recorded_layout(kind: str | Kind, arch: str = DEFAULT_ARCH) -> np.ndarray:
    """The recorded (32, num_elements, 2) layout of ``kind`` for ``arch``."""
    k = get_kind(kind)
    rec = load_recording(arch)
    if k.name not in rec["kinds"]:
        why = rec.get("unsupported", {}).get(k.name, "not traced")
        raise RecordingMissing(f"the {arch} recording has no {k.name}: {why}")
    return _entry_layout(rec, k.name)


def machine_arch(arch: str | None = None) -> str:
    """``arch``, or for ``None`` this machine's: the GPU's arch, ``DEFAULT_ARCH`` without one."""
    if arch is not None:
        return arch
    return device.arch() if device.gpu_available() else DEFAULT_ARCH


def layout(kind: str | Kind, arch: str | None = None) -> np.ndarray:
    """The recorded layout of ``kind`` for ``arch`` (``None``: :func:`machine_arch`).

    No tracing here: a GPU whose arch has no recording raises :class:`RecordingMissing` (trace it
    live with :func:`fraglab.tracer.layout`, or record it with ``python -m fraglab.tracer record``).
    """
    return recorded_layout(kind, machine_arch(arch))


def source_line(arch: str | None = None) -> str:
    """Which recording :func:`layout` reads, as a [gpu]/[cpu] line for notebooks."""
    a = machine_arch(arch)
    tag = "[gpu]" if arch is None and device.gpu_available() else "[cpu]"
    try:
        d = load_recording(a)["device"]
        return (f"{tag} layouts from the recording {a}.json, traced on {d.get('name')} "
                f"(driver {d.get('driver_version')}, CUDA runtime {d.get('cuda_runtime')})")
    except RecordingMissing:
        return f"{tag} no recording for {a} yet: layouts need a GPU or a recording"


def compare_layouts(got, want, kind: str | Kind) -> str:
    """"" when equal, else a description of the (lane, reg) slots whose (row, col) differ."""
    k = get_kind(kind)
    g, w = np.asarray(got), np.asarray(want)
    if g.shape != w.shape:
        return f"{k.name}: layouts have shapes {g.shape} and {w.shape}"
    wrong = np.argwhere((g != w).any(axis=-1))
    if not len(wrong):
        return ""
    lines = [f"{k.name}: {len(wrong)} of {k.slots} slots hold a different element:"]
    for lane, reg in wrong[:6]:
        lines.append(f"  lane {lane} reg {reg}: ({g[lane, reg, 0]}, {g[lane, reg, 1]}), "
                     f"expected ({w[lane, reg, 0]}, {w[lane, reg, 1]})")
    if len(wrong) > 6:
        lines.append(f"  ... and {len(wrong) - 6} more")
    return "\n".join(lines)
