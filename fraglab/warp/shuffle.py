"""The four shuffles (``__shfl_sync``, ``__shfl_up_sync``, ``__shfl_down_sync``,
``__shfl_xor_sync``) and CUDA's member-mask rules, which they enforce."""

from __future__ import annotations

from typing import Any

import numpy as np

from .lanes import (FULL_MASK, LANES, WARP_SIZE, WarpError, _as_int, _as_mask_int, _hex,
                    _some, lanes_in_mask, mask_of)

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
