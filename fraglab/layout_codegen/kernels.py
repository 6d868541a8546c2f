"""GPU wrappers of ``kernels/06_layout_codegen.cu``: the generated reductions and the row broadcast,
from the committed header or from code generated for a layout given at run time."""
from __future__ import annotations

import numpy as np

from .. import fragments, launch
from .emit import KERNELS, harness_source
from .plan import NP_TYPES, OPS, accumulator_kind, plan

MAX_TILES = 2**31 - 1


def warps_per_block() -> int:
    """Warps (tiles) per block: the file's ``warps_per_block``, read from the compiled module
    (:func:`fraglab.launch.constants`; a generated harness keeps the file's)."""
    return launch.constants(KERNELS, "warps_per_block")["warps_per_block"]


def reduce_kernel(kind, op) -> str:
    """The name of the reduction kernel of ``kind`` and operator ``op``."""
    kd = fragments.get_kind(kind)
    launch.check_choice("operator", op, OPS)
    return f"reduce_{kd.name}_{op}"


def broadcast_kernel(kind, op) -> str:
    """The name of the row-broadcast kernel of ``kind`` and operator ``op``."""
    return "bcast" + reduce_kernel(kind, op)[len("reduce"):]


def _prepare(kind, acc, op, layout):
    """Check the arguments (a user layout before any GPU work); (kind, tiles, source or None)."""
    kd = accumulator_kind(kind)
    launch.check_choice("operator", op, OPS)
    p = plan(kd, layout) if layout is not None else None
    launch.check_array("acc", acc, dtype=NP_TYPES[kd.dtype], shape=(None,) + kd.shape)
    launch.check_aligned("acc", acc, 32, "WMMA loads need it")
    n = launch.check_range("the number of tiles", int(acc.shape[0]), 1, MAX_TILES)
    fragments.require_supported(kd)
    return kd, n, (harness_source(p) if p is not None else None)


def _run(kernel_name, kd, n, src, acc, out_shapes):
    """Launch one warp per tile on ``acc`` with poisoned outputs of ``out_shapes``."""
    fn = launch.get_kernel(KERNELS, kernel_name, source=src)
    outs = tuple(launch.poisoned(s, NP_TYPES[kd.dtype]) for s in out_shapes)
    warps = warps_per_block()
    launch.launch(fn, -(-n // warps), 32 * warps, (acc, *outs, np.int32(n)))
    return outs


def reduce(kind, acc, op: str, *, layout=None):
    """Row and column reductions of accumulator tiles by the generated code: ``acc`` is a CuPy
    array (n_tiles, M, N) of the kind's type; one warp loads a tile with ``load_matrix_sync`` and
    runs ``store_rows``/``store_cols``. ``layout``: generate for this table instead of the
    committed header. Returns ``(rows (n, M), cols (n, N))``, poisoned before the launch."""
    kd, n, src = _prepare(kind, acc, op, layout)
    m, k = kd.shape
    return _run(reduce_kernel(kd, op), kd, n, src, acc, ((n, m), (n, k)))


def broadcast_rows(kind, acc, op: str, *, layout=None):
    """``(copy, bcast)``, both (n, M, N): ``copy`` is each tile written back by the generated
    forward-mapped ``store``; ``bcast`` has every element replaced by its row's reduction
    (``reduce_rows`` + ``expand_rows`` + ``store``)."""
    kd, n, src = _prepare(kind, acc, op, layout)
    return _run(broadcast_kernel(kd, op), kd, n, src, acc, (acc.shape, acc.shape))
