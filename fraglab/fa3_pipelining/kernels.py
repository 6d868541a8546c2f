"""Wrappers of the chapter's sm_90a kernels (``kernels/10_fa3_pipelining_*.cu``): the four
attention variants (:func:`attention`) and the three building blocks (:func:`wgmma_gemm`,
:func:`mbarrier_ring`, :func:`swizzle_tile`), with the NumPy model of the 128-byte swizzle.

Attention takes the FA-2 kernel's arguments and runs its argument checks
(:func:`fraglab.attention.check_fa2_arguments`): (B, H, N, d) float16 or uint16
(bf16 bits), d 64 or 128 (256 in the variants of :func:`head_dims`), any N >= 1, ``causal``, ``scale``. Every kernel needs Hopper's
architecture-specific target sm_90a (wgmma, setmaxnreg): compute capability 9.0 exactly, or the
PTX interpreter once it runs sm_90a; anything else raises before a launch.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from .. import device, launch, tools
from ..attention import LOG2E, check_fa2_arguments, fa2_output

ARCH = "sm_90a"
#: The main-loop orders of the ladder, each in ``kernels/10_fa3_pipelining_<variant>.cu``.
VARIANTS = ("nooverlap", "twostage", "threestage", "pingpong", "tma")
HEAD_DIMS = (64, 128, 256)    # 256: in the variants of head_dims(variant)
BR = 128                      # query rows per CTA: two consumer warpgroups of 64
STAGES = 3                    # K/V ring depth (FA3_STAGES)
THREADS = 384                 # producer + two consumer warpgroups


def _key_tiles() -> dict[str, dict[int, int]]:
    """Keys per K/V tile by variant and d, read from the lines ``FA3_KERNELS(<variant>,
    <MainLoop>, BC64, BC128)`` and, where the variant has d = 256 kernels,
    ``FA3_KERNELS_D256(<variant>, <MainLoop>, BC256)`` of each
    ``kernels/10_fa3_pipelining_<variant>.cu``: the kernel file is the one home of its tile
    sizes (the numbers the compiler instantiates the kernels with), and the launch reads them
    from there (a test reads them back from a build too: see :func:`smem_bytes`)."""
    import re
    from ..tools import KERNELS_DIR
    tiles = {}
    for v in VARIANTS:
        path = KERNELS_DIR / f"10_fa3_pipelining_{v}.cu"
        text = path.read_text()
        # a tile may be a macro with a default in the file (#define FA3_TMA_BC64 128)
        macros = dict(re.findall(r"^#define\s+(\w+)\s+(\d+)\s*$", text, re.M))
        num = lambda tok: int(macros.get(tok, tok))          # noqa: E731
        m = re.search(rf"^FA3_KERNELS\(\s*{v}\s*,\s*\w+\s*,\s*(\w+)\s*,\s*(\w+)\s*\)", text, re.M)
        if not m:
            raise RuntimeError(f"{path.name} has no line FA3_KERNELS({v}, MainLoop, BC64, BC128)")
        tiles[v] = {64: num(m.group(1)), 128: num(m.group(2))}
        m = re.search(rf"^FA3_KERNELS_D256\(\s*{v}\s*,\s*\w+\s*,\s*(\w+)\s*\)", text, re.M)
        if m:
            tiles[v][256] = num(m.group(1))
    return tiles


#: Keys per K/V tile, by variant and d: ``FA3_KERNELS(..., BC64, BC128)`` and
#: ``FA3_KERNELS_D256(..., BC256)`` of each variant's file (a variant without d = 256 kernels has
#: no 256 entry).
KEY_TILE = _key_tiles()
#: Why a variant has no d = 256 kernels (the chapter's "Head dimension 256" measures it).
NO_D256 = {v: "at d = 256 its consumers spill registers (O alone takes 128 of the 240); the "
              "tma rung, whose producer needs next to none, does not: use variant='tma'"
           for v in ("nooverlap", "twostage", "threestage", "pingpong")}


def head_dims(variant: str) -> tuple[int, ...]:
    """The head dimensions ``variant`` has kernels for."""
    launch.check_choice("variant", variant, VARIANTS)
    return tuple(KEY_TILE[variant])


def stages_for(d: int, stages: int = None) -> int:
    """The K/V ring depth a kernel of head dimension ``d`` is built with (``Fa3Config::STAGES``):
    ``stages`` (default :data:`STAGES`), but at most 2 at d = 256, where three stages of 64-key
    tiles do not fit in shared memory."""
    stages = STAGES if stages is None else stages
    return min(stages, 2) if d == 256 else stages


#: One line per variant: what overlaps the softmax.
DESCRIPTIONS = {
    "nooverlap": "waits for each wgmma at once: the softmax runs alone",
    "twostage": "Algorithm 2: softmax of tile j beside O += P V of tile j-1",
    "threestage": "softmax of tile j beside P V of j-1 and S = Q K^T of j+1",
    "pingpong": "Algorithm 2, and the two consumer warpgroups take turns at the tensor cores",
    "tma": "ping-pong's consumers; one producer thread per operand copies each tile with the TMA",
}


def kernel_file(variant: str) -> str:
    launch.check_choice("variant", variant, VARIANTS)
    return f"10_fa3_pipelining_{variant}"


def kernel_name(variant: str, dtype: str, d: int) -> str:
    """``fa3_<variant>_<dtype>_d<d>``, an extern "C" kernel of :func:`kernel_file`."""
    launch.check_choice("variant", variant, VARIANTS)
    launch.check_choice("dtype", dtype, ("f16", "bf16"))
    launch.check_choice("head dimension d", d, HEAD_DIMS)
    if d not in KEY_TILE[variant]:
        raise ValueError(f"variant {variant!r} has no d = {d} kernels ({NO_D256.get(variant, 'not built')}); "
                         f"variants with d = {d}: {[v for v in VARIANTS if d in KEY_TILE[v]]}")
    return f"fa3_{variant}_{dtype}_d{d}"


def smem_bytes(variant: str, d: int, stages: int = STAGES, key_tile: int | None = None,
               consumers: int = 2) -> int:
    """Dynamic shared memory of a CTA (``Fa3Config<D, BC>::SMEM``): 1 KB of alignment slack,
    Q (128 x d), ``stages`` K and V tiles (BC x d; at most 2 stages at d = 256:
    :func:`stages_for`), 16-bit values, and 1 + 4 x stages mbarriers.

    The launch needs this number before any kernel runs, so it is computed here, and a test
    proves it is the kernels' (``test_python_constants_are_the_kernels`` in
    ``tests/test_10_fa3_pipelining.py``): it compiles each variant's file with its
    ``FA3_KERNELS`` line turned into globals holding the key tiles, ``Fa3Config<D, BC>::SMEM``,
    ``FA3_BR``, ``FA3_THREADS`` and ``FA3_STAGES``, reads the values back from the PTX, for both
    d and ring depths 3 and 2, and compares them with :data:`KEY_TILE`, this function,
    :data:`BR`, :data:`THREADS` and :data:`STAGES`."""
    bc = KEY_TILE[variant][d] if key_tile is None else key_tile
    stages = stages_for(d, stages)
    return 1024 + rows_per_cta(consumers) * d * 2 + 2 * stages * bc * d * 2 + 8 * (1 + 4 * stages)


def rows_per_cta(consumers: int = 2) -> int:
    """Query rows of a CTA (``FA3_BR``): 64 per consumer warpgroup."""
    return 64 * consumers


def threads_per_cta(consumers: int = 2) -> int:
    """Threads of a CTA (``FA3_THREADS``): the producer warpgroup and the consumers."""
    return 128 * (1 + consumers)


def require_hopper(what: str = "this kernel") -> None:
    """Raise a clear error unless kernels compiled for sm_90a can run here: a GPU of compute
    capability 9.0 (H100, H200), or the PTX interpreter once it runs sm_90a."""
    cc = tuple(device.target_cc(ARCH)) if not device.gpu_available() else tuple(device.target_cc())
    if cc != (9, 0):
        raise RuntimeError(
            f"{what} needs a Hopper GPU, compute capability 9.0, sm_90a (wgmma.mma_async and "
            f"setmaxnreg exist only on that target); this GPU is {cc[0]}.{cc[1]}. "
            "fraglab.flash_attention.fa2 runs on 8.0 and newer.")
    if launch.interpreted():
        from .. import ptx
        if not getattr(ptx, "SUPPORTS_SM90A", False):
            raise RuntimeError(f"{what} needs sm_90a: the PTX interpreter here does not run "
                               "Hopper's wgmma / mbarrier PTX yet, and there is no GPU")


def _kernel(name: str, kernel: str, source: str | None = None, defines: dict | None = None):
    return launch.get_kernel(name, kernel, arch=ARCH, source=source, defines=defines)


# --------------------------------------------------------------------------------------------
# Attention
# --------------------------------------------------------------------------------------------

#: Key tiles and ring depths the tma rung can be built with, by d (the tuning sweep's candidates).
TMA_KEY_TILES = {64: (64, 128), 128: (64, 128), 256: (64,)}
TMA_STAGES = (2, 3, 4)
#: Consumer warpgroups (``-DFA3_CONSUMERS``): three only at d 64 and 128 with 64-key tiles, where
#: their 160 registers (128 x 24 + 384 x 160 = 64512) hold O, S and P; with 128-key tiles ptxas
#: serializes the wgmma (d = 64, C7512) or spills (d = 128), and d = 256 does not compile.
TMA_CONSUMERS = (2, 3)
SMEM_LIMIT = 227 * 1024           # dynamic shared memory a CTA may have on sm_90


#: The tma rung's measured tuning table (``python -m fraglab.fa3_pipelining tune``, :mod:`.tuning`).
TMA_TABLE = tools.REPO_ROOT / "book" / "data" / "10_fa3_pipelining" / "tma_table.json"
_TMA_TABLE_CACHE: dict = {}


def tma_default_config(d: int) -> dict:
    """The kernel file's own tile and ring depth (what runs without a table)."""
    return {"key_tile": KEY_TILE["tma"][d], "stages": stages_for(d), "consumers": 2}


