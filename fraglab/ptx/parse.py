"""PTX text -> a small syntax tree: kernels with parameters, registers, variables, instructions.

The parser reads the PTX that NVRTC writes (one statement per line, ``.loc`` line info (read by
:mod:`fraglab.ptx.loc`), scoped ``{ .reg ... }`` blocks from inline assembly). It does no
typing or semantics: operands become tuples that :mod:`fraglab.ptx.decode` turns into executable
closures.

Operand tuples:
    ('reg', index)               a register of the kernel (index into Kernel.regs)
    ('sreg', name)               a special register: '%tid.x', '%laneid', '%clock64', ...
    ('imm', value, kind)         kind 'int', 'f32' (0fXXXXXXXX) or 'f64' (0dXXXXXXXXXXXXXXXX);
                                 a float's value is a :class:`FloatImm` (its bits kept)
    ('sym', name)                a variable, parameter or label name
    ('addr', base, offset)       [base+offset]; base is a reg/sym operand or None (absolute)
    ('vec', [operands])          {a, b, ...}; an element may be ('sink',) for '_'
    ('pair', a, b)               a|b (setp, shfl second destination)
                                 and [map, {c0, ...}] (cp.async.bulk.tensor's tensor map
                                 and coordinates) as ('pair', ('addr', map, 0), ('vec', [...]))
    ('not', operand)             !%p
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

from .errors import PTXSyntaxError
from .loc import Loc, name_functions, read_debug_str, read_loc

_TYPE_SIZE = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2,
              "b32": 4, "u32": 4, "s32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4, "tf32": 4,
              "b64": 8, "u64": 8, "s64": 8, "f64": 8, "pred": 1}


def type_size(t: str) -> int:
    return _TYPE_SIZE[t.lstrip(".")]


@dataclass
class Instr:
    opcode: str                          # full opcode with modifiers: 'ld.global.v4.f32'
    operands: list
    guard: tuple | None                  # (reg index, negated) or None
    text: str                            # the statement as written
    ptx_line: int                        # 1-based line in the PTX text
    loc: Loc | None

    @property
    def base(self) -> str:
        return self.opcode.split(".", 1)[0]


@dataclass
class Var:
    name: str
    space: str                           # 'shared', 'local', 'global', 'const'
    type: str
    align: int
    size: int                            # bytes (0 for an extern shared array)
    extern: bool = False
    init: bytes | None = None


@dataclass
class Kernel:
    name: str
    params: list = field(default_factory=list)       # [(name, type, size, align)]
    regs: list = field(default_factory=list)         # [(name, type)]
    vars: list = field(default_factory=list)         # kernel-scope Var
    instrs: list = field(default_factory=list)
    labels: dict = field(default_factory=dict)       # label -> instruction index
    param_regs: set = field(default_factory=set)      # call-sequence .param, held as registers
    arg_regs: list = field(default_factory=list)      # .func: its parameters (register indices)
    ret_regs: list = field(default_factory=list)      # .func: its return values


@dataclass
class Module:
    version: str = ""
    target: str = ""
    kernels: dict = field(default_factory=dict)
    vars: dict = field(default_factory=dict)         # module-scope Var by name
    files: dict = field(default_factory=dict)        # file index -> path
    funcs: dict = field(default_factory=dict)        # .func definitions (inlined at calls)
    debug_str: dict = field(default_factory=dict)    # .debug_str label -> the name it holds


_COMMENT = re.compile(r"//.*$")
_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)
# directives as NVIDIA's headers write them in inline assembly too: `.reg.b16 hl, hu;` (no space
# between the state space and the type) is as legal as `.reg .b16 hl, hu;`
_REG_DECL = re.compile(r"\.reg\s*(?:\.v\d\s*)?\.(\w+)\s+(.+)$")
_RANGE = re.compile(r"^(%?[\w$]+)<(\d+)>$")
_VAR_DECL = re.compile(
    r"^(?:\.(?:visible|extern|weak|common)\s+)*(?P<ext>\.extern\s+)?\.(?P<space>shared|local|global|const)"
    r"\s*(?:\.align\s+(?P<align>\d+)\s*)?(?:\.v\d\s*)?\.(?P<type>\w+)\s+(?P<name>[\w$.]+)"
    r"(?P<dims>(?:\[\d*\])*)\s*(?:=\s*(?P<init>.+))?$")
_FILE = re.compile(r'\.file\s+(\d+)\s+"([^"]*)"')
_ENTRY = re.compile(r"^(?:\.visible\s+|\.weak\s+)?\.entry\s+([\w$]+)\s*\(?")
_PARAM = re.compile(r"\.param\s*(?:\.align\s+(\d+)\s*)?\.(\w+)\s+(?:\.ptr\s+(?:\.\w+\s+)*)?([\w$]+)(\[\d+\])?")


def _strip_comments(text: str) -> list[str]:
    text = _BLOCK_COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return [_COMMENT.sub("", ln) for ln in text.split("\n")]


def _split_top(s: str, sep: str = ",") -> list[str]:
    """Split on `sep` outside brackets and braces."""
    if "[" not in s and "{" not in s and "(" not in s:
        return [p.strip() for p in s.split(sep) if p.strip()]
    out, depth, cur = [], 0, []
    for ch in s:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == sep and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def split_operands(text: str) -> list[str]:
    """An instruction's top-level comma-separated operands, stripped (commas inside {...}, [...]
    and (...) do not split): ``"%r1, [%rd2+4], {%f1, %f2}"`` -> three operands. PTX or SASS."""
    return _split_top(text, ",")


def _parse_int(tok: str) -> int:
    t = tok.rstrip("Uu")
    neg = t.startswith("-")
    t = t.lstrip("+-")
    if t.lower().startswith("0x"):
        v = int(t, 16)
    elif t.lower().startswith("0b"):
        v = int(t, 2)
    elif len(t) > 1 and t.startswith("0") and t.isdigit():
        v = int(t, 8)
    else:
        v = int(t)
    return -v if neg else v


def _parse_init(init: str, type_: str, size: int) -> bytes:
    vals = [v for v in re.split(r"[\s,{}]+", init) if v]
    es = type_size(type_)
    fmt = {1: "B", 2: "H", 4: "I", 8: "Q"}[es]
    out = b""
    for v in vals:
        if v.startswith(("0f", "0F")):
            out += bytes.fromhex(v[2:])[::-1]
        elif v.startswith(("0d", "0D")):
            out += bytes.fromhex(v[2:])[::-1]
        elif type_.startswith("f"):
            out += struct.pack("<f" if es == 4 else "<d", float(v))
        else:
            out += struct.pack("<" + fmt, _parse_int(v) & ((1 << (8 * es)) - 1))
    return out.ljust(size, b"\0")[:size]


class FloatImm(float):
    """A float immediate that keeps the bits it was written with (``.bits``, an int of ``.width``
    bytes): -0.0 and +0.0, and NaNs with different payloads (signalling ones included, which a
    Python float would quiet), are different immediates: two FloatImms are equal only when their
    bits are, so a cache keyed by immediates never hands one the other's array."""
    __slots__ = ("bits", "width")

    def __new__(cls, bits: int, width: int):
        self = super().__new__(cls, struct.unpack("<f" if width == 4 else "<d",
                                                  bits.to_bytes(width, "little"))[0])
        self.bits, self.width = bits, width
        return self

    @classmethod
    def of(cls, value: float, width: int = 8) -> "FloatImm":
        return cls(int.from_bytes(struct.pack("<f" if width == 4 else "<d", value), "little"), width)

    def __eq__(self, other):
        if isinstance(other, FloatImm):
            return self.bits == other.bits and self.width == other.width
        return float.__eq__(self, other)

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):             # a float's hash (+-0 share one; eq tells them apart), NaNs by bits
        return hash((self.bits, self.width)) if self != self else float.__hash__(self)

    def __repr__(self):
        return f"FloatImm(0{'f' if self.width == 4 else 'd'}{self.bits:0{2 * self.width}X})"

    def __reduce__(self):
        return (FloatImm, (self.bits, self.width))


