"""One TMA copy as a building block (``kernels/10_fa3_pipelining_tma_tile.cu``): the raw
shared-memory bytes of one box of a 2- or 3-dimensional tensor, copied by
``cp.async.bulk.tensor`` with a tensor map from :mod:`fraglab.tma`; :func:`fraglab.tma.box_image`
is its NumPy model and :data:`TMA_TILE` the :class:`~fraglab.problem.Problem` that compares them
byte for byte (on the H100 and on the PTX interpreter alike).

    img = tma_tile(k, box=(1, 64, 64), coords=(3, 128, 0))     # uint8, 64 * 64 * 2 bytes
"""
from __future__ import annotations

import numpy as np

from .. import device, launch, tma
from ..problem import Case, Problem
from .config import ARCH, INSTEAD, SMEM_LIMIT

RANKS = (2, 3)
_FILE = "10_fa3_pipelining_tma_tile"


def max_box_bytes() -> int:
    """Shared memory one box may take here: the sm_90 opt-in limit less what the kernel file
    adds beside the box (``tma_tile_smem_extra``: the 1024 bytes of alignment) and 16."""
    extra = launch.constants(_FILE, "tma_tile_", arch=ARCH)["tma_tile_smem_extra"]
    return SMEM_LIMIT - extra - 16


def tma_tile(src, box, coords, swizzle: int = 128) -> np.ndarray:
    """The shared-memory image (uint8, ``prod(box) * itemsize`` bytes) of one tensor copy of
    ``src`` (2 or 3 dimensions, CuPy on a GPU, NumPy on the interpreter) with a box of ``box``
    elements at ``coords`` (both in NumPy order, outermost first; coordinates may be negative or
    past the end: those elements are 0), landed at a 1024-byte-aligned address with the
    ``swizzle`` (0, 32, 64, 128 bytes). Swizzled, a box row must be exactly the swizzle span
    (:func:`fraglab.tma.check`: narrower rows made the H100 write past the box's bytes)."""
    device.require(ARCH, "tma_tile", INSTEAD)
    launch.check_array("src", src)
    if src.ndim not in RANKS:
        raise ValueError(f"src must have 2 or 3 dimensions (kernels tma_tile_2d / _3d), got "
                         f"shape {src.shape}")
    try:
        coords = tuple(coords)
    except TypeError:
        raise TypeError(f"coords must be a tuple of integers, got {coords!r}") from None
    if len(coords) != src.ndim or not all(isinstance(c, (int, np.integer)) and
                                          not isinstance(c, (bool, np.bool_)) for c in coords):
        raise TypeError(f"coords must be {src.ndim} integers (NumPy order), got {coords!r}")
    for i, c in enumerate(coords):
        launch.check_range(f"coords[{i}]", int(c), -(1 << 31), (1 << 31) - 1)
    m = tma.tensor_map(src, box, swizzle=swizzle)        # box and swizzle checked there
    nbytes, k = m.box_bytes, launch.constants(_FILE, "tma_tile_", arch=ARCH)
    if nbytes > max_box_bytes():
        raise ValueError(f"the box takes {nbytes} bytes of shared memory; at most "
                         f"{max_box_bytes()} fit beside the {k['tma_tile_smem_extra']}-byte "
                         "alignment")
    if swizzle and nbytes % 128:
        raise ValueError(f"a swizzled box must fill whole 128-byte lines (the swizzle moves "
                         f"16-byte chunks within a line); this one has {nbytes} bytes")
    c = [int(x) for x in reversed(coords)] + [0]
    image = launch.poisoned((nbytes,), np.uint8)
    fn = launch.get_kernel(_FILE, f"tma_tile_{src.ndim}d", arch=ARCH)
    launch.launch(fn, 1, k["tma_tile_threads"], (m.device, src, image, np.int32(c[0]),
                                                 np.int32(c[1]), np.int32(c[2]), np.uint32(nbytes)),
                  shared_mem=k["tma_tile_smem_extra"] + nbytes)
    return image


# ---- the Problem ------------------------------------------------------------------------------

def _inputs(rng, shape, dtype, box, coords, swizzle):
    dt = np.dtype(dtype)
    if dt.kind == "f":                            # every bit pattern but NaNs (compared exactly)
        src = rng.standard_normal(shape).astype(dt)
    else:
        src = rng.integers(0, np.iinfo(dt).max, size=shape, dtype=dt)
    return dict(src=src, box=box, coords=coords, swizzle=swizzle)


def _requires(case: Case) -> tuple[bool, str]:
    return device.can_run(ARCH, instead=INSTEAD)


TMA_TILE = Problem(
    "10_fa3_pipelining/tma_tile",
    "one cp.async.bulk.tensor box in shared memory: swizzled, zeros outside the tensor",
    inputs=_inputs,
    reference=lambda src, box, coords, swizzle: tma.box_image(src, box, coords, swizzle),
    run=lambda src, box, coords, swizzle: tma_tile(launch.to_device(src), box, coords, swizzle),
    tol=0, requires=_requires, labels=("byte",),
    cases=(
        Case("2d f16 sw128", shape=(128, 64), dtype="float16", box=(64, 64), coords=(64, 0),
             swizzle=128),
        Case("2d f16 sw64", shape=(96, 96), dtype="float16", box=(32, 32), coords=(16, 32),
             swizzle=64),
        Case("2d f16 sw32", shape=(64, 48), dtype="float16", box=(32, 16), coords=(8, 16),
             swizzle=32),
        Case("2d f16 sw0 columns past the end", shape=(40, 72), dtype="float16", box=(16, 40),
             coords=(5, 48), swizzle=0, edge=True),
        Case("2d f32 sw128", shape=(100, 64), dtype="float32", box=(32, 32), coords=(40, 32),
             swizzle=128),
        Case("2d bf16 bits ragged rows", shape=(77, 64), dtype="uint16", box=(64, 64),
             coords=(64, 0), swizzle=128, edge=True),
        Case("2d f16 negative coords", shape=(64, 64), dtype="float16", box=(64, 64),
             coords=(-5, -16), swizzle=128, edge=True),
        Case("2d f16 entirely outside", shape=(64, 64), dtype="float16", box=(16, 64),
             coords=(200, 0), swizzle=128, edge=True),
        Case("3d f16 heads sw128", shape=(3, 80, 64), dtype="float16", box=(1, 64, 64),
             coords=(2, 64, 0), swizzle=128, edge=True),
        Case("3d f32 box of 2 heads", shape=(4, 16, 32), dtype="float32", box=(2, 8, 32),
             coords=(3, -2, 0), swizzle=128, edge=True),
        Case("2d f16 d256 panel", shape=(128, 256), dtype="float16", box=(64, 64),
             coords=(0, 192), swizzle=128),
        Case("2d f16 128x64 full", shape=(256, 64), dtype="float16", box=(128, 64),
             coords=(128, 0), swizzle=128),
    ))
