"""Topic 05_flash_attention: the in-register softmax inside attention kernels.

Section 5 of the in-register WMMA paper (Morales 2025) runs its softmax (Alg. 4) on the
accumulator fragment of ``S = Q K^T`` inside a FlashAttention-1 style kernel and reports 1.36x
over a shared-memory softmax on an H100 (Table 6). This module has five parts:

* **NumPy**: :func:`attention_reference` (float64) and :func:`online_softmax_attention`, the
  online softmax (running max ``m``, running sum ``l``, rescaled output) in its FA-1 form (``O``
  normalized after every key block, as in Alg. 4) and its FA-2 form (normalized once at the end).
* **Alg. 4 in the warp emulator**: :func:`alg4_step` runs one key tile of the softmax on a 16x16
  f32 accumulator fragment (:func:`fraglab.warp.accumulator_16x16_sm80`) with quad reductions;
  :func:`emulate_fa1_rows` runs a whole FA-1 sweep for 16 query rows with it.
* **mma.m16n8k16 in the emulator**: the documented fragment layouts (:func:`mma_layout`), why P
  can go from the accumulators of ``S`` straight into the A operand of ``P V``
  (:func:`p_as_a_operand`), ``ldmatrix`` on swizzled shared memory (:class:`SwizzledTile`) and
  :func:`emulate_fa2`, which follows the FA-2 kernel lane by lane with the same addresses.
* **Wrappers** of ``kernels/05_flash_attention_fa1.cu`` (:func:`fa1`: ``paper_baseline``,
  ``fair_baseline``, ``inregister``) and ``kernels/05_flash_attention_fa2.cu`` (:func:`fa2`:
  f16/bf16, head dimension 64/128, causal or not, any sequence length). For lab 05,
  :func:`fa1_lab_source` builds the in-register FA-1 kernel around a softmax step written
  elsewhere (``fa1(..., softmax_source=...)`` runs it).
* **The benchmark**: ``python -m fraglab.flash_attention bench --out DIR`` (about ten seconds plus compilation on
  an H100, at most 3): the paper's pair at its size, the fair pair, and the FA-2 kernel's TFLOP/s next to
  PyTorch's ``scaled_dot_product_attention`` (flash backend). See :func:`run_bench`.

Tensors are ``(B, H, N, d)`` C-contiguous CuPy arrays: ``float16``, or ``uint16`` holding bf16
bit patterns (:func:`to_bf16`, :func:`from_bf16`; CuPy has no bfloat16 dtype).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
import numpy as np

from . import device, launch, warp
from .dtypes import from_bf16, to_bf16  # noqa: F401  (used here and re-exported)

KERNELS_FA1 = "05_flash_attention_fa1"
KERNELS_FA2 = "05_flash_attention_fa2"

FA1_VARIANTS = ("paper_baseline", "fair_baseline", "inregister")
FA1_HEAD_DIMS = (64, 128, 512)
FA1_TILE = 16                      # query rows per block and keys per tile (one 16x16 WMMA tile)
FA2_HEAD_DIMS = (64, 128)
FA2_WARPS = (4, 8)                 # 16 query rows per warp: 64 or 128 rows per block
FA2_BN = 64                        # keys per K/V tile
DTYPES = ("f16", "bf16")
MAX_N = 1 << 24                    # the kernels index rows with 32-bit ints
MAX_BH = 65535                     # gridDim.y
LOG2E = 1.4426950408889634


# =================================================================================================
# bf16 as uint16 bit patterns
# =================================================================================================





def round_to(x, dtype: str) -> np.ndarray:
    """Round float values to f16 or bf16 and return them as float32 (what a kernel would read)."""
    if dtype == "f16":
        return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)
    if dtype == "bf16":
        return from_bf16(to_bf16(x))
    raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")


# =================================================================================================
# NumPy: the reference and the online softmax
# =================================================================================================

def _scale(d: int, scale) -> float:
    return 1.0 / math.sqrt(d) if scale is None else float(scale)


def attention_reference(q, k, v, *, causal: bool = False, scale: float | None = None) -> np.ndarray:
    """softmax(Q K^T * scale) V in float64, for arrays (..., N, d) (any leading axes).

    ``causal=True`` lets query i see keys 0..i only. A row that sees no key would be 0/0; with
    equal query and key counts that cannot happen. Default scale 1/sqrt(d).
    """
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    if q.shape[:-2] != k.shape[:-2] or k.shape != v.shape[:-1] + (k.shape[-1],) or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"shapes do not match: q {q.shape}, k {k.shape}, v {v.shape}")
    sc = _scale(q.shape[-1], scale)
    lead = q.shape[:-2]
    qf = q.reshape((-1,) + q.shape[-2:])
    kf = k.reshape((-1,) + k.shape[-2:])
    vf = v.reshape((-1,) + v.shape[-2:])
    out = np.empty(qf.shape[:-1] + (v.shape[-1],))
    n_q, n_k = q.shape[-2], k.shape[-2]
    visible = np.tril(np.ones((n_q, n_k), dtype=bool)) if causal else None
    for b in range(qf.shape[0]):                      # one head at a time: N x N float64 each
        s = qf[b] @ kf[b].T * sc
        if causal:
            s = np.where(visible, s, -np.inf)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        out[b] = (p / p.sum(axis=1, keepdims=True)) @ vf[b]
    return out.reshape(lead + out.shape[-2:])


def online_softmax_attention(q, k, v, *, block: int = 16, causal: bool = False,
                             scale: float | None = None, normalize: str = "end",
                             return_stats: bool = False):
    """Attention for one head, (M, d) queries against (N, d) keys and values, one key block
    of ``block`` keys at a time, keeping only a running row max ``m``, a running row sum ``l``
    and the output ``O`` (float64).

    ``normalize='end'`` is the FA-2 form: ``O`` accumulates unnormalized and is divided by ``l``
    once at the end. ``normalize='each_step'`` is the FA-1 form of Alg. 4: after every block ``O``
    is the exact softmax output of the keys seen so far. Both rescale the old ``O`` by
    ``exp(m_old - m_new)`` when the max grows. Query i sees keys 0..i when ``causal``; a row that
    has seen no key yet keeps ``m = -inf`` and contributes nothing (no NaN).
    Returns ``O``, or ``(O, m, l)`` with ``return_stats``.
    """
    if normalize not in ("end", "each_step"):
        raise ValueError(f"normalize must be 'end' or 'each_step', got {normalize!r}")
    if not isinstance(block, (int, np.integer)) or block < 1:
        raise ValueError(f"block must be a positive int, got {block!r}")
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    if q.ndim != 2 or k.ndim != 2 or v.shape != k.shape[:1] + v.shape[1:] or q.shape[1] != k.shape[1]:
        raise ValueError(f"need q (M, d), k (N, d), v (N, dv); got {q.shape}, {k.shape}, {v.shape}")
    sc = _scale(q.shape[1], scale)
    m_rows, n = q.shape[0], k.shape[0]
    m = np.full(m_rows, -np.inf)
    l = np.zeros(m_rows)
    o = np.zeros((m_rows, v.shape[1]))
    rows = np.arange(m_rows)[:, None]
    for k0 in range(0, n, block):
        s = q @ k[k0:k0 + block].T * sc
        if causal:
            s = np.where(k0 + np.arange(s.shape[1])[None, :] <= rows, s, -np.inf)
        m_new = np.maximum(m, s.max(axis=1))
        m_use = np.where(np.isneginf(m_new), 0.0, m_new)     # -inf - (-inf) would be NaN
        p = np.exp(s - m_use[:, None])
        alpha = np.exp(m - m_use)
        l_new = alpha * l + p.sum(axis=1)
        if normalize == "end":
            o = alpha[:, None] * o + p @ v[k0:k0 + block]
        else:
            inv = np.divide(1.0, l_new, out=np.zeros_like(l_new), where=l_new > 0)
            o = (alpha * l * inv)[:, None] * o + (p * inv[:, None]) @ v[k0:k0 + block]
        m, l = m_new, l_new
    if normalize == "end":
        o = o * np.divide(1.0, l, out=np.zeros_like(l), where=l > 0)[:, None]
    return (o, m, l) if return_stats else o


# =================================================================================================
# Alg. 4 on a 16x16 accumulator fragment, in the warp emulator
# =================================================================================================

#: Registers of the 16x16 f32 accumulator that hold row g (= lane // 4) and row g + 8.
ROW_REGS = ((0, 1, 4, 5), (2, 3, 6, 7))


def _quad(values, op):
    """All-reduce over each quad (lanes 4g .. 4g+3): two butterfly steps, offsets 1 and 2."""
    return warp.reduce_xor(values, op, offsets=(1, 2))


def alg4_step(frag, m_old, l_old, scale_log2: float, *, normalize: bool = True):
    """One key tile of the online softmax on an accumulator fragment, as the FA-1 in-register
    kernel does it (Alg. 4 of the paper), in float32 on the warp emulator.

    ``frag`` (32, 8): S = Q K^T of a 16x16 tile in the layout of
    :func:`fraglab.warp.accumulator_16x16_sm80` (unscaled). ``m_old``, ``l_old`` (32, 2): each
    lane's copy of the running max (log2 domain: scores times ``scale_log2``) and row sum of its
    rows g and g + 8. Steps: row max of the tile (4 registers, then a quad reduction), new max,
    ``p = 2^(s * scale_log2 - m_new)``, row sum (quad reduction), new sum.

    Returns ``(p, m_new, l_new, alpha)``: ``p`` (32, 8) is P divided by ``l_new`` when
    ``normalize`` (FA-1, Alg. 4 line 18) and the raw exponentials otherwise (FA-2);
    ``alpha`` (32, 2) is the factor the old output is multiplied by: ``l_old 2^(m_old - m_new) /
    l_new`` with ``normalize``, ``2^(m_old - m_new)`` without.
    """
    x = np.asarray(frag, dtype=np.float32)
    if x.shape != (32, 8):
        raise ValueError(f"frag must have shape (32, 8), got {x.shape}")
    m_old = np.asarray(m_old, dtype=np.float32).reshape(32, 2)
    l_old = np.asarray(l_old, dtype=np.float32).reshape(32, 2)
    sl = np.float32(scale_log2)
    mx = np.stack([x[:, list(r)].max(axis=1) for r in ROW_REGS], axis=1)       # (32, 2)
    mx = _quad(mx, np.fmax)
    m_new = np.fmax(m_old, mx * sl)
    m_use = np.where(np.isneginf(m_new), np.float32(0), m_new)
    row_of_reg = np.array([0, 0, 1, 1, 0, 0, 1, 1])
    with np.errstate(invalid="ignore"):
        p = np.exp2(x * sl - m_use[:, row_of_reg]).astype(np.float32)
    sums = np.stack([p[:, list(r)].sum(axis=1) for r in ROW_REGS], axis=1)
    sums = _quad(sums, np.add)
    scale_old = np.exp2(m_old - m_use).astype(np.float32)
    l_resc = l_old * scale_old
    l_new = (l_resc + sums).astype(np.float32)
    if not normalize:
        return p, m_new, l_new, scale_old
    inv = np.where(l_new > 0, np.float32(1) / np.where(l_new > 0, l_new, 1), np.float32(0))
    return (p * inv[:, row_of_reg]).astype(np.float32), m_new, l_new, (l_resc * inv).astype(np.float32)


def emulate_fa1_rows(q, k, v, *, scale: float | None = None, dtype: str = "f16") -> np.ndarray:
    """The FA-1 in-register kernel for 16 query rows, tile by tile: S = Q K^T (float32), Alg. 4
    on its accumulator fragment (:func:`alg4_step`), P rounded to ``dtype`` as the kernel stores
    it, then ``O = alpha * O + P V``. ``q`` (16, d), ``k`` and ``v`` (N, d) with N a multiple of 16.
    Returns O (16, d) float32."""
    q, k, v = (np.asarray(a, dtype=np.float32) for a in (q, k, v))
    if q.shape[0] != FA1_TILE or k.shape[0] % FA1_TILE or k.shape != v.shape:
        raise ValueError(f"need q (16, d) and k, v (N, d) with N a multiple of 16; got "
                         f"{q.shape}, {k.shape}, {v.shape}")
    lay = warp.accumulator_16x16_sm80()
    sl = np.float32(_scale(q.shape[1], scale) * LOG2E)
    m = np.full((32, 2), -np.inf, dtype=np.float32)
    l = np.zeros((32, 2), dtype=np.float32)
    o = np.zeros((16, v.shape[1]), dtype=np.float32)
    for k0 in range(0, k.shape[0], FA1_TILE):
        s = (q.astype(np.float64) @ k[k0:k0 + 16].T.astype(np.float64)).astype(np.float32)
        p, m, l, alpha = alg4_step(warp.to_fragment(s, lay), m, l, sl)
        p_tile = round_to(warp.from_fragment(p, lay, (16, 16)), dtype)
        # alpha of row g is in lanes 4g..4g+3, column 0; of row g + 8 in column 1
        alpha_rows = np.concatenate([alpha[0::4, 0], alpha[0::4, 1]])
        o = (alpha_rows[:, None] * o + p_tile.astype(np.float64) @ v[k0:k0 + 16]).astype(np.float32)
    return o


# =================================================================================================
# mma.m16n8k16: fragment layouts, P as the A operand, ldmatrix, and the FA-2 kernel emulated
# =================================================================================================

def mma_layout(operand: str) -> np.ndarray:
    """Layout table (32, n, 2) of one fragment of ``mma.sync.aligned.m16n8k16`` with 16-bit
    inputs and f32 accumulators (PTX ISA, "Matrix fragments for mma.m16n8k16"): entry
    ``[lane, e]`` is the (row, col) of element ``e``; for ``'a'`` (16x16, 8 elements) and ``'b'``
    (16x8, 4 elements) element ``e`` is the half ``e % 2`` of register ``e // 2``; for ``'c'``
    (16x8 f32, 4 elements) element ``e`` is register ``e``.
    """
    lane = warp.LANES[:, None]
    g, c = lane // 4, lane % 4
    if operand == "a":
        e = np.arange(8)[None, :]
        reg, half = e // 2, e % 2
        return np.stack(np.broadcast_arrays(g + 8 * (reg & 1), 2 * c + half + 8 * (reg >> 1)), axis=-1)
    if operand == "b":
        e = np.arange(4)[None, :]
        reg, half = e // 2, e % 2
        return np.stack(np.broadcast_arrays(2 * c + half + 8 * reg, g + 0 * e), axis=-1)
    if operand == "c":
        e = np.arange(4)[None, :]
        return np.stack(np.broadcast_arrays(g + 8 * (e >> 1), 2 * c + (e & 1)), axis=-1)
    raise ValueError(f"operand must be 'a', 'b' or 'c', got {operand!r}")


def p_as_a_operand(c_lo, c_hi) -> np.ndarray:
    """The A fragment (32, 8) of P for 16 keys, from the two accumulators (32, 4) holding keys
    0-7 (``c_lo``) and 8-15 (``c_hi``): ``a0 = (lo.c0, lo.c1)``, ``a1 = (lo.c2, lo.c3)``,
    ``a2 = (hi.c0, hi.c1)``, ``a3 = (hi.c2, hi.c3)``. No value changes lanes; this is what the
    FA-2 kernel's ``pack2`` calls do (after rounding to 16 bits)."""
    c_lo, c_hi = np.asarray(c_lo), np.asarray(c_hi)
    return np.concatenate([c_lo, c_hi], axis=1)


