"""Wrappers of the SGEMM ladder (``kernels/07_register_reuse_<rung>.cu``): tiles, checks, launch.

Every rung computes ``C = A @ B`` for row-major float32 ``A (M, K)``, ``B (K, N)``. Tile sizes are
compile-time defines; :data:`TILES` holds the ones each rung launches with (the single home of
these numbers: the ``#ifndef`` defaults in the ``.cu`` files only serve a compile without
defines, and a test keeps them equal for rungs 1-8). ``sgemm(a, b, variant=..., BM=...)`` overrides
them for one call, which is how the autotuning sweep tries other configurations.
"""
from __future__ import annotations

import os

import numpy as np

from .. import launch, toolchain

#: What each rung changes, one line each (the chapter's table).
CHANGES = {
    "naive": "one thread per element of C, straight from global memory (lanes walk a column)",
    "coalesced": "lanes walk a row of C: coalesced loads of B and stores of C",
    "smem": "32x32 tiles of A and B staged in shared memory: 2 shared loads per FFMA",
    "tile1d": "a column of TM=8 outputs per thread, one Bs value reused 8 times: 9/8 loads per FFMA",
    "tile2d": "an 8x8 block of outputs per thread (outer product): 16 words per 64 FFMA",
    "vectorized": "float4 global loads, A transposed into shared memory, LDS.128 both sides",
    "warptile": "warp tiles: each lane's 4x4 chunks spread over its warp's tile (no bank conflicts)",
    "double_buffer": "two shared stages and a global->register prefetch, one barrier per step",
    "autotuned": "rung 8 with the tiles of an H100 sweep",
}

#: The rungs, in order: the keys of CHANGES (llm.c style: each a small diff of the one before).
VARIANTS = tuple(CHANGES)
FINAL = VARIANTS[-1]

#: Tile defines each rung launches with. ``autotuned`` holds the winner of the H100 sweep
#: (``python -m fraglab.register_reuse bench``: its ``best``; first sweep, H100 80GB HBM3 SXM,
#: 2026-11-23: 128x256x16 blocks of 256 threads, 64x64 warp tiles, 16x8 outputs a thread).
TILES: dict[str, dict[str, int]] = {
    "naive": {}, "coalesced": {}, "smem": {},
    "tile1d": dict(BM=64, BN=64, BK=8, TM=8),
    "tile2d": dict(BM=128, BN=128, BK=8, TM=8, TN=8),
    "vectorized": dict(BM=128, BN=128, BK=8, TM=8, TN=8),
    "warptile": dict(BM=128, BN=128, BK=8, WM=32, WN=64, LM=4, MINB=2),
    "double_buffer": dict(BM=128, BN=128, BK=8, WM=32, WN=64, LM=4, MINB=2, GROUP=1),
    "autotuned": dict(BM=128, BN=256, BK=16, WM=64, WN=64, LM=4, MINB=1, GROUP=8),
}

#: Rungs that take any M, N, K (bounds-checked loads and stores); the others need M % BM,
#: N % BN and K % BK to be 0 (float4 tiles, no bounds checks) and 16-byte aligned arrays.
RAGGED_OK = ("naive", "coalesced", "smem", "tile1d", "tile2d")
_WARP_RUNGS = ("warptile", "double_buffer", "autotuned")

#: Shared memory per SM on sm_90 and the most one block may take (bytes).
SMEM_PER_BLOCK_MAX = 227 * 1024
STATIC_SMEM_MAX = 48 * 1024


def kernel_file(variant: str) -> str:
    """``kernels/07_register_reuse_<variant>.cu`` (the name :func:`fraglab.toolchain.compile`
    takes)."""
    launch.check_choice("variant", variant, VARIANTS)
    return f"07_register_reuse_{variant}"


def tiles(variant: str, **overrides) -> dict:
    """The tile defines of ``variant`` (:data:`TILES`) with ``overrides``, checked: a
    configuration the variant cannot run raises ``ValueError`` saying which rule it breaks."""
    launch.check_choice("variant", variant, VARIANTS)
    base = TILES[variant]
    unknown = sorted(set(overrides) - set(base))
    if unknown:
        raise ValueError(f"{variant} has no tile parameter {', '.join(unknown)}; it takes "
                         f"{', '.join(base) or 'none (its tile is fixed at 32x32)'}")
    t = {**base, **overrides}
    for k, v in t.items():
        launch.check_range(k, v, 1, 1024)
    rules = _rules(variant, t)
    bad = [why for ok, why in rules if not ok]
    if bad:
        raise ValueError(f"{variant} cannot run with tiles {t}: " + "; ".join(bad))
    return t


