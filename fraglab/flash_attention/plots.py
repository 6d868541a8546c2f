"""The chapter's diagram of the FA-2 kernel's tiles and data flow (:func:`plot_fa2_tiles`), drawn
to scale from the tile sizes the wrappers launch with (:func:`fa2_tiles`: :mod:`.constants`, the
shape of ``mma.m16n8k16`` and :func:`.kernels.fa2_smem_bytes`), so that the picture follows the
kernel when a constant changes. Sized for the book's text column (7.85 in at 100 dpi)."""
from __future__ import annotations

from .. import fragments
from . import constants
from .kernels import fa2_smem_bytes

WIDTH = 7.85
FONT = 7.5            # points: 10.4 px at the column width (report.MIN_TEXT_PX is 9)


def fa2_tiles(d: int | None = None, warps: int | None = None) -> dict:
    """The tile sizes of ``fa2_<dtype>_d<d>_w<warps>`` (default: the smallest head dimension
    and warp count): ``rows_per_warp`` and ``acc_cols`` (M and N of ``mma.m16n8k16``, from its
    PTX ISA layouts), ``bm`` (query rows per block), ``bn`` (keys per K/V tile), ``d``,
    ``warps``, ``s_accs`` and ``o_accs`` (16x8 accumulators of S and of O per warp) and
    ``smem`` (bytes of shared memory per block)."""
    d = constants.FA2_HEAD_DIMS[0] if d is None else d
    warps = constants.FA2_WARPS[0] if warps is None else warps
    if d not in constants.FA2_HEAD_DIMS or warps not in constants.FA2_WARPS:
        raise ValueError(f"d must be one of {constants.FA2_HEAD_DIMS} and warps one of "
                         f"{constants.FA2_WARPS}, got d={d!r}, warps={warps!r}")
    a, c = fragments.mma_m16n8k16("a"), fragments.mma_m16n8k16("c")
    m, n = int(a[..., 0].max()) + 1, int(c[..., 1].max()) + 1
    bn = constants.FA2_BN
    return {"d": d, "warps": warps, "rows_per_warp": m, "acc_cols": n, "bm": m * warps,
            "bn": bn, "s_accs": bn // n, "o_accs": d // n, "smem": fa2_smem_bytes(d, warps)}


def _box(ax, x, y, w, h, label, colour, *, alpha=1.0, lw=0.8, fs=FONT, **text):
    """A rectangle with its lower-left corner at (x, y), ``label`` in its middle."""
    import matplotlib.pyplot as plt
    ax.add_patch(plt.Rectangle((x, y), w, h, facecolor=colour, edgecolor="0.25", lw=lw,
                               alpha=alpha))
    if label:
        ax.text(x + w / 2, y + h / 2, label, ha="center", va="center", fontsize=fs, **text)


def _deck(ax, x, y, w, h, colour, dx, dy, cards=2):
    """Ghost tiles behind a tile (the ones streamed before and after it)."""
    for c in range(cards, 0, -1):
        _box(ax, x + c * dx, y + c * dy, w, h, "", colour, alpha=0.35, lw=0.5)


def plot_fa2_tiles(d: int | None = None, warps: int | None = None):
    """FA-2's tiles and data flow for one block (:func:`fa2_tiles`), rectangles to scale (one
    unit one element), laid out like two matrix products: the block's Q rows beside
    S = Q K_j^T (K_j^T above S), the online-softmax state m and l, and O = P V_j (V_j above O);
    warp w's rows framed across Q, S, m, l and O (what it keeps in registers); K_j and V_j drawn
    as a deck (the tiles streamed through shared memory); the steps numbered below. Returns the
    figure."""
    import matplotlib.pyplot as plt
    t = fa2_tiles(d, warps)
    d, bm, bn, r, nw = t["d"], t["bm"], t["bn"], t["rows_per_warp"], t["warps"]
    q_c, k_c, v_c, o_c, s_c, st_c = ("#9ecae1", "#fdd0a2", "#c7e9c0", "#dadaeb", "#fcbba1",
                                     "#fee391")
    g = 18                                            # gaps between the blocks
    ml = 7                                            # width of the m and l columns
    xq, xs = 0, d + g
    xm = xs + bn + g / 2
    xl = xm + ml + 2
    xo = xl + ml + g
    y_top = bm + g                                    # bottom of K_j^T and V_j
    right = xo + d
    top = y_top + max(d, bn)

    fig, (ax, tx) = plt.subplots(2, 1, figsize=(WIDTH, 6.0), height_ratios=(3.1, 0.62))
    fig.subplots_adjust(left=0.01, right=0.99, bottom=0.0, top=0.99, hspace=0.02)

    # the block's tiles
    _box(ax, xq, 0, d, bm, "", q_c)
    _box(ax, xs, 0, bn, bm, "", s_c)
    _box(ax, xm, 0, ml, bm, "", st_c)
    _box(ax, xl, 0, ml, bm, "", st_c)
    _box(ax, xo, 0, d, bm, "", o_c)
    _deck(ax, xs, y_top, bn, d, k_c, 3, 3)
    _box(ax, xs, y_top, bn, d, f"K_j^T\n{d} x {bn}", k_c, lw=1.4)
    _deck(ax, xo, y_top, d, bn, v_c, 3, 3)
    _box(ax, xo, y_top, d, bn, f"V_j\n{bn} x {d}", v_c, lw=1.4)
    # the warps' rows: warp w = 1 framed (registers), the others thin
    w = min(1, nw - 1)
    for k in range(nw):
        y0 = bm - (k + 1) * r
        for x0, wd in ((xq, d), (xs, bn), (xm, ml), (xl, ml), (xo, d)):
            ax.add_patch(plt.Rectangle((x0, y0), wd, r, fill=False, edgecolor="0.15",
                                       lw=2.0 if k == w else 0.4, zorder=3))
        ax.text(xq - 2, y0 + r / 2, f"warp {k}" if k != w else "warp w", ha="right",
                va="center", fontsize=FONT, weight="bold" if k == w else "normal")
    yw = bm - (w + 1) * r + r / 2
    ax.text(xq + d / 2, yw, f"Q_w: {r} x {d}", ha="center", va="center", fontsize=FONT,
            zorder=4, bbox=dict(fc=q_c, ec="none", pad=0.8))
    ax.text(xs + bn / 2, yw, f"S = Q_w K_j^T\n{r} x {bn}", ha="center", va="center",
            fontsize=FONT,
            zorder=4, bbox=dict(fc=s_c, ec="none", pad=0.8))
    ax.text(xo + d / 2, yw, f"O_w: {r} x {d}, f32", ha="center", va="center", fontsize=FONT,
            zorder=4, bbox=dict(fc=o_c, ec="none", pad=0.8))
    ax.text(xm + ml / 2, bm + 2, "m", ha="center", va="bottom", fontsize=FONT + 1)
    ax.text(xl + ml / 2, bm + 2, "l", ha="center", va="bottom", fontsize=FONT + 1)
    # sizes and step numbers
    ax.text(xq + d / 2, -3, f"Q: {bm} rows x d = {d}\n(one block)", ha="center", va="top",
            fontsize=FONT)
    ax.text(xs + bn / 2, -3, f"S: {bm} x {bn},\n{r} rows a warp", ha="center",
            va="top", fontsize=FONT)
    ax.text(xo + d / 2, -3, f"O: {bm} x {d}", ha="center", va="top", fontsize=FONT)
    ax.text(xs - 3, y_top + d / 2, f"tile j of\n{bn} keys:\nj = 0, 1, ...", ha="right",
            va="center", fontsize=FONT)
    # the accumulators of mma.m16n8k16 in warp w's S and O
    for x0, wd in ((xs, bn), (xo, d)):
        for c in range(t["acc_cols"], wd, t["acc_cols"]):
            ax.plot([x0 + c, x0 + c], [yw - r / 2, yw + r / 2], color="0.55", lw=0.5, zorder=2)
    # the flow, numbered as in the list below
    arrow = dict(arrowstyle="-|>", color="0.15", lw=1.2)
    ax.annotate("", xy=(xs + bn / 2, bm + 1), xytext=(xs + bn / 2, y_top - 1), arrowprops=arrow)
    ax.text(xs + bn / 2 + 2, bm + g / 2, "③ mma", ha="left", va="center", fontsize=FONT)
    ax.annotate("", xy=(xo + d / 2, bm + 1), xytext=(xo + d / 2, y_top - 1), arrowprops=arrow)
    ax.text(xo + d / 2 + 2, bm + g / 2, "⑤ mma", ha="left", va="center", fontsize=FONT)
    ax.annotate("", xy=(xm - 0.5, yw), xytext=(xs + bn + 0.5, yw), arrowprops=arrow, zorder=5)
    ax.annotate("", xy=(xo - 0.5, yw), xytext=(xl + ml + 0.5, yw), arrowprops=arrow, zorder=5)
    ax.text(xl + ml / 2, -3, "④ one m, l\nper row", ha="center", va="top", fontsize=FONT)
    ax.annotate("", xy=(right + 14, yw), xytext=(right + 0.5, yw), arrowprops=arrow)
    ax.text(right + 2, yw + r / 2 + 1, "⑥ O / l", ha="left", va="bottom", fontsize=FONT)
    ax.text(xq + 2, bm - 2, "①", ha="left", va="top", fontsize=FONT + 2)
    for x0, wd, h in ((xs, bn, d), (xo, d, bn)):
        ax.text(x0 + wd - 2, y_top + h - 2, "②", ha="right", va="top", fontsize=FONT + 2)
    ax.text(xq - 30, top, "framed: warp w's registers\n(Q_w, S and P, m, l, O_w)\n\n"
            "deck: the K and V tiles,\none at a time in shared\nmemory", ha="left", va="top",
            fontsize=FONT)
    ax.set_xlim(xq - 30, right + 16)
    ax.set_ylim(-22, top + 8)
    ax.set_aspect("equal")
    ax.axis("off")

    steps = [
        f"① Q: the block's {bm} rows ({nw} warps x {r}) to shared memory (cp.async), then each "
        f"warp's {r} rows\n    into registers (ldmatrix), once for the whole sweep",
        f"② K_j, V_j: tiles of {bn} keys streamed through shared memory ({t['smem'] // 1024} KiB "
        "a block with Q,\n    swizzled), V_j copied while S and the softmax run, K_(j+1) "
        "while P V runs",
        f"③ S = Q_w K_j^T with mma.m16n8k16: {t['s_accs']} accumulators of "
        f"{r} x {t['acc_cols']} a warp, in registers",
        "④ per row: m' = max(m, rowmax S),  P = 2^(S - m'),  l' = 2^(m - m') l + rowsum P",
        f"⑤ O = 2^(m - m') O + P V_j: P straight from S's accumulators as the A operand; O: "
        f"{t['o_accs']} accumulators",
        "⑥ after the last tile: O / l to global memory (through the warp's rows of shared "
        "memory)",
    ]
    tx.text(0.01, 0.98, "\n".join(steps), ha="left", va="top", fontsize=FONT,
            transform=tx.transAxes, linespacing=1.35)
    tx.axis("off")
    return fig
