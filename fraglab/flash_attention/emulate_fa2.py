"""mma.m16n8k16 in the warp emulator: P taken from the accumulators of S as the A operand of
P V, ``ldmatrix`` on swizzled shared memory at the FA-2 kernel's addresses, and
:func:`emulate_fa2`, which follows ``kernels/05_flash_attention_fa2.cu`` lane by lane.

The fragment layouts are the PTX ISA's (:func:`fraglab.fragments.mma_m16n8k16`)."""
from __future__ import annotations

import numpy as np

from .. import fragments, warp
from ..dtypes import round_to
from .constants import FA2_BN, FA2_HEAD_DIMS, FA2_WARPS, LOG2E
from .emulate_fa1 import quad_allreduce
from .reference import softmax_scale


def p_as_a_operand(c_lo, c_hi) -> np.ndarray:
    """The A fragment (32, 8) of P for 16 keys, from the two accumulators (32, 4) holding keys
    0-7 (``c_lo``) and 8-15 (``c_hi``): ``a0 = (lo.c0, lo.c1)``, ``a1 = (lo.c2, lo.c3)``,
    ``a2 = (hi.c0, hi.c1)``, ``a3 = (hi.c2, hi.c3)``. No value changes lanes; this is what the
    FA-2 kernel's ``pack2`` calls do (after rounding to 16 bits)."""
    c_lo, c_hi = np.asarray(c_lo), np.asarray(c_hi)
    return np.concatenate([c_lo, c_hi], axis=1)


def mma_m16n8k16(a, b, c) -> np.ndarray:
    """D = A B + C for one warp: ``a`` (32, 8), ``b`` (32, 4), ``c`` (32, 4) in the layouts of
    :func:`fraglab.fragments.mma_m16n8k16`; products summed in float64, result float32 (32, 4)."""
    la, lb, lc = (fragments.mma_m16n8k16(x) for x in "abc")
    A = np.zeros((16, 16))
    B = np.zeros((16, 8))
    C = np.zeros((16, 8))
    A[la[..., 0], la[..., 1]] = a
    B[lb[..., 0], lb[..., 1]] = b
    C[lc[..., 0], lc[..., 1]] = c
    D = A @ B + C
    return D[lc[..., 0], lc[..., 1]].astype(np.float32)


def swizzle_offset(row, chunk, d: int):
    """Byte offset of 16-byte chunk ``chunk`` of row ``row`` in the FA-2 kernel's shared tiles
    (``swz<D>`` in the .cu file): rows of ``d`` 16-bit values, chunk c stored at c ^ (row % 8)."""
    row, chunk = np.asarray(row), np.asarray(chunk)
    return row * (2 * d) + ((chunk ^ (row & 7)) << 4)


