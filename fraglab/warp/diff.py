"""Grading messages: where two arrays differ, named by lane and register."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .lanes import WARP_SIZE


def _same(a: np.ndarray, b: np.ndarray, equal_nan: bool) -> np.ndarray:
    """Elementwise a == b, optionally counting NaN == NaN as equal."""
    eq = np.asarray(a == b)
    if equal_nan and np.asarray(a).dtype.kind in "fc" and np.asarray(b).dtype.kind in "fc":
        eq |= np.isnan(a) & np.isnan(b)
    return eq


def format_diff(got: Any, expected: Any, *, max_items: int = 5, equal_nan: bool = False,
                rtol: float = 0.0, atol: Any = 0.0,
                index_names: Sequence[str] | None = None) -> str:
    """Describe where `got` differs from `expected`; return ``""`` when they match.

    Typical use: ``msg = format_diff(frag, want); assert not msg, msg``. Output::

        3 of 256 values wrong:
          lane 4 reg 2: got 7.0, expected 9.0
          ...

    Positions are named "lane L reg R" for shape (32,) and (32, n) arrays,
    "element (i, j)" otherwise; pass e.g. ``index_names=("row", "col")`` to
    choose. Comparison is exact unless `rtol`/`atol` are given. NaN never
    equals NaN unless ``equal_nan=True``. At most `max_items` positions are
    listed. ``atol`` may be an array of the shape of `expected` (a bound per element).
    """
    g, e = np.asarray(got), np.asarray(expected)
    if g.shape != e.shape:
        return f"shape mismatch: got {g.shape}, expected {e.shape}"
    numeric = g.dtype.kind in "iufc" and e.dtype.kind in "iufc"
    if numeric and (np.any(rtol) or np.any(atol)):
        ok = np.isclose(g, e, rtol=rtol, atol=atol, equal_nan=equal_nan)
    else:
        ok = _same(g, e, equal_nan)
    wrong = np.argwhere(~ok)
    if not wrong.size:
        return ""

    if index_names is None and g.ndim in (1, 2) and g.shape[0] == WARP_SIZE:
        index_names = ("lane", "reg")

    def where(idx: Sequence[int]) -> str:
        if index_names is not None:
            return " ".join(f"{n} {int(i)}" for n, i in zip(index_names, idx))
        return f"element {tuple(int(i) for i in idx)}"

    lines = [f"{len(wrong)} of {g.size} values wrong:"]
    lines += [f"  {where(idx)}: got {g[tuple(idx)]}, expected {e[tuple(idx)]}"
              for idx in wrong[:max_items]]
    if len(wrong) > max_items:
        lines.append(f"  ... and {len(wrong) - max_items} more")
    if not equal_nan and numeric and g.dtype.kind in "fc" and e.dtype.kind in "fc":
        both_nan = np.isnan(g) & np.isnan(e)
        if both_nan.any():
            lines.append(f"  ({int(both_nan.sum())} of these are NaN vs NaN; "
                         "pass equal_nan=True to count those as equal)")
    return "\n".join(lines)
