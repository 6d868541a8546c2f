"""Running a grid: blocks one after another, the warps of a block until all reach a barrier or
exit, each warp's lanes by the minimum-PC rule.

Scheduling the warps of a block (``Launch.schedule``): ``"fixed"`` runs them in turn (0, 1, ...),
each until it parks at ``bar.sync``, exits, blocks on an mbarrier / named barrier, or *spins*
(schedule.py);
``"reverse"`` does the same last to first; an ``int`` seeds a random interleaving (a random
ready warp runs a random number of instructions, then another: :func:`_run_random`).

Per-lane program counters: a warp repeatedly executes the instruction at the smallest PC among
its live lanes that are not parked at a barrier, for the lanes at that PC. Structured code thus
reconverges at the first instruction after an if/else and after a loop, which is where
``shfl.sync``/``bar.warp.sync`` of the course's kernels expect the whole warp. While all live
lanes share one PC (the common case) the warp runs in a cheap "uniform" mode without the per-lane
minimum.

``%clock``/``%clock64`` return the number of instructions the warp has executed so far, and
``%globaltimer`` the number executed by the whole launch: deterministic counters, not time.
"""
from __future__ import annotations

import numpy as np

from .decode import KIND_BARRIER, KIND_BRANCH, KIND_EXIT, KIND_NORMAL
from .errors import BarrierError, Blocked, Defer, StepBudgetExceeded, raise_at
from .frames import source_of
from .memory import BlockMemory, LocalMemory, SharedMemory
from .mbarrier import BlockSync, deadlock
from .poison import fresh_registers
from .schedule import backward, progress, spin_deadlock, stuck, time_out, warp_ready
from .wgmma import check_inflight, check_warpgroups

_BIG = np.int64(1 << 60)
LANES = np.arange(32)


