"""Instruction classes of a SASS listing, for the whole kernel and for its main loop, and what a
change removed or added per class.

The classes are :data:`fraglab.sass.CLASSES` (``sass.classify``) with two refinements the diet
needs (:data:`REFINED`): conversions (``F2FP`` packs two floats into f16x2/bf16x2, ``F2F``, ``I2F``,
``F2I``) get their own class instead of ``float``/``other``, and ``CS2R`` (which the seed's kernel
10 removes: it zeroes register pairs) counts as a ``move``. :data:`ORDER` is the order of tables.

The main loop is found from its back edge (:func:`fraglab.sass.loop_spans`:
each backward ``BRA`` closes a loop): of the loops, the one with the most ``HMMA``; of equal ones
the shortest (the FA-2 kernels have two sweeps with the same HMMAs, the unmasked one and the
masked one; the unmasked one is the loop that runs for almost every tile).
"""
from __future__ import annotations

import re
from collections import Counter

from .. import report, sass

#: Opcodes (base names) whose class is refined; everything else is ``sass.classify``'s.
REFINED = {"VIADD": "integer", "F2FP": "conversion", "F2F": "conversion", "I2F": "conversion",
           "F2I": "conversion",
           "I2FP": "conversion", "F2IP": "conversion", "CS2R": "move"}

#: Order of the classes in tables.
ORDER = ("tensor", "shared", "global", "integer", "move", "float", "conversion", "shuffle",
         "barrier", "control", "special", "local", "other")


def opcode_of(line: str) -> str:
    """The full opcode of a :func:`fraglab.sass.listing` line (``@!P0 LDSM.16.M88.4 R4, [R9]`` ->
    ``LDSM.16.M88.4``); ``{`` of dual-issue pairs and predicates are skipped."""
    parts = line.replace("{", " ").split()
    while parts and parts[0].startswith("@"):
        parts = parts[1:]
    return parts[0] if parts else ""


def classify(opcode: str) -> str:
    """The diet's class of an opcode: :data:`REFINED`, else :func:`fraglab.sass.classify`."""
    return REFINED.get(opcode.split(".")[0]) or sass.classify(opcode)


def count(lines) -> dict[str, int]:
    """Instructions per class (every class of :data:`ORDER`, zeros included) over listing lines."""
    c = Counter(classify(opcode_of(line)) for line in lines)
    return {k: c.get(k, 0) for k in ORDER}


def main_loop(sass_text: str, opcode: str = "HMMA") -> list[str]:
    """The listing lines of the main loop (see the module's docstring); ``[]`` without a loop."""
    lines = sass.listing(sass_text, padding=True)
    best, key = [], None
    for first, last in sass.loop_spans(sass_text):
        body = lines[first:last + 1]
        k = (sum(opcode_of(t).split(".")[0] == opcode for t in body), -len(body))
        if key is None or k > key:
            best, key = body, k
    return best


_RZ_C = re.compile(r"^HMMA\S*\s+\S+,\s*\S+,\s*\S+,\s*RZ\b")


def hmma_rz(lines) -> int:
    """HMMAs whose accumulator input (C operand) is ``RZ``: an accumulator started at zero without
    a CS2R or MOV to clear it (what the seed's kernel 10 did by hand)."""
    return sum(bool(_RZ_C.match(line.split(" ", 1)[1] if line.startswith("@") else line))
               for line in lines)


def counts(sass_text: str) -> dict:
    """Class counts of the whole kernel (``kernel``) and of its main loop (``loop``), with the
    instruction totals, the HMMA share of the loop and HMMAs started from RZ in it."""
    whole = sass.listing(sass_text)
    loop = main_loop(sass_text)
    lc = count(loop)
    return {"kernel": count(whole), "loop": lc, "kernel_instructions": len(whole),
            "loop_instructions": len(loop),
            "hmma_share": lc["tensor"] / len(loop) if loop else 0.0,
            "loop_hmma_rz": hmma_rz(loop)}


def diff(before: dict[str, int], after: dict[str, int]) -> list[dict]:
    """Per class of :data:`ORDER` (and any other class present): before, after and the change
    (negative: removed). A ``total`` row last."""
    names = [k for k in ORDER if k in before or k in after]
    names += sorted((set(before) | set(after)) - set(names))
    rows = [{"class": k, "before": before.get(k, 0), "after": after.get(k, 0),
             "change": after.get(k, 0) - before.get(k, 0)} for k in names]
    rows.append({"class": "total", "before": sum(before.values()), "after": sum(after.values()),
                 "change": sum(after.values()) - sum(before.values())})
    return rows


