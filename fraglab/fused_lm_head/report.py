"""The chapter's findings from its GPU record (``book/data/11_fused_lm_head/results.json``, written by
``python -m fraglab.chapter bench 11``): :func:`glue_values` (name -> text, the numbers the
prose cites; ``tests/test_book_record.py`` recomputes them from the record) and
:func:`timing_table`. Without a record (a chapter not yet run on the GPU) every value says so.

Functions take the loaded record (``{"device", "results"}``).
"""
from __future__ import annotations

from pathlib import Path

from .. import bench, report, tools

RESULTS = tools.REPO_ROOT / "book" / "data" / "11_fused_lm_head" / "results.json"
#: Every glue name the chapter's prose cites.
CITED = ("ch11-checks", "ch11-timing", "ch11-gbs")
NOT_YET = "not measured yet"


def load(path: str | Path = RESULTS) -> dict:
    """The record; an empty one before the first GPU run."""
    return bench.load_results(path) if Path(path).is_file() else {"results": {}}


def glue_values(doc: dict) -> dict[str, str]:
    """Every value of :data:`CITED`, as the prose shows it (phrases that read in the prose with a
    record and without one)."""
    res = doc.get("results") or {}
    checks, timing = res.get("check") or [], res.get("timing") or {}
    where = (doc.get("device") or {}).get("name") or "a machine without a GPU"
    passed = sum(bool(r.get("ok")) for r in checks)
    return {
        "ch11-checks": f"{passed} of {len(checks)} passed, on {where}" if checks
        else "none yet (no GPU run recorded)",
        "ch11-timing": (f"{timing['median_ms']:.4f} ms for {timing['rows']:,} rows "
                            f"({timing['gbs']:.0f} GB/s)") if timing else NOT_YET,
        "ch11-gbs": f"{timing['gbs']:.0f} GB/s" if timing else NOT_YET,
    }


def timing_table(doc: dict):
    """warp_scan's timing as a table (one row; dashes before the first GPU run)."""
    timing = (doc.get("results") or {}).get("timing")
    if not timing:
        return report.table([{"rows": "-", "median ms": "-", "GB/s": "-"}],
                            caption=f"warp_scan: {NOT_YET} (python -m fraglab.chapter bench 11)")
    row = {"rows": f"{timing['rows']:,}", "median ms": f"{timing['median_ms']:.4f}",
           "p10-p90 ms": f"{timing['p10_ms']:.4f}-{timing['p90_ms']:.4f}",
           "runs": timing["n"], "GB/s": f"{timing['gbs']:.0f}"}
    return report.table([row], caption=f"warp_scan on {(doc.get('device') or {}).get('name')}")
