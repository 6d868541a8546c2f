"""Bit-field and bit-counting instructions: bfe, bfi (the fields ptxas folds two ways are refused
by name), popc, clz, brev, bfind."""
from __future__ import annotations

import numpy as np

from .decode import DT, UINT, last_type, mods, unsupported
from .ops_int import nary
from .registry import handler

_U64 = np.uint64
_ONES = _U64(0xFFFFFFFFFFFFFFFF)


def _lowmask(n):
    """uint64 masks of the n low bits, n in 0..64 (an array)."""
    n = np.asarray(n, np.int64)
    return np.where(n >= 64, _ONES, (_U64(1) << np.minimum(n, 63).astype(_U64)) - _U64(1))


def _bitlength(x):
    """Number of significant bits of uint64 values (0 for 0), exact."""
    x = x.astype(_U64)
    hi = (x >> _U64(32)).astype(np.float64)
    lo = (x & _U64(0xFFFFFFFF)).astype(np.float64)
    bl = lambda v: np.where(v > 0, np.floor(np.log2(np.maximum(v, 1))) + 1, 0)  # noqa: E731
    return np.where(hi > 0, 32 + bl(hi), bl(lo)).astype(np.int64)


def _field(pos, ln, bits):
    """bfe/bfi's position and length as int64. The ISA restricts both to 0..255 and its
    pseudo-code takes them mod 256 (``pos = b & 0xff``): the 32-bit forms do so on an H100, the
    64-bit forms do not: a value >= 256 counts as what it is (>= 64: past the end), e.g.
    bfe.u64 of 0xffffffffffffffff at position 1, length 0x100 gives 0x7fffffffffffffff, not 0
    (H100, 2026-11-27 differential record; 864 bfe.u64/s64 and 512 bfi.b64 cases)."""
    if bits == 32:
        return (pos & 0xFF).astype(np.int64), (ln & 0xFF).astype(np.int64)
    return pos.astype(np.int64), ln.astype(np.int64)


def _imm(op):
    """An integer immediate's value, else None."""
    return op[1] if op[0] == "imm" and op[2] == "int" else None


# Bit fields that ptxas folds two ways. When ptxas knows a bfe/bfi field at compile time (an
# immediate), it lowers two forms in a way that departs from the ISA's pseudo-code, and whether it
# does depends on what else it can prove about the operands. Read from the SASS of ptxas 13.0 for
# sm_90, every position and length 0-255, and matching the H200 fuzz records:
#  * bfe.s32 with a position >= 32 and a length > 0 gives ~0 when `a` is a register (the ISA:
#    copies of a[31]), and the ISA's value when ptxas knows `a`;
#  * bfi.b32 with a position that is not a multiple of 8 (below 32) and a length >= 32 takes the
#    length mod 32 when `b` is a register (a mask built with a 32-bit shift), and the ISA's
#    clamped field when ptxas knows `b`; at a multiple of 8 ptxas uses a byte permute: the ISA.
# The interpreter cannot know what ptxas proves, so it refuses these forms by name. A field in
# registers loaded from memory follows the ISA (the H100 per-instruction record); one that ptxas
# can fold from constants behaves as the immediates above (a limit listed in the README).
def _refuse_folded_field(ins, base, bits):
    if bits != 32:
        return
    p_op, l_op = ins.operands[-2], ins.operands[-1]
    for o in (p_op, l_op):
        v = _imm(o)
        if v is not None and not 0 <= v <= 255:
            unsupported(ins, f"a bit-field immediate must lie in 0..255 (ptxas rejects {v})")
    pos, ln = _imm(p_op), _imm(l_op)
    if base == "bfe" and last_type(ins) == "s32" and pos is not None and pos >= 32 and ln != 0:
        unsupported(ins, f"an immediate position {pos} >= 32: the H100/H200 result depends on "
                    "what ptxas knows of the source (~0, or the ISA's copies of a[31]); pass the "
                    "position in a register, or extract with a position below 32")
    if (base == "bfi" and pos is not None and ln is not None and pos < 32 and pos % 8
            and ln >= 32):
        unsupported(ins, f"an immediate position {pos} (not a multiple of 8) with an immediate "
                    f"length {ln} >= 32: ptxas takes the length mod 32 or clamps it as the ISA "
                    "does, depending on what it knows of the destination's source b; give a "
                    f"length of at most {32 - pos}")


