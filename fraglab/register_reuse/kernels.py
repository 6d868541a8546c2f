"""Wrappers of the SGEMM ladder (``kernels/07_register_reuse_<rung>.cu``): tiles, checks, launch.

Every rung computes ``C = A @ B`` for row-major float32 ``A (M, K)``, ``B (K, N)``. Tile sizes are
compile-time defines that Python chooses (the ladder and its tuning sweeps): :data:`TILES` holds
the ones each rung launches with (the ``#ifndef`` defaults in the ``.cu`` files only serve a
compile without defines, and a test keeps them equal for rungs 1-8). ``sgemm(a, b, variant=...,
BM=...)`` overrides them for one call, which is how the autotuning sweep tries other
configurations. What follows from a choice (threads a block, the block's tile of C, dynamic
shared memory) the launch reads back from the build of those tiles (``SGEMM_LAUNCH`` in each
rung file: :func:`launch_numbers`); :func:`threads` and :func:`shared_bytes` are the chooser's
checks before a build (:func:`tiles`), and a test keeps them equal to the builds'.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

from .. import launch, toolchain, tools

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
    "split_k": "tiles per shape from an H100 table, K split over more blocks where the grid "
               "would leave SMs idle (partial sums added in a fixed order); ragged edges guarded",
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
    # the tiles rung 10 compiles with when no shape is given (compile tests, SASS counts); a
    # call takes tiles_for(M, N, K) from the shape table instead. SPLIT: at most this many
    # slices of K (a launch parameter, not a define); GUARD: edge tiles (set from the shape);
    # the tuning switches (SWITCHES), all off.
    "split_k": dict(BM=128, BN=256, BK=16, WM=64, WN=64, LM=4, MINB=1, GROUP=8, SPLIT=1, GUARD=0,
                    REGDB=0, SWIZZLE=0, ORDER=0),
}

#: Rung 10's tuning switches (defines, 0 = off; the sweep turns them on per shape where they pay;
#: sgemm_switched_tile in kernels/07_register_reuse.cuh): register double buffering of the
#: fragments, the XOR-swizzled unpadded A tile, the outer product's FFMA order.
SWITCHES = {
    "REGDB": "register double buffering: the fragments of k+1 load while the FFMAs of k run, "
             "across the barrier too",
    "SWIZZLE": "the k-major A tile unpadded with its float4 slots XOR-swizzled by k (no bank "
               "conflicts in its transposed store at BK = 16)",
    "ORDER": "the outer product's FFMA order: 0 row by row, 1 row snake, 2 column by column, "
             "3 column snake",
}
#: Their values: on/off, and the four orders.
SWITCH_VALUES = {"REGDB": (0, 1), "SWIZZLE": (0, 1), "ORDER": (0, 1, 2, 3)}

#: Rungs that take any M, N, K (bounds-checked loads and stores); the others need M % BM,
#: N % BN and K % BK to be 0 (float4 tiles, no bounds checks) and 16-byte aligned arrays.
RAGGED_OK = ("naive", "coalesced", "smem", "tile1d", "tile2d")
_WARP_RUNGS = ("warptile", "double_buffer", "autotuned", "split_k")
#: Rung 10 takes any M and N, and K, N multiples of 4 (float4 rows), with GUARD = 1.
SPLIT_MAX = 32
#: Tile parameters that are not compile-time defines (launch parameters).
LAUNCH_PARAMS = ("SPLIT",)

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
        launch.check_range(k, v, 0 if k == "GUARD" or k in SWITCHES else 1, 1024)
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
    if "SPLIT" in t:
        rules.append((t["SPLIT"] <= SPLIT_MAX, f"SPLIT (slices of K) is at most {SPLIT_MAX}"))
    if "GUARD" in t:
        rules.append((t["GUARD"] in (0, 1), "GUARD is 0 (whole tiles) or 1 (guarded edges)"))
    rules += _switch_rules(t)
    if variant in ("vectorized", *_WARP_RUNGS):
        rules += [(t["BK"] % 4 == 0, "BK must be a multiple of 4 (float4 loads)"),
                  ((t["BM"] * t["BK"] // 4) % n == 0 and (t["BK"] * t["BN"] // 4) % n == 0,
                   f"the {n} threads must share the float4s of the A and B tiles evenly")]
    limit = SMEM_PER_BLOCK_MAX if variant in _WARP_RUNGS else STATIC_SMEM_MAX
    rules.append((shared_bytes(variant, t) <= limit,
                  f"{shared_bytes(variant, t)} bytes of shared memory (at most {limit})"))
    return rules


def _switch_rules(t: dict) -> list[tuple[bool, str]]:
    """What rung 10's switches need (the static_asserts of 07_register_reuse.cuh, said first)."""
    rules = [(t[k] in v, f"{k} is one of {', '.join(map(str, v))}")
             for k, v in SWITCH_VALUES.items() if k in t]
    if t.get("SWIZZLE"):
        wmiter = t["WM"] // (4 * t["LM"]) if t["LM"] else 0
        rules += [(t["BM"] % 32 == 0 and 32 % t["BK"] == 0,
                   "SWIZZLE=1 needs BM a multiple of 32 and BK dividing 32 (4, 8, 16 or 32)"),
                  (t["WM"] >= 32 and wmiter > 0 and wmiter & (wmiter - 1) == 0,
                   "SWIZZLE=1 needs WM >= 32 and WM / (4*LM) a power of two")]
    if t.get("REGDB") or t.get("SWIZZLE") or t.get("ORDER"):
        rules.append((t["BK"] % 2 == 0, "the switches need an even BK"))
    return rules


