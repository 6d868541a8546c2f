"""The chapter's figures, drawn from the record (:func:`.report.load`) and the live SASS rows
(:func:`.report.live_sass`). Each is sized for the book's text column (7.85 in at 100 dpi, about
785 px) with fonts of 9 pt or more."""
from __future__ import annotations

import numpy as np

from . import kernels
from .report import LABELS, SIZE, ladder_at, stalls

WIDTH = 7.85


def _plt():
    import matplotlib.pyplot as plt
    plt.rcParams.update({"font.size": 10, "axes.titlesize": 10, "legend.fontsize": 9,
                         "xtick.labelsize": 9, "ytick.labelsize": 9})
    return plt


def plot_ladder(doc: dict, sass_rows: list[dict], size: int = SIZE):
    """Three panels over the rungs: share of cuBLAS at ``size``^3 (ours, and the seed's A6000
    figures as markers), shared words per FFMA from SASS beside the napkin (log axis),
    registers and theoretical occupancy."""
    plt = _plt()
    names = [r["kernel"] for r in sass_rows]
    x = np.arange(len(names))
    rows = (ladder_at(doc, size) or {"rows": {}})["rows"]
    seed = doc["results"].get("seed_figures", {}).get("of_cublas", {})
    fig, (a, b, c) = plt.subplots(3, 1, figsize=(WIDTH, 7.6), sharex=True)

    share = [100 * rows[k]["of_cublas"] if k in rows else np.nan for k in names]
    a.bar(x, share, color="C0", label=f"ours, H100, {size}^3")
    sx = [i for i, k in enumerate(names) if k in seed]
    a.scatter(sx, [100 * seed[names[i]] for i in sx], marker="D", color="C3", zorder=3,
              label="seed's figures (A6000)")
    for i, v in enumerate(share):
        if np.isfinite(v):
            a.annotate(f"{v:.0f}%", (i, v), ha="center", va="bottom", fontsize=9)
    a.axhline(90, color="k", ls=":", lw=1)
    a.text(-0.4, 91, "goal: 90%", fontsize=9, va="bottom")
    a.set_ylim(0, 115)
    a.set_ylabel("% of cuBLAS FP32")
    a.legend(loc="center left", bbox_to_anchor=(0.0, 0.55))
    a.set_title("(a) throughput, as a share of cuBLAS (TF32 off)")

    words = [r["words_per_ffma"] or np.nan for r in sass_rows]
    nap = [r["napkin_words_per_ffma"] or np.nan for r in sass_rows]
    b.bar(x, words, color="C2", label="SASS: LDS words / FFMA in the main loop")
    b.scatter(x, nap, marker="_", s=400, color="k", zorder=3, label="napkin")
    for i, r in enumerate(sass_rows):
        if not r["napkin_words_per_ffma"]:
            b.text(i, 0.08, "global\nonly", ha="center", fontsize=9)
    b.set_yscale("log")
    b.set_ylim(0.05, 4)
    b.set_ylabel("shared words per FFMA")
    b.legend(loc="upper right")
    b.set_title("(b) shared-memory words each FFMA costs (log axis)")

    regs = [r["registers"] for r in sass_rows]
    c.bar(x, regs, color="C1", label="registers per thread (ptxas)")
    c.set_ylabel("registers")
    c.set_ylim(0, 280)
    c2 = c.twinx()
    c2.plot(x, [100 * r["occupancy"] for r in sass_rows], "ko-", label="theoretical occupancy")
    c2.set_ylabel("occupancy (%)")
    c2.set_ylim(0, 110)
    h1, l1 = c.get_legend_handles_labels()
    h2, l2 = c2.get_legend_handles_labels()
    c.legend(h1 + h2, l1 + l2, loc="center left", bbox_to_anchor=(0.0, 0.55))
    c.set_title("(c) registers and theoretical occupancy on sm_90")
    c.set_xticks(x, [LABELS[k].replace(" ", "\n", 1).replace("_", "\n") for k in names])
    for ax in (a, b, c):
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return fig


def plot_sizes(doc: dict):
    """TFLOP/s of every rung and cuBLAS at every recorded shape (log axis: the rungs span two
    decades)."""
    plt = _plt()
    ladder = doc["results"].get("ladder") or []
    x = np.arange(len(ladder))
    fig, ax = plt.subplots(figsize=(WIDTH, 4.6))
    for i, k in enumerate(("cublas",) + kernels.VARIANTS):
        y = [e["rows"][k]["tflops"] if k in e["rows"] else np.nan for e in ladder]
        style = dict(color="k", ls="--", lw=2) if k == "cublas" else dict(color=f"C{i - 1}")
        ax.plot(x, y, marker="o", ms=4, label="cuBLAS" if k == "cublas" else LABELS[k], **style)
    n_square = sum(1 for e in ladder if len(set(e["shape"])) == 1)
    if 0 < n_square < len(ladder):
        ax.axvline(n_square - 0.5, color="0.6", lw=1)
        ax.text(n_square - 0.4, 0.97, "M x N x K", fontsize=9, color="0.3", va="top",
                transform=ax.get_xaxis_transform())
    ax.set_yscale("log")
    ax.set_xticks(x, [f"{e['shape'][0]}^3" if len(set(e["shape"])) == 1 else
                      "{}x{}\nx{}".format(*e["shape"]) for e in ladder])
    ax.set_ylabel("TFLOP/s (log axis)")
    ax.grid(alpha=0.3, which="both", axis="y")
    ax.legend(ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False)
    fig.tight_layout()
    return fig


def plot_stalls(doc: dict, min_value: float = 0.05):
    """Nsight Compute's warp-stall breakdown of the profiled rungs: cycles a warp spends in each
    state per instruction it issues (reasons below ``min_value`` everywhere are left out)."""
    plt = _plt()
    st = stalls(doc)
    rungs = list(st)
    reasons = sorted({r for s in st.values() for r, v in s.items() if v >= min_value},
                     key=lambda r: -max(s.get(r, 0) for s in st.values()))
    fig, ax = plt.subplots(figsize=(WIDTH, 0.45 * len(reasons) + 1.2))
    y = np.arange(len(reasons))
    h = 0.8 / max(1, len(rungs))
    for j, k in enumerate(rungs):
        ax.barh(y + (j - (len(rungs) - 1) / 2) * h, [st[k].get(r, 0) for r in reasons], h,
                label=LABELS[k], color=f"C{kernels.VARIANTS.index(k)}")
    ax.set_yticks(y, [r.replace("_", " ") for r in reasons])
    ax.invert_yaxis()
    ax.set_xlabel("cycles in this state per issued instruction (ncu, per warp)")
    ax.grid(alpha=0.3, axis="x")
    if rungs:
        ax.legend(loc="lower right")
    else:
        ax.text(0.5, 0.5, "no stall breakdown in the record: " +
                str((doc["results"].get("stalls") or {}).get("skipped", "Nsight Compute did not run")),
                ha="center", va="center", transform=ax.transAxes, wrap=True)
    fig.tight_layout()
    return fig
