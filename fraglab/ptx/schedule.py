"""The warp scheduler's decisions (execute.py runs the warps): which warp is ready, when a
spinning warp is parked or only yields, the time-out of mbarrier waits when everything waits,
and the deadlock report for spins.

At each taken backward branch (the end of a loop's pass) :func:`backward` compares the
warp with its previous pass of that branch: the block's progress count (:func:`progress`:
stores and atomics, mbarrier / named-barrier changes, opened bar.syncs) and a
fingerprint of the registers named by the instructions that lie on a path from the branch target
back to the branch (between two passes a uniform warp runs only those, outer loops included;
for a divergent warp: all registers, lane PCs and masks). Same progress and same fingerprint:
the warp is exactly where it was one pass ago and nothing it can read has changed, so on its
own it would go round forever. It is *parked* until the progress count moves. If its registers
repeat for several passes while memory moved (its own stores: a lock taken with atomicCAS, a
store in the polling loop), it only yields: it goes on after the others had their turn. Within
a divergent warp the spinning lanes are put aside (``stalled``) while the warp's other lanes
run, as independent thread scheduling lets them on a GPU. When every warp is parked, blocked,
at a barrier or gone and nothing can change, ``Deadlock`` names each warp and the line it spins
at. A loop that changes a register each pass (a counter, an accumulator, a clock read) is
never parked.
"""
from __future__ import annotations

import numpy as np

from .decode import KIND_BRANCH, KIND_EXIT
from . import crossblock
from .errors import Deadlock, raise_at
from .frames import source_of

#: Passes of a loop whose registers repeat while memory changes (its own stores) before the warp
#: yields to the others (a store-spin, e.g. a lock taken with atomicCAS).
STORE_SPIN_PASSES = 8
#: Yields in a row at a store-spin, its registers the same each time, after which a warp counts
#: as stuck when every other warp of its block is stuck too (its stores then write what was
#: there: an atomicCAS that fails, an atomicAdd of 0 that polls; see :func:`stuck`).
STUCK_YIELDS = 16


def progress(mem) -> int:
    """Grows whenever a warp could see something new: a store or atomic (any space: a loop's
    state may live on the stack), a change of mbarrier / named-barrier state, a bar.sync that
    opens."""
    sync = mem.sync
    return mem.writes + sync.epoch + sync.shared.epoch


def backward(w, pc, t, taken, code, launch) -> bool:
    """A taken backward branch at ``pc`` (to ``t``; ``taken``: the lanes that jumped, None = the
    whole uniform warp). True when the warp must stop running now (parked, or yielding)."""
    key = progress(w.mem)
    rec = w.spin.get(pc)
    if rec is None:
        w.spin[pc] = [key, None, 1]
        return False
    rec[2] += 1
    same = rec[0] == key
    if not same:                                  # memory or sync state moved since last pass
        rec[0] = key
        if rec[2] < STORE_SPIN_PASSES:
            rec[1] = None
            return False
    fp = _fingerprint(w, pc, t, code, launch)
    if fp != rec[1]:                              # registers moved: the loop makes progress
        rec[1] = fp
        w.repeats = 0
        return False
    w.repeats = w.repeats + 1 if w.spin_pc == pc else 1
    w.repeat_step = w.steps
    # Back where the previous pass was. `same`: nothing it can read changed either, so alone it
    # repeats forever (parked until the progress count moves). Else memory changed (its own
    # stores, or another warp's between a read and this branch): a store-spin, which only yields.
    w.spin_pc, w.spin_to = pc, t
    if taken is not None:
        act = w.live & ~w.waiting & ~w.deferred
        if w.stalled is not None:
            act &= ~w.stalled
        if (act & ~taken).any():                  # other lanes of the warp can run: they go on
            w.stall_proven = same and (w.stalled is None or w.stall_proven)
            w.stalled = taken.copy() if w.stalled is None else (w.stalled | taken)
            w.stall_key = key
            w.spin_lanes = w.stalled.copy()
            return False
        w.spin_lanes = taken.copy() if w.stalled is None else (w.stalled | taken)
    else:
        w.spin_lanes = None
    if same:
        w.parked = key
    return True


