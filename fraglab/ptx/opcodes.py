"""Which opcodes a PTX text uses, and which of them the interpreter can run."""
from __future__ import annotations

import re
from collections import Counter

from .parse import parse


def opcodes(ptx) -> Counter:
    """Counter of full opcodes (with modifiers) over every kernel of a PTX module: its text, or
    a :class:`~fraglab.ptx.program.Program` already made of it (no second parse)."""
    mod = ptx.module if hasattr(ptx, "module") else parse(ptx)
    return Counter(ins.opcode for k in mod.kernels.values() for ins in k.instrs)


def supported(ptx_text: str) -> bool:
    return not unsupported_opcodes(ptx_text)


def unsupported_opcodes(ptx) -> dict:
    """{opcode: reason} for the instructions of a PTX module the interpreter cannot run
    (decoding every kernel; an empty dict when all are supported). ``ptx``: the module's text
    or its :class:`~fraglab.ptx.program.Program`."""
    from .program import Program
    prog = ptx if isinstance(ptx, Program) else Program(ptx)
    out = {}
    for k in prog.kernels:
        for op in prog.info(k).code:
            why = getattr(op.fn, "unsupported", None)
            if why:
                out.setdefault(op.instr.opcode, why)
    return out


#: Source text that only sm_90a PTX can carry (wgmma and friends, or a use of the sm_90a guard
#: of ``kernels/common.cuh``: its definitions there, which every kernel includes, do not count),
#: looked for outside comments.
HOPPER_SOURCE = re.compile(r"wgmma|mbarrier|cp\.async\.bulk|setmaxnreg|elect\.sync|stmatrix"
                           r"|#\s*if\s+FRAGLAB_SM90A\b|\bSM90A_ONLY\s*\((?!\.\.\.\))")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def interpreter_arch(name: str) -> str:
    """The target a ``kernels/<name>.cu`` file is interpreted at: ``'sm_90a'`` when it (or a
    header of ``kernels/`` it includes) uses Hopper PTX, else ``'sm_80'``. The coverage test
    checks such files at both targets."""
    from ..toolchain import KERNELS_DIR, kernel_path
    seen, todo = set(), [kernel_path(name)]
    while todo:
        p = todo.pop()
        if p in seen or not p.is_file():
            continue
        seen.add(p)
        text = _COMMENT.sub("", p.read_text())
        if HOPPER_SOURCE.search(text):
            return "sm_90a"
        todo += [KERNELS_DIR / h for h in re.findall(r'#include\s+"([^"]+)"', text)]
    return "sm_80"
