"""Chapter 10's configuration: the variants, their files and kernel names, and every launch
number read back from the kernel files (``fa3_*`` constants: ``FA3_CONSTANTS`` in
``kernels/10_fa3_pipelining_attention.cuh``), with the checks of a launch's tile, ring depth and
consumer warpgroups (:func:`launch_config`).

The kernel file is the one home of its tiles: Python reads them from the compiled file and never
types them again. Where Python chooses (the tma rung's tuning: :mod:`.tuning`), it passes the
choice as a define and reads the derived numbers (ring depth, shared memory) back.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import launch, toolchain

ARCH = "sm_90a"
#: The main-loop orders of the ladder, each in ``kernels/10_fa3_pipelining_<variant>.cu``.
VARIANTS = ("nooverlap", "twostage", "threestage", "pingpong", "tma")
HEAD_DIMS = (64, 128, 256)    # 256: in the variants of head_dims(variant)
#: The variants whose producer reads tensor maps (``FA3_PRODUCER TmaProducer``).
TMA_VARIANTS = ("tma",)
#: Why a variant has no d = 256 kernels (the chapter's "Head dimension 256" measures it).
NO_D256 = {v: "at d = 256 its consumers spill registers (O alone takes 128 of the 240); the "
              "tma rung, whose producer needs next to none, does not: use variant='tma'"
           for v in ("nooverlap", "twostage", "threestage", "pingpong")}

#: One line per variant: what overlaps the softmax.
DESCRIPTIONS = {
    "nooverlap": "waits for each wgmma at once: the softmax runs alone",
    "twostage": "Algorithm 2: softmax of tile j beside O += P V of tile j-1",
    "threestage": "softmax of tile j beside P V of j-1 and S = Q K^T of j+1",
    "pingpong": "Algorithm 2, and the two consumer warpgroups take turns at the tensor cores",
    "tma": "ping-pong's consumers; one producer thread per operand copies each tile with the TMA",
}

#: Key tiles and ring depths the tma rung can be built with, by d (the tuning sweep's candidates).
TMA_KEY_TILES = {64: (64, 128), 128: (64, 128), 256: (64,)}
TMA_STAGES = (2, 3, 4)
#: Consumer warpgroups (``-DFA3_CONSUMERS``): three only at d 64 and 128 with 64-key tiles, where
#: their 160 registers (128 x 24 + 384 x 160 = 64512) hold O, S and P; with 128-key tiles ptxas
#: serializes the wgmma (d = 64, C7512) or spills (d = 128), and d = 256 does not compile.
TMA_CONSUMERS = (2, 3)
SMEM_LIMIT = 227 * 1024           # dynamic shared memory a CTA may have on sm_90
#: What runs where the chapter's sm_90a kernels do not: the last sentence of a refusal
#: (``device.require(ARCH, what, INSTEAD)``).
INSTEAD = "fraglab.flash_attention.fa2 runs on 8.0 and newer."
#: Ring depths the other variants take (``-DFA3_STAGES_DEF``).
STAGES = (2, 3)


def check_variant(variant: str) -> str:
    launch.check_choice("variant", variant, VARIANTS)
    return variant


def kernel_file(variant: str) -> str:
    """``10_fa3_pipelining_<variant>`` (``variant`` checked by the caller)."""
    return f"10_fa3_pipelining_{variant}"


def file_constants(variant: str, defines: dict | None = None) -> dict[str, int]:
    """The ``fa3_*`` launch constants of ``variant``'s file built with ``defines``, read from a
    build of its constants only (``FA3_CONSTANTS_ONLY``: no kernel instantiated, so planning a
    launch or a sweep compiles in a moment): ``fa3_rows``, ``fa3_threads``, ``fa3_consumers``
    and, per head dimension D the file has, ``fa3_d<D>_key_tile``, ``_stages``, ``_smem``. The
    launch reads the same names from the module it runs (:func:`fraglab.launch.constants`)."""
    b = toolchain.compile(kernel_file(variant), ARCH,
                          defines={**(defines or {}), "FA3_CONSTANTS_ONLY": 1})
    return b.constants("fa3_")


def head_dims(variant: str) -> tuple[int, ...]:
    """The head dimensions ``variant`` has kernels for (its file's ``FA3_KERNELS`` lines)."""
    return dims_of(check_variant(variant))


def dims_of(variant: str) -> tuple[int, ...]:
    """:func:`head_dims` of a variant the caller has checked."""
    c = file_constants(variant)
    return tuple(d for d in HEAD_DIMS if f"fa3_d{d}_key_tile" in c)


def key_tile(variant: str, d: int) -> int:
    """Keys per K/V tile of ``variant``'s own build at head dimension ``d``."""
    return file_constants(check_variant(variant))[f"fa3_d{d}_key_tile"]


def kernel_name(variant: str, dtype: str, d: int) -> str:
    """``fa3_<variant>_<dtype>_d<d>``, an extern "C" kernel of :func:`kernel_file` (``variant``
    checked by the caller)."""
    launch.check_choice("dtype", dtype, ("f16", "bf16"))
    launch.check_choice("head dimension d", d, HEAD_DIMS)
    if d not in dims_of(variant):
        raise ValueError(f"variant {variant!r} has no d = {d} kernels ({NO_D256.get(variant, 'not built')}); "
                         f"variants with d = {d}: {[v for v in VARIANTS if d in dims_of(v)]}")
    return f"fa3_{variant}_{dtype}_d{d}"


@dataclass(frozen=True)
class LaunchConfig:
    """One launch's build and numbers: the defines that build it (none for the file's own tile
    and ring depth), and what the build says it takes."""
    variant: str
    d: int
    stages: int
    key_tile: int
    consumers: int
    rows: int
    threads: int
    smem: int
    defines: dict = field(default_factory=dict)


def default_config(variant: str, d: int) -> dict:
    """The file's own key tile, ring depth and consumers at ``d`` (what runs without a table)."""
    c = file_constants(variant)
    return {"key_tile": c[f"fa3_d{d}_key_tile"], "stages": c[f"fa3_d{d}_stages"],
            "consumers": c["fa3_consumers"]}


def launch_config(variant: str, d: int, stages: int | None = None, key_tile: int | None = None,
                  consumers: int | None = None) -> LaunchConfig:
    """The checked configuration of a launch of ``variant`` (checked by the caller) at head
    dimension ``d``: ``None`` takes the file's own value. Only the tma rung takes other key
    tiles, more ring depths and three consumer warpgroups; a choice becomes a define
    (``FA3_TMA_BC<d>``, ``FA3_STAGES_DEF``, ``FA3_CONSUMERS``) and the build's ring depth and
    shared memory are read back (at d = 256 the header keeps two stages)."""
    own = default_config(variant, d)
    if variant in TMA_VARIANTS:
        if key_tile is not None:
            launch.check_choice(f"key_tile at d = {d}", key_tile, TMA_KEY_TILES[d])
        if stages is not None:
            launch.check_choice("stages", stages, TMA_STAGES)
        if consumers is not None:
            launch.check_choice("consumers", consumers, TMA_CONSUMERS)
        if consumers == 3 and (d == 256 or (key_tile or own["key_tile"]) != 64):
            raise ValueError(f"three consumer warpgroups (160 registers each) need 64-key tiles at "
                             f"d = 64 or 128 (got key_tile={key_tile} at d = {d}): with more, ptxas "
                             "serializes the wgmma or spills")
    else:
        if stages is not None:
            launch.check_choice("stages", stages, STAGES)
        if consumers not in (None, own["consumers"]):
            raise ValueError(f"consumers: variant {variant!r} has two consumer warpgroups; only "
                             "the tma rung takes three")
        if key_tile not in (None, own["key_tile"]):
            raise ValueError(f"key_tile: variant {variant!r} is built with {own['key_tile']}-key "
                             f"tiles at d = {d}; only the tma rung takes others")
    defines = {}
    if stages not in (None, own["stages"]):
        defines["FA3_STAGES_DEF"] = stages
    if key_tile not in (None, own["key_tile"]):
        defines[f"FA3_TMA_BC{d}"] = key_tile
    if consumers not in (None, own["consumers"]):
        defines["FA3_CONSUMERS"] = consumers
    c = file_constants(variant, defines)
    if defines and all(c[f"fa3_d{d}_{k}"] == own[k] for k in ("key_tile", "stages")) \
            and c["fa3_consumers"] == own["consumers"]:
        defines, c = {}, file_constants(variant)      # d = 256 caps the ring: the file's own build
    cfg = LaunchConfig(variant, d, c[f"fa3_d{d}_stages"], c[f"fa3_d{d}_key_tile"],
                       c["fa3_consumers"], c["fa3_rows"], c["fa3_threads"], c[f"fa3_d{d}_smem"],
                       defines)
    if cfg.smem > SMEM_LIMIT:
        raise ValueError(f"{cfg.stages} stages of {cfg.key_tile}-key tiles at d = {d} need "
                         f"{cfg.smem} bytes of shared memory; a CTA may have {SMEM_LIMIT}")
    return cfg


def smem_bytes(variant: str, d: int, stages: int | None = None, key_tile: int | None = None,
               consumers: int | None = None) -> int:
    """Dynamic shared memory of a CTA (``Fa3Config<D, BC>::SMEM``, ``fa3_d<D>_smem``) as the
    build of that configuration gives it."""
    return launch_config(check_variant(variant), d, stages, key_tile, consumers).smem
