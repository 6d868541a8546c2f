"""The chapter's figures: the main loop's instruction classes per variant (from SASS, any
machine) and the final variant beside SDPA over N (from the record). Sized for the book's column
(7.85 in at 100 dpi) with fonts of 9 pt or more."""
from __future__ import annotations

import numpy as np

from .classes import ORDER
from .kernels import FINAL
from .report import sweep_rows

WIDTH = 7.85
#: Classes drawn on their own; the rest are summed as "rest".
SHOWN = ("tensor", "shared", "global", "integer", "move", "float", "conversion")


def _plt():
    import matplotlib.pyplot as plt
    plt.rcParams.update({"font.size": 10, "axes.titlesize": 10, "legend.fontsize": 9,
                         "xtick.labelsize": 9, "ytick.labelsize": 9})
    return plt


def plot_classes(rows: list[dict]):
    """Stacked bars, one per variant: main-loop instructions per HMMA by class (so variants with
    128 and 256 HMMAs a loop compare), and the HMMA share above each bar."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(WIDTH, 3.8))
    x = np.arange(len(rows))
    bottom = np.zeros(len(rows))
    for i, cls in enumerate((*SHOWN, "rest")):
        if cls == "rest":
            vals = [sum(r["loop"][k] for k in ORDER if k not in SHOWN) for r in rows]
        else:
            vals = [r["loop"][cls] for r in rows]
        per = np.array(vals, float) / np.array([max(1, r["loop"]["tensor"]) for r in rows])
        ax.bar(x, per, bottom=bottom, color=f"C{i}", label=cls)
        bottom += per
    for i, r in enumerate(rows):
        ax.text(i, bottom[i] + 0.05, f"{r['hmma_share']:.0%}", ha="center", va="bottom", fontsize=9)
    ax.set_xticks(x, [r["step"] for r in rows], rotation=20, ha="right")
    ax.set_ylabel("instructions per HMMA")
    ax.set_ylim(0, bottom.max() * 1.15)
    ax.set_title("main loop, per HMMA, by class (label: HMMA share of the loop)")
    # beside the axes, not in them: inside, it covered the share labels of the tallest bars
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], labels[::-1], loc="center left", bbox_to_anchor=(1.01, 0.5),
              title="class", frameon=False)
    fig.tight_layout()
    return fig


def plot_sweep(doc: dict, variant: str = FINAL):
    """TFLOP/s over N for ``variant``, SDPA flash and cuDNN: one panel per head dimension, solid
    lines non-causal, dashed causal (log axis in N)."""
    plt = _plt()
    rows = sweep_rows(doc)
    fig, axes = plt.subplots(1, 2, figsize=(WIDTH, 3.4), sharey=True)
    for ax, d in zip(axes, (64, 128)):
        for causal, ls in ((False, "-"), (True, "--")):
            sub = [r for r in rows if r["d"] == d and r["causal"] == causal]
            ns = [r["N"] for r in sub]
            for name, color in ((variant, "C0"), ("sdpa_flash", "C1"), ("cudnn", "C2")):
                ys = [r["tflops"].get(name, np.nan) for r in sub]
                if ns and np.isfinite(ys).any():
                    ax.plot(ns, ys, ls, color=color, marker="o", ms=3,
                            label=f"{name}{' causal' if causal else ''}")
        ax.set_xscale("log", base=2)
        ax.set_title(f"d = {d}")
        ax.set_xlabel("N (keys = queries)")
    if not rows:
        for ax in axes:
            ax.text(0.5, 0.5, "not recorded yet", ha="center", va="center", transform=ax.transAxes)
    axes[0].set_ylabel("TFLOP/s (f16, B*H = 32)")
    handles, labels = axes[1].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, ncol=3, loc="lower center", fontsize=9)
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    return fig
