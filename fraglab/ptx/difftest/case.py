"""One differential test: a :class:`Case` (inputs, the instruction's PTX, outputs, comparison
rules) and the kernel text it becomes.

Every kernel has one parameter, a global buffer ``io``: input k of element j at byte
``(k * n + j) * slot``, output o after the inputs at ``((nin + o) * n + j) * slot``. One warp
loops over the n elements, 32 at a time, through a single pointer (each access is
``[%x_p+offset]`` with a constant offset), so the interpreter runs about 6 + (instruction count)
warp-instructions per 32 elements."""
from __future__ import annotations

import hashlib
import re
import zlib
from dataclasses import dataclass, field

import numpy as np

from .values import WIDTH

VERSION = ".version 8.8"          # what NVRTC 12.9 writes for sm_80 (and the H100 driver loads)

#: the register type holding a value of each PTX type (.b registers fit every type of their
#: size; 8-bit values live in 16-bit registers, as ld/st/cvt allow)
REG = {1: ".b16", 2: ".b16", 4: ".b32", 8: ".b64"}


def regtype(t: str, narrow: bool = False) -> str:
    if narrow and WIDTH.get(t) == 1:
        return ".b8"
    return ".pred" if t == "pred" else REG[WIDTH[t]]


def memtype(t: str) -> str:
    """The type an input is loaded / an output stored with (8-bit outputs: the whole 16-bit
    register, so sign or zero extension is compared too)."""
    if t == "pred":
        return "u32"
    if t in ("s8", "u8", "b8"):
        return t
    return "b%d" % (8 * WIDTH[t])


def outtype(t: str, narrow: bool = False) -> str:
    if t == "pred":
        return "u32"
    if WIDTH[t] == 1:
        return "b8" if narrow else "b16"
    return "b%d" % (8 * WIDTH[t])


def outwidth(t: str, narrow: bool = False) -> int:
    """Bytes stored per element for an output of type t."""
    o = outtype(t, narrow)
    return 4 if o == "u32" else int(o[1:]) // 8


