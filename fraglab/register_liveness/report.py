"""Chapter 08's findings from the H100 record (``book/data/08_register_liveness/results.json``,
written by ``python -m fraglab.register_liveness bench``) and from the compiler (any machine).

:func:`glue_values` gives every number the prose cites (``ch08-...``; ``tests/test_book_record.py``
recomputes it); the ``*_table`` functions give the HTML tables; :func:`profiles` the live
register counts the figures plot (SASS and PTX, computed here, no GPU needed).
"""
from __future__ import annotations

from pathlib import Path

import json

from .. import bench, report, tools, toolchain
from . import kernels, liveness, rounds

RESULTS = tools.REPO_ROOT / "book" / "data" / "08_register_liveness" / "results.json"
#: What came before the d = 256 rounds: the first record's d = 256 row (:func:`earlier_from_record`)
#: and the chapter 10 run that disagreed with it (issue #28; that run's output was not kept).
EARLIER = RESULTS.with_name("earlier.json")
FIRST_RECORD_COMMIT = "1cc628f7af5ced5f818cbed181954cd51ff64f2d"
GOAL = 0.85          # the best variant at d = 256 against SDPA flash


def load(path: str | Path = RESULTS, missing_ok: bool = True) -> dict:
    """The record; without one (before the H100 run), an empty record whose values read "n/a"."""
    if missing_ok and not Path(path).is_file():
        print(f"no H100 record yet ({Path(path).name} is missing): GPU numbers read n/a")
        return {"device": {}, "results": {}}
    return bench.load_results(path)


def _entries(doc: dict, key: str) -> list:
    """Timed entries: ``throughput``, ``causal``, or ``sweep`` (its timed part)."""
    if key == "sweep":
        return (doc["results"].get("sweep") or {}).get("timed") or []
    return doc["results"].get(key) or []


def throughput_at(doc: dict, d: int, key: str = "throughput") -> dict:
    """Rows (name -> {tflops, of_baseline, ...}) timed at head dimension ``d``."""
    for entry in _entries(doc, key):
        if entry.get("d") == d:
            return entry["rows"]
    return {}


def best_at(doc: dict, d: int) -> tuple[str | None, dict]:
    """The fastest of our kernels at ``d`` (non-causal), by TFLOP/s."""
    rows = {k: r for k, r in throughput_at(doc, d).items() if k not in ("sdpa_flash", "fa2")}
    if not rows:
        return None, {}
    name = max(rows, key=lambda k: rows[k]["tflops"])
    return name, rows[name]


def _res(doc: dict, variant: str, d: int, bn: int | None = None) -> dict:
    for r in doc["results"].get("resources") or []:
        if r["variant"] == variant and r["d"] == d and (bn is None or r["bn"] == bn):
            return r
    return {}


def _tf(rows: dict, name: str) -> str:
    return report.fmt(rows.get(name, {}).get("tflops"), "{:.0f}")


def _pct(x) -> str:
    return report.fmt(None if x is None else 100 * x, "{:.0f}%")


