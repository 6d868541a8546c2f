"""The tma rung's tuning: which key tile, ring depth and consumer warpgroups to launch at each
(d, N, causal), and the measured table that answers.

``python -m fraglab.fa3_pipelining tune --out DIR`` (:func:`.bench.tune`) times every candidate
(:func:`candidates`: the key tiles of :data:`.config.TMA_KEY_TILES` x the ring depths whose
build fits in shared memory) beside cuDNN's and the flash backend's SDPA, interleaved in one
process, at N 1k .. 16k, d 64, 128 and 256, causal and not, f16; then re-times the picks in bf16
where the chapter's goal asks for both types. The record (``DIR/tma_table.json``, a
:func:`fraglab.bench.save_results` record) is copied to :data:`TMA_TABLE`, which
:func:`tma_config_for` reads: the wrapper launches the measured pick of the nearest size (same d
and causal, nearest N in log2). Without the table the kernel file's own tile and depth are used
and :func:`tma_table` says so. A pick is passed to the build as defines and its shared memory
read back (:func:`.config.launch_config`).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from .. import tools
from . import config

SIZES = (1024, 2048, 4096, 8192, 16384)

#: The tma rung's measured tuning table (``python -m fraglab.fa3_pipelining tune``).
TMA_TABLE = tools.REPO_ROOT / "book" / "data" / "10_fa3_pipelining" / "tma_table.json"
_TMA_TABLE_CACHE: dict = {}


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
    """``{"key_tile", "stages", "consumers"}`` for the tma rung at (d, N, causal): the measured
    pick of the table entry with the same d and causal and the nearest N (least |log2| ratio),
    or the kernel file's own (:func:`.config.default_config`) without one."""
    entries = [e for e in (tab or tma_table())["entries"] if e["d"] == d and e["causal"] == bool(causal)]
    if not entries:
        return config.default_config("tma", d)
    e = min(entries, key=lambda e: abs(math.log2(max(n, 1) / e["N"])))
    return {"key_tile": e["key_tile"], "stages": e["stages"], "consumers": e.get("consumers", 2)}


def build_config(variant: str, d: int, n: int, causal: bool, stages: int | None = None,
                 key_tile: int | None = None, consumers: int | None = None) -> config.LaunchConfig:
    """The checked :class:`.config.LaunchConfig` of a launch (``variant`` checked by the caller):
    for the tma rung, what is not given comes from the measured table (:func:`tma_config_for`);
    for the others, from the kernel file."""
    if variant in config.TMA_VARIANTS and None in (stages, key_tile, consumers):
        pick = tma_config_for(d, n, causal)
        stages = pick["stages"] if stages is None else stages
        key_tile = pick["key_tile"] if key_tile is None else key_tile
        consumers = pick.get("consumers", 2) if consumers is None else consumers
    return config.launch_config(variant, d, stages, key_tile, consumers)


def candidates(d: int) -> list[dict]:
    """Every (key tile, stages, consumer warpgroups) the tma rung can be built with at head
    dimension ``d`` whose build fits in shared memory (:func:`.config.launch_config` accepts
    each; ring depths the header caps at d = 256 come once)."""
    out = []
    for bc in config.TMA_KEY_TILES[d]:
        for nc in config.TMA_CONSUMERS:
            if nc == 3 and (d == 256 or bc != 64):
                continue
            for st in config.TMA_STAGES:
                try:
                    cfg = config.launch_config("tma", d, st, bc, nc)
                except ValueError:            # more shared memory than a CTA may have
                    continue
                c = {"key_tile": cfg.key_tile, "stages": cfg.stages, "consumers": cfg.consumers}
                if c not in out:
                    out.append(c)
    return out


def label(c: dict) -> str:
    return f"tma bc{c['key_tile']} s{c['stages']}" + (" wg3" if c.get("consumers", 2) == 3 else "")


def table_of(rows: list[dict]) -> dict:
    """The table :func:`tma_config_for` reads, from :func:`sweep`'s f16 records."""
    entries = [{"d": r["d"], "N": r["N"], "causal": r["causal"], **r["pick"],
                "x_cudnn": r.get("x_cudnn")} for r in rows if r.get("pick")]
    return {"measured": True, "status": "measured: the best candidate at each (d, N, causal), "
            "f16, interleaved with cuDNN and SDPA flash", "entries": entries}
