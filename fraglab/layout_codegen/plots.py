"""The chapter's figure of a plan's lane bits (:func:`plot_lane_bits`): which bits of the row and
the column of a fragment element each bit of the lane id and of the register index flips, read
off the plan's own layout table (:func:`bit_map`), beside the register groups and butterfly
offsets the plan derived from it. Sized for the book's text column (7.85 in at 100 dpi)."""
from __future__ import annotations

import numpy as np

from .plan import Plan

WIDTH = 7.85
FONT = 7.5            # points: 10.4 px at the column width (report.MIN_TEXT_PX is 9)
ROW_C, COL_C = "tab:blue", "tab:orange"


def bit_map(plan: Plan) -> dict:
    """The layout of ``plan`` as a map over GF(2): ``{"lane": [(row_mask, col_mask)] * 5,
    "reg": [(row_mask, col_mask)] * reg_bits, "const": (row, col), "row_bits": n,
    "col_bits": n}``, where bit ``b`` of the lane id (or of the register index) flips the row
    bits in ``row_mask`` and the column bits in ``col_mask``, whatever the other bits are.
    ``ValueError`` when the layout is no such map (not affine in the lane and register bits)."""
    lay = np.asarray(plan.layout, dtype=np.int64)
    n_regs = lay.shape[1]
    reg_bits = n_regs.bit_length() - 1
    if 1 << reg_bits != n_regs:
        raise ValueError(f"{plan.name}: {n_regs} registers a lane is not a power of two")
    base = lay[0, 0]
    lane = [tuple(int(v) for v in lay[1 << b, 0] ^ base) for b in range(5)]
    reg = [tuple(int(v) for v in lay[0, 1 << j] ^ base) for j in range(reg_bits)]
    for ln in range(32):
        for r in range(n_regs):
            want = base.copy()
            for b in range(5):
                if ln >> b & 1:
                    want ^= lane[b]
            for j in range(reg_bits):
                if r >> j & 1:
                    want ^= reg[j]
            if not np.array_equal(want, lay[ln, r]):
                raise ValueError(
                    f"{plan.name}: lane {ln} register {r} holds {tuple(lay[ln, r])}, not "
                    f"{tuple(want)}: the layout is not affine in the lane and register bits, so "
                    "it has no bit picture (the generator then uses bit-sliced constants)")
    m, n = plan.shape
    return {"lane": lane, "reg": reg, "const": (int(base[0]), int(base[1])),
            "row_bits": (m - 1).bit_length(), "col_bits": (n - 1).bit_length()}


def _panel(ax, plan: Plan):
    bm = bit_map(plan)
    srcs = [("lane bit", b, bm["lane"][b]) for b in range(5)] + \
        [("reg bit", j, bm["reg"][j]) for j in range(len(bm["reg"]))]
    dsts = [("row bit", b) for b in range(bm["row_bits"])] + \
        [("col bit", b) for b in range(bm["col_bits"])]
    ys = lambda k, total: -(k * 8.0 / max(total - 1, 1))  # noqa: E731  top to bottom
    ypos_dst = {dst: ys(i, len(dsts)) for i, dst in enumerate(dsts)}
    x0, x1 = 0.0, 1.0
    for i, (kind, b, (rmask, cmask)) in enumerate(srcs):
        y = ys(i, len(srcs))
        to_col = bool(cmask)
        colour = COL_C if to_col and not rmask else ROW_C if rmask and not to_col else "0.3"
        ax.text(x0 - 0.07, y, f"{kind} {b}", ha="right", va="center", fontsize=FONT,
                color=colour, weight="bold" if kind == "lane bit" else "normal")
        for bit in range(bm["row_bits"]):
            if rmask >> bit & 1:
                ax.plot([x0, x1], [y, ypos_dst[("row bit", bit)]], color=ROW_C, lw=1.4,
                        ls="-" if kind == "lane bit" else "--")
        for bit in range(bm["col_bits"]):
            if cmask >> bit & 1:
                ax.plot([x0, x1], [y, ypos_dst[("col bit", bit)]], color=COL_C, lw=1.4,
                        ls="-" if kind == "lane bit" else "--")
        ax.plot([x0], [y], "o", color=colour, ms=3)
    for (kind, b), y in ypos_dst.items():
        ax.text(x1 + 0.07, y, f"{kind.split()[0]} bit {b}", ha="left", va="center",
                fontsize=FONT, color=ROW_C if kind == "row bit" else COL_C)
        ax.plot([x1], [y], "o", color=ROW_C if kind == "row bit" else COL_C, ms=3)
    m, n = plan.shape
    ax.set_title(f"{plan.name}\n{m} x {n}, {plan.n_regs} registers a lane", fontsize=FONT + 0.5)
    lines = [f"rows: fold {plan.rows.groups_text()}",
             f"  shuffle offsets {plan.rows.offsets_text()}",
             f"cols: fold {plan.cols.groups_text()}",
             f"  shuffle offsets {plan.cols.offsets_text()}"]
    ax.text(0.45, -9.0, "\n".join(lines), ha="center", va="top", fontsize=FONT,
            family="monospace", linespacing=1.3, multialignment="left")
    ax.set_xlim(-0.75, 1.6)
    ax.set_ylim(-12.6, 0.6)
    ax.axis("off")


def plot_lane_bits(*plans: Plan):
    """One panel per plan: a line from each bit of the lane id (solid) and of the register index
    (dashed) to the row bits (blue) and column bits (orange) of the element it moves to, from
    the plan's layout (:func:`bit_map`); under it the plan's register groups and shuffle
    offsets. Bits that only move along a row (orange lines) are what the row reduction folds
    (registers) and shuffles over (lanes); blue ones, the column reduction's. Returns the
    figure."""
    import matplotlib.pyplot as plt
    if not plans:
        raise ValueError("plot_lane_bits needs at least one plan")
    from matplotlib.lines import Line2D
    fig, axes = plt.subplots(1, len(plans), figsize=(WIDTH, 3.8), squeeze=False)
    fig.subplots_adjust(left=0.09, right=0.97, bottom=0.1, top=0.88, wspace=0.55)
    for ax, p in zip(axes[0], plans):
        _panel(ax, p)
    handles = [Line2D([], [], color="0.3", lw=1.4), Line2D([], [], color="0.3", lw=1.4, ls="--"),
               Line2D([], [], color=ROW_C, lw=1.4), Line2D([], [], color=COL_C, lw=1.4)]
    fig.legend(handles, ["lane bit (shuffle)", "register bit (fold)", "to a row bit",
                         "to a column bit"], loc="lower center", ncol=4, fontsize=FONT,
               frameon=False, handlelength=2.2)
    return fig
