"""Data dependencies in a kernel's PTX, for checks that results cannot show.

A clock-timed region is right only if its clock reads *wait*: the first for every output of the
matrix product, the timed code for the first read, the second read for the timed code's results.
A wrong answer (a read that waits for one accumulator register only, an epilogue that does not
wait for ``t0``) computes the same numbers, on the interpreter as on a GPU, and its SASS may even
come out in the right order; its PTX dependencies do not.

The analysis is deliberately small: one kernel's straight-line PTX (NVRTC inlines and unrolls the
lab kernels), registers as values, a guarded forward branch making the instructions it skips
depend on its predicate (a read under ``if (dep ...)`` waits for ``dep``).
"""
from __future__ import annotations

import re

from ..ptx.parse import split_operands

_REG = re.compile(r"%[a-z]+\d+")
_LABEL = re.compile(r"^(\$?[\w$]+):")


def _body(ptx: str, kernel: str) -> list[str]:
    start = ptx.index(f".entry {kernel}(")
    open_at = ptx.index("{", ptx.index(")", start))
    depth, i = 0, open_at
    while True:
        if ptx[i] == "{":
            depth += 1
        elif ptx[i] == "}":
            depth -= 1
            if depth == 0:
                break
        i += 1
    text = re.sub(r"//[^\n]*", "", ptx[open_at + 1:i])
    out = []
    for stmt in re.split(r";|\n", text):
        s = stmt.strip()
        if not s or s.startswith("."):
            continue
        out.append(s)
    return out


class Instr:
    def __init__(self, text: str):
        self.text = text
        self.label = None
        m = _LABEL.match(text)
        if m:
            self.label = m.group(1)
            self.op, self.dst, self.src, self.guard = "label", [], [], None
            self.target, self.special = None, []
            return
        guard = None
        g = re.match(r"^@!?(%p\d+)\s+", text)
        if g:
            guard, text = g.group(1), text[g.end():]
        parts = text.split(None, 1)
        self.op = parts[0]
        rest = parts[1] if len(parts) > 1 else ""
        self.guard = guard
        self.target = rest.strip() if self.op.startswith("bra") else None
        ops = split_operands(rest)
        writes = not (self.op.startswith(("st.", "bra", "bar", "ret", "exit", "red.", "membar"))
                      or self.op.startswith("wmma.store"))
        if writes and ops:
            self.dst = _REG.findall(ops[0])
            self.src = [r for o in ops[1:] for r in _REG.findall(o)]
        else:
            self.dst, self.src = [], [r for o in ops for r in _REG.findall(o)]
        if guard:
            self.src.append(guard)
        self.special = re.findall(r"%clock64|%clock\b", rest)


def instructions(ptx: str, kernel: str) -> list[Instr]:
    """The kernel's instructions, each with the registers it writes and reads; an instruction
    skipped by a guarded forward branch also reads the branch's predicate."""
    ins = [Instr(t) for t in _body(ptx, kernel)]
    labels = {x.label: i for i, x in enumerate(ins) if x.label}
    for i, x in enumerate(ins):
        if x.op.startswith("bra") and x.guard and labels.get(x.target, -1) > i:
            for y in ins[i + 1:labels[x.target]]:
                y.src.append(x.guard)
    return ins


def backward(ins: list[Instr], at: int, regs) -> set[int]:
    """Indices of the instructions before ``at`` whose results ``regs`` (read at ``at``) depend on."""
    want, found = set(regs), set()
    for i in range(at - 1, -1, -1):
        x = ins[i]
        if want & set(x.dst):
            found.add(i)
            want |= set(x.src)
    return found


def forward_regs(ins: list[Instr], start: int, regs) -> set[str]:
    """Registers whose values depend on ``regs`` (written at ``start``) from there on."""
    tainted = set(regs)
    for x in ins[start + 1:]:
        if tainted & set(x.src):
            tainted |= set(x.dst)
    return tainted


def clock_problems(ptx: str, kernel: str) -> list[str]:
    """What is wrong with the dependencies of a kernel timed with two clock reads around an
    epilogue of shuffles after a matrix product (empty: the reads wait as they must)."""
    ins = instructions(ptx, kernel)
    clocks = [i for i, x in enumerate(ins) if x.special]
    mmas = [i for i, x in enumerate(ins) if x.op.startswith(("wmma.mma", "mma."))]
    if len(clocks) != 2:
        return [f"{len(clocks)} clock reads in the PTX; expected 2 (t0 and t1)"]
    if not mmas:
        return ["no matrix product (mma) in the PTX"]
    c0, c1 = clocks
    shfl = [i for i, x in enumerate(ins) if x.op.startswith("shfl") and c0 < i < c1]
    problems = []
    before0 = backward(ins, c0, ins[c0].src)
    last = max(m for m in mmas if m < c0) if any(m < c0 for m in mmas) else None
    if last is None:
        problems.append("the first clock read comes before the matrix product")
    else:
        used = {r for i in before0 for r in ins[i].src} | set(ins[c0].src)
        missing = [r for r in ins[last].dst if r not in used and not _reaches(ins, last, c0, r, before0)]
        if missing:
            problems.append(f"the first clock read waits for {len(ins[last].dst) - len(missing)} of the "
                            f"{len(ins[last].dst)} accumulator registers of the last mma only: make "
                            "it depend on all of them (t0 could be read before the product is done)")
    if not shfl:
        problems.append("no shuffle between the two clock reads: the epilogue is not timed")
    else:
        tainted = forward_regs(ins, c0, ins[c0].dst)
        late = [i for i in shfl if not (set(ins[i].src) & tainted)]
        if late:
            problems.append(f"{len(late)} of the {len(shfl)} shuffles of the epilogue do not wait "
                            "for t0: make the accumulator registers depend on t0 before the epilogue")
        before1 = backward(ins, c1, ins[c1].src)
        unwaited = [i for i in shfl if i not in before1]
        if unwaited:
            problems.append(f"the second clock read does not wait for {len(unwaited)} of the "
                            f"{len(shfl)} shuffles: make it depend on the epilogue's result")
    return problems


def _reaches(ins, last, c0, reg, before0) -> bool:
    """True when ``reg`` (written by instruction ``last``) is read by an instruction in the
    backward slice ``before0`` of the first clock read."""
    return any(reg in ins[i].src for i in before0 if i > last)
