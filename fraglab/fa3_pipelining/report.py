"""The chapter's findings from the H100 record (``book/data/10_fa3_pipelining/results.json``,
written by ``python -m fraglab.fa3_pipelining bench``): :func:`glue_values` (name -> text, the
numbers the prose cites; ``tests/test_book_record.py`` recomputes them), :func:`variant_table`
and :func:`sweep_table` (HTML tables), and the helpers the bench summary shares.

Functions take the loaded record (``{"device", "results"}``) or its ``results`` alone.
"""
from __future__ import annotations

from pathlib import Path

from .. import bench, report, tools
from . import kernels

RESULTS = tools.REPO_ROOT / "book" / "data" / "10_fa3_pipelining" / "results.json"
#: The performance goal: the best variant's share of cuDNN's SDPA at the headline size.
GOAL = 0.8
BASELINE_LABELS = {"cudnn": "cuDNN SDPA", "sdpa_flash": "SDPA flash (FA-2)",
                   "fa2": "course FA-2 (ch. 05)", "ch09": "ch. 09 last step"}


#: Every glue name the chapter's prose cites.
CITED = ("ch10-checks", "ch10-sanitizer", "ch10-best-variant", "ch10-gpu", "ch10-best-tflops", "ch10-best-share-peak",
         "ch10-ratio-cudnn", "ch10-ratio-sdpa-flash", "ch10-ratio-fa2", "ch10-goal-met",
         "ch10-twostage-gain", "ch10-sweep-cudnn-min", "ch10-sweep-cudnn-max",
         "ch10-sweep-sdpa-flash-min", "ch10-sweep-sdpa-flash-max", "ch10-threestage-d64-note",
         "ch10-tflops-cudnn", "ch10-tflops-sdpa-flash", "ch10-tflops-fa2",
         *(f"ch10-tflops-{v}" for v in kernels.VARIANTS),
         "ch10-tflops-nooverlap-ring2", "ch10-tflops-twostage-ring2",
         "ch10-tflops-nooverlap-onesoftmax", "ch10-tflops-twostage-onesoftmax", "ch10-kv-tbs",
         "ch10-pingpong-gain", "ch10-throttled", "ch10-comparisons", "ch10-sm-mhz-min",
         "ch10-sm-mhz-max", "ch10-headline-sm-mhz")


def load(path: str | Path = RESULTS) -> dict:
    """The record (``{"device", "results"}``); without one (before the H100 run), an empty one,
    so that the cells computed from SASS still run."""
    if not Path(path).is_file():
        return {"results": {}, "missing": str(path)}
    return bench.load_results(path)


def _res(doc: dict) -> dict:
    return doc["results"] if "results" in doc and isinstance(doc["results"], dict) else doc


def tflops_of(row: dict) -> dict:
    """TFLOP/s by callable name (``fa3_<variant>``, ``cudnn``, ...) of one timed configuration."""
    return dict(row.get("tflops") or {})


def headline(doc: dict) -> dict | None:
    h = _res(doc).get("headline")
    return h if isinstance(h, dict) and h.get("tflops") else None


def best_variant(doc: dict) -> str:
    """The variant with the most TFLOP/s at the headline size (``twostage`` without a record)."""
    h = headline(doc)
    if not h:
        return "twostage"
    tf = tflops_of(h)
    have = [v for v in kernels.VARIANTS if f"fa3_{v}" in tf]
    return max(have, key=lambda v: tf[f"fa3_{v}"]) if have else "twostage"


def checks(doc: dict) -> tuple[int, int]:
    rows = _res(doc).get("check") or []
    return sum(bool(r.get("ok")) for r in rows), len(rows)


def ratios(doc: dict, other: str = "cudnn") -> list[float]:
    """best variant / ``other`` over the sweep's configurations where both ran."""
    best = f"fa3_{best_variant(doc)}"
    out = []
    for r in _res(doc).get("sweep") or []:
        tf = tflops_of(r)
        if tf.get(best) and tf.get(other):
            out.append(tf[best] / tf[other])
    return out


