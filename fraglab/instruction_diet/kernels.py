"""Wrappers of the instruction-diet ladder (``kernels/09_instruction_diet_<variant>.cu``: the
rungs :data:`VARIANTS`, chosen with ``variant=``, :data:`FINAL` the last): what each changes, its
tiles, argument checks (those of chapter 05's ``fa2``,
:func:`fraglab.attention.check_fa2_arguments`), launchers for :mod:`fraglab.bench`.

Tensors are ``(B, H, N, d)`` C-contiguous arrays (CuPy on a GPU, NumPy on the interpreter):
``float16``, or ``uint16`` holding bf16 bit patterns; d 64 or 128; any N >= 1.
"""
from __future__ import annotations

import numpy as np

from .. import launch, toolchain
from ..attention import LOG2E, check_fa2_arguments, fa2_output

#: What each rung changes, in ladder order, one line each (the chapter's table).
CHANGES = {
    "fa2": "chapter 05's FA-2 kernel (4 warps, 16 query rows a warp) through the header",
    "strided_swizzle": "seed kernel 8: K/V ldmatrix offsets as one offset XOR a constant",
    "strided_store": "seed kernel 11: the same XOR trick for the epilogue's stores of O",
    "pointer_loads": "whole K/V tiles copied without row checks: one base + immediates",
    "rows32": "32 query rows a warp: each K/V fragment feeds 4 HMMAs (d=128: 32-key tiles)",
    "two_stage": "two K/V buffers: tile j+1 copied during all of tile j, one barrier a tile",
    "wide_keys": "64-key tiles at d=128 too: twice the HMMAs per tile's fixed work",
    "skip_rescale": "no-op work skipped: O rescale unless a row max moved, unseen causal tiles",
    "rowsum_mma": "d=128: row sums l as P x ones on the tensor cores, no FADD per score",
    "short_causal": "16 rows a warp again, for causal problems of few 128-row blocks",
    "lazy_rescale": "a row max moves only when beaten by > 8 (log2): the rescale ~never runs",
}

#: The rungs, in order: the keys of CHANGES. Each ``kernels/09_instruction_diet_<variant>.cu``
#: adds one switch of ``kernels/09_instruction_diet.cuh`` to the rung before.
VARIANTS = tuple(CHANGES)
FINAL = VARIANTS[-1]

#: The seed's steps (its kernels 8-11) and where each went in this ladder: a variant, or why
#: it does not apply (the chapter shows the SASS evidence: :func:`.classes.seed_evidence`).
SEED_STEPS = {
    "kernel 8, strided swizzling": "strided_swizzle",
    "kernel 9, fragments without redundant register copies":
        "does not apply: P goes from the accumulators to the A operand with one F2FP per pair "
        "and no MOV (chapter 05), so there is no copy to remove",
    "kernel 10, no CS2R, first softmax iteration peeled":
        "does not apply: ptxas already starts every S accumulator with RZ as the C operand "
        "(no CS2R); a peeled first tile would save one O rescale per block",
    "kernel 11, strided swizzling for the RF -> SMEM store": "strided_store",
}

HEAD_DIMS = (64, 128)
#: ``short_causal``: causal problems of at most this many 128-row blocks (ceil(N / 128) B H) run
#: the 16-rows-a-warp kernel: 512 is about two waves of 2 blocks on an H100's 132 SMs.
M16_MAX_BLOCKS = 512
#: The name the lab's sources compile under.
LAB_FILE = "09_instruction_diet_lab"


def check_variant(variant: str) -> str:
    launch.check_choice("variant", variant, VARIANTS)
    return variant


def kernel_file(variant: str) -> str:
    """``09_instruction_diet_<variant>`` (the name :func:`fraglab.toolchain.compile` takes)."""
    return f"09_instruction_diet_{check_variant(variant)}"


def kernel_name(variant: str, dtype: str, d: int, m16: bool = False) -> str:
    """The kernel's name in its rung file: ``diet_<variant>_<dtype>_d<d>`` (``m16``: the 16-row
    kernel of a variant whose config has one, ``diet_<variant>_m16_<dtype>_d<d>``)."""
    launch.check_choice("dtype", dtype, ("f16", "bf16"))
    launch.check_choice("head dimension d", d, HEAD_DIMS)
    return f"diet_{check_variant(variant)}{'_m16' if m16 else ''}_{dtype}_d{d}"


