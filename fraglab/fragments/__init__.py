"""Fragments: the one home of the WMMA fragment-kind catalogue and of the documented layouts.

- :mod:`fraglab.fragments.catalogue` - every WMMA fragment kind (``KINDS``, ``get_kind``,
  ``kinds``, ``supported``), element types (``TYPES``, ``CPP_TYPES``) and the arrays a kind's
  store kernel takes (``STORE_TYPES``); the same list as ``kernels/fragment_kinds.cuh``.
- :mod:`fraglab.fragments.documented` - the layouts the PTX ISA documents (mma.m16n8k16) and the
  16x16 WMMA accumulator built from them.
- :mod:`fraglab.fragments.recording` - the layouts traced on real GPUs (``fraglab/layouts``);
  import it by name (``from fraglab.fragments import recording``): it is not re-exported here,
  because it checks tables with :mod:`fraglab.warp`, which uses :mod:`.documented`.
- :mod:`fraglab.fragments.formulas` and :mod:`fraglab.fragments.fit` - formulas in the bits of
  lane and register index, fitted exactly to a layout (chapter 02's subject, which the tracer
  prints too); imported by name, like ``recording`` and for the same reason.
"""
from .catalogue import (CPP_TYPES, KINDS, NUMPY_TYPES, STORE_TYPES, TYPES, USES,  # noqa: F401
                        ElemType, Kind, UnsupportedKind, get_kind, kind_name, kinds,
                        num_elements_table, require_supported, supported)
from .documented import (ACC16_ROW_REGS, mma_m16n8k16, row_registers,  # noqa: F401
                         wmma_16x16_accumulator)
