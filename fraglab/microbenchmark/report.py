"""Reading a record: the reproduce-or-refute table against the paper's figures, and the
findings and conclusion that follow from the numbers by stated rules."""
from __future__ import annotations

import math

import numpy as np

from .kernels import LABELS, VARIANTS
from .ncu import occupancy_table
from .explain import energy_rows, epilogue_vs_kernel, first_launch_breakdown
from .power import mean_power
from .record import cycle_medians, paper_way_summary, warm_summary
from .setups import SETUP_LABELS, SETUPS

#: The paper's figures (Morales 2025, Tables 2-5), to compare with. Its Table 5 prints energy in
#: "uJ", but its own formula, power (W) x runtime (ms), gives mJ (120.79 W x 0.103 ms = 12.4 mJ):
#: the numbers are kept, read as mJ.
PAPER = {
    "H100": {"runtime_ms": {"smem": 0.103, "regs": 0.017}, "speedup": 6.1,
             "occupancy_pct": {"smem": 21.17, "regs": 21.91},
             "registers": {"smem": 32, "regs": 24}, "smem_bytes": {"smem": 1024, "regs": 0},
             "barriers": {"smem": 1, "regs": 0}, "power_w": {"smem": 120.79, "regs": 120.81},
             "energy": {"smem": 12.45, "regs": 2.06}, "energy_gain": 6.0},
    "RTX 5080": {"runtime_ms": {"smem": 0.06, "regs": 0.0117}, "speedup": 5.5,
                 "occupancy_pct": {"smem": 42.97, "regs": 44.37},
                 "power_w": {"smem": 55.53, "regs": 55.82},
                 "energy": {"smem": 3.60, "regs": 0.67}, "energy_gain": 5.4},
}


def _verdict(paper, ours, rel: float = 0.25) -> str:
    if paper is None or ours is None:
        return "not measured"
    if isinstance(paper, int) and isinstance(ours, (int, np.integer)):
        return "same" if paper == ours else "differs"
    return "reproduced" if abs(math.log(ours / paper)) <= math.log(1 + rel) else "not reproduced"


