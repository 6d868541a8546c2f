"""Source positions of PTX instructions: ``.loc`` directives, the chains of call sites that
code inlined from other functions carries (``function_name ..., inlined_at ...``), and the
``.debug_str`` section whose strings name those functions. :mod:`fraglab.ptx.parse` calls these
while it reads a module; each instruction keeps its :class:`Loc`."""
from __future__ import annotations

import re
from dataclasses import dataclass

_LOC = re.compile(r"\.loc\s+(\d+)\s+(\d+)\s+(\d+)"
                  r"(?:.*?function_name\s+([\w$.]+)(?:\s*\+\s*(\d+))?)?"
                  r"(?:.*?inlined_at\s+(\d+)\s+(\d+)\s+(\d+))?")


@dataclass
class Loc:
    """A ``.loc`` position. Code inlined from a function carries ``function_name`` (that
    function) and ``inlined_at`` (the call site); the call site is itself a position that may be
    inlined, and the PTX ISA writes that chain as a ``.loc`` of the call site placed before (for
    a builtin inlined into a course helper inlined into a kernel:
    ``.loc 2 17 5, function_name $L__info_string0, inlined_at 1 11 5`` then
    ``.loc 3 91 5, function_name $L__info_string1, inlined_at 2 17 5``). ``caller`` is that
    call site's own Loc, so :meth:`frames` gives the whole chain."""
    file: int
    line: int
    col: int
    inlined_at: tuple | None = None      # (file, line, col) of the call site it is inlined at
    func: str | None = None              # the inlined function's (mangled) name, from .debug_str
    caller: Loc | None = None            # the Loc of the call site (None: not inlined, or unknown)

    def frames(self) -> list:
        """This position, then each call site it is inlined at: innermost first, the kernel's
        own line last."""
        out, loc = [self], self
        while loc.inlined_at is not None and len(out) < 64:
            loc = loc.caller if loc.caller is not None else Loc(*loc.inlined_at)
            out.append(loc)
        return out


def read_loc(s: str, locs_at: dict) -> Loc | None:
    """The Loc of the ``.loc`` directive ``s`` (None: not one this reads). Its call site is the
    latest ``.loc`` at the inlined_at position, which the PTX ISA places before it; ``locs_at``
    remembers them."""
    m = _LOC.match(s)
    if not m:
        return None
    g = m.groups()         # file, line, col, function_name label, its offset, inlined_at f/l/c
    pos = (int(g[0]), int(g[1]), int(g[2]))
    func = None if g[3] is None else (g[3] if g[4] is None else f"{g[3]}+{g[4]}")
    if g[5] is None:
        loc = Loc(*pos, func=func)
    else:
        at = (int(g[5]), int(g[6]), int(g[7]))
        loc = Loc(*pos, at, func, locs_at.get(at))
    locs_at[pos] = loc
    return loc


def read_debug_str(mod, lines: list[str], i: int) -> int:
    """Read the ``.debug_str`` section (labels, then ``.b8`` bytes of NUL-terminated strings:
    the names that ``.loc ... function_name`` refers to) into ``mod.debug_str``; returns the
    index after its closing brace."""
    data, labels = bytearray(), {}
    while i < len(lines):
        s = lines[i].strip()
        i += 1
        if s.startswith("}"):
            break
        m = re.match(r"^([\w$.]+):", s)
        if m:
            labels[m.group(1)] = len(data)
            s = s[m.end():].strip()
        if s.startswith(".b8"):
            data += bytes(int(v, 0) & 0xFF for v in s[3:].rstrip(";").split(",") if v.strip())
    for label, off in labels.items():
        end = data.find(0, off)
        mod.debug_str[label] = bytes(data[off:end if end >= 0 else len(data)]).decode(
            "utf-8", "replace")
    return i


def name_functions(mod) -> None:
    """Replace each Loc's function_name label (``$L__info_string3`` or ``label+offset``) by the
    name it points to in ``.debug_str`` (a mangled C++ name; left as is when absent)."""
    if not mod.debug_str:
        return
    data = mod.debug_str
    done = set()
    for k in list(mod.kernels.values()) + list(mod.funcs.values()):
        for ins in k.instrs:
            loc = ins.loc
            while loc is not None and id(loc) not in done:
                done.add(id(loc))
                if loc.func is not None:
                    label, _, off = loc.func.partition("+")
                    if label in data:
                        loc.func = data[label][int(off or 0):]
                loc = loc.caller
