"""The topic's :class:`~fraglab.problem.Problem`s: every GPU case the tests (and anyone else)
check, described once.

Every kernel writes one value per row and per column of each tile; a problem's output is the
two side by side, ``lines`` (n_tiles, M + N): the M row results, then the N column results.

- ``reduce_acc``: the ``reduce_acc_*`` kernels against the emulator, which reduces in the
  kernels' order: bit for bit, for every shape x operator x (permutation, mask), on random tiles
  and on edge tiles (-inf rows, NaN in every position, +0/-0 ties, sums overflowing, inf - inf,
  subnormals, FLT_MAX), and where a NaN sits for ``max_cmp``.
- ``reduce_acc_numpy``: the same kernels against an order-free float64 NumPy reference, which
  knows nothing of layouts (max/min exact, sums within 1e-5 of the sum of magnitudes).
- ``mma_reduce``: A @ B on the tensor cores then its reductions, f16 and bf16 (sm_80+), against
  float64 NumPy: random inputs, small integers (exact), -inf/NaN in A, f16's largest values
  (exact), and bf16 products beyond f32's range (inf or FLT_MAX, never NaN or small).
- ``rowmax``: the row maxima of A @ B three ways (shared memory, registers with either mask).
"""
from __future__ import annotations

import numpy as np

from .. import device, launch
from ..dtypes import from_bf16, to_bf16
from ..problem import Case, Problem
from .emulate import reduce_tiles, reference
from .kernels import mma_reduce, reduce_accumulators, rowmax
from .layouts import SHAPES
from .names import DTYPES, MASKS, MMA_OPS, OPS, VARIANTS

FLT_MAX = float(np.finfo(np.float32).max)
LABELS = ("tile", "line")


def reduce_choices(shape) -> list[tuple[bool, str]]:
    """The (permute, mask) kernels of a shape: Fig. 2 or not (16x16 only), either mask."""
    return [(p, m) for p in ((True, False) if tuple(shape) == (16, 16) else (True,))
            for m in MASKS]


def lines(rows, cols) -> np.ndarray:
    """(n, M) row and (n, N) column results side by side: (n, M + N), on the host."""
    return np.concatenate([launch.to_host(rows), launch.to_host(cols)], axis=1)


