"""Waits between blocks. The interpreter runs a grid's blocks one after another, each to its end.
A block whose warps spin on global memory (a volatile load, an atomic that polls) that nothing
left in the block can change waits for another block or for the host: CUDA promises no forward
progress between blocks (the writer may not be scheduled until the waiter has finished), so on
a GPU such a kernel can hang as well. :func:`report` raises :class:`CrossBlockWait` naming the
spin and, found by running the blocks not run yet with a watch on the polled bytes, the line of
the block that writes them.
"""
from __future__ import annotations

import numpy as np

from .errors import CrossBlockWait, PTXError, raise_at
from .frames import source_of

#: Warp-instructions the blocks not run yet may take to show which of them writes a polled byte.
SEARCH_STEPS = 500_000


class _Found(Exception):
    def __init__(self, w, instr):
        self.block, self.instr = w.block_idx, instr


def polled(warps, code, body_of) -> list:
    """[(warp, pc of the load or atomic, global byte addresses it reads)] for the loops the
    parked warps spin in (``body_of(w)``: the instructions of warp w's loop); empty when they
    poll no global memory."""
    out = []
    for w in warps:
        if w.parked is None or w.spin_pc < 0:
            continue
        lanes = w.live if w.spin_lanes is None else w.spin_lanes
        for i in sorted(body_of(w)):
            poll = getattr(code[i].fn, "poll", None)
            if poll is None:
                continue
            addr_fn, space, nbytes = poll
            try:
                a = np.asarray(addr_fn(w))[lanes]
            except Exception:                     # an address the warp cannot form: not a poll
                continue
            g = _global(w, space, a)
            if g is not None and len(g):
                out.append((w, i, np.unique(g[:, None] + np.arange(nbytes, dtype=np.uint64))))
    return out


def _global(w, space, addr):
    if space == "global":
        return addr
    if space != "generic":
        return None
    for sp, a, _ in w.mem._split(addr):
        if sp == "global":
            return a
    return None


def _writer(launch, watched: np.ndarray):
    """(block index, instruction) of the first store to a watched byte by the blocks not run
    yet, or None. Their errors (they may wait too) end their part of the search."""
    later, launch.later = launch.later, []        # a wait found while searching: no search
    glob = launch.glob

    def watch(w, instr, addr, lanes, nbytes):
        b = addr[:, None] + np.arange(nbytes, dtype=np.uint64)
        if np.isin(b, watched).any():
            raise _Found(w, instr)

    run_block = launch.run_block                  # execute.run_block (the launch's runner)
    budget, stop = launch.max_steps, launch.stop
    launch.max_steps = launch.stop = launch.steps + SEARCH_STEPS
    glob.watch = watch
    try:
        for b in later:
            try:
                run_block(launch, b, launch.info.code, launch.info)
            except _Found as f:
                return f.block, f.instr
            except PTXError:
                continue
    finally:
        glob.watch = None
        launch.max_steps, launch.stop = budget, stop
    return None


def _name(glob, a: int) -> str:
    """'`flag` (byte 4)' for a global address."""
    for al in glob.allocs:
        if al.base <= a < al.base + al.size:
            return f"`{al.name}` (byte {a - al.base})"
    return f"address {a:#x}"


def report(launch, polls, state: str):
    """Raise :class:`CrossBlockWait`: the block's warps spin on global memory (`polls`, from
    :func:`polled`; `state`: what each warp of the block does)."""
    w, pc, addrs = polls[0]
    code = launch.info.code
    ins = code[pc].instr
    spin = code[w.spin_pc].instr

    def at(i):
        return f"{source_of(i, launch.files) or 'PTX line %d' % i.ptx_line} (`{i.text}`)"
    watched = np.unique(np.concatenate([p[2] for p in polls]))
    found = _writer(launch, watched)
    what = (f"block {w.block_idx} spins on global memory: warp {w.index} spins at {at(spin)} "
            f"reading {_name(launch.glob, int(addrs[0]))} at {at(ins)}, ")
    if found is not None:
        blk, wins = found
        what += f"which block {blk} writes at {at(wins)}. "
    else:
        what += "which no other block of this launch writes (nor can the host during it). "
    lane = 0 if w.spin_lanes is None else int(np.argmax(w.spin_lanes))
    err = None
    try:
        # no writer at all: the wait can never end, a deadlock whatever the order of the blocks
        head = "cross-block wait: " if found is not None else "deadlock (a wait nothing ends): "
        raise_at(CrossBlockWait, head + what + "CUDA promises no forward "
                 "progress between blocks (the writer may not be scheduled until the waiting "
                 "block ends: on a GPU the kernel can hang), and here blocks run one after "
                 "another. Hand data between blocks through separate launches (or a cooperative "
                 "launch's grid.sync()).\n  The block:\n    " + state, w, spin, lane=lane)
    except CrossBlockWait as e:
        e.polls = polls
        err = e
    raise err