@handler("bfe")
def h_bfe(ins, dc):
    t = last_type(ins)
    bits = 8 * np.dtype(DT[t]).itemsize
    signed = t[0] == "s"
    u = UINT[bits // 8]
    _refuse_folded_field(ins, "bfe", bits)
    def f(a, pos, ln):
        pos, ln = _field(pos, ln, bits)
        x = a.view(u).astype(_U64)
        valid = np.clip(np.minimum(ln, bits - pos), 0, None)
        ext = (x >> np.minimum(pos, bits - 1).astype(_U64)) & _lowmask(valid)
        if signed:
            msb = np.minimum(pos + ln - 1, bits - 1)
            sbit = np.where(ln > 0, (x >> np.maximum(msb, 0).astype(_U64)) & _U64(1), _U64(0))
            ext = np.where(sbit == 1, ext | ~_lowmask(valid), ext)
        return (ext & _lowmask(bits)).astype(u).view(DT[t])
    return nary(ins, dc, t, f, 3, src_types=[t, "u32", "u32"])


@handler("bfi")
def h_bfi(ins, dc):
    t = last_type(ins)
    bits = 8 * np.dtype(DT[t]).itemsize
    u = UINT[bits // 8]
    _refuse_folded_field(ins, "bfi", bits)
    def f(a, b, pos, ln):
        pos, ln = _field(pos, ln, bits)
        av, bv = a.view(u).astype(_U64), b.view(u).astype(_U64)
        sh = np.minimum(pos, 63).astype(_U64)
        mask = (_lowmask(np.minimum(ln, bits)) << sh) & _lowmask(bits)
        r = (bv & ~mask) | ((av << sh) & mask)
        return np.where(pos >= bits, bv, r).astype(u).view(DT[t])
    return nary(ins, dc, t, f, 4, src_types=[t, t, "u32", "u32"])


_REV8 = np.array([int(f"{i:08b}"[::-1], 2) for i in range(256)], np.uint8)


def _unary_bits(ins, dc, fn, dst=None):
    t = last_type(ins)
    bits = 8 * np.dtype(DT[t]).itemsize
    u = UINT[bits // 8]
    dst = dst or t
    return nary(ins, dc, t, lambda a: fn(np.ascontiguousarray(a).view(u), bits).astype(
        UINT[np.dtype(DT[dst]).itemsize]).view(DT[dst]), 1, dst_t=dst)


@handler("popc")
def h_popc(ins, dc):
    return _unary_bits(ins, dc, lambda x, n: np.unpackbits(x.view(np.uint8).reshape(32, -1),
                                                           axis=1).sum(axis=1), "u32")


@handler("clz")
def h_clz(ins, dc):
    return _unary_bits(ins, dc, lambda x, n: n - _bitlength(x), "u32")


@handler("brev")
def h_brev(ins, dc):
    return _unary_bits(ins, dc, lambda x, n: _REV8[x.view(np.uint8).reshape(32, -1)[:, ::-1]]
                       .copy().view(x.dtype).ravel())


@handler("bfind")
def h_bfind(ins, dc):
    t = last_type(ins)
    shamt = "shiftamt" in mods(ins)

    def fb(x, n):
        x = x.astype(_U64)
        if t[0] == "s":
            neg = (x >> _U64(n - 1)) & _U64(1)
            x = np.where(neg == 1, ~x & _lowmask(n), x)
        p = _bitlength(x) - 1
        r = (n - 1 - p) if shamt else p
        return np.where(x == 0, 0xFFFFFFFF, r).astype(np.int64).astype(_U64)
    return _unary_bits(ins, dc, fb, "u32")
