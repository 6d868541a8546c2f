"""Block-wide synchronisation beyond ``bar.sync``: mbarriers, named barriers with thread counts
(``bar.sync/bar.arrive id, count``), and the bulk copies that complete mbarrier transactions
(``cp.async.bulk ... mbarrier::complete_tx::bytes``; the tensor copies, ``cp.async.bulk.tensor``,
are in :mod:`.tensormap` and land the same way).

An mbarrier (8 bytes of shared memory) is kept beside the shared bytes as its expected arrival
count, pending arrivals, pending transaction bytes and phase number. A phase completes when its
arrivals and its transaction bytes are both down to zero: the phase number goes up by one (its
parity flips) and the counts reset. ``try_wait``/``test_wait`` (with a phase parity or a state
token from ``arrive``) that find the phase incomplete *block* the warp (the instruction is
retried once some warp has changed the block's synchronisation state), so a spin loop lets the
other warps run. When every warp waits, the waits return false once (a time-out, as a GPU's
``try_wait`` may; a ``test_wait`` probe goes on), and if they wait again with nothing changed,
:class:`~fraglab.ptx.errors.Deadlock` names the barriers and the waiting warps.

Bulk copies read global memory when issued and land in shared memory *as late as allowed*: when
a warp waits on their mbarrier (or when every warp waits). Reading a stage without waiting on its
mbarrier therefore reads stale or uninitialised shared memory, as it may on a GPU. A completed
phase and an opened named barrier order shared memory like ``bar.sync`` for the race checker.
"""
from __future__ import annotations

import numpy as np

from .decode import lanes_of, mods, unsupported
from .errors import BarrierError, Blocked, Deadlock, MemoryAccessError, raise_at
from .inflight import forget_releases, note_release, write_hazard
from .memory import PUBLIC, SHARED_WINDOW, WINDOW_SIZE
from .phases import clocks
from .registry import handler


class MBar:
    __slots__ = ("expected", "pending", "tx", "phase")

    def __init__(self, count: int):
        self.expected, self.pending, self.tx, self.phase = count, count, 0, 0

    def describe(self, addr: int) -> str:
        over = ("; negative: copies completed more bytes than expect_tx announced (a tensor copy "
                "completes its whole box, out-of-bound elements included)" if self.tx < 0 else "")
        return (f"the mbarrier at shared address {addr:#x} (phase {self.phase}: "
                f"{self.pending} of {self.expected} arrivals and {self.tx} transaction bytes "
                f"pending{over})")


