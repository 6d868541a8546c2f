"""The chapter's figures: the SASS timeline of the consumer path (no GPU needed), the 128-byte
swizzle, and TFLOP/s over the sweep from the record. Sized for the book's column (7.85 in at
100 dpi) with fonts of 9 pt or more."""
from __future__ import annotations

import numpy as np

from . import kernels, sass_evidence
from .report import BASELINE_LABELS, _res, best_variant, tflops_of

WIDTH = 7.85
LANES = ("hgmma", "wait", "exp2", "max", "mul", "fma")
LANE_LABELS = {"hgmma": "HGMMA", "wait": "wgmma wait", "exp2": "MUFU.EX2", "max": "FMNMX",
               "mul": "FMUL", "fma": "FFMA"}


def _plt():
    import matplotlib.pyplot as plt
    plt.rcParams.update({"font.size": 10, "axes.titlesize": 10, "legend.fontsize": 9,
                         "xtick.labelsize": 9, "ytick.labelsize": 9})
    return plt


def plot_timelines(variants=("nooverlap", "twostage"), dtype: str = "f16", d: int = 128):
    """One panel per variant: every HGMMA, wgmma wait and softmax instruction of the consumer
    path at its position in the SASS; softmax instructions that run while a wgmma of the
    warpgroup is in flight are drawn in orange, the others in grey."""
    plt = _plt()
    fig, axes = plt.subplots(len(variants), 1, figsize=(WIDTH, 1.9 * len(variants) + 0.6),
                             sharex=False)
    axes = np.atleast_1d(axes)
    for ax, v in zip(axes, variants):
        tl = sass_evidence.timeline(v, dtype, d)
        for y, lane in enumerate(LANES):
            rows = [r for r in tl if r["kind"] == lane]
            if lane in ("hgmma", "wait"):
                ax.scatter([r["i"] for r in rows], [y] * len(rows), marker="|", s=120,
                           color="C0" if lane == "hgmma" else "k")
                continue
            for beside, color in ((True, "C1"), (False, "0.6")):
                xs = [r["i"] for r in rows if (r["in_flight"] > 0) == beside]
                ax.scatter(xs, [y] * len(xs), marker="|", s=80, color=color)
        ov = sass_evidence.overlap(tl)
        ax.set_yticks(range(len(LANES)), [LANE_LABELS[k] for k in LANES])
        ax.invert_yaxis()
        ax.set_title(f"{v}: {ov['exp2_beside_wgmma']} of {ov['exp2']} MUFU.EX2 beside a wgmma "
                     f"in flight (orange)")
        ax.set_xlabel("instruction position in the consumer path (SASS)")
    fig.tight_layout()
    return fig


def plot_swizzle(rows: int = 8):
    """Which 16-byte chunk of a 128-byte row sits where: logical chunk c of row r at physical
    chunk c ^ (r % 8), so the 8 rows of one chunk column land in 8 different bank groups."""
    plt = _plt()
    grid = np.array([[(c ^ (r % 8)) for c in range(8)] for r in range(rows)])
    fig, ax = plt.subplots(figsize=(WIDTH, 3.4))
    ax.imshow(grid, cmap="tab10", aspect="auto")
    for r in range(rows):
        for c in range(8):
            ax.text(c, r, f"{c}->{grid[r, c]}", ha="center", va="center", fontsize=9)
    ax.set_xticks(range(8), [f"chunk {c}" for c in range(8)])
    ax.set_yticks(range(rows), [f"row {r}" for r in range(rows)])
    ax.set_title("logical 16-byte chunk -> physical chunk, 128-byte swizzle")
    fig.tight_layout()
    return fig


def plot_sweep(doc: dict):
    """TFLOP/s over N of the best variant and the baselines: d 64 / 128 x causal or not."""
    plt = _plt()
    rows = _res(doc).get("sweep") or []
    best = f"fa3_{best_variant(doc)}"
    fig, axes = plt.subplots(2, 2, figsize=(WIDTH, 5.6), sharex=True)
    names = {best: f"{best_variant(doc)} (ours)", **BASELINE_LABELS}
    for ax, (d, causal) in zip(axes.flat, [(d, c) for d in kernels.HEAD_DIMS for c in (False, True)]):
        sel = sorted((r for r in rows if r["d"] == d and r["causal"] == causal), key=lambda r: r["N"])
        for k, label in names.items():
            pts = [(r["N"], tflops_of(r)[k]) for r in sel if k in tflops_of(r)]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=label, lw=2 if k == best else 1)
        ax.set_xscale("log", base=2)
        ax.set_title(f"d = {d}, {'causal' if causal else 'non-causal'}")
        ax.set_ylabel("TFLOP/s")
        ax.set_xlabel("N")
    axes.flat[0].legend(loc="lower right")
    fig.tight_layout()
    return fig
