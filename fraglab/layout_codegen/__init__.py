"""Topic 06_layout_codegen: from a fragment layout to CUDA register code, automatically.

The in-register WMMA paper (Morales, 2025) ends (section 6) with a wish: a tool that discovers the
data layout of a WMMA fragment on a given GPU and writes the in-register permutation and reduction
code for it. Chapters 1-3 did each step by hand; this module does them mechanically.

    >>> from fraglab import layout_codegen as lc
    >>> p = lc.plan("acc_16x16x16_f32")      # the recording of this GPU's arch (sm_90 without one)
    >>> p.rows.offsets, p.rows.groups         # butterfly lane offsets, registers folded per row
    ((1, 2), ((0, 1, 4, 5), (2, 3, 6, 7)))
    >>> print(lc.generate(p))                 # CUDA source: a struct of device functions
    >>> lc.plan(kind, tracer.layout(kind), source=tracer.source_line())   # traced live (chapter 1)

How a plan is derived from a (32, n_regs, 2) table ``layout[lane, reg] = (row, col)``, for rows
(columns are the same with the roles swapped):

1. **Register groups.** In each lane, the registers holding elements of the same row form a
   group. Straight-line code needs the same grouping in every lane (checked).
2. **Lanes of a row.** The lanes holding row ``r`` must form a coset ``l0 ^ V`` of a subspace
   ``V`` of the 5-bit lane ids (closed under XOR), the same ``V`` for every row, and a lane and
   its partner ``l ^ v`` must hold the row in the same group. Then a butterfly of
   ``__shfl_xor_sync`` over a basis of ``V`` combines exactly the lanes of each row, and leaves the
   result in all of them. For the WMMA accumulators ``V`` is spanned by single lane bits (the
   lane bits that vary along a row); for a layout whose lanes are XOR-mixed the offsets are not
   powers of two, and the butterfly still works. When the lanes of a row are not such a coset,
   :class:`CodegenError` says which row, which lanes, and why no butterfly can reduce it.
3. **Where results go.** The row index of group ``g`` in lane ``l`` is written as an affine
   function of the lane bits over GF(2) (``c ^ bit0*m0 ^ bit1*m1 ...``, printed as shifts and
   masks); a layout where it is not affine gets bit-sliced 32-bit constants instead.

Generated per kind (a ``struct`` in namespace ``fraglab_gen``, templated on the operator, which
may be any associative ``struct { static T apply(T, T); }``; ``Max``, ``Min`` and ``Sum`` come
with the header): ``reduce_rows`` / ``reduce_cols`` (register fold + butterfly, the result in
every lane holding the line), ``store_rows`` / ``store_cols`` (reduce, then one lane per line
writes ``out[line]``), ``expand_rows`` / ``expand_cols`` (broadcast: every register of line
``r`` gets the line's value, as a softmax needs), ``store`` (the forward-mapped store
``tile[row * ld + col] = x[i]``) and ``row_of`` / ``col_of``.

Pieces, one module each: :mod:`.plan` (:func:`plan` / :func:`plan_from_layout`: derive),
:mod:`.lane_expr` (per-lane values as C++ expressions), :mod:`.emit` (:func:`generate` /
:func:`header` / :func:`harness_source`: emit), :mod:`.emulate` (:func:`emulate_rows` /
:func:`emulate_cols` / :func:`emulate_expand_rows` / :func:`emulate_store`: run a plan on
:mod:`fraglab.warp`; :func:`reference`), :mod:`.kernels` (the GPU wrappers :func:`reduce` and
:func:`broadcast_rows` of ``kernels/06_layout_codegen.cu``), :mod:`.problems` (:data:`PROBLEMS`:
those kernels for every kind and operator, as the tests check them), :mod:`.plots`
(:func:`plot_lane_bits`: the lane and register bits of a plan's layout, :func:`bit_map`) and
:mod:`.cli`.

Command line::

    python -m fraglab.layout_codegen show KIND [--arch sm_90]   # the plan and the code
    python -m fraglab.layout_codegen header [--check]           # (re)write the committed header
"""
from .cli import main  # noqa: F401
from .emit import (GUARD, HEADER_ARCH, HEADER_PATH, KERNELS, generate, harness_source,  # noqa: F401
                   header, header_is_current)
from .emulate import (emulate_cols, emulate_expand_rows, emulate_reduce, emulate_rows,  # noqa: F401
                      emulate_store, fragments, reference)
from .kernels import (MAX_TILES, broadcast_kernel, broadcast_rows, reduce,  # noqa: F401
                      reduce_kernel, warps_per_block)
from .plan import (CTYPES, KINDS, NP_TYPES, OPS, SM80_INPUTS, CodegenError, LinePlan,  # noqa: F401
                   Plan, check_layout, plan, plan_from_layout)
from .plots import bit_map, plot_lane_bits  # noqa: F401
from .problems import PROBLEMS  # noqa: F401