def _fingerprint(w, pc, t, code, launch) -> bytes:
    """The warp's state at a loop's backward branch: the registers the loop names (a uniform
    warp runs only the loop's instructions between two passes) or, for a divergent warp, all
    registers, lane PCs and masks; plus its live / waiting lanes and pending asynchronous work."""
    if w.uniform:
        parts = [w.R[i].tobytes() for i in _loop_regs(launch.info, code, t, pc)]
    else:
        parts = [r.tobytes() for r in w.R]
        parts += [w.pc.tobytes(), w.deferred.tobytes(),
                  b"" if w.stalled is None else w.stalled.tobytes()]
    parts += [w.live.tobytes(), w.waiting.tobytes(),
              repr((w.timed_out, len(w.cp_open), len(w.cp_groups), len(w.inflight))).encode()]
    return b"".join(parts)


def _loop_regs(info, code, t, pc) -> list:
    """Registers that decide whether the loop from ``t`` to the backward branch at ``pc`` goes
    on (cached per kernel): the guards of its branches and exits, and every register of an
    instruction of the loop that names one of them (with its guard), to a fixed point. A
    register the loop changes that decides nothing (a pass counter, a value it accumulates) is
    left out: a loop that only counts its passes while it polls still spins."""
    cache = info.loops
    regs = cache.get((t, pc))
    if regs is None:
        body = sorted(_loop_body(info, code, t, pc))
        need = {code[i].guard for i in body
                if code[i].kind in (KIND_BRANCH, KIND_EXIT) and code[i].guard is not None}
        grew = True
        while grew:
            grew = False
            for i in body:
                op = code[i]
                if op.touch & need:
                    more = op.touch | ({op.guard} if op.guard is not None else set())
                    if not more <= need:
                        need |= more
                        grew = True
        regs = cache[(t, pc)] = sorted(need)
    return regs


def _loop_body(info, code, t, pc) -> set:
    """The instructions of the loop from ``t`` to the backward branch at ``pc``: those reachable
    from ``t`` that can reach ``pc`` (a superset of the natural loop; cached per kernel)."""
    cache = info.loops
    body = cache.get(("body", t, pc))
    if body is not None:
        return body
    n = len(code)
    succ = cache.get("succ")
    if succ is None:
        succ = cache["succ"] = []
        pred = cache["pred"] = [[] for _ in range(n)]
        for i, op in enumerate(code):
            if op.kind == KIND_BRANCH:
                s = [op.target] if op.guard is None else [op.target, i + 1]
            elif op.kind == KIND_EXIT:
                s = [] if op.guard is None else [i + 1]
            else:
                s = [i + 1]
            s = [j for j in s if j < n]
            succ.append(s)
            for j in s:
                pred[j].append(i)
    pred = cache["pred"]

    def reach(start, edges):
        seen, todo = {start}, [start]
        while todo:
            for j in edges[todo.pop()]:
                if j not in seen:
                    seen.add(j)
                    todo.append(j)
        return seen
    body = cache[("body", t, pc)] = reach(t, succ) & reach(pc, pred)
    return body


def stuck(warps, mem) -> bool:
    """Every warp that can run store-spins (yields with the same registers, :data:`STUCK_YIELDS`
    times in a row) and every other one is parked, blocked, at bar.sync or gone: each pass stores
    what its registers decide, the same each time, and reads back what it stored, so none can
    go on. They are parked (the deadlock report names them) and True returned."""
    ready = [w for w in warps if warp_ready(w, mem)]
    if not ready or any(w.repeats < STUCK_YIELDS or w.repeat_step != w.steps for w in ready):
        return False
    key = progress(mem)
    for w in ready:
        w.parked, w.stalled = key, None
    return True


