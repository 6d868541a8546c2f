"""Decoding dumps into layouts, with coverage, uniqueness and duplicate checks; and the dump a GPU
would give for a known layout (:func:`simulate_dump`), so that every check runs without a GPU."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import dtypes, warp
from ..fragments import Kind, get_kind
from .encoding import check_encoding, value_path


class TraceError(AssertionError):
    """A trace does not decode into a valid layout (coverage, uniqueness, bad values)."""


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
    enc = check_encoding(encoding)
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
    for p in check_encoding(encoding).passes(k.shape):
        v = p[lay[..., 0], lay[..., 1]].astype(np.float64)
        for t in value_path(k, way, inputs):
            v = dtypes.round_to(v, t)
        out.append(v)
    return np.stack(out)
