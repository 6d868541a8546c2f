"""Warp-level helpers built on the shuffles: butterfly reductions and broadcasts."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .lanes import FULL_MASK, WARP_SIZE, lanes_in_mask
from .shuffle import _as_lane_set, shfl_sync, shfl_xor_sync

def _default_executing(mask: Any, active: Any) -> np.ndarray:
    """The helpers model code inside ``if (lane is in mask) { ... }``."""
    if active is not None or np.ndim(mask) != 0:
        return _as_lane_set(active, "active", default=True)
    return lanes_in_mask(mask)


def _per_lane_where(cond: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where(cond.reshape((WARP_SIZE,) + (1,) * (np.ndim(a) - 1)), a, b)


def reduce_xor(values: Any, op: Callable[[Any, Any], Any],
               offsets: Sequence[int] = (16, 8, 4, 2, 1), mask: Any = FULL_MASK, *,
               width: int = WARP_SIZE, active: Any = None) -> np.ndarray:
    """Butterfly reduction: ``for o in offsets: v = op(v, __shfl_xor_sync(mask, v, o))``.

    `op` is any binary function on arrays, e.g. ``np.maximum``, ``np.add``.
    With the default offsets every lane ends up holding the reduction over all
    32 lanes; with offsets (1, 2) each lane holds the reduction over its quad
    (lanes 4k..4k+3), the pattern used on mma accumulator rows.

    The executing lanes default to the lanes named in `mask` (the CUDA code
    would sit inside ``if (lane in mask)``); with per-lane masks, to all 32.
    Lanes that do not execute keep their values.
    """
    v = np.asarray(values)
    executing = _default_executing(mask, active)
    for offset in offsets:
        other = shfl_xor_sync(mask, v, offset, width, active=executing)
        v = _per_lane_where(executing, np.asarray(op(v, other)), v)
    return v


def broadcast(values: Any, src_lane: Any, mask: Any = FULL_MASK, *,
              width: int = WARP_SIZE, active: Any = None) -> np.ndarray:
    """Every executing lane gets lane `src_lane`'s value: ``__shfl_sync(mask, v, src_lane)``.

    With ``width < 32`` each segment broadcasts from its own lane
    ``src_lane % width``. Executing lanes default to the lanes in `mask`.
    """
    return shfl_sync(mask, values, src_lane, width, active=_default_executing(mask, active))
