"""Wrappers of ``kernels/03_permutation_and_quad_reduction.cu``: reductions of given accumulator
values, of A @ B computed on the tensor cores, the row maxima three ways, and the layout check."""
from __future__ import annotations

import numpy as np

from .. import device, launch
from .layouts import SHAPES, check_shape, spec_from_layout
from .names import (DTYPES, FINAL, KERNELS, MMA_OPS, OPS, MASKS, warps_per_block,
                    mma_reduce_kernel, reduce_acc_kernel, rowmax_kernel)

MAX_TILES = 2**31 - 1
#: load_matrix_sync needs 256-bit aligned tile pointers. Tiles are 256 bytes or larger, so an
#: aligned base keeps every tile aligned: CuPy's allocations are, offset views may not be.
_WMMA_ALIGN = 32


def _defines(shape, layout) -> dict | None:
    if layout is None:
        return None
    m, n = shape
    if (m, n) == (16, 16):
        raise ValueError("layout= applies to the 32x8 and 8x32 kernels; the 16x16 code is "
                         "written for the documented m16n8k16 layout")
    spec = spec_from_layout(layout, (m, n))
    return {f"FRAGLAB_SPEC_{m}X{n}": f"0x{spec:08X}u"}


def _check_tiles(n: int) -> int:
    return launch.check_range("the number of tiles", int(n), 1, MAX_TILES)


def _aligned(name: str, a) -> None:
    launch.check_aligned(name, a, _WMMA_ALIGN, "WMMA loads need it")