def reproduce_table(doc: dict, gpu: str = "H100") -> list[dict]:
    """Rows: claim, the paper's figure, ours measured the paper's way, ours measured soundly, and
    a verdict for each of ours (numbers within 25 % of the paper's count as reproduced)."""
    P = PAPER[gpu]
    pw = paper_way_summary(doc)
    w1, wg = warm_summary(doc, "one block"), warm_summary(doc, "8 full waves")
    cyc = cycle_medians(doc)
    arch = "sm_" + str(doc.get("device", doc.get("device_before", {})).get(
        "compute_capability", "9.0")).replace(".", "")
    build = doc.get("build", {}).get(arch) or doc.get("build", {}).get("sm_90")
    rows = []

    def row(claim, paper, ours_pw, ours_sound, fmt=".3g", note="", products=("", "")):
        rows.append({"claim": claim, "paper": paper, "paper_way": ours_pw, "sound": ours_sound,
                     "verdict_paper_way": _verdict(paper, ours_pw),
                     "verdict_sound": _verdict(paper, ours_sound), "fmt": fmt, "note": note,
                     "products": list(products)})

    f = pw["first_ms"] if pw else None
    row("Table 2: baseline runtime (ms)", P["runtime_ms"]["smem"],
        f["smem"]["mean"] if f else None, w1["smem"] if w1 else None, ".4f",
        "sound: warm median, one block")
    row("Table 2: in-register runtime (ms)", P["runtime_ms"]["regs"],
        f["regs"]["mean"] if f else None, w1["regs"] if w1 else None, ".4f",
        "sound: warm median, one block")
    row("Table 2: speedup (x)", P["speedup"], pw["speedup_of_means"] if pw else None,
        w1["ratio"] if w1 else None, ".2f", "paper's way: ratio of means over processes")
    row("speedup, a grid that fills the GPU 8 times (x)", None, None,
        wg["ratio"] if wg else None, ".2f", "the paper reports throughput as comparable")
    row("epilogue, baseline (SM cycles)", None, None, cyc["smem"] if cyc else None, ".0f",
        "clock64 around the epilogue, one warp")
    row("epilogue, in-register (SM cycles)", None, None, cyc["regs"] if cyc else None, ".0f")
    for key, label in (("registers", "registers per thread"), ("smem_bytes", "shared memory (bytes)"),
                       ("barriers", "barriers")):
        for variant in VARIANTS:
            ours = build["ways"][variant][key] if build else None
            row(f"Table 3: {label}, {LABELS[variant]}", P[key][variant], None, ours, "d",
                f"ptxas, {build['arch']}" if build else "")
    occ = {}
    if doc.get("ncu", {}).get("ok"):
        for r in occupancy_table(doc["ncu"]):
            if r["tiles"] == 2048:
                occ["smem" if "_smem_" in r["kernel"] else "regs"] = r["achieved_pct"]
    for variant in VARIANTS:
        row(f"Table 3: achieved occupancy (%), {LABELS[variant]}", P["occupancy_pct"][variant],
            None, occ.get(variant), ".1f", "ncu, 2048 one-warp blocks (the paper's profiling grid)")
    pr, ps = doc.get("power_relaunch", {}), doc.get("power_sustained", {})
    for variant in VARIANTS:
        ours_pw = mean_power(pr[variant]) if variant in pr else None
        key = f"{variant}, one block"
        ours_s = mean_power(ps[key]) if key in ps else None
        row(f"Table 4: power (W), {LABELS[variant]}", P["power_w"][variant], ours_pw, ours_s, ".1f",
            "paper's way: process relaunch loop; sound: back-to-back warm launches, one block")
    for variant in VARIANTS:
        key = f"{variant}, 8 full waves"
        row(f"power (W), 8 full waves, {LABELS[variant]}", None, None,
            mean_power(ps[key]) if key in ps else None, ".1f",
            "back-to-back warm launches of a grid that fills the GPU 8 times")
    # Energy = the power of a load x the time of the same load (W x ms = mJ), so that each energy
    # row multiplies the power shown in the power row of that load.
    e = energy_rows(doc)
    prod = lambda load, variant: (f"{e[load][variant][0]:.1f} W x {e[load][variant][1]:.4f} ms"
                              if variant in e.get(load, {}) else "")
    val = lambda load, variant: e[load][variant][2] if variant in e.get(load, {}) else None
    for variant in VARIANTS:
        row(f"Table 5: energy per operation (mJ), {LABELS[variant]}", P["energy"][variant],
            val("paper_way", variant), val("one_block", variant), ".3g",
            "power (W) x runtime (ms) of the same load; the paper prints uJ for the same product",
            products=(prod("paper_way", variant), prod("one_block", variant)))
    gain = lambda load: (e[load]["smem"][2] / e[load]["regs"][2]) if len(e.get(load, {})) == 2 else None
    row("Table 5: efficiency gain (x)", P["energy_gain"], gain("paper_way"), gain("one_block"), ".2f")
    for variant in VARIANTS:
        row(f"energy per launch (mJ), 8 full waves, {LABELS[variant]}", None, None,
            val("waves", variant), ".3g", "8-full-wave power x 8-full-wave warm median",
            products=("", prod("waves", variant)))
    row("efficiency gain, 8 full waves (x)", None, None, gain("waves"), ".2f")
    return rows


HEADER = ("claim", "paper (H100)", "ours, paper's way", "ours, sound way", "verdict")


def cells(r: dict, products: bool = False) -> tuple[str, ...]:
    """One row of the reproduce-or-refute table as text cells (``products``: energy cells show
    the power x time they multiply)."""
    fmt = r["fmt"]

    def f(x, i=None):
        if x is None:
            return "-"
        text = format(int(x), "d") if fmt == "d" else format(float(x), fmt)
        prod = (r.get("products") or ["", ""])[i] if products and i is not None else ""
        return f"{text} = {prod}" if prod else text
    v = []
    if r["paper"] is not None:
        if r["paper_way"] is not None:
            v.append(f"paper's way {r['verdict_paper_way']}")
        if r["sound"] is not None:
            v.append(f"sound {r['verdict_sound']}")
    return (r["claim"], f(r["paper"]), f(r["paper_way"], 0), f(r["sound"], 1),
            "; ".join(v) or ("measured" if r["sound"] is not None else "not measured"))


