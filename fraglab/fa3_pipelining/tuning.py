"""The tma rung's tuning: which key tile and ring depth to launch at each (d, N, causal).

``python -m fraglab.fa3_pipelining tune --out DIR`` (:func:`.bench.tune`) times every candidate (:func:`candidates`:
the key tiles of :data:`kernels.TMA_KEY_TILES` x the ring depths that fit in shared memory)
beside cuDNN's and the flash backend's SDPA, interleaved in one process, at N 1k .. 16k, d 64,
128 and 256, causal and not, f16; then re-times the picks in bf16 where the chapter's goal asks
for both types. The record (``DIR/tma_table.json``, a :func:`fraglab.bench.save_results`
record) is copied to :data:`kernels.TMA_TABLE`, which :func:`kernels.tma_config_for` reads: the
wrapper launches the measured pick of the nearest size (same d and causal, nearest N in log2).
Without the table the defaults of the kernel file are used and :func:`kernels.tma_table` says so.
"""
from __future__ import annotations

from . import kernels

SIZES = (1024, 2048, 4096, 8192, 16384)


def candidates(d: int) -> list[dict]:
    """Every (key tile, stages, consumer warpgroups) the tma rung can be built with at head
    dimension ``d`` (:func:`kernels.build_config` accepts each)."""
    out = []
    for bc in kernels.TMA_KEY_TILES[d]:
        for nc in kernels.TMA_CONSUMERS:
            if nc == 3 and (d == 256 or bc != 64):
                continue
            for st in kernels.TMA_STAGES:
                st = kernels.stages_for(d, st)
                c = {"key_tile": bc, "stages": st, "consumers": nc}
                if kernels.smem_bytes("tma", d, st, bc, nc) <= kernels.SMEM_LIMIT and c not in out:
                    out.append(c)
    return out


def label(c: dict) -> str:
    return f"tma bc{c['key_tile']} s{c['stages']}" + (" wg3" if c.get("consumers", 2) == 3 else "")


def table_of(rows: list[dict]) -> dict:
    """The table :func:`config_for` reads, from :func:`sweep`'s f16 records."""
    entries = [{"d": r["d"], "N": r["N"], "causal": r["causal"], **r["pick"],
                "x_cudnn": r.get("x_cudnn")} for r in rows if r.get("pick")]
    return {"measured": True, "status": "measured: the best candidate at each (d, N, causal), "
            "f16, interleaved with cuDNN and SDPA flash", "entries": entries}