def _launch_tiles(kernel: str, n_tiles: int, arrays: tuple, out_lines: tuple, *,
                  defines=None, source=None):
    """Launch ``kernel`` with one warp per tile on ``arrays``, then poisoned float32 outputs of
    (n_tiles, lines) for each entry of ``out_lines``; returns the outputs."""
    fn = launch.get_kernel(KERNELS, kernel, defines=defines, source=source)
    outs = tuple(launch.poisoned((n_tiles, lines), np.float32) for lines in out_lines)
    warps = warps_per_block()
    launch.launch(fn, -(-n_tiles // warps), 32 * warps, (*arrays, *outs, np.int32(n_tiles)))
    return outs


def reduce_accumulators(acc, op: str, *, permute: bool = True, mask: str = "group",
                        layout=None):
    """Row and column reductions of given accumulator values: ``acc`` is a float32 CuPy array
    (n_tiles, M, N) with (M, N) in :data:`SHAPES`; each warp loads one tile with
    ``load_matrix_sync`` and reduces it in registers. Returns ``(rows (n, M), cols (n, N))``.

    ``op`` in :data:`OPS`; ``permute`` (16x16 only): Fig. 2 + Algorithm 3, or the same reduction
    without the swap; ``mask``: the paper's per-lane group masks or the full mask. ``layout``
    (32x8/8x32): a traced (32, 8, 2) layout table to compile the kernel for, instead of the
    default bit layout.
    """
    launch.check_choice("op", op, OPS)
    launch.check_choice("mask", mask, MASKS)
    launch.check_array("acc", acc, dtype=np.float32, ndim=3)
    _aligned("acc", acc)
    shape = tuple(int(s) for s in acc.shape[1:])
    if shape not in SHAPES:
        raise ValueError(f"acc must have shape (n_tiles, M, N) with (M, N) in {list(SHAPES)}, "
                         f"got {acc.shape}")
    n = _check_tiles(acc.shape[0])
    kernel = reduce_acc_kernel(shape, op, permute, mask)
    return _launch_tiles(kernel, n, (acc,), shape, defines=_defines(shape, layout))


def _check_inputs(a, b, dtype: str) -> tuple[tuple[int, int], int]:
    launch.check_choice("dtype", dtype, DTYPES)
    want = np.float16 if dtype == "f16" else np.uint16
    hint = "" if dtype == "f16" else " (bf16 bit patterns: see to_bf16)"
    try:
        launch.check_array("a", a, dtype=want, ndim=3)
        launch.check_array("b", b, dtype=want, ndim=3)
    except TypeError as e:
        raise TypeError(f"{e}{hint}") from None
    m, k = a.shape[1:]
    k2, n = b.shape[1:]
    if k != 16 or k2 != 16 or (m, n) not in SHAPES:
        raise ValueError(f"a must have shape (n_tiles, M, 16) and b (n_tiles, 16, N) with (M, N) "
                         f"in {list(SHAPES)}; got a {a.shape}, b {b.shape}")
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"a and b must hold the same number of tiles, got {a.shape[0]} and "
                         f"{b.shape[0]}")
    _aligned("a", a)
    _aligned("b", b)
    return (m, n), _check_tiles(a.shape[0])


def mma_reduce(a, b, op: str, *, dtype: str = "f16", layout=None):
    """C[t] = A[t] @ B[t] on the tensor cores (f32 accumulate), then its row and column
    reductions in registers with the paper's masks (for 16x16 rows: Fig. 2 + Algorithm 3).

    ``a`` (n_tiles, M, 16) and ``b`` (n_tiles, 16, N) are C-contiguous CuPy arrays, float16 for
    ``dtype='f16'`` or uint16 bf16 bit patterns (:func:`to_bf16`) for ``dtype='bf16'`` (sm_80+).
    Returns ``(rows (n, M), cols (n, N))`` float32. ``layout`` as in :func:`reduce_accumulators`.
    """
    launch.check_choice("op", op, MMA_OPS)
    shape, n = _check_inputs(a, b, dtype)
    if dtype == "bf16":
        ok, why = device.supports("bf16")
        if not ok:
            raise RuntimeError(why)
    return _launch_tiles(mma_reduce_kernel(shape, dtype, op), n, (a, b), shape,
                         defines=_defines(shape, layout))


def rowmax(a, b, variant: str = FINAL):
    """Row maxima (n_tiles, 16) of C = A @ B for float16 (n_tiles, 16, 16) ``a`` and ``b``:
    ``variant='shared'`` through shared memory (store_matrix_sync, __syncthreads, loads),
    ``'quadmask'`` / ``'fullmask'`` in registers (Fig. 2 + Algorithm 3) with either mask."""
    return run_per_tile(a, b, rowmax_kernel(variant))


def run_per_tile(a, b, kernel: str, *, source: str | None = None):
    """Launch ``kernel`` (from this topic's file, or from ``source``: labs pass the learner's
    CUDA here) on float16 (n_tiles, 16, 16) ``a`` and ``b``; returns its output (n_tiles, 16).

    The kernel's signature must be ``(const __half* a, const __half* b, float* out, int
    n_tiles)``, with warp ``w`` of block ``k`` handling tile ``k * 4 + w`` (4 warps per block)
    and writing ``out[tile * 16 + 0..15]``.
    """
    if not isinstance(kernel, str) or not kernel:
        raise TypeError(f"kernel must be a kernel name, got {kernel!r}")
    (m, n), tiles = _check_inputs(a, b, "f16")
    if (m, n) != (16, 16):
        raise ValueError(f"these kernels take 16x16 tiles: a (n, 16, 16), b (n, 16, 16); got a "
                         f"{a.shape}, b {b.shape}")
    out, = _launch_tiles(kernel, tiles, (a, b), (16,), source=source)
    return out


def accumulator_layout_on_gpu(shape) -> np.ndarray:
    """The (32, 8, 2) layout of the f32 accumulator of ``shape`` on this GPU, read by loading a
    matrix whose elements are their own coordinates with ``load_matrix_sync`` (which uses the same
    layout as ``mma_sync`` and ``store_matrix_sync``)."""
    m, n = check_shape(shape)
    coords = launch.to_device(np.arange(m * n, dtype=np.float32).reshape(m, n))
    out = launch.poisoned((32, 8), np.float32)
    fn = launch.get_kernel(KERNELS, f"acc_layout_{m}x{n}")
    launch.launch(fn, 1, 32, (coords, out), sync=True)
    flat = launch.to_host(out)
    if np.isnan(flat).any():
        raise RuntimeError("the layout kernel left registers unwritten")
    flat = flat.astype(np.int64)
    return np.stack([flat // n, flat % n], axis=-1)
