"""Live registers at every program point of a kernel, from its SASS or its PTX: the course's
small liveness tool.

A register is *live* at a point when the value it holds may still be read later. The tool does
what a compiler's register allocator does first:

1. **parse** each instruction into the registers it defines and the ones it uses
   (:func:`parse_sass`, :func:`parse_ptx`). Wide operands count every 32-bit register they
   touch: ``R4`` of ``IMAD.WIDE``, ``LDG.E.64``, ``[R2.64]`` are pairs (R4, R5), ``LDSM...4``
   and ``STS.128`` write or read four, an ``HMMA.16816.F32`` reads A as four, B as two and C as
   four; a PTX ``%rd`` (64-bit) counts two. ``RZ``, ``PT`` and uniform registers (``UR``) are
   not counted; predicates (``P0``, ``%p1``) are, but apart (``predicates=True``).
2. build the **control-flow graph** at the level of instructions: the next one, and the label a
   branch names (``BRA``/``bra``); an unconditional branch or ``EXIT``/``ret`` has no
   fall-through; a loop's branch back to its head is a back edge like any other;
3. solve the **backward dataflow** equations to a fixed point::

       live_out(i) = union of live_in(s) over the successors s of i
       live_in(i)  = uses(i) | (live_out(i) - defs(i))

   A guarded definition (``@P0 MOV R2, ...``) may not happen, so it kills nothing.

:func:`live_counts` returns the number of 32-bit registers live *into* each instruction; its
maximum is a lower bound on the registers the code needs without spilling. Sets are Python
ints used as bit sets (bit r for R<r>; PTX names are numbered in order of appearance).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..ptx.parse import split_operands

#: Bit sets hold 32-bit registers in bits 0 .. PRED_SHIFT - 1 and predicates above.
PRED_SHIFT = 1 << 15
PRED_BASE = 1 << PRED_SHIFT


@dataclass
class Instr:
    """One instruction: its text, the registers it defines and uses (as bit sets), whether a
    guard predicate makes it conditional, where it may branch, and whether it ends the path."""
    text: str
    op: str
    defs: int = 0
    uses: int = 0
    guarded: bool = False
    target: str | None = None
    stops: bool = False          # unconditional branch or exit: no fall-through
    label: str | None = None     # the label right before it, if any
    names: dict = field(default_factory=dict, repr=False)


# ------------------------------------------------------------------------------------------------
# Splitting a line
# ------------------------------------------------------------------------------------------------

def _clean(line: str) -> str:
    line = re.sub(r"/\*.*?\*/", " ", line.split("//")[0])
    return line.strip().strip("{}").strip().rstrip(";").strip()


def _lines(text: str, comment: str):
    """(label or None, instruction text) pairs; directives and blank lines dropped."""
    label = None
    for raw in text.splitlines():
        line = _clean(raw)
        if not line:
            continue
        if line.endswith(":") and " " not in line:
            label = line[:-1]
            continue
        if line.startswith(".") or line.startswith(comment):
            continue
        yield label, line
        label = None


def _guard(line: str):
    m = re.match(r"@(!?)(\S+)\s+(.*)", line)
    return (m.group(2), m.group(3)) if m else (None, line)


# ------------------------------------------------------------------------------------------------
# SASS
# ------------------------------------------------------------------------------------------------

_SASS_REG = re.compile(r"(?<![\w.])(R\d+|P\d)(\.64)?")
_NO_DEF = ("ST", "STG", "STS", "STL", "RED", "BRA", "BAR", "EXIT", "LDGSTS", "LDGDEPBAR",
           "DEPBAR", "MEMBAR", "WARPSYNC", "BSSY", "BSYNC", "NOP", "CALL", "RET", "ERRBAR",
           "CCTL", "FENCE", "YIELD", "STSM")
#: Opcodes whose first two operands are results (SHFL Pd, Rd; ISETP Pd, Pq; VOTE Rd, Pd).
_TWO_DEFS = ("SHFL", "ISETP", "FSETP", "DSETP", "HSETP2", "PLOP3", "VOTE")


def _hmma_widths(op: str) -> list[int]:
    """(D, A, B, C) widths of an HMMA: 16816 -> A 4, B 2; 1688 -> A 2, B 1; F32 -> C, D 4."""
    acc = 4 if ".F32" in op else 2
    a, b = (4, 2) if ".16816" in op else (2, 1)
    return [acc, a, b, acc]


def _sass_widths(op: str, n: int) -> list[int]:
    """The number of 32-bit registers each of the ``n`` operands spans (address operands are
    handled where they are read: ``[R2.64]`` is a pair)."""
    base = op.split(".")[0]
    w = [1] * n
    size = re.search(r"\.(64|128)(?:\.|$)", op)
    data = {"64": 2, "128": 4}[size.group(1)] if size else 1
    if base in ("LDG", "LDS", "LDL", "LD", "LDC", "ATOM", "ATOMS", "ATOMG"):
        w[0] = data
    elif base in ("STG", "STS", "STL", "ST") and n > 1:
        w[1] = data
    elif base == "LDSM":
        w[0] = 4 if op.endswith(".4") else 2 if op.endswith(".2") else 1
    elif base == "HMMA":
        w[:4] = _hmma_widths(op)
    elif base == "IMAD" and ".WIDE" in op:
        w[0] = 2
        if n > 3:
            w[3] = 2
    elif base == "CS2R" and ".32" not in op:
        w[0] = 2
    elif base in ("DADD", "DMUL", "DFMA", "DSETP", "DMNMX"):
        w = [2] * n
    return w[:n]


def _regs_of(text: str, width: int) -> list[str]:
    """Register names an operand touches: ``R4`` x width, ``[R2.64+0x10]`` -> R2, R3."""
    out = []
    for m in _SASS_REG.finditer(text):
        name, wide = m.group(1), m.group(2)
        if name[0] == "P":
            out.append(name)
            continue
        r = int(name[1:])
        k = 2 if wide else (1 if "[" in text else width)
        out += [f"R{r + i}" for i in range(k)]
    return out


def _bit(name: str) -> int:
    return (1 << int(name[1:])) if name[0] == "R" else (PRED_BASE << int(name[1:]))


def parse_sass(text: str) -> list[Instr]:
    """Instructions of an nvdisasm listing (one kernel) or a hand-written one
    (``LABEL:`` lines, ``@P0 BRA LABEL``, ``;`` optional)."""
    out = []
    for label, line in _lines(text, "//"):
        guard, body = _guard(line)
        op, _, rest = body.partition(" ")
        ops = split_operands(rest)
        widths = _sass_widths(op, len(ops))
        base = op.split(".")[0]
        ins = Instr(line, op, guarded=guard is not None, label=label)
        if guard and re.fullmatch(r"P\d", guard.lstrip("!")):
            ins.uses |= _bit(guard.lstrip("!"))
        n_defs = 0 if base in _NO_DEF else 2 if base in _TWO_DEFS else 1
        for i, (o, wd) in enumerate(zip(ops, widths)):
            bits = 0
            for r in _regs_of(o, wd):
                bits |= _bit(r)
            carry = base in ("IADD3", "LEA", "IMAD") and i in (1, 2) and re.fullmatch(r"P\d", o)
            if (i < n_defs and "[" not in o) or carry:
                ins.defs |= bits
            else:
                ins.uses |= bits
        if base in ("BRA", "JMP"):
            m = re.search(r"`?\(?([.\w$]+)\)?`?\s*$", rest.strip())
            ins.target = m.group(1) if m else None
            ins.stops = not ins.guarded
        if base in ("EXIT", "RET", "BRX", "KILL"):
            ins.stops = not ins.guarded
        out.append(ins)
    return out


# ------------------------------------------------------------------------------------------------
# PTX
# ------------------------------------------------------------------------------------------------

_PTX_REG = re.compile(r"%(rd|fd|r|f|rs|h|hh|p|b)(\d+)\b")
_PTX_NO_DEF = ("st", "bar", "bra", "ret", "exit", "red", "membar", "fence", "cp", "stmatrix",
               "barrier", "prefetch", "trap", "wgmma", "griddepcontrol")


def parse_ptx(text: str) -> list[Instr]:
    """Instructions of a PTX function body: virtual registers, so the live counts are the demand
    before register allocation. ``%rd``/``%fd`` count two 32-bit registers; ``%p`` is a predicate."""
    out, names = [], {}
    for label, line in _lines(text, "//"):
        guard, body = _guard(line)
        op, _, rest = body.partition(" ")
        if op.startswith("$") or op in ("{", "}"):
            continue
        base = op.split(".")[0]
        ops = split_operands(rest)
        ins = Instr(line, op, guarded=guard is not None, label=label, names=names)
        if guard:
            ins.uses |= _ptx_bits(guard.lstrip("!"), names)
        for i, o in enumerate(ops):
            bits = _ptx_bits(o, names)
            if i == 0 and base not in _PTX_NO_DEF and not o.startswith("["):
                ins.defs |= bits
            else:
                ins.uses |= bits
        if base == "bra":
            ins.target = ops[-1].strip() if ops else None
            ins.stops = not ins.guarded
        if base in ("ret", "exit", "trap"):
            ins.stops = not ins.guarded
        out.append(ins)
    return out


def _ptx_bits(text: str, names: dict) -> int:
    bits = 0
    for kind, num in _PTX_REG.findall(text):
        key = f"%{kind}{num}"
        if kind == "p":
            bits |= PRED_BASE << names.setdefault(key, len([k for k in names if k.startswith("%p")]))
            continue
        for half in range(2 if kind in ("rd", "fd") else 1):
            idx = names.setdefault(f"{key}/{half}", len(names))
            bits |= 1 << idx
    return bits


# ------------------------------------------------------------------------------------------------
# The dataflow
# ------------------------------------------------------------------------------------------------

def successors(instrs: list[Instr]) -> list[list[int]]:
    """Per instruction, the indices that may run next (fall-through and branch target)."""
    where = {ins.label: i for i, ins in enumerate(instrs) if ins.label}
    succ = []
    for i, ins in enumerate(instrs):
        s = [] if ins.stops or i + 1 >= len(instrs) else [i + 1]
        if ins.target is not None:
            if ins.target not in where:
                raise ValueError(f"instruction {i} ({ins.text!r}) branches to unknown label "
                                 f"{ins.target!r}; labels: {sorted(where)[:10]}")
            s.append(where[ins.target])
        succ.append(s)
    return succ


def live_sets(instrs: list[Instr]) -> tuple[list[int], list[int]]:
    """``(live_in, live_out)`` bit sets per instruction, solved to a fixed point (backward, in
    reverse order, until nothing changes: a loop needs a second pass to carry values around its
    back edge)."""
    succ = successors(instrs)
    n = len(instrs)
    live_in, live_out = [0] * n, [0] * n
    kill = [0 if ins.guarded else ins.defs for ins in instrs]
    changed = True
    while changed:
        changed = False
        for i in range(n - 1, -1, -1):
            out = 0
            for s in succ[i]:
                out |= live_in[s]
            new_in = instrs[i].uses | (out & ~kill[i])
            if out != live_out[i] or new_in != live_in[i]:
                live_out[i], live_in[i] = out, new_in
                changed = True
    return live_in, live_out


def count(bits: int, predicates: bool = False) -> int:
    """Registers in a bit set: 32-bit registers, or (``predicates=True``) predicates."""
    regs, preds = bits & (PRED_BASE - 1), bits >> PRED_SHIFT
    return bin(preds).count("1") if predicates else bin(regs).count("1")


def live_counts(instrs: list[Instr], predicates: bool = False) -> list[int]:
    """Registers live into each instruction (32-bit registers, or predicates)."""
    live_in, _ = live_sets(instrs)
    return [count(b, predicates) for b in live_in]


def parse(text: str) -> list[Instr]:
    """:func:`parse_ptx` if the text looks like PTX (``%`` registers), else :func:`parse_sass`."""
    return parse_ptx(text) if re.search(r"%(r|rd|f|p)\d", text) else parse_sass(text)


def ptx_function(ptx: str, kernel: str) -> str:
    """The body of one ``.entry`` of a PTX module."""
    start = ptx.find(f".entry {kernel}(")
    if start < 0:
        raise KeyError(f"no .entry {kernel} in the PTX")
    body = ptx.index("{", ptx.index(")", start))
    depth, i = 0, body
    while True:
        depth += {"{": 1, "}": -1}.get(ptx[i], 0)
        if depth == 0:
            return ptx[body + 1:i]
        i += 1
