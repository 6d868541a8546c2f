"""Opcode coverage: every instruction NVRTC emits for the course's kernels (sm_80) must be one the
PTX interpreter can run. CPU only (NVRTC needs no GPU)."""
from __future__ import annotations

from pathlib import Path

import pytest

from fraglab import ptx, toolchain

KERNEL_FILES = sorted((Path(__file__).resolve().parent.parent / "kernels").glob("*.cu"))


@pytest.mark.parametrize("path", KERNEL_FILES, ids=[p.stem for p in KERNEL_FILES])
def test_every_opcode_is_supported(path):
    text = toolchain.compile(path.stem, "sm_80").ptx
    used = ptx.opcodes(text)
    assert used, f"{path.name}: no instructions found in its PTX"
    missing = ptx.unsupported_opcodes(text)
    assert not missing, (f"{path.name}: the PTX interpreter lacks "
                         + "; ".join(f"{op} ({why})" for op, why in sorted(missing.items())))
