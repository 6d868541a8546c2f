"""SASS evidence of the overlap (``python -m fraglab.fa3_pipelining sass``), computable without
a GPU: where the compiler put the softmax instructions relative to the wgmma in flight.

In SASS a ``wgmma.mma_async`` is an ``HGMMA``; the last one of a commit group carries the
scoreboard token ``gsb0``, and ``wgmma.wait_group N`` is ``WARPGROUP.DEPBAR.LE gsb0, N``. Walking
a consumer's instructions in address order with a counter of groups in flight (+1 at an HGMMA
with gsb0, down to N at a DEPBAR.LE N) tells, for every softmax instruction (``MUFU.EX2``,
``FMNMX``, ``FMUL``, ``FFMA``), whether a multiply of its own warpgroup is running beside it.
The same walk over the PTX (``wgmma.commit_group``, ``wgmma.wait_group N``, ``ex2``, ``max``,
``mul``, ``fma``) gives the source order; the difference is what ptxas moved.
"""
from __future__ import annotations

import re

from .. import sass, toolchain
from . import config

#: Softmax instruction kinds: SASS prefix, PTX prefix.
SOFTMAX = {"exp2": ("MUFU.EX2", "ex2."), "max": ("FMNMX", "max.f32"),
           "mul": ("FMUL", "mul.f32"), "fma": ("FFMA", "fma.rn.f32")}
_DEPBAR = re.compile(r"WARPGROUP\.DEPBAR\.LE\s+gsb0,\s*0x([0-9a-f]+)")
_PTX_WAIT = re.compile(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)")


def build(variant: str, arch: str = config.ARCH):
    return toolchain.compile(config.kernel_file(variant), arch)


def _kind(line: str, column: int) -> str | None:
    body = line.split(None, 1)[1] if line.startswith("@") and " " in line else line
    for name, pats in SOFTMAX.items():
        if body.startswith(pats[column]):
            return name
    return None


def timeline(variant: str, dtype: str = "f16", d: int = 128) -> list[dict]:
    """The consumer path of one kernel, in address order: one dict per instruction from the
    first ``WARPGROUP.ARRIVE`` to the last ``WARPGROUP.DEPBAR``: ``i`` (position), ``kind``
    (``hgmma``, ``wait``, ``exp2``, ``max``, ``mul``, ``fma`` or ``other``), ``in_flight``
    (commit groups of this warpgroup running beside it), ``text``."""
    return timeline_of(build(variant), config.kernel_name(variant, dtype, d))


def timeline_of(b, kernel: str) -> list[dict]:
    """:func:`timeline` of any build (the lab's) and kernel."""
    lines = sass.listing(b.sass(kernel))
    start = next(i for i, l in enumerate(lines) if l.startswith("WARPGROUP.ARRIVE"))
    end = max(i for i, l in enumerate(lines) if "WARPGROUP.DEPBAR" in l)
    out, flight = [], 0
    for i in range(start, end + 1):
        line = lines[i]
        body = line.split(None, 1)[1] if line.startswith("@") and " " in line else line
        m = _DEPBAR.search(line)
        if body.startswith("HGMMA"):
            kind = "hgmma"
            if "gsb0" in line:
                flight += 1
        elif m:
            kind = "wait"
            flight = min(flight, int(m.group(1), 16))
        else:
            kind = _kind(line, 0) or "other"
        out.append({"i": i - start, "kind": kind, "in_flight": flight, "text": line})
    return out


def ptx_timeline(variant: str, dtype: str = "f16", d: int = 128) -> list[dict]:
    """The same walk over the kernel's PTX: the order the source asked for."""
    return ptx_timeline_of(build(variant), config.kernel_name(variant, dtype, d))


def ptx_timeline_of(b, name: str) -> list[dict]:
    ptx = b.ptx
    start = ptx.index(f".entry {name}(")
    end = ptx.find(".entry ", start + 10)
    body = [l.strip() for l in ptx[start:end if end > 0 else None].splitlines()]
    body = [l for l in body if l and not l.startswith(("//", ".loc", ".reg", "{", "}"))]
    out, flight, started = [], 0, False
    for line in body:
        text = re.sub(r"^@!?%\w+\s+", "", line)
        if text.startswith("wgmma.fence"):
            started = True
        if not started:
            continue
        m = _PTX_WAIT.search(text)
        if text.startswith("wgmma.mma_async"):
            kind = "hgmma"
        elif text.startswith("wgmma.commit_group"):
            kind, flight = "commit", flight + 1
        elif m:
            kind, flight = "wait", min(flight, int(m.group(1)))
        else:
            kind = _kind(text, 1) or "other"
        out.append({"i": len(out), "kind": kind, "in_flight": flight, "text": text})
    return out