class BlockSync:
    """A block's mbarriers, named barriers and bulk copies in flight. ``epoch`` counts changes:
    a blocked warp is retried only after it moved."""

    def __init__(self, shared):
        self.shared = shared
        self.epoch = 0
        self.mbar: dict[int, MBar] = {}
        self.named: dict[int, list] = {}     # id -> [count, arrived threads, generation]
        self.copies: list = []               # (dst, bytes, mbarrier address, warp, instr)
        self.seen: dict = {}                 # (warp, mbarrier) -> phases it saw complete (waits)
        self.clocks = None                   # what the phases order (phases.py), from a bulk copy on

    def changed(self):
        self.epoch += 1

    def _addr(self, mb: MBar) -> int:
        return next(a for a, m in self.mbar.items() if m is mb)

    def get(self, w, ins, addr: int) -> MBar:
        mb = self.mbar.get(addr)
        if mb is None:
            raise_at(BarrierError, f"no mbarrier was initialised (mbarrier.init) at shared address "
                     f"{addr:#x}", w, ins, lane=0)
        return mb

    def complete(self, mb: MBar) -> None:
        if mb.pending <= 0 and mb.tx == 0:
            if self.clocks is not None:
                self.clocks.complete(self._addr(mb), mb.phase)
            mb.phase += 1
            if self.shared.early:
                forget_releases(self.shared, self._addr(mb), mb.phase)
            mb.pending, mb.tx = mb.expected, 0
            self.shared.barrier(publish=False)     # copies: published per barrier (memory.py)
            self.changed()

    def land(self, only=None) -> bool:
        """Complete the bulk copies in flight (those signalling mbarrier ``only``, or all)."""
        go = [c for c in self.copies if only is None or c[2] == only]
        if not go:
            return False
        self.copies = [c for c in self.copies if not (only is None or c[2] == only)]
        sh = self.shared
        for dst, data, bar, w, ins in go:
            sl = slice(dst, dst + len(data))
            sh.buf[sl], sh.init[sl], sh.writer[sl] = data, True, -1   # the async proxy wrote it
            mb = self.get(w, ins, bar) if bar is not None else None
            # readers must wait for the phase this copy completes (or a bar.sync)
            sh.tag_copy(w, ins, np.arange(dst, dst + len(data)), bar, mb.phase if mb else 0,
                        bulk=True)
            if mb is not None:
                mb.tx -= len(data)
                self.complete(mb)
        self.changed()
        return True

    def flush(self) -> bool:
        return self.land()

    def finish(self, warps) -> None:
        """End of the block: pending copies land; setmaxnreg must match across warpgroups."""
        self.land()
        for g in range(0, len(warps), 4):
            group = [w for w in warps[g:g + 4] if w.exists.any()]
            seqs = {tuple(v for v, _ in w.maxnreg) for w in group}
            if len(seqs) > 1:
                w = next(w for w in group if w.maxnreg)
                raise_at(BarrierError, f"setmaxnreg must be executed by all 4 warps of a warpgroup "
                         f"alike; warps {[x.index for x in group]} executed "
                         f"{[[v for v, _ in x.maxnreg] for x in group]}", w, w.maxnreg[0][1], lane=0)


def deadlock(warps, code, launch) -> None:
    """Every warp waits: raise Deadlock naming what each waits for."""
    parts = []
    for w in warps:
        if w.blocked is not None:
            what = w.blocked.what
            parts.append(f"warp {w.index} waits at `{code[_pc(w)].instr.text}` for "
                         f"{what() if callable(what) else what}")
        elif w.waiting.any():
            parts.append(f"warp {w.index} waits at `{code[int(w.pc[np.argmax(w.waiting)])].instr.text}`"
                         " (bar.sync) for threads that never arrive")
    exited = [w.index for w in warps if w.exists.any() and not w.live.any()]
    if exited:
        parts.append(f"warps {exited} have exited")
    w = next(w for w in warps if w.blocked is not None)
    raise_at(Deadlock, "deadlock: every warp of the block waits and none can go on (on a GPU "
             "the kernel would hang):\n    " + "\n    ".join(parts), w, code[_pc(w)].instr, lane=0)


def _pc(w) -> int:
    if w.uniform:
        return w.upc
    act = w.live & ~w.waiting
    return int(w.pc[np.argmax(act)]) if act.any() else int(w.pc[0])


# ---- addresses ---------------------------------------------------------------------------------

def shared_address(ins, dc, op):
    """fn(w, lanes) -> shared-space addresses (ints) of an mbarrier / bulk-copy operand, from a
    shared::cta / shared::cluster (this CTA) or a generic address."""
    space = "shared" if any(x.startswith("shared") for x in mods(ins)) else "generic"
    addr = dc.address(op, space, ins)

    def fn(w, lanes):
        a = addr(w)[lanes]
        if space == "generic":
            ok = (a >= np.uint64(SHARED_WINDOW)) & (a < np.uint64(SHARED_WINDOW + WINDOW_SIZE))
            if not ok.all():
                raise_at(MemoryAccessError, f"{ins.base} needs a shared-memory address, got "
                         f"{int(a[np.argmin(ok)]):#x}", w, ins, lane=int(lanes[np.argmin(ok)]))
            a = a - np.uint64(SHARED_WINDOW)
        return a.astype(np.int64)
    return fn