def glue_values(doc: dict) -> dict[str, str]:
    """Every ``ch08-...`` value the chapter's prose cites, as text."""
    dev = doc.get("device") or {}
    clocks = dev.get("clocks") or {}
    g: dict[str, str] = {"ch08-gpu": dev.get("name", "n/a"),
                         "ch08-sm-clock": report.fmt(clocks.get("sm_mhz"), "{} MHz"),
                         "ch08-sdpa-version": str(doc["results"].get("sdpa", "n/a"))}
    for d in (128, 256):
        g[f"ch08-sweep-best-d{d}"] = g[f"ch08-sweep-best-tflops-d{d}"] = "n/a"
    for where in ("q_before_loop", "q_in_loop"):
        for what in ("regs", "spills", "tflops"):
            g[f"ch08-triton-{where}-{what}"] = "n/a"
    for d in kernels.HEAD_DIMS:
        rows = throughput_at(doc, d)
        sd = rows.get("sdpa_flash", {}).get("tflops")
        g[f"ch08-sdpa-d{d}"] = report.fmt(sd, "{:.0f}")
        for v in ("qreg", "qreload", "qglobal"):
            g[f"ch08-{v}-d{d}"] = _tf(rows, v)
        name, best = best_at(doc, d)
        g[f"ch08-best-d{d}"] = name or "n/a"
        g[f"ch08-best-tflops-d{d}"] = report.fmt(best.get("tflops"), "{:.0f}")
        g[f"ch08-best-share-d{d}"] = _pct(best["tflops"] / sd if best and sd else None)
    fa2 = throughput_at(doc, 128).get("fa2", {}).get("tflops")
    g["ch08-fa2-d128"] = report.fmt(fa2, "{:.0f}")
    best128 = best_at(doc, 128)[1].get("tflops")
    g["ch08-best-vs-fa2-d128"] = report.fmt(best128 / fa2 if best128 and fa2 else None, "{:.2f}x")
    g["ch08-goal"] = f"{100 * GOAL:.0f}%"
    name, best = best_at(doc, 256)
    sd = throughput_at(doc, 256).get("sdpa_flash", {}).get("tflops")
    g["ch08-goal-verdict"] = ("n/a" if not (best and sd) else
                              "met" if best["tflops"] >= GOAL * sd else "not met")
    q128 = {v: throughput_at(doc, 128).get(v, {}).get("tflops") for v in ("qreg", "qreload")}
    g["ch08-d128-verdict"] = ("n/a" if not (fa2 and q128["qreg"]) else
                              "no slower than" if q128["qreg"] >= 0.98 * fa2 else "slower than")
    for d in kernels.HEAD_DIMS:
        rows = throughput_at(doc, d, "causal")
        for v in ("qreg", "qreload"):
            one, two = rows.get(f"{v}_oneloop", {}).get("tflops"), rows.get(v, {}).get("tflops")
            g[f"ch08-two-vs-one-{v}-d{d}"] = report.fmt(two / one if one and two else None, "{:.2f}x")
    chk = doc["results"].get("check") or []
    g["ch08-checks-passed"] = f"{sum(1 for r in chk if r.get('ok'))} of {len(chk)}"
    g["ch08-sanitizer"] = report.sanitizer_verdict("register_liveness")
    for entry in _entries(doc, "sweep"):
        rows = {k: r for k, r in entry["rows"].items() if k != "sdpa_flash"}
        if rows:
            name = max(rows, key=lambda k: rows[k]["tflops"])
            g[f"ch08-sweep-best-d{entry['d']}"] = name.replace("@maxrregcount=", ", cap ")
            g[f"ch08-sweep-best-tflops-d{entry['d']}"] = f"{rows[name]['tflops']:.0f}"
    if (doc["results"].get("d256") or {}).get("spread"):   # only once the record has the rounds
        g.update(d256_glue_values(doc))
    tri = doc["results"].get("triton") or {}
    g["ch08-triton"] = tri.get("skipped") and "skipped" or report.fmt(tri.get("version"), "Triton {}")
    for r in tri.get("rows") or []:
        if r.get("registers") and r["d"] == 128 and r["causal"]:
            for where, reg in r["registers"].items():
                g[f"ch08-triton-{where}-regs"] = str(reg.get("n_regs"))
                g[f"ch08-triton-{where}-spills"] = str(reg.get("n_spills"))
                g[f"ch08-triton-{where}-tflops"] = f"{r['rows'][where]['tflops']:.0f}"
    return g


# ---- d = 256 beside SDPA flash and cuDNN, in rounds (step d256, :mod:`.rounds`) --------------------

def earlier_from_record(doc: dict, commit: str = FIRST_RECORD_COMMIT) -> dict:
    """The d = 256 row of a record without the rounds (the chapter's first), as ``earlier.json``
    keeps it under ``first_record``: TFLOP/s and share of SDPA flash of each kernel timed."""
    entry = next(e for e in _entries(doc, "throughput") if e.get("d") == 256)
    return {"source": "book/data/08_register_liveness/results.json, step throughput, d = 256",
            "commit": commit, "created_utc": doc.get("created_utc"),
            "rows": {k: {"tflops": r["tflops"], "of_sdpa_flash": r["of_baseline"]}
                     for k, r in entry["rows"].items()},
            "clocks_after": (entry.get("comparison") or {}).get("clocks")}


def load_earlier(path: str | Path = EARLIER) -> dict:
    return json.loads(Path(path).read_text()) if Path(path).is_file() else {}


