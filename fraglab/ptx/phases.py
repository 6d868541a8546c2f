"""What mbarrier phases order: a copy into shared memory must come after every read of its bytes
by another warp (write after read), and only a wait that observed the phase in which the readers
released them puts it there.

A warp that waits on an mbarrier (``try_wait``/``test_wait`` that succeeds) observes the phases
completed so far, and with them what the warps that arrived in those phases had done before
arriving; a ``bar.sync`` or a named barrier orders its warps alike. Vector clocks by warp keep
this: ``vc[i, j]`` is the latest epoch of warp j that warp i is ordered after; an arrival
publishes the arriving warp's clock into the barrier's phase and starts a new epoch of that
warp, a phase's completion adds its arrivals' clocks to the barrier's, and a wait takes the
barrier's clock. Each shared byte remembers, per warp, the epoch in which that warp last read it
(and where). A bulk or tensor copy issued into bytes that some other warp read in an epoch the
issuing warp is not ordered after is a race on a GPU (the copy may land while the reader still
reads the old tile; in the interpreter copies land late and the reads see the right bytes), and
raises :class:`SharedRace` naming the copy, the read, and the mbarrier phase the copying warp
last observed. The bookkeeping starts at a block's first bulk copy (a kernel without one pays
nothing); plain stores are not checked for write-after-read.
"""
from __future__ import annotations

import numpy as np

from .errors import SharedRace, raise_at
from .frames import source_of


class Clocks:
    def __init__(self, size: int, nwarps: int):
        self.vc = np.eye(nwarps, dtype=np.int32)        # epochs start at 1
        self.repoch = np.zeros((size, nwarps), np.int32)   # per byte, per warp: epoch of its read
        self.rpc = np.zeros((size, nwarps), np.int32)      # ... and that read's instruction
        self.instrs: list = [None]
        self._ix: dict = {}
        self.phase_vc: dict = {}    # (mbarrier, phase) -> clock of the arrivals so far
        self.bar_vc: dict = {}      # mbarrier -> clock of its completed phases
        self.last_wait: dict = {}   # warp -> (mbarrier, phase it observed completed)

    # -- events ---------------------------------------------------------------------------------
    def read(self, w, instr, offs) -> None:
        """Warp w reads shared bytes `offs`."""
        flat = offs.ravel()
        i = w.index
        self.repoch[flat, i] = self.vc[i, i]
        k = self._ix.get(id(instr))
        if k is None:
            k = self._ix[id(instr)] = len(self.instrs)
            self.instrs.append(instr)
        self.rpc[flat, i] = k

    def arrive(self, w, bar: int, phase: int) -> None:
        i = w.index
        key = (bar, phase)
        cur = self.phase_vc.get(key)
        self.phase_vc[key] = self.vc[i].copy() if cur is None else np.maximum(cur, self.vc[i])
        self.vc[i, i] += 1

    def complete(self, bar: int, phase: int) -> None:
        """Phase `phase` of mbarrier `bar` completed."""
        got = self.phase_vc.pop((bar, phase), None)
        if got is not None:
            cur = self.bar_vc.get(bar)
            self.bar_vc[bar] = got if cur is None else np.maximum(cur, got)

    def wait(self, w, bar: int, phase: int) -> None:
        """Warp w's wait on `bar` succeeded with `phase` phases completed."""
        got = self.bar_vc.get(bar)
        if got is not None:
            self.vc[w.index] = np.maximum(self.vc[w.index], got)
        self.last_wait[w.index] = (bar, phase - 1)

    def join(self, warps) -> None:
        """A barrier of `warps` (bar.sync, a named barrier): each is ordered after all."""
        idx = [x.index for x in warps]
        j = self.vc[idx].max(axis=0)
        self.vc[idx] = j
        self.vc[idx, idx] += 1

    # -- the check -------------------------------------------------------------------------------
    def copy_issued(self, w, ins, lo: int, n: int, lane: int) -> None:
        """Warp w issues a copy into shared bytes [lo, lo + n): each other warp's reads of them
        must be ordered before it."""
        ep = self.repoch[lo:lo + n]
        mine = self.vc[w.index]
        bad = ep > mine[None, :]
        bad[:, w.index] = False
        if not bad.any():
            return
        b, r = (int(x[0]) for x in np.nonzero(bad))
        read = self.instrs[self.rpc[lo + b, r]]
        files = w.files

        def at(i):
            return f"`{i.opcode}` at {source_of(i, files) or 'PTX line %d' % i.ptx_line}"
        lw = self.last_wait.get(w.index)
        if lw is None:
            seen = f"it has not waited on an mbarrier since warp {r} read them"
        elif lw[1] < 0:
            seen = (f"its last mbarrier wait, on the mbarrier at shared address {lw[0]:#x}, "
                    "returned before any phase of it had completed (a parity that a fresh "
                    "barrier satisfies at once)")
        else:
            seen = (f"its last mbarrier wait observed phase {lw[1]} of the mbarrier at shared "
                    f"address {lw[0]:#x} completed, and warp {r} read the bytes after it had "
                    "arrived for that phase")
        raise_at(SharedRace, f"shared-memory race (write after read): warp {w.index} copies into "
                 f"shared address {lo + b}, which warp {r} read with no wait in between: {seen}. "
                 "On a GPU the copy may overwrite the stage while it is still being read: wait "
                 "on the phase in which its readers release it (the parity of the stage's use "
                 f"count).\n  the copy: {at(ins)}\n  the read: {at(read)}", w, ins, lane=lane)


def clocks(w):
    """The block's :class:`Clocks`, created at its first bulk copy."""
    sync = w.mem.sync
    c = sync.clocks
    if c is None:
        sh = w.mem.spaces["shared"]
        bx, by, bz = w.launch.block
        c = sync.clocks = sh.reads = Clocks(sh.size, -(-(bx * by * bz) // 32))
    return c
