"""The kernels' correctness, described once (:data:`PROBLEMS`, see :mod:`fraglab.problem`) and used
by the tests, by ``python -m fraglab.microbenchmark check`` and by the recorded run
(:func:`check_correctness`)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .. import launch
from ..problem import Case, Problem, rel_error
from .kernels import (DTYPES, KERNELS, VARIANTS, encode, kernel_name, random_inputs, reference,
                      rowmax, rowmax_cycles, tolerance)

#: A clock kernel's cycle count outside this range fails its tile (an unread or garbage counter).
PLAUSIBLE_CYCLES = (1, 10**7)


def _special_tiles(rng, dtype: str):
    """Two tiles whose products hold -inf, NaN rows and a NaN column: row 3 of tile 0 is -inf,
    row 5 of tile 0 is NaN, and column 7 of tile 1 is NaN (fmaxf ignores it)."""
    a = rng.standard_normal((2, 16, 16)).astype(np.float32)
    b = rng.standard_normal((2, 16, 16)).astype(np.float32)
    a[0, 3, 0], b[0, 0, :] = -np.inf, 1.0
    a[0, 5, :] = np.nan
    b[1, 2, 7] = np.nan
    return encode(a, dtype), encode(b, dtype)


def _inputs(rng, variant, dtype, tiles, clock=False, special=False, active=None):
    a, b = _special_tiles(rng, dtype) if special else random_inputs(tiles, dtype, rng)
    return {"a": a, "b": b, "variant": variant, "dtype": dtype, "clock": clock, "active": active}


def _reference(a, b, dtype, active=None, **_):
    ref = reference(a, b, dtype)
    if active is not None:
        ref[active:] = np.nan            # blocks past n_tiles write nothing: still poisoned
    return ref


def _run(a, b, variant, dtype, clock=False, active=None):
    ag, bg = launch.to_device(a), launch.to_device(b)
    if active is not None:
        # A grid of len(a) blocks told that only `active` tiles exist: the kernels guard
        # blockIdx.x < n_tiles, so the extra blocks must leave their rows alone.
        rows = launch.poisoned((len(a), 16), np.float32)
        fn = launch.get_kernel(KERNELS, kernel_name(variant, dtype))
        launch.launch(fn, len(a), 32, (ag, bg, rows, np.int32(active)), sync=True)
        return rows
    if not clock:
        return rowmax(ag, bg, variant=variant, dtype=dtype)
    rows, cycles = (launch.to_host(x) for x in rowmax_cycles(ag, bg, variant=variant, dtype=dtype))
    lo, hi = PLAUSIBLE_CYCLES
    rows[~((cycles >= lo) & (cycles < hi))] = np.nan     # a tile with no sane count fails
    return rows


def _error(got, ref, inputs) -> float:
    """The largest |got - ref| of a row in units of :func:`tolerance` (so the problem's tol is 1);
    inf where a row was not written or its -inf/NaN does not match the reference's."""
    with np.errstate(invalid="ignore"):              # -inf - -inf in rel_error's difference
        if rel_error(got, ref) == float("inf"):
            return float("inf")
    fin = np.isfinite(ref)
    tol = tolerance(inputs["a"], inputs["b"], inputs["dtype"])
    return float((np.abs(got[fin] - ref[fin]) / tol[fin]).max(initial=0.0))


def _requires(case: Case) -> tuple[bool, str]:
    """bf16 needs sm_80. Without a GPU only a stand-in ``run`` can be checked: nothing to refuse."""
    from .. import device
    return device.supports(case.params["dtype"]) if device.gpu_available() else (True, "")


def case_name(variant: str, dtype: str, tiles: int, clock: bool = False) -> str:
    return f"{variant}-{dtype}-{tiles}" + ("-clock" if clock else "")


_CASES = tuple(Case(case_name(w, d, n, c), variant=w, dtype=d, tiles=n, clock=c, slow=n > 100)
               for d in DTYPES for n in (1, 7, 1009) for w in VARIANTS for c in (False, True)) + \
    tuple(Case(f"inf_nan-{w}-{d}", edge=True, variant=w, dtype=d, tiles=2, special=True)
          for d in DTYPES for w in VARIANTS) + \
    tuple(Case(f"extra_blocks-{w}", edge=True, variant=w, dtype="f16", tiles=5, active=3)
          for w in VARIANTS)

PROBLEMS = {
    "rowmax": Problem(
        "04_microbenchmark/rowmax",
        "the 16 row maxima (fmaxf) of A[t] @ B[t] for each 16x16 tile t, f16 or bf16 in, f32 "
        "accumulate; both epilogues (smem, regs), plain and clock-timed",
        inputs=_inputs, reference=_reference, run=_run, error=_error, tol=1.0,
        requires=_requires, labels=("tile", "row"), cases=_CASES),
}


def check_correctness(dtype: str = "bf16", tiles: Sequence[int] = (1, 1009), rng=None) -> list[dict]:
    """Both kernels and their clock variants on fresh random inputs (outputs poisoned) against
    :func:`reference`, through ``PROBLEMS["rowmax"]``. One record per (variant, clock, tiles):
    ``ok`` and ``max_err_over_tol`` (the largest row error over its tolerance; inf: a row unwritten)."""
    rng = np.random.default_rng() if rng is None else rng
    problem = PROBLEMS["rowmax"]
    out = []
    for n in tiles:
        for variant in VARIANTS:
            for clock in (False, True):
                case = Case(case_name(variant, dtype, n, clock), variant=variant, dtype=dtype,
                            tiles=n, clock=clock)
                r = problem.evaluate(case, rng)
                out.append({"dtype": dtype, "tiles": n, "way": variant, "clock": clock, "ok": r.ok,
                            "max_err_over_tol": r.error})
    return out