class _Scopes:
    def __init__(self, kernel: Kernel):
        self.k = kernel
        self.stack: list[dict] = [{}]

    def declare(self, name: str, type_: str) -> None:
        idx = len(self.k.regs)
        suffix = "" if len(self.stack) == 1 else f"@{len(self.stack) - 1}.{idx}"
        self.k.regs.append((name + suffix, type_))
        self.stack[-1][name] = idx

    def lookup(self, name: str):
        for d in reversed(self.stack):
            if name in d:
                return d[name]
        return None


_F32 = re.compile(r"0[fF][0-9a-fA-F]{8}")
_F64 = re.compile(r"0[dD][0-9a-fA-F]{16}")
_INT = re.compile(r"[+-]?(0[xX][0-9a-fA-F]+|0[bB][01]+|\d+)[Uu]?")
_FLT = re.compile(r"[+-]?\d+\.\d*(e[+-]?\d+)?")
_NAME = re.compile(r"[\w$.]+")


def parse_operand(tok: str, scopes: _Scopes, where: str):
    tok = tok.strip()
    if tok[:1] == "%":
        idx = scopes.lookup(tok)
        if idx is not None:
            return ("reg", idx)
    if not tok:
        raise PTXSyntaxError(f"empty operand in {where}")
    if tok.startswith("{") and tok.endswith("}"):
        return ("vec", [parse_operand(t, scopes, where) for t in _split_top(tok[1:-1])])
    if tok.startswith("[") and tok.endswith("]"):
        inner = tok[1:-1].strip()
        parts = _split_top(inner)
        if len(parts) == 2 and parts[1].startswith("{"):        # [tensorMap, {c0, c1, ...}]
            return ("pair", parse_operand(f"[{parts[0]}]", scopes, where),
                    parse_operand(parts[1], scopes, where))
        m = re.match(r"^(.*?)\s*\+\s*(-?\s*(?:0[xX][0-9a-fA-F]+|\d+))$", inner)
        if m and m.group(1):
            return ("addr", parse_operand(m.group(1), scopes, where), _parse_int(m.group(2).replace(" ", "")))
        if re.fullmatch(r"-?(0[xX][0-9a-fA-F]+|\d+)", inner):
            return ("addr", None, _parse_int(inner))
        return ("addr", parse_operand(inner, scopes, where), 0)
    if tok == "_":
        return ("sink",)
    if tok == "WARP_SZ":
        return ("imm", 32, "int")
    if tok.startswith("!"):
        return ("not", parse_operand(tok[1:], scopes, where))
    if "|" in tok:
        a, b = tok.split("|", 1)
        return ("pair", parse_operand(a, scopes, where), parse_operand(b, scopes, where))
    if _F32.fullmatch(tok):
        return ("imm", FloatImm(int(tok[2:], 16), 4), "f32")
    if _F64.fullmatch(tok):
        return ("imm", FloatImm(int(tok[2:], 16), 8), "f64")
    if _INT.fullmatch(tok):
        return ("imm", _parse_int(tok), "int")
    if _FLT.fullmatch(tok):
        return ("imm", FloatImm.of(float(tok)), "f64")
    idx = scopes.lookup(tok)
    if idx is not None:
        return ("reg", idx)
    if tok.startswith("%"):
        return ("sreg", tok)
    if _NAME.fullmatch(tok):
        return ("sym", tok)
    raise PTXSyntaxError(f"cannot parse operand {tok!r} in {where}")


