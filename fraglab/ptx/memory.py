"""Memory spaces: global (one bounded allocation per NumPy array), shared (per block, with
initialisation and race tracking), local (per thread), const and param.

Addresses are 64-bit integers. State-space addresses (what ``ld.shared``, ``ld.local``,
``mov %r, smem`` use) start at 0 in their space; generic addresses put shared memory at
:data:`SHARED_WINDOW` and local memory at :data:`LOCAL_WINDOW` (what ``cvta.shared`` adds), and
global allocations from :data:`GLOBAL_BASE`, each followed by an unmapped gap, so that running
off the end of an array is caught rather than landing in the next one.

Every access is vectorised over the lanes that make it: ``addr`` and ``lanes`` are arrays.
"""
from __future__ import annotations

import numpy as np

from .errors import MemoryAccessError, SharedRace, UninitializedRead, raise_at
from .frames import source_of
from .inflight import write_hazard
from .poison import address_hint

CONST_WINDOW = 0x0000_7D00_0000_0000
SHARED_WINDOW = 0x0000_7E00_0000_0000
LOCAL_WINDOW = 0x0000_7F00_0000_0000
WINDOW_SIZE = 1 << 32
GLOBAL_BASE = 0x0000_1000_0000_0000
GLOBAL_GAP = 1 << 32          # so that even a 32-bit index overflow lands in no array
PUBLIC = "public"             # a copy record visible to every thread (SharedMemory.recs)


class Allocation:
    def __init__(self, base: int, data: np.ndarray, name: str, writable: bool):
        self.base, self.name, self.writable = base, name, writable
        self.bytes = data
        self.size = data.size


class GlobalMemory:
    """Global memory of one launch: NumPy arrays mapped at distinct bases, written in place."""

    def __init__(self):
        self.allocs: list[Allocation] = []
        self.next = GLOBAL_BASE
        self._bases = np.zeros(0, np.uint64)
        self._ends = np.zeros(0, np.uint64)
        self.watch = None          # fn(w, instr, addr, lanes, nbytes) told of every store

    def map_array(self, arr: np.ndarray, name: str) -> int:
        if not arr.flags.c_contiguous:
            raise ValueError(f"argument {name}: pass a C-contiguous NumPy array "
                             "(np.ascontiguousarray) so that writes can go back in place")
        data = arr.reshape(-1).view(np.uint8)
        return self._add(data, name, arr.flags.writeable)

    def map_bytes(self, data: bytes, name: str, writable=True) -> int:
        return self._add(np.frombuffer(bytearray(data), np.uint8).copy(), name, writable)

    def map_all(self, items) -> list:
        """Map many ``(bytes, name)`` at once (a module's .global variables: thousands in a
        module that includes libcu++), building the address tables once."""
        bases = [self._add(np.frombuffer(bytearray(d), np.uint8).copy(), n, True, index=False)
                 for d, n in items]
        self._index()
        return bases

    def _add(self, data, name, writable, index=True) -> int:
        base = self.next
        self.allocs.append(Allocation(base, data, name, writable))
        self.next = base + ((max(data.size, 1) + GLOBAL_GAP + 0xFFFF) & ~0xFFFF)
        if index:
            self._index()
        return base

    def _index(self):
        self._bases = np.array([a.base for a in self.allocs], np.uint64)
        self._ends = np.array([a.base + a.size for a in self.allocs], np.uint64)

    def _resolve(self, w, instr, addr, lanes, nbytes, what):
        idx = np.searchsorted(self._bases, addr, side="right").astype(np.int64) - 1
        ok = idx >= 0
        safe = np.where(ok, idx, 0)
        ok &= (addr + np.uint64(nbytes)) <= self._ends[safe] if len(self.allocs) else False
        if not np.all(ok):
            j = int(np.argmin(ok))
            a = int(addr[j])
            near = self._nearest(a)
            raise_at(MemoryAccessError, f"out-of-bounds global {what} of {nbytes} bytes at "
                     f"address {a:#x}{near}{address_hint(a)}", w, instr, lane=int(lanes[j]))
        return safe

    def _nearest(self, a: int) -> str:
        best = None
        for al in self.allocs:
            d = a - al.base
            if best is None or abs(d) < abs(best[1]):
                best = (al, d)
        if best is None:
            return " (no global memory is mapped)"
        al, d = best
        if 0 <= d:
            return f" ({d} bytes from the start of `{al.name}`, which has {al.size} bytes)"
        return f" ({-d} bytes before the start of `{al.name}`)"

    def load(self, w, instr, addr, lanes, nbytes, atomic=False):
        idx = self._resolve(w, instr, addr, lanes, nbytes, "load")
        first = int(idx[0])
        if np.all(idx == first):
            al = self.allocs[first]
            offs = (addr - np.uint64(al.base)).astype(np.int64)
            return al.bytes[offs[:, None] + np.arange(nbytes)]
        out = np.empty((len(addr), nbytes), np.uint8)
        for a in np.unique(idx):
            sel = idx == a
            al = self.allocs[int(a)]
            offs = (addr[sel] - np.uint64(al.base)).astype(np.int64)
            out[sel] = al.bytes[offs[:, None] + np.arange(nbytes)]
        return out

    def store(self, w, instr, addr, lanes, data, atomic=False):
        nbytes = data.shape[1]
        idx = self._resolve(w, instr, addr, lanes, nbytes, "store")
        if self.watch is not None:
            self.watch(w, instr, addr, lanes, nbytes)
        for a in np.unique(idx):
            sel = idx == a
            al = self.allocs[int(a)]
            if not al.writable:
                j = int(np.argmax(sel))
                raise_at(MemoryAccessError, f"store to read-only array `{al.name}`", w, instr,
                         lane=int(lanes[j]))
            offs = (addr[sel] - np.uint64(al.base)).astype(np.int64)
            al.bytes[offs[:, None] + np.arange(nbytes)] = data[sel]