def _signed(x: int) -> str:
    return f"{x:+d}" if x else "0"


def diff_table(before: dict, after: dict, caption: str = "", names=("before", "after")):
    """:func:`diff` as an HTML table (:func:`fraglab.report.table`); classes unchanged at zero
    on both sides are left out."""
    rows = [{"class": r["class"], names[0]: r["before"], names[1]: r["after"],
             "removed (-) / added (+)": _signed(r["change"])}
            for r in diff(before, after) if r["before"] or r["after"]]
    return report.table(rows, caption=caption)


# --------------------------------------------------------------------------------------------
# The ladder's kernels
# --------------------------------------------------------------------------------------------

def variant_counts(variant: str, dtype: str = "f16", d: int = 128, arch: str = "sm_90") -> dict:
    """:func:`counts` of one variant's kernel, with its registers and spills (ptxas). The row
    names the variant under the key ``step``, as the committed H100 record's ``sass`` rows do."""
    from . import kernels
    b = kernels.build(variant, arch)
    name = kernels.kernel_name(variant, dtype, d)
    res = b.resources[name]
    return {"step": variant, "dtype": dtype, "d": d, "arch": arch, **counts(b.sass(name)),
            "registers": res["registers"], "spill_bytes": res["spill_stores"] + res["spill_loads"]}


def ladder(dtype: str = "f16", d: int = 128, arch: str = "sm_90") -> list[dict]:
    """:func:`variant_counts` of every variant, in order."""
    from .kernels import VARIANTS
    return [variant_counts(v, dtype, d, arch) for v in VARIANTS]


def ladder_table(rows: list[dict], scope: str = "loop", caption: str = ""):
    """One row per variant: the total of ``scope`` (``loop`` or ``kernel``), the HMMA share
    (loop), registers and spills; then, stacked below (one table would be wider than the
    column), the class counts."""
    out = []
    for r in rows:
        c = r[scope]
        row = {"step": r["step"], "total": r[f"{scope}_instructions"]}
        if scope == "loop":
            row["HMMA share"] = f"{r['hmma_share']:.0%}"
        row.update(regs=r["registers"], spills=r["spill_bytes"])
        row.update({k: c[k] for k in ORDER if any(x[scope][k] for x in rows)})
        out.append(row)
    head = list(out[0]) if out else ["step"]
    whole = report.Table(head, [list(r.values()) for r in out], caption, wrap_header=True,
                         check=False)
    return whole.split(at=[head.index("spills") + 1] if "spills" in head else ())


def text_table(rows: list[dict], scope: str = "loop") -> str:
    """The same as plain text (the command line's ``classes``)."""
    cols = [k for k in ORDER if any(r[scope][k] for r in rows)]
    head = f"{'step':<16}" + "".join(f"{k[:7]:>8}" for k in cols) + f"{'total':>7}{'regs':>6}{'spill':>6}"
    lines = [head]
    for r in rows:
        lines.append(f"{r['step']:<16}" + "".join(f"{r[scope][k]:>8}" for k in cols)
                     + f"{r[scope + '_instructions']:>7}{r['registers']:>6}{r['spill_bytes']:>6}")
    return "\n".join(lines)


def seed_evidence(dtype: str = "f16", d: int = 128, arch: str = "sm_90") -> list[dict]:
    """Why the seed's kernels 9 and 10 do not apply, from the first step's main loop: moves
    (copies between fragments), conversions (one F2FP per pair of P), CS2R, HMMAs from RZ."""
    from . import kernels
    b = kernels.build("fa2", arch)
    text = b.sass(kernels.kernel_name("fa2", dtype, d))
    loop = main_loop(text)
    ops = [opcode_of(t) for t in loop]
    c = count(loop)
    n_p = (32 if d else 0) // 2     # 16 rows x 64 keys of P per warp = 32 floats a lane: 16 pairs
    return [
        {"seed step": "9: redundant fragment copies", "evidence": "moves in the main loop",
         "count": c["move"], "of": f"{c['tensor']} HMMA"},
        {"seed step": "9: P to the A operand", "evidence": "F2FP (packs of P) in the main loop",
         "count": sum(o.startswith("F2FP") for o in ops), "of": f"{n_p} pairs of P a lane"},
        {"seed step": "10: no CS2R", "evidence": "CS2R in the main loop",
         "count": sum(o.startswith("CS2R") for o in ops), "of": f"{len(loop)} instructions"},
        {"seed step": "10: RZ as the C operand", "evidence": "HMMAs with C = RZ in the main loop",
         "count": hmma_rz(loop), "of": "8 accumulators of S"},
    ]