def parse(text: str) -> Module:
    """Parse a PTX module. Raises :class:`PTXSyntaxError` on text it does not understand."""
    import gc
    was = gc.isenabled()
    gc.disable()
    try:
        return _parse(text)
    finally:
        if was:
            gc.enable()


def _parse(text: str) -> Module:
    mod = Module()
    lines = _strip_comments(text)
    i, n = 0, len(lines)
    while i < n:
        line = lines[i].strip()
        i += 1
        if not line:
            continue
        if line.startswith(".version"):
            mod.version = line.split()[1]
        elif line.startswith(".target"):
            mod.target = line.split(None, 1)[1].strip()
        elif line.startswith(".file"):
            m = _FILE.match(line)
            if m:
                mod.files[int(m.group(1))] = m.group(2)
        elif line.startswith(".section") and line.split()[1:2] == [".debug_str"]:
            i = read_debug_str(mod, lines, i)
        elif line.startswith(".section"):
            depth = 0                                   # skip the DWARF sections
            while i < n:
                s = lines[i].strip()
                i += 1
                depth += s.count("{") - s.count("}")
                if depth <= 0 and "}" in s:
                    break
        elif _ENTRY.match(line):
            i = _parse_entry(mod, lines, i - 1)
        elif ".func" in line.split("(")[0]:
            i = _parse_func(mod, lines, i - 1)
        elif _VAR_DECL.match(line.rstrip(";")):
            v = _parse_var(line.rstrip(";").strip())
            mod.vars[v.name] = v
        elif line.startswith((".address_size", ".pragma", "}", "{")):
            continue
        else:
            raise PTXSyntaxError(f"PTX line {i}: unexpected module-level text {line!r}")
    name_functions(mod)
    return mod


