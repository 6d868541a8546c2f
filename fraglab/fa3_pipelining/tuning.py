"""The tma rung's tuning: which key tile and ring depth to launch at each (d, N, causal).

``python -m fraglab.fa3_pipelining tune --out DIR`` times every candidate (:func:`candidates`:
the key tiles of :data:`kernels.TMA_KEY_TILES` x the ring depths that fit in shared memory)
beside cuDNN's and the flash backend's SDPA, interleaved in one process, at N 1k .. 16k, d 64,
128 and 256, causal and not, f16; then re-times the picks in bf16 where the chapter's goal asks
for both types. The record (``DIR/tma_table.json``, a :func:`fraglab.bench.save_results`
record) is copied to :data:`TABLE`, which :func:`config_for` reads: the wrapper launches the
measured pick of the nearest size (same d and causal, nearest N in log2). Without the table the
defaults of the kernel file are used and :func:`table` says so.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from .. import tools
from . import kernels

TABLE = tools.REPO_ROOT / "book" / "data" / "10_fa3_pipelining" / "tma_table.json"
SIZES = (1024, 2048, 4096, 8192, 16384)
_CACHE: dict = {}


def candidates(d: int) -> list[dict]:
    """Every (key tile, stages) the tma rung can be built with at head dimension ``d``."""
    out = []
    for bc in kernels.TMA_KEY_TILES[d]:
        for st in kernels.TMA_STAGES:
            st = kernels.stages_for(d, st)
            c = {"key_tile": bc, "stages": st}
            if kernels.smem_bytes("tma", d, st, bc) <= kernels.SMEM_LIMIT and c not in out:
                out.append(c)
    return out


def default_config(d: int) -> dict:
    """The kernel file's own tile and ring depth (what runs without a table)."""
    return {"key_tile": kernels.KEY_TILE["tma"][d], "stages": kernels.stages_for(d)}


def table(path=None) -> dict:
    """``{"measured": bool, "status": str, "entries": [{"d", "N", "causal", "key_tile",
    "stages", ...}]}`` from :data:`TABLE` (re-read when the file changes)."""
    path = Path(path or TABLE)
    stamp = path.stat().st_mtime_ns if path.is_file() else None
    if _CACHE.get("key") != (str(path), stamp):
        if stamp is None:
            t = {"measured": False, "entries": [],
                 "status": f"unmeasured: no {path.name}; the kernel file's defaults"}
        else:
            t = json.loads(path.read_text())["results"]["table"]
        _CACHE.update(key=(str(path), stamp), table=t)
    return _CACHE["table"]


def config_for(d: int, n: int, causal: bool, tab: dict | None = None) -> dict:
    """``{"key_tile", "stages"}`` for the tma rung at (d, N, causal): the measured pick of the
    table entry with the same d and causal and the nearest N (least |log2| ratio), or
    :func:`default_config` without one."""
    entries = [e for e in (tab or table())["entries"] if e["d"] == d and e["causal"] == bool(causal)]
    if not entries:
        return default_config(d)
    e = min(entries, key=lambda e: abs(math.log2(max(n, 1) / e["N"])))
    return {"key_tile": e["key_tile"], "stages": e["stages"]}


def label(c: dict) -> str:
    return f"tma bc{c['key_tile']} s{c['stages']}"