@dataclass
class Case:
    """A generated test of one accepted combination (``combo``: its full opcode).

    srcs: [(PTX type, bit patterns)] loaded into registers ``%s0, %s1, ...``;
    dsts: PTX types of the outputs ``%d0, %d1, ...`` (a ``pred`` output is stored as 0/1);
    body: PTX lines computing the outputs, with ``{s0}``, ``{d0}``, ``{k}`` (kernel name) holes;
    rules: one comparison rule per output (:mod:`.rules`); decls: extra declarations
    at the kernel's top; consts: module-scope ``.const`` declarations (``{k}`` hole); loads:
    False when the body reads the inputs itself (memory tests); scratch: global regions after
    the outputs (the hole ``{g0}`` is the first one's offset from ``%x_p``); params: extra
    by-value kernel parameters ``{k}_p0, ...`` as (declaration, bytes); threads: the block
    size (the loop's stride; n is a multiple of it); narrow: 8-bit values in 8-bit registers
    (cvt between bf16 and 8-bit integers accepts nothing wider); interleave: the inputs of an
    element side by side in one region (a vector in memory before the kernel starts, for loads
    that require read-only data: ld.global.nc, ldu), not loaded into registers."""
    combo: str
    srcs: list
    dsts: list
    body: list
    rules: list = None
    arch: str = "sm_80"
    decls: list = field(default_factory=list)
    consts: list = field(default_factory=list)
    slot: int = 8
    loads: bool = True
    scratch: int = 0
    params: list = field(default_factory=list)
    threads: int = 32
    narrow: bool = False
    interleave: bool = False
    note: str = ""

    def __post_init__(self):
        if self.rules is None:
            self.rules = [("exact",)] * len(self.dsts)
        n = {len(a) for _, a in self.srcs}
        assert len(n) <= 1, f"{self.combo}: inputs of different lengths"

    @property
    def n(self) -> int:
        return len(self.srcs[0][1]) if self.srcs else 32

    @property
    def widths(self) -> list[int]:
        return [outwidth(t, self.narrow) for t in self.dsts]

    @property
    def nin(self) -> int:
        """Input regions of the io buffer."""
        return 1 if self.interleave else len(self.srcs)

    def input_hash(self) -> str:
        """A hash of the inputs and of the kernel's text: any change of the generated test
        invalidates its record."""
        h = hashlib.sha1(self.combo.encode())
        for t, a in self.srcs:
            h.update(t.encode())
            h.update(np.ascontiguousarray(a).tobytes())
        h.update(self.kernel("k").encode())
        h.update("".join(self.consts).encode())
        for d, raw in self.params:
            h.update(d.encode() + raw)
        return h.hexdigest()[:16]

    def buffer(self) -> np.ndarray:
        """The io buffer with the inputs in place (uint8)."""
        n, s = self.n, self.slot
        buf = np.zeros((self.nin + len(self.dsts) + self.scratch) * n * s, np.uint8)
        at = 0
        for k, (t, a) in enumerate(self.srcs):
            w = 4 if t == "pred" else WIDTH[t]
            r = 0 if self.interleave else k
            view = buf[r * n * s:(r + 1) * n * s].reshape(n, s)
            col = at if self.interleave else 0
            view[:, col:col + w] = np.ascontiguousarray(a).view(np.uint8).reshape(n, -1)[:, :w]
            at += w
        return buf

    def outputs(self, buf: np.ndarray) -> list[np.ndarray]:
        """The outputs' bit patterns (unsigned arrays) read back from an io buffer."""
        n, s, k0 = self.n, self.slot, self.nin
        out = []
        for o, t in enumerate(self.dsts):
            w = outwidth(t, self.narrow)
            view = buf[(k0 + o) * n * s:(k0 + o + 1) * n * s].reshape(n, s)[:, :w]
            out.append(np.ascontiguousarray(view).view({1: np.uint8, 2: np.uint16, 4: np.uint32,
                                                        8: np.uint64}[w]).ravel())
        return out

    def kernel(self, name: str) -> str:
        n, s = self.n, self.slot
        nin = self.nin
        hole = {f"s{i}": f"%s{i}" for i in range(nin)}
        hole.update({f"d{o}": f"%d{o}" for o in range(len(self.dsts))})
        hole["k"] = name
        for g in range(self.scratch):
            hole[f"g{g}"] = (nin + len(self.dsts) + g) * n * s
        sig = ", ".join([f".param .u64 {name}_io"] + [f".param {d.format(k=name, i=i)}"
                                                       for i, (d, _) in enumerate(self.params)])
        lines = [f".visible .entry {name}({sig})", "{",
                 "  .reg .pred %x_lp;", "  .reg .b32 %x_t, %x_u;", "  .reg .b64 %x_b, %x_p, %x_e, %x_o;"]
        for i, (t, _) in enumerate(self.srcs):
            lines.append(f"  .reg {regtype(t, self.narrow)} %s{i};")
        for o, t in enumerate(self.dsts):
            lines.append(f"  .reg {regtype(t, self.narrow)} %d{o};")
        lines += ["  " + d.format(**hole) for d in self.decls]
        lines += [f"  ld.param.u64 %x_b, [{name}_io];", "  cvta.to.global.u64 %x_b, %x_b;",
                  "  mov.u32 %x_t, %tid.x;", f"  mul.wide.u32 %x_o, %x_t, {s};",
                  "  add.s64 %x_p, %x_b, %x_o;", f"  add.s64 %x_e, %x_b, {n * s};", "$Lx_loop:"]
        if self.loads and not self.interleave:
            for i, (t, _) in enumerate(self.srcs):
                if t == "pred":
                    lines += [f"  ld.global.u32 %x_u, [%x_p+{i * n * s}];",
                              f"  setp.ne.u32 %s{i}, %x_u, 0;"]
                else:
                    lines.append(f"  ld.global.{memtype(t)} %s{i}, [%x_p+{i * n * s}];")
        lines += ["  " + b.format(**hole) for b in self.body]
        for o, t in enumerate(self.dsts):
            off = (nin + o) * n * s
            if t == "pred":
                lines += [f"  selp.u32 %x_u, 1, 0, %d{o};", f"  st.global.u32 [%x_p+{off}], %x_u;"]
            else:
                lines.append(f"  st.global.{outtype(t, self.narrow)} [%x_p+{off}], %d{o};")
        lines += [f"  add.s64 %x_p, %x_p, {self.threads * s};", "  setp.lt.u64 %x_lp, %x_p, %x_e;",
                  "  @%x_lp bra $Lx_loop;", "  ret;", "}"]
        return "\n".join(lines)