def file_constants(variant: str) -> dict[str, int]:
    """The ``diet_*`` launch constants of ``variant``'s file (``diet_threads``; per head
    dimension D ``diet_d<D>_rows``, ``_key_tile``, ``_smem``, and ``diet_m16_d<D>_*`` where the
    rung has 16-rows-a-warp kernels), read from its compiled module
    (:meth:`fraglab.toolchain.Build.constants`; any target gives the same numbers)."""
    return toolchain.compile(kernel_file(variant), launch.INTERPRETER_ARCH).constants("diet_")


def _prefix(d: int, m16: bool) -> str:
    return f"diet{'_m16' if m16 else ''}_d{d}_"


def has_m16(variant: str) -> bool:
    """Whether ``variant``'s file has the 16-rows-a-warp kernels (``DIET_SHORT_CAUSAL``)."""
    return "diet_m16_d64_rows" in file_constants(variant)


def uses_m16(variant: str, n: int, causal: bool, heads: int) -> bool:
    """Whether ``variant`` runs its 16-row kernel at this size (see :data:`M16_MAX_BLOCKS`)."""
    return bool(causal and -(-n // 128) * heads <= M16_MAX_BLOCKS and has_m16(variant))


def block_rows(variant: str, m16: bool = False) -> int:
    """Query rows per block (``Cfg::BM``): 16 or 32 per warp, 4 warps."""
    return file_constants(variant)[_prefix(64, m16) + "rows"]


def keys_per_tile(variant: str, d: int, m16: bool = False) -> int:
    """Keys per K/V tile (``Cfg::BN``): 64, or 32 with 32 rows a warp at d = 128 unless the rung
    has wide key tiles."""
    return file_constants(variant)[_prefix(d, m16) + "key_tile"]


def smem_bytes(variant: str, d: int, m16: bool = False) -> int:
    """Dynamic shared memory of a block (``Cfg::SMEM``: Q and the K and V buffers)."""
    return file_constants(variant)[_prefix(d, m16) + "smem"]


def build(variant: str, arch=None) -> toolchain.Build:
    """The compiled rung (for ``arch``, default the current target)."""
    return toolchain.compile(kernel_file(variant), arch)


def attention_launcher(q, k, v, *, causal: bool = False, variant: str = FINAL,
                       scale: float | None = None, out=None, source: str | None = None):
    """Check everything (as chapter 05's ``fa2``), allocate the poisoned output,
    and return ``(run, out)``: ``run()`` launches the variant's kernel once (for timing loops).
    ``source`` (the lab): a CUDA source defining ``diet_lab_<dtype>_d<d>`` with ``variant``'s
    tiles, compiled under the name :data:`LAB_FILE` instead of the rung file."""
    check_variant(variant)
    dtype, (b, h, n, d), sc = check_fa2_arguments(q, k, v, causal, scale)
    out = fa2_output(q, out)
    m16 = source is None and uses_m16(variant, n, causal, b * h)
    if source is None:
        name, kernel = kernel_file(variant), kernel_name(variant, dtype, d, m16)
    else:
        if not isinstance(source, str):
            raise TypeError(f"source must be a str of CUDA code, got {type(source).__name__}")
        name, kernel = LAB_FILE, f"diet_lab_{dtype}_d{d}"
    fn = launch.get_kernel(name, kernel, source=source)
    c = launch.constants(name, "diet_", source=source)
    p = _prefix(d, m16)
    args = (q, k, v, out, np.int32(n), np.float32(sc * LOG2E), np.int32(bool(causal)))
    grid, threads, smem = (-(-n // c[p + "rows"]), b * h), c["diet_threads"], c[p + "smem"]
    return (lambda: launch.launch(fn, grid, threads, args, shared_mem=smem)), out


def attention(q, k, v, *, causal: bool = False, variant: str = FINAL, scale: float | None = None):
    """softmax(Q K^T * scale) V by rung ``variant`` of :data:`VARIANTS` (default :data:`FINAL`).
    ``q``, ``k``, ``v``: (B, H, N, d) float16, or uint16 holding bf16; d 64 or 128; any N >= 1; ``causal``
    masks keys after the query; ``scale`` defaults to 1/sqrt(d). Returns O (same dtype, shape)."""
    run, out = attention_launcher(q, k, v, causal=causal, variant=variant, scale=scale)
    run()
    return out
