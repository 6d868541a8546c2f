"""Topic 03_permutation_and_quad_reduction: row and column reductions of a WMMA accumulator in
registers (the swap of Fig. 2 and the quad reduction of Algorithm 3 of the in-register WMMA paper).

Parts:

* **Layouts** as bit permutations (:mod:`.layouts`: :data:`SPECS`, :func:`layout_from_spec`,
  :func:`spec_from_layout`): in the f32 accumulators of 16x16, 32x8 and 8x32 tiles, each lane-id
  bit and each register-index bit selects one bit of the row or of the column.
* **Emulator versions** on :mod:`fraglab.warp` (:mod:`.emulate`): :func:`permute_fig2`,
  :func:`quad_reduce` (Algorithm 3, generic operator, per-lane quad masks or the full mask),
  :func:`reduce_lines` (any bit layout, rows or columns) and :func:`reduce_tiles` (exactly what
  the kernels compute, in the same order, so results agree bit for bit).
* **Kernel names** (:mod:`.names`) and **wrappers** of
  ``kernels/03_permutation_and_quad_reduction.cu`` (:mod:`.kernels`): :func:`reduce_accumulators`
  (reduce chosen accumulator values), :func:`mma_reduce` (C = A @ B on the tensor cores, then
  its reductions), :func:`rowmax` (its rungs :data:`VARIANTS`, shared memory then registers,
  chosen with ``variant=``; :data:`FINAL` the last), :func:`accumulator_layout_on_gpu`.
* **Problems** (:mod:`.problems`): :data:`PROBLEMS`, every GPU case the tests check.

SASS views come from :mod:`fraglab.sass` (``normalized_listing``, ``main_path``; re-exported
here for callers of the earlier names).
"""
from ..dtypes import from_bf16, to_bf16  # noqa: F401  (bf16 bit patterns for mma_reduce)
from ..sass import main_path, normalized_listing  # noqa: F401
from .emulate import (OPERATORS, operator, permute_fig2, quad_reduce, reduce_lines,  # noqa: F401
                      reduce_tiles, reference, rows_16x16, tiles_to_fragments)
from .kernels import (MAX_TILES, accumulator_layout_on_gpu, mma_reduce,  # noqa: F401
                      reduce_accumulators, rowmax, run_per_tile)
from .layouts import (FIG2_ORDER, QUAD_MASKS, SHAPES, SPECS, check_shape,  # noqa: F401
                      layout_from_spec, spec_from_layout)
from .names import (DTYPES, FINAL, KERNELS, MASKS, MMA_OPS, OPS, VARIANTS,  # noqa: F401
                    mma_reduce_kernel, reduce_acc_kernel, rowmax_kernel, warps_per_block)
from .problems import PROBLEMS, edge_tiles  # noqa: F401
