"""The chapter's tables, as HTML tables (:class:`fraglab.report.Table`) computed from a record:
they fit the book's column or scroll inside it, and their plain-text form is one short line."""
from __future__ import annotations

from ..report import Table
from .explain import first_launch_breakdown
from .kernels import LABELS, WAYS
from .ncu import occupancy_table
from .power import mean_power
from .record import paper_way_summary
from .report import HEADER, cells, reproduce_table
from .variants import VARIANT_LABELS, VARIANTS

#: Short names of the fresh-process variants, for table rows and plot labels.
VARIANT_SHORT = {"paper": "the paper's way", "regs_first": "in-register first",
                 "eager": "EAGER loading", "preload": "kernels loaded first",
                 "warmup": "one untimed launch first"}


def reproduce_html(doc: dict, caption: str = "") -> Table:
    """The reproduce-or-refute table (energy cells show the power x time they multiply)."""
    return Table(HEADER, [cells(r, products=True) for r in reproduce_table(doc)], caption,
                 align=["left", "right", "right", "right", "left"])


def loading_html(doc: dict, caption: str = "") -> Table:
    """The fresh-process variants: mean first launches and their ratio, medians of the later
    launches and theirs, the host's share of the first timed window, the loading mode."""
    rows = []
    br = first_launch_breakdown(doc)
    for name in VARIANTS:
        s = paper_way_summary(doc, name)
        if not s:
            continue
        f, lm = s["first_ms"], s.get("later_ms", {})
        later = (f"{lm['smem']['median'] * 1e3:.1f} / {lm['regs']['median'] * 1e3:.1f}"
                 if lm else "-")
        host = (" / ".join(f"{br[name][w]['load'] + br[name][w]['launch']:.0f}" for w in WAYS)
                if name in br else "-")
        rows.append([VARIANT_LABELS[name], s["n"],
                     f"{f['smem']['mean'] * 1e3:.1f} / {f['regs']['mean'] * 1e3:.1f}",
                     f"{s['speedup_of_means']:.2f}x", later,
                     f"{s.get('later_speedup_of_medians', float('nan')):.2f}x", host,
                     ", ".join(s["loading_mode_reported"])])
    head = ["variant (one change from the paper's way)", "processes",
            "first launch, us (mean): baseline / in-reg.", "ratio",
            "later launches, us (median)", "ratio", "host in the first window, us", "loading"]
    return Table(head, rows, caption, align=["left"] + ["right"] * 6 + ["left"])


def warm_html(doc: dict, caption: str = "") -> Table:
    """Every warm comparison: medians with their 10th-90th percentile range, and the ratio."""
    rows = []
    for w in doc.get("warm", []):
        t = w["comparison"]["timings"]
        us = lambda x: f"{x['median_ms'] * 1e3:.2f} ({x['p10_ms'] * 1e3:.2f}-{x['p90_ms'] * 1e3:.2f})"
        rows.append([w["dtype"], w["label"], w["tiles"], w["first"], us(t["smem"]), us(t["regs"]),
                     f"{w['comparison']['ratios']['regs']:.3f}x"])
    head = ["dtype", "configuration", "tiles", "first", "baseline, us (p10-p90)",
            "in-register, us (p10-p90)", "ratio"]
    return Table(head, rows, caption, align=["left", "left", "right", "left", "right", "right",
                                             "right"])


def occupancy_html(doc: dict, caption: str = "") -> Table:
    """Nsight Compute's occupancy and its limits (blocks per SM each resource allows)."""
    rows = []
    for r in occupancy_table(doc["ncu"]):
        sh = ((r["shared_ld"] or 0) + (r["shared_st"] or 0)) if r["shared_ld"] is not None else "-"
        rows.append([r["kernel"], r["tiles"], r["achieved_pct"], r["theoretical_pct"],
                     r["limit_blocks"], r["limit_registers"], r["limit_shared_mem"],
                     r["limit_warps"], sh])
    head = ["kernel", "tiles", "achieved %", "theoretical %", "limit: blocks", "registers",
            "shared mem.", "warps", "LDS + STS executed"]
    return Table(head, rows, caption)


def power_html(doc: dict, caption: str = "") -> Table:
    """Mean power of every loop, from NVML's energy counter (the samples' mean when absent)."""
    rows = []
    for key, title in (("power_relaunch", "relaunch loop (the paper's way)"),
                       ("power_sustained", "sustained, in one process")):
        src = doc.get(key, {})
        if "error" in src:
            rows.append([title, "-", "not measured", src["error"]])
            continue
        for name, r in src.items():
            extra = (f"{r['processes']} processes" if "processes" in r else
                     f"{r['launch_rate_hz'] / 1e3:.0f} k launches/s" if "launch_rate_hz" in r else
                     "GPU idle, this process's CUDA context open")
            rows.append([title, name.replace("smem", LABELS["smem"]).replace("regs", LABELS["regs"]),
                         f"{mean_power(r):.1f}", f"{len(r['power_w'])} samples; {extra}"])
    return Table(["measurement", "load", "mean power, W", "how"], rows, caption,
                 align=["left", "left", "right", "left"])


def cycles_html(doc: dict, mhz: float, caption: str = "") -> Table:
    """The epilogue's SM cycles per warp, per grid and kernel, with the median in ns."""
    from ..stats import summary
    rows = []
    for label, c in doc.get("cycles", {}).items():
        for w in WAYS:
            st = c[w].get("stats") or summary(c[w]["cycles"])
            rows.append([label, LABELS[w], f"{st['median']:.0f}", f"{st['p10']:.0f}-{st['p90']:.0f}",
                         st["n"], f"{st['median'] / mhz * 1e3:.0f}"])
    head = ["grid", "kernel", "median cycles", "p10-p90", "warps", f"median, ns at {mhz:.0f} MHz"]
    return Table(head, rows, caption, align=["left", "left", "right", "right", "right", "right"])


def build_html(reports: dict, caption: str = "") -> Table:
    """Table 3 from the build: ``reports`` maps a target to :func:`.build_report`'s result."""
    ops = ("HMMA", "STS", "LDS", "BAR", "SHFL")
    rows = [[arch, LABELS[way], r["registers"], r["smem_bytes"], r["barriers"],
             *(r["opcodes"][o] for o in ops), r["instructions"]]
            for arch, rep in reports.items() for way, r in rep["ways"].items()]
    head = ["target", "kernel", "registers", "shared B", "barriers", *ops, "instructions"]
    return Table(head, rows, caption)
