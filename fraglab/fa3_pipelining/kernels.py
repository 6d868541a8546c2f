"""Wrappers of the chapter's sm_90a kernels (``kernels/10_fa3_pipelining_*.cu``): the attention
variants (:func:`attention`) and the building blocks (:func:`wgmma_gemm`, :func:`mbarrier_ring`,
:func:`swizzle_tile`, :func:`warpspec_rowsum`), with the NumPy model of the 128-byte swizzle.
Their launch numbers (tiles, rows, threads, shared memory) are read back from the compiled
kernel files (:func:`fraglab.launch.constants`); the variants, tiles and checks of a launch are
:mod:`.config`'s, the tma rung's measured picks :mod:`.tuning`'s, its tensor maps :mod:`.maps`'s.

Attention takes the FA-2 kernel's arguments and runs its argument checks
(:func:`fraglab.attention.check_fa2_arguments`): (B, H, N, d) float16 or uint16
(bf16 bits), d 64 or 128 (256 in the variants of :func:`.config.head_dims`), any N >= 1,
``causal``, ``scale``. Every kernel needs Hopper's architecture-specific target sm_90a (wgmma,
setmaxnreg): compute capability 9.0 exactly, or the PTX interpreter; anything else raises
before a launch.
"""
from __future__ import annotations

import numpy as np

from .. import device, launch
from ..attention import LOG2E, check_fa2_arguments, fa2_output
from .config import (ARCH, DESCRIPTIONS, HEAD_DIMS, INSTEAD, NO_D256,  # noqa: F401
                     TMA_VARIANTS, VARIANTS, check_variant, dims_of, head_dims, kernel_file,
                     kernel_name)
from .maps import map_arguments, tensor_maps
from .tuning import build_config, tma_config_for  # noqa: F401


def _kernel(name: str, kernel: str, source: str | None = None, defines: dict | None = None):
    return launch.get_kernel(name, kernel, arch=ARCH, source=source, defines=defines)


def _constants(name: str, prefix: str, source: str | None = None, defines: dict | None = None):
    return launch.constants(name, prefix, arch=ARCH, source=source, defines=defines)


# --------------------------------------------------------------------------------------------
# Attention
# --------------------------------------------------------------------------------------------

