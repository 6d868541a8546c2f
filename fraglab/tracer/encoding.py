"""Tracer encodings: how (row, col) become tracer values, and whether a type holds them exactly.

``linear`` (row*cols + col), ``paper`` (row*100 + col, as in Algorithm 1) and ``two_pass`` (rows,
then columns, in two runs). A value travels from the float tracer through the element types of
:func:`value_path`; :func:`exactness_problems` says when an encoding is too large for one of them
(``row*100 + col`` in bf16 rounds to a neighbour's code), :func:`choose_encoding` picks a safe one.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..fragments import TYPES, Kind, get_kind

#: The two ways into a fragment: load_matrix_sync, or Algorithm 1's tracer x identity (mma_sync).
WAYS = ("load", "mma")


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
    way = check_way(k, way)
    if way == "load":
        return [k.memory_type()]
    return [check_inputs(k, inputs), k.dtype]


def exactness_problems(encoding: str, kind: str | Kind, way: str = "load",
                       inputs: str | None = None) -> list[str]:
    """Why ``encoding`` cannot trace ``kind`` exactly ([] when it can)."""
    k, enc = get_kind(kind), check_encoding(encoding)
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


def check_encoding(encoding) -> Encoding:
    if isinstance(encoding, Encoding):
        return encoding
    if encoding not in ENCODINGS:
        raise ValueError(f"unknown encoding {encoding!r}; known: {', '.join(ENCODINGS)} "
                         "(or 'auto')")
    return ENCODINGS[encoding]


def check_way(k: Kind, way: str) -> str:
    if way not in WAYS:
        raise ValueError(f"way must be 'load' or 'mma', got {way!r}")
    if way == "mma" and not k.is_accumulator:
        raise ValueError(f"way 'mma' traces accumulators only; {k.name} is a {k.use} fragment "
                         "(use way='load')")
    return way


def check_inputs(k: Kind, inputs: str | None) -> str:
    if not k.mma_inputs:
        raise ValueError(f"{k.name} is not an accumulator: it has no mma inputs")
    if inputs is None:
        return k.mma_inputs[0]
    if inputs not in k.mma_inputs:
        raise ValueError(f"{k.name} can be traced through mma with inputs "
                         f"{' or '.join(k.mma_inputs)}, not {inputs!r}")
    return inputs