def _x(m: dict | None, digits: int = 2) -> str:
    """``median (min-max)`` of a spread entry, as ratios."""
    if not m or not m.get("n"):
        return "n/a"
    f = f"{{:.{digits}f}}"
    return f"{f.format(m['median'])}x ({f.format(m['min'])}-{f.format(m['max'])}x)"


def _v(m: dict | None, unit: str = "") -> str:
    """``median unit (min-max)`` of a spread entry, whole numbers."""
    if not m or not m.get("n"):
        return "n/a"
    return f"{m['median']:.0f}{unit} ({m['min']:.0f}-{m['max']:.0f})"


def d256_kernel(sp: dict) -> str | None:
    """The course kernel of :data:`.rounds.KERNELS` with the highest median ratio to SDPA flash
    without cuDNN in the rounds (the first record's setting)."""
    cond = sp.get("without_cudnn") or sp.get("with_cudnn") or {}
    meds = {k: (cond.get("ratios") or {}).get(rounds.ratio_key(k, rounds.FLASH), {}).get("median")
            for k in rounds.KERNELS}
    meds = {k: m for k, m in meds.items() if m is not None}
    return max(meds, key=meds.get) if meds else None


def _overlap(m: dict | None, lo: float, hi: float) -> bool:
    return bool(m and m.get("n")) and m["min"] <= hi and m["max"] >= lo


def d256_glue_values(doc: dict, earlier: dict | None = None) -> dict[str, str]:
    """The ``ch08-d256-...`` values: the rounds' spreads (median (min-max)), the clock and the
    power with and without cuDNN, and what came before (``earlier.json``)."""
    res = doc["results"]["d256"]
    sp, earlier = res["spread"], load_earlier() if earlier is None else earlier
    w, wo = sp.get("with_cudnn") or {}, sp.get("without_cudnn") or {}
    k, default = d256_kernel(sp), rounds.KERNELS[-1]
    rk = rounds.ratio_key

    def med(cond, name):
        return ((cond.get("tflops") or {}).get(name) or {}).get("median")
    g = {"ch08-d256-rounds": str(max(w.get("rounds", 0), wo.get("rounds", 0))),
         "ch08-d256-kernel": k or "n/a", "ch08-d256-default": default,
         "ch08-d256-cudnn-version": str(doc["results"].get("cudnn", "n/a"))}
    for tag, cond in (("with", w), ("without", wo)):
        r = cond.get("ratios") or {}
        g[f"ch08-d256-vs-flash-{tag}"] = _x(r.get(rk(k, rounds.FLASH)) if k else None)
        g[f"ch08-d256-default-vs-flash-{tag}"] = _x(r.get(rk(default, rounds.FLASH)))
        g[f"ch08-d256-tflops-{tag}"] = _v((cond.get("tflops") or {}).get(k) if k else None)
        g[f"ch08-d256-flash-tflops-{tag}"] = _v((cond.get("tflops") or {}).get(rounds.FLASH))
        g[f"ch08-d256-clock-{tag}"] = _v(cond.get("sm_mhz"), " MHz")
        g[f"ch08-d256-power-{tag}"] = _v(cond.get("power_w"), " W")
    rw = w.get("ratios") or {}
    g["ch08-d256-vs-cudnn"] = _x(rw.get(rk(k, rounds.CUDNN)) if k else None)
    g["ch08-d256-default-vs-cudnn"] = _x(rw.get(rk(default, rounds.CUDNN)))
    g["ch08-d256-flash-vs-cudnn"] = _x(rw.get(rk(rounds.FLASH, rounds.CUDNN)))
    g["ch08-d256-cudnn-tflops"] = _v((w.get("tflops") or {}).get(rounds.CUDNN))
    g["ch08-d256-default-tflops-with"] = _v((w.get("tflops") or {}).get(default))
    for tag, name in (("slowdown", k), ("flash-slowdown", rounds.FLASH)):
        a, b = (med(w, name), med(wo, name)) if name else (None, None)
        g[f"ch08-d256-{tag}"] = report.fmt(a / b if a and b else None, "{:.2f}x")
    a, b = (rw.get(rk(k, rounds.FLASH)) if k else None,
            (wo.get("ratios") or {}).get(rk(k, rounds.FLASH)) if k else None)
    g["ch08-d256-flash-verdict"] = (
        "n/a" if not (a and a.get("n") and b and b.get("n")) else
        "lower with cuDNN in the rounds than without it, beyond the spread of the rounds"
        if a["max"] < b["min"] else
        "higher with cuDNN in the rounds than without it, beyond the spread of the rounds"
        if a["min"] > b["max"] else
        "the same with cuDNN in the rounds or without it, within the spread of the rounds")
    first = earlier.get("first_record") or {}
    rows = first.get("rows") or {}
    ours = {n: r for n, r in rows.items() if n not in (rounds.FLASH, "fa2")}
    fk = max(ours, key=lambda n: ours[n]["tflops"]) if ours else None
    g["ch08-d256-first-kernel"] = fk or "n/a"
    g["ch08-d256-first-tflops"] = report.fmt(ours[fk]["tflops"] if fk else None, "{:.0f}")
    g["ch08-d256-first-vs-flash"] = report.fmt(ours[fk]["of_sdpa_flash"] if fk else None,
                                               "{:.2f}x")
    g["ch08-d256-first-flash-tflops"] = report.fmt(rows.get(rounds.FLASH, {}).get("tflops"),
                                                   "{:.0f}")
    dr = rows.get(default) or {}
    g["ch08-d256-first-default-tflops"] = report.fmt(dr.get("tflops"), "{:.0f}")
    g["ch08-d256-first-default-vs-flash"] = report.fmt(dr.get("of_sdpa_flash"), "{:.2f}x")
    g["ch08-d256-first-date"] = str(first.get("created_utc") or "n/a")[:10]
    ch10 = earlier.get("chapter10_run") or {}
    rng = {key: ch10.get(key) for key in ("of_sdpa_flash", "of_cudnn")}
    for key, name in (("of_sdpa_flash", "vs-flash"), ("of_cudnn", "vs-cudnn")):
        g[f"ch08-d256-ch10-{name}"] = ("n/a" if not rng[key] else
                                      "{:.2f}-{:.2f}x".format(*rng[key]))
    g["ch08-d256-ch10-tflops"] = report.fmt(ch10.get("tflops"), "{:.0f}")
    g["ch08-d256-ch10-cudnn-tflops"] = report.fmt(ch10.get("cudnn_tflops"), "{:.0f}")
    match = [n for n in rounds.KERNELS if rng["of_sdpa_flash"] and rng["of_cudnn"]
             and _overlap(rw.get(rk(n, rounds.FLASH)), *rng["of_sdpa_flash"])
             and _overlap(rw.get(rk(n, rounds.CUDNN)), *rng["of_cudnn"])]
    g["ch08-d256-ch10-match"] = (" and ".join(match) if match else
                                 "none of them" if rng["of_sdpa_flash"] and rw else "n/a")
    return g


