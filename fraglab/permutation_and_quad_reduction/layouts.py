"""The f32 accumulator layouts of 16x16, 32x8 and 8x32 WMMA tiles as bit permutations.

In all three, each of the 5 lane-id bits and each of the 3 register-index bits selects one bit of
the row or of the column of the element a register holds. A layout is then one 32-bit code: nibble
``k`` describes source bit ``k`` (lane bits 0-4, then register bits 0-2); its low 3 bits are the
destination bit, and ``0x8`` means "of the column" (else of the row). ``kernels/03_...cu`` reads
the same codes (``BitLayout<SPEC, M, N>``).
"""
from __future__ import annotations

import numpy as np

from .. import fragments, launch, warp

SHAPES = ((16, 16), (32, 8), (8, 32))    # (M, N) of the f32 accumulators handled here


def check_shape(shape) -> tuple[int, int]:
    """``shape`` as ``(M, N)``, one of :data:`SHAPES`; ``ValueError`` otherwise."""
    try:
        m, n = (int(s) for s in shape)
    except (TypeError, ValueError):
        raise ValueError(f"shape must be one of {list(SHAPES)}, got {shape!r}") from None
    return launch.check_choice("shape", (m, n), SHAPES)


def _spec_bits(spec: int) -> list[tuple[bool, int]]:
    """(is_col, destination bit) of each of the 8 source bits."""
    return [(bool((spec >> (4 * k)) & 8), (spec >> (4 * k)) & 7) for k in range(8)]


def layout_from_spec(spec: int, shape) -> np.ndarray:
    """The (32, 8, 2) layout table (row, col of register i of each lane) of a bit-layout code."""
    m, n = check_shape(shape)
    bits = _spec_bits(int(spec))
    rows_to = sorted(d for c, d in bits if not c)
    cols_to = sorted(d for c, d in bits if c)
    if rows_to != list(range(m.bit_length() - 1)) or cols_to != list(range(n.bit_length() - 1)):
        raise ValueError(f"spec {spec:#010x} does not map the 8 lane/register bits onto the "
                         f"{m}x{n} tile's row and column bits one to one")
    lay = np.zeros((32, 8, 2), dtype=np.int64)
    lane = warp.LANES[:, None]
    reg = np.arange(8)[None, :]
    for k, (is_col, dest) in enumerate(bits):
        bit = (lane >> k) & 1 if k < 5 else (reg >> (k - 5)) & 1
        lay[..., int(is_col)] |= bit << dest
    return lay


def spec_from_layout(layout, shape) -> int:
    """The bit-layout code of a (32, 8, 2) layout table; ``ValueError`` if it is not a bit layout
    (e.g. a layout traced on a GPU: pass it to the wrappers' ``layout=``)."""
    m, n = check_shape(shape)
    lay = warp.validate_layout(layout, (m, n))
    if lay.shape[1] != 8:
        raise ValueError(f"an accumulator layout has 8 registers per lane, got {lay.shape[1]}")
    base = lay[0, 0]
    if tuple(base) != (0, 0):
        raise ValueError("not a bit layout: lane 0 register 0 does not hold element (0, 0)")
    spec = 0
    for k in range(8):
        # what flipping source bit k alone does to element (0, 0): one bit of the row or column
        lane, reg = (1 << k, 0) if k < 5 else (0, 1 << (k - 5))
        r, c = (int(v) for v in lay[lane, reg])
        if (r == 0) == (c == 0) or (r & (r - 1)) or (c & (c - 1)):
            raise ValueError(f"not a bit layout: source bit {k} moves element (0, 0) to ({r}, {c})")
        spec |= ((8 | (c.bit_length() - 1)) if c else (r.bit_length() - 1)) << (4 * k)
    try:
        same = np.array_equal(layout_from_spec(spec, (m, n)), lay)
    except ValueError:
        same = False
    if not same:
        raise ValueError("not a bit layout: the table is not the XOR of what its single bits do")
    return spec


#: Bit-layout codes of the three accumulators (the .cu file's defaults; a test keeps them equal).
#: 16x16 is the documented one (two m16n8k16 C fragments side by side, 0xB38210A9):
#: row = g + 8*((i>>1)&1), col = 2t + (i&1) + 8*(i>>2), with g = lane/4, t = lane%4, register i.
#: 32x8 and 8x32, which NVIDIA does not document, were read off the SASS of load_matrix_sync and
#: agree with chapter 1's recording (fraglab/layouts/sm_90.json; a test compares them):
#: 32x8 row = g + 8*(i>>1), col = 2t + (i&1); 8x32 is its transpose.
SPECS = {
    (16, 16): spec_from_layout(fragments.wmma_16x16_accumulator(), (16, 16)),
    (32, 8): 0x438210A9,
    (8, 32): 0xCB0A9821,
}
#: Fig. 2: new register r holds old register FIG2_ORDER[r] (x[2,3] and x[4,5] trade places).
FIG2_ORDER = (0, 1, 4, 5, 2, 3, 6, 7)
#: The paper's member masks: lane l names the four lanes of its quad, 0xF << ((l/4)*4).
QUAD_MASKS = (0xF << ((warp.LANES // 4) * 4)).astype(np.int64)
QUAD_MASKS.flags.writeable = False
