"""The chapter's numbers and tables, from the H100 record (``book/data/09_instruction_diet/``)
and from SASS compiled wherever the chapter runs.

    doc = load()                 # the record written by ``python -m fraglab.instruction_diet bench``
    glue_values(doc)             # {"ch09-final-of-sdpa": "1.07x", ...} (tests/test_book_record.py)
    variant_table(doc)           # the closing table: main-loop classes, TFLOP/s, x SDPA flash
    sweep_table(doc)             # the final variant over N, d, causal beside SDPA flash and cuDNN
    stall_table(doc)             # ncu's stall reasons of the profiled variants

The record (and the rows of :func:`.classes.variant_counts`) name a variant under the key
``step`` (``"step"`` in its check and SASS rows, ``"steps"`` for the ladder): the committed H100
record's names, kept; the tables show them under the heading ``step``.
"""
from __future__ import annotations

from pathlib import Path

from .. import bench, report, tools
from .classes import ORDER
from .kernels import CHANGES, FINAL, VARIANTS

#: The record of the H100 run the chapter reads.
RESULTS = tools.REPO_ROOT / "book" / "data" / "09_instruction_diet" / "results.json"
#: The headline configuration and the goals (ratios to SDPA's flash backend).
HEADLINE = dict(N=4096, d=128, causal=False)
GOAL_HEADLINE, GOAL_SWEEP = 1.05, 1.0
#: Where the issue stood before the diet (chapter 05's kernel, one H100 run, TFLOP/s).
BEFORE = {"fa2": 316.0, "sdpa_flash": 340.0}
#: The seed's figures (part 8 of "Flash Attention from Scratch", A100): kernel 7 -> kernel 11,
#: the reference kernel, and kernel 10's regression (book/references.md#fa-from-scratch).
SEED = {"before": 149.71, "after": 177.40, "reference": 186.4, "kernel9": 177.68,
        "kernel10": 175.10}


def load(path: str | Path = RESULTS) -> dict:
    """The record; until the H100 run has written one, an empty record (every number reads
    ``n/a``) that says what is missing."""
    if not Path(path).exists():
        return {"device": {}, "results": {}, "missing": f"{path} (not recorded yet)"}
    return bench.load_results(path)


def _res(doc: dict) -> dict:
    return doc.get("results") or {}


def headline(doc: dict, causal: bool = False) -> dict:
    """The headline record (N = 4096, d = 128, f16), non-causal or causal; ``{}`` if missing."""
    for rec in _res(doc).get("headline") or []:
        if isinstance(rec, dict) and bool(rec.get("causal")) == causal:
            return rec
    return {}


def sweep_rows(doc: dict) -> list[dict]:
    """Every timed configuration: the sweep and the headline ones, sorted by (d, causal, N)."""
    rows = [r for r in (_res(doc).get("sweep") or []) + (_res(doc).get("headline") or [])
            if isinstance(r, dict) and "tflops" in r]
    return sorted(rows, key=lambda r: (r["d"], r["causal"], r["N"]))


def best_variant(rec: dict) -> str | None:
    tf = {k: v for k, v in (rec.get("tflops") or {}).items() if k in VARIANTS}
    return max(tf, key=tf.get) if tf else None


def sass_rows(doc: dict, d: int = 128) -> list[dict]:
    """The record's class counts (compiled on the GPU machine during the run)."""
    s = _res(doc).get("sass")
    return list(s.get(f"d{d}") or []) if isinstance(s, dict) else []


def _x(v) -> str:
    return report.fmt(v, "{:.2f}x")