def kv_stream_tbs(row: dict, tflops: float) -> float:
    """TB/s at which the CTAs read K and V (every CTA streams its head's whole K and V once
    into shared memory, mostly from L2) when the kernel runs at ``tflops`` on ``row``'s size."""
    n, d, heads = row["N"], row["d"], row["B"] * row["H"]
    ctas = -(-n // kernels.BR) * heads
    kv_bytes = 2 * n * d * 2 * ctas * (0.5 if row.get("causal") else 1.0)
    return kv_bytes / (row["flops"] / (tflops * 1e12)) / 1e12


def comparison_clocks(doc: dict) -> list[dict]:
    """The SM clocks (``fraglab.bench`` ``clocks``: ``sm_mhz``, ``sm_max_mhz``, ``throttled``,
    ``reasons``) of every timed comparison of the record, headline first."""
    res = _res(doc)
    rows = [res.get("headline")] + list(res.get("sweep") or [])
    out = []
    for r in rows:
        cmp = r.get("comparison") if isinstance(r, dict) else None
        clocks = cmp.get("clocks") if isinstance(cmp, dict) else None
        if isinstance(clocks, dict) and clocks.get("sm_mhz"):
            out.append(clocks)
    return out


def _clock_values(doc: dict) -> dict[str, str]:
    """How many comparisons ran throttled (the power cap lowers the SM clock), and the clocks."""
    clocks = comparison_clocks(doc)
    if not clocks:
        return {}
    out = {"ch10-throttled": str(sum(bool(c.get("throttled")) for c in clocks)),
           "ch10-comparisons": str(len(clocks)),
           "ch10-sm-mhz-min": f"{min(c['sm_mhz'] for c in clocks):.0f}"}
    top = [c["sm_max_mhz"] for c in clocks if c.get("sm_max_mhz")]
    if top:
        out["ch10-sm-mhz-max"] = f"{max(top):.0f}"
    h = headline(doc)
    if h and isinstance(h.get("comparison"), dict):
        hc = h["comparison"].get("clocks") or {}
        if hc.get("sm_mhz"):
            out["ch10-headline-sm-mhz"] = f"{hc['sm_mhz']:.0f}"
    return out


def glue_values(doc: dict) -> dict[str, str]:
    """Every number the chapter's prose cites, as text."""
    res = _res(doc)
    ok, n = checks(doc)
    out = {"ch10-checks": f"{ok} of {n}", "ch10-best-variant": best_variant(doc),
           "ch10-sanitizer": report.sanitizer_verdict("fa3_pipelining")}
    if isinstance(doc.get("device"), dict) and doc["device"].get("name"):
        out["ch10-gpu"] = str(doc["device"]["name"])
    h = headline(doc)
    if h:
        tf = tflops_of(h)
        best = tf.get(f"fa3_{best_variant(doc)}")
        for v in kernels.VARIANTS:
            if f"fa3_{v}" in tf:
                out[f"ch10-tflops-{v}"] = f"{tf[f'fa3_{v}']:.0f}"
        for k in BASELINE_LABELS:
            if k in tf:
                out[f"ch10-tflops-{k.replace('_', '-')}"] = f"{tf[k]:.0f}"
        if best:
            out["ch10-best-tflops"] = f"{best:.0f}"
            if all(k in h for k in ("N", "d", "B", "H", "flops")):
                out["ch10-kv-tbs"] = f"{kv_stream_tbs(h, best):.1f}"
            out["ch10-best-share-peak"] = report.share(best, report.H100_SXM["dense_f16_tflops"])
            for k in ("cudnn", "sdpa_flash", "fa2"):
                if tf.get(k):
                    out[f"ch10-ratio-{k.replace('_', '-')}"] = f"{best / tf[k]:.2f}x"
            out["ch10-goal-met"] = "met" if tf.get("cudnn") and best / tf["cudnn"] >= GOAL \
                else "not met"
        if tf.get("fa3_twostage") and tf.get("fa3_nooverlap"):
            out["ch10-twostage-gain"] = f"{tf['fa3_twostage'] / tf['fa3_nooverlap']:.2f}x"
        if tf.get("fa3_pingpong") and tf.get("fa3_nooverlap"):
            out["ch10-pingpong-gain"] = f"{tf['fa3_pingpong'] / tf['fa3_nooverlap']:.2f}x"
        for v in ("nooverlap", "twostage"):
            for tag in ("ring2", "onesoftmax"):
                if tf.get(f"fa3_{v}_{tag}"):
                    out[f"ch10-tflops-{v}-{tag}"] = f"{tf[f'fa3_{v}_{tag}']:.0f}"
    for other in ("cudnn", "sdpa_flash"):
        r = ratios(doc, other)
        if r:
            key = other.replace("_", "-")
            out[f"ch10-sweep-{key}-min"] = f"{min(r):.2f}x"
            out[f"ch10-sweep-{key}-max"] = f"{max(r):.2f}x"
    if res.get("variants"):
        regs = {(r["variant"], r["d"]): r for r in res["variants"] if r["dtype"] == "f16"}
        ts = regs.get(("threestage", 64))
        if ts:
            out["ch10-threestage-d64-note"] = ", ".join(ts["ptxas_notes"]) or "none"
    out.update(_clock_values(doc))
    # a record without a section (an older or a failed run) still gives every name the
    # chapter cites: "n/a" says so in the text, and the book builds
    return {**{k: "n/a" for k in CITED}, **out}


def variant_table(doc: dict, *, live: list[dict] | None = None):
    """One row per variant and d (f16): key tile, ptxas registers and spills, ptxas's wgmma
    notes, SASS exp2 instructions beside a wgmma in flight, and TFLOP/s at the headline size.
    ``live``: :func:`.sass_evidence.all_evidence` rows compiled here, instead of the record's."""
    rows = live if live is not None else [r for r in _res(doc).get("variants") or []
                                          if r["dtype"] == "f16"]
    tf = tflops_of(headline(doc) or {})
    out = []
    for r in rows:
        s = r["sass"]
        out.append({"variant": r["variant"], "d": r["d"], "key tile": r["key_tile"],
                    "registers (ptxas)": r["registers"],
                    "consumer registers": r.get("consumer_registers", ""),
                    "spill bytes": r["spill_bytes"],
                    "ptxas": ", ".join(r["ptxas_notes"]) or "-",
                    "EX2 beside wgmma": f"{s['exp2_beside_wgmma']}/{s['exp2']}",
                    "TFLOP/s": (f"{tf[f'fa3_' + r['variant']]:.0f}"
                                if r["d"] == 128 and f"fa3_{r['variant']}" in tf else "")})
    return report.table(out, caption="Table: the four main loops (f16). TFLOP/s at N = 4096, "
                        "d = 128, B*H = 32, non-causal.", wrap_header=True)


def sweep_table(doc: dict):
    """TFLOP/s of the best variant and the baselines at every configuration of the sweep."""
    best = best_variant(doc)
    out = []
    for r in _res(doc).get("sweep") or []:
        tf = tflops_of(r)
        row = {"N": r["N"], "d": r["d"], "causal": "yes" if r["causal"] else "no",
               best: f"{tf.get('fa3_' + best, 0):.0f}"}
        for k, label in BASELINE_LABELS.items():
            row[label] = f"{tf[k]:.0f}" if k in tf else "-"
        row["vs cuDNN"] = f"{tf['fa3_' + best] / tf['cudnn']:.2f}x" \
            if tf.get("cudnn") and tf.get("fa3_" + best) else "-"
        out.append(row)
    if not out:
        out = [{"note": "no H100 record yet (book/data/10_fa3_pipelining/results.json)"}]
    return report.table(out, caption=f"Table: TFLOP/s, f16, B*H = 32; best variant {best}.",
                        wrap_header=True)


def check_table(doc: dict):
    rows = [{"problem": r["problem"], "case": r["case"], "ok": "yes" if r.get("ok") else "NO",
             "rel. error": f"{r['error']:.1e}" if "error" in r else r.get("failure", "")[:60]}
            for r in _res(doc).get("check") or []]
    if not rows:
        rows = [{"note": "no H100 record yet"}]
    return report.table(rows, caption="Table: every kernel against float64 on the H100.")
