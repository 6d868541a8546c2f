"""Reading SASS: disassemble a cubin with nvdisasm, count instructions by opcode and by class,
find loops from their back edges (:func:`loop_spans`, :func:`main_loop`), and the theoretical
occupancy that a kernel's registers and shared memory allow on sm_90 (:func:`occupancy`)."""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

from .tools import ToolchainError, cache_dir, find_tool

#: Instruction classes the course talks about. Order matters: the first matching prefix wins,
#: so ``IMAD.MOV`` (a move in disguise) is tested before ``IMAD``.
CLASSES: dict[str, tuple[str, ...]] = {
    "tensor": ("HMMA", "HGMMA", "IMMA", "IGMMA", "BMMA", "DMMA", "QGMMA", "UTCHMMA", "UTCQMMA"),
    "shared": ("LDSM", "STSM", "LDS", "STS", "ATOMS"),
    "global": ("LDGSTS", "LDGDEPBAR", "LDG", "STG", "RED", "ATOMG", "UBLKCP", "UTMALDG", "UTMASTG"),
    "local": ("LDL", "STL"),
    "shuffle": ("SHFL",),
    "barrier": ("BAR", "SYNCS", "MEMBAR", "WARPSYNC", "DEPBAR"),
    "move": ("IMAD.MOV", "MOV", "UMOV", "PRMT", "SEL"),
    "integer": ("LOP3", "SHF", "IMAD", "LEA", "IADD3", "IADD", "ISETP", "IMNMX", "VIMNMX",
                "ULOP3", "USHF", "UIMAD", "ULEA", "UIADD3", "UISETP", "FLO", "POPC", "BREV"),
    "float": ("FFMA", "FADD", "FMUL", "FMNMX", "FSETP", "FSEL", "MUFU", "HADD2", "HMUL2",
              "HFMA2", "HMNMX2", "F2F", "F2I", "I2F", "FCHK", "FRND"),
    "control": ("BRA", "EXIT", "RET", "CALL", "BSSY", "BSYNC", "NOP", "YIELD", "BPT", "WARPGROUP"),
    "special": ("S2R", "S2UR", "CS2R", "R2UR", "LDCU", "LDC", "ULDC", "VOTE", "VOTEU", "MATCH"),
}
_INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:\{\s*)?(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)")


_listings: dict[str, str] = {}


def disassemble(build, kernel: str | None = None) -> str:
    """nvdisasm text of ``build`` (a :class:`fraglab.toolchain.Build`), or of one kernel in it.

    The whole cubin is disassembled once and the listing kept, in memory and next to the build
    in the disk cache, so asking for each kernel of a file in turn costs one nvdisasm run.
    """
    text = _listings.get(build.key)
    if text is None:
        cached = cache_dir() / build.key / "kernel.sass"
        try:
            text = cached.read_text()
        except OSError:
            text = _run_nvdisasm(build)
            try:   # written whole, then renamed: another process never reads half a listing
                tmp = cached.with_name(f"kernel.sass.tmp{os.getpid()}")
                tmp.write_text(text)
                os.replace(tmp, cached)
            except OSError:
                pass  # a read-only cache only costs a re-run
        _listings[build.key] = text
    return text if kernel is None else function_text(text, kernel)


def _run_nvdisasm(build) -> str:
    nvdisasm = find_tool("nvdisasm")
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "k.cubin"
        cubin.write_bytes(build.cubin)
        r = subprocess.run([str(nvdisasm), "-c", "-g", str(cubin)], capture_output=True, text=True)
    if r.returncode != 0:
        raise ToolchainError(f"nvdisasm failed on {build.name} ({build.arch}):\n{r.stderr}")
    return r.stdout


def function_text(sass_text: str, kernel: str) -> str:
    """The part of an nvdisasm listing that belongs to one kernel (section ``.text.<kernel>``)."""
    lines, keep, found = [], False, False
    for line in sass_text.splitlines():
        s = line.strip()
        if s.startswith(".section") or (s.startswith(".text.") and s.endswith(":")):
            name = s.split()[1].split(",")[0] if s.startswith(".section") else s[:-1]
            keep = name == f".text.{kernel}"
            found |= keep
        if keep:
            lines.append(line)
    if not found:
        names = sorted(set(re.findall(r"^\.text\.([\w$]+):", sass_text, re.M)))
        raise KeyError(f"kernel {kernel!r} not in the SASS; kernels there: {names}")
    return "\n".join(lines)


def instructions(sass_text: str, padding: bool = False) -> list[str]:
    """Opcodes of a listing in order, full form (``HMMA.16816.F32``), predicates dropped.

    Each kernel ends with a branch to itself followed by NOPs that pad the code to an alignment
    boundary; they never execute, so they are left out unless ``padding=True``.
    """
    ops = [m.group(2) for m in _INSN.finditer(sass_text)]
    if not padding:
        while ops and ops[-1] == "NOP":
            ops.pop()
        if ops and ops[-1] == "BRA" and (len(ops) < 2 or ops[-2] in ("EXIT", "BRA")):
            ops.pop()
    return ops


def listing(sass_text: str, padding: bool = False) -> list[str]:
    """The instructions of a listing as text (``SHFL.BFLY PT, R5, R2, 0x10, 0x1f``), one per
    line, without addresses, encodings or (unless ``padding``) the trailing alignment padding."""
    lines = [m.group(0).split("*/", 1)[1].strip().rstrip(";").strip()
             for m in re.finditer(r"/\*[0-9a-f]{4,}\*/[^;]*;", sass_text)]
    return lines[:len(instructions(sass_text, padding=padding))]


_NUMBERED = re.compile(r"(\.L_x_|__internal_)\d+")


