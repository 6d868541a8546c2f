"""Table 3 from our own build: registers, shared memory and barriers (ptxas), SASS counts, and a
check that the clock-timed kernels read the clock around the whole epilogue and nothing else."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .. import sass, toolchain
from .kernels import KERNELS, VARIANTS, kernel_name

#: Base opcodes of the two epilogues (the clock reads must enclose all of them).
EPILOGUE_OPS = ("STS", "BAR", "LDS", "SHFL", "FMNMX")


def kernel_sass(arch: str, kernel: str) -> str:
    """SASS text of one kernel of this topic for ``arch`` (:func:`fraglab.sass.disassemble` keeps
    the listing, so the file is disassembled once)."""
    return toolchain.compile(KERNELS, arch).sass(kernel)


def build_report(arch: str = "sm_90", dtype: str = "bf16") -> dict:
    """Per variant: registers, shared memory, barriers (ptxas) and SASS counts, for ``arch``."""
    b = toolchain.compile(KERNELS, arch)
    out = {}
    for variant in VARIANTS:
        k = kernel_name(variant, dtype)
        r = b.resources[k]
        text = b.sass(k)
        ops, cls = sass.count_opcodes(text), sass.count_classes(text)
        out[variant] = {"kernel": k, "registers": r["registers"], "smem_bytes": r["smem"],
                    "barriers": r["barriers"], "stack_frame": r["stack_frame"],
                    "spill_stores": r["spill_stores"], "spill_loads": r["spill_loads"],
                    "instructions": int(sum(cls.values())),
                    "sass": {c: int(v) for c, v in cls.items()},
                    "opcodes": {o: int(ops.get(o, 0)) for o in ("HMMA", "STS", "LDS", "BAR",
                                                                 "SHFL", "FMNMX", "STG")}}
    return {"arch": arch, "dtype": dtype, "ways": out}


def bracket(lines: Sequence[str], epilogue_ops: Sequence[str] = EPILOGUE_OPS) -> dict:
    """Check a SASS listing (``sass.listing``) of a clock-timed kernel: exactly two clock reads,
    the first after the last HMMA and before the first epilogue instruction, the second after
    the last one. ``problems`` lists what is wrong (empty: ``ok``)."""
    base = [sass.base_opcode(l) for l in lines]
    clocks = [i for i, l in enumerate(lines) if "SR_CLOCK" in l]
    mma = [i for i, o in enumerate(base) if o == "HMMA"]
    epi = [i for i, o in enumerate(base) if o in epilogue_ops]
    problems = []
    if len(clocks) != 2:
        problems.append(f"{len(clocks)} reads of the clock (SR_CLOCKLO) in the SASS; expected 2")
    if not mma:
        problems.append("no HMMA in the SASS")
    if not epi:
        problems.append("no epilogue instruction (" + ", ".join(epilogue_ops) + ") in the SASS")
    if not problems:
        if clocks[0] < max(mma):
            problems.append("the first clock read comes before the last HMMA")
        if clocks[0] > min(epi):
            problems.append(f"{lines[min(epi)]!r} comes before the first clock read")
        if clocks[1] < max(epi):
            problems.append(f"{lines[max(epi)]!r} comes after the second clock read")
    return {"clock_lines": clocks, "mma_lines": mma, "epilogue_lines": epi,
            "ok": not problems, "problems": problems}


def clock_bracket(arch: str = "sm_90", variant: str = "regs", dtype: str = "bf16") -> dict:
    """:func:`bracket` for one of this topic's ``_clock`` kernels; adds its ``listing``."""
    k = kernel_name(variant, dtype, clock=True)
    lines = sass.listing(kernel_sass(arch, k))
    return {"arch": arch, "kernel": k, **bracket(lines), "listing": lines}


def write_cubin(arch: str, folder) -> Path:
    """Compile this topic for ``arch`` and write its cubin into ``folder`` (for child processes)."""
    folder = Path(folder)
    b = toolchain.compile(KERNELS, arch)
    p = folder / f"{KERNELS}.{arch}.cubin"
    p.write_bytes(b.cubin)
    return p
