"""Errors of the PTX interpreter, worded for learners: where (block, warp, lane), what (the PTX
instruction) and which CUDA source line (:func:`.frames.source_of`, from the PTX ``.loc`` line
info)."""
from __future__ import annotations

from .frames import source_of


class PTXError(RuntimeError):
    """Base class. ``block``, ``warp``, ``lane``, ``instr`` (PTX text), ``source`` (file:line)
    are set when known."""

    def __init__(self, msg: str, *, block=None, warp=None, lane=None, instr=None, source=None):
        self.block, self.warp, self.lane, self.instr, self.source = block, warp, lane, instr, source
        self.detail = msg
        super().__init__(msg)


class PTXSyntaxError(PTXError):
    """The PTX text could not be parsed."""


class UnsupportedInstruction(PTXError):
    """An opcode or modifier the interpreter does not implement (never a silent wrong value)."""


class MemoryAccessError(PTXError):
    """An out-of-bounds, unmapped or misaligned load or store."""


class UninitializedRead(PTXError):
    """A load of shared or local memory that no thread has written."""


class SharedRace(PTXError):
    """Two threads wrote different values to one shared-memory byte between barriers."""


class BarrierError(PTXError):
    """bar.sync not reached by every thread of the block (deadlock on a GPU)."""


class CollectiveError(PTXError):
    """A *.sync warp collective whose member mask and executing lanes disagree."""


class TrapError(PTXError):
    """The kernel executed `trap` (code compiled out on this target, or an explicit __trap())."""


class DeviceAssertion(PTXError):
    """A device-side assert() failed."""


class Defer(Exception):
    """Internal: a warp-synchronous instruction waits for lanes that are still on their way (at
    other PCs). The executor parks the lanes and raises ``error`` if the others never come."""

    def __init__(self, error: PTXError):
        self.error = error
        super().__init__(str(error))


def defer_or_raise(cls, msg, w, instr, lane, waiting_for) -> None:
    """Raise :class:`Defer` when every lane in ``waiting_for`` (a bool array) is live and not
    parked at a block barrier, so it may still arrive; raise ``cls`` otherwise."""
    try:
        raise_at(cls, msg, w, instr, lane=lane)
    except PTXError as e:
        if w is not None and waiting_for.any() and \
                (w.live[waiting_for] & ~w.waiting[waiting_for]).all():
            raise Defer(e) from None
        raise


class Deadlock(BarrierError):
    """Every warp of a block waits (on mbarriers, named barriers or bar.sync) and none can go on."""


class CrossBlockWait(Deadlock):
    """A block spins on global memory that only another block (or nobody) writes: CUDA promises
    no forward progress between blocks, so the writer may never run while the waiter spins.
    ``polls`` holds what the spinning warps read (see :mod:`fraglab.ptx.crossblock`)."""
    polls: list = []


class WgmmaHazard(PTXError):
    """A register or shared-memory operand of a ``wgmma.mma_async`` is used or changed before the
    ``wgmma.wait_group`` (or ``wgmma.fence``) that the PTX memory model requires."""


class Blocked(Exception):
    """Internal: the warp cannot go on until another warp changes some block-wide state (an
    mbarrier phase, a named barrier); the executor runs the others and retries this instruction.
    ``what`` describes the wait for a deadlock report. With ``done`` the instruction has
    completed and the warp only yields: the other warps run before it goes on (after an mbarrier
    arrival, so that a stage released too early is refilled while its readers are in flight)."""

    def __init__(self, what, can_time_out: bool = False, done: bool = False):
        self.what = what
        self.epoch = -1
        self.can_time_out = can_time_out      # an mbarrier wait: may return false instead
        self.done = done
        super().__init__(str(what))


class StepBudgetExceeded(PTXError):
    """The kernel ran more instructions than ``max_steps``."""


def raise_at(cls, msg: str, ctx, instr, lane=None, **extra):
    """Raise ``cls`` with a message naming block, warp, lane, instruction and source line.
    ``ctx`` is the executing warp (it knows its block, warp index and the program's files)."""
    where = []
    block = warp = None
    files = {}
    if ctx is not None:
        block, warp, files = ctx.block_idx, ctx.index, ctx.files
        where.append(f"block {block}")
        where.append(f"warp {warp}")
    if lane is not None:
        where.append(f"lane {lane}")
        if ctx is not None:
            where.append(f"thread {ctx.thread_of(lane)}")
    src = source_of(instr, files)
    text = f"{msg}\n  at {', '.join(where) or 'an unknown thread'}"
    if instr is not None:
        text += f"\n  PTX: {instr.text}   (PTX line {instr.ptx_line})"
    if src:
        text += f"\n  CUDA source: {src}"
    raise cls(text, block=block, warp=warp, lane=lane,
              instr=None if instr is None else instr.text, source=src, **extra)
