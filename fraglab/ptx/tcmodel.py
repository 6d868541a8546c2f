"""The tensor cores' arithmetic: D = A @ B + C as the H100 (sm_90) computes it, bit for bit.

A tensor core does not round an exact sum once. For floating-point inputs (f16, bf16, tf32) it
works on blocks of ``BLOCK`` products (16 for f16 and bf16, 8 for tf32) plus the accumulator, in
one fused multi-term addition (Khattak and Mikaitis, "Accurate Models of NVIDIA Tensor Cores",
arXiv 2512.07004, and its MATLAB model ``H100TC.m``; Fasi, Higham, Mikaitis and Pranesh,
"Numerical behavior of NVIDIA tensor cores", PeerJ CS 2021, for the same scheme on the V100 and
A100). One block, as :func:`block_fma` implements it:

1. Every product ``a_k * b_k`` is exact (at most 22 significant bits).
2. The exponents are compared *before* the products are normalised: a product's exponent is
   ``ea + eb``, the sum of the inputs' exponents (a subnormal input counts with the format's
   smallest exponent, its significand below 1), so its significand lies in [0, 4); the
   accumulator's exponent is its f32 exponent (f32 subnormals: -126; an f16 accumulator is
   widened to f32 first). E is the largest of them, zero terms left out.
3. Every term (the products and the accumulator) is *truncated* (toward zero) to a multiple of
   ``2^(E - 25)``: the adder keeps 23 fraction bits below E plus 2 extra alignment bits
   (``neab = 2``; the model's extra carry bit, granted when the largest product's significand
   reaches 2, comes to the same quantum measured from the unnormalised exponent).
4. The truncated terms are added exactly, and the sum is normalised once and rounded to the
   accumulator's format: toward zero (truncation) for an f32 accumulator, to nearest even for an
   f16 one. A result that is zero is +0, whatever the sign of the sum that cancelled, was
   truncated or rounded (underflowed) to it: the H200 gave +0 for all 96,070 such elements of
   ``difftest.hw``'s record (cancellation with an f16 accumulator, bf16/tf32 subnormal products
   below the f32 range, f16 subnormal products below the f16 range), never -0, where rounding the
   negative sum toward zero or to nearest gives -0 (``tests/data/tc_h200_zero_sign.npz``). A sum
   whose every term is a zero is +0 too, even when every term is -0, where IEEE would give -0:
   the second H200 run's ``zeros`` input class (rows of signed zeros, C = -0) had the GPU give +0
   in every differing element, against the interpreter's -0 then (book/data/
   appendix_ptx_interpreter/tensor_cores_h200_confirm.json).
   Truncation beyond the largest f32 gives infinity, as in the model.
5. Longer K (a wmma or mma whose K exceeds the block) is several blocks in turn, each
   rounded to the accumulator format and fed back as the next block's accumulator.

Infinities and NaNs bypass the block: the IEEE sum of the products and the accumulator, NaN
written as the canonical 0x7FFFFFFF (f32) or 0x7FFF (f16) as for the hardware's other
arithmetic (:mod:`.nan`).

The model reproduces, bit for bit, all 40,000 test vectors the authors published for the H100
and the H200 (fp16 -> fp32 and fp16, bf16 -> fp32, tf32 -> fp32; :func:`.difftest.tc.published`),
and every neighbouring variant (:data:`NEIGHBOURS`) fails on hundreds of them; the GPU run
(``python -m fraglab.ptx.difftest.hw``) scores them all again on the instructions themselves.
fp8 (e4m3/e5m2, a different alignment in the published model) is not modelled: the interpreter
refuses fp8 mma.

Integer inputs are exact (int64), f64 inputs (DMMA) are rounded once. :data:`MODEL` selects
``"h100"`` (the default) or ``"exact"`` (the interpreter's former model: the exact sum rounded
once to nearest), for tests that compare the two (:func:`model`).
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from .exact import round_pair

#: products per fused block, per input type (H100TC.m: fma = 16; tf32: 8)
BLOCK = {"f16": 16, "bf16": 16, "tf32": 8}
#: extra alignment bits below the f32 significand (H100TC.m: neab = 2)
EXTRA_BITS = 2
#: smallest normal exponent of each input format (a subnormal's exponent is taken as this)
EMIN = {"f16": -14, "bf16": -126, "tf32": -126}
_NONE = -100000                      # the exponent of a zero term (never the largest)
_TWO128 = 2.0 ** 128
#: a float64 NaN that NumPy narrows to 0x7FFFFFFF (f32) and 0x7FFF (f16): the canonical NaNs
NAN = np.array(0x7FFFFFFFE0000000, np.uint64).view(np.float64)

MODEL = "h100"


@dataclass(frozen=True)
class Variant:
    """The model's parameters, so that a differential run can score neighbouring models too:
    ``block`` (products per fused block; 0: :data:`BLOCK`), ``extra`` (alignment bits below the
    f32 significand), ``f32_round`` ("rz" truncation or "rn"), ``unnormalised`` (compare the
    products' exponents before normalising them, the published model's carry bit)."""
    block: int = 0
    extra: int = EXTRA_BITS
    f32_round: str = "rz"
    unnormalised: bool = True


H100 = Variant()
#: neighbours of the H100 model that a differential run scores against the hardware
NEIGHBOURS = {"h100": H100, "extra1": Variant(extra=1), "extra3": Variant(extra=3),
              "normalised": Variant(unnormalised=False), "round_nearest": Variant(f32_round="rn"),
              "half_block": Variant(block=-1)}


@contextmanager
def model(name: str):
    """Run the tensor-core instructions under another model ("h100" or "exact") for a while."""
    global MODEL
    if name not in ("h100", "exact"):
        raise ValueError(name)
    old, MODEL = MODEL, name
    try:
        yield
    finally:
        MODEL = old


def exponents(x, emin: int) -> np.ndarray:
    """floor(log2 |x|) of finite nonzero x, at least ``emin`` (subnormals); _NONE for zeros."""
    _, e = np.frexp(np.abs(x))
    return np.where(x != 0, np.maximum(e.astype(np.int64) - 1, emin), _NONE)


def _round_out(v, ctype: str, mode: str = "rz") -> np.ndarray:
    """The block's exact sum (float64) -> the accumulator format, as a float64 value."""
    if ctype == "f16":
        with np.errstate(over="ignore"):
            return v.astype(np.float16).astype(np.float64)          # NumPy rounds to nearest even
    with np.errstate(over="ignore"):
        r = round_pair(v, np.zeros_like(v), np.float32, mode).astype(np.float64)
    if mode == "rn":
        return r
    return np.where(np.abs(v) >= _TWO128, np.copysign(np.inf, v), r)