def attention_launcher(q, k, v, *, causal: bool = False, variant: str = "twostage",
                       scale: float | None = None, out=None, source: str | None = None,
                       stages: int | None = None, key_tile: int | None = None,
                       consumers: int | None = None, one_softmax: bool = False,
                       defines: dict | None = None):
    """Check the arguments of :func:`attention`, allocate the (poisoned) output, and return
    ``(launch, out)``: ``launch()`` runs the kernel once on the current stream (for
    :mod:`fraglab.bench`). ``source``: a replacement for the variant's .cu text (the lab);
    ``stages``: the K/V ring depth, 2 or 3 (the tma rung: 2-4 where shared memory holds them);
    ``key_tile``: keys per K/V tile (the tma rung only: :data:`.config.TMA_KEY_TILES`);
    ``consumers``: consumer warpgroups, 2 or 3 (the tma rung only); for the tma rung all three
    default to the measured tuning table's pick for (d, N, causal) (:func:`.tuning.tma_config_for`),
    for the others to the file's own; ``one_softmax``: one masked softmax instead of a masked
    and an unmasked copy (the bench compares them); ``defines``: more -D tuning knobs
    (``FA3_FAST_LOAD``, ``FA3_CONSUMER_REGS_DEF``, ``FA3_PRODUCER_REGS_DEF``). The grid, block,
    shared memory and tensor-map boxes are the compiled module's (``fa3_*`` constants)."""
    check_variant(variant)                  # once: what follows takes it as checked
    device.require(ARCH, f"the FA-3 kernel {variant!r}", INSTEAD)
    dtype, (b, h, n, d), sc = check_fa2_arguments(q, k, v, causal, scale, dims_of(variant))
    cfg = build_config(variant, d, n, causal, stages, key_tile, consumers)
    out = fa2_output(q, out, "the epilogue stores 4 bytes per pair")
    name = kernel_file(variant) if source is None else f"{kernel_file(variant)}_lab"
    defines = {**cfg.defines, **({"FA3_ONE_SOFTMAX": 1} if one_softmax else {}), **(defines or {})}
    fn = _kernel(name, kernel_name(variant, dtype, d), source, defines or None)
    c = _constants(name, "fa3_", source, defines or None)
    rows, bc = c["fa3_rows"], c[f"fa3_d{d}_key_tile"]
    maps = tensor_maps(q, k, v, rows, bc) if variant in TMA_VARIANTS else ()
    args = (q, k, v, out, np.int32(n), np.float32(sc * LOG2E), np.int32(bool(causal)),
            *map_arguments(maps))
    grid, threads, smem = (-(-n // rows), b * h), c["fa3_threads"], c[f"fa3_d{d}_smem"]

    def run():
        launch.launch(fn, grid, threads, args, shared_mem=smem)
    run.tensor_maps = maps          # alive as long as the launcher (their bytes point at q, k, v)
    run.constants = c               # what the launch took from the module
    return run, out


def attention(q, k, v, *, causal: bool = False, variant: str = "twostage",
              scale: float | None = None):
    """softmax(Q K^T * scale) V with one of the FA-3 main loops (:data:`VARIANTS`): wgmma from
    swizzled shared memory, a cp.async producer warpgroup and two consumer warpgroups of 64
    query rows. ``q``, ``k``, ``v``: (B, H, N, d) float16, or uint16 holding bf16; d 64 or 128, 256 where
    :func:`.config.head_dims` has it;
    any N >= 1; ``causal`` masks keys after the query. Needs sm_90a. Returns O (same dtype)."""
    run, out = attention_launcher(q, k, v, causal=causal, variant=variant, scale=scale)
    run()
    return out


# --------------------------------------------------------------------------------------------
# Building blocks
# --------------------------------------------------------------------------------------------

def wgmma_gemm(a, b, *, b_major: str = "k"):
    """C = A B with one warpgroup's wgmma (``kernels/10_fa3_pipelining_wgmma.cu``). ``a``:
    float16 (64, K); ``b``: float16 (N, K) when ``b_major='k'`` (B given transposed, like K in
    Q K^T) or (K, N) when ``b_major='mn'`` (like V in P V); N 64 or 128, K a multiple of 16 up
    to 128. Returns C (64, N) float32."""
    device.require(ARCH, "wgmma_gemm", INSTEAD)
    launch.check_choice("b_major", b_major, ("k", "mn"))
    launch.check_array("a", a, dtype=np.float16, ndim=2)
    launch.check_array("b", b, dtype=np.float16, ndim=2)
    if a.shape[0] != 64:
        raise ValueError(f"a must have 64 rows (one m64 wgmma), got shape {a.shape}")
    kk = int(a.shape[1])
    launch.check_range("K", kk, 16, 128)
    launch.check_multiple("K", kk, 16)
    n = int(b.shape[0] if b_major == "k" else b.shape[1])
    launch.check_choice("N", n, (64, 128))
    want = (n, kk) if b_major == "k" else (kk, n)
    launch.check_array("b", b, dtype=np.float16, shape=want)
    for name, x in (("a", a), ("b", b)):
        launch.check_aligned(name, x, 16, "16-byte loads")
    c = launch.poisoned((64, n), np.float32)
    name = "10_fa3_pipelining_wgmma"
    fn = _kernel(name, f"wgmma_gemm_{'kmajor' if b_major == 'k' else 'mnmajor'}_n{n}")
    k = _constants(name, "wgmma_gemm_")
    launch.launch(fn, 1, k["wgmma_gemm_threads"],
                  (a.view(np.uint16), b.view(np.uint16), c, np.int32(kk)),
                  shared_mem=k["wgmma_gemm_smem"])
    return c


def ring_constants() -> dict[str, int]:
    """The mbarrier ring's ``ring_chunk`` (floats a chunk), ``ring_stages``, ``ring_threads``
    and ``ring_smem``, from ``kernels/10_fa3_pipelining_mbarrier.cu``."""
    return _constants("10_fa3_pipelining_mbarrier", "ring_")


def mbarrier_ring(x):
    """Stream float32 chunks (``ring_chunk`` values: 256) through a shared-memory ring of
    ``ring_stages`` (2), producer warp to consumer warp
    (``kernels/10_fa3_pipelining_mbarrier.cu``). Returns ``2 * x + (chunk index % stages)``
    chunk by chunk, which :func:`mbarrier_ring_reference` gives."""
    device.require(ARCH, "mbarrier_ring", INSTEAD)
    launch.check_array("x", x, dtype=np.float32, ndim=1)
    k = ring_constants()
    chunk = k["ring_chunk"]
    if x.size == 0 or x.size % chunk:
        raise ValueError(f"x must hold a positive multiple of {chunk} values, got {x.size}")
    launch.check_aligned("x", x, 16, "cp.async.bulk copies 16-byte aligned runs")
    out = launch.poisoned(x.shape, np.float32)
    fn = _kernel("10_fa3_pipelining_mbarrier", "mbarrier_ring")
    launch.launch(fn, 1, k["ring_threads"], (x, out, np.int32(x.size // chunk)),
                  shared_mem=k["ring_smem"])
    return out


def mbarrier_ring_reference(x) -> np.ndarray:
    k = ring_constants()
    x = np.asarray(x, dtype=np.float32).reshape(-1, k["ring_chunk"])   # float32, as the kernel
    tag = (np.arange(len(x)) % k["ring_stages"]).astype(np.float32)[:, None]
    return (np.float32(2) * x + tag).reshape(-1)


def swizzle_tile(src, n_valid: int):
    """The shared-memory image (128 x d 16-bit values, as uint16) of a 128-row tile copied by
    the attention producers' cp.async path (``kernels/10_fa3_pipelining_copy.cu``): 128-byte
    swizzle, rows >= ``n_valid`` zero. :func:`sw128_image` is its NumPy model."""
    device.require(ARCH, "swizzle_tile", INSTEAD)
    launch.check_array("src", src, dtype=np.uint16, ndim=2)
    d = int(src.shape[1])
    launch.check_choice("d", d, (64, 128))
    k = swizzle_constants()
    rows = k["swizzle_tile_rows"]
    launch.check_array("src", src, dtype=np.uint16, shape=(rows, d))
    launch.check_range("n_valid", int(n_valid), 0, rows)
    launch.check_aligned("src", src, 16, "cp.async copies 16 bytes")
    image = launch.poisoned((rows, d), np.uint16)
    fn = _kernel("10_fa3_pipelining_copy", f"swizzle_tile_d{d}")
    launch.launch(fn, 1, k["swizzle_tile_threads"], (src, image, np.int32(n_valid)),
                  shared_mem=k[f"swizzle_tile_smem_d{d}"])
    return image


def swizzle_constants() -> dict[str, int]:
    """The copy's ``swizzle_tile_rows`` (128), ``_threads`` and ``_smem_d<D>``, from
    ``kernels/10_fa3_pipelining_copy.cu``."""
    return _constants("10_fa3_pipelining_copy", "swizzle_tile_")


def warpspec_rowsum(x):
    """Row sums of tiles of 128 x 32 float32 values, passed from a producer warpgroup to two
    consumer warpgroups through an mbarrier ring, registers moved by setmaxnreg
    (``kernels/10_fa3_pipelining_warpspec.cu``). ``x``: (T, 128, 32) float32; returns (T, 128)."""
    device.require(ARCH, "warpspec_rowsum", INSTEAD)
    launch.check_array("x", x, dtype=np.float32, ndim=3)
    name = "10_fa3_pipelining_warpspec"
    k = _constants(name, "warpspec_")
    tile = (k["warpspec_rows"], k["warpspec_cols"])
    if x.shape[1:] != tile or x.shape[0] < 1:
        raise ValueError(f"x must have shape (T, {tile[0]}, {tile[1]}) with T >= 1, got {x.shape}")
    out = launch.poisoned(x.shape[:2], np.float32)
    fn = _kernel(name, "warpspec_rowsum")
    launch.launch(fn, 1, k["warpspec_threads"], (x, out, np.int32(x.shape[0])),
                  shared_mem=k["warpspec_smem"])
    return out


def sw128_offset(r: int, c: int, rows: int) -> int:
    """Byte offset of row ``r``'s 16-byte chunk ``c`` in a swizzled tile of ``rows`` rows (the
    kernel's ``sw128_offset``): 64-value panels of ``rows`` x 128 bytes, chunk ``c % 8`` of a
    row stored at ``(c % 8) ^ (r % 8)``."""
    return (c // 8) * rows * 128 + r * 128 + (((c % 8) ^ (r % 8)) << 4)


def sw128_image(tile, n_valid: int) -> np.ndarray:
    """What :func:`swizzle_tile` must return for ``tile`` (rows x d, uint16)."""
    tile = np.asarray(tile)
    rows, d = tile.shape
    img = np.zeros(rows * d, dtype=np.uint16)
    for r in range(min(int(n_valid), rows)):
        for c in range(d // 8):
            o = sw128_offset(r, c, rows) // 2
            img[o:o + 8] = tile[r, 8 * c:8 * c + 8]
    return img.reshape(rows, d)