def glue_values(doc: dict) -> dict[str, str]:
    """Every number the chapter's prose quotes from the record, by glue name (``ch09-...``)."""
    dev, res = doc.get("device") or {}, _res(doc)
    clocks = dev.get("clocks") or {}
    h, hc = headline(doc), headline(doc, causal=True)
    tf, tfc = h.get("tflops") or {}, hc.get("tflops") or {}
    of = h.get("of_sdpa") or {}
    f = {"gpu": report.fmt(dev.get("name")), "sm-clock": report.fmt(clocks.get("sm_mhz"), "{} MHz"),
         "record-date": (doc.get("created_utc") or "")[:10],
         "torch": report.fmt((res.get("baselines") or {}).get("sdpa_flash")),
         "final": FINAL, "goal-headline": _x(GOAL_HEADLINE),
         "before-fa2": report.fmt(BEFORE["fa2"], "{:.0f}"),
         "before-sdpa": report.fmt(BEFORE["sdpa_flash"], "{:.0f}")}
    for k in (*VARIANTS, "sdpa_flash", "cudnn"):
        key = k.replace("_", "-")
        f[f"tflops-{key}"] = report.fmt(tf.get(k), "{:.0f}")
        f[f"tflops-causal-{key}"] = report.fmt(tfc.get(k), "{:.0f}")
        if k in VARIANTS:
            f[f"of-sdpa-{key}"] = _x(of.get(k))
    f["tflops-final"] = report.fmt(tf.get(FINAL), "{:.0f}")
    f["seed-before"] = report.fmt(SEED["before"], "{:.1f}")
    f["seed-after"] = report.fmt(SEED["after"], "{:.1f}")
    f["seed-reference"] = report.fmt(SEED["reference"], "{:.1f}")
    f["seed-regression"] = report.fmt(100 * (1 - SEED["kernel10"] / SEED["kernel9"]), "{:.2f} %")
    f["final-of-sdpa"] = _x(of.get(FINAL))
    f["final-of-cudnn"] = _x(tf.get(FINAL) / tf["cudnn"] if tf.get(FINAL) and tf.get("cudnn") else None)
    f["final-of-sdpa-causal"] = _x((hc.get("of_sdpa") or {}).get(FINAL))
    f["best-step"] = report.fmt(best_variant(h))
    f["best-of-sdpa"] = _x(of.get(best_variant(h))) if best_variant(h) else "n/a"
    rows = sweep_rows(doc)
    ratios = [r["of_sdpa"][FINAL] for r in rows if FINAL in (r.get("of_sdpa") or {})]
    f["sweep-min"] = _x(min(ratios) if ratios else None)
    f["sweep-max"] = _x(max(ratios) if ratios else None)
    f["sweep-count"] = str(len(ratios))
    f["sweep-at-goal"] = str(sum(x >= GOAL_SWEEP for x in ratios))
    checks = res.get("check") if isinstance(res.get("check"), list) else []
    f["checks"] = str(len(checks))
    f["checks-pass"] = str(sum(bool(r.get("ok")) for r in checks))
    worst = max((r.get("error", 0.0) for r in checks if r.get("ok")), default=None)
    f["checks-worst"] = report.fmt(worst, "{:.1e}")
    f["sanitizer"] = sanitizer_verdict(doc)
    sr = {r["step"]: r for r in sass_rows(doc)}            # the record's key "step"
    for k in VARIANTS:
        r = sr.get(k)
        key = k.replace("_", "-")
        f[f"loop-{key}"] = report.fmt(r and r["loop_instructions"])
        f[f"share-{key}"] = report.fmt(r and r["hmma_share"], "{:.0%}")
        f[f"int-{key}"] = report.fmt(r and r["loop"]["integer"])
    return {"ch09-" + k: v for k, v in f.items()} | goal_glue(doc)


def variant_table(doc: dict, live_rows: list[dict] | None = None, d: int = 128) -> report.Tables:
    """The closing table: per variant, the main loop's size, its HMMA share, registers, and
    TFLOP/s at N = 4096, d = 128, f16 with the ratio to SDPA flash; then (stacked below: one
    table would be twice the column) its class counts (from the record's SASS, or ``live_rows``
    where the record has none)."""
    h = headline(doc)
    tf, of = h.get("tflops") or {}, h.get("of_sdpa") or {}
    rows_ = sass_rows(doc, d) or list(live_rows or [])
    cols = [k for k in ORDER if any(r["loop"].get(k) for r in rows_)]
    out = []
    for r in rows_:
        k = r["step"]
        out.append({"step": k, "loop": r["loop_instructions"],
                    "HMMA share": f"{r['hmma_share']:.0%}", "regs": r["registers"],
                    "TFLOP/s": report.fmt(tf.get(k), "{:.0f}"), "x SDPA": _x(of.get(k)),
                    **{c: r["loop"].get(c, 0) for c in cols}})
    for b in ("sdpa_flash", "cudnn"):
        if b in tf:
            out.append({"step": b, "loop": "", "HMMA share": "", "regs": "",
                        "TFLOP/s": report.fmt(tf[b], "{:.0f}"), "x SDPA": _x(of.get(b)),
                        **{c: "" for c in cols}})
    head = ["step", "loop", "HMMA share", "regs", "TFLOP/s", "x SDPA", *cols]
    whole = report.Table(head, [[r[h] for h in head] for r in out],
                         f"Table: every step's main loop (sm_90, f16, d = {d}) and its speed at "
                         "N = 4096, B*H = 32, non-causal, on the H100; below, the loop's "
                         "instructions by class.", wrap_header=True, check=False)
    return whole.split(at=[head.index("x SDPA") + 1])


def sweep_table(doc: dict, variant: str = FINAL) -> report.Table:
    """``variant`` over N, d and causal: TFLOP/s beside SDPA flash and cuDNN, and the ratios."""
    if not sweep_rows(doc):
        return "[record] no sweep: " + ("not recorded yet" if "missing" in doc else "it failed")
    out = []
    for r in sweep_rows(doc):
        tf = r["tflops"]
        out.append({"d": r["d"], "causal": "yes" if r["causal"] else "no", "N": r["N"],
                    variant: report.fmt(tf.get(variant), "{:.0f}"),
                    "SDPA flash": report.fmt(tf.get("sdpa_flash"), "{:.0f}"),
                    "cuDNN": report.fmt(tf.get("cudnn"), "{:.0f}"),
                    "x SDPA": _x(tf.get(variant) / tf["sdpa_flash"]
                                 if tf.get(variant) and tf.get("sdpa_flash") else None),
                    "best step": report.fmt(best_variant(r))})
    return report.table(out, caption=f"Table: {variant} against SDPA's flash and cuDNN backends "
                                     "(TFLOP/s, f16, B*H = 32).")