def _by_barrier(addrs, lanes):
    """(address, lanes) for each distinct mbarrier the lanes name (usually one)."""
    for a in np.unique(addrs):
        yield int(a), lanes[addrs == a]


# ---- mbarrier ----------------------------------------------------------------------------------

@handler("mbarrier")
def h_mbarrier(ins, dc):
    md = mods(ins)
    op = md[0]
    ops = ins.operands
    if op == "init":
        at = shared_address(ins, dc, ops[0])
        cnt = dc.reader(ops[1], "u32", ins)

        def init(w, m):
            lanes = lanes_of(m)
            sync = w.mem.sync
            c = cnt(w)
            for a, ln in _by_barrier(at(w, lanes), lanes):
                n = int(c[ln[0]])
                if not 1 <= n < (1 << 20) or a % 8:
                    raise_at(BarrierError, f"mbarrier.init at shared address {a:#x} with count {n} "
                             "(the address must be 8-byte aligned, the count 1 to 2^20-1)", w, ins,
                             lane=int(ln[0]))
                sync.mbar[a] = MBar(n)
                w.mem.spaces["shared"].init[a:a + 8] = True
            sync.changed()
        return init
    if op == "inval":
        at = shared_address(ins, dc, ops[0])

        def inval(w, m):
            lanes = lanes_of(m)
            for a, _ in _by_barrier(at(w, lanes), lanes):
                w.mem.sync.mbar.pop(a, None)
        return inval
    if op in ("arrive", "arrive_drop"):
        return _arrive(ins, dc, md)
    if op in ("expect_tx", "complete_tx"):
        at = shared_address(ins, dc, ops[0])
        tx = dc.reader(ops[1], "u32", ins)
        sign = 1 if op == "expect_tx" else -1

        def txfn(w, m):
            lanes = lanes_of(m)
            sync = w.mem.sync
            t = tx(w)
            for a, ln in _by_barrier(at(w, lanes), lanes):
                mb = sync.get(w, ins, a)
                mb.tx += sign * int(t[ln].astype(np.int64).sum())
                sync.complete(mb)
            sync.changed()
        return txfn
    if op in ("try_wait", "test_wait"):
        return _wait(ins, dc, md)
    unsupported(ins)


def _arrive(ins, dc, md):
    ops = ins.operands
    drop = md[0] == "arrive_drop"
    expect = "expect_tx" in md
    if "noComplete" in md:
        unsupported(ins, ".noComplete")
    at = shared_address(ins, dc, ops[1])
    extra = dc.reader(ops[2], "u32", ins) if len(ops) > 2 else None
    wr = dc.writer(ops[0], "b64", ins)

    def arrive(w, m):
        lanes = lanes_of(m)
        sync = w.mem.sync
        x = extra(w) if extra is not None else None
        token = np.zeros(32, np.uint64)
        for a, ln in _by_barrier(at(w, lanes), lanes):
            mb = sync.get(w, ins, a)
            token[ln] = mb.phase
            note_release(w, ins, a, mb.phase)      # wgmmas still in flight: released too early?
            # the cp.async copies this warp landed are published by this arrival
            sync.shared.publish_copies(w, a, mb.phase)
            if expect:                                     # expect_tx, then one arrival each
                mb.tx += int(x[ln].astype(np.int64).sum())
                n = len(ln)
            else:
                n = len(ln) if x is None else int(x[ln].astype(np.int64).sum())
            if n > mb.pending:
                raise_at(BarrierError, f"{n} arrivals in one instruction on {mb.describe(a)}: more "
                         "than its phase expects (every thread that executes mbarrier.arrive "
                         "counts: let one lane arrive, or count threads in mbarrier.init)", w, ins,
                         lane=int(ln[0]))
            mb.pending -= n
            if drop:
                mb.expected -= n
            if sync.clocks is not None:                    # what the warp did before: released
                sync.clocks.arrive(w, a, mb.phase)
            sync.complete(mb)
        sync.changed()
        wr(w, token, m)
        raise Blocked("", done=True)       # a release: the other warps go first
    return arrive


