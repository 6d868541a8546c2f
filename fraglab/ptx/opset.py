"""Every opcode handler of the interpreter, loaded: :func:`table` is what decoding uses."""
from __future__ import annotations

from . import (calls, collectives, hopper, mbarrier, ops_bits, ops_ctrl, ops_cvt,  # noqa: F401
               ops_float, ops_int, ops_mem, tensor, wgmma)
from .registry import HANDLERS


def table() -> dict:
    """Base opcode -> decoder ``(instr, DecodeContext) -> Op or closure``."""
    return HANDLERS
