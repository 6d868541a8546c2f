"""What the paper and the PTX ISA say: the paper's equations (1)-(2) for the 16x16 accumulator, and
the PTX ISA's m16n8k16 C fragment, two of which make that accumulator (the chapter's lesson is
that they agree; the documented layouts themselves live in :mod:`fraglab.fragments.documented`)."""
from __future__ import annotations

import numpy as np

from .. import fragments


def eq12(lane, i):
    """The paper's equations (1)-(2) for the 16x16 accumulator: ``(row, col)``."""
    lane, i = np.asarray(lane), np.asarray(i)
    return lane // 4 + ((i >> 1) & 1) * 8, (lane % 4) * 2 + i % 2 + (i >> 2) * 8


def eq12_inverse(row, col):
    """Inverse of :func:`eq12`: ``(lane, i)`` holding element (row, col) of the 16x16 tile."""
    row, col = np.asarray(row), np.asarray(col)
    return 4 * (row % 8) + (col % 8) // 2, col % 2 + 2 * (row // 8) + 4 * (col // 8)


def ptx_m16n8k16_c(lane, j):
    """The PTX ISA's C/D fragment of ``mma.m16n8k16``, element ``c_j`` (j = 0..3) of a lane:
    ``(row, col)``, read from :func:`fraglab.fragments.mma_m16n8k16` ``("c")``."""
    c = fragments.mma_m16n8k16("c")
    return c[np.asarray(lane), np.asarray(j), 0], c[np.asarray(lane), np.asarray(j), 1]


def wmma16x16_from_ptx() -> np.ndarray:
    """The 16x16 accumulator as two m16n8k16 C fragments side by side (registers 0-3 the left
    half, 4-7 the right): :func:`fraglab.fragments.wmma_16x16_accumulator`. Shape (32, 8, 2)."""
    return fragments.wmma_16x16_accumulator()


# --------------------------------------------------------------------------------------------
