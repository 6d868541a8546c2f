"""The chapter's tables, as HTML tables (:class:`fraglab.report.Table`) computed from a record:
they fit the book's column or scroll inside it, and their plain-text form is one short line."""
from __future__ import annotations

from ..report import Table
from .explain import first_launch_breakdown
from .kernels import LABELS, VARIANTS
from .ncu import occupancy_table
from .power import mean_power
from .record import paper_way_summary
from .report import HEADER, cells, reproduce_table
from .setups import SETUP_LABELS, SETUPS

#: Short names of the fresh-process setups, for table rows and plot labels.
SETUP_SHORT = {"paper": "the paper's way", "regs_first": "in-register first",
                 "eager": "EAGER loading", "preload": "kernels loaded first",
                 "warmup": "one untimed launch first"}


#: Shorter words for the reproduce-or-refute table's claims, so that every column fits the page.
_SHORT = (("Table 2: ", "T2 "), ("Table 3: ", "T3 "), ("Table 4: ", "T4 "), ("Table 5: ", "T5 "),
          ("baseline runtime (ms)", "runtime ms, baseline"),
          ("in-register runtime (ms)", "runtime ms, in-register"),
          ("speedup, a grid that fills the GPU 8 times", "speedup, 8 full waves"),
          ("registers per thread", "registers"), ("shared memory (bytes)", "shared bytes"),
          ("achieved occupancy (%)", "occupancy %"), ("power (W)", "power W"),
          ("energy per operation (mJ)", "energy mJ"), ("energy per launch (mJ)", "energy mJ"),
          ("efficiency gain", "energy gain"), ("(SM cycles)", "(cycles)"),
          (" (shared memory)", ""), ("8 full waves", "8 waves"))


def short_claim(claim: str) -> str:
    """A reproduce-or-refute claim in the table's short words."""
    for long, short in _SHORT:
        claim = claim.replace(long, short)
    return claim


def short_verdict(r: dict) -> str:
    """``paper's way / sound way``: yes (reproduced or the same), no, or - (not measured that
    variant); rows without a paper figure say so."""
    if r["paper"] is None:
        return "no paper figure"
    word = {"reproduced": "yes", "same": "yes", "not reproduced": "no", "differs": "no",
            "not measured": "-"}
    return " / ".join(word[r[k]] for k in ("verdict_paper_way", "verdict_sound"))


def reproduce_html(doc: dict, caption: str = "") -> Table:
    """The reproduce-or-refute table in short words (T2-T5: the paper's Tables 2 to 5; verdict:
    reproduced? the paper's way / the sound way)."""
    rows = []
    for r in reproduce_table(doc):
        c = cells(r)
        rows.append([short_claim(r["claim"]), c[1], c[2], c[3], short_verdict(r)])
    head = ["claim", "paper", "ours, paper's way", "ours, sound way", "reproduced?"]
    return Table(head, rows, caption, align=["left", "right", "right", "right", "left"])


def loading_html(doc: dict, caption: str = "") -> Table:
    """The fresh-process setups: mean first launches (baseline / in-register) and their ratio,
    medians of the later launches and theirs, the host's time in the first timed window
    (finding and loading the kernel plus the launch call), the loading mode."""
    rows = []
    br = first_launch_breakdown(doc)
    for name in SETUPS:
        s = paper_way_summary(doc, name)
        if not s:
            continue
        f, lm = s["first_ms"], s.get("later_ms", {})
        later = (f"{lm['smem']['median'] * 1e3:.1f} / {lm['regs']['median'] * 1e3:.1f}"
                 if lm else "-")
        host = (" / ".join(f"{br[name][w]['load'] + br[name][w]['launch']:.0f}" for w in VARIANTS)
                if name in br else "-")
        rows.append([SETUP_SHORT[name], s["n"],
                     f"{f['smem']['mean'] * 1e3:.1f} / {f['regs']['mean'] * 1e3:.1f}",
                     f"{s['speedup_of_means']:.2f}x", later,
                     f"{s.get('later_speedup_of_medians', float('nan')):.2f}x", host,
                     ", ".join(s["loading_mode_reported"])])
    head = ["variant", "n", "first launch, us", "ratio", "later, us", "ratio", "host, us",
            "loading"]
    return Table(head, rows, caption, align=["left"] + ["right"] * 6 + ["left"])


def warm_html(doc: dict, caption: str = "") -> Table:
    """Every warm comparison: medians with their 10th-90th percentile range, and the ratio."""
    rows = []
    for w in doc.get("warm", []):
        t = w["comparison"]["timings"]
        us = lambda x: f"{x['median_ms'] * 1e3:.2f} ({x['p10_ms'] * 1e3:.2f}-{x['p90_ms'] * 1e3:.2f})"
        rows.append([w["dtype"], w["label"], w["tiles"], w["first"], us(t["smem"]), us(t["regs"]),
                     f"{w['comparison']['ratios']['regs']:.3f}x"])
    head = ["dtype", "configuration", "tiles", "first", "baseline, us", "in-register, us", "ratio"]
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
    head = ["kernel", "tiles", "achieved %", "theor. %", "blocks", "regs", "shared",
            "warps", "LDS+STS"]
    return Table(head, rows, caption, wrap_header=True)


def power_html(doc: dict, caption: str = "") -> Table:
    """Mean power of every loop, from NVML's energy counter (the samples' mean when absent)."""
    rows = []
    for key, title in (("power_relaunch", "relaunch"), ("power_sustained", "sustained")):
        src = doc.get(key, {})
        if "error" in src:
            rows.append([title, "-", "-", "-", src["error"]])
            continue
        for name, r in src.items():
            how = (f"{r['processes']} processes" if "processes" in r else
                   f"{r['launch_rate_hz'] / 1e3:.0f} k launches/s" if "launch_rate_hz" in r else
                   "idle, context open")
            load = name.replace("smem", "baseline").replace("regs", "in-register")
            rows.append([title, load, f"{mean_power(r):.1f}", len(r["power_w"]), how])
    return Table(["loop", "load", "mean W", "samples", "how"], rows, caption,
                 align=["left", "left", "right", "right", "left"])


def cycles_html(doc: dict, mhz: float, caption: str = "") -> Table:
    """The epilogue's SM cycles per warp, per grid and kernel, with the median in ns."""
    from ..stats import summary
    rows = []
    for label, c in doc.get("cycles", {}).items():
        for w in VARIANTS:
            st = c[w].get("stats") or summary(c[w]["cycles"])
            rows.append([label, LABELS[w].split(" (")[0], f"{st['median']:.0f}",
                         f"{st['p10']:.0f}-{st['p90']:.0f}", st["n"], f"{st['median'] / mhz * 1e3:.0f}"])
    head = ["grid", "kernel", "median cycles", "p10-p90", "warps", f"ns at {mhz:.0f} MHz"]
    return Table(head, rows, caption, align=["left", "left", "right", "right", "right", "right"])


def build_html(reports: dict, caption: str = "") -> Table:
    """Table 3 from the build: ``reports`` maps a target to :func:`.build_report`'s result."""
    ops = ("HMMA", "STS", "LDS", "BAR", "SHFL")
    rows = [[arch, LABELS[variant].split(" (")[0], r["registers"], r["smem_bytes"], r["barriers"],
             *(r["opcodes"][o] for o in ops), r["instructions"]]
            for arch, rep in reports.items() for variant, r in rep["ways"].items()]
    head = ["target", "kernel", "regs", "shared B", "barriers", *ops, "instr."]
    return Table(head, rows, caption)
