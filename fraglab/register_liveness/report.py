"""Chapter 08's findings from the H100 record (``book/data/08_register_liveness/results.json``,
written by ``python -m fraglab.register_liveness bench``) and from the compiler (any machine).

:func:`glue_values` gives every number the prose cites (``ch08-...``; ``tests/test_book_record.py``
recomputes it); the ``*_table`` functions give the HTML tables; :func:`profiles` the live
register counts the figures plot (SASS and PTX, computed here, no GPU needed).
"""
from __future__ import annotations

from pathlib import Path

from .. import bench, report, tools, toolchain
from . import kernels, liveness

RESULTS = tools.REPO_ROOT / "book" / "data" / "08_register_liveness" / "results.json"
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
    tri = doc["results"].get("triton") or {}
    g["ch08-triton"] = tri.get("skipped") and "skipped" or report.fmt(tri.get("version"), "Triton {}")
    for r in tri.get("rows") or []:
        if r.get("registers") and r["d"] == 128 and r["causal"]:
            for where, reg in r["registers"].items():
                g[f"ch08-triton-{where}-regs"] = str(reg.get("n_regs"))
                g[f"ch08-triton-{where}-spills"] = str(reg.get("n_spills"))
                g[f"ch08-triton-{where}-tflops"] = f"{r['rows'][where]['tflops']:.0f}"
    return g


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