def sweep(base, rng, log, *, sizes=SIZES, dims=(64, 128, 256), dtype="f16",
          quick: bool = False, picks: dict | None = None) -> list[dict]:
    """Time the candidates (or, with ``picks`` {(d, N, causal): config}, only those) beside the
    baselines at every (d, N, causal). One record per point: TFLOP/s and the comparison."""
    from ..attention import attention_flops
    from .. import bench as timing
    from .bench import B, H, _rep
    import cupy as cp
    rows = []
    for n in sizes:
        for d in dims:
            for causal in (False, True):
                configs = [picks[(d, n, causal)]] if picks else candidates(d)
                rec = {"N": n, "d": d, "causal": causal, "dtype": dtype, "B": B, "H": H,
                       "flops": attention_flops(B, H, n, d, causal), "refused": {}}
                ts, qkv = base.inputs(rng, (B, H, n, d), dtype)
                runs = {}
                for c in configs:
                    try:
                        runs[label(c)] = kernels.attention_launcher(
                            *qkv, causal=causal, variant="tma", **c)[0]
                    except Exception as exc:          # recorded
                        rec["refused"][label(c)] = f"{type(exc).__name__}: {exc}"[:300]
                for name, fn in base.callables(ts, qkv, causal, rec["refused"]).items():
                    if name in ("cudnn", "sdpa_flash"):
                        try:
                            fn()
                            runs[name] = fn
                        except Exception as exc:
                            rec["refused"][name] = f"{type(exc).__name__}: {exc}"[:300]
                c = timing.compare(runs, baseline="cudnn" if "cudnn" in runs else None,
                                   progress=False, **_rep(n, quick))
                rec["comparison"] = c
                rec["tflops"] = {k: rec["flops"] / (t.median_ms * 1e-3) / 1e12
                                 for k, t in c.timings.items()}
                mine = {k: v for k, v in rec["tflops"].items() if k.startswith("tma")}
                if mine:
                    best = max(mine, key=mine.get)
                    rec["pick"] = next(x for x in configs if label(x) == best)
                    cu = rec["tflops"].get("cudnn")
                    rec["x_cudnn"] = mine[best] / cu if cu else None
                log(f"  {dtype} N={n:<6} d={d:<4} causal={causal!s:<5} " + ", ".join(
                    f"{k} {v:.0f}" for k, v in sorted(rec["tflops"].items(), key=lambda kv: -kv[1]))
                    + " TFLOP/s" + (f"  pick {label(rec['pick'])}, x cuDNN {rec['x_cudnn']:.3f}"
                                    if rec.get("x_cudnn") else ""))
                rows.append(rec)
                cp.get_default_memory_pool().free_all_blocks()
    return rows


def table_of(rows: list[dict]) -> dict:
    """The table :func:`config_for` reads, from :func:`sweep`'s f16 records."""
    entries = [{"d": r["d"], "N": r["N"], "causal": r["causal"], **r["pick"],
                "x_cudnn": r.get("x_cudnn")} for r in rows if r.get("pick")]
    return {"measured": True, "status": "measured: the best candidate at each (d, N, causal), "
            "f16, interleaved with cuDNN and SDPA flash", "entries": entries}


def run(out_dir, *, quick: bool = False, seed: int = 0) -> dict:
    """The sweep (f16, every candidate), the table, then the picks in bf16 at d 128 and 256,
    N >= 4k; ``out_dir/tma_table.json`` rewritten after each part."""
    import os
    import time
    import numpy as np
    from .. import bench as timing
    from .. import device
    from ..progress import Log
    from .bench import baselines
    t0 = time.time()
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "tma_table.json")
    log = Log(os.path.join(out_dir, "tune_log.txt"))
    rng = np.random.default_rng(seed)
    sizes = (1024, 4096) if quick else SIZES
    res: dict = {"settings": {"quick": quick, "seed": seed, "sizes": sizes,
                              "candidates": {d: candidates(d) for d in (64, 128, 256)}},
                 "errors": {}}
    dev = timing.device_info()
    log(f"[10_fa3_pipelining tune] {device.status_line()}")

    def save():
        res["elapsed_s"] = time.time() - t0
        timing.save_results(path, res, device=dev)

    base = baselines(log)
    res["baseline_notes"] = base.notes
    with base.stream():
        try:
            res["f16"] = sweep(base, rng, log, sizes=sizes, quick=quick)
            res["table"] = table_of(res["f16"])
        except Exception as exc:                      # recorded
            res["errors"]["f16"] = f"{type(exc).__name__}: {exc}"[:1000]
        save()
        if "table" in res:
            picks = {(e["d"], e["N"], e["causal"]): {"key_tile": e["key_tile"], "stages": e["stages"]}
                     for e in res["table"]["entries"]}
            try:
                res["bf16"] = sweep(base, rng, log, sizes=[n for n in sizes if n >= 4096],
                                    dims=(128, 256), dtype="bf16", quick=quick, picks=picks)
            except Exception as exc:
                res["errors"]["bf16"] = f"{type(exc).__name__}: {exc}"[:1000]
        save()
    log(f"wrote {path} ({time.time() - t0:.0f} s)")
    return res