def tma_table(path=None) -> dict:
    """``{"measured": bool, "status": str, "entries": [{"d", "N", "causal", "key_tile",
    "stages", ...}]}`` from :data:`TMA_TABLE` (re-read when the file changes)."""
    path = Path(path or TMA_TABLE)
    stamp = path.stat().st_mtime_ns if path.is_file() else None
    if _TMA_TABLE_CACHE.get("key") != (str(path), stamp):
        if stamp is None:
            t = {"measured": False, "entries": [],
                 "status": f"unmeasured: no {path.name}; the kernel file's defaults"}
        else:
            t = json.loads(path.read_text())["results"]["table"]
        _TMA_TABLE_CACHE.update(key=(str(path), stamp), table=t)
    return _TMA_TABLE_CACHE["table"]


def tma_config_for(d: int, n: int, causal: bool, tab: dict | None = None) -> dict:
    """``{"key_tile", "stages"}`` for the tma rung at (d, N, causal): the measured pick of the
    table entry with the same d and causal and the nearest N (least |log2| ratio), or
    :func:`tma_default_config` without one."""
    entries = [e for e in (tab or tma_table())["entries"] if e["d"] == d and e["causal"] == bool(causal)]
    if not entries:
        return tma_default_config(d)
    e = min(entries, key=lambda e: abs(math.log2(max(n, 1) / e["N"])))
    return {"key_tile": e["key_tile"], "stages": e["stages"], "consumers": e.get("consumers", 2)}


