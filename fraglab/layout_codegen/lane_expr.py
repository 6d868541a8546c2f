"""C++ expressions in ``lane`` for per-lane values of a plan: the line a register group holds, the
row and column of a register, the lanes that write. Step 3 of the package docstring."""
from __future__ import annotations

import numpy as np

from .plan import LinePlan


def affine(values) -> tuple[int, list[int]] | None:
    """(c, m) with values[l] == c ^ XOR of m[b] for the set bits b of l, or None."""
    v = np.asarray(values, dtype=np.int64)
    c = int(v[0])
    m = [int(v[1 << b]) ^ c for b in range(5)]
    for lane in range(32):
        x = c
        for b in range(5):
            if lane >> b & 1:
                x ^= m[b]
        if x != v[lane]:
            return None
    return c, m


def _bit_sliced(values) -> str:
    """Bit j of the value for lane l is bit l of the j-th 32-bit constant: constants stay in
    registers, unlike a table in memory."""
    v = [int(x) for x in values]
    terms = []
    for j in range(max(v).bit_length()):
        mask = sum(1 << lane for lane in range(32) if v[lane] >> j & 1)
        t = f"(({mask:#010x}u >> lane) & 1u)"
        terms.append(t if j == 0 else f"({t} << {j})")
    return "(int)(" + " | ".join(terms or ["0u"]) + ")"


def lane_expr(values) -> str:
    """A C++ expression in ``lane`` giving values[lane]: shifts and masks of the lane bits when
    the map is affine over GF(2); else bit-sliced 32-bit constants."""
    aff = affine(values)
    if aff is None:
        return _bit_sliced(values)
    c, m = aff
    terms, dests, b = [], [], 0
    while b < 5:
        if m[b] == 0:
            b += 1
            continue
        if m[b] & (m[b] - 1) == 0:            # a single destination bit: extend to a run
            d0, e = m[b].bit_length() - 1, b
            while e + 1 < 5 and m[e + 1] == m[b] << (e + 1 - b):
                e += 1
            width = e - b + 1
            field = f"(lane >> {b})" if b else "lane"
            if e < 4:                         # lane < 32: a run up to bit 4 needs no mask
                field = f"({field} & {(1 << width) - 1})"
            terms.append(field if d0 == 0 else f"({field} << {d0})")
            dests.append(((1 << width) - 1) << d0)
            b = e + 1
        else:                                 # a mixed bit: XOR a constant in
            terms.append(f"(((lane >> {b}) & 1) * {m[b]})")
            dests.append(m[b])
            b += 1
    if not terms:
        return str(c)
    used = 0
    disjoint = True
    for d in dests:
        disjoint &= not (used & d)
        used |= d
    if disjoint and not (used & c):
        # Bits that cannot collide: OR the fields and ADD the constant, which the compiler folds
        # into an address offset (rows[g + 8] is rows[g] plus 32 bytes).
        expr = terms[0] if len(terms) == 1 else "(" + " | ".join(terms) + ")"
        return expr if c == 0 else f"({expr} + {c})"
    return "(" + " ^ ".join(([str(c)] if c else []) + terms) + ")"


def leader_test(lp: LinePlan) -> str:
    """A C++ condition on ``lane``, true in exactly one lane holding each line."""
    if lp.is_bit_pattern:
        bits = 0
        for o in lp.offsets:
            bits |= o
        return "true" if bits == 0 else f"(lane & {bits:#x}) == 0"
    return f"(({lp.leaders:#010x}u >> lane) & 1u)"
