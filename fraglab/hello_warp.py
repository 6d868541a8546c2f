"""Wrappers for ``kernels/00_hello_warp.cu`` (topic 00_hello_warp), and their problems."""
from __future__ import annotations

import numpy as np

from . import launch
from .problem import Case, Problem

KERNELS = "00_hello_warp"


def hello_warp(source: str | None = None):
    """Run one warp of ``hello_warp``; returns ``(lane_ids (32,), regs (32, 8))`` as NumPy arrays."""
    fn = launch.get_kernel(KERNELS, "hello_warp", source=source)
    lane_ids = launch.poisoned((32,), np.int32)
    regs = launch.poisoned((32, 8), np.float32)
    launch.launch(fn, 1, 32, (lane_ids, regs), sync=True)
    return launch.to_host(lane_ids), launch.to_host(regs)


def warp_sum(x, source: str | None = None, *, strided: bool = False, warps_per_block: int = 8):
    """Sum each row of ``x`` (float32, shape (rows, 32); CuPy on a GPU, NumPy on the interpreter),
    one warp per row.

    ``strided=False`` launches one 32-thread block per row (kernel ``warp_sum``);
    ``strided=True`` launches blocks of ``warps_per_block`` warps, each warp looping over rows
    (kernel ``warp_sum_strided``), with enough blocks to fill the GPU.
    ``source`` replaces the kernel file (labs pass the learner's CUDA here); it must define
    ``extern "C" __global__ void warp_sum(const float* in, float* out, int rows)``.
    """
    launch.check_array("x", x, dtype=np.float32, shape=(None, 32))
    rows = x.shape[0]
    if rows < 1 or rows * 32 > 2**31 - 1:  # the kernels index with 32-bit ints
        raise ValueError(f"x must have between 1 and {(2**31 - 1) // 32} rows, got {rows}")
    launch.check_range("warps_per_block", warps_per_block, 1, 32)
    out = launch.poisoned((rows,), np.float32)
    if not strided:
        fn = launch.get_kernel(KERNELS, "warp_sum", source=source)
        launch.launch(fn, rows, 32, (x, out, np.int32(rows)))
    else:
        fn = launch.get_kernel(KERNELS, "warp_sum_strided", source=source)
        sms = launch.sm_count()
        blocks = min(-(-rows // warps_per_block), sms * (64 // warps_per_block))
        launch.launch(fn, blocks, 32 * warps_per_block, (x, out, np.int32(rows)))
    return out


# ------------------------------------------------------------------------------------------------
# The butterfly, traced on the PTX interpreter (no GPU needed)
# ------------------------------------------------------------------------------------------------

def butterfly(row=None, kernel: str = "warp_sum", source: str | None = None):
    """Which lane every lane of ``kernel`` reads at each ``shfl.sync.bfly``, and every lane's
    value after each step, for one row (default: lane i holds i), from the PTX interpreter's
    run of the compiled kernel (:func:`fraglab.ptx.shuffle_trace`; also without a GPU).
    ``source`` replaces the kernel file, as for :func:`warp_sum`."""
    from . import ptx
    row = np.arange(32, dtype=np.float32) if row is None else np.asarray(row, np.float32)
    if row.shape != (32,):      # a host array in every mode: the interpreter runs it, never the GPU
        raise ValueError(f"row must hold 32 values, one per lane; got shape {row.shape}")
    prog = ptx.load(KERNELS, source=source)
    args = (row.reshape(1, 32).copy(), np.zeros(1, np.float32), np.int32(1))
    return ptx.shuffle_trace(prog, kernel, grid=1, block=32, args=args)


def plot_butterfly(trace=None):
    """The butterfly of :func:`butterfly` (default: ``warp_sum``, lane i holding i), drawn by
    :func:`fraglab.ptx.plot_shuffles`; returns the figure (7.85 in wide, the text column)."""
    ax = (butterfly() if trace is None else trace).plot()
    return ax.figure


# ------------------------------------------------------------------------------------------------
# Problems: what the tests and the lab check
# ------------------------------------------------------------------------------------------------

def _rows(rng, rows: int = 1000, special: bool = False, **options) -> dict:
    x = rng.standard_normal((rows, 32)).astype(np.float32)
    if special:       # inf, NaN, and inf - inf in the first three rows
        x[0, 5] = np.inf
        x[1, 9] = np.nan
        x[2, 0], x[2, 1] = np.inf, -np.inf
    return {"x": x, **options}


def _sum_reference(x, **_):
    with np.errstate(invalid="ignore"):   # the special rows' inf + -inf: NaN is the expected sum
        return x.astype(np.float64).sum(axis=1)


def _per_row_error(got, ref, inputs) -> float:
    """Largest |got - ref| of a row over the sum of its magnitudes (float32 rounding scale);
    inf where a row was not written or its inf/NaN does not match."""
    if not np.array_equal(np.isfinite(got), np.isfinite(ref)) or \
            not np.array_equal(got[~np.isfinite(ref)], ref[~np.isfinite(ref)], equal_nan=True):
        return float("inf")
    fin = np.isfinite(ref)
    scale = np.abs(inputs["x"].astype(np.float64)).sum(axis=1)[fin]
    return float((np.abs(got[fin] - ref[fin]) / scale).max(initial=0.0))


_SUM_CASES = tuple(Case(f"rows{r}", rows=r, edge=r != 1000, slow=r > 100) for r in (1, 7, 1000, 65537)) + (
    Case("inf_nan", rows=3, special=True, edge=True),)

PROBLEMS = {
    "warp_sum": Problem(
        "00_hello_warp/warp_sum", "the sum of each row of a (rows, 32) float32 matrix",
        inputs=_rows, reference=_sum_reference, error=_per_row_error, tol=1e-6, labels=("row",),
        run=lambda x, **_: warp_sum(launch.to_device(x)), cases=_SUM_CASES),
    "warp_sum_strided": Problem(
        "00_hello_warp/warp_sum_strided", "the same, with several warps per block looping over rows",
        inputs=_rows, reference=_sum_reference, error=_per_row_error, tol=1e-6, labels=("row",),
        run=lambda x, **_: warp_sum(launch.to_device(x), strided=True, warps_per_block=3),
        cases=_SUM_CASES),
    "hello_warp": Problem(
        "00_hello_warp/hello_warp", "each lane's id and eight registers holding 100*lane + r",
        inputs=lambda rng: {},
        reference=lambda: (np.arange(32), 100.0 * np.arange(32)[:, None] + np.arange(8)),
        run=hello_warp, labels=("lane", "reg")),
}