def lda(t: dict) -> int:
    """Leading dimension of the warp rungs' k-major A tile: BM + 4 (padded), or BM with
    SWIZZLE = 1 (rung 10's XOR-swizzled layout)."""
    return t["BM"] + (0 if t.get("SWIZZLE") else 4)


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
        stage = t["BK"] * (lda(t) + t["BN"]) * 4
    return stage * (2 if variant in ("double_buffer", "autotuned", "split_k") else 1)


def dynamic_smem(variant: str, t: dict) -> int:
    """Bytes of dynamic shared memory to launch with (0 for the rungs with static tiles)."""
    return shared_bytes(variant, t) if variant in _WARP_RUNGS else 0


def block_tile(variant: str, t: dict | None = None) -> tuple[int, int, int]:
    """(BM, BN, BK): the tile of C a block computes and its step along K."""
    t = TILES[variant] if t is None else t
    return (t.get("BM", 32), t.get("BN", 32), t.get("BK", 32))


def launch_numbers(variant: str, t: dict) -> dict[str, int]:
    """``sgemm_launch_threads``, ``_tile_m``, ``_tile_n`` and ``_smem`` of ``variant`` built
    with tiles ``t``, read back from the module the launch runs (:func:`fraglab.launch.constants`)."""
    return launch.constants(kernel_file(variant), "sgemm_launch_", defines=defines(t))


def defines(t: dict) -> dict:
    """The compile-time defines of tiles ``t`` (:data:`LAUNCH_PARAMS` left out)."""
    return {k: v for k, v in t.items() if k not in LAUNCH_PARAMS}


def build(variant: str, arch=None, **overrides) -> toolchain.Build:
    """The compiled rung (for ``arch``, default the current GPU) with its checked tiles."""
    return toolchain.compile(kernel_file(variant), arch, defines=defines(tiles(variant, **overrides)))


def _dims(a, b) -> tuple[int, int, int]:
    """Check ``a`` (M,K) and ``b`` (K,N) as arrays (float32, C-contiguous, 2-D, inner dimensions
    equal, at least 1, 32-bit indexable); returns (M, N, K)."""
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
    return m, n, k


def whole_tiles(m: int, n: int, k: int, t: dict) -> bool:
    """True when M, N, K are multiples of the block tile (BM, BN, BK) of tiles ``t``."""
    return m % t["BM"] == 0 and n % t["BN"] == 0 and k % t["BK"] == 0