def _wait(ins, dc, md):
    ops = ins.operands
    parity = "parity" in md
    at = shared_address(ins, dc, ops[1])
    arg = dc.reader(ops[2], "u32" if parity else "b64", ins)
    wr = dc.writer(ops[0], "pred", ins)

    def done(mb, v):
        return (mb.phase & 1) != (int(v) & 1) if parity else mb.phase != int(v)

    def wait(w, m):
        if w.timed_out:                                    # every warp waited: false, this once
            w.timed_out = False
            wr(w, np.zeros(32, bool), m)
            return
        lanes = lanes_of(m)
        sync = w.mem.sync
        v = arg(w)
        ok = []
        for a, ln in _by_barrier(at(w, lanes), lanes):
            mb = sync.get(w, ins, a)
            if not done(mb, v[ln[0]]):
                sync.land(a)                               # its bulk copies land as late as this
            if not done(mb, v[ln[0]]):
                want = (f"the phase of parity {int(v[ln[0]]) & 1}" if parity
                        else f"phase {int(v[ln[0]])} to complete")
                raise Blocked(lambda mb=mb, a=a, want=want: f"{want} of {mb.describe(a)}", True)
            ok.append((a, mb.phase))
        for a, phase in ok:                                # what the copies of those phases wrote
            sync.seen[(w.index, a)] = phase                # is visible to this warp from now on
            if sync.clocks is not None:                    # and what their arrivals did before
                sync.clocks.wait(w, a, phase)
        wr(w, np.ones(32, bool), m)
    return wait


# ---- named barriers ------------------------------------------------------------------------------