def _skip_function(lines, i):
    """Skip a .func: a prototype (ends with ';' before any '{') or a definition with a body."""
    depth, seen, paren = 0, False, 0
    while i < len(lines):
        s = lines[i]
        i += 1
        paren += s.count("(") - s.count(")")
        if not seen and paren <= 0 and ";" in s and "{" not in s:
            return i                                    # a prototype
        depth += s.count("{") - s.count("}")
        seen = seen or "{" in s
        if seen and depth == 0:
            return i
    return i


def _parse_var(decl: str) -> Var:
    m = _VAR_DECL.match(decl)
    type_ = m.group("type")
    dims = re.findall(r"\[(\d*)\]", m.group("dims") or "")
    count = 1
    extern = False
    for d in dims:
        if d == "":
            extern = True
            count = 0
        else:
            count *= int(d)
    vec = re.search(r"\.v(\d)\s", decl)
    if vec:
        count *= int(vec.group(1))
    size = count * type_size(type_)
    align = int(m.group("align") or type_size(type_))
    init = _parse_init(m.group("init"), type_, size) if m.group("init") else None
    return Var(m.group("name"), m.group("space"), type_, align, size,
               extern=extern or bool(m.group("ext")) or decl.startswith(".extern"), init=init)


_FUNC = re.compile(r"\.func\s*(?:\((?P<rets>[^)]*)\))?\s*(?P<name>[\w$]+)\s*(?:\((?P<args>[^)]*)\))?")


def _parse_func(mod: Module, lines: list[str], i: int) -> int:
    """A .func: a prototype is skipped; a definition is parsed like a kernel, its parameters and
    return values held in registers, for inlining at its call sites (:mod:`.inline`)."""
    start, header = i, []
    while i < len(lines) and "{" not in lines[i]:
        header.append(lines[i].strip())
        i += 1
        if ";" in header[-1] and "(" not in header[-1].split(";")[-1]:
            htxt = " ".join(header)
            if htxt.count("(") == htxt.count(")"):
                return _skip_function(lines, start)     # a prototype
    htxt = " ".join(header)
    m = _FUNC.search(htxt)
    if not m:
        return _skip_function(lines, start)
    k = Kernel(m.group("name"))
    scopes = _Scopes(k)
    for group, dest in (("rets", k.ret_regs), ("args", k.arg_regs)):
        for pm in _PARAM.finditer(m.group(group) or ""):
            t = pm.group(2)
            count = int(pm.group(4)[1:-1]) if pm.group(4) else 1
            if type_size(t) * count > 8:
                t = "b64"                               # a struct by value: not supported
            elif count > 1:
                t = {1: "b8", 2: "b16", 4: "b32", 8: "b64"}[type_size(t) * count]
            scopes.declare(pm.group(3), t)
            k.param_regs.add(len(k.regs) - 1)
            dest.append(len(k.regs) - 1)
    end = _parse_body(mod, k, scopes, lines, i)
    mod.funcs[k.name] = k
    return end


def _parse_entry(mod: Module, lines: list[str], i: int) -> int:
    header = []
    while "{" not in lines[i]:
        header.append(lines[i].strip())
        i += 1
        if i >= len(lines):
            raise PTXSyntaxError("unterminated .entry")
    htxt = " ".join(header)
    name = _ENTRY.match(htxt).group(1)
    k = Kernel(name)
    for m in _PARAM.finditer(htxt):
        t = m.group(2)
        count = int(m.group(4)[1:-1]) if m.group(4) else 1
        k.params.append((m.group(3), t, type_size(t) * count, int(m.group(1) or type_size(t))))
    end = _parse_body(mod, k, _Scopes(k), lines, i)
    mod.kernels[name] = k
    return end


