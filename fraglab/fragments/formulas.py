"""Formulas in the bits of two integers: :class:`BitFormula` (integer weights on bits, the paper's
equations), :class:`XorFormula` (XOR of bits, as swizzles are), and the maps made of two of them,
:class:`Mapping` ``(lane, i) -> (row, col)`` and :class:`InverseMapping` ``(row, col) -> (lane, i)``
(what :mod:`.fit` finds for a layout).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LANE_BITS = 5
#: Register-index bits the kernel's coefficient table has room for (num_elements <= 16).
REG_BITS = 4


class NotAffine(ValueError):
    """The table is neither an integer-weighted sum nor an XOR of lane and register bits."""


@dataclass(frozen=True)
class BitFormula:
    """``value = const + sum_b a[b]*bit_b(x) + sum_b c[b]*bit_b(y)`` with integer weights.

    ``x``/``y`` are two named integer variables (``lane`` and ``i`` for a forward map, ``row`` and
    ``col`` for an inverse one), with ``xbits``/``ybits`` bits each.
    """
    const: int
    a: tuple[int, ...]
    c: tuple[int, ...]
    xname: str = "lane"
    yname: str = "i"

    def __call__(self, x, y):
        x, y = np.asarray(x, dtype=np.int64), np.asarray(y, dtype=np.int64)
        v = np.full(np.broadcast(x, y).shape, self.const, dtype=np.int64)
        for b, w in enumerate(self.a):
            v = v + w * ((x >> b) & 1)
        for b, w in enumerate(self.c):
            v = v + w * ((y >> b) & 1)
        return v

    # -- text ---------------------------------------------------------------------------------
    @staticmethod
    def _runs(weights) -> list[tuple[int, int, int]]:
        """(weight of the lowest bit, lo, hi): maximal runs whose weights double bit by bit, so
        each run is one bit field ``(v >> lo) & mask`` times a coefficient."""
        runs, b = [], 0
        while b < len(weights):
            if weights[b] == 0:
                b += 1
                continue
            lo = hi = b
            while hi + 1 < len(weights) and weights[hi + 1] == 2 * weights[hi]:
                hi += 1
            runs.append((weights[lo], lo, hi))
            b = hi + 1
        return runs

    @staticmethod
    def _field(name: str, lo: int, hi: int, nbits: int, slash: bool) -> tuple[str, bool]:
        """Text of bits lo..hi of ``name`` and whether it is a single token."""
        width = hi - lo + 1
        top = hi == nbits - 1
        if lo == 0 and top:
            return name, True
        if lo == 0:
            return f"{name}%{1 << width}", False
        if top:
            return (f"{name}/{1 << lo}", False) if slash else (f"{name}>>{lo}", False)
        return f"({name}>>{lo})&{(1 << width) - 1}", False

    def terms(self) -> list[str]:
        out = []
        for name, weights, slash in ((self.xname, self.a, True),
                                     (self.yname, self.c, self.yname != "i")):
            nbits = len(weights)
            for w, lo, hi in self._runs(weights):
                f, token = self._field(name, lo, hi, nbits, slash)
                if abs(w) == 1:
                    t = f if (token or "/" in f) else f"({f})"
                else:
                    t = f"{abs(w)}*" + (f if token else f"({f})")
                out.append(("-" if w < 0 else "+", t))
        if self.const:
            out.append(("-" if self.const < 0 else "+", str(abs(self.const))))
        return out

    def text(self) -> str:
        """Readable C-like text, e.g. ``2*(lane%4) + (i%2) + 8*(i>>2)``."""
        terms = self.terms()
        if not terms:
            return "0"
        s = ("-" if terms[0][0] == "-" else "") + terms[0][1]
        for sign, t in terms[1:]:
            s += f" {sign} {t}"
        return s

    def cuda(self) -> str:
        """A CUDA expression of ``lane`` and ``i`` (shifts and masks only)."""
        parts = [str(self.const)]
        for name, weights in ((self.xname, self.a), (self.yname, self.c)):
            for w, lo, hi in self._runs(weights):
                parts.append(f"{w} * (({name} >> {lo}) & {(1 << (hi - lo + 1)) - 1})")
        return "(" + " + ".join(parts) + ")"


@dataclass(frozen=True)
class XorFormula:
    """``bit_j(value) = k_j XOR parity(x & xmask_j) XOR parity(y & ymask_j)`` for each bit j."""
    bits: tuple[tuple[int, int, int], ...]       # (k_j, xmask_j, ymask_j) for j = 0, 1, ...
    xname: str = "lane"
    yname: str = "i"

    def __call__(self, x, y):
        x, y = np.asarray(x, dtype=np.int64), np.asarray(y, dtype=np.int64)
        v = np.zeros(np.broadcast(x, y).shape, dtype=np.int64)
        for j, (k, xm, ym) in enumerate(self.bits):
            v |= (k ^ _parity(x & xm) ^ _parity(y & ym)) << j
        return v

    def text(self) -> str:
        parts = []
        for j, (k, xm, ym) in enumerate(self.bits):
            src = [f"{self.xname}.{b}" for b in range(LANE_BITS + 3) if xm >> b & 1]
            src += [f"{self.yname}.{b}" for b in range(8) if ym >> b & 1]
            src += ["1"] if k else []
            parts.append(f"bit{j} = " + (" ^ ".join(src) if src else "0"))
        return "; ".join(parts)


def _parity(v):
    v = np.asarray(v, dtype=np.int64)
    p = np.zeros_like(v)
    while np.any(v):
        p ^= v & 1
        v = v >> 1
    return p


@dataclass(frozen=True)
class Mapping:
    """A fitted forward map: ``(lane, i) -> (row, col)`` of a fragment kind."""
    row: BitFormula | XorFormula
    col: BitFormula | XorFormula
    shape: tuple[int, int]
    num_elements: int
    model: str = "affine"                       # "affine" (integer weights) or "xor"

    def __call__(self, lane, i):
        return self.row(lane, i), self.col(lane, i)

    def table(self) -> np.ndarray:
        """The (32, num_elements, 2) layout the formula describes."""
        lane, i = np.meshgrid(np.arange(32), np.arange(self.num_elements), indexing="ij")
        return np.stack(self(lane, i), axis=-1)

    def text(self) -> str:
        if self.model == "xor":
            return f"row: {self.row.text()}\ncol: {self.col.text()}"
        return f"row = {self.row.text()}\ncol = {self.col.text()}"

    def coefficients(self) -> np.ndarray:
        """int32 (2, 1 + 5 + REG_BITS): per coordinate, the constant, 5 lane-bit weights and
        REG_BITS register-bit weights: what the fitted store kernel reads."""
        if self.model != "affine":
            raise NotAffine("only an affine formula has integer weights for the kernel")
        out = np.zeros((2, 1 + LANE_BITS + REG_BITS), dtype=np.int32)
        for j, f in enumerate((self.row, self.col)):
            if len(f.c) > REG_BITS:
                raise ValueError(f"the kernel takes at most {REG_BITS} register bits")
            out[j, 0] = f.const
            out[j, 1:1 + len(f.a)] = f.a
            out[j, 1 + LANE_BITS:1 + LANE_BITS + len(f.c)] = f.c
        return out


@dataclass(frozen=True)
class InverseMapping:
    lane: BitFormula
    reg: BitFormula
    shape: tuple[int, int]

    def __call__(self, row, col):
        return self.lane(row, col), self.reg(row, col)

    def text(self) -> str:
        return f"lane = {self.lane.text()}\ni    = {self.reg.text()}"
