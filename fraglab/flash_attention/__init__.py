"""Topic 05_flash_attention: the in-register softmax inside attention kernels.

Section 5 of the in-register WMMA paper (Morales 2025) runs its softmax (Alg. 4) on the
accumulator fragment of ``S = Q K^T`` inside a FlashAttention-1 style kernel and reports 1.36x
over a shared-memory softmax on an H100 (Table 6). This package has one module per job:

* :mod:`.reference` (NumPy): :func:`online_softmax_attention`, the online softmax (running max
  ``m``, running sum ``l``, rescaled output) in its FA-1 form (``O`` normalized after every key
  block, as in Alg. 4) and its FA-2 form (normalized once at the end), beside the float64
  :func:`attention_reference`.
* :mod:`.emulate_fa1` (Alg. 4 in the warp emulator): :func:`alg4_step` runs one key tile of the
  softmax on a 16x16 f32 accumulator fragment (:func:`fraglab.fragments.wmma_16x16_accumulator`)
  with quad reductions; :func:`emulate_fa1_rows` runs a whole FA-1 sweep for 16 query rows with it.
* :mod:`.emulate_fa2` (mma.m16n8k16 in the emulator, with the PTX ISA's fragment layouts
  :func:`fraglab.fragments.mma_m16n8k16`): why P can go from the accumulators of ``S`` straight
  into the A operand of ``P V`` (:func:`p_as_a_operand`), ``ldmatrix`` on swizzled shared memory
  (:class:`SwizzledTile`) and :func:`emulate_fa2`, which follows the FA-2 kernel lane by lane
  with the same addresses.
* :mod:`.kernels` (wrappers) of ``kernels/05_flash_attention_fa1.cu`` (:func:`fa1`, its rungs
  :data:`VARIANTS` chosen with ``variant=``: ``paper_baseline``, ``fair_baseline``, ``inregister``
  = :data:`FINAL`) and ``kernels/05_flash_attention_fa2.cu``
  (:func:`fa2`: f16/bf16, head dimension 64/128, causal or not, any sequence length).
* :mod:`.problems`: :data:`PROBLEMS`, the kernels with their reference, tolerance and cases.
* :mod:`.lab`: for lab 05, :func:`fa1_lab_source` builds the in-register FA-1 kernel around a
  softmax step written elsewhere (``fa1(..., softmax_source=...)`` runs it).
* :mod:`.bench`: ``python -m fraglab.flash_attention bench --out DIR``
  (about ten seconds plus compilation on an H100, at most 3 minutes): the paper's pair at its
  size, the fair pair, and the FA-2 kernel's TFLOP/s next to PyTorch's
  ``scaled_dot_product_attention`` (flash backend). See :func:`run_bench`.
* :mod:`.plots`: :func:`plot_fa2_tiles`, the FA-2 kernel's tiles and data flow drawn to scale
  from the tile sizes it launches with (:func:`fa2_tiles`).
* :mod:`.report`: reading the record for chapter 5: the numbers its prose glues
  (:func:`glue_values`), its tables as HTML, the clock-cap count (:func:`throttling`), the
  reproduce-or-refute rows, and :func:`expected_rescalings` (H_n - 1).

Tensors are ``(B, H, N, d)`` C-contiguous CuPy arrays: ``float16``, or ``uint16`` holding bf16
bit patterns (:func:`to_bf16`, :func:`from_bf16`; CuPy has no bfloat16 dtype). Values are rounded
to an element type with :func:`round_to` (:func:`fraglab.dtypes.round_to`, re-exported here).

What every attention chapter shares (argument checks, :func:`random_qkv`, :func:`as_float`, the
float64 reference, tolerances, the ``Problem`` factory, PyTorch's SDPA, :func:`attention_flops`)
lives in the core package :mod:`fraglab.attention`; the names the chapter and its lab use are
re-exported here.
"""
from ..attention import as_float, attention_flops, random_qkv  # noqa: F401  (re-exported)
from ..dtypes import from_bf16, round_to, to_bf16  # noqa: F401  (re-exported)
from .bench import run_bench, summary_table  # noqa: F401
from .cli import main  # noqa: F401
from .constants import (DTYPES, FA1_HEAD_DIMS, FA1_TILE, FA2_BN, FA2_HEAD_DIMS,  # noqa: F401
                        FA2_WARPS, FINAL, KERNELS_FA1, KERNELS_FA2, LOG2E, MAX_BH, MAX_N,
                        VARIANTS)
from .emulate_fa1 import alg4_step, emulate_fa1_rows, quad_allreduce  # noqa: F401
from .emulate_fa2 import (SwizzledTile, emulate_fa2, fa2_tile_ranges,  # noqa: F401
                          k_fragment_address, mma_m16n8k16, p_as_a_operand, q_fragment_address,
                          swizzle_offset, v_fragment_address)
from .kernels import (fa1, fa1_kernel, fa1_launcher, fa1_smem_bytes, fa2, fa2_kernel,  # noqa: F401
                      fa2_launcher, fa2_smem_bytes)
from .lab import FA1_LAB_NAME, FA1_LAB_STEP, FA1_LAB_TAIL, fa1_lab_source  # noqa: F401
from .plots import fa2_tiles, plot_fa2_tiles  # noqa: F401
from .problems import PROBLEMS  # noqa: F401
from .report import (expected_rescalings, fa1_html, fa2_html, glue_values,  # noqa: F401
                     throttling, verdicts, verdicts_html)
from .reference import attention_reference, online_softmax_attention, softmax_scale  # noqa: F401
