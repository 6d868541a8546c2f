"""The two kernels of ``kernels/04_microbenchmark.cu``: names, inputs, the NumPy reference and the
checked wrappers (:func:`rowmax`, :func:`rowmax_cycles`, and :func:`launcher` for timing)."""
from __future__ import annotations

import numpy as np

from .. import launch
from ..dtypes import from_bf16, to_bf16

KERNELS = "04_microbenchmark"
#: The ladder: the shared-memory baseline, then the paper's in-register epilogue (the last rung).
VARIANTS = ("smem", "regs")
FINAL = VARIANTS[-1]
DTYPES = ("f16", "bf16")
LABELS = {"smem": "baseline (shared memory)", "regs": "in-register"}
MAX_TILES = 2**31 - 1                  # gridDim.x limit; one tile per 32-thread block


def check_variant(variant: str) -> str:
    """``variant`` is ``smem`` (the shared-memory baseline) or ``regs`` (in registers)."""
    return launch.check_choice("variant (smem = the shared-memory baseline, regs = in registers)",
                               variant, VARIANTS)


def check_dtype(dtype: str) -> str:
    return launch.check_choice("dtype", dtype, DTYPES)


def kernel_name(variant: str, dtype: str = "bf16", clock: bool = False) -> str:
    """``rowmax_<smem|regs>_<f16|bf16>[_clock]``."""
    return f"rowmax_{check_variant(variant)}_{check_dtype(dtype)}" + ("_clock" if clock else "")


def storage_dtype(dtype: str):
    """NumPy dtype that holds tiles of ``dtype``: float16, or uint16 bit patterns for bf16."""
    return np.float16 if check_dtype(dtype) == "f16" else np.uint16


def random_inputs(n_tiles: int, dtype: str = "bf16", rng=None) -> tuple[np.ndarray, np.ndarray]:
    """Fresh standard-normal tiles ``a, b`` of shape (n_tiles, 16, 16) in storage form (host)."""
    rng = np.random.default_rng() if rng is None else rng
    a = rng.standard_normal((n_tiles, 16, 16), dtype=np.float32)
    b = rng.standard_normal((n_tiles, 16, 16), dtype=np.float32)
    return encode(a, dtype), encode(b, dtype)


def encode(x, dtype: str) -> np.ndarray:
    """float values -> storage form of ``dtype`` (rounded to nearest)."""
    return x.astype(np.float16) if check_dtype(dtype) == "f16" else to_bf16(x)


def decode(x, dtype: str) -> np.ndarray:
    """Storage form -> float64 values (exact)."""
    x = np.asarray(x)
    f = x.astype(np.float32) if check_dtype(dtype) == "f16" else from_bf16(x)
    return f.astype(np.float64)


def reference(a, b, dtype: str = "bf16") -> np.ndarray:
    """Row maxima (n_tiles, 16) of A[t] @ B[t] in float64 from the stored (rounded) inputs.

    The maximum is ``np.fmax``, as the kernels' ``fmaxf``: a NaN element loses against a number,
    so a row is NaN only when all of it is NaN. Products are summed explicitly (not by BLAS) when
    an input is not finite, so that inf and NaN follow IEEE rules element by element.
    """
    af, bf = decode(a, dtype), decode(b, dtype)
    if np.isfinite(af).all() and np.isfinite(bf).all():
        c = af @ bf
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            c = np.stack([(af[t][:, :, None] * bf[t][None, :, :]).sum(axis=1)
                          for t in range(af.shape[0])])
    return np.fmax.reduce(c, axis=2)


def tolerance(a, b, dtype: str = "bf16") -> np.ndarray:
    """Per-row absolute tolerance: 1e-5 x the largest |A||B| of the row (f32 accumulation)."""
    af, bf = np.abs(decode(a, dtype)), np.abs(decode(b, dtype))
    with np.errstate(invalid="ignore"):
        scale = np.nan_to_num(af @ bf, nan=0.0, posinf=0.0).max(axis=2)
    return 1e-5 * scale + 1e-30


# ------------------------------------------------------------------------------------------------
# Wrappers
# ------------------------------------------------------------------------------------------------

def _check_inputs(a, b, dtype: str) -> int:
    want = storage_dtype(dtype)
    hint = "" if dtype == "f16" else " (bf16 tiles travel as uint16 bit patterns: see to_bf16)"
    try:
        launch.check_array("a", a, dtype=want, shape=(None, 16, 16))
        launch.check_array("b", b, dtype=want, shape=(None, 16, 16))
    except TypeError as e:
        raise TypeError(f"{e}{hint}") from None
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"a and b must hold the same number of tiles, got {a.shape[0]} and "
                         f"{b.shape[0]}")
    n = a.shape[0]
    if not 1 <= n <= MAX_TILES:
        raise ValueError(f"the number of tiles must be between 1 and {MAX_TILES}, got {n}")
    return n


def _require_dtype_support(dtype: str) -> None:
    from .. import device
    ok, why = device.supports(dtype)
    if not ok:
        raise RuntimeError(why)


def launcher(a, b, *, variant: str = FINAL, dtype: str = "bf16", clock: bool = False,
             source: str | None = None):
    """Check the arguments once and return ``(go, rows, cycles)``: ``go()`` launches the kernel
    (no synchronisation) into the same poisoned outputs ``rows`` (n, 16) float32 and, for
    ``clock=True``, ``cycles`` (n,) int64 (else None). Use ``go`` with :mod:`fraglab.bench`."""
    check_variant(variant)
    check_dtype(dtype)
    n = _check_inputs(a, b, dtype)
    _require_dtype_support(dtype)
    fn = launch.get_kernel(KERNELS, kernel_name(variant, dtype, clock), source=source)
    rows = launch.poisoned((n, 16), np.float32)
    if clock:
        cycles = launch.poisoned((n,), np.int64)
        args = (a, b, rows, cycles, np.int32(n), np.uint32(0))
    else:
        cycles = None
        args = (a, b, rows, np.int32(n))

    def go():
        launch.launch(fn, n, 32, args)
    return go, rows, cycles


def rowmax(a, b, *, variant: str = FINAL, dtype: str = "bf16"):
    """Row maxima (n_tiles, 16) float32 (CuPy) of ``A[t] @ B[t]`` for each tile.

    ``a``, ``b``: C-contiguous CuPy arrays (n_tiles, 16, 16), float16 for ``dtype='f16'`` or uint16
    bf16 bit patterns for ``'bf16'`` (sm_80+). ``variant``: ``'smem'`` (baseline) or ``'regs'``.
    """
    go, rows, _ = launcher(a, b, variant=variant, dtype=dtype)
    go()
    return rows


def rowmax_cycles(a, b, *, variant: str = FINAL, dtype: str = "bf16"):
    """The ``_clock`` kernel: ``(rows, cycles)``, cycles (n_tiles,) int64 = SM clock cycles each
    warp spent in the epilogue (from the accumulator ready to the row maxima computed)."""
    go, rows, cycles = launcher(a, b, variant=variant, dtype=dtype, clock=True)
    go()
    return rows, cycles