def block_fma(A, B, C, itype: str, ctype: str, var: Variant = H100) -> np.ndarray:
    """One fused block: A (..., M, k), B (..., k, N), C (..., M, N) float64 holding values of
    ``itype`` / ``ctype``, k <= BLOCK[itype] -> D (..., M, N) float64 holding values of ``ctype``."""
    A, B, C = (np.asarray(x, np.float64) for x in (A, B, C))
    if var == H100 and ctype in ("f32", "f16"):
        return _block_h100(A, B, C, itype, ctype)
    return _block_general(A, B, C, itype, ctype, var)


def _block_general(A, B, C, itype, ctype, var):
    """:func:`block_fma` for any :class:`Variant`: the model step by step, as the module states it."""
    Bt = np.swapaxes(B, -1, -2)                               # (..., N, k)
    P = A[..., :, None, :] * Bt[..., None, :, :]              # (..., M, N, k), exact
    ea, eb = exponents(A, EMIN[itype]), exponents(Bt, EMIN[itype])
    ep = ea[..., :, None, :] + eb[..., None, :, :]            # ea + eb: significand in [0, 4)
    if not var.unnormalised:                                  # the product's own exponent
        ep = ep + (np.abs(P) >= np.ldexp(2.0, ep))
    ep = np.where(P != 0, ep, _NONE)
    ec = np.where(C != 0, exponents(C.astype(np.float32).astype(np.float64), -126), _NONE)
    pmax = ep.max(axis=-1, initial=_NONE)
    E = np.maximum(pmax, ec)
    qe = np.where(E > _NONE // 2, E - 23 - var.extra, 0)
    with np.errstate(all="ignore"):
        terms = np.trunc(np.ldexp(P, -qe[..., None]))            # multiples of 2^qe, truncated
        s = terms.sum(axis=-1) + np.trunc(np.ldexp(C, -qe))       # |s| < 2^33: exact
        out = _round_out(np.ldexp(s, qe), ctype, var.f32_round)
        # a zero result is +0, a sum of zeros too, -0 + -0 included (H200 bits, both runs)
        out = np.where(out == 0, 0.0, out)
        bad = ~(np.isfinite(A).all(axis=-1)[..., :, None] & np.isfinite(Bt).all(axis=-1)[..., None, :]
                & np.isfinite(C))
        if bad.any():                                              # infinities and NaNs: IEEE
            ieee = np.sum(P, axis=-1) + C
            out = np.where(bad, np.where(np.isnan(ieee), NAN, ieee), out)
    return out


# ---- the same block, H100 parameters, in fewer NumPy calls --------------------------------------
# :func:`block_fma` runs once per mma instruction the interpreter executes, on arrays of a few
# hundred elements, where each NumPy call costs more than its arithmetic. This path computes the
# same bits with about half the calls: exponents read from the float64 bit patterns through a
# table, the scales 2^-qe and 2^qe from tables (a multiplication by a power of two is as exact as
# ldexp, and rounds the same where it is not), and the final truncation to f32 as a mask on the
# float64 significand where no result can leave the f32 normal range (else :func:`_round_out`).

_LOW = -1000                         # E below this is a block of zero terms (E <= _NONE + 127)


def _exp_table(emin: int) -> np.ndarray:
    """float64 biased exponent field -> :func:`exponents` (0: a zero; 2047: inf/NaN, unused)."""
    t = np.maximum(np.arange(2048) - 1023, emin).astype(np.int32)
    t[0], t[2047] = _NONE, -1
    return t


_ETAB = {e: _exp_table(e) for e in set(EMIN.values()) | {-126}}
_E = np.arange(_LOW, 2 * 1024 + 64)                               # every E a block can have
_QE = np.where(_E > _LOW, _E - 23 - EXTRA_BITS, 0)
with np.errstate(over="ignore"):                     # (an E no block of these formats has)
    _DOWN, _UP = np.ldexp(1.0, -_QE), np.ldexp(1.0, _QE)          # 2^-qe, 2^qe (exact)
#: no nonzero result leaves the f32 normal range: a quantum >= 2^-126, and |sum| < (k + 1) * 2^27
#: quanta < 2^40 (k < 8000 products; a block has 16) below 2^128
_SAFE = (_E == _LOW) | ((_QE >= -126) & (_QE + 40 <= 128))
_MASK24 = np.uint64(~((1 << 29) - 1) & 0xFFFFFFFFFFFFFFFF)        # keep 24 significant bits


def _exps(x, table):
    return table[(x.view(np.int64) >> 52) & 0x7FF]


def _block_h100(A, B, C, itype, ctype):
    """:func:`block_fma` for :data:`H100`, the same bits (inputs hold values of their formats).
    Products are laid out (..., k, M, N), so that the maximum and the sum over k are k - 1
    element-wise operations on (M, N) planes; the sum of the truncated terms (integers below
    2^32 in any order) is exact whatever its order."""
    At = np.ascontiguousarray(np.swapaxes(A, -1, -2))         # (..., k, M)
    with np.errstate(all="ignore"):
        P = At[..., :, :, None] * B[..., :, None, :]          # (..., k, M, N)
        tab = _ETAB[EMIN[itype]]
        ep = _exps(At, tab)[..., :, :, None] + _exps(B, tab)[..., :, None, :]
        # a zero product's ea + eb (one of them _NONE) is below every real one: no where needed
        E = np.maximum(np.maximum.reduce(ep, axis=-3, initial=_NONE),
                       _exps(C.astype(np.float32).astype(np.float64), _ETAB[-126]))
        i = np.maximum(E, _LOW) - _LOW
        down = _DOWN[i]
        P *= down[..., None, :, :]
        s = np.add.reduce(np.trunc(P, out=P), axis=-3) + np.trunc(C * down)
        if not math.isfinite(s.sum()):                   # infinities and NaNs (|s| < 2^32)
            return _block_general(A, B, C, itype, ctype, H100)
        v = s * _UP[i]
        if ctype == "f16":
            out = v.astype(np.float16).astype(np.float64)
        elif _SAFE[i].all():
            out = (v.view(np.uint64) & _MASK24).view(np.float64)
        else:
            out = _round_out(v, ctype, "rz")
        return out + 0.0                                  # -0 -> +0, as block_fma


def matmul(A, B, C, itype: str, ctype: str, var: Variant | None = None) -> np.ndarray:
    """D = A @ B + C of one tensor-core instruction (float64 in, float64 values of ``ctype``,
    the type of D, out; integers: int64), under :data:`MODEL` (or the given variant)."""
    if itype not in BLOCK or ctype not in ("f32", "f16") or (MODEL == "exact" and var is None):
        return A @ B + C
    var = var or H100
    blk = BLOCK[itype] if var.block == 0 else (BLOCK[itype] // 2 if var.block < 0 else var.block)
    K = A.shape[-1]
    D = np.asarray(C, np.float64)
    if K <= blk and var is H100 and A.dtype == B.dtype == np.float64:     # one block (the usual)
        return _block_h100(A, B, D, itype, ctype)
    for k0 in range(0, max(K, 1), blk):
        D = block_fma(A[..., k0:k0 + blk], B[..., k0:k0 + blk, :], D, itype, ctype, var)
    return D
