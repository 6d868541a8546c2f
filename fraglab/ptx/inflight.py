"""Shared memory that asynchronous wgmmas read, tracked while they are in flight: a write to bytes
a wgmma still reads (of any warp of the block), or to bytes whose wgmma an mbarrier arrival
released to a producer before it had completed (a stage released early, then refilled), raises
:class:`~fraglab.ptx.errors.WgmmaHazard`; and which copy still in flight writes some bytes.

The per-byte counts live on the shared space (``wg_busy``, ``wg_n``, ``early``: memory.py); the
wgmmas' own records (``WgState.reads``) are kept by wgmma.py. Memory stores and mbarrier
operations call in here, so this module imports neither wgmma.py nor the decoder.
"""
from __future__ import annotations

import numpy as np

from .errors import WgmmaHazard, raise_at
from .frames import source_of


def pending_copy(w, byte_addr) -> str | None:
    """Where a copy into shared memory that is still in flight (a lazy cp.async of any warp of the
    block, or a bulk copy) writes some of ``byte_addr``, a phrase naming it; else None."""
    if not w.mem.sync.copies and not any(x.cp_open or x.cp_groups for x in w.launch.current_warps):
        return None
    sh = w.mem.spaces["shared"]
    hit = np.zeros(sh.size, bool)
    hit[byte_addr] = True
    for x in w.launch.current_warps:
        for group in x.cp_groups + [x.cp_open]:
            for ins, d, _, _, size in group:
                if hit[d.astype(np.int64)[:, None] + np.arange(size)].any():
                    return f"a cp.async of warp {x.index} ({source_of(ins, w.files) or ins.text})"
    for d, data, _, x, ins in w.mem.sync.copies:
        if hit[d:d + len(data)].any():
            return f"a bulk copy of warp {x.index} ({source_of(ins, w.files) or ins.text})"
    return None


def note_release(w, ins, bar: int, phase: int) -> None:
    """Warp ``w`` arrives (``ins``) on mbarrier ``bar`` in phase ``phase`` while wgmmas of its are
    in flight: if that arrival releases their operands to a producer, the producer's refill
    races them. Each such wgmma is remembered with the arrival (block-wide, until ``bar`` has
    completed the next phase too): a warp that waited for that phase and then writes the
    wgmma's operand bytes is reported (:func:`write_hazard`), however the interpreter happened to
    order the wgmma's completion and the write."""
    st = w.wg
    sh = w.mem.spaces["shared"]
    if sh.early:
        # This arrival comes after the wgmmas of w that have completed: a writer that waits for
        # the phase it completes is ordered after them, whatever it waited for before (one
        # producer thread refilling every stage of a ring waits on each stage's barrier in turn).
        live = {e[0] for e in (st.reads if st is not None else ())}
        for entries in sh.early.values():
            for e in entries:
                if e[5] == w.index and e[6] not in live:
                    e[7].add((bar, phase))
    if st is None or not st.reads:
        return
    for entry in st.reads:
        if entry[4] is None:
            entry[4] = ins
        addr = entry[1]
        sh.early.setdefault((bar, phase), []).append(
            (int(addr.min()), int(addr.max()) + 1, addr, entry[3], ins, w.index, entry[0], set()))


def forget_releases(sh, bar: int, phase: int) -> None:
    """mbarrier ``bar`` completed phase ``phase - 1``: early releases two phases back are over
    (a ring's producer refills a stage before the consumers can release it again)."""
    for key in [k for k in sh.early if k[0] == bar and k[1] + 2 <= phase]:
        del sh.early[key]


def write_hazard(w, instr, offs, lanes) -> None:
    """``instr`` of warp ``w`` writes shared bytes ``offs`` (one row per lane of ``lanes``): raise
    WgmmaHazard if a wgmma still in flight (of any warp of the block) reads some of them, or if
    ``w`` waited for an mbarrier phase that a warp completed by arriving before its wgmma reading
    them had completed (a stage released early, then refilled)."""
    sh = w.mem.spaces["shared"]
    lo, hi = int(offs.min()), int(offs.max()) + 1
    isrc = source_of(instr, w.files) or f"PTX line {instr.ptx_line}"
    if sh.wg_n and sh.wg_busy[lo:hi].any() and sh.wg_busy[offs].any():
        for x in w.launch.current_warps:
            for g, addr, _, where, release in (x.wg.reads if x.wg is not None else ()):
                common = np.intersect1d(addr, offs)
                if len(common):
                    _write_error(w, instr, offs, lanes, common, where, x.index, g, release,
                                 f"this {instr.opcode} at {isrc} writes shared address "
                                 f"{int(common[0])} while the wgmma is in flight")
    if not sh.early:
        return
    seen = w.mem.sync.seen
    for (bar, phase), entries in sh.early.items():
        if seen.get((w.index, bar)) != phase + 1:
            continue
        for elo, ehi, addr, where, release, warp, g, later in entries:
            if elo >= hi or ehi <= lo:
                continue
            if any(seen.get((w.index, b2), -1) >= p2 + 1 for b2, p2 in later):
                continue       # w also waited for an arrival made after that wgmma completed
            common = np.intersect1d(addr, offs)
            if len(common):
                _write_error(w, instr, offs, lanes, common, where, warp, g, release,
                             f"this {instr.opcode} at {isrc} writes shared address "
                             f"{int(common[0])} after waiting for the mbarrier phase that "
                             "arrival completed, so nothing orders it after the wgmma")


def _write_error(w, instr, offs, lanes, common, where, warp, g, release, what):
    row = int(np.argmax(np.isin(offs, common).any(axis=1)))
    wsrc = source_of(where, w.files) or f"PTX line {where.ptx_line}"
    early = ""
    if release is not None:
        early = (f"; warp {warp} released the stage with the {release.opcode} at "
                 f"{source_of(release, w.files) or f'PTX line {release.ptx_line}'} before its "
                 "wgmma.wait_group covered that wgmma")
    raise_at(WgmmaHazard, f"shared memory read by the wgmma.mma_async at {wsrc} (warp {warp}, "
             f"commit group {g}) is changed before the wgmma.wait_group that completes it: "
             f"{what}{early}. The asynchronous tensor core may read its operands until that "
             "wait: release a stage (and refill it) only after waiting for the wgmmas that read "
             "it", w, instr, lane=int(lanes[row]))
