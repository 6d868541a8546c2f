"""Rung 10's tuning switches judged on the CPU: shared-memory banks of every access, lane by lane,
and the SASS of the main loop (words per FFMA, ``.reuse`` flags, register banks, the FFMAs that
follow the barrier), per configuration.

The switches themselves (``REGDB``, ``SWIZZLE``, ``ORDER``) are defines of
``kernels/07_register_reuse_split_k.cu`` (:data:`kernels.SWITCHES`); whether one pays is for the
H100 sweep (``python -m fraglab.register_reuse sweep-shapes``) to say. What is computed here
needs no GPU and no profiler:

* **banks** (:func:`bank_report`): the 4-byte words each lane of a warp touches in one shared
  load or store, from the same index arithmetic as the kernel (``ALayout``, ``Float4Tile``,
  ``WarpTile``); a warp's access takes as many wavefronts as the most distinct words one of the
  32 banks holds (bank = word mod 32; lanes reading one word share it), the ideal being the
  distinct words over 32. Every warp of the block and every load of the tile is counted.
* **SASS** (:func:`sass_evidence`): in the main loop (:func:`fraglab.sass.main_loop`), FFMAs,
  shared loads and their words, the source operands of FFMAs flagged ``.reuse`` (the operand
  reuse cache keeps that register for the next instruction's same slot) and the operands read
  from the register file; of those, the FFMAs whose register-file operands share a bank. Which
  bank a register is in on Hopper is not documented: we count both the 4-bank rule (reg mod 4,
  Maxwell/Pascal) and the 2-bank rule Jia et al. measured on Volta (reg mod 2;
  https://arxiv.org/abs/1804.06826); a conflict costs an issue cycle in either.
"""
from __future__ import annotations

import re

from .. import sass
from . import kernels

# --------------------------------------------------------------------------------------------
# shared-memory banks, from the kernel's index arithmetic
# --------------------------------------------------------------------------------------------

BANKS = 32