def mma_m16n8k16(a, b, c) -> np.ndarray:
    """D = A B + C for one warp: ``a`` (32, 8), ``b`` (32, 4), ``c`` (32, 4) in the layouts of
    :func:`mma_layout`; products summed in float64, result float32 (32, 4)."""
    la, lb, lc = mma_layout("a"), mma_layout("b"), mma_layout("c")
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

    def store(self, logical) -> None:
        """What ``load_tile`` writes: logical (rows, d) values, chunk by chunk."""
        logical = np.asarray(logical, dtype=np.float32)
        r, c = np.meshgrid(np.arange(self.rows), np.arange(self.d // 8), indexing="ij")
        slot = swizzle_offset(r, c, self.d) // 2                       # first 16-bit slot
        idx = slot[..., None] + np.arange(8)
        self.mem[idx] = logical.reshape(self.rows, self.d // 8, 8)

    def logical(self) -> np.ndarray:
        r, c = np.meshgrid(np.arange(self.rows), np.arange(self.d // 8), indexing="ij")
        idx = (swizzle_offset(r, c, self.d) // 2)[..., None] + np.arange(8)
        return self.mem[idx].reshape(self.rows, self.d)

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
    q, k, v = (round_to(a, dtype) for a in (q, k, v))
    n, d = q.shape
    if d not in FA2_HEAD_DIMS or k.shape != (n, d) or v.shape != (n, d):
        raise ValueError(f"need q, k, v of shape (N, d) with d in {FA2_HEAD_DIMS}")
    bm = 16 * warps
    sl = np.float32(_scale(d, scale) * LOG2E)
    lane = warp.LANES
    g, c4 = lane // 4, lane % 4
    out = np.full((n, d), np.nan, dtype=np.float32)

    def rows_of(x, r0, count):                       # zero-filled past row n, like cp.async
        t = np.zeros((count, d), dtype=np.float32)
        hi = min(n, r0 + count)
        if hi > r0:
            t[:hi - r0] = x[r0:hi]
        return t

    for qb in range(-(-n // bm)):
        q0 = qb * bm
        s_q = SwizzledTile(bm, d)
        s_q.store(rows_of(q, q0, bm))
        n_full, n_tiles = fa2_tile_ranges(q0, bm, n, causal)
        tiles = []
        for j in range(n_tiles):
            sk, sv = SwizzledTile(FA2_BN, d), SwizzledTile(FA2_BN, d)
            sk.store(rows_of(k, j * FA2_BN, FA2_BN))
            sv.store(rows_of(v, j * FA2_BN, FA2_BN))
            tiles.append((sk, sv))
        for w in range(warps):
            qf = [s_q.ldmatrix_x4(q_fragment_address(lane, w, kk, d)) for kk in range(d // 16)]
            o = np.zeros((d // 8, 32, 4), dtype=np.float32)
            m = np.full((32, 2), -np.inf, dtype=np.float32)
            l = np.zeros((32, 2), dtype=np.float32)
            row0 = q0 + 16 * w + g
            for j, (sk, sv) in enumerate(tiles):
                k0 = j * FA2_BN
                s = np.zeros((FA2_BN // 8, 32, 4), dtype=np.float32)
                for kk in range(d // 16):
                    for np_ in range(FA2_BN // 16):
                        b = sk.ldmatrix_x4(k_fragment_address(lane, np_, kk, d))
                        s[2 * np_] = mma_m16n8k16(qf[kk], b[:, 0:4], s[2 * np_])
                        s[2 * np_ + 1] = mma_m16n8k16(qf[kk], b[:, 4:8], s[2 * np_ + 1])
                if j >= n_full:
                    t = np.arange(FA2_BN // 8)[:, None, None]
                    i = np.arange(4)[None, None, :]
                    key = k0 + 8 * t + 2 * c4[None, :, None] + (i & 1)
                    row = row0[None, :, None] + 8 * (i >> 1)
                    s = np.where((key >= n) | (causal & (key > row)), -np.inf, s).astype(np.float32)
                mx = np.stack([s[:, :, 0:2].max(axis=(0, 2)), s[:, :, 2:4].max(axis=(0, 2))], axis=1)
                mx = _quad(mx, np.fmax)
                m_new = np.fmax(m, mx * sl)
                m_use = np.where(np.isneginf(m_new), np.float32(0), m_new)
                alpha = np.exp2(m - m_use).astype(np.float32)
                m = m_new
                l = l * alpha
                o[:, :, 0:2] *= alpha[None, :, 0:1]
                o[:, :, 2:4] *= alpha[None, :, 1:2]
                reg_row = np.array([0, 0, 1, 1])
                s = np.exp2(s * sl - m_use[None][:, :, reg_row]).astype(np.float32)
                l = l + np.stack([s[:, :, 0:2].sum(axis=(0, 2)), s[:, :, 2:4].sum(axis=(0, 2))], axis=1)
                for kk in range(FA2_BN // 16):
                    p = round_to(p_as_a_operand(s[2 * kk], s[2 * kk + 1]), dtype)
                    for dp in range(d // 16):
                        b = sv.ldmatrix_x4(v_fragment_address(lane, kk, dp, d), trans=True)
                        o[2 * dp] = mma_m16n8k16(p, b[:, 0:4], o[2 * dp])
                        o[2 * dp + 1] = mma_m16n8k16(p, b[:, 4:8], o[2 * dp + 1])
            l = _quad(l, np.add)
            inv = np.where(l > 0, np.float32(1) / np.where(l > 0, l, 1), np.float32(0))
            lc = mma_layout("c")
            tile = np.full((16, d), np.nan, dtype=np.float32)
            for t in range(d // 8):
                vals = o[t] * inv[:, [0, 0, 1, 1]]
                tile[lc[..., 0], lc[..., 1] + 8 * t] = vals
            r0 = q0 + 16 * w
            keep = min(16, n - r0)
            if keep > 0:
                out[r0:r0 + keep] = round_to(tile[:keep], dtype)
    return out


# =================================================================================================
# Wrappers
# =================================================================================================

def fa1_kernel(variant: str, d: int) -> str:
    """Kernel name in ``kernels/05_flash_attention_fa1.cu``."""
    if variant not in FA1_VARIANTS:
        raise ValueError(f"variant must be one of {FA1_VARIANTS}, got {variant!r}")
    if d not in FA1_HEAD_DIMS:
        raise ValueError(f"head dimension d must be one of {FA1_HEAD_DIMS}, got {d}")
    return f"fa1_{variant}_d{d}"


def fa1_smem_bytes(d: int) -> int:
    """Dynamic shared memory of an FA-1 block (``Fa1Smem<D>::BYTES`` in the .cu file)."""
    if d not in FA1_HEAD_DIMS:
        raise ValueError(f"head dimension d must be one of {FA1_HEAD_DIMS}, got {d}")
    return 16 * (d + 4) * 4 + 16 * (d + 8) * 2 + 16 * 20 * 4 + 16 * 24 * 2 + 3 * 16 * 4


def fa2_kernel(dtype: str, d: int, warps: int) -> str:
    """Kernel name in ``kernels/05_flash_attention_fa2.cu``."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if d not in FA2_HEAD_DIMS:
        raise ValueError(f"head dimension d must be one of {FA2_HEAD_DIMS}, got {d}")
    if warps not in FA2_WARPS:
        raise ValueError(f"warps must be one of {FA2_WARPS}, got {warps!r}")
    return f"fa2_{dtype}_d{d}_w{warps}"


def fa2_smem_bytes(d: int, warps: int) -> int:
    """Dynamic shared memory of an FA-2 block: Q (16 W rows), K and V (64 rows each), 2 d bytes a row."""
    return (16 * warps + 2 * FA2_BN) * 2 * d


def attention_flops(b: int, h: int, n: int, d: int, causal: bool = False) -> float:
    """4 B H N^2 d (two matrix products of 2 N^2 d each per head), halved when causal."""
    f = 4.0 * b * h * n * n * d
    return f / 2 if causal else f


def _check_scale(scale, d: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating, np.integer)):
        raise TypeError(f"scale must be a float, got {type(scale).__name__}")
    if not (math.isfinite(float(scale)) and float(scale) > 0):
        raise ValueError(f"scale must be finite and > 0, got {scale}")
    return float(scale)


def _check_qkv(q, k, v, head_dims, align: int):
    """Common checks: dtype float16 (f16) or uint16 (bf16 bits), shape (B, H, N, d) equal for
    all three, contiguous, aligned, sizes in range. Returns (dtype, (B, H, N, d))."""
    launch.check_array("q", q, dtype=(np.float16, np.uint16), ndim=4)
    launch.check_array("k", k, dtype=q.dtype, shape=q.shape)
    launch.check_array("v", v, dtype=q.dtype, shape=q.shape)
    b, h, n, d = (int(s) for s in q.shape)
    if d not in head_dims:
        raise ValueError(f"head dimension d = {d} is not supported; these kernels are compiled "
                         f"for d in {head_dims}")
    if b < 1 or h < 1 or n < 1:
        raise ValueError(f"q must have B, H, N >= 1, got shape {q.shape}")
    if b * h > MAX_BH:
        raise ValueError(f"B * H = {b * h} must be at most {MAX_BH} (one grid row per head)")
    if n > MAX_N:
        raise ValueError(f"N = {n} must be at most {MAX_N}")
    for name, a in (("q", q), ("k", k), ("v", v)):
        if a.data.ptr % align:
            raise ValueError(f"{name} must start at a {align}-byte aligned address (a fresh "
                             "array, or cupy.ascontiguousarray of a copy)")
    return ("f16" if q.dtype == np.float16 else "bf16"), (b, h, n, d)


_smem_limit_set: set = set()


def _allow_smem(fn, nbytes: int) -> None:
    """Raise a kernel's dynamic shared memory limit (default 48 KB) when it needs more."""
    if nbytes <= 48 * 1024 or (fn.ptr, nbytes) in _smem_limit_set:
        return
    from cupy_backends.cuda.api import driver
    driver.funcSetAttribute(fn.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes)
    _smem_limit_set.add((fn.ptr, nbytes))


def fa1_launcher(q, k, v, variant: str = "inregister", *, scale: float | None = None, out=None,
                 softmax_source: str | None = None):
    """Check the arguments of :func:`fa1`, allocate the (poisoned) output, and return
    ``(launch, out)``: ``launch()`` runs the kernel once on the current stream (for
    :mod:`fraglab.bench`). ``softmax_source``: see :func:`fa1_lab_source` (in-register
    variant only)."""
    if variant not in FA1_VARIANTS:
        raise ValueError(f"variant must be one of {FA1_VARIANTS}, got {variant!r}")
    if softmax_source is not None:
        if not isinstance(softmax_source, str):
            raise TypeError(f"softmax_source must be a str of CUDA code, got {type(softmax_source).__name__}")
        if variant != "inregister":
            raise ValueError("softmax_source replaces the in-register softmax step; it needs "
                             f"variant='inregister', got {variant!r}")
    dtype, (b, h, n, d) = _check_qkv(q, k, v, FA1_HEAD_DIMS, align=32)
    if dtype != "f16":
        raise TypeError("the FA-1 kernels take float16 inputs only (they follow the paper's f16 WMMA)")
    sc = _check_scale(scale, d)
    if n % FA1_TILE:
        raise ValueError(f"N = {n} must be a multiple of {FA1_TILE} for the FA-1 kernels (one "
                         "16x16 WMMA tile per step, no masking); the FA-2 kernel (fa2) takes any N")
    if out is None:
        out = launch.poisoned(q.shape, np.float16)
    else:
        launch.check_array("out", out, dtype=np.float16, shape=q.shape)
    if softmax_source is None:
        fn = launch.get_kernel(KERNELS_FA1, fa1_kernel(variant, d))
    else:
        fn = launch.get_kernel(FA1_LAB_NAME, f"fa1_lab_d{d}", source=fa1_lab_source(softmax_source))
    smem = fa1_smem_bytes(d)
    _allow_smem(fn, smem)
    args = (q, k, v, out, np.int32(n), np.float32(sc * LOG2E))
    grid = (n // FA1_TILE, b * h)
    return (lambda: launch.launch(fn, grid, 32, args, shared_mem=smem)), out


def fa1(q, k, v, variant: str = "inregister", *, scale: float | None = None,
        softmax_source: str | None = None):
    """FA-1 style attention (one warp per 16 query rows, 16x16 WMMA tiles, O in shared memory)
    with one of three softmax paths: ``'paper_baseline'``, ``'fair_baseline'`` or
    ``'inregister'`` (Alg. 4). ``q``, ``k``, ``v``: float16 (B, H, N, d), d in 64/128/512, N a
    multiple of 16. Non-causal. Returns O (float16, same shape). With ``softmax_source`` (a CUDA
    string, see :func:`fa1_lab_source`) the in-register kernel runs with that softmax step."""
    run, out = fa1_launcher(q, k, v, variant, scale=scale, softmax_source=softmax_source)
    run()
    return out


# -------------------------------------------------------------------------------------------------
# The lab's hook: the in-register FA-1 kernel with its softmax step written elsewhere
# -------------------------------------------------------------------------------------------------

FA1_LAB_NAME = "05_flash_attention_fa1_lab.cu"

#: The device function a ``softmax_source`` must define (see :func:`fa1_lab_source`).
FA1_LAB_STEP = ("__device__ __forceinline__ void online_softmax_step(float (&x)[8], float (&m)[2], "
                "float (&l)[2], float (&alpha)[2], float scale_log2)")

_FA1_LAB_TAIL = r"""
// ---- appended by fraglab.flash_attention.fa1_lab_source ----------------------------------------
// SoftmaxInRegister's data movement around a softmax step supplied from outside.
struct SoftmaxLab {
    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.0f, 0.0f};   // rows g and g + 8
    __device__ void init(const Fa1Tile&) {}
    __device__ void step(AccFrag& s, const Fa1Tile& t, float scale_log2) {
        const int lane = lane_id(), g = lane >> 2, c = lane & 3;
        float x[8], alpha[2];
#pragma unroll
        for (int i = 0; i < 8; ++i) x[i] = s.x[i];
        online_softmax_step(x, m, l, alpha, scale_log2);
        if (c == 0) { t.alpha[g] = alpha[0]; t.alpha[g + 8] = alpha[1]; }
        __half2* p = reinterpret_cast<__half2*>(t.p);
#pragma unroll
        for (int i = 0; i < 8; i += 2) {
            const int row = g + 8 * ((i >> 1) & 1), col = 2 * c + 8 * (i >> 2);
            p[(row * FA1_LDP + col) / 2] = __floats2half2_rn(x[i], x[i + 1]);
        }
        __syncwarp();
    }
};
"""


def fa1_lab_source(softmax_source: str, *, unroll: int | None = None) -> str:
    """CUDA source of ``kernels/05_flash_attention_fa1.cu`` with its kernels replaced by
    ``fa1_lab_d<D>`` (D = 64, 128, 512): the in-register kernel whose softmax arithmetic is
    ``softmax_source``, which must define :data:`FA1_LAB_STEP`::

        __device__ __forceinline__ void online_softmax_step(float (&x)[8], float (&m)[2],
                                                            float (&l)[2], float (&alpha)[2],
                                                            float scale_log2);

    ``x``: the lane's 8 accumulator registers of S = Q K^T (unscaled; x[0, 1, 4, 5] in row
    g = lane / 4, x[2, 3, 6, 7] in row g + 8). ``m``, ``l``: the lane's running max (log2 domain,
    -inf before the first tile) and sum of rows g and g + 8. On return ``x`` holds P (normalized,
    FA-1 form), ``m`` and ``l`` the new statistics, ``alpha`` the factor of the old output rows
    (``l_old 2^(m_old - m_new) / l_new``). Storing P and alpha to shared memory is the kernel's.
    ``unroll`` sets ``FA1_UNROLL`` (1 to compare SASS with the kernels file built with
    ``defines={"FA1_UNROLL": 1}``). Use with :func:`fa1` (``softmax_source=``) or
    :func:`fraglab.toolchain.compile`.
    """
    if not isinstance(softmax_source, str):
        raise TypeError(f"softmax_source must be a str, got {type(softmax_source).__name__}")
    from . import toolchain
    text = toolchain.kernel_path(KERNELS_FA1).read_text()
    lines = text.splitlines()
    keep = [l for l in lines if not l.startswith("FA1_ALL(")]
    if len(lines) - len(keep) != len(FA1_HEAD_DIMS):
        raise RuntimeError(f"{KERNELS_FA1}.cu no longer ends with one FA1_ALL(D) line per head "
                           "dimension; update fa1_lab_source")
    head = "" if unroll is None else f"#define FA1_UNROLL {int(unroll)}\n"
    kernels = "".join(f"FA1_KERNEL(fa1_lab, {d}, SoftmaxLab)\n" for d in FA1_HEAD_DIMS)
    return (head + "\n".join(keep) + "\n\n// ---- the softmax step (fa1_lab_source) ----\n"
            + softmax_source + "\n" + _FA1_LAB_TAIL + kernels)


def _require_fa2_gpu(dtype: str) -> None:
    major, minor = device.compute_capability()
    if (major, minor) < (8, 0):
        raise RuntimeError(
            f"the FA-2 kernel needs compute capability 8.0 or newer (cp.async, ldmatrix and "
            f"mma.sync.m16n8k16 with f32 accumulators); this GPU is {major}.{minor}. The FA-1 "
            "kernels (fa1) run on 7.5.")
    if dtype == "bf16":
        ok, why = device.supports("bf16", (major, minor))
        if not ok:
            raise RuntimeError(why)


def fa2_launcher(q, k, v, *, causal: bool = False, scale: float | None = None, warps: int = 4,
                 out=None):
    """Check the arguments of :func:`fa2`, allocate the (poisoned) output, and return
    ``(launch, out)`` (see :func:`fa1_launcher`)."""
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    if isinstance(warps, bool) or not isinstance(warps, (int, np.integer)) or int(warps) not in FA2_WARPS:
        raise ValueError(f"warps must be one of {FA2_WARPS}, got {warps!r}")
    dtype, (b, h, n, d) = _check_qkv(q, k, v, FA2_HEAD_DIMS, align=16)
    sc = _check_scale(scale, d)
    _require_fa2_gpu(dtype)
    if out is None:
        out = launch.poisoned(q.shape, q.dtype)
    else:
        launch.check_array("out", out, dtype=q.dtype, shape=q.shape)
        if out.data.ptr % 16:
            raise ValueError("out must start at a 16-byte aligned address")
    warps = int(warps)
    fn = launch.get_kernel(KERNELS_FA2, fa2_kernel(dtype, d, warps))
    smem = fa2_smem_bytes(d, warps)
    _allow_smem(fn, smem)
    args = (q, k, v, out, np.int32(n), np.float32(sc * LOG2E), np.int32(bool(causal)))
    grid = (-(-n // (16 * warps)), b * h)
    return (lambda: launch.launch(fn, grid, 32 * warps, args, shared_mem=smem)), out


def fa2(q, k, v, *, causal: bool = False, scale: float | None = None, warps: int = 4):
    """FA-2 style attention: in-register online softmax, P reused from the accumulators as the A
    operand of P V, mma.sync.m16n8k16 through PTX, cp.async + ldmatrix on swizzled shared memory.
    ``q``, ``k``, ``v``: (B, H, N, d) float16, or uint16 holding bf16 (:func:`to_bf16`); d 64 or
    128; any N >= 1; ``causal`` masks keys after the query. ``warps`` per block: 4 (64 query
    rows) or 8 (128). Needs compute capability 8.0+. Returns O (same dtype and shape)."""
    run, out = fa2_launcher(q, k, v, causal=causal, scale=scale, warps=warps)
    run()
    return out


def random_qkv(rng, shape, dtype: str = "f16", *, q_scale: float = 1.0):
    """Random (B, H, N, d) inputs as NumPy arrays of the kernel's dtype (float16, or uint16 bf16
    bits) and their exact float64 values. ``q_scale`` > 1 makes the softmax peaky."""
    vals = [rng.standard_normal(shape).astype(np.float32) for _ in range(3)]
    vals[0] *= np.float32(q_scale)
    if dtype == "f16":
        raw = [a.astype(np.float16) for a in vals]
        exact = [a.astype(np.float64) for a in raw]
    elif dtype == "bf16":
        raw = [to_bf16(a) for a in vals]
        exact = [from_bf16(a).astype(np.float64) for a in raw]
    else:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    return raw, exact


def as_float(out, dtype: str) -> np.ndarray:
    """A kernel's output (CuPy or NumPy, float16 or bf16 bits) as float64 NumPy."""
    a = out.get() if hasattr(out, "get") else np.asarray(out)
    return (a.astype(np.float64) if dtype == "f16" else from_bf16(a).astype(np.float64))


# =================================================================================================
# The benchmark
# =================================================================================================

def _log(msg: str) -> None:
    print(msg, flush=True)


def _torch_sdpa():
    """(torch, sdpa callable factory, note) or (None, None, reason)."""
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:                                  # pragma: no cover - GPU machine only
        return None, None, f"torch not importable: {type(e).__name__}: {e}"
    if not torch.cuda.is_available():
        return None, None, "torch sees no CUDA device"

    def context():
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            return sdpa_kernel(SDPBackend.FLASH_ATTENTION)
        except ImportError:                                 # older torch
            return torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False,
                                                  enable_mem_efficient=False)

    def make(qt, kt, vt, causal):
        return lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
    return torch, (context, make), f"torch {torch.__version__}"


def _torch_to_cupy(t, dtype: str):
    import cupy as cp
    import torch
    if dtype == "f16":
        return cp.from_dlpack(t)
    return cp.from_dlpack(t.view(torch.int16)).view(cp.uint16)


def _cupy_to_torch(a, dtype: str):
    import torch
    if dtype == "f16":
        return torch.from_dlpack(a)
    return torch.from_dlpack(a.view(np.int16)).view(torch.bfloat16)


def run_bench(out_dir, *, quick: bool = False, bh: tuple[int, int] = (4, 8)) -> dict:
    """The chapter's measurements; writes ``out_dir/results.json`` and returns the results.

    (a) FA-1 pairs at the paper's size (d = 512, N = 1024, one head): paper baseline vs
        in-register, and fair baseline vs in-register, each one :func:`fraglab.bench.compare`
        run; then all three at a size that fills the GPU (B*H = 32, N = 2048, d = 128).
    (b) FA-2 vs ``torch.nn.functional.scaled_dot_product_attention`` restricted to the flash
        backend, B*H = 32, N in 1024..8192, d in 64, 128, f16, causal and not, and bf16 at
        N = 4096, d = 128: TFLOP/s from medians, FLOPs = 4 B H N^2 d (halved when causal). The
        number of warps per block is picked first (4 vs 8 at N = 4096, d = 128). Each FA-2
        output is checked against SDPA's (relative error, max difference).

    The JSON is rewritten after every section, so an interrupted run keeps what it measured; a
    section that fails records its error and the run goes on.
    """
    import cupy as cp
    from . import bench

    t_start = time.time()
    out_dir = os.fspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "results.json")
    rep = dict(repeat=30, rounds=3, warmup=5) if quick else dict(repeat=100, rounds=5, warmup=10)
    rep_fa2 = dict(repeat=20, rounds=2, warmup=3) if quick else dict(repeat=40, rounds=4, warmup=5)
    results: dict = {"settings": {"quick": quick, "fa1": rep, "fa2": rep_fa2}, "errors": {}}
    dev_info = bench.device_info()
    rng = np.random.default_rng(0)
    stream = cp.cuda.Stream(non_blocking=True)
    _log(f"[05_flash_attention bench] {device.status_line()}")

    def save():
        results["elapsed_s"] = time.time() - t_start
        bench.save_results(path, results, device=dev_info)

    def failed(where: str, e: BaseException):
        results["errors"][where] = f"{type(e).__name__}: {e}"
        _log(f"  !! {where} failed: {type(e).__name__}: {e}")

    with stream:
        try:
            _bench_fa1(results, rng, rep, rep_fa2)
        except Exception as e:                              # pragma: no cover - GPU machine only
            failed("fa1", e)
        cp.get_default_memory_pool().free_all_blocks()
        save()
        _log(f"  ... {time.time() - t_start:.0f} s")
        _bench_fa2(results, rng, rep_fa2, quick, bh, stream, save, failed)
    save()
    _log("\n" + summary_table(results))
    _log(f"wrote {path} ({results['elapsed_s']:.0f} s)")
    return results


def _bench_fa1(results: dict, rng, rep: dict, rep_full: dict) -> None:
    import cupy as cp
    from . import bench
    shape = (1, 1, 1024, 512)
    (qn, kn, vn), exact = random_qkv(rng, shape, "f16")
    q, k, v = (cp.asarray(a) for a in (qn, kn, vn))
    ref = attention_reference(*exact)
    runs = {}
    results["fa1_check_rel_err"] = {}
    for var in FA1_VARIANTS:
        run, out = fa1_launcher(q, k, v, var)
        run()
        cp.cuda.get_current_stream().synchronize()
        err = float(np.linalg.norm(as_float(out, "f16") - ref) / np.linalg.norm(ref))
        runs[var] = run
        results["fa1_check_rel_err"][var] = err
        _log(f"  fa1 {var}: relative error vs float64 reference {err:.2e}")
    flops = attention_flops(*shape)
    for key, pair in (("fa1_paper_pair", ("paper_baseline", "inregister")),
                      ("fa1_fair_pair", ("fair_baseline", "inregister"))):
        _log(f"(a) {key}: {pair[0]} vs {pair[1]}, d=512, N=1024, B*H=1")
        c = bench.compare({p: runs[p] for p in pair}, baseline=pair[0], **rep)
        _log(c.table())
        results[key] = {"shape": shape, "flops": flops, "comparison": c,
                        "tflops": {p: flops / (c.timings[p].median_ms * 1e-3) / 1e12 for p in pair}}
    shape = (4, 8, 2048, 128)
    (qn, kn, vn), _ = random_qkv(rng, shape, "f16")
    q, k, v = (cp.asarray(a) for a in (qn, kn, vn))
    runs = {var: fa1_launcher(q, k, v, var)[0] for var in FA1_VARIANTS}
    _log("(a) fa1_full_gpu: all three, d=128, N=2048, B*H=32")
    c = bench.compare(runs, baseline="paper_baseline", **rep_full)
    _log(c.table())
    flops = attention_flops(*shape)
    results["fa1_full_gpu"] = {"shape": shape, "flops": flops, "comparison": c,
                               "tflops": {p: flops / (t.median_ms * 1e-3) / 1e12
                                          for p, t in c.timings.items()}}


def _bench_fa2(results: dict, rng, rep: dict, quick: bool, bh, stream, save, failed) -> None:
    import cupy as cp
    from . import bench
    torch, sdpa, note = _torch_sdpa()
    results["sdpa"] = note
    _log(f"(b) FA-2 vs SDPA (flash backend): {note}")
    b_, h_ = bh
    ext = torch.cuda.ExternalStream(stream.ptr) if torch is not None else None

    def inputs(dtype, n, d):
        shp = (b_, h_, n, d)
        if torch is not None:
            tdt = torch.float16 if dtype == "f16" else torch.bfloat16
            with torch.cuda.stream(ext):
                ts = [torch.randn(shp, dtype=tdt, device="cuda") for _ in range(3)]
            stream.synchronize()
            return ts, [_torch_to_cupy(t, dtype) for t in ts]
        raw, _ = random_qkv(rng, shp, dtype)
        return None, [cp.asarray(a) for a in raw]

    best = 4
    try:                                   # pick the warps per block
        ts, (q, k, v) = inputs("f16", 4096, 128)
        cands = {f"fa2_w{w}": fa2_launcher(q, k, v, warps=w)[0] for w in FA2_WARPS}
        _log("(b) warps per block, N=4096, d=128, f16, non-causal")
        c = bench.compare(cands, **rep)
        _log(c.table())
        best = int(min(c.timings, key=lambda name: c.timings[name].median_ms)[len("fa2_w"):])
        results["fa2_warps"] = {"comparison": c, "chosen": best}
        _log(f"  -> {best} warps per block")
        del ts, q, k, v, cands
    except Exception as e:                                  # pragma: no cover - GPU machine only
        failed("fa2_warps", e)
    save()

    configs = [("f16", n, d, causal) for n in ((1024, 4096) if quick else (1024, 2048, 4096, 8192))
               for d in FA2_HEAD_DIMS for causal in (False, True)]
    configs += [("bf16", 4096, 128, False), ("bf16", 4096, 128, True)]
    rows = results["fa2_vs_sdpa"] = []
    for dtype, n, d, causal in configs:
        where = f"fa2 {dtype} N={n} d={d} causal={causal}"
        _log(f"(b) {where}")
        rec = {"dtype": dtype, "B": b_, "H": h_, "N": n, "d": d, "causal": causal, "warps": best,
               "flops": attention_flops(b_, h_, n, d, causal)}
        ctx = None
        try:
            ts, (q, k, v) = inputs(dtype, n, d)
            ours, out = fa2_launcher(q, k, v, causal=causal, warps=best)
            variants = {"fa2": ours}
            if torch is not None:
                variants["sdpa_flash"] = sdpa[1](*ts, causal)
                ctx = sdpa[0]()
                ctx.__enter__()
                ours()
                with torch.cuda.stream(ext):
                    ref_t = variants["sdpa_flash"]()
                stream.synchronize()
                got = _cupy_to_torch(out, dtype).float()
                want = ref_t.float()
                rec["rel_err_vs_sdpa"] = float((got - want).norm() / want.norm())
                rec["max_abs_diff_vs_sdpa"] = float((got - want).abs().max())
                rec["fa2_nan"] = bool(torch.isnan(got).any())
                del ref_t, got, want
                with torch.cuda.stream(ext):
                    c = bench.compare(variants, baseline="sdpa_flash", progress=False, **rep)
            else:
                c = bench.compare(variants, progress=False, **rep)
            rec["comparison"] = c
            rec["tflops"] = {name: rec["flops"] / (t.median_ms * 1e-3) / 1e12
                             for name, t in c.timings.items()}
            if "sdpa_flash" in rec["tflops"]:
                rec["fraction_of_sdpa"] = rec["tflops"]["fa2"] / rec["tflops"]["sdpa_flash"]
            rows.append(rec)
            _log("    " + ", ".join(f"{name} {c.timings[name].median_ms:.3f} ms "
                                    f"{rec['tflops'][name]:.1f} TFLOP/s" for name in c.timings)
                 + (f", fa2/sdpa {rec['fraction_of_sdpa']:.2f}" if "fraction_of_sdpa" in rec else "")
                 + (f", rel err vs sdpa {rec['rel_err_vs_sdpa']:.1e}" if "rel_err_vs_sdpa" in rec else ""))
        except Exception as e:                              # pragma: no cover - GPU machine only
            failed(where, e)
        finally:
            if ctx is not None:
                ctx.__exit__(None, None, None)
        ts = q = k = v = ours = out = variants = None
        cp.get_default_memory_pool().free_all_blocks()
        save()


def summary_table(results: dict) -> str:
    """A short text table of :func:`run_bench`'s results (also works on the loaded JSON)."""
    def med(c, name):
        t = c.timings[name] if hasattr(c, "timings") else c["timings"][name]
        return t.median_ms if hasattr(t, "median_ms") else t["median_ms"]

    lines = []
    for key in ("fa1_paper_pair", "fa1_fair_pair", "fa1_full_gpu"):
        if key in results:
            r = results[key]
            c = r["comparison"]
            names = list(r["tflops"])
            base = names[0]
            lines.append(f"{key} {tuple(r['shape'])}: " + ", ".join(
                f"{n} {med(c, n):.3f} ms ({med(c, base) / med(c, n):.2f}x)" for n in names))
    if results.get("fa2_vs_sdpa"):
        lines.append(f"{'dtype':>5} {'N':>5} {'d':>4} {'causal':>6} {'fa2 TFLOP/s':>12} "
                     f"{'sdpa TFLOP/s':>13} {'fa2/sdpa':>9}")
        for r in results["fa2_vs_sdpa"]:
            if "tflops" not in r:
                continue
            tf = r["tflops"]
            sd = tf.get("sdpa_flash")
            lines.append(f"{r['dtype']:>5} {r['N']:>5} {r['d']:>4} {str(r['causal']):>6} "
                         f"{tf['fa2']:>12.1f} " + (f"{sd:>13.1f} {tf['fa2'] / sd:>9.2f}" if sd
                                                    else f"{'-':>13} {'-':>9}"))
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fraglab.flash_attention",
                                description="Topic 05_flash_attention benchmarks")
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bench", help="FA-1 pairs and FA-2 vs SDPA (about ten seconds plus compilation on an H100)")
    b.add_argument("--out", required=True, help="folder for results.json")
    b.add_argument("--quick", action="store_true", help="fewer sizes and repeats (a smoke test)")
    args = p.parse_args(argv)
    if args.cmd == "bench":
        device.require_gpu("the benchmark")
        run_bench(args.out, quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
