"""The record ``python -m fraglab.microbenchmark all`` writes (``results.json``): where it lives,
how it is compacted and read back, and the summaries the tables and plots take from it."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..tools import REPO_ROOT
from .kernels import VARIANTS

RESULTS_DIR = REPO_ROOT / "book" / "data" / "04_microbenchmark"


def compact(x, key: str = ""):
    """Round long float lists (times in ms, power samples) so that the record stays small:
    6 decimals of a millisecond is 1 ns, below the CUDA events' resolution."""
    if isinstance(x, dict):
        return {k: compact(v, k) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        if key in ("times_ms", "t_s", "power_w") and all(isinstance(v, float) for v in x):
            return [round(v, 6 if key == "times_ms" else 3) for v in x]
        return [compact(v, key) for v in x]
    return x


def load(path=None) -> dict:
    """The ``results`` of a record written by ``all``, with ``device`` and ``created_utc`` added.
    Default: ``$FRAGLAB_MICROBENCHMARK_RESULTS``, else the book's record."""
    from .. import bench
    path = path or os.environ.get("FRAGLAB_MICROBENCHMARK_RESULTS") or RESULTS_DIR / "results.json"
    return from_saved(bench.load_results(Path(path)))


def from_saved(doc: dict) -> dict:
    """The form :func:`load` returns, from the saved file's JSON (``results`` with ``device`` and
    ``created_utc`` added); a dict already in that form is returned as it is."""
    if "results" not in doc:
        return doc
    res = dict(doc["results"])
    res["device"] = doc["device"]
    res["created_utc"] = doc.get("created_utc")
    return res


def warm_summary(doc: dict, label: str, dtype: str = "bf16") -> dict | None:
    """Medians over both orders of a warm configuration: {variant: median_ms, ratio, p10/p90}."""
    runs = [w for w in doc.get("warm", []) if w["label"] == label and w["dtype"] == dtype]
    if not runs:
        return None
    out = {}
    for variant in VARIANTS:
        x = np.concatenate([np.asarray(r["comparison"]["timings"][variant]["times_ms"])
                            for r in runs])
        out[variant] = float(np.median(x))
        out[variant + "_p10"] = float(np.percentile(x, 10))
        out[variant + "_p90"] = float(np.percentile(x, 90))
    out["ratio"] = out["smem"] / out["regs"]
    out["ratio_by_order"] = {r["first"]: r["comparison"]["ratios"]["regs"] for r in runs}
    return out


def paper_way_summary(doc: dict, name: str = "paper") -> dict | None:
    """The summary of one setup of the fresh-process measurement (None: not measured)."""
    v = doc.get("paper_way", {}).get("variants", {}).get(name)
    return v["summary"] if v and v["summary"].get("n") else None


def cycle_medians(doc: dict, label: str = "one block") -> dict | None:
    """Median epilogue cycles per variant for one grid (None: not measured)."""
    c = doc.get("cycles", {}).get(label)
    if not c:
        return None
    return {w: float(c[w]["stats"]["median"]) if "stats" in c[w] else
            float(np.median(c[w]["cycles"])) for w in VARIANTS}