def d256_table(doc: dict):
    """Condition x callable: TFLOP/s and the ratios to SDPA flash and cuDNN, median (min-max)
    over the rounds; the SM clock and power of each condition in its first row."""
    res = doc["results"].get("d256") or {}
    out = []
    for cond, sp in (res.get("spread") or {}).items():
        for i, name in enumerate(sp.get("tflops") or {}):
            r = sp.get("ratios") or {}
            out.append({"in the rounds": cond.replace("_", " ").replace("cudnn", "cuDNN")
                        if i == 0 else "",
                        "SM clock, power": f"{_v(sp.get('sm_mhz'), ' MHz')}, "
                                           f"{_v(sp.get('power_w'), ' W')}" if i == 0 else "",
                        "kernel": name, "TFLOP/s": _v(sp["tflops"][name]),
                        **{col: "-" if name == base else _x(r.get(rounds.ratio_key(name, base)))
                           for col, base in (("x SDPA flash", rounds.FLASH),
                                             ("x cuDNN", rounds.CUDNN))}})
    return report.table(out or [{"d = 256 rounds": "not in the record yet"}],
                        caption=f"Table: d = 256, N = 4096, B*H = 32, f16, non-causal, "
                                f"{res.get('spread') and max(s['rounds'] for s in res['spread'].values()) or 'no'} "
                                "rounds: median (min-max) over the rounds",
                        wrap=["in the rounds", "SM clock, power"] if out else (),
                        wrap_header=True)