def time_out(warps, sync) -> bool:
    """Everything waits: the mbarrier waits (try_wait/test_wait) return false, once per change
    of the block's state (a probe that goes on goes on; a spin loop that waits again is stuck)."""
    late = [w for w in warps if w.blocked is not None and w.blocked.can_time_out
            and w.timeout_epoch != sync.epoch]
    for w in late:
        w.timed_out, w.timeout_epoch, w.blocked = True, sync.epoch, None
    return bool(late)


def warp_ready(w, mem) -> bool:
    """Can the warp run? A blocked warp once the block's sync state changed, a spinning one once
    memory or sync state changed (both then retry), any other with lanes not parked at bar.sync."""
    b = w.blocked
    if b is not None:
        if b.epoch == mem.sync.epoch:
            return False
        w.blocked = None
    if w.parked is not None:
        if w.parked == progress(mem):
            return False
        w.parked = w.stalled = None
    return bool((w.live & ~w.waiting).any())


def spin_deadlock(warps, code, launch):
    """Some warp spins and nothing can change what it reads: raise Deadlock naming every warp's
    state (spinning at a line, blocked, at bar.sync, exited)."""
    def where(pc):
        ins = code[pc].instr
        return f"{source_of(ins, launch.files) or 'PTX line %d' % ins.ptx_line} (`{ins.text}`)"
    parts = []
    hint = ""
    for w in warps:
        if w.parked is not None:
            who = f"warp {w.index} spins"
            if w.spin_lanes is not None and not w.spin_lanes[w.exists].all():
                many = int(w.spin_lanes.sum()) > 1
                who = (f"lane{'s' if many else ''} {_lane_ranges(w.spin_lanes)} of warp "
                       f"{w.index} spin{'' if many else 's'}")
            parts.append(f"{who} at {where(w.spin_pc)} waiting for a change that no warp makes")
            body = _loop_body(launch.info, code, w.spin_to, w.spin_pc)
            if any(code[i].instr.base in ("ld", "ldu", "atom") and ".shared" not in
                   code[i].instr.opcode and ".local" not in code[i].instr.opcode for i in body):
                hint = ("\n  (a loop that polls global memory: here blocks run one after "
                        "another, so a flag that another block or the host sets is never seen)")
        elif w.blocked is not None:
            what = w.blocked.what
            pc = w.upc if w.uniform else int(w.pc[np.argmax(w.live & ~w.waiting)])
            parts.append(f"warp {w.index} waits at `{code[pc].instr.text}` for "
                         f"{what() if callable(what) else what}")
        elif w.waiting.any():
            parts.append(f"warp {w.index} waits at bar.sync (__syncthreads) at "
                         f"{where(int(w.pc[np.argmax(w.waiting)]))} for threads that never arrive")
    exited = [w.index for w in warps if w.exists.any() and not w.live.any()]
    if exited:
        parts.append(f"warp{'s' if len(exited) > 1 else ''} {', '.join(map(str, exited))} "
                     f"{'have' if len(exited) > 1 else 'has'} exited")
    w = next(w for w in warps if w.parked is not None)
    lane = 0 if w.spin_lanes is None else int(np.argmax(w.spin_lanes))
    polls = crossblock.polled(warps, code,
                              lambda x: _loop_body(launch.info, code, x.spin_to, x.spin_pc))
    if polls:                                     # it waits for another block (or the host)
        crossblock.report(launch, polls, "\n    ".join(parts))
    raise_at(Deadlock, "deadlock: every warp of the block spins, waits or has exited, and none "
             "can change what the spinning warps read (on a GPU the kernel would hang):\n    "
             + "\n    ".join(parts) + hint, w, code[w.spin_pc].instr, lane=lane)


def _lane_ranges(mask) -> str:
    idx = np.flatnonzero(mask).tolist()
    out, i = [], 0
    while i < len(idx):
        j = i
        while j + 1 < len(idx) and idx[j + 1] == idx[j] + 1:
            j += 1
        out.append(str(idx[i]) if i == j else f"{idx[i]}-{idx[j]}")
        i = j + 1
    return ", ".join(out)
