"""The chapter's figures, drawn from a record (:func:`.record.load`)."""
from __future__ import annotations

import numpy as np

from .explain import PART_LABELS, PARTS, first_launch_breakdown
from .kernels import LABELS, VARIANTS
from .record import paper_way_summary, warm_summary
from .report import PAPER
from .tables import SETUP_SHORT
from .setups import SETUPS


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
        groups.append(("fresh process,\nfirst launch",
                       {w: [r["first"][w] for r in pw["records"]] for w in VARIANTS}))
        groups.append(("fresh process,\nlater launches", {w: [x for r in pw["records"]
                                                              for x in r.get("later", {}).get(w, [])]
                                                          for w in VARIANTS}))
    for label in ("one block", "8 full waves"):
        runs = [w for w in doc.get("warm", []) if w["label"] == label and w["dtype"] == "bf16"]
        if runs:
            groups.append((f"warm, in process,\n{label}", {w: np.concatenate(
                [r["comparison"]["timings"][w]["times_ms"] for r in runs]) for w in VARIANTS}))
    for gi, (label, data) in enumerate(groups):
        for k, w in enumerate(VARIANTS):
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
    ax.legend(handles, [LABELS[w] for w in VARIANTS], fontsize=8, loc="upper right")
    ax.grid(alpha=0.3, axis="y")
    return ax


def plot_speedups(doc: dict, ax=None):
    """Baseline / in-register per method, on a log axis (ratios from 0.04x to 20x), with the
    paper's 6.1x and parity as lines."""
    plt = _plt()
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.8))
    labels, vals, colors = [], [], []
    for name in SETUPS:
        s = paper_way_summary(doc, name)
        if s:
            labels.append("fresh: " + SETUP_SHORT.get(name, name))
            vals.append(s["speedup_of_means"])
            colors.append("C3")
    pw = paper_way_summary(doc)
    if pw and "later_speedup_of_medians" in pw:
        labels.append("fresh: later launches")
        vals.append(pw["later_speedup_of_medians"])
        colors.append("C1")
    for label in ("one block", "one block, L2 flushed", "paper's profiling grid", "one full wave",
                  "8 full waves"):
        w = warm_summary(doc, label)
        if w:
            labels.append("warm: " + label)
            vals.append(w["ratio"])
            colors.append("C0")
    y = np.arange(len(vals))[::-1]
    ax.barh(y, vals, color=colors, left=0)
    ax.set_xscale("log")
    for yi, v in zip(y, vals):
        ax.text(v * 1.08, yi, f"{v:.2f}x", va="center", fontsize=8)
    ax.axvline(PAPER["H100"]["speedup"], color="k", ls="--", lw=1, label="paper, H100: 6.1x")
    ax.axvline(1.0, color="gray", lw=1, label="1x: equal times")
    ax.set_yticks(y, labels, fontsize=8)
    lo, hi = min(vals + [1.0]), max(vals + [PAPER["H100"]["speedup"]])
    ax.set_xlim(lo / 1.6, hi * 2.2)
    ax.set_xlabel("baseline time / in-register time (log scale)")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3, axis="x", which="both")
    return ax


