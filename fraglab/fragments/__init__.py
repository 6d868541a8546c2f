"""Fragments: the one home of the WMMA fragment-kind catalogue and of the documented layouts.

- :mod:`fraglab.fragments.documented` - the layouts the PTX ISA documents (mma.m16n8k16) and the
  16x16 WMMA accumulator built from them.
"""
from .documented import (ACC16_ROW_REGS, mma_m16n8k16, row_registers,  # noqa: F401
                         wmma_16x16_accumulator)
