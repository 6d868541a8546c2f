"""The fragment layouts the PTX ISA documents: the one home of these formulas in Python.

A layout table has shape ``(32, elements, 2)``: entry ``[lane, e]`` is the ``(row, col)`` of the
tile element that element ``e`` of that lane's fragment holds. With ``g = lane // 4`` (the
"groupID") and ``t = lane % 4`` ("threadID_in_group"), PTX ISA section "Matrix Fragments for
mma.m16n8k16 with floating point type" documents (16-bit inputs, f32 or f16 accumulators):

    A (16x16, 8 halves):  row = g + 8*(r & 1),   col = 2t + h + 8*(r >> 1)   (register r, half h)
    B (16x8,  4 halves):  row = 2t + h + 8*r,    col = g
    C (16x8,  4 floats):  row = g + 8*(e >> 1),  col = 2t + (e & 1)

WMMA leaves its own layouts unspecified; chapters 01-02 trace them on real GPUs and find that
the 16x16 accumulator is two m16n8k16 C fragments side by side (:func:`wmma_16x16_accumulator`).
"""
from __future__ import annotations

import numpy as np

LANES = np.arange(32)


def _table(row, col) -> np.ndarray:
    return np.stack(np.broadcast_arrays(row, col), axis=-1).astype(np.int64)


def mma_m16n8k16(operand: str) -> np.ndarray:
    """Layout table of one fragment of ``mma.sync.aligned.m16n8k16`` (16-bit inputs): ``'a'``
    (32, 8): element ``e`` is half ``e % 2`` of register ``e // 2``; ``'b'`` (32, 4), likewise;
    ``'c'`` (32, 4): element ``e`` is register ``e`` (f32 accumulator)."""
    lane = LANES[:, None]
    g, t = lane // 4, lane % 4
    if operand == "a":
        e = np.arange(8)[None, :]
        reg, half = e // 2, e % 2
        return _table(g + 8 * (reg & 1), 2 * t + half + 8 * (reg >> 1))
    if operand == "b":
        e = np.arange(4)[None, :]
        reg, half = e // 2, e % 2
        return _table(2 * t + half + 8 * reg, g + 0 * e)
    if operand == "c":
        e = np.arange(4)[None, :]
        return _table(g + 8 * (e >> 1), 2 * t + (e & 1))
    raise ValueError(f"operand must be 'a', 'b' or 'c', got {operand!r}")


def wmma_16x16_accumulator() -> np.ndarray:
    """The 16x16 WMMA accumulator (f32, f16 or s32; sm_80 and newer) as two m16n8k16 C fragments
    side by side: registers 0-3 the left half (columns 0-7), 4-7 the right half. Shape (32, 8, 2).
    Equal to the paper's eq. 1-2, and to what the tracer records on the H100."""
    c = mma_m16n8k16("c")                       # (32, 4, 2)
    right = c + np.array([0, 8])
    return np.concatenate([c, right], axis=1)


def row_registers(layout: np.ndarray) -> tuple[tuple[int, ...], ...]:
    """Registers of lane 0 grouped by the row they hold, in row order: for the 16x16
    accumulator ``((0, 1, 4, 5), (2, 3, 6, 7))`` (rows g and g + 8)."""
    rows: dict[int, list[int]] = {}
    for reg, (row, _) in enumerate(np.asarray(layout)[0]):
        rows.setdefault(int(row), []).append(reg)
    return tuple(tuple(v) for _, v in sorted(rows.items()))


#: Registers of the 16x16 accumulator that hold row g (= lane // 4) and row g + 8.
ACC16_ROW_REGS = row_registers(wmma_16x16_accumulator())
