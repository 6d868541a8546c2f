"""Fences and flags in the shared-memory race checker: release and acquire (PTX ISA, "Memory
Consistency Model"), so that a hand-off through a flag orders the data it guards.

A producer writes plain data, fences (``membar`` / ``fence.sc|acq_rel``, ``__threadfence_block()``
and wider; a ``.release`` store fences first), then writes a flag with a *strong* access
(volatile, relaxed, release, an atomic). A consumer reads the flag with a strong access, fences
(a ``.acquire`` load fences after), then reads the data: the data was written before the
producer's fence, the consumer's read comes after its own fence, and the flag value between them
carries the order. Without either fence the reads race, and are reported as before.

The lanes of a warp that execute a fence together (``__threadfence_block()`` in a producer warp)
fence as one: a ``fence.sc`` synchronises with the ``fence.sc`` operations after it (PTX ISA,
"Synchronizes With"), and the interpreter takes the lanes' fences in the order that orders the
warp's writes before any of its lanes' flag stores, as the hardware does for one instruction.
Hand-offs chain: what a thread acquired, its next fence releases further.

The bookkeeping, per block, created at the block's first fence (kernels without fences pay
nothing; n is the block's thread count):

* ``fences[t]``: how many fences thread t has executed;
* ``wfence[byte]``: the writer's fence count when a plain store wrote the byte (the write is
  released by any release that covers a larger count of that thread);
* ``cover[t, u]``: the largest fence count of thread u that thread t's next strong store
  releases (u's lanes fenced with t's, or t acquired it);
* ``rel[byte]``: for a flag byte, the (n,) counts it releases: a plain strong store sets them,
  an atomic read-modify-write adds to them (a release sequence);
* ``seen[r, u]``: the largest count of thread u that thread r read from a flag; at r's next
  fence it becomes ``acq[r, u]``. A plain read (or write) by r of a byte u wrote is ordered when
  ``acq[r, u] > wfence[byte]``.

Every scope (``.cta``, ``.gpu``/``gl``, ``.sys``, ``.cluster``) includes the block, so every
fence orders the block's shared memory. Global memory has no race checker, so no bookkeeping.
"""
from __future__ import annotations

import numpy as np


def fence_kind(ins) -> bool:
    """Whether a membar / fence instruction orders memory accesses (not a proxy fence, nor the
    mbarrier-init one)."""
    md = ins.opcode.split(".")[1:]
    return ins.base == "membar" or (ins.base == "fence" and not any(
        x.startswith(("proxy", "mbarrier")) for x in md))


class Ordering:
    def __init__(self, size: int, nthreads: int):
        self.fences = np.zeros(nthreads, np.int32)
        self.wfence = np.zeros(size, np.int32)
        self.rel: dict = {}
        self.cover = np.zeros((nthreads, nthreads), np.int32)
        self.seen = np.zeros((nthreads, nthreads), np.int32)
        self.acq = np.zeros((nthreads, nthreads), np.int32)

    def fence(self, tids) -> None:
        """Threads `tids` (the lanes of one warp) fence together: what they read from flags is
        acquired; their writes so far, and what they acquired, are released by their next
        strong stores."""
        self.fences[tids] += 1
        acq = np.maximum(self.acq[tids], self.seen[tids])
        self.acq[tids] = acq
        cover = np.maximum(self.cover[tids], acq)
        cover[:, tids] = np.maximum(cover[:, tids], self.fences[tids])
        self.cover[tids] = cover

    def wrote(self, flat, t) -> None:
        """A plain store: bytes `flat` by threads `t` (one per byte)."""
        self.wfence[flat] = self.fences[t]

    def strong_store(self, offs, tids, rmw: bool) -> None:
        """A strong store (volatile, relaxed, release, atomic) of bytes `offs` (one row per
        thread of `tids`): each byte releases what its writer's fences cover."""
        rel = self.rel
        for row, t in zip(offs.tolist(), tids.tolist()):
            c = self.cover[t]
            for b in row:
                old = rel.get(b) if rmw else None
                rel[b] = c.copy() if old is None else np.maximum(old, c)

    def strong_load(self, offs, tids) -> None:
        """A strong load of bytes `offs` (one row per thread of `tids`): the releases it reads
        are seen, to be acquired at the reader's next fence."""
        rel = self.rel
        if not rel:
            return
        for b in np.unique(offs).tolist():
            c = rel.get(b)
            if c is not None:
                r = tids[(offs == b).any(axis=1)]
                self.seen[r] = np.maximum(self.seen[r], c)

    def ordered(self, flat, t, prev) -> np.ndarray:
        """Per byte: whether thread t's access is ordered after thread prev's write by a
        release it acquired."""
        return self.acq[t, np.maximum(prev, 0)] > self.wfence[flat]