def normalized_listing(sass_text: str) -> list[str]:
    """:func:`listing` with the kernel's own name and the numbers of labels and internal helper
    functions replaced (``<kernel>``, ``.L_x_#``), so that two kernels compiled from the same code
    compare equal."""
    names = re.findall(r"^\.text\.([\w$]+):", sass_text, re.M)
    lines = [_NUMBERED.sub(r"\1#", line) for line in listing(sass_text)]
    if len(names) == 1:
        lines = [re.sub(r"\b" + re.escape(names[0]) + r"\b", "<kernel>", line) for line in lines]
    return lines


def main_path(sass_text: str) -> list[str]:
    """Opcodes up to the kernel's last EXIT: the path a converged warp runs. What ptxas places
    after it (e.g. the fallback for a warp whose shuffle masks disagree) only runs when it is
    branched to."""
    ops = instructions(sass_text)
    last = max((i for i, op in enumerate(ops) if op == "EXIT"), default=len(ops) - 1)
    return ops[:last + 1]


def base_opcode(line: str) -> str:
    """Base opcode of a :func:`listing` line (``@!P0 BAR.SYNC 0x0`` -> ``BAR``)."""
    parts = line.split()
    if parts and parts[0].startswith("@"):
        parts = parts[1:]
    return parts[0].split(".")[0] if parts else ""


def count_opcodes(sass_text: str, base: bool = True) -> Counter:
    ops = instructions(sass_text)
    return Counter(op.split(".")[0] if base else op for op in ops)


def classify(opcode: str) -> str:
    for cls, prefixes in CLASSES.items():
        for p in prefixes:
            if opcode == p or opcode.startswith(p + "."):
                return cls
    return "other"


def count_classes(sass_text: str) -> Counter:
    """Counter over :data:`CLASSES` names (and ``other``); zero counts are included."""
    c = Counter({k: 0 for k in (*CLASSES, "other")})
    c.update(classify(op) for op in instructions(sass_text))
    return c


# --------------------------------------------------------------------------------------------
# Loops, from a listing's back edges
# --------------------------------------------------------------------------------------------

_ADDR = re.compile(r"/\*([0-9a-f]{4,})\*/")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_TARGET = re.compile(r"`\((\.L_x_\d+)\)")


def _addressed(sass_text: str) -> tuple[list[tuple[int, str]], dict[str, int]]:
    """(address, instruction text) of every instruction, and the address of every label."""
    lines: list[tuple[int, str]] = []
    labels: dict[str, int] = {}
    pending: list[str] = []
    for raw in sass_text.splitlines():
        m = _LABEL.match(raw)
        if m:
            pending.append(m.group(1))
            continue
        m = _ADDR.search(raw)
        if m and ";" in raw:
            addr = int(m.group(1), 16)
            for name in pending:
                labels[name] = addr
            pending = []
            lines.append((addr, raw.split("*/", 1)[1].split(";")[0].strip()))
    return lines, labels


def loop_spans(sass_text: str) -> list[tuple[int, int]]:
    """Loops of a kernel's listing as ``(first, last)`` indices into :func:`listing` order (with
    ``padding=True``): each backward ``BRA`` (target address below the branch) closes one."""
    lines, labels = _addressed(sass_text)
    index = {addr: i for i, (addr, _) in enumerate(lines)}
    spans = []
    for i, (addr, text) in enumerate(lines):
        if base_opcode(text) != "BRA":
            continue
        m = _TARGET.search(text)
        if m and m.group(1) in labels and labels[m.group(1)] < addr:
            spans.append((index[labels[m.group(1)]], i))
    return spans


def main_loop(sass_text: str, opcode: str = "FFMA") -> list[str]:
    """The instructions (text, as :func:`listing`) of the loop with the most ``opcode``
    instructions (the first of equal ones); ``[]`` when the kernel has no loop."""
    lines, _ = _addressed(sass_text)
    best: list[str] = []
    for first, last in loop_spans(sass_text):
        body = [text for _, text in lines[first:last + 1]]
        if sum(base_opcode(t) == opcode for t in body) > \
                sum(base_opcode(t) == opcode for t in best):
            best = body
    return best


# --------------------------------------------------------------------------------------------
# Occupancy (sm_90)
# --------------------------------------------------------------------------------------------

#: sm_90 limits per SM: registers, shared memory (bytes, 1 KB of it reserved per block),
#: threads and blocks; registers are allocated per warp in units of 256.
SM90 = dict(registers=65536, smem=228 * 1024, smem_reserved_per_block=1024, threads=2048,
            blocks=32, reg_unit=256, smem_unit=128)


def occupancy(registers: int, smem_bytes: int, block_threads: int, limits: dict = SM90) -> dict:
    """Resident blocks per SM and the theoretical occupancy (resident warps / 64) of a kernel with
    ``registers`` a thread (the ptxas report's), with the limit that binds (``registers``,
    ``shared``, ``threads`` or ``blocks``)."""
    warps = -(-block_threads // 32)
    regs_per_warp = -(-registers * 32 // limits["reg_unit"]) * limits["reg_unit"]
    smem = -(-(smem_bytes + limits["smem_reserved_per_block"]) // limits["smem_unit"]) \
        * limits["smem_unit"]
    by = {"registers": limits["registers"] // (regs_per_warp * warps) if registers else 10**9,
          "shared": limits["smem"] // smem,
          "threads": limits["threads"] // (warps * 32),
          "blocks": limits["blocks"]}
    blocks = min(by.values())
    max_warps = limits["threads"] // 32
    return {"blocks_per_sm": blocks, "warps_per_sm": blocks * warps,
            "occupancy": blocks * warps / max_warps,
            "limited_by": min(by, key=lambda k: (by[k], k != "registers"))}
