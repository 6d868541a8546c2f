"""The chapter's findings from the H100 record (``book/data/10_fa3_pipelining/results.json``,
written by ``python -m fraglab.fa3_pipelining bench``): :func:`glue_values` (name -> text, the
numbers the prose cites; ``tests/test_book_record.py`` recomputes them), :func:`variant_table`
and :func:`sweep_table` (HTML tables), and the helpers the bench summary shares.

Functions take the loaded record (``{"device", "results"}``) or its ``results`` alone.
"""
from __future__ import annotations

from pathlib import Path

from .. import bench, report, tools
from . import config, tuning

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
         *(f"ch10-tflops-{v}" for v in config.VARIANTS),
         "ch10-tflops-nooverlap-ring2", "ch10-tflops-twostage-ring2",
         "ch10-tflops-nooverlap-onesoftmax", "ch10-tflops-twostage-onesoftmax", "ch10-kv-tbs",
         "ch10-pingpong-gain", "ch10-throttled", "ch10-comparisons", "ch10-sm-mhz-min",
         "ch10-sm-mhz-max", "ch10-headline-sm-mhz",
         # the tma rung, d = 256, the tuning and the goal (tma_values)
         "ch10-tma-over-pingpong", "ch10-goal-main-min", "ch10-goal-main-max", "ch10-goal-headline",
         "ch10-goal-missed", "ch10-goal-points", "ch10-goal-missed-where", "ch10-d64-min",
         "ch10-d64-max", "ch10-d256-best-tflops", "ch10-d256-best-cudnn", "ch10-d256-best-n",
         "ch10-sweep-headline-tma", "ch10-sweep-headline-cudnn",
         "ch10-tune-points", "ch10-tune-two-stages", "ch10-tune-bc128", "ch10-tune-wg3",
         "ch10-tune-wg3-where", "ch10-tune-other", "ch10-d256-spill",
         "ch10-d256-consumer-regs", "ch10-d256-key_tile", "ch10-d256-consumer", "ch10-d256-o", "ch10-d256-s", "ch10-d256-p", "ch10-d256-total",
         "ch10-d256-sum",
         *(f"ch10-pipe-{k}-d{d}" for k in ("tensor", "xu") for d in (64, 128, 256)),
         "ch10-pipe-issue-d64")


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
    have = [v for v in config.VARIANTS if f"fa3_{v}" in tf]
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
    ctas = -(-n // config.file_constants("twostage")["fa3_rows"]) * heads
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
        for v in config.VARIANTS:
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
        row = sweep_row(doc, h["N"], h["d"], h.get("causal", False)) if "N" in h and "d" in h else None
        if row:                           # the same size in the sweep's own comparison
            stf = tflops_of(row)
            for k in ("fa3_tma", "cudnn"):
                if stf.get(k):
                    out[f"ch10-sweep-headline-{k.replace('fa3_', '')}"] = f"{stf[k]:.0f}"
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
    out.update(tma_values(doc, load_tuning() if res else {"results": {}}))
    if res:
        out.update(pipes_values())
    # a record without a section (an older or a failed run) still gives every name the
    # chapter cites: "n/a" says so in the text, and the book builds
    return {**{k: "n/a" for k in CITED}, **out}


def sweep_row(doc: dict, n: int, d: int, causal: bool) -> dict | None:
    """The sweep's row for one size (the sweep table shows it), or None."""
    return next((r for r in _res(doc).get("sweep") or []
                 if (r["N"], r["d"], bool(r["causal"])) == (n, d, bool(causal))), None)


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


# ---- the tma rung, d = 256 and the goal against cuDNN (issue: chapter 10 past cuDNN) -----------

#: The goal: the best kernel over cuDNN's SDPA, at d 128 and 256, N >= 4k (both types); at every
#: other point of the sweep; and at the headline size of the paper's figure (N 16k, d 128, f16).
GOAL_MAIN, GOAL_ELSEWHERE, GOAL_HEADLINE = 1.0, 0.95, 1.05


def load_tuning(path=None) -> dict:
    """The tuning record (``book/data/10_fa3_pipelining/tma_table.json``), or an empty one."""
    p = Path(path or tuning.TMA_TABLE)
    return bench.load_results(p) if p.is_file() else {"results": {}}


def goal_points(doc: dict, tune: dict) -> list[dict]:
    """Every (dtype, d, N, causal) with the tma rung's ratio to cuDNN, from the tuning record
    (each candidate, then the picks in bf16, interleaved with cuDNN; the best candidate is the
    wrapper's pick), or without one from the record's sweep (all rungs interleaved). Each point
    says which goal applies and whether it holds."""
    out = []
    f16 = _res(tune).get("f16") or _res(doc).get("sweep") or []
    rows = [("f16", r) for r in f16] + [("bf16", r) for r in _res(tune).get("bf16") or []]
    for dtype, r in rows:
        tf = tflops_of(r)
        mine = tf.get("fa3_tma") or max((v for k, v in tf.items() if k.startswith("tma ")),
                                        default=None)
        if not mine or not tf.get("cudnn"):
            continue
        main = r["d"] in (128, 256) and r["N"] >= 4096
        headline_pt = dtype == "f16" and r["d"] == 128 and r["N"] == 16384 and not r["causal"]
        goal = GOAL_HEADLINE if headline_pt else GOAL_MAIN if main else GOAL_ELSEWHERE
        x = mine / tf["cudnn"]
        out.append({"dtype": dtype, "d": r["d"], "N": r["N"], "causal": bool(r["causal"]),
                    "tma": mine, "cudnn": tf["cudnn"], "x": x, "goal": goal, "met": x >= goal})
    return out


def _k(n: int) -> str:
    return f"{n // 1024}k"


def goal_table(doc: dict, tune: dict):
    """The issue's table for the tma rung: x cuDNN by (dtype, d, causal) and N."""
    pts = goal_points(doc, tune)
    if not pts:
        return report.table([{"note": "no H100 record yet"}], caption="Table: tma over cuDNN.")
    sizes = sorted({p["N"] for p in pts})
    rows = []
    for key in sorted({(p["dtype"], p["d"], p["causal"]) for p in pts},
                      key=lambda k: (k[0] != "f16", k[1], k[2])):
        row = {"type": key[0], "d": key[1], "causal": "yes" if key[2] else "no"}
        for n in sizes:
            p = next((p for p in pts if (p["dtype"], p["d"], p["causal"], p["N"]) == (*key, n)), None)
            row[f"N={_k(n)}"] = "" if p is None else f"{p['x']:.3f}" + ("" if p["met"] else " *")
        rows.append(row)
    return report.table(rows, caption="Table: the tma rung (its tuned pick) over cuDNN's SDPA "
                        "(TFLOP/s ratio, interleaved in one process, the tuning run; B*H = 32). * below its goal: 1.05 at N = 16k, "
                        "d = 128, f16, non-causal; 1.0 at d = 128 and 256 from N = 4k; 0.95 elsewhere.")


def tuning_table(tune: dict):
    """The tuning sweep's picks (f16): for each (d, causal), the pick at each N and its lead
    over the best candidate of the other key tile."""
    from .tuning import label
    rows = []
    for r in _res(tune).get("f16") or []:
        tf = {k: v for k, v in tflops_of(r).items() if k.startswith("tma ")}
        if not tf or not r.get("pick"):
            continue
        best = label(r["pick"])
        other = [v for k, v in tf.items() if not k.startswith(f"tma bc{r['pick']['key_tile']} ")]
        rows.append({"d": r["d"], "causal": "yes" if r["causal"] else "no", "N": _k(r["N"]),
                     "key tile": r["pick"]["key_tile"], "stages": r["pick"]["stages"],
                     "consumers": r["pick"].get("consumers", 2),
                     "TFLOP/s": f"{tf[best]:.0f}",
                     "cuDNN": f"{tflops_of(r)['cudnn']:.0f}" if tflops_of(r).get("cudnn") else "-",
                     "other tile, best": f"{max(other):.0f}" if other else "-",
                     "x cuDNN": f"{r['x_cudnn']:.2f}" if r.get("x_cudnn") else "-"})
    if not rows:
        rows = [{"note": "no tuning record yet (python -m fraglab.fa3_pipelining tune)"}]
    return report.table(rows, caption="Table: the tuning sweep's pick at each size (f16): key "
                        "tile, ring depth and consumer warpgroups, its TFLOP/s and cuDNN's in the same "
                        "comparison, the best "
                        "candidate with the other key "
                        "tile, and the pick over cuDNN.", wrap_header=True)


def d256_budget() -> dict:
    """Registers a consumer thread needs at d = 256 (from the kernel's constants): O (m64n256 f32
    over 128 threads), S (m64nBC), the two P fragments (BC x 64 16-bit values as A operands),
    row max and sum; the setmaxnreg budgets."""
    bc = config.key_tile("tma", 256)
    o, s, p = 64 * 256 // 128, 64 * bc // 128, 2 * (64 * bc // 2 // 128)
    return {"o": o, "s": s, "p": p, "ml": 4, "total": o + s + p + 4, "key_tile": bc,
            "consumer": 240, "producer": 24, "sum": 128 * 24 + 256 * 240}


def tma_values(doc: dict, tune: dict) -> dict[str, str]:
    """The numbers the sections on the tma rung, d = 256 and the tuning cite."""
    out = {}
    h = headline(doc)
    tf = tflops_of(h or {})
    if tf.get("fa3_tma") and tf.get("fa3_pingpong"):
        out["ch10-tma-over-pingpong"] = f"{tf['fa3_tma'] / tf['fa3_pingpong']:.2f}x"
    pts = goal_points(doc, tune)
    if pts:
        main = [p for p in pts if p["goal"] == GOAL_MAIN]
        other = [p for p in pts if p["goal"] == GOAL_ELSEWHERE]
        head = [p for p in pts if p["goal"] == GOAL_HEADLINE]
        if main:
            out["ch10-goal-main-min"] = f"{min(p['x'] for p in main):.2f}x"
            out["ch10-goal-main-max"] = f"{max(p['x'] for p in main):.2f}x"
        if head:
            out["ch10-goal-headline"] = f"{head[0]['x']:.2f}x"
        missed = [p for p in pts if not p["met"]]
        out["ch10-goal-missed"] = str(len(missed))
        out["ch10-goal-points"] = str(len(pts))
        out["ch10-goal-missed-where"] = ", ".join(sorted({f"d = {p['d']}" for p in missed})) or "none"
        if other:
            d64 = [p for p in other if p["d"] == 64]
            if d64:
                out["ch10-d64-min"] = f"{min(p['x'] for p in d64):.2f}x"
                out["ch10-d64-max"] = f"{max(p['x'] for p in d64):.2f}x"
        d256 = [p for p in pts if p["d"] == 256 and p["dtype"] == "f16"]
        if d256:
            best = max(d256, key=lambda p: p["tma"])
            out["ch10-d256-best-tflops"] = f"{best['tma']:.0f}"
            out["ch10-d256-best-cudnn"] = f"{best['cudnn']:.0f}"
            out["ch10-d256-best-n"] = _k(best["N"]) + (", causal" if best["causal"] else ", non-causal")
    picks = [r["pick"] for r in _res(tune).get("f16") or [] if r.get("pick")]
    if picks:
        out["ch10-tune-points"] = str(len(picks))
        out["ch10-tune-two-stages"] = str(sum(p["stages"] == 2 for p in picks))
        out["ch10-tune-bc128"] = str(sum(p["key_tile"] == 128 for p in picks
                                         if p is not None))
        wg3 = [r for r in _res(tune).get("f16") or [] if (r.get("pick") or {}).get("consumers") == 3]
        out["ch10-tune-wg3"] = str(len(wg3))
        out["ch10-tune-wg3-where"] = "; ".join(
            f"d = {r['d']}, N = {_k(r['N'])}{' causal' if r['causal'] else ''}" for r in wg3) or "nowhere"
        out["ch10-tune-other"] = str(len(picks) - sum(p["key_tile"] == 128 for p in picks))
    regs = {(r["variant"], r["d"]): r for r in _res(doc).get("variants") or [] if r["dtype"] == "f16"}
    r = regs.get(("tma", 256))
    if r:
        out["ch10-d256-spill"] = str(r["spill_bytes"])
        out["ch10-d256-consumer-regs"] = str(r.get("consumer_registers", "n/a"))
    b = d256_budget()
    out.update({f"ch10-d256-{k}": str(v) for k, v in b.items()})
    return out


def tma_producer_source() -> str:
    """The TMA producer of ``kernels/10_fa3_pipelining_tma.cu`` (``struct TmaProducer``)."""
    text = (tools.KERNELS_DIR / "10_fa3_pipelining_tma.cu").read_text()
    start = text.index("struct TmaProducer")
    return text[start:text.index("\n};", start) + 3]


PIPES = tools.REPO_ROOT / "book" / "data" / "10_fa3_pipelining" / "pipes.json"
#: ncu's names for the three utilizations the chapter cites.
PIPE_METRICS = {"tensor": "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
                "xu": "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active",
                "issue": "sm__issue_active.avg.pct_of_peak_sustained_elapsed"}


def pipes_values(path=None) -> dict[str, str]:
    """The tensor pipe's, the MUFU (XU) pipe's and the issue slots' utilization of the tma rung
    at d 64, 128, 256 under ncu (``python -m fraglab.fa3_pipelining pipes``)."""
    p = Path(path or PIPES)
    if not p.is_file():
        return {}
    res = _res(bench.load_results(p))
    out = {}
    for d in (64, 128, 256):
        m = (res.get(f"tma d{d}") or {}).get("metrics") or {}
        for key, name in PIPE_METRICS.items():
            if isinstance(m.get(name), float) and (key != "issue" or d == 64):
                out[f"ch10-pipe-{key}-d{d}"] = f"{m[name]:.0f} %"
    return out
