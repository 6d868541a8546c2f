"""Shared loads per FFMA, read from the SASS of each rung's main loop, beside the napkin.

The main loop is found from its back edge: a ``BRA`` to a label at a lower address closes a loop
``[label, BRA]``; of those, the one with the most FFMAs is the k loop (with the inner loops over
a staged tile fully unrolled, that is the loop over K tiles). In it we count shared loads (LDS,
LDS.64, LDS.128: instructions and the 4-byte words they move) and FFMAs, and compare the words
per FFMA with the napkin arithmetic of each rung (:func:`napkin`).

Registers and spills come from the ptxas report (``build.resources``), and the theoretical
occupancy on sm_90 from registers, shared memory and threads (:func:`occupancy`).

:func:`loop_spans` and :func:`main_loop` are generic (any listing); they belong in
:mod:`fraglab.sass` and live here until that module takes them.
"""
from __future__ import annotations

import re
from fractions import Fraction

from .. import sass
from . import kernels

_ADDR = re.compile(r"/\*([0-9a-f]{4,})\*/")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_TARGET = re.compile(r"`\((\.L_x_\d+)\)")


def _addressed(sass_text: str) -> tuple[list[tuple[int, str]], dict[str, int]]:
    """(address, instruction text) of every instruction, and the address of every label."""
    lines: list[tuple[int, str]] = []
    labels: dict[str, int] = {}
    pending: list[str] = []
    for raw in sass_text.splitlines():
        m = _LABEL.match(raw)
        if m:
            pending.append(m.group(1))
            continue
        m = _ADDR.search(raw)
        if m and ";" in raw:
            addr = int(m.group(1), 16)
            for name in pending:
                labels[name] = addr
            pending = []
            lines.append((addr, raw.split("*/", 1)[1].split(";")[0].strip()))
    return lines, labels


def loop_spans(sass_text: str) -> list[tuple[int, int]]:
    """Loops of a kernel's listing as ``(first, last)`` indices into :func:`fraglab.sass.listing`
    order: each backward ``BRA`` (target address below the branch) closes one."""
    lines, labels = _addressed(sass_text)
    index = {addr: i for i, (addr, _) in enumerate(lines)}
    spans = []
    for i, (addr, text) in enumerate(lines):
        if sass.base_opcode(text) != "BRA":
            continue
        m = _TARGET.search(text)
        if m and m.group(1) in labels and labels[m.group(1)] < addr:
            spans.append((index[labels[m.group(1)]], i))
    return spans


def main_loop(sass_text: str, opcode: str = "FFMA") -> list[str]:
    """The instructions (text, as :func:`fraglab.sass.listing`) of the loop with the most
    ``opcode`` instructions; ``[]`` when the kernel has no loop."""
    lines, _ = _addressed(sass_text)
    best: list[str] = []
    for first, last in loop_spans(sass_text):
        body = [text for _, text in lines[first:last + 1]]
        if sum(sass.base_opcode(t) == opcode for t in body) > \
                sum(sass.base_opcode(t) == opcode for t in best):
            best = body
    return best


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


def napkin(kernel: str, t: dict | None = None) -> Fraction | None:
    """Shared words per FFMA by hand, for one thread and one staged k: 2 for ``smem`` (one A,
    one B per FFMA), (TM + 1) / TM for ``tile1d``, (TM + TN) / (TM * TN) for the 2D and warp
    tiles. None for rungs 1-2 (no shared memory: 2 GLOBAL loads per FFMA)."""
    t = kernels.TILES[kernel] if t is None else t
    if kernel in ("naive", "coalesced"):
        return None
    if kernel == "smem":
        return Fraction(2)
    if kernel == "tile1d":
        return Fraction(t["TM"] + 1, t["TM"])
    if kernel in ("tile2d", "vectorized"):
        return Fraction(t["TM"] + t["TN"], t["TM"] * t["TN"])
    lane_m = t["WM"] // (t["LM"] * 4) * 4
    lane_n = t["WN"] // (32 // t["LM"] * 4) * 4
    return Fraction(lane_m + lane_n, lane_m * lane_n)


# --------------------------------------------------------------------------------------------
# Occupancy (sm_90)
# --------------------------------------------------------------------------------------------

#: sm_90 limits per SM: registers, shared memory (bytes, 1 KB of it reserved per block),
#: threads and blocks; registers are allocated per warp in units of 256.
SM90 = dict(registers=65536, smem=228 * 1024, smem_reserved_per_block=1024, threads=2048,
            blocks=32, reg_unit=256, smem_unit=128)


def occupancy(registers: int, smem_bytes: int, block_threads: int, limits: dict = SM90) -> dict:
    """Resident blocks per SM and the theoretical occupancy (resident warps / 64), with the
    limit that binds (``registers``, ``shared``, ``threads`` or ``blocks``)."""
    warps = -(-block_threads // 32)
    regs_per_warp = -(-registers * 32 // limits["reg_unit"]) * limits["reg_unit"]
    smem = -(-(smem_bytes + limits["smem_reserved_per_block"]) // limits["smem_unit"]) \
        * limits["smem_unit"]
    by = {"registers": limits["registers"] // (regs_per_warp * warps) if registers else 10**9,
          "shared": limits["smem"] // smem,
          "threads": limits["threads"] // (warps * 32),
          "blocks": limits["blocks"]}
    blocks = min(by.values())
    max_warps = limits["threads"] // 32
    return {"blocks_per_sm": blocks, "warps_per_sm": blocks * warps,
            "occupancy": blocks * warps / max_warps,
            "limited_by": min(by, key=lambda k: (by[k], k != "registers"))}


def report(kernel: str, arch: str = "sm_90", **overrides) -> dict:
    """Everything above for one rung: main-loop counts, LDS per FFMA (instructions and words)
    beside the napkin, registers, spills, shared memory, occupancy."""
    t = kernels.tiles(kernel, **overrides)
    b = kernels.build(kernel, arch, **overrides)
    name = f"sgemm_{kernel}"
    c = counts(main_loop(b.sass(name)))
    res = b.resources[name]
    smem = kernels.shared_bytes(kernel, t)
    nap = napkin(kernel, t)
    ffma = c["ffma"] or None
    return {
        "kernel": kernel, "arch": arch, "tiles": t, "loop": c,
        "lds_per_ffma": c["lds"] / ffma if ffma else None,
        "words_per_ffma": c["lds_words"] / ffma if ffma else None,
        "ldg_per_ffma": c["ldg"] / ffma if ffma else None,
        "napkin_words_per_ffma": float(nap) if nap is not None else None,
        "napkin": str(nap) if nap is not None else "2 global loads per FFMA",
        "registers": res["registers"], "spill_bytes": res["spill_stores"] + res["spill_loads"],
        "stack_frame": res["stack_frame"], "smem_bytes": smem,
        "threads": kernels.threads(kernel, t),
        **occupancy(res["registers"], smem, kernels.threads(kernel, t)),
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