def xor_of(t: dict, k: int) -> int:
    """``ALayout::xor_of``: the XOR applied to the row offsets of row k of the A tile (floats)."""
    return ((k // 4) * (32 // t["BK"]) % 8) * 4 if t.get("SWIZZLE") else 0


def a_index(t: dict, k: int, m: int) -> int:
    """Float offset of A[m, k] of the staged tile (k-major): ``k * LDA + (m ^ xor_of(k))``."""
    return k * kernels.lda(t) + (m ^ xor_of(t, k))


def wavefronts(words_per_lane: list[list[int]]) -> tuple[int, int]:
    """(wavefronts, ideal) of one warp access: each lane's words (a float4: 4 words). A bank
    serves one distinct word per wavefront; lanes asking for the same word share it."""
    words = {w for ws in words_per_lane for w in ws}
    per_bank: dict[int, int] = {}
    for w in words:
        per_bank[w % BANKS] = per_bank.get(w % BANKS, 0) + 1
    return max(per_bank.values()), -(-len(words) // BANKS)


def _accesses(t: dict):
    """Every warp access of one step, as (kind, [words of each lane]): the A tile's STS.32
    (transposed; one per float component), the B tile's STS.128, and per k the A and B LDS.128
    of every warp."""
    n = kernels.threads("split_k", t)
    bm, bn, bk = t["BM"], t["BN"], t["BK"]
    lda = kernels.lda(t)
    b0 = bk * lda                                # Bs follows As
    loads_a, loads_b = bm * bk // 4 // n, bk * bn // 4 // n
    for w in range(n // 32):
        lanes = range(32 * w, 32 * w + 32)
        for i in range(loads_a):
            for c in range(4):
                yield "A store (STS.32)", [[a_index(t, (f % (bk // 4)) * 4 + c, f // (bk // 4))]
                                           for f in (x + i * n for x in lanes)]
        for i in range(loads_b):
            yield "B store (STS.128)", [[b0 + (f // (bn // 4)) * bn + (f % (bn // 4)) * 4 + e
                                         for e in range(4)] for f in (x + i * n for x in lanes)]
        lm, wm, wn = t["LM"], t["WM"], t["WN"]
        ln = 32 // lm
        wm0, wn0 = w // (bn // wn) * wm, w % (bn // wn) * wn
        for k in range(bk):
            for i in range(wm // (lm * 4)):
                yield "A load (LDS.128)", [[a_index(t, k, wm0 + (ln_ // ln) * 4 + i * lm * 4) + e
                                            for e in range(4)] for ln_ in range(32)]
            for j in range(wn // (ln * 4)):
                yield "B load (LDS.128)", [[b0 + k * bn + wn0 + (ln_ % ln) * 4 + j * ln * 4 + e
                                            for e in range(4)] for ln_ in range(32)]


def bank_report(t: dict) -> dict:
    """Per kind of shared access in one step of a block: accesses, wavefronts, ideal wavefronts,
    the worst access's conflict degree. Also checks the layout is a bijection of the tile into
    LDA x BK floats (no two elements of A share a word) and keeps float4s whole."""
    t = kernels.tiles("split_k", **t)
    cells = {a_index(t, k, m) for k in range(t["BK"]) for m in range(t["BM"])}
    if len(cells) != t["BM"] * t["BK"] or max(cells) >= t["BK"] * kernels.lda(t):
        raise AssertionError(f"the A layout of {t} maps two elements to one word")
    out: dict[str, dict] = {}
    for kind, lanes in _accesses(t):
        wf, ideal = wavefronts(lanes)
        r = out.setdefault(kind, {"accesses": 0, "wavefronts": 0, "ideal": 0, "worst": 1})
        r["accesses"] += 1
        r["wavefronts"] += wf
        r["ideal"] += ideal
        r["worst"] = max(r["worst"], wf // ideal)
    return out


# --------------------------------------------------------------------------------------------
# the main loop's SASS
# --------------------------------------------------------------------------------------------

_REG = re.compile(r"^-?\|?(R\d+)(\.reuse)?")


def _ffma_sources(line: str) -> list[tuple[str, bool]]:
    """(register, reuse flag) of an FFMA's three source operands (RZ and immediates: none)."""
    ops = [o.strip() for o in line.split(None, 1)[1].rstrip(" ;").split(",")]
    out = []
    for slot, o in enumerate(ops[1:4]):
        m = _REG.match(o)
        out.append((m.group(1), bool(m.group(2))) if m else (None, False))
    return out


def register_reads(body: list[str]) -> dict:
    """Over the loop's FFMAs: source operands, those flagged ``.reuse``, those served by the
    reuse cache (the previous instruction flagged the same register in the same slot), those
    read from the register file, and FFMAs whose register-file reads collide in a bank under
    the 4-bank and the 2-bank rule (module docstring)."""
    c = {"ffma": 0, "operands": 0, "reuse_flags": 0, "from_cache": 0, "from_file": 0,
         "conflicts_mod4": 0, "conflicts_mod2": 0}
    cache: list = [None, None, None]
    for line in body:
        text = line.split(None, 1)[1] if line.startswith("@") else line
        if sass.base_opcode(text) != "FFMA":
            cache = [None, None, None]
            continue
        c["ffma"] += 1
        srcs = _ffma_sources(text)
        fetched = set()
        for slot, (reg, flag) in enumerate(srcs):
            if reg is None:
                continue
            c["operands"] += 1
            c["reuse_flags"] += flag
            if cache[slot] == reg:
                c["from_cache"] += 1
            else:
                fetched.add(reg)
        c["from_file"] += len(fetched)
        nums = [int(r[1:]) for r in fetched]
        c["conflicts_mod4"] += len({x % 4 for x in nums}) < len(nums)
        c["conflicts_mod2"] += len(nums) == 3 and len({x % 2 for x in nums}) == 1
        cache = [reg if flag else None for reg, flag in srcs]
    return c


def after_barrier(body: list[str]) -> int:
    """FFMAs between the loop's last barrier and its back edge: with REGDB the last k's FFMAs
    (which hide the next stage's first fragment loads), else none."""
    last = max((i for i, x in enumerate(body) if sass.base_opcode(x) == "BAR"), default=None)
    return 0 if last is None else sum(sass.base_opcode(x) == "FFMA" for x in body[last:])


def sass_evidence(t: dict, arch: str = "sm_90") -> dict:
    """For rung 10 compiled with tiles ``t``: registers, spills, and the main loop's FFMAs,
    shared loads (by width), words per FFMA, register reads (:func:`register_reads`), FFMAs
    after the barrier (:func:`after_barrier`), instructions."""
    from .sass_counts import counts   # the ladder's LDS/FFMA counter, shared with the chapter
    t = kernels.tiles("split_k", **t)
    b = kernels.build("split_k", arch, **kernels.defines(t))
    body = sass.main_loop(b.sass("sgemm_split_k"))
    c = counts(body)
    res = b.resources["sgemm_split_k"]
    widths: dict[str, int] = {}
    for x in body:
        if sass.base_opcode(x) == "LDS":
            op = (x.split()[1] if x.startswith("@") else x.split()[0])
            widths[op] = widths.get(op, 0) + 1
    return {"label": kernels.config_label(t), "tiles": t, "registers": res["registers"],
            "spill_bytes": res["spill_stores"] + res["spill_loads"],
            "stack_frame": res["stack_frame"], "instructions": c["instructions"],
            "ffma": c["ffma"], "lds": widths, "words_per_ffma": c["lds_words"] / max(1, c["ffma"]),
            "sts": c["sts"], "ffma_after_barrier": after_barrier(body), **register_reads(body)}


# --------------------------------------------------------------------------------------------
# which switches the sweep tries on a configuration
# --------------------------------------------------------------------------------------------

#: Switch settings the sweep tries on a base configuration (:func:`switch_variants` keeps those
#: that apply): register double buffering, the row-snake FFMA order (the most ``.reuse`` flags
#: in the SASS), both; the swizzled A tile, alone and with both, where the padded one has bank
#: conflicts; the 8x16 thread tile (lanes 8 x 4 instead of 4 x 8: same words per FFMA, the
#: A reads spread over 8 float4s and the B reads over 4).
TRIALS = ({"REGDB": 1}, {"ORDER": 1}, {"REGDB": 1, "ORDER": 1}, {"SWIZZLE": 1},
          {"SWIZZLE": 1, "REGDB": 1, "ORDER": 1}, {"LM": 8})

_CONFLICTS: dict = {}


def padded_conflicts(t: dict) -> bool:
    """Whether the padded A layout of tiles ``t`` has bank conflicts (:func:`bank_report`)."""
    key = tuple(sorted(kernels.defines({**t, "SWIZZLE": 0, "GUARD": 0, "GROUP": 1}).items()))
    if key not in _CONFLICTS:
        rep = bank_report({**t, "SWIZZLE": 0})
        _CONFLICTS[key] = any(r["wavefronts"] > r["ideal"] for r in rep.values())
    return _CONFLICTS[key]


def switch_variants(t: dict, trials=TRIALS) -> list[dict]:
    """``t`` with each of ``trials`` on top, checked by :func:`kernels.tiles` (a trial the tiles
    cannot take is left out; SWIZZLE only where the padded layout has bank conflicts)."""
    out = []
    for trial in trials:
        if trial.get("SWIZZLE") and not padded_conflicts(t):
            continue
        try:
            v = kernels.tiles("split_k", **{**t, **trial})
        except ValueError:
            continue
        if v != t and v not in out:
            out.append(v)
    return out


def table(rows: list[dict]) -> str:
    """A text table of :func:`sass_evidence` rows (with :func:`bank_report`'s excess wavefronts
    of the A store where the row has them)."""
    head = (f"{'configuration':<36} {'regs':>4} {'spill':>5} {'FFMA':>5} {'LDS.128':>7} "
            f"{'w/FFMA':>6} {'reuse':>5} {'cache':>5} {'file':>5} {'bank4':>5} {'bank2':>5} "
            f"{'after BAR':>9} {'A STS wf':>9}")
    lines = [head]
    for r in rows:
        a = r.get("banks", {}).get("A store (STS.32)")
        lines.append(f"{r['label']:<36} {r['registers']:>4} {r['spill_bytes']:>5} {r['ffma']:>5} "
                     f"{r['lds'].get('LDS.128', 0):>7} {r['words_per_ffma']:>6.4f} "
                     f"{r['reuse_flags']:>5} {r['from_cache']:>5} {r['from_file']:>5} "
                     f"{r['conflicts_mod4']:>5} {r['conflicts_mod2']:>5} "
                     f"{r['ffma_after_barrier']:>9} "
                     + (f"{a['wavefronts']:>4}/{a['ideal']:<4}" if a else f"{'-':>9}"))
    return "\n".join(lines)


def evidence(bases=None, arch: str = "sm_90") -> list[dict]:
    """:func:`sass_evidence` and :func:`bank_report` of each base configuration (default: the
    table's two big tiles) and of its :func:`switch_variants`, all trials."""
    bases = bases or [c for c in kernels.SHAPE_CONFIGS if c["WM"] == c["WN"] == 64][:2]
    rows = []
    for base in bases:
        t = kernels.tiles("split_k", **{**kernels.TILES["split_k"], **base})
        for v in [t, *switch_variants(t, [*TRIALS, {"ORDER": 2}, {"ORDER": 3}])]:
            rows.append({**sass_evidence(v, arch), "banks": bank_report(v)})
    return rows
