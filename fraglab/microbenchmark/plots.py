"""The chapter's figures, drawn from a record (:func:`.record.load`)."""
from __future__ import annotations

import numpy as np

from .kernels import LABELS, WAYS
from .record import paper_way_summary, warm_summary
from .report import PAPER
from .variants import VARIANTS


def _plt():
    import matplotlib.pyplot as plt
    return plt


def plot_time_distributions(doc: dict, ax=None):
    """Times of both kernels, per method (log scale): first launch in a fresh process, later
    launches timed the same way, and warm in-process (one block; 8 full waves)."""
    plt = _plt()
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.8))
    groups = []
    pw = doc.get("paper_way", {}).get("variants", {}).get("paper")
    if pw and pw["records"]:
        groups.append(("fresh process,\nfirst launch", {w: [r["first"][w] for r in pw["records"]] for w in WAYS}))
        groups.append(("fresh process,\nlater launches", {w: [x for r in pw["records"]
                                                              for x in r.get("later", {}).get(w, [])]
                                                          for w in WAYS}))
    for label in ("one block", "8 full waves"):
        runs = [w for w in doc.get("warm", []) if w["label"] == label and w["dtype"] == "bf16"]
        if runs:
            groups.append((f"warm, in process,\n{label}", {w: np.concatenate(
                [r["comparison"]["timings"][w]["times_ms"] for r in runs]) for w in WAYS}))
    for gi, (label, data) in enumerate(groups):
        for k, w in enumerate(WAYS):
            x = np.asarray(data[w], dtype=np.float64) * 1e3
            if x.size == 0:
                continue
            pos = 3 * gi + k
            ax.boxplot([x], positions=[pos], widths=0.7, showfliers=False,
                       patch_artist=True, boxprops={"facecolor": f"C{k}", "alpha": 0.5},
                       medianprops={"color": "k"})
            jitter = np.random.default_rng(0).uniform(-0.25, 0.25, min(x.size, 400))
            ax.scatter(pos + jitter, np.random.default_rng(1).choice(x, jitter.size, replace=False),
                       s=3, color=f"C{k}", alpha=0.4)
    ax.set_xticks([3 * g + 0.5 for g in range(len(groups))], [g[0] for g in groups], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("time per launch (us)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=f"C{k}", alpha=0.5) for k in range(2)]
    ax.legend(handles, [LABELS[w] for w in WAYS], fontsize=8, loc="upper right")
    ax.grid(alpha=0.3, axis="y")
    return ax


def plot_speedups(doc: dict, ax=None):
    """Baseline / in-register per method, with the paper's 6.1x as a line."""
    plt = _plt()
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.6))
    labels, vals, colors = [], [], []
    for name in VARIANTS:
        s = paper_way_summary(doc, name)
        if s:
            labels.append("fresh: " + name.replace("_", " "))
            vals.append(s["speedup_of_means"])
            colors.append("C3")
    pw = paper_way_summary(doc)
    if pw and "later_speedup_of_medians" in pw:
        labels.append("fresh: later\nlaunches")
        vals.append(pw["later_speedup_of_medians"])
        colors.append("C1")
    for label in ("one block", "one block, L2 flushed", "paper's profiling grid", "one full wave",
                  "8 full waves"):
        w = warm_summary(doc, label)
        if w:
            labels.append("warm: " + label)
            vals.append(w["ratio"])
            colors.append("C0")
    ax.bar(range(len(vals)), vals, color=colors)
    for i, v in enumerate(vals):
        ax.text(i, v, f"{v:.2f}", ha="center", va="bottom", fontsize=7)
    ax.axhline(PAPER["H100"]["speedup"], color="k", ls="--", lw=1, label="paper, H100: 6.1x")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xticks(range(len(vals)), labels, rotation=40, ha="right", fontsize=7)
    ax.set_ylabel("baseline time / in-register time")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    return ax


def plot_cycles(doc: dict, axes=None):
    """Histograms of the epilogue's SM cycles per warp, one panel per grid."""
    plt = _plt()
    labels = [k for k in ("one block", "8 full waves") if k in doc.get("cycles", {})]
    if axes is None:
        _, axes = plt.subplots(1, max(1, len(labels)), figsize=(8, 3), squeeze=False)
        axes = axes[0]
    for ax, label in zip(axes, labels):
        c = doc["cycles"][label]
        allc = np.concatenate([np.asarray(c[w]["cycles"], dtype=float) for w in WAYS])
        hi = np.percentile(allc, 99.5)
        bins = np.linspace(0, hi * 1.05, 60)
        for k, w in enumerate(WAYS):
            x = np.asarray(c[w]["cycles"], dtype=float)
            ax.hist(np.clip(x, 0, hi * 1.05), bins=bins, alpha=0.6, color=f"C{k}",
                    label=f"{LABELS[w]}: median {np.median(x):.0f}")
        n = c["tiles"]
        ax.set_title(f"{label} ({n} warp{'s' if n > 1 else ''} per launch)", fontsize=9)
        ax.set_xlabel("SM cycles in the epilogue")
        ax.legend(fontsize=7)
    return axes


def plot_power(doc: dict, ax=None):
    """Power samples over time: idle, the sustained loops, the relaunch loops."""
    plt = _plt()
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.2))
    t_off = 0.0
    for src, prefix in ((doc.get("power_sustained", {}), "sustained: "),
                        (doc.get("power_relaunch", {}), "relaunch loop: ")):
        for name, r in src.items():
            if not isinstance(r, dict) or not r.get("power_w"):
                continue
            t = np.asarray(r["t_s"]) + t_off
            ax.plot(t, r["power_w"], lw=0.8, label=prefix + name)
            t_off = t[-1] + 0.5
    ax.set_xlabel("time (s, segments placed end to end)")
    ax.set_ylabel("power (W)")
    ax.legend(fontsize=6, ncol=2)
    ax.grid(alpha=0.3)
    return ax
