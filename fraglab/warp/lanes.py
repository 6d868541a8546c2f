"""Lanes and 32-bit lane masks, the emulator's two errors, and the argument checks every part of
:mod:`fraglab.warp` shares."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

WARP_SIZE = 32
FULL_MASK = 0xFFFFFFFF

#: Lane ids 0..31, read-only. ``LANES`` plays the role of ``threadIdx.x % 32``.
LANES = np.arange(WARP_SIZE)
LANES.flags.writeable = False


class WarpError(ValueError):
    """A warp-level call broke CUDA's rules (CUDA would give undefined behaviour)."""


class LayoutError(ValueError):
    """A fragment layout table is malformed (out of range, holes, duplicates)."""


# --------------------------------------------------------------------------
# Lanes and masks
# --------------------------------------------------------------------------

def lane_id() -> np.ndarray:
    """Each lane's id, shape (32,): ``[0, 1, ..., 31]`` (a fresh, writable copy)."""
    return np.arange(WARP_SIZE)


def lanes() -> np.ndarray:
    """Same as ``lane_id()``."""
    return lane_id()


def lanes_in_mask(mask: int) -> np.ndarray:
    """The lanes a 32-bit mask names, as a shape-(32,) bool array.

    ``lanes_in_mask(0x0000000F)`` is True for lanes 0..3 only.
    """
    m = _as_mask_int(mask, "mask")
    return ((m >> LANES) & 1).astype(bool)


def mask_of(selected: Any) -> int:
    """The 32-bit mask naming some lanes: the inverse of ``lanes_in_mask``.

    ``selected`` is either a shape-(32,) bool array or a sequence of lane ids:
    ``mask_of([0, 1, 2, 3]) == 0xF``.
    """
    arr = np.asarray(selected)
    if arr.dtype == bool:
        if arr.shape != (WARP_SIZE,):
            raise ValueError(f"a bool lane selection must have shape (32,), got {arr.shape}")
        ids = np.flatnonzero(arr)
    else:
        if arr.dtype.kind not in "iu" and arr.size:
            raise TypeError(f"lane ids must be integers, got dtype {arr.dtype}")
        ids = arr.reshape(-1).astype(np.int64)
        if ((ids < 0) | (ids >= WARP_SIZE)).any():
            raise ValueError(f"lane ids must be in [0, 32), got {ids.tolist()}")
    return int(np.bitwise_or.reduce(np.int64(1) << ids, initial=0))


def _as_int(value: Any, name: str) -> int:
    """A Python int from an int, a NumPy integer scalar or a 0-d integer array."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    return int(value)


def _as_mask_int(value: Any, name: str) -> int:
    m = _as_int(value, name)
    if not 0 <= m <= FULL_MASK:
        raise ValueError(
            f"{name} must be a 32-bit unsigned value in [0, 2**32), got {m} "
            "(write 0xFFFFFFFF for the full warp, not -1)")
    return m


def _hex(m: int) -> str:
    return f"0x{int(m):08x}"


def _some(items: Sequence[Any], limit: int = 8) -> str:
    """'1, 2, 3' or '1, 2, 3, ... (10 in all)' for error messages."""
    items = list(items)
    text = ", ".join(str(x) for x in items[:limit])
    return text if len(items) <= limit else f"{text}, ... ({len(items)} in all)"