def format_table(rows: list[dict]) -> str:
    """The reproduce-or-refute table as text."""
    body = [cells(r) for r in rows]
    widths = [max(len(x[i]) for x in (HEADER, *body)) for i in range(len(HEADER))]
    line = lambda cs: "  ".join(c.ljust(w) for c, w in zip(cs, widths)).rstrip()
    return "\n".join([line(HEADER), line(["-" * w for w in widths]), *map(line, body)])


def findings(doc: dict) -> list[str]:
    """Sentences that follow from a record: each factor's effect on the paper's ratio, the warm
    ratios, the epilogue's cycles. Thresholds are stated in the sentences."""
    out = []
    pw = paper_way_summary(doc)
    if pw:
        f = pw["first_ms"]
        out.append(f"The paper's way ({pw['n']} fresh processes, baseline first): baseline "
                   f"{f['smem']['mean'] * 1e3:.1f} us, in-register {f['regs']['mean'] * 1e3:.1f} us "
                   f"(means), a ratio of {pw['speedup_of_means']:.2f}x (paper: 6.1x on an H100).")
        if "later_ms" in pw and set(VARIANTS) <= set(pw["later_ms"]):
            lm = pw["later_ms"]
            out.append(f"In the same processes, later launches timed the same way take "
                       f"{lm['smem']['median'] * 1e3:.1f} us and {lm['regs']['median'] * 1e3:.1f} us "
                       f"(medians): {pw['later_speedup_of_medians']:.2f}x.")
        for name, label in SETUP_LABELS.items():
            s = paper_way_summary(doc, name)
            if name == "paper" or not s:
                continue
            out.append(f"Changing one thing, {label}: baseline {s['first_ms']['smem']['mean'] * 1e3:.1f} us, "
                       f"in-register {s['first_ms']['regs']['mean'] * 1e3:.1f} us, "
                       f"{s['speedup_of_means']:.2f}x.")
    w1, wg = warm_summary(doc, "one block"), warm_summary(doc, "8 full waves")
    if w1:
        out.append(f"Warm, in process (both orders pooled): one block {w1['smem'] * 1e3:.2f} us "
                   f"vs {w1['regs'] * 1e3:.2f} us, {w1['ratio']:.3f}x (by order: " +
                   ", ".join(f"{k} first {v:.3f}x" for k, v in w1["ratio_by_order"].items()) + ").")
    if wg:
        out.append(f"Warm, 8 full waves of one-warp blocks: {wg['smem'] * 1e3:.2f} us vs "
                   f"{wg['regs'] * 1e3:.2f} us, {wg['ratio']:.3f}x.")
    cyc = cycle_medians(doc)
    if cyc:
        mhz = (doc.get("clocks_after") or {}).get("sm_mhz") or \
            (doc.get("device_before", {}).get("clocks", {}) or {}).get("sm_max_mhz")
        d = cyc["smem"] - cyc["regs"]
        ns = f" = {d / mhz * 1e3:.0f} ns at {mhz:.0f} MHz" if mhz else ""
        out.append(f"The epilogue alone: {cyc['smem']:.0f} cycles through shared memory, "
                   f"{cyc['regs']:.0f} in registers: {d:.0f} cycles saved per warp{ns}.")
        if w1 and mhz:
            ev = epilogue_vs_kernel(doc)
            out.append(f"The warm one-block medians differ by {ev['one_block_median_diff_ns']:.0f} ns "
                       f"and the means by {ev['one_block_mean_diff_ns']:.0f} ns; the events' clock "
                       f"moves in steps of {ev['timer_step_ns']:.0f} ns, so the events can "
                       f"neither confirm nor refute the epilogue's {ev['saving_ns']:.0f} ns.")
    if pw and w1:
        target = w1["ratio"]
        close = [SETUP_LABELS[n] for n in SETUP_LABELS if n != "paper" and paper_way_summary(doc, n)
                 and abs(math.log(paper_way_summary(doc, n)["speedup_of_means"] / target)) < math.log(1.25)]
        if close:
            out.append("Single changes that bring the fresh-process ratio within 25 % of the warm "
                       "ratio: " + "; ".join(close) + ".")
        else:
            out.append("No single change brings the fresh-process ratio within 25 % of the warm "
                       "ratio.")
    return out