def check_shapes(variant: str, a, b, t: dict) -> tuple[int, int, int]:
    """Check ``a`` (M,K) and ``b`` (K,N): float32, C-contiguous, on the GPU, sizes the rung can
    run; returns (M, N, K). Raises TypeError/ValueError before anything is launched."""
    m, n, k = _dims(a, b)
    if variant == "split_k":
        for name, value in (("N", n), ("K", k)):
            if value % 4:
                raise ValueError(f"split_k needs {name} to be a multiple of 4 (its rows are read "
                                 f"as float4s), got {name} = {value}; rungs "
                                 f"{', '.join(RAGGED_OK)} take any size")
    if variant not in RAGGED_OK and not (variant == "split_k" and t["GUARD"]):
        bm, bn, bk = block_tile(variant, t)
        for name, value, mult, tile in (("M", m, bm, "BM"), ("N", n, bn, "BN"), ("K", k, bk, "BK")):
            if value % mult:
                raise ValueError(f"{variant} needs {name} to be a multiple of {tile} = {mult} "
                                 f"(float4 tiles, no bounds checks), got {name} = {value}; "
                                 + ("GUARD=1 takes edge tiles" if variant == "split_k" else
                                    f"rungs {', '.join(RAGGED_OK)} take any size"))
    if variant not in RAGGED_OK:
        for name, x in (("a", a), ("b", b)):
            launch.check_aligned(name, x, 16, "float4 loads")
    return m, n, k


def sgemm(a, b, variant: str = FINAL, **tile_overrides):
    """``a @ b`` by rung ``variant`` of :data:`VARIANTS` (a CuPy float32 array, poisoned with NaN
    before the launch). ``tile_overrides`` (e.g. ``BM=64``) replace :data:`TILES` for this call
    (for ``split_k``: replace :func:`tiles_for`'s choice for the shape)."""
    run, c = sgemm_launcher(a, b, variant, **tile_overrides)
    run()
    return c