def build_config(variant: str, d: int, n: int, causal: bool, stages: int | None = None,
                 key_tile: int | None = None, consumers: int | None = None) -> tuple[int, int, int, dict]:
    """``(stages, key_tile, consumers, defines)`` of a launch: checked, with the tma rung's defaults from the
    measured tuning table (:func:`tma_config_for`), and the -D
    definitions that build it (none for the file's own tile and ring depth)."""
    if variant in TMA_VARIANTS:
        if stages is None or key_tile is None or consumers is None:
            pick = tma_config_for(d, n, causal)
            stages = pick["stages"] if stages is None else stages
            key_tile = pick["key_tile"] if key_tile is None else key_tile
            consumers = pick.get("consumers", 2) if consumers is None else consumers
        launch.check_choice(f"key_tile at d = {d}", key_tile, TMA_KEY_TILES[d])
        launch.check_choice("stages", stages, TMA_STAGES)
        launch.check_choice("consumers", consumers, TMA_CONSUMERS)
        if consumers == 3 and (d == 256 or key_tile != 64):
            raise ValueError(f"three consumer warpgroups (160 registers each) need 64-key tiles at "
                             f"d = 64 or 128 (got key_tile={key_tile} at d = {d}): with more, ptxas "
                             "serializes the wgmma or spills")
        stages = stages_for(d, stages)
        if smem_bytes(variant, d, stages, key_tile, consumers) > SMEM_LIMIT:
            raise ValueError(f"{stages} stages of {key_tile}-key tiles at d = {d} need "
                             f"{smem_bytes(variant, d, stages, key_tile, consumers)} bytes of shared "
                             f"memory; a CTA may have {SMEM_LIMIT}")
    else:
        stages = STAGES if stages is None else stages
        launch.check_choice("stages", stages, (2, 3))
        if consumers not in (None, 2):
            raise ValueError(f"consumers: variant {variant!r} has two consumer warpgroups; only "
                             "the tma rung takes three")
        consumers = 2
        if key_tile is not None and key_tile != KEY_TILE[variant][d]:
            raise ValueError(f"key_tile: variant {variant!r} is built with {KEY_TILE[variant][d]}-key "
                             f"tiles at d = {d}; only the tma rung takes others")
    key_tile = KEY_TILE[variant][d] if key_tile is None else key_tile
    defines = {} if stages_for(d, stages) == stages_for(d) else {"FA3_STAGES_DEF": stages}
    if key_tile != KEY_TILE[variant][d]:
        defines[f"FA3_TMA_BC{d}"] = key_tile
    if consumers != 2:
        defines["FA3_CONSUMERS"] = consumers
    return stages, key_tile, consumers, defines


