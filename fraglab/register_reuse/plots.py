"""The chapter's figures, drawn from the record (:func:`.report.load`) and the live SASS rows
(:func:`.report.live_sass`). Each is sized for the book's text column (7.85 in at 100 dpi, about
785 px) with fonts of 9 pt or more."""
from __future__ import annotations

import numpy as np

from . import kernels
from .report import GOAL_SHAPES, LABELS, SIZE, grid, ladder_at, record_table, stalls

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
        # the two groups named above the axes, where no line runs (inside, the label sat on
        # the cuBLAS line)
        ax.axvline(n_square - 0.5, color="0.6", lw=1)
        for x0, ha, text in ((n_square - 0.6, "right", "square: M = N = K"),
                             (n_square - 0.4, "left", "M x N x K")):
            ax.text(x0, 1.01, text, fontsize=9, color="0.3", ha=ha, va="bottom",
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


# --- wave quantization: rung 9 against rung 10 over sizes ----------------------------------------

def plot_waves(doc: dict, step: int = 256):
    """Wave quantization over square sizes, from the record: (a) rung 9's and rung 10's share of
    cuBLAS FP32 at each square shape of the record's shape table (the sweep's final round), with
    issue 29's goal; (b) the share of the GPU's block slots (SMs x blocks per SM) their grids keep
    busy, blocks / (whole waves x slots), at every multiple of ``step`` up to the largest size
    (:func:`.report.grid`: rung 9's fixed tiles; rung 10's tiles and K split from the table's
    nearest entry), the measured sizes marked. Sizes on a log axis."""
    plt = _plt()
    entries = sorted((e for e in record_table(doc)["entries"]
                      if len(set(e["shape"])) == 1 and e["shape"][0] % step == 0),
                     key=lambda e: e["shape"][0])
    sizes = [e["shape"][0] for e in entries]
    fig, (a, b) = plt.subplots(2, 1, figsize=(WIDTH, 6.6), sharex=True,
                               gridspec_kw={"height_ratios": [1, 1.1]})
    style = {"autotuned": dict(color="C8", marker="s", ls="--"),
             "split_k": dict(color="C9", marker="o", ls="-")}
    for k, key in (("autotuned", "autotuned_of_cublas"), ("split_k", "of_cublas")):
        y = [np.nan if e.get(key) is None else e[key] for e in entries]
        a.plot(sizes, y, ms=6, label=LABELS[k], **style[k])
    a.axhline(1.0, color="k", ls=":", lw=1, label="cuBLAS FP32 (TF32 off)")
    goal = [(s[0], v) for s, v in GOAL_SHAPES.items() if len(set(s)) == 1]
    a.scatter([g[0] for g in goal], [g[1] for g in goal], marker="_", s=500, color="C3", lw=2,
              zorder=3, label="goal (x cuBLAS)")
    a.set_ylim(0, 1.25)
    a.set_ylabel("x cuBLAS (measured)")
    a.set_title("(a) throughput against cuBLAS, square sizes of the shape table", loc="left")
    a.legend(loc="lower right")

    grid_sizes = list(range(step, max(sizes) + 1, step))
    for k in ("split_k", "autotuned"):
        fill = [100 * grid(doc, k, (s, s, s))["fill"] for s in grid_sizes]
        b.plot(grid_sizes, fill, color=style[k]["color"], ls=style[k]["ls"], lw=1.3,
               label=f"{LABELS[k]}, predicted")
        b.plot(sizes, [100 * grid(doc, k, (s, s, s))["fill"] for s in sizes], ls="none",
               color=style[k]["color"], marker=style[k]["marker"], ms=6)
    # the grids at the size nearest 1024, named below the curves (where none runs); the arrow
    # drawn apart from the text, so that the text's box is the text's alone
    small = min(sizes, key=lambda s: abs(s - 1024))
    for k, y in (("split_k", 27), ("autotuned", 9)):
        g = grid(doc, k, (small,) * 3)
        b.text(small * 1.45, y, f"{LABELS[k]} at {small}^3: {g['blocks']} blocks for "
               f"{g['slots']} slots", fontsize=9, va="center")
        b.annotate("", (small, 100 * g["fill"]), xytext=(small * 1.43, y),
                   arrowprops=dict(arrowstyle="->", color="0.3", lw=0.8))
    b.set_ylim(0, 105)
    b.set_ylabel("block slots busy (%)")
    b.set_title(f"(b) the grid against {doc['device']['sm_count']} SMs: blocks / "
                "(whole waves x slots)", loc="left")
    b.legend(loc="upper left")
    b.set_xscale("log", base=2)
    b.set_xticks(sizes, [str(s) for s in sizes])
    b.minorticks_off()
    b.set_xlabel("M = N = K")
    for ax in (a, b):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


# --- the top rung's tiles: block, warp, thread ---------------------------------------------------

def owners(t: dict) -> np.ndarray:
    """``(BM, BN)`` array: the thread (``threadIdx.x``) that computes each output of a block tile
    of a warp-tiled rung with tiles ``t`` (``BM, BN, WM, WN, LM``), by the rule of ``WarpTile``
    in ``kernels/07_register_reuse.cuh``: warp ``w`` owns the warp tile at row
    ``w / (BN/WN) * WM``, column ``w % (BN/WN) * WN``; in it, lane ``l`` owns the 4x4 chunks at
    rows ``i*4*LM + (l / LN)*4`` and columns ``j*4*LN + (l % LN)*4`` (``LN = 32/LM``).
    ``tests/test_07_register_reuse_tiles.py`` checks it against the stores of the kernel itself,
    run on the PTX interpreter."""
    bm, bn, wm, wn, lm = (t[k] for k in ("BM", "BN", "WM", "WN", "LM"))
    ln = 32 // lm
    out = np.full((bm, bn), -1, int)
    for warp in range((bm // wm) * (bn // wn)):
        wm0, wn0 = warp // (bn // wn) * wm, warp % (bn // wn) * wn
        for lane in range(32):
            rows = (wm0 + np.arange(0, wm, 4 * lm)[:, None] + lane // ln * 4 + np.arange(4)).ravel()
            cols = (wn0 + np.arange(0, wn, 4 * ln)[:, None] + lane % ln * 4 + np.arange(4)).ravel()
            out[np.ix_(rows, cols)] = warp * 32 + lane
    return out


def plot_tiles(t: dict | None = None, variant: str = kernels.FINAL, lane: int = 0):
    """The tiles of ``variant`` (default the top rung) with tiles ``t`` (default its
    :data:`.kernels.TILES`; checked by :func:`.kernels.tiles`): (a) the block's tile of C,
    ``BM x BN``, fed by the ``BM x BK`` slice of A and the ``BK x BN`` slice of B each step, cut
    into warp tiles ``WM x WN`` (numbered by warp); (b) warp 0's tile in 4x4 chunks, each marked
    with the lane that computes it (``lane``'s chunks framed); (c) ``lane``'s accumulators
    ``acc[m][n]``, and which chunk of the warp tile each group of 4x4 registers holds. Every size
    and owner is read from the tiles (:func:`owners`)."""
    from matplotlib.patches import Rectangle
    plt = _plt()
    t = kernels.tiles(variant, **(t or {}))
    if "WM" not in t:
        raise ValueError(f"{variant} has no warp tiles (tiles {t}); plot_tiles draws the "
                         "warp-tiled rungs")
    bm, bn, bk = kernels.block_tile(variant, t)
    wm, wn, lm = t["WM"], t["WN"], t["LM"]
    ln = 32 // lm
    own = owners(t)
    nthreads = kernels.threads(variant, t)
    warps = nthreads // 32
    fig = plt.figure(figsize=(WIDTH, 8.4))
    grid = fig.add_gridspec(2, 2, height_ratios=[1.0, 1.35], width_ratios=[1.45, 1.0])

    # (a) the block: A's slice on the left, B's on top, C's tile cut into warp tiles
    a = fig.add_subplot(grid[0, :])
    gap, kw = 0.04 * bn, bk                            # K drawn to scale
    a.add_patch(Rectangle((-gap - kw, 0), kw, bm, fc="C0", alpha=0.35, ec="k"))
    a.add_patch(Rectangle((0, -gap - kw), bn, kw, fc="C2", alpha=0.35, ec="k"))
    a.text(-gap - kw / 2, bm / 2, f"A: {bm} x {bk}", ha="center", va="center", fontsize=9,
           rotation=90)
    a.text(bn / 2, -gap - kw / 2, f"B: {bk} x {bn}", ha="center", va="center", fontsize=9)
    for w in range(warps):
        r0, c0 = np.argwhere(own // 32 == w).min(axis=0)
        a.add_patch(Rectangle((c0, r0), wn, wm, fc=f"C{w % 10}", alpha=0.25, ec="k", lw=1.2))
        a.text(c0 + wn / 2, r0 + wm / 2, f"warp {w}\nthreads\n{32 * w}-{32 * w + 31}",
               ha="center", va="center", fontsize=9)
    a.set_xlim(-gap - kw - 2, bn + 2)
    a.set_ylim(bm + 2, -gap - kw - 2)
    a.set_aspect("equal")
    a.set_xticks([0, wn, bn], ["0", str(wn), str(bn)])
    a.set_yticks([0, wm, bm], ["0", str(wm), str(bm)])
    a.set_title(f"(a) a block: {bm} x {bn} outputs of C, {warps} warps ({nthreads} threads), "
                f"a step of K = {bk}", loc="left")

    # (b) warp 0's tile: the lane of every 4x4 chunk
    b = fig.add_subplot(grid[1, 0])
    chunks = own[:wm:4, :wn:4] % 32                    # warp 0's tile, one entry per chunk
    b.imshow(chunks % ln, cmap="tab10", vmin=0, vmax=9, alpha=0.35, aspect="equal")
    for (i, j), l in np.ndenumerate(chunks):
        b.text(j, i, str(l), ha="center", va="center", fontsize=9,
               fontweight="bold" if l == lane else "normal")
        if l == lane:
            b.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, ec="k", lw=2))
    step = max(1, chunks.shape[1] // 4)
    b.set_xticks(range(0, chunks.shape[1], step), [str(4 * j) for j in range(0, chunks.shape[1], step)])
    b.set_yticks(range(0, chunks.shape[0], step), [str(4 * i) for i in range(0, chunks.shape[0], step)])
    b.set_xlabel("column in the warp tile")
    b.set_ylabel("row in the warp tile")
    b.set_title(f"(b) warp 0: {wm} x {wn}, a lane per 4x4 chunk", loc="left")

    # (c) the thread's accumulators, grouped by the chunk they hold
    c = fig.add_subplot(grid[1, 1])
    mine = np.argwhere(own == lane)                    # (row, col) of each output, row-major
    rows, cols = np.unique(mine[:, 0]), np.unique(mine[:, 1])
    lm_, ln_ = len(rows), len(cols)                    # LANE_M x LANE_N accumulators
    c.imshow(np.add.outer(np.arange(lm_) // 4, np.arange(ln_) // 4) % 2, cmap="Greys", vmin=0,
             vmax=4, aspect="equal")
    for i in range(0, lm_, 4):
        for j in range(0, ln_, 4):
            c.add_patch(Rectangle((j - 0.5, i - 0.5), 4, 4, fill=False, ec="k", lw=1.5))
            c.text(j + 1.5, i + 1.5, f"rows {rows[i]}-{rows[i] + 3}\ncols {cols[j]}-{cols[j] + 3}",
                   ha="center", va="center", fontsize=9)
    c.set_xticks([0, ln_ - 1], ["0", str(ln_ - 1)])
    c.set_yticks([0, lm_ - 1], ["0", str(lm_ - 1)])
    c.set_xlabel("n in acc[m][n]")
    c.set_ylabel("m in acc[m][n]")
    c.set_title(f"(c) lane {lane}: {lm_} x {ln_} outputs", loc="left")
    fig.tight_layout()
    return fig
