"""Shared loads per FFMA, read from the SASS of each rung's main loop, beside the napkin.

The main loop is found from its back edge: a ``BRA`` to a label at a lower address closes a loop
``[label, BRA]``; of those, the one with the most FFMAs is the k loop (with the inner loops over
a staged tile fully unrolled, that is the loop over K tiles). In it we count shared loads (LDS,
LDS.64, LDS.128: instructions and the 4-byte words they move) and FFMAs, and compare the words
per FFMA with the napkin arithmetic of each rung (:func:`napkin`).

Registers and spills come from the ptxas report (``build.resources``), and the theoretical
occupancy on sm_90 from registers, shared memory and threads. The loops
(:func:`fraglab.sass.loop_spans`, :func:`fraglab.sass.main_loop`) and the occupancy
(:func:`fraglab.sass.occupancy`) are generic and live in :mod:`fraglab.sass`.
"""
from __future__ import annotations

from fractions import Fraction

from .. import sass
from . import kernels

def _width_words(text: str) -> int:
    """4-byte words one thread moves with a load/store instruction (LDS.128 -> 4, LDS.64 -> 2)."""
    op = text.split()[1] if text.startswith("@") else text.split()[0]
    for bits, words in (("128", 4), ("64", 2), ("U8", 0.25), ("S8", 0.25), ("U16", 0.5), ("S16", 0.5)):
        if f".{bits}" in op:
            return words
    return 1


def counts(body: list[str]) -> dict:
    """Counts over a loop body: FFMA, shared loads (instructions, words), global loads,
    shared stores, barriers, local memory."""
    c = {"ffma": 0, "lds": 0, "lds_words": 0, "lds128": 0, "ldg": 0, "sts": 0, "bar": 0,
         "local": 0, "instructions": len(body)}
    for text in body:
        op = sass.base_opcode(text)
        if op == "FFMA":
            c["ffma"] += 1
        elif op == "LDS":
            c["lds"] += 1
            c["lds_words"] += _width_words(text)
            c["lds128"] += ".128" in text.split()[1 if text.startswith("@") else 0]
        elif op == "LDG":
            c["ldg"] += 1
        elif op == "STS":
            c["sts"] += 1
        elif op == "BAR":
            c["bar"] += 1
        elif op in ("LDL", "STL"):
            c["local"] += 1
    return c


def napkin(variant: str, t: dict | None = None) -> Fraction | None:
    """Shared words per FFMA by hand, for one thread and one staged k: 2 for ``smem`` (one A,
    one B per FFMA), (TM + 1) / TM for ``tile1d``, (TM + TN) / (TM * TN) for the 2D and warp
    tiles. None for rungs 1-2 (no shared memory: 2 GLOBAL loads per FFMA)."""
    t = kernels.TILES[variant] if t is None else t
    if variant in ("naive", "coalesced"):
        return None
    if variant == "smem":
        return Fraction(2)
    if variant == "tile1d":
        return Fraction(t["TM"] + 1, t["TM"])
    if variant in ("tile2d", "vectorized"):
        return Fraction(t["TM"] + t["TN"], t["TM"] * t["TN"])
    lane_m = t["WM"] // (t["LM"] * 4) * 4
    lane_n = t["WN"] // (32 // t["LM"] * 4) * 4
    return Fraction(lane_m + lane_n, lane_m * lane_n)


def report(variant: str, arch: str = "sm_90", **overrides) -> dict:
    """Everything above for one rung: main-loop counts, LDS per FFMA (instructions and words)
    beside the napkin, registers, spills, shared memory, occupancy."""
    t = kernels.tiles(variant, **overrides)
    b = kernels.build(variant, arch, **overrides)
    name = f"sgemm_{variant}"
    c = counts(sass.main_loop(b.sass(name)))
    res = b.resources[name]
    smem = kernels.shared_bytes(variant, t)
    nap = napkin(variant, t)
    ffma = c["ffma"] or None
    return {
        "kernel": variant, "arch": arch, "tiles": t, "loop": c,
        "lds_per_ffma": c["lds"] / ffma if ffma else None,
        "words_per_ffma": c["lds_words"] / ffma if ffma else None,
        "ldg_per_ffma": c["ldg"] / ffma if ffma else None,
        "napkin_words_per_ffma": float(nap) if nap is not None else None,
        "napkin": str(nap) if nap is not None else "2 global loads per FFMA",
        "registers": res["registers"], "spill_bytes": res["spill_stores"] + res["spill_loads"],
        "stack_frame": res["stack_frame"], "smem_bytes": smem,
        "threads": kernels.threads(variant, t),
        **sass.occupancy(res["registers"], smem, kernels.threads(variant, t)),
    }


def table(rows: list[dict]) -> str:
    """A text table of :func:`report` rows."""
    head = (f"{'rung':<14} {'FFMA':>5} {'LDS':>4} {'LDS/FFMA':>8} {'words/FFMA':>10} "
            f"{'napkin':>7} {'regs':>4} {'spill':>5} {'occ.':>5}")
    lines = [head]
    for r in rows:
        lpf = f"{r['lds_per_ffma']:.3f}" if r["lds_per_ffma"] is not None else "-"
        wpf = f"{r['words_per_ffma']:.3f}" if r["words_per_ffma"] is not None else "-"
        nap = r["napkin"] if r["napkin_words_per_ffma"] is not None else "(global)"
        lines.append(f"{r['kernel']:<14} {r['loop']['ffma']:>5} {r['loop']['lds']:>4} {lpf:>8} "
                     f"{wpf:>10} {nap:>7} {r['registers']:>4} {r['spill_bytes']:>5} "
                     f"{r['occupancy']:>5.0%}")
    return "\n".join(lines)