def named_barrier(ins, dc):
    """bar.sync / bar.arrive / barrier.sync with a thread count or a register id: counted per warp
    (each arriving warp counts 32 threads, as the PTX ISA specifies)."""
    md = mods(ins)
    arrive_only = md[0] == "arrive"
    ops = ins.operands
    rid = dc.reader(ops[0], "u32", ins)
    rcnt = dc.reader(ops[1], "u32", ins) if len(ops) > 1 else None

    def fn(w, m):
        sync = w.mem.sync
        lanes = lanes_of(m)
        bid = int(rid(w)[lanes[0]])
        if bid in w.named:                                 # arrived earlier: opened since?
            if sync.named[bid][2] > w.named[bid]:
                del w.named[bid]
                return
            raise Blocked(lambda: _named_state(sync, bid))
        total = w.launch.block[0] * w.launch.block[1] * w.launch.block[2]
        cnt = int(rcnt(w)[lanes[0]]) if rcnt is not None else -(-total // 32) * 32
        if not 0 <= bid < 16 or cnt <= 0 or cnt % 32:
            raise_at(BarrierError, f"{ins.base} {bid}, {cnt}: the barrier id must be 0 to 15 and "
                     "the thread count a positive multiple of 32", w, ins, lane=int(lanes[0]))
        st = sync.named.setdefault(bid, [cnt, 0, 0, []])
        if st[1] and st[0] != cnt:
            raise_at(BarrierError, f"named barrier {bid} is used with thread counts {st[0]} and "
                     f"{cnt} in one phase", w, ins, lane=int(lanes[0]))
        st[0] = cnt
        st[1] += 32
        st[3].append(w)
        if st[1] >= cnt:
            st[1], st[2] = 0, st[2] + 1
            sync.shared.barrier(publish=False)
            if sync.clocks is not None:
                sync.clocks.join(st[3])
            for x in st[3]:                                # copies its warps landed: visible
                sync.shared.publish_copies(x, PUBLIC)      # (to all: a named barrier's warps
            st[3] = []                                     # are not tracked further)
            sync.changed()
            return
        if not arrive_only:
            w.named[bid] = st[2]
            raise Blocked(lambda: _named_state(sync, bid))
    return fn


def _named_state(sync, bid):
    cnt, arrived = sync.named[bid][:2]
    return f"named barrier {bid} ({arrived} of {cnt} threads arrived)"


# ---- bulk copies -------------------------------------------------------------------------------

def bulk_copy(ins, dc):
    """cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [dst], [src], size, [mbar]
    (global -> this CTA's shared memory; lands lazily, see the module doc), and
    cp.async.bulk.global.shared::cta.bulk_group [dst], [src], size (shared -> global, at once)."""
    md = mods(ins)
    ops = ins.operands
    if "prefetch" in md:
        return lambda w, m: None
    if "tensor" in md:                                    # TMA: tensormap.py
        from .tensormap import tensor_copy
        return tensor_copy(ins, dc, shared_address(ins, dc, ops[0]), shared_address(ins, dc, ops[-1]))
    if "multicast::cluster" in md:
        unsupported(ins, "multicast bulk copies")
    if md[2] in ("commit_group", "wait_group"):          # the store direction completes at once
        return lambda w, m: None
    spaces = [x.split("::")[0] for x in md[2:4]]
    size = dc.reader(ops[2], "u32", ins)
    if spaces == ["shared", "global"]:
        dst = shared_address(ins, dc, ops[0])
        src = dc.address(ops[1], "global", ins)
        bar = shared_address(ins, dc, ops[3]) if len(ops) > 3 else None

        def load(w, m):
            lanes = lanes_of(m)
            d, s, n = dst(w, lanes), src(w)[lanes], size(w)[lanes]
            b = bar(w, lanes) if bar is not None else [None] * len(lanes)
            for j, ln in enumerate(lanes):
                nb = _check_bulk(w, ins, int(ln), int(n[j]), int(d[j]), int(s[j]))
                data = w.mem.load(w, ins, "global", s[j:j + 1], lanes[j:j + 1], nb, 16)[0]
                sh = w.mem.spaces["shared"]
                if int(d[j]) + nb > sh.size:
                    raise_at(MemoryAccessError, f"bulk copy of {nb} bytes to shared address "
                             f"{int(d[j])} runs past the block's shared memory", w, ins, lane=int(ln))
                if sh.wg_n or sh.early:            # wgmma operands in flight / released early
                    write_hazard(w, ins, np.arange(int(d[j]), int(d[j]) + nb)[None, :],
                                 lanes[j:j + 1])
                clocks(w).copy_issued(w, ins, int(d[j]), nb, int(ln))   # after its readers?
                w.mem.sync.copies.append((int(d[j]), data.copy(), None if b[j] is None else int(b[j]),
                                          w, ins))
        return load
    if spaces == ["global", "shared"]:
        dst = dc.address(ops[0], "global", ins)
        src = shared_address(ins, dc, ops[1])

        def store(w, m):
            lanes = lanes_of(m)
            d, s, n = dst(w)[lanes], src(w, lanes), size(w)[lanes]
            for j, ln in enumerate(lanes):
                nb = _check_bulk(w, ins, int(ln), int(n[j]), int(d[j]), int(s[j]))
                data = w.mem.load(w, ins, "shared", s[j:j + 1].astype(np.uint64), lanes[j:j + 1], nb, 16)
                w.mem.store(w, ins, "global", d[j:j + 1], lanes[j:j + 1], data, 16)
        return store
    unsupported(ins)


def _check_bulk(w, ins, lane, n, d, s) -> int:
    if n <= 0 or n % 16 or d % 16 or s % 16:
        raise_at(MemoryAccessError, f"bulk copy of {n} bytes from {s:#x} to {d:#x}: size and both "
                 "addresses must be multiples of 16", w, ins, lane=lane)
    return n