def scaled_error(got, ref, scale) -> float:
    """Largest ``|got - ref| / scale`` where ``ref`` is finite (``scale``: what float32 rounding
    errors grow with); ``inf`` unless ``got`` has exactly ``ref``'s inf and NaN elsewhere (so an
    unwritten, poisoned element fails)."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    fin = np.isfinite(ref)
    if not np.array_equal(np.isfinite(got), fin) or \
            not np.array_equal(got[~fin], ref[~fin], equal_nan=True):
        return float("inf")
    diff, s = np.abs(got[fin] - ref[fin]), np.broadcast_to(scale, ref.shape)[fin]
    ratio = np.divide(diff, s, out=np.full_like(diff, np.inf), where=s > 0)
    return float(np.where(diff == 0, 0.0, ratio).max(initial=0.0))


# ------------------------------------------------------------------------------------------------
# Reductions of given accumulator values
# ------------------------------------------------------------------------------------------------

def edge_tiles(shape, rng) -> np.ndarray:
    """(12, M, N) float32 accumulator values that test what the operators do at the edges; one
    case per tile (the indices are what the tests look up)."""
    m, n = shape
    base = rng.standard_normal((12, m, n)).astype(np.float32)
    base[0, 1, :] = -np.inf                               # a row of -inf
    base[1, 2, 3] = np.nan                                # one NaN in a row and a column
    base[2, 0, :] = np.nan                                # a row of NaN
    base[3, :, 1] = np.nan                                # a column of NaN
    base[4, 3, :] = 7.0                                   # ties
    base[5, 4, :] = np.where(np.arange(n) % 2, 0.0, -0.0)  # +0 / -0 ties
    base[6, 5, :] = 3.0e38                                # sums overflow to inf
    base[6, :, 6] = -3.0e38
    base[7, 6, 0], base[7, 6, 1] = np.inf, -np.inf        # inf - inf = NaN in a sum
    base[8] = rng.standard_normal((m, n)) * 1e-40         # subnormals
    base[9, 7, :] = np.float32(FLT_MAX)
    base[10, :, 2] = np.nan                               # NaN in every position along rows
    base[10, 4, :] = np.nan                               # and along columns
    base[11, 0, 5], base[11, 1, 0], base[11, 2, n - 1] = np.nan, np.nan, np.nan
    return base


def nan_tile(where: str) -> np.ndarray:
    """One 16x16 tile 0..255 with a NaN in row 0 where ``max_cmp`` meets it first as its left
    operand (``'first'``: lane 0, x[0]) or last as its right operand (``'last'``: column 15,
    lane 3, x[5], all the way down the reduction)."""
    m = np.arange(256, dtype=np.float32).reshape(1, 16, 16)
    m[0, 0, 0 if where == "first" else 15] = np.nan
    return m


def _acc_inputs(rng, shape, op, permute=True, mask="group", kind="random", **_) -> dict:
    if kind == "random":
        acc = rng.standard_normal((37, *shape)).astype(np.float32)  # 37: one warp without a tile
    elif kind == "edges":
        acc = edge_tiles(shape, rng)
    else:
        acc = nan_tile(kind.removeprefix("nan_"))
    return {"acc": acc, "op": op, "permute": permute, "mask": mask}


def _run_acc(acc, op, permute, mask, **_):
    return lines(*reduce_accumulators(launch.to_device(acc), op, permute=permute, mask=mask))


def _acc_case(shape, op, permute, mask, kind) -> Case:
    variant = ("perm-" if permute else "direct-") if shape == (16, 16) else ""
    return Case(f"{shape[0]}x{shape[1]}-{op}-{variant}{mask}-{kind}", edge=kind != "random",
                shape=shape, op=op, permute=permute, mask=mask, kind=kind)


def _sum_scale(acc, **_) -> np.ndarray:
    a = np.abs(np.asarray(acc, np.float64))
    return lines(a.sum(axis=2), a.sum(axis=1))


# ------------------------------------------------------------------------------------------------
# A @ B, then its reductions
# ------------------------------------------------------------------------------------------------

def as_float64(x, dtype) -> np.ndarray:
    """f16 values or bf16 bit patterns (``dtype``) as float64."""
    return (np.asarray(x) if dtype == "f16" else from_bf16(x)).astype(np.float64)


def _mma_inputs(rng, shape, dtype, op, kind="random", **_) -> dict:
    m, n = shape
    saturate = False
    if kind == "integers":                   # every product and sum exact in f32
        a = rng.integers(-4, 5, size=(9, m, 16)).astype(np.float32)
        b = rng.integers(-4, 5, size=(9, 16, n)).astype(np.float32)
    elif kind == "bf16_overflow":            # 2^100 * 2^100 leaves f32's range (bf16 does not)
        a, b = np.ones((1, m, 16), np.float32), np.ones((1, 16, n), np.float32)
        a[0, 3, :] = 2.0 ** 100
        b[0, :, 5] = 2.0 ** 100
        saturate = True                      # inf and FLT_MAX both compare as FLT_MAX
    else:
        tiles = {"random": 50, "inf_nan": 2, "f16_max": 1}[kind]
        a = rng.standard_normal((tiles, m, 16)).astype(np.float32)
        b = rng.standard_normal((tiles, 16, n)).astype(np.float32)
        if kind == "inf_nan":
            b[:, 0, :] = np.abs(b[:, 0, :]) + 0.5  # row 0 of B > 0: -inf * b = -inf
            a[0, 1, 0] = -np.inf                   # tile 0: row 1 of C is -inf
            a[1, 2, 3] = np.nan                    # tile 1: row 2 of C is NaN
        elif kind == "f16_max":                    # 16 * 65504^2 per element: exact in f32
            a[:], b[:] = 65504.0, 65504.0
    if dtype == "f16":
        a, b = a.astype(np.float16), b.astype(np.float16)
    else:
        a, b = to_bf16(a), to_bf16(b)
    return {"a": a, "b": b, "op": op, "dtype": dtype, "saturate": saturate}


def _saturated(x, saturate: bool) -> np.ndarray:
    return np.clip(x, -FLT_MAX, FLT_MAX) if saturate else x     # NaN stays NaN


def _mma_reference(a, b, op, dtype, saturate=False, **_) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        c = as_float64(a, dtype) @ as_float64(b, dtype)
    return _saturated(lines(*reference(c, op)), saturate)


def _run_mma(a, b, op, dtype, saturate=False, **_):
    out = lines(*mma_reduce(launch.to_device(a), launch.to_device(b), op, dtype=dtype))
    return _saturated(out, saturate)


def _product_scale(a, b, dtype) -> np.ndarray:
    """|A| @ |B| with inf/NaN entries counted as 0: what the f32 rounding of C scales with."""
    finite = [np.where(np.isfinite(x), np.abs(x), 0.0) for x in (as_float64(a, dtype), as_float64(b, dtype))]
    return finite[0] @ finite[1]


def _mma_error(got, ref, inputs) -> float:
    s = _product_scale(inputs["a"], inputs["b"], inputs["dtype"])
    fold = np.sum if inputs["op"] == "sum" else np.max
    return scaled_error(got, ref, lines(fold(s, axis=2), fold(s, axis=1)))


_EXACT_MMA = ("integers", "f16_max", "bf16_overflow")


def _mma_cases():
    for shape in SHAPES:
        for dtype in DTYPES:
            for op in MMA_OPS:
                for kind in ("random", "integers") + (("inf_nan", "f16_max") if dtype == "f16"
                                                      else ()):
                    yield Case(f"{shape[0]}x{shape[1]}-{dtype}-{op}-{kind}", edge=kind != "random",
                               shape=shape, dtype=dtype, op=op, kind=kind)
    yield Case("16x16-bf16-max-bf16_overflow", edge=True, shape=(16, 16), dtype="bf16", op="max",
               kind="bf16_overflow")


def _needs_dtype(case: Case) -> tuple[bool, str]:
    dtype = case.params.get("dtype", "f16")
    return (True, "") if dtype == "f16" else device.supports(dtype)


# ------------------------------------------------------------------------------------------------
# Row maxima three ways
# ------------------------------------------------------------------------------------------------

def _rowmax_inputs(rng, variant, **_) -> dict:
    a, b = (rng.standard_normal((45, 16, 16)).astype(np.float16) for _ in range(2))
    return {"a": a, "b": b, "variant": variant}


def _rowmax_error(got, ref, inputs) -> float:
    s = _product_scale(inputs["a"], inputs["b"], "f16")
    return scaled_error(got, ref, s.max(axis=2))


PROBLEMS = {
    "reduce_acc": Problem(
        "03_permutation_and_quad_reduction/reduce_acc",
        "row and column reductions of given f32 accumulator tiles, bit for bit as the emulator "
        "computes them in the kernels' order",
        inputs=_acc_inputs, run=_run_acc, tol=0.0, labels=LABELS,
        reference=lambda acc, op, permute, mask, **_: lines(*reduce_tiles(acc, op, permute, mask)),
        cases=[_acc_case(s, op, p, m, kind) for s in SHAPES for op in OPS
               for p, m in reduce_choices(s) for kind in ("random", "edges")]
        + [_acc_case((16, 16), op, True, "group", f"nan_{w}") for op in ("max_cmp", "max")
           for w in ("first", "last")]),
    "reduce_acc_numpy": Problem(
        "03_permutation_and_quad_reduction/reduce_acc_numpy",
        "the same reductions against float64 NumPy, independent of any layout",
        inputs=_acc_inputs, run=_run_acc, labels=LABELS,
        reference=lambda acc, op, **_: lines(*reference(acc, op)),
        tol=lambda case: 1e-5 if case.params["op"] == "sum" else 0.0,
        error=lambda got, ref, inputs: scaled_error(got, ref, _sum_scale(**inputs)),
        cases=[_acc_case(s, op, p, m, "random") for s in SHAPES for op in MMA_OPS
               for p, m in reduce_choices(s)]),
    "mma_reduce": Problem(
        "03_permutation_and_quad_reduction/mma_reduce",
        "row and column reductions of C = A @ B (f16 or bf16 in, f32 accumulate)",
        inputs=_mma_inputs, reference=_mma_reference, run=_run_mma, error=_mma_error,
        tol=lambda case: 0.0 if case.params["kind"] in _EXACT_MMA else 1e-5,
        requires=_needs_dtype, labels=LABELS, cases=tuple(_mma_cases())),
    "rowmax": Problem(
        "03_permutation_and_quad_reduction/rowmax",
        "the row maxima of C = A @ B (f16 in, f32 accumulate), through shared memory or registers",
        inputs=_rowmax_inputs, run=lambda a, b, variant, **_: rowmax(
            launch.to_device(a), launch.to_device(b), variant),
        reference=lambda a, b, **_: (a.astype(np.float64) @ b.astype(np.float64)).max(axis=2),
        error=_rowmax_error, tol=1e-5, labels=("tile", "row"),
        cases=[Case(v, variant=v) for v in VARIANTS]),
}
