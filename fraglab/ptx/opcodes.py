"""Which opcodes a PTX text uses, and which of them the interpreter can run."""
from __future__ import annotations

from collections import Counter

from .parse import parse


def opcodes(ptx_text: str) -> Counter:
    """Counter of full opcodes (with modifiers) over every kernel of a PTX module."""
    mod = parse(ptx_text)
    return Counter(ins.opcode for k in mod.kernels.values() for ins in k.instrs)


def supported(ptx_text: str) -> bool:
    return not unsupported_opcodes(ptx_text)


def unsupported_opcodes(ptx_text: str) -> dict:
    """{opcode: reason} for the instructions of a PTX module the interpreter cannot run
    (decoding every kernel; an empty dict when all are supported)."""
    from .program import Program
    prog = Program(ptx_text)
    out = {}
    for k in prog.kernels:
        for op in prog.info(k).code:
            why = getattr(op.fn, "unsupported", None)
            if why:
                out.setdefault(op.instr.opcode, why)
    return out