def changes_table() -> report.Table:
    return report.table([{"step": k, "what changes": v} for k, v in CHANGES.items()],
                        caption="Table: the ladder, one switch of 09_instruction_diet.cuh a step.",
                        wrap=["what changes"])


def stalls(doc: dict) -> dict[str, dict[str, float]]:
    """``{variant: {reason: cycles per issued instruction}}`` where ncu ran (``selected`` left
    out)."""
    st = _res(doc).get("stalls") or {}
    out = {}
    for k in VARIANTS:
        fams = (st.get(k) or {}).get("stalls") if isinstance(st.get(k), dict) else None
        if fams:
            fam = fams.get("smsp__average_warps") or next(iter(fams.values()), {})
            out[k] = {r: v for r, v in fam.items() if isinstance(v, (int, float)) and r != "selected"}
    return out


def stall_table(doc: dict, top: int = 6) -> report.Table | str:
    """The largest stall reasons over the profiled variants, one column per variant."""
    s = stalls(doc)
    if not s:
        why = (_res(doc).get("stalls") or {}).get("skipped", "no stall data in the record")
        return f"[stalls] {why}"
    reasons = sorted({r for v in s.values() for r in v}, key=lambda r: -max(v.get(r, 0) for v in s.values()))
    rows = [{"reason": r.replace("_", " "), **{k: report.fmt(v.get(r), "{:.2f}") for k, v in s.items()}}
            for r in reasons[:top]]
    return report.table(rows, caption="Table: warp stall reasons (cycles per issued instruction, "
                                      "ncu), N = 4096, d = 128, f16.")


def verdict(ratio, goal: float) -> str:
    """``met`` or ``not met`` (``n/a`` without a measurement)."""
    return "n/a" if ratio is None else ("met" if ratio >= goal else "not met")


def goal_glue(doc: dict) -> dict[str, str]:
    """The two performance goals' verdicts (``ch09-goal-...``)."""
    of = headline(doc).get("of_sdpa") or {}
    rows = [r for r in sweep_rows(doc) if FINAL in (r.get("of_sdpa") or {})]
    worst = min((r["of_sdpa"][FINAL] for r in rows), default=None)
    return {"ch09-goal-headline-verdict": verdict(of.get(FINAL), GOAL_HEADLINE),
            "ch09-goal-sweep-verdict": verdict(worst, GOAL_SWEEP),
            "ch09-goal-sweep": _x(GOAL_SWEEP)}


def live_glue_values(rows: list[dict], evidence: list[dict]) -> dict[str, str]:
    """The SASS numbers the prose quotes, from :func:`.classes.ladder` rows (and
    :func:`.classes.seed_evidence`) compiled where the chapter runs (``ch09-live-...``)."""
    f = {}
    for r in rows:
        key = r["step"].replace("_", "-")
        loop = r["loop"]
        f[f"loop-{key}"] = str(r["loop_instructions"])
        f[f"share-{key}"] = f"{r['hmma_share']:.0%}"
        for c in ("tensor", "shared", "global", "integer", "move", "float", "barrier"):
            f[f"{c}-{key}"] = str(loop[c])
        f[f"kernel-integer-{key}"] = str(r["kernel"]["integer"])
        f[f"regs-{key}"] = str(r["registers"])
        f[f"spill-{key}"] = str(r["spill_bytes"])
        f[f"local-{key}"] = str(loop["local"])
        f[f"shared-per-hmma-{key}"] = f"{loop['shared'] / max(1, loop['tensor']):.2f}"
        f[f"per-hmma-{key}"] = f"{r['loop_instructions'] / max(1, loop['tensor']):.1f}"
    names = ("moves", "f2fp", "cs2r", "rz")
    for name, e in zip(names, evidence):
        f[f"evidence-{name}"] = str(e["count"])
    return {"ch09-live-" + k: v for k, v in f.items()}


def sanitizer_verdict(doc: dict) -> str:
    """``clean`` when every compute-sanitizer run of the record reported no error, ``not clean``
    when one reported some, ``incomplete`` when a run did not finish, ``not run`` when the tool
    was missing or the section did not run."""
    san = _res(doc).get("sanitizer")
    runs = [v["clean"] for v in (san or {}).values() if isinstance(v, dict) and "clean" in v]
    if not runs:
        return "not run"
    if False in runs:
        return "not clean"
    return "clean" if all(r is True for r in runs) else "incomplete"