def live_glue_values(rows: list[dict], sweep: list[dict]) -> dict[str, str]:
    """The compiler's numbers the prose cites (``ch08-live-...``), from :func:`.resources.all_rows`
    and :func:`.resources.sweep_rows` computed where the chapter runs (no GPU needed)."""
    g = {"ch08-nvrtc": "NVRTC {}.{}".format(*tools.nvrtc_version())}
    for r in rows:
        if r["d"] in (128, 256) and "_" not in r["variant"]:
            key = f"ch08-live-{r['variant']}-d{r['d']}"
            g[key + "-regs"] = str(r["registers"])
            g[key + "-spill"] = f"{r['spill_stores'] + r['spill_loads']} bytes"
            g[key + "-ldl"] = f"{r['ldl'] + r['stl']}"
    for r in sweep:
        cap = r["knobs"].get("maxrregcount")
        if cap:
            key = f"ch08-cap{cap}-{r['variant']}-d{r['d']}"
            g[key + "-spill"] = f"{r['spill_stores'] + r['spill_loads']} bytes"
            g[key + "-blocks"] = str(r["blocks_per_sm"])
    return g


# ---- tables ----------------------------------------------------------------------------------

def resource_rows(rows: list[dict]) -> list[dict]:
    return [{"variant": r["variant"], "d": r["d"], "keys a tile": r["bn"],
             "cap": r["knobs"].get("maxrregcount", "-"), "registers": r["registers"],
             "spill bytes (st/ld)": f"{r['spill_stores']}/{r['spill_loads']}",
             "STL / LDL": f"{r['stl']} / {r['ldl']}", "shared KB": f"{r['smem'] / 1024:.0f}",
             "blocks/SM": r["blocks_per_sm"]} for r in rows]


def resource_table(rows: list[dict], caption: str):
    return report.table(resource_rows(rows), caption=caption, wrap_header=True)


def throughput_table(doc: dict, key: str = "throughput", caption: str = ""):
    """Name x d: TFLOP/s (share of SDPA flash), with registers and spills of the kernel."""
    entries = _entries(doc, key)
    names = []
    for e in entries:
        names += [k for k in e["rows"] if k not in names]
    out = []
    for name in names:
        row = {"kernel": name}
        for e in entries:
            r = e["rows"].get(name)
            row[f"d={e['d']}"] = f"{r['tflops']:.0f} ({100 * r['of_baseline']:.0f}%)" if r else "-"
        out.append(row)
    return report.table(out or [{"kernel": "no H100 record yet"}],
                        caption=caption or "Table: TFLOP/s (share of SDPA flash)")


def triton_table(doc: dict):
    tri = doc["results"].get("triton") or {}
    rows = []
    for r in tri.get("rows") or []:
        for where, reg in (r.get("registers") or {}).items():
            rows.append({"d": r["d"], "causal": r["causal"], "q loaded": where.replace("q_", "").replace("_", " "),
                         "registers": reg.get("n_regs"), "spills": reg.get("n_spills"),
                         "TFLOP/s": f"{r['rows'][where]['tflops']:.0f}",
                         "of SDPA": f"{100 * r['rows'][where]['of_baseline']:.0f}%"})
    if not rows:
        rows = [{"Triton": tri.get("skipped", "no record")}]
    return report.table(rows, caption="Table: the seed's setting in Triton (n_regs, n_spills as "
                                      "Triton reports them)")


# ---- live registers from the compiler (CPU) ----------------------------------------------------

def profiles(d: int = 256, arch: str = "sm_90", dtype: str = "f16", loops: str = "two") -> dict:
    """``{mode: {"sass": counts, "ptx": counts, "registers": ptxas}}`` for ``qreg`` and
    ``qreload``: live registers into every instruction of the kernel."""
    out = {}
    for mode in ("qreg", "qreload"):
        b = toolchain.compile(f"08_register_liveness_{mode}", arch)
        k = f"fa08_{mode}_{dtype}_d{d}_{loops}"
        out[mode] = {"sass": liveness.live_counts(liveness.parse_sass(b.sass(k))),
                     "ptx": liveness.live_counts(liveness.parse_ptx(liveness.ptx_function(b.ptx, k))),
                     "registers": b.resources[k]["registers"], "kernel": k}
    return out