class SwizzledTile:
    """A shared-memory tile of the FA-2 kernel: ``rows`` x ``d`` 16-bit values (held as
    float32), rows cut in 16-byte chunks and stored swizzled (:func:`swizzle_offset`)."""

    def __init__(self, rows: int, d: int):
        self.rows, self.d = rows, d
        self.mem = np.full(rows * d, np.nan, dtype=np.float32)   # physical, in 16-bit slots

    def _slots(self) -> np.ndarray:
        """(rows, d) index into ``mem`` of every logical element: the 8 values of a chunk stay
        consecutive, the chunk moves within its row."""
        r, c = np.meshgrid(np.arange(self.rows), np.arange(self.d // 8), indexing="ij")
        first = swizzle_offset(r, c, self.d) // 2                      # first 16-bit slot
        return (first[..., None] + np.arange(8)).reshape(self.rows, self.d)

    def store(self, logical) -> None:
        """What ``load_tile`` writes: logical (rows, d) values, chunk by chunk."""
        self.mem[self._slots()] = np.asarray(logical, dtype=np.float32)

    def logical(self) -> np.ndarray:
        return self.mem[self._slots()]

    def ldmatrix_x4(self, addr, trans: bool = False) -> np.ndarray:
        """``ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16``: lane l gives the byte address of
        row l % 8 of matrix l // 8 (8 consecutive values); lane l receives, in register i,
        elements (l // 4, 2 (l % 4)) and (l // 4, 2 (l % 4) + 1) of matrix i, or of its transpose
        with ``trans``. Returns (32, 8): register i in columns 2i, 2i + 1."""
        addr = np.asarray(addr, dtype=np.int64)
        if addr.shape != (32,) or (addr % 16).any():
            raise ValueError("ldmatrix needs 32 addresses, each 16-byte aligned")
        slot = addr // 2
        if (slot < 0).any() or (slot + 8 > self.mem.size).any():
            raise IndexError("ldmatrix address outside the tile")
        rows = self.mem[slot[:, None] + np.arange(8)]                  # (32, 8): row of each lane
        mats = rows.reshape(4, 8, 8)                                   # matrix i, row, col
        lane = warp.LANES
        g, c = lane // 4, lane % 4
        out = np.empty((32, 8), dtype=np.float32)
        for i in range(4):
            m = mats[i].T if trans else mats[i]
            out[:, 2 * i] = m[g, 2 * c]
            out[:, 2 * i + 1] = m[g, 2 * c + 1]
        return out


# The per-lane ldmatrix addresses of the FA-2 kernel, one function per call site in the .cu file.
def q_fragment_address(lane, warp_id: int, kk: int, d: int):
    """A fragment of Q, 16 columns ``kk``: row 16 w + (lane % 16), chunk 2 kk + lane // 16."""
    lane = np.asarray(lane)
    return swizzle_offset(16 * warp_id + (lane & 15), 2 * kk + (lane >> 4), d)


def k_fragment_address(lane, np_: int, kk: int, d: int):
    """B fragments of K^T for keys 16 np_ .. +15, columns 16 kk .. +15 (plain ldmatrix):
    key 16 np_ + lane % 8 + 8 (lane // 16), chunk 2 kk + (lane // 8) % 2."""
    lane = np.asarray(lane)
    return swizzle_offset(16 * np_ + (lane & 7) + ((lane >> 4) << 3), 2 * kk + ((lane >> 3) & 1), d)


def v_fragment_address(lane, kk: int, dp: int, d: int):
    """B fragments of V for keys 16 kk .. +15, columns 16 dp .. +15 (ldmatrix .trans):
    key 16 kk + lane % 8 + 8 ((lane // 8) % 2), chunk 2 dp + lane // 16."""
    lane = np.asarray(lane)
    return swizzle_offset(16 * kk + (lane & 7) + (((lane >> 3) & 1) << 3), 2 * dp + (lane >> 4), d)


def fa2_tile_ranges(q0: int, bm: int, n: int, causal: bool) -> tuple[int, int]:
    """(n_full, n_tiles) of the FA-2 kernel for the block whose first query row is ``q0``: key
    tiles [0, n_full) need no mask, tiles [n_full, n_tiles) are masked, later tiles are skipped."""
    last_key = min(q0 + bm, n) if causal else n
    n_tiles = -(-last_key // FA2_BN)
    n_full = min((q0 + 1) // FA2_BN if causal else n_tiles, n // FA2_BN)
    return n_full, n_tiles


def _rows_of(x, r0: int, count: int) -> np.ndarray:
    """Rows r0 .. r0 + count - 1 of ``x``, zero-filled past its end, as cp.async loads them."""
    t = np.zeros((count, x.shape[1]), dtype=np.float32)
    hi = min(x.shape[0], r0 + count)
    if hi > r0:
        t[:hi - r0] = x[r0:hi]
    return t


def _score_tile(qf, sk: SwizzledTile, d: int) -> np.ndarray:
    """S = Q K^T for one warp and one key tile: FA2_BN / 8 accumulators (16 rows x 8 keys)."""
    lane = warp.LANES
    s = np.zeros((FA2_BN // 8, 32, 4), dtype=np.float32)
    for kk in range(d // 16):
        for np_ in range(FA2_BN // 16):
            b = sk.ldmatrix_x4(k_fragment_address(lane, np_, kk, d))
            s[2 * np_] = mma_m16n8k16(qf[kk], b[:, 0:4], s[2 * np_])
            s[2 * np_ + 1] = mma_m16n8k16(qf[kk], b[:, 4:8], s[2 * np_ + 1])
    return s


def _mask(s, k0: int, row0, n: int, causal: bool) -> np.ndarray:
    """-inf for keys past ``n`` and (causal) keys after the query row. Register i of the
    accumulator for keys 8t .. 8t + 7 holds key 8t + 2 (lane % 4) + (i & 1) of row g + 8 (i >> 1)."""
    c4 = warp.LANES % 4
    t = np.arange(FA2_BN // 8)[:, None, None]
    i = np.arange(4)[None, None, :]
    key = k0 + 8 * t + 2 * c4[None, :, None] + (i & 1)
    row = row0[None, :, None] + 8 * (i >> 1)
    return np.where((key >= n) | (causal & (key > row)), -np.inf, s).astype(np.float32)


def _softmax_tile(s, o, m, l, sl):
    """The FA-2 online-softmax step on the accumulators of S (in place on ``o``): new max,
    rescale of O and of the partial row sums, P = 2^(S sl - m). Returns (P, m, l)."""
    mx = np.stack([s[:, :, 0:2].max(axis=(0, 2)), s[:, :, 2:4].max(axis=(0, 2))], axis=1)
    mx = quad_allreduce(mx, np.fmax)
    m_new = np.fmax(m, mx * sl)
    m_use = np.where(np.isneginf(m_new), np.float32(0), m_new)
    alpha = np.exp2(m - m_use).astype(np.float32)
    l = l * alpha
    o[:, :, 0:2] *= alpha[None, :, 0:1]
    o[:, :, 2:4] *= alpha[None, :, 1:2]
    reg_row = np.array([0, 0, 1, 1])                 # registers 0, 1: row g; 2, 3: row g + 8
    p = np.exp2(s * sl - m_use[None][:, :, reg_row]).astype(np.float32)
    l = l + np.stack([p[:, :, 0:2].sum(axis=(0, 2)), p[:, :, 2:4].sum(axis=(0, 2))], axis=1)
    return p, m_new, l


def _output_rows(o, l, d: int) -> np.ndarray:
    """The epilogue of one warp: finish the row sums, normalize, and place the D/8 accumulators
    in a (16, d) tile (a row that saw no key gets 0, not NaN)."""
    l = quad_allreduce(l, np.add)
    inv = np.where(l > 0, np.float32(1) / np.where(l > 0, l, 1), np.float32(0))
    lc = fragments.mma_m16n8k16("c")
    tile = np.full((16, d), np.nan, dtype=np.float32)
    for t in range(d // 8):
        tile[lc[..., 0], lc[..., 1] + 8 * t] = o[t] * inv[:, [0, 0, 1, 1]]
    return tile


def emulate_fa2(q, k, v, *, causal: bool = False, scale: float | None = None, warps: int = 4,
                dtype: str = "f16") -> np.ndarray:
    """The FA-2 kernel on the emulator, for one head: ``q``, ``k``, ``v`` (N, d) (rounded to
    ``dtype`` here). Every block, warp and key tile runs as in ``fa2_tile`` of the .cu file:
    swizzled tiles, ``ldmatrix`` at the kernel's addresses, ``mma.m16n8k16``, masks, the online
    softmax with quad reductions, P packed from the accumulators, and the final normalization.
    Returns O (N, d) rounded to ``dtype`` (as float32). Slow (NumPy per instruction): keep N small.
    """
    if warps not in FA2_WARPS:
        raise ValueError(f"warps must be one of {FA2_WARPS}")
    q, k, v = (round_to(a, dtype, np.float32) for a in (q, k, v))
    n, d = q.shape
    if d not in FA2_HEAD_DIMS or k.shape != (n, d) or v.shape != (n, d):
        raise ValueError(f"need q, k, v of shape (N, d) with d in {FA2_HEAD_DIMS}")
    bm = 16 * warps
    sl = np.float32(softmax_scale(d, scale) * LOG2E)
    lane = warp.LANES
    out = np.full((n, d), np.nan, dtype=np.float32)
    for q0 in range(0, n, bm):
        s_q = SwizzledTile(bm, d)
        s_q.store(_rows_of(q, q0, bm))
        n_full, n_tiles = fa2_tile_ranges(q0, bm, n, causal)
        tiles = []
        for j in range(n_tiles):
            sk, sv = SwizzledTile(FA2_BN, d), SwizzledTile(FA2_BN, d)
            sk.store(_rows_of(k, j * FA2_BN, FA2_BN))
            sv.store(_rows_of(v, j * FA2_BN, FA2_BN))
            tiles.append((sk, sv))
        for w in range(warps):
            qf = [s_q.ldmatrix_x4(q_fragment_address(lane, w, kk, d)) for kk in range(d // 16)]
            o = np.zeros((d // 8, 32, 4), dtype=np.float32)
            m = np.full((32, 2), -np.inf, dtype=np.float32)
            l = np.zeros((32, 2), dtype=np.float32)
            row0 = q0 + 16 * w + lane // 4
            for j, (sk, sv) in enumerate(tiles):
                s = _score_tile(qf, sk, d)
                if j >= n_full:
                    s = _mask(s, j * FA2_BN, row0, n, causal)
                s, m, l = _softmax_tile(s, o, m, l, sl)
                for kk in range(FA2_BN // 16):
                    p = round_to(p_as_a_operand(s[2 * kk], s[2 * kk + 1]), dtype, np.float32)
                    for dp in range(d // 16):
                        b = sv.ldmatrix_x4(v_fragment_address(lane, kk, dp, d), trans=True)
                        o[2 * dp] = mma_m16n8k16(p, b[:, 0:4], o[2 * dp])
                        o[2 * dp + 1] = mma_m16n8k16(p, b[:, 4:8], o[2 * dp + 1])
            r0 = q0 + 16 * w
            keep = min(16, n - r0)
            if keep > 0:
                out[r0:r0 + keep] = round_to(_output_rows(o, l, d)[:keep], dtype, np.float32)
    return out
