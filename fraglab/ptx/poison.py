"""Registers never written read a poison pattern, not zero.

On a GPU a register that the kernel reads before writing it (an accumulator fragment never
filled, a variable set only on some paths) holds whatever the previous kernel left there. If the
interpreter gave it 0, a kernel that forgets ``wmma::fill_fragment(c, 0)`` would compute the right
answer GPU-less and a wrong one on the GPU. So every register starts as a pattern that cannot pass
for a result:

* 16-bit registers: ``0x7FF0``, a NaN as f16 and as bf16;
* 32-bit registers: ``0x7FF07FF0``, a NaN as f32 and as both halves of f16x2 / bf16x2;
* 64-bit registers: ``0x7FF07FF07FF07FF0``, a NaN as f64 (and as each 32-bit half);
* 8-bit registers: ``0x70``.

Integer registers get the same bits: as a 64-bit address ``0x7FF07FF07FF07FF0`` lies in no global
allocation and no shared, local or const window, and as a 32-bit shared or local offset
``0x7FF07FF0`` (2 GiB) is past any block's memory, so a load or store through an unwritten
address register is reported as out of bounds (the patterns end in 0x0, 16-byte aligned, so the
report is "out of bounds" with a hint, not "misaligned"); as an index it is a large positive
number (an offset far outside the array, or a loop that runs into ``max_steps``).

Predicates start False (a NumPy bool has no spare pattern): a branch or guard on a predicate never
set is not taken, one valid reading of an undefined value, but not a detected one.

Arithmetic keeps NaN NaN, so a product that reads an unwritten accumulator gives NaN, which the
course's checks compare as wrong (only an expected NaN matches NaN). A value whose unwritten bits
do not reach the result (the unused half of a packed register, a lane masked off later) leaves the
result unchanged, as on the GPU.
"""
from __future__ import annotations

import numpy as np

#: The poison bits by register size in bytes.
PATTERN = {1: 0x70, 2: 0x7FF0, 4: 0x7FF07FF0, 8: 0x7FF07FF07FF07FF0}
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def poison_value(dtype) -> np.ndarray:
    """One poison value of ``dtype`` (a 0-d array): the bits of :data:`PATTERN` for its size;
    False for a predicate."""
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return np.zeros((), bool)
    return np.array(PATTERN[dt.itemsize], _UINT[dt.itemsize]).view(dt)


_LAYOUTS: dict[int, tuple] = {}      # id(reg_dtypes) -> (reg_dtypes, [(dtype, indices)], order)


def _layout(reg_dtypes):
    """Registers grouped by type, and where each register's row is in the concatenated groups
    (cached per register list: every warp of a launch passes the kernel's same list)."""
    hit = _LAYOUTS.get(id(reg_dtypes))
    if hit is not None and hit[0] is reg_dtypes:
        return hit[1], hit[2]
    groups: dict[np.dtype, list[int]] = {}
    for i, dt in enumerate(reg_dtypes):
        groups.setdefault(np.dtype(dt), []).append(i)
    items = [(dt, idx) for dt, idx in groups.items()]
    flat = [i for _, idx in items for i in idx]
    order = np.empty(len(flat), np.int64)
    order[np.asarray(flat, np.int64)] = np.arange(len(flat))
    if len(_LAYOUTS) > 64:
        _LAYOUTS.clear()
    _LAYOUTS[id(reg_dtypes)] = (reg_dtypes, items, order.tolist())
    return items, order.tolist()


def fresh_registers(reg_dtypes, blocks_out: list | None = None) -> list[np.ndarray]:
    """A warp's register file: one (32,) array per register of ``reg_dtypes``, each lane holding
    the poison value of the register's type (see the module doc). Registers of one type are rows
    of one block, so a warp with thousands of registers costs a few allocations (the blocks are
    appended to ``blocks_out`` when given)."""
    items, order = _layout(reg_dtypes)
    rows = []
    for dt, idx in items:
        block = np.empty((len(idx), 32), dt)
        block[...] = poison_value(dt)
        rows.extend(block)
        if blocks_out is not None:
            blocks_out.append(block)
    return [rows[k] for k in order]


class RegisterPool:
    """Register files of a launch's finished blocks, handed to the warps of its next blocks
    poisoned again: a fresh file is one NumPy view per register (thousands per warp in the
    tensor-core kernels), a recycled one a fill of its few blocks. Only the files of blocks that
    have returned come back; a warp's file then reads exactly as a fresh one."""

    def __init__(self, reg_dtypes):
        self.reg_dtypes, self.free = reg_dtypes, []

    def take(self):
        """(registers, blocks) for a new warp."""
        if self.free:
            regs, blocks = self.free.pop()
            for b in blocks:
                b[...] = poison_value(b.dtype)
            return regs, blocks
        blocks: list = []
        return fresh_registers(self.reg_dtypes, blocks), blocks

    def give_back(self, warps) -> None:
        self.free.extend((w.R, w.reg_blocks) for w in warps)


#: No pointer of the interpreter (global arrays, the const/shared/local windows) nor of a GPU
#: reaches this high; a 64-bit poisoned register (or one plus an offset) does.
_HIGH_ADDRESS = 1 << 47
_HIGH_OFFSET = 0x7FF00000


def address_hint(addr: int, offset: bool = False) -> str:
    """A phrase for an out-of-bounds message when ``addr`` (a 64-bit address, or with ``offset``
    a shared/local state-space offset) looks computed from a register never written."""
    if addr >= (_HIGH_OFFSET if offset else _HIGH_ADDRESS):
        return (f"; {addr:#x} is no address at all: it looks computed from a register the kernel "
                "never wrote (the interpreter fills those with 0x7FF07FF0...; on a GPU they hold "
                "garbage)")
    return ""
