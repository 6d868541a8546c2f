"""The kernels of ``kernels/03_permutation_and_quad_reduction.cu`` by name, and the choices that
select them (no GPU needed)."""
from __future__ import annotations

import numpy as np

from .. import launch
from .layouts import check_shape

KERNELS = "03_permutation_and_quad_reduction"
OPS = ("max", "min", "sum", "max_cmp")   # kernels reducing given accumulator values
MMA_OPS = ("max", "min", "sum")          # kernels reducing A @ B
MASKS = ("group", "full")                # per-lane group masks (the paper's) or 0xffffffff
DTYPES = ("f16", "bf16")
#: The rungs of the row maximum of A @ B, in order, chosen with ``variant=``: through shared
#: memory (the textbook way), then in registers (Fig. 2 + Algorithm 3) with the paper's quad
#: masks, then with the full mask; :data:`FINAL` is the last.
VARIANTS = ("shared", "quadmask", "fullmask")
FINAL = VARIANTS[-1]


def warps_per_block() -> int:
    """Warps (tiles) per block of every kernel of the file: its ``warps_per_block``, read from
    the compiled module (:func:`fraglab.launch.constants`; a learner's source keeps the file's
    contract: tile ``k * warps_per_block + w`` for warp ``w`` of block ``k``)."""
    return launch.constants(KERNELS, "warps_per_block")["warps_per_block"]


def _shape_name(shape) -> str:
    m, n = check_shape(shape)
    return f"{m}x{n}"


def reduce_acc_kernel(shape, op, permute: bool = True, mask: str = "group") -> str:
    """Name of the kernel reducing given accumulator values of ``shape`` with ``op``."""
    name = _shape_name(shape)
    launch.check_choice("op", op, OPS)
    launch.check_choice("mask", mask, MASKS)
    if not isinstance(permute, (bool, np.bool_)):
        raise TypeError(f"permute must be True or False, got {permute!r}")
    if name == "16x16":
        return f"reduce_acc_16x16_{op}_{'perm' if permute else 'direct'}_{mask}"
    if not permute:
        raise ValueError("the Fig. 2 permutation exists for 16x16 tiles only; the 32x8 and 8x32 "
                         "kernels reduce in place (leave permute=True)")
    return f"reduce_acc_{name}_{op}_{mask}"


def mma_reduce_kernel(shape, dtype: str, op) -> str:
    """Name of the kernel computing A @ B for ``shape`` and reducing it with ``op``."""
    name = _shape_name(shape)
    launch.check_choice("dtype", dtype, DTYPES)
    return f"mma_reduce_{name}_{dtype}_{launch.check_choice('op', op, MMA_OPS)}"


def rowmax_kernel(variant: str) -> str:
    """Name of the kernel computing the row maxima of A @ B by ``variant`` (:data:`VARIANTS`)."""
    return f"rowmax_{launch.check_choice('variant', variant, VARIANTS)}_16x16"