def overlap(tl: list[dict]) -> dict:
    """Per softmax kind: how many instructions, and how many run beside a wgmma in flight."""
    res = {"hgmma": sum(r["kind"] == "hgmma" for r in tl)}
    for k in SOFTMAX:
        rows = [r for r in tl if r["kind"] == k]
        res[k] = len(rows)
        res[f"{k}_beside_wgmma"] = sum(r["in_flight"] > 0 for r in rows)
    return res


def registers_touched(tl: list[dict]) -> int:
    """Highest general register the consumer path names, plus one: what it uses of the
    ``setmaxnreg.inc`` budget (ptxas reports only the cap at entry, 168)."""
    return 1 + max((int(x) for r in tl for x in re.findall(r"\bR(\d+)\b", r["text"])), default=-1)


def evidence(variant: str, dtype: str = "f16", d: int = 128) -> dict:
    """One row of the chapter's table: SASS and PTX overlap counts, the HMMA count (0 expected:
    every multiply is an HGMMA), the ptxas resources and its wgmma serialization notes."""
    b = build(variant)
    name = config.kernel_name(variant, dtype, d)
    tl = timeline_of(b, name)
    s, p = overlap(tl), overlap(ptx_timeline_of(b, name))
    res = b.resources[name]
    notes = ptxas_notes(b, name)
    ops = b.opcodes(name)
    return {"variant": variant, "dtype": dtype, "d": d, "key_tile": config.key_tile(variant, d),
            "registers": res["registers"], "consumer_registers": registers_touched(tl),
            "spill_bytes": res["spill_stores"] + res["spill_loads"],
            "stack_frame": res["stack_frame"], "ptxas_notes": notes,
            "hmma": ops.get("HMMA", 0), "hgmma": ops.get("HGMMA", 0),
            "sass": s, "ptx": p,
            "exp2_beside_wgmma_sass": s["exp2_beside_wgmma"] / max(s["exp2"], 1),
            "exp2_beside_wgmma_ptx": p["exp2_beside_wgmma"] / max(p["exp2"], 1)}


def ptxas_notes(b, name: str) -> list[str]:
    """ptxas's wgmma notes on kernel ``name`` (``C7512``: serialized for lack of registers,
    ``C7513``: serialized because other instructions write a wgmma's registers mid-stage, ...)."""
    return sorted(set(re.findall(r"\((C75\d\d)\)[^\n]*'" + re.escape(name) + "'", b.log)))


def all_evidence(dtypes=("f16",), dims=config.HEAD_DIMS) -> list[dict]:
    """:func:`evidence` of every variant, dtype and head dimension of ``dims`` it has kernels for."""
    return [evidence(v, t, d) for v in config.VARIANTS for t in dtypes for d in dims
            if d in config.head_dims(v)]


def table(rows: list[dict]) -> str:
    """A text table of :func:`all_evidence` (the CLI prints it; the chapter shows report tables)."""
    head = (f"{'variant':<11}{'d':>4}{'BC':>5}{'regs':>5}{'spill':>6}{'HGMMA':>6}{'HMMA':>5}"
            f"{'EX2 beside (SASS)':>19}{'(PTX)':>8}  ptxas")
    lines = [head]
    for r in rows:
        s, p = r["sass"], r["ptx"]
        lines.append(f"{r['variant']:<11}{r['d']:>4}{r['key_tile']:>5}{r['registers']:>5}"
                     f"{r['spill_bytes']:>6}{r['hgmma']:>6}{r['hmma']:>5}"
                     f"{s['exp2_beside_wgmma']:>9}/{s['exp2']:<9}{p['exp2_beside_wgmma']:>4}/{p['exp2']:<4}"
                     f"  {' '.join(r['ptxas_notes']) or '-'}")
    return "\n".join(lines)
