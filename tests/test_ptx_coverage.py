"""Opcode coverage: every instruction NVRTC emits for the course's kernels (sm_80, and sm_90a for
the files that use Hopper PTX: ``ptx.interpreter_arch``) must be one the PTX interpreter can run.
CPU only (NVRTC needs no GPU)."""
from __future__ import annotations

from pathlib import Path

import pytest

from fraglab import ptx, toolchain

KERNEL_FILES = sorted((Path(__file__).resolve().parent.parent / "kernels").glob("*.cu"))
TARGETS = [(p, a) for p in KERNEL_FILES for a in sorted({"sm_80", ptx.interpreter_arch(p.stem)})]


@pytest.mark.parametrize("path,arch", TARGETS, ids=[f"{p.stem}-{a}" for p, a in TARGETS])
def test_every_opcode_is_supported(path, arch):
    prog = ptx.Program(toolchain.compile(path.stem, arch).ptx)     # parsed once for both
    used = ptx.opcodes(prog)
    assert used, f"{path.name}: no instructions found in its PTX"
    missing = ptx.unsupported_opcodes(prog)
    assert not missing, (f"{path.name} ({arch}): the PTX interpreter lacks "
                         + "; ".join(f"{op} ({why})" for op, why in sorted(missing.items())))