def module(cases: list, names: list[str], arch: str) -> str:
    """One PTX module holding the kernels of `cases` (all of target `arch`)."""
    head = [VERSION, f".target {arch}", ".address_size 64", ""]
    consts = [c.format(k=nm) for case, nm in zip(cases, names) for c in case.consts]
    return "\n".join(head + consts + [c.kernel(nm) + "\n" for c, nm in zip(cases, names)])


def seed_of(*parts) -> int:
    return zlib.crc32("|".join(map(str, parts)).encode())


def pad32(arrays: list[np.ndarray], fill) -> list[np.ndarray]:
    """Pad equal-length operand arrays to a multiple of 32 elements with `fill(k)` values."""
    n = len(arrays[0])
    extra = (-n) % 32
    if not extra:
        return arrays
    more = fill(extra)
    return [np.concatenate([a, m.astype(a.dtype)]) for a, m in zip(arrays, more)]


_OUT = re.compile(r"%d(\d+)\b|\{d(\d+)\}")


def _mergeable(c: Case):
    """Cases with equal keys can share one kernel (same inputs, layout and declarations)."""
    if c.params or c.consts or any("$L" in b for b in c.body):
        return None
    return (c.arch, c.slot, c.threads, c.scratch, c.loads, c.narrow, c.interleave, tuple(c.decls),
            tuple(t for t, _ in c.srcs), tuple(hashlib.sha1(np.ascontiguousarray(a).tobytes()).hexdigest()
                                               for _, a in c.srcs))


def pack(cases: dict, limit: int = 24) -> list:
    """Group the cases of a module into kernels: cases with the same inputs and layout (the
    variants of an instruction) run one after another in one kernel, each with its own outputs,
    which saves the interpreter's per-launch and decode work and the driver's per-kernel JIT
    work. Returns [(name, Case, [(combo, number of outputs), ...])]."""
    groups: dict = {}
    out = []
    for c, case in cases.items():
        key = _mergeable(case)
        if key is None:
            out.append((c, case, [(c, len(case.dsts))]))
            continue
        g = groups.setdefault(key, [])
        if g and len(g[-1]) < limit:
            g[-1].append(c)
        else:
            g.append([c])
    for g in groups.values():
        for members in g:
            if len(members) == 1:
                c = members[0]
                out.append((c, cases[c], [(c, len(cases[c].dsts))]))
                continue
            first = cases[members[0]]
            body, dsts, parts = [], [], []
            for c in members:
                k = len(dsts)
                ren = lambda m: f"%d{int(m.group(1)) + k}" if m.group(1) else "{d%d}" % (int(m.group(2)) + k)  # noqa: E731
                body += [_OUT.sub(ren, b) for b in cases[c].body]
                dsts += cases[c].dsts
                parts.append((c, len(cases[c].dsts)))
            merged = Case(f"{members[0]}+{len(members) - 1}", first.srcs, dsts, body, arch=first.arch,
                          decls=first.decls, slot=first.slot, loads=first.loads, scratch=first.scratch,
                          threads=first.threads, narrow=first.narrow, interleave=first.interleave)
            out.append((members[0] + "+", merged, parts))
    return out


def split_outputs(parts, outputs):
    """The outputs of a packed kernel -> {combo: its outputs} (an error string goes to all)."""
    if isinstance(outputs, str):
        return {c: outputs for c, _ in parts}
    res, k = {}, 0
    for c, n in parts:
        res[c] = outputs[k:k + n]
        k += n
    return res