def plot_loading(doc: dict, axes=None):
    """The mean first launch of each kernel in each fresh-process variant, split into the
    host's time to find and load the kernel, the launch call, and the rest: the whole range
    (top) and the same bars up to 80 us (bottom)."""
    plt = _plt()
    br = first_launch_breakdown(doc)
    if axes is None:
        _, axes = plt.subplots(2, 1, figsize=(8, 6.4), sharey=True)
    labels = [f"{SETUP_SHORT.get(n, n)}: {LABELS[w].split(' (')[0]}" for n in br for w in VARIANTS]
    y = np.arange(len(labels))[::-1]
    for ax, xmax in zip(axes, (None, 80.0)):
        left = np.zeros(len(labels))
        for k, part in enumerate(PARTS):
            x = np.array([max(br[n][w][part], 0.0) for n in br for w in VARIANTS])
            ax.barh(y, x, left=left, color=("C3", "C1", "C0")[k], label=PART_LABELS[part])
            left += x
        tot = [br[n][w]["total"] for n in br for w in VARIANTS]
        for yi, t in zip(y, tot):
            if xmax is None or t <= xmax:
                ax.text(t + (xmax or max(tot)) * 0.01, yi, f"{t:.0f} us", va="center", fontsize=8)
            else:                                       # cut at the panel's edge: say so
                ax.text(xmax * 0.985, yi, f"{t:.0f} us, cut", va="center", ha="right",
                        fontsize=8, color="white")
        if xmax:
            ax.set_xlim(0, xmax)
            ax.set_title(f"the same, up to {xmax:.0f} us", fontsize=9)
        else:
            ax.set_xlim(0, max(tot) * 1.12)
            ax.set_title("mean first launch per fresh process, whole range", fontsize=9)
        ax.set_yticks(y, labels, fontsize=8)
        ax.grid(alpha=0.3, axis="x")
    axes[-1].set_xlabel("time inside the first timed window (us)")
    axes[0].legend(fontsize=8, loc="lower right")
    return axes


def plot_cycles(doc: dict, axes=None):
    """Histograms of the epilogue's SM cycles per warp, one panel per grid."""
    plt = _plt()
    labels = [k for k in ("one block", "8 full waves") if k in doc.get("cycles", {})]
    if axes is None:
        _, axes = plt.subplots(1, max(1, len(labels)), figsize=(8, 3), squeeze=False)
        axes = axes[0]
    for ax, label in zip(axes, labels):
        c = doc["cycles"][label]
        allc = np.concatenate([np.asarray(c[w]["cycles"], dtype=float) for w in VARIANTS])
        hi = np.percentile(allc, 99.5)
        bins = np.linspace(0, hi * 1.05, 60)
        for k, w in enumerate(VARIANTS):
            x = np.asarray(c[w]["cycles"], dtype=float)
            ax.hist(np.clip(x, 0, hi * 1.05), bins=bins, alpha=0.6, color=f"C{k}",
                    label=f"{LABELS[w]}: median {np.median(x):.0f}")
        n = c["tiles"]
        ax.set_title(f"{label} ({n} warp{'s' if n > 1 else ''} per launch)", fontsize=9)
        ax.set_xlabel("SM cycles in the epilogue")
        ax.legend(fontsize=7)
    return axes


def plot_power(doc: dict, ax=None):
    """Power samples over time, segments placed end to end (the sustained loops, then the
    relaunch loops), with the idle reading drawn as a line across all of them."""
    plt = _plt()
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.6))
    t_off, k = 0.0, 0
    for src, prefix in ((doc.get("power_sustained", {}), "sustained: "),
                        (doc.get("power_relaunch", {}), "relaunch loop: ")):
        for name, r in src.items():
            if not isinstance(r, dict) or not r.get("power_w"):
                continue
            t = np.asarray(r["t_s"]) + t_off
            label = prefix + name.replace("smem", "baseline").replace("regs", "in-register")
            ax.plot(t, r["power_w"], lw=1.2, color=f"C{k}", label=label)
            ax.axvspan(t[0], t[-1], color=f"C{k}", alpha=0.07, lw=0)
            t_off, k = t[-1] + 0.5, k + 1
    idle = doc.get("power_sustained", {}).get("idle")
    if isinstance(idle, dict) and (idle.get("mean_w_energy") or idle.get("mean_w_samples")):
        w = idle.get("mean_w_energy") or idle.get("mean_w_samples")
        ax.axhline(w, color="k", ls="--", lw=1, label=f"idle, context open: {w:.1f} W")
    ax.set_xlabel("time (s, segments placed end to end)")
    ax.set_ylabel("power (W)")
    ax.legend(fontsize=8, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.22), frameon=False)
    ax.grid(alpha=0.3)
    return ax
