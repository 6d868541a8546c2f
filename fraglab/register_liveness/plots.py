"""Chapter 08's figures: live registers across the kernel, before and after the Q change
(:func:`plot_liveness`, from the compiler alone), and the H100 throughput of the variants next
to SDPA flash (:func:`plot_throughput`, from the record), and the d = 256 rounds beside SDPA flash
and cuDNN (:func:`plot_d256_rounds`). Sized for the book's column (7.85 in
at 100 dpi) with text of 9 px or more there (``report.smallest_text_px``)."""
from __future__ import annotations

import numpy as np

from . import kernels, rounds
from .report import throughput_at

WIDTH = 7.85
LIMIT = 255          # registers a thread may have
COLORS = {"qreg": "C3", "qreload": "C0"}
LABELS = {"qreg": "Q in registers (qreg)", "qreload": "Q reloaded from shared memory (qreload)"}


def _plt():
    import matplotlib.pyplot as plt
    plt.rcParams.update({"font.size": 10, "axes.titlesize": 10, "legend.fontsize": 9,
                         "xtick.labelsize": 9, "ytick.labelsize": 9})
    return plt


def plot_liveness(prof: dict, d: int = 256):
    """Two panels over the program (x: position in the listing, 0 = first instruction):
    (a) PTX, the demand before allocation (virtual registers); (b) SASS, what ptxas allocated,
    with the 255-register limit. ``prof``: :func:`.report.profiles`."""
    plt = _plt()
    fig, axes = plt.subplots(2, 1, figsize=(WIDTH, 5.6), sharex=True)
    for ax, key, title in ((axes[0], "ptx", f"(a) PTX, before register allocation (d = {d})"),
                           (axes[1], "sass", f"(b) SASS, after allocation by ptxas (d = {d})")):
        for mode, p in prof.items():
            y = np.asarray(p[key])
            x = np.linspace(0, 1, len(y))
            ax.plot(x, y, color=COLORS[mode], lw=1.2,
                    label=f"{LABELS[mode]}: peak {y.max()}"
                          + (f", ptxas {p['registers']} regs" if key == "sass" else ""))
        # the limit named in the legend: a label on the dotted line had the curves through it
        ax.axhline(LIMIT, color="k", ls=":", lw=1, label=f"{LIMIT}: the most a thread may have")
        ax.set_ylabel("live 32-bit registers")
        ax.set_title(title, loc="left")
        # room above the curves for the legend (inside, among the curves, it hid them)
        ax.set_ylim(0, max(LIMIT, *(max(p[key]) for p in prof.values())) * 1.55)
        ax.legend(loc="upper center", ncol=1, frameon=False)
    axes[1].set_xlabel("position in the kernel's instruction listing (0 = start, 1 = end)")
    fig.tight_layout()
    return fig


def plot_throughput(doc: dict):
    """TFLOP/s of each variant at d = 64, 128, 256 (non-causal, N = 4096, B*H = 32, f16), with
    SDPA flash, as grouped bars."""
    plt = _plt()
    names = ["qreg", "qreload", "qglobal", "sdpa_flash"]
    fig, ax = plt.subplots(figsize=(WIDTH, 3.6))
    x = np.arange(len(kernels.HEAD_DIMS))
    w = 0.8 / len(names)
    for i, name in enumerate(names):
        vals = [throughput_at(doc, d).get(name, {}).get("tflops", np.nan) for d in kernels.HEAD_DIMS]
        bars = ax.bar(x + (i - (len(names) - 1) / 2) * w, vals, w, label=name,
                      color=COLORS.get(name, "C2" if name == "qglobal" else "0.5"))
        for b, v in zip(bars, vals):
            if np.isfinite(v):
                ax.annotate(f"{v:.0f}", (b.get_x() + b.get_width() / 2, v), ha="center",
                            va="bottom", fontsize=9)
    ax.set_xticks(x, [f"d = {d}" for d in kernels.HEAD_DIMS])
    ax.set_ylabel("TFLOP/s")
    ax.legend(ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.12), frameon=False)
    top = max([b.get_height() for b in ax.patches if np.isfinite(b.get_height())] or [1])
    ax.set_ylim(0, top * 1.15)
    fig.tight_layout()
    return fig


def plot_d256_rounds(doc: dict):
    """The d = 256 rounds (step ``d256``), round by round: (a) each course kernel's speed over
    SDPA flash's, solid with cuDNN in the rounds, dashed without; (b) the SM clock (median of
    NVML's samples over the condition); (c) the mean power. From the record alone."""
    plt = _plt()
    res = (doc.get("results") or {}).get("d256") or {}
    recs = res.get("rounds") or []
    fig, axes = plt.subplots(3, 1, figsize=(WIDTH, 6.6), sharex=True,
                             gridspec_kw={"height_ratios": [1.6, 1, 1]})
    if not recs:
        axes[0].set_title("no d = 256 rounds in the record yet", loc="left")
        fig.tight_layout()
        return fig
    style = {"with_cudnn": dict(ls="-", marker="o"),
             "without_cudnn": dict(ls="--", marker="o", mfc="white")}
    words = {"with_cudnn": "with cuDNN in the rounds", "without_cudnn": "without cuDNN"}
    colors = dict(zip(rounds.KERNELS, ("C3", "C0", "C2")))

    def series(cond, get):
        pts = [(r["round"], get(r)) for r in recs if r["condition"] == cond]
        pts = [(x, y) for x, y in pts if y is not None]
        return [x for x, _ in pts], [y for _, y in pts]
    for cond in rounds.CONDITIONS:        # the legend's columns: with cuDNN, then without
        for name in rounds.KERNELS:
            x, y = series(cond, lambda r: r["ratios"].get(rounds.ratio_key(name, rounds.FLASH)))
            if x:
                axes[0].plot(x, y, color=colors[name], lw=1.3, ms=5, **style[cond],
                             label=f"{name}, {words[cond]}")
    axes[0].set_ylabel("speed / SDPA flash")
    axes[0].set_title("(a) the course's kernels against SDPA flash", loc="left")
    lo, hi = axes[0].get_ylim()
    axes[0].set_ylim(lo, hi + (hi - lo) * 1.1)       # room above the lines for the legend
    axes[0].legend(loc="upper center", ncol=2, frameon=False, fontsize=9)
    for ax, title, unit, get in (
            (axes[1], "(b) SM clock, median over the condition", "MHz",
             lambda r: ((r.get("monitor") or {}).get("sm_mhz") or {}).get("median")),
            (axes[2], "(c) mean power over the condition", "W",
             lambda r: (r.get("monitor") or {}).get("power_w"))):
        for cond in rounds.CONDITIONS:
            x, y = series(cond, get)
            if x:
                ax.plot(x, y, color="0.25", lw=1.3, ms=5, **style[cond], label=words[cond])
        ax.set_ylabel(unit)
        ax.set_title(title, loc="left")
        if ax.get_lines():
            lo, hi = ax.get_ylim()
            ax.set_ylim(lo, hi + (hi - lo) * 0.8)
            ax.legend(loc="upper center", ncol=2, frameon=False)
    n = max(r["round"] for r in recs)
    axes[2].set_xticks(range(1, n + 1))
    axes[2].set_xlabel("round (each: the comparison timed once with cuDNN, once without)")
    fig.tight_layout()
    return fig