def conclusion(doc: dict) -> list[str]:
    """The chapter's conclusion, as paragraphs that follow from a record by stated rules: a ratio
    "reproduces" the paper's when within 25 %; a single change "explains" the gap when it brings
    the fresh-process ratio within 25 % of the warm one."""
    pw, w1, wg = paper_way_summary(doc), warm_summary(doc, "one block"), warm_summary(doc, "8 full waves")
    if not (pw and w1):
        return ["The record lacks the fresh-process or the warm measurements: no conclusion."]
    near = lambda x, y: abs(math.log(x / y)) <= math.log(1.25)
    paper = PAPER["H100"]["speedup"]
    out = []
    s_pw, s_w = pw["speedup_of_means"], w1["ratio"]
    out.append(f"Measured the paper's way, the in-register kernel comes out {s_pw:.2f}x faster "
               f"than the baseline (the paper: {paper}x on an H100): "
               + ("the paper's figure is reproduced." if near(s_pw, paper) else
                  "the paper's figure is not reproduced.")
               + f" Measured warm in one process, one block, both orders: {s_w:.2f}x"
               + (f"; on a grid that fills the GPU eight times: {wg['ratio']:.2f}x." if wg else "."))
    effects = {n: paper_way_summary(doc, n)["speedup_of_means"] for n in SETUPS
               if n != "paper" and paper_way_summary(doc, n)}
    explain = [n for n, v in effects.items() if near(v, s_w)]
    if not near(s_pw, s_w):
        if explain:
            out.append("The two differ, and changing one factor alone closes the gap: "
                       + "; ".join(f"{SETUP_LABELS[n]} ({effects[n]:.2f}x)" for n in explain)
                       + ". What the paper's method times is therefore not the epilogue but "
                       "what those changes remove from the timed launch.")
        else:
            out.append("The two differ, and no single factor closes the gap: "
                       + "; ".join(f"{SETUP_LABELS[n]}: {v:.2f}x" for n, v in effects.items())
                       + ".")
            gap = first_launch_breakdown(doc).get("paper")
            if gap and gap["gap_total"] > 0:
                g, tot = gap["gap"], gap["gap_total"]
                out.append(f"Where the paper's gap goes: the baseline's first launch takes "
                           f"{tot:.0f} us longer than the in-register one's; {g['load']:.0f} us "
                           f"({g['load'] / tot:.0%}) of it is the host loading the module inside "
                           f"the timed window, {g['launch']:.0f} us ({g['launch'] / tot:.0%}) the "
                           f"first launch call, and {g['rest']:.1f} us ({g['rest'] / tot:.1%}) the "
                           "rest, the GPU's part (means over the same processes, so the parts add "
                           "up to the whole).")
        if "regs_first" in effects and effects["regs_first"] < 1:
            out.append(f"With the in-register kernel launched first, the ratio turns to "
                       f"{effects['regs_first']:.2f}x: the kernel launched first in a process "
                       "pays for something the second does not, whichever kernel it is.")
    else:
        out.append("The fresh-process and warm ratios agree: the launch method does not change "
                   "the comparison on this machine.")
    cyc = cycle_medians(doc)
    if cyc:
        d = cyc["smem"] - cyc["regs"]
        out.append(f"The epilogue itself is {'cheaper' if d > 0 else 'not cheaper'} in registers: "
                   f"{cyc['regs']:.0f} against {cyc['smem']:.0f} SM cycles per warp "
                   f"({cyc['smem'] / cyc['regs']:.1f}x fewer cycles), a real saving of "
                   f"{d:.0f} cycles, small next to a whole launch.")
    return out
