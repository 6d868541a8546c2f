"""From a traced table to a formula, and the forward-mapped store (topic 02_forward_mapping).

A traced layout is a table ``layout[lane, i] = (row, col)``. For the tensor-core fragments the
table is not arbitrary: each coordinate is a sum of the bits of ``lane`` and of ``i`` with
integer weights. The paper's equations (1)-(2) for the 16x16 accumulator read::

    row = lane/4 + 8*((i>>1)&1)
    col = 2*(lane%4) + (i%2) + 8*(i>>2)

that is row = 1*bit2(lane) + 2*bit3(lane) + 4*bit4(lane) + 8*bit1(i), and so on.

:func:`fit` finds such a formula for any table, exactly: with ``lane`` and ``i`` both zero the
formula gives its constant; setting one bit at a time gives that bit's weight; then the formula
is checked on *every* slot of the table. If the check fails, the table is not affine in the
bits; :func:`fit` then tries the other natural model, XOR of bits (swizzles), and reports a
kind that fits neither as such (:class:`NotAffine`).

Parts:

* :mod:`fraglab.fragments.formulas` - :class:`BitFormula`, :class:`XorFormula`, :class:`Mapping`,
  :class:`InverseMapping`: formulas in the bits of two integers, as text, CUDA and kernel weights.
* :mod:`fraglab.fragments.fit` - :func:`fit`, :func:`fit_inverse`, :func:`inverse`,
  :func:`describe_fit`. These two are core modules (the tracer prints the fit too), re-exported
  here.
* :mod:`.paper` - the paper's equations (:func:`eq12`, :func:`eq12_inverse`) against the PTX ISA's
  documented ``mma.m16n8k16`` C fragment, two of which make the 16x16 WMMA accumulator.
* :mod:`.store` - GPU: :func:`forward_store`, the wrapper of ``kernels/02_forward_mapping.cu``
  (Algorithm 2: store an accumulator with the formula, compared bit for bit with
  ``store_matrix_sync``).
* :mod:`.problems` - :data:`PROBLEMS`: the store kernels against a float64 reference.

Layouts come from :mod:`fraglab.fragments` (the kinds, the recorded and the documented layouts),
not from the tracer.
"""
from ..fragments import STORE_TYPES  # noqa: F401
from ..fragments.fit import (describe_fit, fit, fit_inverse, inverse, probe_affine,  # noqa: F401
                             probe_xor)
from ..fragments.formulas import (LANE_BITS, REG_BITS, BitFormula, InverseMapping,  # noqa: F401
                                  Mapping, NotAffine, XorFormula)
from .paper import eq12, eq12_inverse, ptx_m16n8k16_c, wmma16x16_from_ptx  # noqa: F401
from .problems import PROBLEMS  # noqa: F401
from .store import EQ12_KINDS, KERNELS, check_mapping, forward_store  # noqa: F401