def _parse_body(mod: Module, k: Kernel, scopes, lines: list[str], i: int) -> int:
    name = k.name
    loc = None
    locs_at: dict = {}          # (file, line, col) -> the latest Loc there (call sites of chains)
    depth = 0
    pending_labels: list[str] = []
    while i < len(lines):
        raw = lines[i]
        i += 1
        s = raw.strip()
        if s and ";" not in s and s[0] not in "{}." and not re.match(r"^[\w$]+:\s*$", s):
            while i < len(lines) and ";" not in s:      # a statement over several lines (call)
                s += " " + lines[i].strip()
                i += 1
        while s:
            if s.startswith("{"):
                depth += 1
                if depth > 1:
                    scopes.stack.append({})
                s = s[1:].strip()
                continue
            if s.startswith("}"):
                depth -= 1
                if depth == 0:
                    for lb in pending_labels:
                        k.labels[lb] = len(k.instrs)
                    return i
                scopes.stack.pop()
                s = s[1:].strip()
                continue
            m = re.match(r"^([\w$]+):", s)
            if m:
                pending_labels.append(m.group(1))
                s = s[m.end():].strip()
                continue
            if s.startswith((".loc ", ".loc\t")):
                loc = read_loc(s, locs_at) or loc
                s = ""
                continue
            if s.startswith((".pragma", ".maxntid", ".reqntid", ".minnctapersm", ".maxnreg",
                             ".noreturn", ".explicitcluster", ".maxclusterrank")):
                s = s.split(";", 1)[1].strip() if ";" in s else ""
                continue
            if ";" not in s:
                raise PTXSyntaxError(f"PTX line {i}: statement without ';': {s!r}")
            stmt, s = s.split(";", 1)
            stmt, s = stmt.strip(), s.strip()
            if stmt.startswith(".reg"):
                m = _REG_DECL.match(stmt)
                if not m:
                    raise PTXSyntaxError(f"PTX line {i}: bad register declaration {stmt!r}")
                for nm in _split_top(m.group(2)):
                    r = _RANGE.match(nm)
                    if r:
                        for j in range(int(r.group(2))):
                            scopes.declare(f"{r.group(1)}{j}", m.group(1))
                    else:
                        scopes.declare(nm.strip(), m.group(1))
                continue
            if stmt.startswith((".shared", ".local", ".global", ".const", ".extern")):
                k.vars.append(_parse_var(stmt))
                continue
            if stmt.startswith(".param"):                 # a call's argument or return value
                m = re.match(r"\.param\s*(?:\.align\s+\d+\s*)?\.(\w+)\s+([\w$]+)(\[(\d+)\])?", stmt)
                if not m:
                    raise PTXSyntaxError(f"PTX line {i}: bad .param declaration {stmt!r}")
                t = m.group(1)
                if m.group(3):
                    t = {1: "b8", 2: "b16", 4: "b32", 8: "b64"}.get(int(m.group(4)) * type_size(t), "b64")
                scopes.declare(m.group(2), t)
                k.param_regs.add(len(k.regs) - 1)
                continue
            if stmt.startswith("."):
                raise PTXSyntaxError(f"PTX line {i}: unsupported directive {stmt!r}")
            _add_instr(k, stmt, scopes, i, loc, pending_labels)
            pending_labels = []
    raise PTXSyntaxError(f"kernel {name}: missing closing brace")


def _add_instr(k: Kernel, stmt: str, scopes: _Scopes, line: int, loc, labels) -> None:
    for lb in labels:
        k.labels[lb] = len(k.instrs)
    guard = None
    text = stmt
    if stmt.startswith("@"):
        g, stmt = stmt[1:].split(None, 1)
        neg = g.startswith("!")
        idx = scopes.lookup(g.lstrip("!"))
        if idx is None:
            raise PTXSyntaxError(f"PTX line {line}: unknown guard predicate {g!r}")
        guard = (idx, neg)
    parts = stmt.split(None, 1)
    opcode = parts[0]
    if opcode.split(".")[0] == "call":
        m = re.match(r"^\s*(?:\((.*?)\)\s*,)?\s*([\w$]+)\s*(?:,\s*(?:\((.*)\)|([^()]*)))?\s*$",
                     parts[1] if len(parts) > 1 else "")
        if not m:
            raise PTXSyntaxError(f"PTX line {line}: cannot parse call {stmt!r}")
        rets = [parse_operand(t, scopes, f"PTX line {line}") for t in _split_top(m.group(1) or "")]
        args = [parse_operand(t, scopes, f"PTX line {line}")
                for t in _split_top(m.group(3) or m.group(4) or "")]
        k.instrs.append(Instr(opcode, [("call", m.group(2), rets, args)], guard,
                              " ".join(text.split()), line, loc))
        return
    ops = [parse_operand(t, scopes, f"PTX line {line}") for t in _split_top(parts[1])] \
        if len(parts) > 1 else []
    k.instrs.append(Instr(opcode, ops, guard, " ".join(text.split()), line, loc))
