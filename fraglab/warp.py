"""A NumPy emulator of one CUDA warp, for register permutations and warp reductions.

The model
---------
A warp is 32 threads ("lanes") that run in lockstep. Each lane has its own
registers, so a warp's registers form a 2-D array::

    regs.shape == (32, n_regs)      # regs[lane, r] is register r of that lane

One column, ``regs[:, r]``, is "one register across the warp": a shape-(32,)
array with one value per lane. The shuffle functions below take such a column
(called ``var``, as in CUDA) and return the column every lane receives.

Everything follows the CUDA C++ Programming Guide, section "Warp Shuffle
Functions", and the PTX ISA description of ``shfl.sync`` (its pseudocode is
the ground truth for the corner cases; see ``_shuffle``). Where CUDA says
"undefined", this emulator raises an error instead of inventing a value, so a
program that runs cleanly here does not rely on undefined behaviour:

* ``WarpError``  -- a shuffle broke the member-mask rules (see ``shfl_sync``);
* ``LayoutError`` -- a fragment layout table is malformed.

Quick example (a butterfly max over the whole warp)::

    >>> import numpy as np
    >>> from fraglab import warp
    >>> v = np.arange(32.0)
    >>> for offset in (16, 8, 4, 2, 1):
    ...     v = np.maximum(v, warp.shfl_xor_sync(0xFFFFFFFF, v, offset))
    >>> float(v[0]), float(v[31])
    (31.0, 31.0)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = [
    "WARP_SIZE", "FULL_MASK", "LANES", "WarpError", "LayoutError",
    "lane_id", "lanes", "lanes_in_mask", "mask_of",
    "shfl_sync", "shfl_up_sync", "shfl_down_sync", "shfl_xor_sync",
    "reduce_xor", "broadcast",
    "validate_layout", "to_fragment", "from_fragment", "inverse_layout",
    "accumulator_16x16_sm80", "format_diff",
]

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


# --------------------------------------------------------------------------
# Argument checking for the shuffles
# --------------------------------------------------------------------------

def _as_lane_values(var: Any, name: str) -> np.ndarray:
    arr = np.asarray(var)
    if arr.ndim == 0 or arr.shape[0] != WARP_SIZE:
        raise ValueError(
            f"{name}: var must hold one value per lane, shape (32,) "
            f"(or (32, ...) for several registers at once), got shape {arr.shape}")
    return arr


def _as_width(width: Any) -> int:
    w = _as_int(width, "width")
    # CUDA: "width must have a value which is a power of two in the range [1, warpSize]".
    if w not in (1, 2, 4, 8, 16, 32):
        raise ValueError(f"width must be a power of two in [1, 32], got {w}")
    return w


def _as_lane_set(value: Any, name: str, default: bool) -> np.ndarray:
    """A shape-(32,) bool array from None, a 32-bit int mask or a bool array."""
    if value is None:
        return np.full(WARP_SIZE, default)
    if np.ndim(value) == 0:
        return lanes_in_mask(_as_mask_int(value, name))
    arr = np.asarray(value)
    if arr.dtype != bool or arr.shape != (WARP_SIZE,):
        raise TypeError(
            f"{name} must be a 32-bit int mask or a shape-(32,) bool array, "
            f"got dtype {arr.dtype} shape {arr.shape} (use .astype(bool) for 0/1 arrays)")
    return arr.copy()


def _as_member_masks(mask: Any) -> tuple[np.ndarray, bool]:
    """(per-lane masks as int64 (32,), True when one mask was given for all lanes)."""
    if np.ndim(mask) == 0:
        return np.full(WARP_SIZE, _as_mask_int(mask, "mask"), dtype=np.int64), True
    arr = np.asarray(mask)
    if arr.shape != (WARP_SIZE,):
        raise ValueError(f"mask must be one int or a shape-(32,) array of per-lane masks, got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise TypeError(f"per-lane masks must be integers, got dtype {arr.dtype}")
    bad = np.flatnonzero((arr < 0) | (arr > FULL_MASK))
    if bad.size:
        raise ValueError(
            f"per-lane masks must be 32-bit unsigned values; lane {bad[0]} passes {arr[bad[0]]} "
            f"(lanes with bad masks: {_some(bad)})")
    return arr.astype(np.int64), False


def _as_lane_arg(arg: Any, name: str, executing: np.ndarray, in_0_31: bool) -> np.ndarray:
    """The per-lane source lane / delta / lane mask as int64 (32,)."""
    arr = np.asarray(arg)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an int or a shape-(32,) int array, got dtype {arr.dtype}")
    if arr.ndim == 0:
        arr = np.full(WARP_SIZE, arr)
    elif arr.shape != (WARP_SIZE,):
        raise ValueError(f"{name} must be an int or a shape-(32,) int array, got shape {arr.shape}")
    if in_0_31:
        # The hardware only looks at the low 5 bits (PTX: bval[4:0] = b[4:0]), so e.g. a
        # delta of 33 acts like 1 on a GPU although the C++ guide's wording suggests
        # "out of range, keep own value". Rather than pick one, refuse the ambiguity.
        bad = np.flatnonzero(executing & ((arr < 0) | (arr > 31)))
        if bad.size:
            raise ValueError(
                f"{name} must be in [0, 31]; lane {bad[0]} passes {arr[bad[0]]} "
                "(the hardware uses only its low 5 bits, so larger values do not mean "
                f"what they seem to; lanes affected: {_some(bad)})")
    return arr.astype(np.int64)


# --------------------------------------------------------------------------
# The member-mask rules
# --------------------------------------------------------------------------

def _check_members(name: str, masks: np.ndarray, uniform: bool, executing: np.ndarray,
                   exited: np.ndarray, source: np.ndarray) -> None:
    """Raise WarpError if the call breaks a rule for which CUDA promises nothing.

    CUDA C++ Programming Guide, Warp Shuffle Functions: "Each calling thread must have
    its own bit set in the mask and all non-exited threads named in mask must execute
    the same intrinsic with the same mask, or the result is undefined." and "Threads
    may only read data from another thread which is actively participating in the
    __shfl_sync() command. If the target thread is inactive, the retrieved value is
    undefined."
    """
    names = ((masks[:, None] >> LANES[None, :]) & 1).astype(bool)   # names[i, j]: i's mask has bit j
    ex = np.flatnonzero(executing)
    whose = "the" if uniform else "its own"

    # (a) Every executing lane must be in its own mask.
    bad = ex[~names[ex, ex]]
    if bad.size:
        i = bad[0]
        raise WarpError(
            f"{name}: lane {i} executes the call but is not in {whose} mask {_hex(masks[i])}; "
            f"every calling lane must set its own bit (undefined behaviour in CUDA). "
            f"Lanes affected: {_some(bad)}")

    # (b) Every live lane a mask names must execute the call (else nobody it waits for arrives).
    absent = names[ex] & ~executing[None, :] & ~exited[None, :]
    if absent.any():
        k, j = np.argwhere(absent)[0]
        i = ex[k]
        if uniform:
            missing = np.flatnonzero(absent.any(axis=0))
            raise WarpError(
                f"{name}: mask {_hex(masks[i])} names lane {j}, which does not execute the call; "
                f"on a GPU the calling lanes would wait for a lane that never arrives "
                f"(undefined behaviour, often a hang). Named but not executing: {_some(missing)}; "
                f"executing: {_hex(mask_of(executing))}")
        raise WarpError(
            f"{name}: lane {i} passes mask {_hex(masks[i])}, which names lane {j}, but lane {j} "
            f"does not execute the call (undefined behaviour in CUDA: every non-exited lane "
            f"named in a mask must execute the same call)")

    # (b') ... and must pass the same mask. Only per-lane masks can differ.
    if not uniform:
        differ = names[ex] & executing[None, :] & (masks[ex, None] != masks[None, :])
        if differ.any():
            k, j = np.argwhere(differ)[0]
            i = ex[k]
            raise WarpError(
                f"{name}: lane {i} passes mask {_hex(masks[i])}, which names lane {j}, but lane {j} "
                f"passes mask {_hex(masks[j])}; CUDA requires every lane named in a mask to execute "
                f"the call with the same mask (so the masks must split the executing lanes into "
                f"disjoint groups, like the quad masks 0xF << (lane/4*4))")

    # (c) A lane may only read from a lane that is in its mask and is executing.
    src = source[ex]
    bad_k = np.flatnonzero(~names[ex, src] | ~executing[src])
    if bad_k.size:
        i, j = ex[bad_k[0]], src[bad_k[0]]
        why = f"which is not in {whose} mask {_hex(masks[i])}" if not names[i, j] else \
              "which has exited"
        pairs = [f"{ex[k]}<-{src[k]}" for k in bad_k]
        raise WarpError(
            f"{name}: lane {i} reads lane {j}, {why}; CUDA leaves the value undefined "
            f"(reader<-source: {_some(pairs)})")


# --------------------------------------------------------------------------
# Shuffles
# --------------------------------------------------------------------------

def _shuffle(mode: str, name: str, argname: str, mask: Any, var: Any, arg: Any,
             width: Any, active: Any, exited: Any) -> np.ndarray:
    """The common body of the four shuffles, following the PTX ``shfl.sync`` pseudocode."""
    values = _as_lane_values(var, name)
    w = _as_width(width)
    executing = _as_lane_set(active, "active", default=True)
    gone = _as_lane_set(exited, "exited", default=False)
    if (executing & gone).any():
        raise ValueError(f"lanes {_some(np.flatnonzero(executing & gone))} cannot both execute and have exited")
    masks, uniform = _as_member_masks(mask)
    a = _as_lane_arg(arg, argname, executing, in_0_31=(mode != "idx"))

    lane = LANES
    first = lane & ~(w - 1)          # first lane of the caller's segment of `width` lanes
    last = first + (w - 1)           # last lane of that segment
    if mode == "idx":
        source = first + a % w       # srcLane is taken modulo width: never leaves the segment
    elif mode == "up":
        source = lane - a            # below the segment start: keep own value
        source = np.where(source < first, lane, source)
    elif mode == "down":
        source = lane + a            # past the segment end: keep own value
        source = np.where(source > last, lane, source)
    else:  # "bfly"
        source = lane ^ a
        # Only a source *after* the segment is replaced by the caller's own lane; a source
        # in an earlier segment is read as is (PTX: pval = (j <= maxLane)). See shfl_xor_sync.
        source = np.where(source > last, lane, source)

    _check_members(name, masks, uniform, executing, gone, source)
    out = values.copy()
    out[executing] = values[source[executing]]
    return out


_COMMON_DOC = """
    Arguments shared by all four shuffles:

    mask
        The lanes taking part: a 32-bit unsigned int (Python int or NumPy integer),
        or a shape-(32,) int array giving each lane's own mask (see below).
    var
        One value per lane, shape (32,), any dtype (kept). Trailing axes, e.g. a
        whole (32, n_regs) register file, are shuffled with the same pattern.
    width
        1, 2, 4, 8, 16 or 32. The warp is cut into segments of `width` lanes and
        each behaves like a small warp.
    active
        The lanes that execute the call: None (all 32), a 32-bit int mask or a
        shape-(32,) bool array. Lanes that do not execute get their own `var`
        back, as if they had skipped ``v = __shfl_*_sync(..., v, ...)``.
    exited
        Lanes whose thread has already returned (or was never launched, in a
        partial last warp): same forms as `active`, default none. CUDA lets a
        mask name exited lanes; reading from one is still an error.

    Member-mask rules. CUDA leaves the result undefined when they are broken, so
    this emulator raises ``WarpError`` naming the lanes:

    (a) every executing lane must be in its own mask;
    (b) every lane a mask names must execute the call (unless it has exited):
        on a GPU the callers would wait for a lane that never arrives;
    (b') with per-lane masks, every lane named in lane i's mask must pass the
        same mask as lane i. The guide says "all non-exited threads named in mask
        must execute the same intrinsic with the same mask". So the masks split
        the executing lanes into disjoint groups, e.g. the quad masks
        ``0xF << ((lane // 4) * 4)``; overlapping masks such as 0x3 on lane 0 and
        0x6 on lane 1 are refused;
    (c) a lane may only read from a lane that is in its mask and executing
        ("Threads may only read data from another thread which is actively
        participating"). Only real reads count: a lane that keeps its own value
        because its source fell outside the segment reads nothing.
"""


def shfl_sync(mask: Any, var: Any, src_lane: Any, width: int = WARP_SIZE, *,
              active: Any = None, exited: Any = None) -> np.ndarray:
    """``__shfl_sync``: each lane reads `var` from lane ``src_lane % width`` of its segment.

    `src_lane` is an int (the same for all lanes: a broadcast) or a shape-(32,)
    int array (a different source per lane: any gather within the segment).
    With width 32 and src_lane 0 every lane gets lane 0's value; with width 8
    lane 13 gets lane 8 + (src_lane % 8). Negative values wrap the same way.
    """
    return _shuffle("idx", "shfl_sync", "src_lane", mask, var, src_lane, width, active, exited)


def shfl_up_sync(mask: Any, var: Any, delta: Any, width: int = WARP_SIZE, *,
                 active: Any = None, exited: Any = None) -> np.ndarray:
    """``__shfl_up_sync``: each lane reads `var` from lane ``lane - delta``.

    If that lane lies before the start of the caller's segment, the caller keeps
    its own value (no wrap-around): the first `delta` lanes of each segment are
    unchanged. `delta` must be in [0, 31] (CUDA's hardware uses only its low
    5 bits, so larger values are refused rather than guessed at).
    """
    return _shuffle("up", "shfl_up_sync", "delta", mask, var, delta, width, active, exited)


def shfl_down_sync(mask: Any, var: Any, delta: Any, width: int = WARP_SIZE, *,
                   active: Any = None, exited: Any = None) -> np.ndarray:
    """``__shfl_down_sync``: each lane reads `var` from lane ``lane + delta``.

    If that lane lies past the end of the caller's segment, the caller keeps its
    own value: the last `delta` lanes of each segment are unchanged. `delta` must
    be in [0, 31].
    """
    return _shuffle("down", "shfl_down_sync", "delta", mask, var, delta, width, active, exited)


def shfl_xor_sync(mask: Any, var: Any, lane_mask: Any, width: int = WARP_SIZE, *,
                  active: Any = None, exited: Any = None) -> np.ndarray:
    """``__shfl_xor_sync``: each lane reads `var` from lane ``lane ^ lane_mask``.

    This is the butterfly exchange used by tree reductions. `lane_mask` must be
    in [0, 31].

    With ``width < 32`` the source may fall outside the caller's segment (only
    when ``lane_mask >= width``). What happens then is asymmetric, and this
    emulator does exactly what CUDA documents: a source in a *later* segment is
    replaced by the caller itself (the caller gets its own value), while a source
    in an *earlier* segment is read normally. The CUDA C++ Programming Guide,
    "Warp Shuffle Functions", says: "If width is less than warpSize then each
    group of width consecutive threads are able to access elements from earlier
    groups of threads, however if they attempt to access elements from later
    groups of threads their own value of var will be returned." The PTX ISA
    pseudocode for ``shfl.sync.bfly`` agrees: ``j = lane ^ b; pval = (j <=
    maxLane); if (!pval) j = lane`` with maxLane the segment's last lane, and
    CUDA's header passes exactly that clamp (``((32 - width) << 8) | 0x1f``).
    Example: width 8, lane_mask 8: lanes 0..7 keep their values, lanes 8..15
    read lanes 0..7.
    """
    return _shuffle("bfly", "shfl_xor_sync", "lane_mask", mask, var, lane_mask, width, active, exited)


for _f in (shfl_sync, shfl_up_sync, shfl_down_sync, shfl_xor_sync):
    if _f.__doc__:                      # docstrings are stripped under python -OO
        _f.__doc__ += _COMMON_DOC
del _f


# --------------------------------------------------------------------------
# Warp-level helpers built on the shuffles
# --------------------------------------------------------------------------

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


# --------------------------------------------------------------------------
# Fragments from a layout table
# --------------------------------------------------------------------------
#
# A layout says where each register of a fragment lives in the matrix:
#     layout.shape == (32, n_regs, 2),  layout[lane, r] == (row, col).

def _as_layout(layout: Any) -> np.ndarray:
    lay = np.asarray(layout)
    if lay.ndim != 3 or lay.shape[0] != WARP_SIZE or lay.shape[2] != 2 or lay.shape[1] < 1:
        raise LayoutError(f"a layout must have shape (32, n_regs, 2) holding (row, col), got {lay.shape}")
    if lay.dtype.kind not in "iu":
        raise LayoutError(f"layout coordinates must be integers, got dtype {lay.dtype}")
    return lay.astype(np.int64)


def _as_shape(shape: Any) -> tuple[int, int]:
    if len(shape) != 2:
        raise ValueError(f"matrix shape must be (rows, cols), got {shape!r}")
    rows, cols = (_as_int(s, "shape") for s in shape)
    if rows < 1 or cols < 1:
        raise ValueError(f"matrix shape must be positive, got {(rows, cols)}")
    return rows, cols


def _check_in_range(lay: np.ndarray, shape: tuple[int, int]) -> None:
    rows, cols = shape
    r, c = lay[..., 0], lay[..., 1]
    bad = np.argwhere((r < 0) | (r >= rows) | (c < 0) | (c >= cols))
    if bad.size:
        entries = [f"lane {l} reg {k} -> ({lay[l, k, 0]}, {lay[l, k, 1]})" for l, k in bad]
        raise LayoutError(
            f"{len(bad)} layout entries lie outside the {rows}x{cols} matrix: {_some(entries, 4)}")


def _holders(lay: np.ndarray, row: int, col: int) -> list[tuple[int, int]]:
    """The (lane, reg) pairs whose layout entry is (row, col), lane-major."""
    hit = (lay[..., 0] == row) & (lay[..., 1] == col)
    return [(int(l), int(k)) for l, k in np.argwhere(hit)]


def validate_layout(layout: Any, shape: Sequence[int], allow_duplicates: bool = False) -> np.ndarray:
    """Check that `layout` describes a fragment of a matrix of `shape`; return it as int64.

    Raises ``LayoutError`` if an entry lies outside the matrix, if some element
    is held by no (lane, reg) (a hole), or, unless `allow_duplicates`, if an
    element is held by several (lane, reg) pairs. Some WMMA input fragments
    replicate elements on purpose; pass ``allow_duplicates=True`` for those.
    """
    lay = _as_layout(layout)
    rows, cols = _as_shape(shape)
    _check_in_range(lay, (rows, cols))

    counts = np.zeros((rows, cols), dtype=np.int64)
    np.add.at(counts, (lay[..., 0], lay[..., 1]), 1)
    problems = []
    holes = np.argwhere(counts == 0)
    if holes.size:
        problems.append(f"{len(holes)} of {rows * cols} elements are held by no (lane, reg): "
                        f"{_some([tuple(map(int, h)) for h in holes], 6)}")
    dups = np.argwhere(counts > 1)
    if dups.size and not allow_duplicates:
        r, c = map(int, dups[0])
        held = ", ".join(f"lane {l} reg {k}" for l, k in _holders(lay, r, c))
        problems.append(f"{len(dups)} elements are held more than once, e.g. ({r}, {c}) by {held} "
                        "(pass allow_duplicates=True if this fragment kind replicates elements)")
    if problems:
        raise LayoutError(f"bad layout for a {rows}x{cols} matrix: " + "; ".join(problems))
    return lay


def to_fragment(matrix: Any, layout: Any) -> np.ndarray:
    """Distribute a matrix over the warp: ``frag[lane, r] = matrix[layout[lane, r]]``.

    Returns a (32, n_regs) array of the matrix's dtype. Only the coordinates'
    range is checked; call ``validate_layout`` to check coverage too.
    """
    m = np.asarray(matrix)
    if m.ndim != 2:
        raise ValueError(f"matrix must be 2-D, got shape {m.shape}")
    lay = _as_layout(layout)
    _check_in_range(lay, m.shape)
    return m[lay[..., 0], lay[..., 1]]


def _same(a: np.ndarray, b: np.ndarray, equal_nan: bool) -> np.ndarray:
    """Elementwise a == b, optionally counting NaN == NaN as equal."""
    eq = np.asarray(a == b)
    if equal_nan and np.asarray(a).dtype.kind in "fc" and np.asarray(b).dtype.kind in "fc":
        eq |= np.isnan(a) & np.isnan(b)
    return eq


def from_fragment(frag: Any, layout: Any, shape: Sequence[int], fill: Any = np.nan) -> np.ndarray:
    """Gather a warp's fragment back into a matrix of `shape` (inverse of ``to_fragment``).

    Elements no register holds get `fill` (NaN by default, so the result is
    floating point unless you pass e.g. ``fill=0``). An element held by several
    registers must have the same value in every copy (NaN copies agree with
    each other), else ``LayoutError`` names the registers that disagree.
    """
    f = np.asarray(frag)
    lay = _as_layout(layout)
    if f.shape != lay.shape[:2]:
        raise ValueError(f"fragment shape {f.shape} does not match the layout's {lay.shape[:2]}")
    rows, cols = _as_shape(shape)
    _check_in_range(lay, (rows, cols))

    out = np.full((rows, cols), fill, dtype=np.result_type(f, fill))
    r, c = lay[..., 0], lay[..., 1]
    out[r, c] = f                       # with duplicates, one copy wins ...
    wrote = f.astype(out.dtype)
    disagree = np.argwhere(~_same(out[r, c], wrote, equal_nan=True))   # ... so check the others
    if disagree.size:
        lane, k = disagree[0]
        row, col = int(r[lane, k]), int(c[lane, k])
        copies = ", ".join(f"lane {l} reg {q} = {f[l, q]}" for l, q in _holders(lay, row, col))
        raise LayoutError(f"copies of element ({row}, {col}) disagree: {copies}")
    return out


def inverse_layout(layout: Any, shape: Sequence[int]) -> list[list[list[tuple[int, int]]]]:
    """For each element, the (lane, reg) pairs holding it: ``inv[row][col] == [(lane, reg), ...]``.

    Pairs are listed lane-major; an element no register holds gets ``[]``.
    """
    lay = _as_layout(layout)
    rows, cols = _as_shape(shape)
    _check_in_range(lay, (rows, cols))
    inv: list[list[list[tuple[int, int]]]] = [[[] for _ in range(cols)] for _ in range(rows)]
    for lane in range(WARP_SIZE):
        for reg in range(lay.shape[1]):
            row, col = lay[lane, reg]
            inv[row][col].append((lane, reg))
    return inv


def accumulator_16x16_sm80() -> np.ndarray:
    """Layout (32, 8, 2) of the f32 accumulator of a 16x16 WMMA tile on sm_80 / sm_90.

    This is the documented PTX ``mma.m16n8k16`` f32 accumulator fragment (PTX ISA,
    "Matrix Fragments for mma.m16n8k16"), used twice for the two n8 halves of
    the 16x16 tile. With ``group = lane // 4`` and ``t = lane % 4``, register r
    of a lane holds::

        row = group + 8 * ((r >> 1) & 1)        # r = 0,1,4,5: rows 0-7; r = 2,3,6,7: rows 8-15
        col = 2 * t + (r & 1) + 8 * (r >> 2)    # r = 0..3: cols 0-7; r = 4..7: cols 8-15

    WMMA itself leaves the fragment layout unspecified; the course checks that
    this is what the hardware does by tracing real GPUs (chapters 1-2).
    """
    lane = LANES[:, None]
    r = np.arange(8)[None, :]
    row = lane // 4 + 8 * ((r >> 1) & 1)
    col = 2 * (lane % 4) + (r & 1) + 8 * (r >> 2)
    return np.stack([row, col], axis=-1)


# --------------------------------------------------------------------------
# Grading messages
# --------------------------------------------------------------------------

def format_diff(got: Any, expected: Any, *, max_items: int = 5, equal_nan: bool = False,
                rtol: float = 0.0, atol: float = 0.0,
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
    listed.
    """
    g, e = np.asarray(got), np.asarray(expected)
    if g.shape != e.shape:
        return f"shape mismatch: got {g.shape}, expected {e.shape}"
    numeric = g.dtype.kind in "iufc" and e.dtype.kind in "iufc"
    if numeric and (rtol or atol):
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