def sgemm_launcher(a, b, variant: str = FINAL, **tile_overrides):
    """A no-argument callable that launches ``variant`` on ``a``, ``b`` into one output buffer
    (checked and compiled once; for timing loops). Returns ``(run, c)``."""
    launch.check_choice("variant", variant, VARIANTS)
    if variant == "split_k":
        return _split_k_launcher(a, b, tile_overrides)
    t = tiles(variant, **tile_overrides)
    m, n, k = check_shapes(variant, a, b, t)
    c = launch.poisoned((m, n), np.float32)
    fn = launch.get_kernel(kernel_file(variant), f"sgemm_{variant}", defines=t)
    got = launch_numbers(variant, t)
    grid = (-(-n // got["sgemm_launch_tile_n"]), -(-m // got["sgemm_launch_tile_m"]))
    block, smem = got["sgemm_launch_threads"], got["sgemm_launch_smem"]
    args = (a, b, c, np.int32(m), np.int32(n), np.int32(k))
    return (lambda: launch.launch(fn, grid, block, args, shared_mem=smem)), c


def split_plan(k: int, bk: int, split: int) -> tuple[int, int]:
    """``(splits, k_split)``: K cut into at most ``split`` slices of whole BK steps, k_split
    columns each (the last one shorter where K is ragged). ``splits`` is smaller than ``split``
    where K has fewer steps, or where equal slices leave one empty (10 steps in 4 slices: 3+3+3+1;
    in 6: 2+2+2+2+2, 5 slices)."""
    steps = -(-k // bk)
    per = -(-steps // max(1, min(split, steps)))
    return -(-steps // per), per * bk


def _split_k_launcher(a, b, overrides: dict):
    m, n, k = _dims(a, b)
    t = tiles_for(m, n, k, **overrides)
    check_shapes("split_k", a, b, t)
    splits, k_split = split_plan(k, t["BK"], t["SPLIT"])
    c = launch.poisoned((m, n), np.float32)
    out = c if splits == 1 else launch.poisoned((splits, m, n), np.float32)
    fn = launch.get_kernel(kernel_file("split_k"), "sgemm_split_k", defines=defines(t))
    got = launch_numbers("split_k", t)
    grid = (-(-n // got["sgemm_launch_tile_n"]), -(-m // got["sgemm_launch_tile_m"]), splits)
    block, smem = got["sgemm_launch_threads"], got["sgemm_launch_smem"]
    args = (a, b, out, np.int32(m), np.int32(n), np.int32(k), np.int32(k_split))
    if splits == 1:
        return (lambda: launch.launch(fn, grid, block, args, shared_mem=smem)), c
    red = launch.get_kernel(kernel_file("split_k"), "sgemm_split_k_reduce", defines=defines(t))
    count4 = m * n // 4
    rgrid = min(-(-count4 // 256), 16 * launch.sm_count())
    rargs = (out, c, np.int32(count4), np.int32(splits), np.int64(m * n))

    def run():
        launch.launch(fn, grid, block, args, shared_mem=smem)
        launch.launch(red, rgrid, 256, rargs)
    return run, c


# --------------------------------------------------------------------------------------------
# Rung 10's tiles per shape: the table, the nearest entry, the wave model that seeds it
# --------------------------------------------------------------------------------------------

#: The shape table (``python -m fraglab.register_reuse sweep-shapes --out DIR`` writes
#: ``DIR/shape_table.json``; the record's copy sits beside chapter 07's results.json).
SHAPE_TABLE = tools.REPO_ROOT / "book" / "data" / "07_register_reuse" / "shape_table.json"

#: Tile configurations rung 10 chooses from (the sweep times them, the wave model seeds the
#: table with them): rung 9's 128x256, 128x128 with 64x64 or 32x64 warp tiles, 64x128, 64x64
#: and 256x128. MINB asks ptxas for that many blocks per SM (registers <= 65536 / (MINB x threads)).
SHAPE_CONFIGS = (
    dict(BM=128, BN=256, BK=16, WM=64, WN=64, LM=4, MINB=1, GROUP=8),
    dict(BM=128, BN=128, BK=8, WM=64, WN=64, LM=4, MINB=2, GROUP=8),
    dict(BM=128, BN=128, BK=8, WM=32, WN=64, LM=4, MINB=2, GROUP=8),
    dict(BM=64, BN=128, BK=8, WM=32, WN=64, LM=4, MINB=4, GROUP=8),
    dict(BM=64, BN=64, BK=8, WM=32, WN=32, LM=4, MINB=4, GROUP=8),
    dict(BM=256, BN=128, BK=16, WM=64, WN=64, LM=4, MINB=1, GROUP=8),
)
#: The wave model's guess of each configuration's TFLOP/s on a full H100 (132 SMs busy): the
#: first sweep's 4096^3 figures for the tiles it timed (book/data/07_register_reuse/results.json,
#: 2026-11-23), lower guesses for the two small tiles it did not. Only the unmeasured seed uses them.
PRIOR_TFLOPS = (49.7, 49.4, 48.2, 44.0, 38.0, 47.7)
H100_SMS = 132
#: The shapes of the table (the sweep times each): the issue's squares and non-square pair, a
#: small cube, a long K, and two ragged ones (not whole tiles: GUARD = 1).
TABLE_SHAPES = ((1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (6144, 6144, 6144),
                (8192, 8192, 8192), (4096, 4096, 1024), (8192, 1024, 4096), (512, 512, 512),
                (1024, 1024, 8192), (1000, 1000, 1000), (3000, 2000, 1500))
#: Splits the wave model and the sweep consider.
SPLITS = (1, 2, 3, 4, 6, 8)


def config_label(t: dict) -> str:
    """``128x256x16/64x64 M1 G8 S2``: block tile, warp tile, MINB, GROUP, SPLIT; then the lane
    grid where it is not 4 x 8 (``L8``) and the switches that are on (``RDB SWZ O2``)."""
    return (f"{t['BM']}x{t['BN']}x{t['BK']}/{t['WM']}x{t['WN']} M{t['MINB']} G{t['GROUP']}"
            + (f" S{t['SPLIT']}" if "SPLIT" in t else "") + switch_label(t))


def switch_label(t: dict) -> str:
    """`` L8 RDB SWZ O2``: what sets ``t`` apart from the table's first configurations (empty
    for those)."""
    return ((f" L{t['LM']}" if t.get("LM", 4) != 4 else "") + (" RDB" if t.get("REGDB") else "")
            + (" SWZ" if t.get("SWIZZLE") else "") + (f" O{t['ORDER']}" if t.get("ORDER") else ""))


def wave_model(m: int, n: int, k: int, t: dict, split: int, tflops: float,
               sms: int = H100_SMS) -> float:
    """Seconds the wave model expects: every SM works at ``tflops / sms`` on its blocks one after
    another, so the busiest SM, with ceil(blocks / sms) blocks, sets the time (wave
    quantization); a split adds its reduction (reading the slices, writing C, at ~2.5 TB/s) and
    a launch (~3 us)."""
    splits, k_split = split_plan(k, t["BK"], split)
    blocks = -(-m // t["BM"]) * -(-n // t["BN"]) * splits
    block_s = 2.0 * t["BM"] * t["BN"] * k_split / (tflops * 1e12 / sms)
    reduce_s = 0.0 if splits == 1 else (splits + 1) * m * n * 4 / 2.5e12 + 3e-6
    return -(-blocks // sms) * block_s + reduce_s


def seed_entry(m: int, n: int, k: int, sms: int = H100_SMS) -> dict:
    """The wave model's pick for M x N x K among :data:`SHAPE_CONFIGS` x :data:`SPLITS` (slices
    of at least 4 BK steps): a table entry marked unmeasured."""
    best = None
    for t, prior in zip(SHAPE_CONFIGS, PRIOR_TFLOPS):
        for split in SPLITS:
            splits, k_split = split_plan(k, t["BK"], split)
            if splits != split or (split > 1 and k_split < 4 * t["BK"]):
                continue
            s = wave_model(m, n, k, t, split, prior, sms)
            if best is None or s < best[0]:
                best = (s, {**t, "SPLIT": split})
    return {"shape": [m, n, k], "tiles": best[1], "measured": False,
            "model_ms": best[0] * 1e3, "label": config_label(best[1])}


_TABLE: dict = {}


def shape_table(path=None) -> dict:
    """The shape table: ``{"measured", "status", "entries": [{"shape", "tiles", ...}]}``, read
    from :data:`SHAPE_TABLE` (the ``results`` of a ``fraglab.bench`` record; re-read when the file
    changes). Without the file: the wave model's entries for the sweep's shapes, unmeasured."""
    path = Path(path or SHAPE_TABLE)
    stamp = path.stat().st_mtime_ns if path.is_file() else None
    if _TABLE.get("key") != (str(path), stamp):
        if stamp is None:
            table = {"measured": False, "status": f"unmeasured: no {path.name}; the wave model's "
                     "picks (kernels.seed_entry)", "entries": [seed_entry(*s) for s in TABLE_SHAPES]}
        else:
            table = json.loads(path.read_text())["results"]
        _TABLE.update(key=(str(path), stamp), table=table)
    return _TABLE["table"]


def nearest_entry(m: int, n: int, k: int, table: dict | None = None) -> dict:
    """The table entry of M x N x K, or the nearest one: the least sum of |log2| ratios of M, N
    and K (1024^3 is as near to 512^3 as to 2048^3). Never an error for a valid shape."""
    entries = (table or shape_table())["entries"]
    if not entries:
        raise ValueError("the shape table has no entries")

    def distance(e):
        return sum(abs(math.log2(x / y)) for x, y in zip((m, n, k), e["shape"]))
    return min(entries, key=distance)


def tiles_for(m: int, n: int, k: int, **overrides) -> dict:
    """What rung 10 (``split_k``) launches for an M x N x K product: the tiles of the nearest
    :func:`shape_table` entry with ``overrides`` on top, checked by :func:`tiles`; SPLIT as
    launched (:func:`split_plan`: no more slices than K has BK steps) and GUARD = 1 where M, N or
    K is not whole tiles (unless ``overrides`` set it)."""
    for name, v in (("M", m), ("N", n), ("K", k)):
        launch.check_range(name, v, 1, 2**31 - 1)
    entry = nearest_entry(m, n, k)
    t = {**TILES["split_k"], **entry["tiles"], **overrides}
    if "GUARD" not in overrides:
        t["GUARD"] = 0 if whole_tiles(m, n, k, t) else 1
    t = tiles("split_k", **t)
    t["SPLIT"] = split_plan(k, t["BK"], t["SPLIT"])[0]
    return t


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