class SharedMemory:
    """One block's shared memory, with per-byte initialisation and last-writer tracking."""

    def __init__(self, size: int, static_size: int, check_uninit=True, check_race=True):
        self.size, self.static_size = size, static_size
        self.buf = np.zeros(size, np.uint8)
        self.init = np.zeros(size, bool)
        self.writer = np.full(size, -1, np.int32)
        self.bepoch = np.zeros(size, np.int32)
        self.wepoch = np.zeros(size, np.int32)
        self.epoch = 1
        self.check_uninit, self.check_race = check_uninit, check_race
        # asynchronous copies (sm_90 programs): bytes a lazy cp.async or a bulk copy wrote carry
        # the copy's record until a plain store or a bar.sync; a read must have waited for it
        self.tag = None          # per byte: 1 + index into recs (0: no copy record)
        self.recs: list = []     # [instr, warp, mbarrier address | None | PUBLIC, phase, bulk]
        # warp index -> indices of its landed, unpublished cp.async records, one per source
        # location: a warp's copies from every cp.async site it ran since its last arrival
        self.open_rec = {}
        # wgmma operands in flight (inflight.py): per byte, how many in-flight wgmmas read it
        self.wg_busy = None
        self.wg_n = 0
        self.early = {}          # (mbarrier, phase) -> wgmma reads released early (inflight.py)
        self.order = None        # fences and flags (fences.Ordering), from the first fence on
        self.reads = None        # who read which byte when (phases.Clocks), from the first bulk copy
        self.wloc = np.full(size, -1, np.int32)   # per byte: the last plain store (wlocs index)
        self.wlocs: list = []
        self._wix: dict = {}

    def _offsets(self, w, instr, addr, lanes, nbytes, what):
        if len(addr) and (int(addr.max()) + nbytes > self.size):
            j = int(np.argmax(addr.astype(np.int64) + nbytes > self.size))
            raise_at(MemoryAccessError, f"out-of-bounds shared {what} of {nbytes} bytes at shared "
                     f"address {int(addr[j])} (the block has {self.size} bytes of shared memory: "
                     f"{self.static_size} static + {self.size - self.static_size} dynamic)"
                     f"{address_hint(int(addr[j]), offset=True)}", w, instr, lane=int(lanes[j]))
        return addr.astype(np.int64)[:, None] + np.arange(nbytes)

    def load(self, w, instr, addr, lanes, nbytes, atomic=False):
        offs = self._offsets(w, instr, addr, lanes, nbytes, "load")
        if self.check_uninit:
            ini = self.init[offs]
            if not ini.all():
                j = int(np.argmin(ini.all(axis=1)))
                hint = ("" if w.launch.block[0] * w.launch.block[1] * w.launch.block[2] <= 32 else
                        " so far (warps run one after another up to a barrier: if another warp "
                        "writes them, a __syncthreads() is missing before this read)")
                raise_at(UninitializedRead, f"read of uninitialised shared memory: {nbytes} bytes "
                         f"at shared address {int(addr[j])} were never written by any thread{hint}",
                         w, instr, lane=int(lanes[j]))
        if self.check_race and not atomic and instr.base != "wgmma":   # (wgmma.py checks its own)
            self._copy_in_flight(w, instr, offs, lanes)
        if self.tag is not None and self.check_race and not atomic:
            self._copy_visible(w, instr, offs, lanes)
        if self.check_race and not atomic:
            self._read_race(w, instr, offs, lanes)
        elif atomic and self.order is not None:       # a strong load: it may read a release
            self.order.strong_load(offs, w.tid_linear[lanes])
        if self.reads is not None and self.check_race:
            self.reads.read(w, instr, offs)
        return self.buf[offs]

    def fence(self, w, lanes) -> None:
        """Lanes `lanes` of warp `w` execute a fence (fences.py)."""
        if self.order is None:
            bx, by, bz = w.launch.block
            from .fences import Ordering
            self.order = Ordering(self.size, bx * by * bz)
        self.order.fence(w.tid_linear[lanes])

    # ---- asynchronous copies -------------------------------------------------------------------

    def tag_copy(self, w, instr, offs, bar=None, phase=0, bulk=False) -> None:
        """Bytes ``offs`` were just written by an asynchronous copy: a lazy cp.async of warp
        ``w`` landing at its wait (published by the warp's next mbarrier arrival), or (``bulk``)
        a bulk copy of warp ``w`` completing on mbarrier ``bar`` in its phase ``phase``."""
        if self.tag is None:
            self.tag = np.zeros(self.size, np.int32)
        mine = None if bulk else self.open_rec.setdefault(w.index, [])
        k = next((j for j in mine if self.recs[j][0].loc == instr.loc), None) if mine else None
        if k is None:
            k = len(self.recs)
            self.recs.append([instr, w.index, bar, phase, bulk])
            if mine is not None:
                mine.append(k)
        self.tag[offs] = k + 1

    def publish_copies(self, w, bar=PUBLIC, phase=0) -> None:
        """Warp ``w`` arrives on mbarrier ``bar`` in phase ``phase`` (or, ``PUBLIC``, at a named
        barrier): the cp.async copies it has landed become visible to whoever waits for that
        phase to complete."""
        if not self.open_rec:
            return
        for k in self.open_rec.pop(w.index, ()):
            self.recs[k][2:4] = [bar, phase]

    def _copy_visible(self, w, instr, offs, lanes) -> None:
        """A read of bytes an asynchronous copy wrote: the reader must have waited for the copy
        (its own cp.async.wait_group, or the mbarrier phase the copy completes / its issuing warp
        arrived on after landing it; a bar.sync), else on a GPU it may read the bytes of before.
        A cp.async's own warp may read what it landed (its wait_group covers it; which of its
        lanes wrote what is the race checker's business)."""
        t = self.tag[offs]
        if not t.any():
            return
        seen = w.mem.sync.seen
        for k in np.unique(t[t > 0]) - 1:
            ins, warp, bar, phase, bulk = self.recs[k]
            if (warp == w.index and not bulk) or bar is PUBLIC:
                continue
            if bar is not None and seen.get((w.index, bar), 0) > phase:
                continue
            hit = (t == k + 1).any(axis=1)
            j = int(np.argmax(hit))
            by = (f"the mbarrier at shared address {bar:#x} (phase {phase})" if bar is not None
                  else "any barrier yet (its warp has not arrived on an mbarrier since the copy "
                  "landed)")
            raise_at(SharedRace, f"shared-memory race: {_what(instr)} reads shared address "
                     f"{int(offs[j][np.argmax(t[j] == k + 1)])}, written by "
                     f"{_copy_name(ins, warp, w)}, before a wait that covers that copy: the copy "
                     f"is published by {by}, and this warp has not waited for it (wait on that "
                     "mbarrier phase before reading; on a GPU the read may see the bytes of before)",
                     w, instr, lane=int(lanes[j]))

    def _copy_in_flight(self, w, instr, offs, lanes) -> None:
        """A read of bytes that a copy still in flight (a lazy cp.async not yet waited for, a
        bulk copy not yet landed) is going to write."""
        sync = getattr(w.mem, "sync", None)
        if sync is None or not (sync.copies or w.launch.lazy_copies):
            return
        lo, hi = int(offs.min()), int(offs.max()) + 1
        for x in w.launch.current_warps:
            for group in x.cp_groups + [x.cp_open]:
                for ins, d, _, _, size in group:
                    d = d.astype(np.int64)
                    if not ((d < hi) & (d + size > lo)).any():
                        continue
                    hit = np.isin(offs, (d[:, None] + np.arange(size)).ravel()).any(axis=1)
                    if hit.any():
                        self._in_flight_error(w, instr, offs, lanes, hit, _copy_name(ins, x.index, w),
                                              "cp.async.wait_group")
        for d, data, bar, x, ins in sync.copies:
            hit = ((offs >= d) & (offs < d + len(data))).any(axis=1)
            if hit.any():
                mb = sync.mbar.get(bar) if bar is not None else None
                self._in_flight_error(w, instr, offs, lanes, hit, _copy_name(ins, x.index, w),
                                      "the wait on its mbarrier" if mb is None else
                                      f"the completion of phase {mb.phase} of the mbarrier at "
                                      f"shared address {bar:#x}")

    def _in_flight_error(self, w, instr, offs, lanes, hit, copy, wait):
        j = int(np.argmax(hit))
        raise_at(SharedRace, f"shared-memory race: {_what(instr)} reads shared address "
                 f"{int(offs[j][0])}, which {copy} is still writing (it completes only at "
                 f"{wait}): wait for the copy before reading its bytes", w, instr,
                 lane=int(lanes[j]))

    def _read_race(self, w, instr, offs, lanes):
        """A read of bytes another thread wrote since the last barrier (__syncwarp counts within
        a warp) and no fenced flag hand-off (fences.py): the order of the two is not guaranteed
        on a GPU."""
        if not (self.bepoch[offs.ravel()] == self.epoch).any():     # nothing written since
            return
        t = np.repeat(w.tid_linear[lanes], offs.shape[1])
        self._unordered(w, instr, offs, lanes, t, "reads", "with no barrier in between (add "
                        "__syncthreads(), or __syncwarp() within a warp, between the write and "
                        "the read; a hand-off through a flag needs a fence before the flag is "
                        "set and one after it is read)")

    def _unordered(self, w, instr, offs, lanes, t, verb, why, differs=None):
        """Raise SharedRace where threads `t` (one per byte) access bytes `offs` that another
        thread wrote since the last barrier (or __syncwarp, within a warp); where `differs` is
        given, only the bytes it marks count (a store of the value already there is no race)."""
        flat = offs.ravel()
        hazard = self.bepoch[flat] == self.epoch
        if not hazard.any():                      # (the usual case: nothing written since)
            return
        prev = self.writer[flat]
        hazard &= (prev >= 0) & (prev != t) & \
            ((prev // 32 != w.first_thread // 32) | (self.wepoch[flat] == w.sync_epoch))
        if differs is not None:
            hazard &= differs
        if hazard.any() and self.order is not None:   # ordered by a fence and a flag
            hazard &= ~self.order.ordered(flat, t, prev)
        if hazard.any():
            k = int(np.argmax(hazard))
            lane = int(lanes[k // offs.shape[1]])
            by = self.wlocs[self.wloc[flat[k]]] if self.wloc[flat[k]] >= 0 else None
            at = "" if by is None else \
                f" at {source_of(by, w.files) or 'PTX line %d' % by.ptx_line} (`{by.text}`)"
            raise_at(SharedRace, f"shared-memory race: thread {int(t[k])} {verb} shared address "
                     f"{int(flat[k])}, which thread {int(prev[k])} wrote{at} {why}", w, instr,
                     lane=lane)

    def store(self, w, instr, addr, lanes, data, atomic=False):
        nbytes = data.shape[1]
        offs = self._offsets(w, instr, addr, lanes, nbytes, "store")
        tids = w.tid_linear[lanes]
        if self.wg_n or self.early:               # wgmma operands in flight or released early
            write_hazard(w, instr, offs, lanes)
        if self.check_race and not atomic:
            self._race(w, instr, offs, lanes, data, tids)
        elif atomic and self.order is not None:       # a strong store: it releases
            self.order.strong_store(offs, tids, rmw=instr.base in ("atom", "red"))
        self.buf[offs] = data
        self.init[offs] = True
        if instr.base == "cp" and w.launch.lazy_copies:      # a lazy cp.async lands (ops_mem)
            self.tag_copy(w, instr, offs)
        elif self.tag is not None:
            self.tag[offs] = 0

    def _race(self, w, instr, offs, lanes, data, tids):
        flat = offs.ravel()
        vals = data.ravel()
        t = np.repeat(tids, offs.shape[1])
        if len(np.unique(flat)) < len(flat):           # two lanes of this instruction, one byte
            order = np.argsort(flat, kind="stable")
            f, v, tt = flat[order], vals[order], t[order]
            clash = (f[1:] == f[:-1]) & (v[1:] != v[:-1]) & (tt[1:] != tt[:-1])
            if clash.any():
                k = int(np.argmax(clash))
                ln = [int(lanes[np.argmax(tids == tt[k])]), int(lanes[np.argmax(tids == tt[k + 1])])]
                raise_at(SharedRace, f"shared-memory race: lanes {ln[0]} and {ln[1]} write different "
                         f"values to shared address {int(f[k])} in the same instruction",
                         w, instr, lane=ln[1])
        self._unordered(w, instr, offs, lanes, t, "writes", "with a different value since the "
                        "last barrier (add __syncthreads() / __syncwarp() between them, or make "
                        "one thread write)", differs=self.buf[flat] != vals)
        self.writer[flat] = t
        self.bepoch[flat] = self.epoch
        self.wepoch[flat] = w.sync_epoch
        ix = self._wix.get(id(instr))
        if ix is None:
            ix = self._wix[id(instr)] = len(self.wlocs)
            self.wlocs.append(instr)
        self.wloc[flat] = ix
        if self.order is not None:
            self.order.wrote(flat, t)

    def barrier(self, publish: bool = True):
        """A barrier orders the shared memory of all threads before it (the race checker's
        epoch). ``publish`` (bar.sync / __syncthreads): every copy landed so far is visible to
        every thread after it; an mbarrier phase or a named barrier passes False (mbarrier.py
        publishes copies by their barriers)."""
        self.epoch += 1
        if publish and self.tag is not None:
            self.tag, self.recs, self.open_rec = None, [], {}


def _what(instr) -> str:
    return f"this {instr.opcode}" if instr is not None else "a read"


def _copy_name(ins, warp: int, w) -> str:
    return (f"the {ins.opcode} of warp {warp} at "
            f"{source_of(ins, w.files) or f'PTX line {ins.ptx_line}'}")


class LocalMemory:
    """Per-thread local memory (the stack frame ``__local_depot``) of one block."""

    def __init__(self, threads: int, size: int, check_uninit=True):
        self.size = size
        self.buf = np.zeros((threads, max(size, 1)), np.uint8)
        self.init = np.zeros((threads, max(size, 1)), bool)
        self.check_uninit = check_uninit

    def _idx(self, w, instr, addr, lanes, nbytes, what):
        if len(addr) and int(addr.max()) + nbytes > self.size:
            j = int(np.argmax(addr.astype(np.int64) + nbytes > self.size))
            raise_at(MemoryAccessError, f"out-of-bounds local {what} at local address "
                     f"{int(addr[j])} (the thread has {self.size} bytes of local memory)"
                     f"{address_hint(int(addr[j]), offset=True)}", w, instr, lane=int(lanes[j]))
        rows = w.tid_linear[lanes][:, None]
        return rows, addr.astype(np.int64)[:, None] + np.arange(nbytes)

    def load(self, w, instr, addr, lanes, nbytes, atomic=False):
        rows, cols = self._idx(w, instr, addr, lanes, nbytes, "load")
        if self.check_uninit and not self.init[rows, cols].all():
            j = int(np.argmin(self.init[rows, cols].all(axis=1)))
            raise_at(UninitializedRead, f"read of uninitialised local memory at local address "
                     f"{int(addr[j])}", w, instr, lane=int(lanes[j]))
        return self.buf[rows, cols]

    def store(self, w, instr, addr, lanes, data, atomic=False):
        rows, cols = self._idx(w, instr, addr, lanes, data.shape[1], "store")
        self.buf[rows, cols] = data
        self.init[rows, cols] = True


class FlatSpace:
    """A read-only byte space (param, const)."""

    def __init__(self, data: bytes, name: str):
        self.buf = np.frombuffer(bytes(data) + b"\0" * 8, np.uint8)
        self.size, self.name = len(data), name

    def load(self, w, instr, addr, lanes, nbytes, atomic=False):
        if len(addr) and int(addr.max()) + nbytes > self.size:
            j = int(np.argmax(addr.astype(np.int64) + nbytes > self.size))
            raise_at(MemoryAccessError, f"out-of-bounds {self.name} load at {int(addr[j])} "
                     f"({self.size} bytes)", w, instr, lane=int(lanes[j]))
        return self.buf[addr.astype(np.int64)[:, None] + np.arange(nbytes)]

    def store(self, w, instr, addr, lanes, data, atomic=False):
        raise_at(MemoryAccessError, f"store to the read-only {self.name} space", w, instr,
                 lane=int(lanes[0]))


def check_align(w, instr, addr, lanes, align):
    if align > 1:
        bad = (addr & np.uint64(align - 1)) != 0
        if bad.any():
            j = int(np.argmax(bad))
            raise_at(MemoryAccessError, f"misaligned access: address {int(addr[j]):#x} is not a "
                     f"multiple of {align} bytes", w, instr, lane=int(lanes[j]))


class BlockMemory:
    """The spaces one block sees; `space` is 'global', 'shared', 'local', 'const', 'param' or
    'generic' (resolved per lane by window)."""

    def __init__(self, glob, shared, local, const, param):
        self.spaces = {"global": glob, "shared": shared, "local": local, "const": const,
                       "param": param}
        self.writes = 0     # stores and atomics so far (schedule.py's spin check)

    def load(self, w, instr, space, addr, lanes, nbytes, align, atomic=False):
        check_align(w, instr, addr, lanes, align)
        if space != "generic":
            return self.spaces[space].load(w, instr, addr, lanes, nbytes, atomic=atomic)
        parts = self._split(addr)
        if len(parts) == 1:
            sp, a, _ = parts[0]
            return self.spaces[sp].load(w, instr, a, lanes, nbytes, atomic=atomic)
        out = np.empty((len(addr), nbytes), np.uint8)
        for sp, a, sel in parts:
            out[sel] = self.spaces[sp].load(w, instr, a, lanes[sel], nbytes, atomic=atomic)
        return out

    def store(self, w, instr, space, addr, lanes, data, align, atomic=False):
        check_align(w, instr, addr, lanes, align)
        self.writes += 1
        if space != "generic":
            return self.spaces[space].store(w, instr, addr, lanes, data, atomic=atomic)
        for sp, a, sel in self._split(addr):
            self.spaces[sp].store(w, instr, a, lanes[sel], data[sel], atomic=atomic)

    @staticmethod
    def _split(addr):
        sh = (addr >= np.uint64(SHARED_WINDOW)) & (addr < np.uint64(SHARED_WINDOW + WINDOW_SIZE))
        lo = (addr >= np.uint64(LOCAL_WINDOW)) & (addr < np.uint64(LOCAL_WINDOW + WINDOW_SIZE))
        co = (addr >= np.uint64(CONST_WINDOW)) & (addr < np.uint64(CONST_WINDOW + WINDOW_SIZE))
        if not sh.any() and not lo.any() and not co.any():
            return [("global", addr, slice(None))]
        if sh.all():
            return [("shared", addr - np.uint64(SHARED_WINDOW), slice(None))]
        if lo.all():
            return [("local", addr - np.uint64(LOCAL_WINDOW), slice(None))]
        gl = ~sh & ~lo & ~co
        out = []
        for sp, sel, base in (("global", gl, 0), ("shared", sh, SHARED_WINDOW),
                              ("local", lo, LOCAL_WINDOW), ("const", co, CONST_WINDOW)):
            if sel.any():
                out.append((sp, addr[sel] - np.uint64(base), sel))
        return out