def attention_launcher(q, k, v, *, causal: bool = False, variant: str = "twostage",
                       scale: float | None = None, out=None, source: str | None = None,
                       stages: int | None = None, key_tile: int | None = None,
                       consumers: int | None = None, one_softmax: bool = False,
                       defines: dict | None = None):
    """Check the arguments of :func:`attention`, allocate the (poisoned) output, and return
    ``(launch, out)``: ``launch()`` runs the kernel once on the current stream (for
    :mod:`fraglab.bench`). ``source``: a replacement for the variant's .cu text (the lab);
    ``stages``: the K/V ring depth, 2 or 3 (the tma rung: 2-4 where shared memory holds them);
    ``key_tile``: keys per K/V tile (the tma rung only: :data:`TMA_KEY_TILES`); ``consumers``:
    consumer warpgroups, 2 or 3 (the tma rung only: :data:`TMA_CONSUMERS`); for the tma rung
    all three default to the measured tuning table's pick for (d, N, causal)
    (:func:`tma_config_for`), for the others to :data:`STAGES` and
    the file's tile; ``one_softmax``: one masked softmax instead of a masked and an unmasked
    copy (the bench compares them); ``defines``: more -D tuning knobs (``FA3_FAST_LOAD``,
    ``FA3_CONSUMER_REGS_DEF``, ``FA3_PRODUCER_REGS_DEF``)."""
    launch.check_choice("variant", variant, VARIANTS)
    require_hopper(f"the FA-3 kernel {variant!r}")
    dtype, (b, h, n, d), sc = check_fa2_arguments(q, k, v, causal, scale, head_dims(variant))
    stages, key_tile, consumers, tile_defines = build_config(variant, d, n, causal, stages,
                                                             key_tile, consumers)
    out = fa2_output(q, out, "the epilogue stores 4 bytes per pair")
    name = kernel_file(variant) if source is None else f"{kernel_file(variant)}_lab"
    defines = {**tile_defines, **({"FA3_ONE_SOFTMAX": 1} if one_softmax else {}), **(defines or {})}
    fn = _kernel(name, kernel_name(variant, dtype, d), source, defines or None)
    maps = tensor_maps(variant, q, k, v, key_tile, consumers)
    args = (q, k, v, out, np.int32(n), np.float32(sc * LOG2E), np.int32(bool(causal)),
            *map_arguments(maps))
    br, threads = rows_per_cta(consumers), threads_per_cta(consumers)
    grid = (-(-n // br), b * h)
    smem = smem_bytes(variant, d, stages, key_tile, consumers)

    def run():
        launch.launch(fn, grid, threads, args, shared_mem=smem)
    run.tensor_maps = maps          # alive as long as the launcher (their bytes point at q, k, v)
    return run, out


#: The variants whose producer reads tensor maps (``FA3_PRODUCER TmaProducer``).
TMA_VARIANTS = ("tma",)


def tensor_maps(variant: str, q, k, v, key_tile: int | None = None, consumers: int = 2) -> tuple:
    """For the tma rung, three tensor maps (:func:`fraglab.tma.tensor_map`) over q, k and v seen
    as 3-d (B*H, N, d) tensors, boxes of 1 x rows x 64 (rows: the CTA's query rows for Q, the key tile
    for K and V), 128-byte swizzle; for the others, ``()``. The maps hold the arrays' addresses:
    build them for the arrays the launch reads (:func:`attention_launcher` does), and keep them
    while the kernel may run."""
    if variant not in TMA_VARIANTS:
        return ()
    from .. import tma
    b, h, n, d = q.shape
    bc = KEY_TILE[variant][d] if key_tile is None else key_tile
    return tuple(tma.tensor_map(x.reshape(b * h, n, d), (1, rows, 64), swizzle=128)
                 for x, rows in ((q, rows_per_cta(consumers)), (k, bc), (v, bc)))


def map_arguments(maps: tuple) -> tuple:
    """The kernels' last three arguments: the maps' device bytes, or three null pointers."""
    return tuple(m.device for m in maps) if maps else (np.uint64(0),) * 3


def attention(q, k, v, *, causal: bool = False, variant: str = "twostage",
              scale: float | None = None):
    """softmax(Q K^T * scale) V with one of the FA-3 main loops (:data:`VARIANTS`): wgmma from
    swizzled shared memory, a cp.async producer warpgroup and two consumer warpgroups of 64
    query rows. ``q``, ``k``, ``v``: (B, H, N, d) float16, or uint16 holding bf16; d 64 or 128, 256 where
    :func:`head_dims` has it;
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
    require_hopper("wgmma_gemm")
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
    fn = _kernel("10_fa3_pipelining_wgmma", f"wgmma_gemm_{'kmajor' if b_major == 'k' else 'mnmajor'}_n{n}")
    launch.launch(fn, 1, 128, (a.view(np.uint16), b.view(np.uint16), c, np.int32(kk)),
                  shared_mem=1024 + 64 * 128 * 2 + 128 * 128 * 2)
    return c


RING_CHUNK = 256              # floats per chunk (1 KB), RING_CHUNK in the .cu file
RING_STAGES = 2


def mbarrier_ring(x):
    """Stream float32 chunks of 256 values through a 2-stage shared-memory ring, producer warp
    to consumer warp (``kernels/10_fa3_pipelining_mbarrier.cu``). Returns
    ``2 * x + (chunk index % 2)`` chunk by chunk, which :func:`mbarrier_ring_reference` gives."""
    require_hopper("mbarrier_ring")
    launch.check_array("x", x, dtype=np.float32, ndim=1)
    if x.size == 0 or x.size % RING_CHUNK:
        raise ValueError(f"x must hold a positive multiple of {RING_CHUNK} values, got {x.size}")
    launch.check_aligned("x", x, 16, "cp.async.bulk copies 16-byte aligned runs")
    out = launch.poisoned(x.shape, np.float32)
    fn = _kernel("10_fa3_pipelining_mbarrier", "mbarrier_ring")
    launch.launch(fn, 1, 64, (x, out, np.int32(x.size // RING_CHUNK)),
                  shared_mem=RING_STAGES * RING_CHUNK * 4 + 256)
    return out


def mbarrier_ring_reference(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32).reshape(-1, RING_CHUNK)     # float32, as the kernel
    tag = (np.arange(len(x)) % RING_STAGES).astype(np.float32)[:, None]
    return (np.float32(2) * x + tag).reshape(-1)


def swizzle_tile(src, n_valid: int):
    """The shared-memory image (128 x d 16-bit values, as uint16) of a 128-row tile copied by
    the attention producers' cp.async path (``kernels/10_fa3_pipelining_copy.cu``): 128-byte
    swizzle, rows >= ``n_valid`` zero. :func:`sw128_image` is its NumPy model."""
    require_hopper("swizzle_tile")
    launch.check_array("src", src, dtype=np.uint16, ndim=2)
    d = int(src.shape[1])
    launch.check_choice("d", d, (64, 128))
    launch.check_array("src", src, dtype=np.uint16, shape=(BR, d))
    launch.check_range("n_valid", int(n_valid), 0, BR)
    launch.check_aligned("src", src, 16, "cp.async copies 16 bytes")
    image = launch.poisoned((BR, d), np.uint16)
    fn = _kernel("10_fa3_pipelining_copy", f"swizzle_tile_d{d}")
    launch.launch(fn, 1, 128, (src, image, np.int32(n_valid)), shared_mem=1024 + BR * d * 2)
    return image


def warpspec_rowsum(x):
    """Row sums of tiles of 128 x 32 float32 values, passed from a producer warpgroup to two
    consumer warpgroups through an mbarrier ring, registers moved by setmaxnreg
    (``kernels/10_fa3_pipelining_warpspec.cu``). ``x``: (T, 128, 32) float32; returns (T, 128)."""
    require_hopper("warpspec_rowsum")
    launch.check_array("x", x, dtype=np.float32, ndim=3)
    if x.shape[1:] != (128, 32) or x.shape[0] < 1:
        raise ValueError(f"x must have shape (T, 128, 32) with T >= 1, got {x.shape}")
    out = launch.poisoned(x.shape[:2], np.float32)
    fn = _kernel("10_fa3_pipelining_warpspec", "warpspec_rowsum")
    launch.launch(fn, 1, THREADS, (x, out, np.int32(x.shape[0])), shared_mem=2 * 16384 + 256)
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