class Warp:
    def __init__(self, launch, block_idx, index, nthreads, reg_dtypes, mem):
        self.launch, self.block_idx, self.index = launch, block_idx, index
        self.files = launch.files
        self.mem = mem
        self.first_thread = index * 32
        t = self.first_thread + LANES
        self.exists = t < nthreads
        self.tid_linear = np.where(self.exists, t, 0).astype(np.int64)
        bx, by, _ = launch.block
        self.tid = [(t % bx).astype(np.uint32), ((t // bx) % by).astype(np.uint32),
                    (t // (bx * by)).astype(np.uint32)]
        pool = getattr(launch, "reg_pool", None)   # never-written registers read poison (poison.py)
        if pool is not None and pool.reg_dtypes is reg_dtypes:
            self.R, self.reg_blocks = pool.take()
        else:
            self.reg_blocks = []
            self.R = fresh_registers(reg_dtypes, self.reg_blocks)
        self.live = self.exists.copy()
        self.waiting = np.zeros(32, bool)
        self.pc = np.zeros(32, np.int64)
        self.uniform = True
        self.upc = 0
        self.umask = None if self.live.all() else self.live.copy()
        self.steps = 0
        self.sync_epoch = 0
        self.bar_vals = np.zeros(32, bool)       # bar.red operands of the lanes that wait
        self.deferred = np.zeros(32, bool)       # lanes parked at a *.sync for the others
        self.defer_error = None
        self.blocked = None                      # Blocked: waits on an mbarrier / named barrier
        self.inflight = {}                       # register -> wgmma group still in flight
        self.wg = None                           # wgmma bookkeeping (.wgmma.WgState)
        self.named = {}                          # named barrier -> generation it arrived in
        self.timed_out = False                   # the mbarrier wait it retries returns false
        self.timeout_epoch = -1
        self.maxnreg = []                        # setmaxnreg values, in order (warpgroup check)
        self.cp_open, self.cp_groups = [], []    # lazy cp.async: uncommitted, committed groups
        self.spin = {}                           # backward branch pc -> [progress, fp, passes]
        self.parked = None                       # the progress count this spinning warp waits out
        self.stalled = None                      # lanes put aside at a spin while the others run
        self.stall_key = -1                      # ... until the progress count moves from this
        self.stall_proven = False                # they cannot go on before it moves
        self.spin_pc = self.spin_to = -1         # the loop it spins in (the deadlock report)
        self.spin_lanes = None
        self.repeats = 0                         # store-spin yields in a row, registers unchanged
        self.repeat_step = -1                    # ... the last one at this many steps

    def thread_of(self, lane: int):
        """(x, y, z) threadIdx of a lane."""
        return tuple(int(a[lane]) for a in self.tid)

    def lanes_at(self):
        """(pc, mask) the warp would execute next (mask None = all 32 lanes), or None."""
        if self.uniform:
            return self.upc, self.umask
        act = self.live & ~self.waiting
        if not act.any():
            return None
        pcs = np.where(act, self.pc, _BIG)
        pc = int(pcs.min())
        return pc, pcs == pc

    def _diverge(self):
        """Leave uniform mode: materialise the per-lane PCs (lanes parked at a barrier keep
        theirs)."""
        np.copyto(self.pc, self.upc, where=~self.waiting)
        self.uniform = False


def run_warp(w: Warp, code: list, launch) -> None:
    """Run one warp until every live lane is parked at a barrier or has exited."""
    ncode = len(code)
    hook = launch.hook
    stop = launch.stop                            # max_steps, or the end of a random turn
    counts = launch.counts
    while True:
        if w.uniform:
            pc, m = w.upc, w.umask
        else:
            act = w.live & ~w.waiting & ~w.deferred
            if w.stalled is not None:             # lanes that spin wait for memory to change
                if progress(w.mem) != w.stall_key:
                    w.stalled = None
                else:
                    act &= ~w.stalled
            if not act.any():
                if w.stalled is not None:         # only spinning lanes are left: the warp spins
                    if w.stall_proven:
                        w.parked = w.stall_key
                    else:                         # store-spinning lanes: they go on, later
                        w.stalled = None
                    return
                if w.deferred.any():              # parked at a *.sync that the others never reach
                    raise w.defer_error
                return
            pcs = np.where(act, w.pc, _BIG)
            pc = int(pcs.min())
            m = pcs == pc
            if w.deferred.any():                  # lanes parked here join the ones arriving
                joined = w.deferred & (w.pc == pc)
                m |= joined
                w.deferred &= ~joined
            if not w.deferred.any() and np.array_equal(m, w.live & ~w.waiting):
                w.uniform, w.upc = True, pc
                w.umask = m = None if m.all() else m
        if pc >= ncode:                                   # ran off the end: an implicit exit
            _exit_lanes(w, m)
            if not w.live.any():
                return
            continue
        op = code[pc]
        if launch.steps >= stop:
            budget = launch.max_steps
            if launch.steps >= budget:
                raise_at(StepBudgetExceeded, f"the kernel exceeded its instruction budget of "
                         f"{budget} warp-instructions (max_steps); an endless loop? Raise "
                         "max_steps if the kernel is just long", w, op.instr)
            return                                # the end of this warp's turn (random schedule)
        w.steps += 1
        launch.steps += 1
        counts[pc] += 1
        if hook is not None:
            hook(w, op, m)
        if w.inflight and not op.wg:
            check_inflight(w, op)
        g = op.guard
        if g is None:
            em = m
        else:
            p = ~w.R[g] if op.neg else w.R[g].copy()     # a copy: the op may write it
            em = p if m is None else (m & p)
        kind = op.kind
        if kind == KIND_NORMAL:
            if g is None or em.any():
                try:
                    op.fn(w, em)
                except Defer as d:                # wait here for the lanes still on their way
                    if w.uniform:
                        w.upc = pc
                        w._diverge()
                    w.deferred |= w.live & ~w.waiting if m is None else m
                    w.defer_error = d.error
                    continue
                except Blocked as b:              # retried once another warp changed its state
                    if b.done:                    # done; the others run first (see Blocked)
                        if w.uniform:
                            w.upc = pc + 1
                        else:
                            w.pc[m] = pc + 1
                        return
                    b.epoch = w.mem.sync.epoch
                    w.blocked = b
                    return
            if w.uniform:
                w.upc = pc + 1
            else:
                w.pc[m] = pc + 1
        elif kind == KIND_BRANCH:
            t = op.target
            if g is None:
                if w.uniform:
                    w.upc = t
                else:
                    w.pc[m] = t
            elif w.uniform:
                taken_any = em.any()
                not_taken = (~p) if m is None else (m & ~p)
                if not not_taken.any():
                    w.upc = t
                elif not taken_any:
                    w.upc = pc + 1
                else:
                    w.upc = pc
                    w._diverge()
                    w.pc[em] = t
                    w.pc[not_taken] = pc + 1
            else:
                w.pc[em] = t
                w.pc[m & ~em] = pc + 1
            if t <= pc:                           # a loop's pass ends: is the warp spinning?
                if w.uniform:
                    if w.upc == t and backward(w, pc, t, None, code, launch):
                        return
                elif em.any() and backward(w, pc, t, em, code, launch):
                    return
        elif kind == KIND_BARRIER:
            if op.fn is not None and (g is None or em.any()):
                op.fn(w, em)
            arrive = em if em is not None else w.live.copy()
            if w.uniform:
                w._diverge()
            if g is not None:
                w.pc[~em if m is None else (m & ~em)] = pc + 1
            w.waiting |= arrive
            w.pc[arrive] = pc
        elif kind == KIND_EXIT:
            if w.uniform:
                w.upc = pc + 1
            else:
                w.pc[m] = pc + 1
            _exit_lanes(w, em)
            if not w.live.any():
                return


def _exit_lanes(w, em):
    if em is None:
        w.live[:] = False
    else:
        w.live &= ~em
    if w.uniform:
        act = w.live & ~w.waiting
        w.umask = None if act.all() else act
        if not act.any():
            w.uniform = False


def run_block(launch, block_idx, code, kinfo):
    nthreads = launch.block[0] * launch.block[1] * launch.block[2]
    size = kinfo.dynamic_shared_offset + launch.shared_mem if launch.shared_mem \
        else kinfo.static_shared_end
    shared = SharedMemory(size, kinfo.static_shared_end, check_uninit=launch.checks["uninit"],
                          check_race=launch.checks["race"])
    local = LocalMemory(nthreads, kinfo.local_size, check_uninit=launch.checks["uninit"])
    mem = BlockMemory(launch.glob, shared, local, launch.const, launch.param)
    mem.sync = BlockSync(shared)
    warps = [Warp(launch, block_idx, i, nthreads, kinfo.reg_dtypes, mem)
             for i in range((nthreads + 31) // 32)]
    launch.current_warps = warps
    sched = launch.schedule
    if sched == "fixed" or sched == "reverse":
        order, rng = (warps[::-1] if sched == "reverse" else warps), None
    else:                                         # a seed: the same interleaving per block
        order = warps
        rng = np.random.default_rng([int(sched) & (2 ** 64 - 1), *block_idx])
    while True:
        if rng is None:
            _run_until_stuck(order, code, launch, mem)
        else:
            _run_random(order, code, launch, mem, rng)
        if any(w.blocked is not None or w.parked is not None for w in warps):
            if mem.sync.flush() or time_out(warps, mem.sync):
                continue
            if any(w.parked is not None for w in warps):
                spin_deadlock(warps, code, launch)
            deadlock(warps, code, launch)
        waiting = sum(int(w.waiting.sum()) for w in warps)
        if waiting == 0:
            mem.sync.finish(warps)
            check_warpgroups(warps)
            return warps
        live = sum(int(w.live.sum()) for w in warps)
        if live < nthreads:
            wb = next(w for w in warps if w.waiting.any())
            lane = int(np.argmax(wb.waiting))
            gone = next(w for w in warps if (w.exists & ~w.live).any())
            glane = int(np.argmax(gone.exists & ~gone.live))
            raise_at(BarrierError, f"bar.sync (__syncthreads) is not reached by every thread of "
                     f"the block: {waiting} of {nthreads} threads wait at it, but "
                     f"{nthreads - live} have already exited (for example thread "
                     f"{gone.thread_of(glane)}, warp {gone.index} lane {glane}); on a GPU this "
                     "deadlocks or is undefined", wb, code[int(wb.pc[lane])].instr, lane=lane)
        _check_same_barrier(warps, code, launch)
        first = next(w for w in warps if w.waiting.any())
        op = code[int(first.pc[int(np.argmax(first.waiting))])]
        if op.release is not None:
            op.release(warps)
        if mem.sync.clocks is not None:           # bar.sync orders every warp after all
            mem.sync.clocks.join(warps)
        for w in warps:
            w.pc[w.waiting] += 1
            w.waiting[:] = False
            w.uniform = False
        shared.barrier()


def _run_until_stuck(warps, code, launch, mem):
    """Run the warps in turn until none can go on: each stops at bar.sync, at exit, blocked on
    an mbarrier / named barrier (retried once some warp has changed the block's sync state) or
    spinning (retried once memory or the sync state changed)."""
    ran = True
    while ran:
        ran = False
        for w in warps:
            if warp_ready(w, mem):
                run_warp(w, code, launch)
                ran = True
        if ran and stuck(warps, mem):             # store-spins that can never end: parked
            return


def _run_random(warps, code, launch, mem, rng):
    """A seeded interleaving: a random ready warp runs a random number of instructions (1 to
    2^k, k drawn from 1..8: fine and coarse switches alike), then the next draw, until none is
    ready. Each turn also ends where the fixed order's would (barrier, exit, block, spin)."""
    budget = launch.max_steps
    try:
        while True:
            ready = [w for w in warps if warp_ready(w, mem)]
            if not ready:
                return
            w = ready[int(rng.integers(len(ready)))] if len(ready) > 1 else ready[0]
            turn = int(rng.integers(1, 1 + (2 << int(rng.integers(0, 8)))))
            launch.stop = min(launch.steps + turn, budget)
            run_warp(w, code, launch)
            if stuck(warps, mem):
                return
    finally:
        launch.stop = budget


def _check_same_barrier(warps, code, launch):
    """Every thread must wait at the same bar.sync: __syncthreads() in code that diverges within
    the block is undefined behaviour in CUDA."""
    where = {}
    for w in warps:
        for lane in np.flatnonzero(w.waiting):
            where.setdefault(int(w.pc[lane]), []).append((w, int(lane)))
    if len(where) <= 1:
        return
    parts = [f"{len(v)} threads at `{code[pc].instr.text}` "
             f"({source_of(code[pc].instr, launch.files) or 'PTX line %d' % code[pc].instr.ptx_line})"
             for pc, v in sorted(where.items())]
    pc = max(where)
    w, lane = where[pc][0]
    raise_at(BarrierError, "the threads of the block wait at different bar.sync "
             "(__syncthreads) calls: " + "; ".join(parts) + ". __syncthreads() in code that "
             "diverges within the block is undefined behaviour", w, code[pc].instr, lane=lane)