def _rules(variant: str, t: dict) -> list[tuple[bool, str]]:
    n = threads(variant, t)
    rules = [(32 <= n <= 1024 and n % 32 == 0,
              f"{n} threads per block (a whole number of warps, at most 1024)")]
    if variant == "tile1d":
        rules.append((t["BM"] % t["TM"] == 0, "BM must be a multiple of TM"))
    elif variant in ("tile2d", "vectorized"):
        rules += [(t["BM"] % t["TM"] == 0, "BM must be a multiple of TM"),
                  (t["BN"] % t["TN"] == 0, "BN must be a multiple of TN")]
    if variant == "vectorized":
        rules += [(t["TM"] % 4 == 0 and t["TN"] % 4 == 0, "TM and TN must be multiples of 4")]
    if variant in _WARP_RUNGS:
        lm, ln = t["LM"], 32 // t["LM"]
        rules += [(t["BM"] % t["WM"] == 0 and t["BN"] % t["WN"] == 0,
                   "the warp tile WM x WN must divide the block tile BM x BN"),
                  (32 % lm == 0, "LM (lanes along M) must divide 32"),
                  (t["WM"] % (lm * 4) == 0 and t["WN"] % (ln * 4) == 0,
                   f"WM must be a multiple of 4*LM = {4 * lm} and WN of 4*(32/LM) = {4 * ln}"),
                  (t["MINB"] <= 32, "MINB (blocks per SM) is at most 32")]
    if "GROUP" in t:
        rules.append((t["GROUP"] <= 64, "GROUP (block rows per group) is at most 64"))
    if variant in ("vectorized", *_WARP_RUNGS):
        rules += [(t["BK"] % 4 == 0, "BK must be a multiple of 4 (float4 loads)"),
                  ((t["BM"] * t["BK"] // 4) % n == 0 and (t["BK"] * t["BN"] // 4) % n == 0,
                   f"the {n} threads must share the float4s of the A and B tiles evenly")]
    limit = SMEM_PER_BLOCK_MAX if variant in _WARP_RUNGS else STATIC_SMEM_MAX
    rules.append((shared_bytes(variant, t) <= limit,
                  f"{shared_bytes(variant, t)} bytes of shared memory (at most {limit})"))
    return rules


def threads(variant: str, t: dict | None = None) -> int:
    """Threads per block of ``variant`` with tiles ``t`` (default :data:`TILES`)."""
    t = TILES[variant] if t is None else t
    if variant in ("naive", "coalesced", "smem"):
        return 1024
    if variant == "tile1d":
        return t["BM"] * t["BN"] // t["TM"]
    if variant in ("tile2d", "vectorized"):
        return t["BM"] * t["BN"] // (t["TM"] * t["TN"])
    return (t["BM"] // t["WM"]) * (t["BN"] // t["WN"]) * 32


def shared_bytes(variant: str, t: dict | None = None) -> int:
    """Shared memory of one block in bytes (static for rungs 3-6, dynamic for 7-9: As rows are
    padded by 4 floats there, and rungs 8-9 have two stages)."""
    t = TILES[variant] if t is None else t
    if variant in ("naive", "coalesced"):
        return 0
    if variant == "smem":
        return 2 * 32 * 32 * 4
    stage = t["BK"] * (t["BM"] + t["BN"]) * 4
    if variant in _WARP_RUNGS:
        stage = t["BK"] * (t["BM"] + 4 + t["BN"]) * 4
    return stage * (2 if variant in ("double_buffer", "autotuned") else 1)


def dynamic_smem(variant: str, t: dict) -> int:
    """Bytes of dynamic shared memory to launch with (0 for the rungs with static tiles)."""
    return shared_bytes(variant, t) if variant in _WARP_RUNGS else 0


def block_tile(variant: str, t: dict | None = None) -> tuple[int, int, int]:
    """(BM, BN, BK): the tile of C a block computes and its step along K."""
    t = TILES[variant] if t is None else t
    return (t.get("BM", 32), t.get("BN", 32), t.get("BK", 32))


def build(variant: str, arch=None, **overrides) -> toolchain.Build:
    """The compiled rung (for ``arch``, default the current GPU) with its checked tiles."""
    return toolchain.compile(kernel_file(variant), arch, defines=tiles(variant, **overrides))


def check_shapes(variant: str, a, b, t: dict) -> tuple[int, int, int]:
    """Check ``a`` (M,K) and ``b`` (K,N): float32, C-contiguous, on the GPU, sizes the rung can
    run; returns (M, N, K). Raises TypeError/ValueError before anything is launched."""
    launch.check_array("a", a, dtype=np.float32, ndim=2)
    launch.check_array("b", b, dtype=np.float32, ndim=2)
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"a is {a.shape} and b is {b.shape}: a's columns ({k}) must equal "
                         f"b's rows ({k2})")
    if min(m, n, k) < 1:
        raise ValueError(f"M, N, K must be at least 1, got M={m}, N={n}, K={k}")
    if max(m * k, k * n, m * n) >= 2**31:
        raise ValueError("each matrix must have fewer than 2**31 elements (32-bit indexing)")
    if variant not in RAGGED_OK:
        bm, bn, bk = block_tile(variant, t)
        for name, value, mult, tile in (("M", m, bm, "BM"), ("N", n, bn, "BN"), ("K", k, bk, "BK")):
            if value % mult:
                raise ValueError(f"{variant} needs {name} to be a multiple of {tile} = {mult} "
                                 f"(float4 tiles, no bounds checks), got {name} = {value}; "
                                 f"rungs {', '.join(RAGGED_OK)} take any size")
        for name, x in (("a", a), ("b", b)):
            launch.check_aligned(name, x, 16, "float4 loads")
    return m, n, k


def sgemm(a, b, variant: str = FINAL, **tile_overrides):
    """``a @ b`` by rung ``variant`` of :data:`VARIANTS` (a CuPy float32 array, poisoned with NaN
    before the launch). ``tile_overrides`` (e.g. ``BM=64``) replace :data:`TILES` for this call."""
    run, c = sgemm_launcher(a, b, variant, **tile_overrides)
    run()
    return c


def sgemm_launcher(a, b, variant: str = FINAL, **tile_overrides):
    """A no-argument callable that launches ``variant`` on ``a``, ``b`` into one output buffer
    (checked and compiled once; for timing loops). Returns ``(run, c)``."""
    launch.check_choice("variant", variant, VARIANTS)
    t = tiles(variant, **tile_overrides)
    m, n, k = check_shapes(variant, a, b, t)
    c = launch.poisoned((m, n), np.float32)
    fn = launch.get_kernel(kernel_file(variant), f"sgemm_{variant}", defines=t)
    bm, bn, _ = block_tile(variant, t)
    grid, block, smem = (-(-n // bn), -(-m // bm)), threads(variant, t), dynamic_smem(variant, t)
    args = (a, b, c, np.int32(m), np.int32(n), np.int32(k))
    return (lambda: launch.launch(fn, grid, block, args, shared_mem=smem)), c


# --------------------------------------------------------------------------------------------
# cuBLAS, the yardstick
# --------------------------------------------------------------------------------------------

#: How TF32 is kept out of cuBLAS: CuPy reads ``CUPY_TF32`` (default 0: FP32 compute for
#: float32 matmul) and cuBLAS honours ``NVIDIA_TF32_OVERRIDE=0``; both are set before CuPy's
#: first matmul, and :func:`cublas_settings` records what CuPy will use.
TF32_ENV = {"CUPY_TF32": "0", "NVIDIA_TF32_OVERRIDE": "0"}


def _no_tf32() -> None:
    for k, v in TF32_ENV.items():
        os.environ.setdefault(k, v)


def cublas_settings() -> dict:
    """The TF32 environment and CuPy's compute type for float32 matmul (must not be TF32)."""
    _no_tf32()
    info = {k: os.environ.get(k) for k in TF32_ENV}
    try:
        from cupy._core import _routines_linalg as lin
        ct = lin.get_compute_type(np.float32)
        info["cupy_compute_type_float32"] = lin.compute_type_to_str(ct)
        info["tf32"] = ct == lin.COMPUTE_TYPE_TF32
    except Exception as exc:  # a CuPy without these internals: the env settings still hold
        info["cupy_compute_type_float32"] = f"unknown ({type(exc).__name__})"
    return info


def cublas(a, b):
    """``a @ b`` by cuBLAS through ``cupy.matmul``, float32 with TF32 off (:data:`TF32_ENV`)."""
    _no_tf32()
    launch.check_array("a", a, dtype=np.float32, ndim=2)
    launch.check_array("b", b, dtype=np.float32, ndim=2)
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"a is {a.shape} and b is {b.shape}: a's columns must equal b's rows")
    import cupy
    return cupy.matmul(a, b)
