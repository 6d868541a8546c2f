"""Pictures and tables of a layout: which lane and register hold each element of the tile (the
paper's Figure 1), used by the book, the labs and failure messages."""
from __future__ import annotations

import numpy as np

from .. import warp
from ..fragments import Kind, get_kind


def holders(layout, shape) -> list[list[list[tuple[int, int]]]]:
    """``h[row][col]`` = the (lane, reg) slots holding that element (see warp.inverse_layout)."""
    return warp.inverse_layout(np.asarray(layout), shape)


def element_table(layout, shape, what: str = "lane") -> np.ndarray:
    """(rows, cols) int array: the lane (``what="lane"``) or register (``"reg"``) of the first
    slot holding each element, -1 for an element no slot holds."""
    if what not in ("lane", "reg"):
        raise ValueError(f"what must be 'lane' or 'reg', got {what!r}")
    rows, cols = shape
    out = np.full((rows, cols), -1, dtype=np.int64)
    lay = np.asarray(layout)
    for lane in range(31, -1, -1):              # backwards, so the first holder wins
        for reg in range(lay.shape[1] - 1, -1, -1):
            r, c = lay[lane, reg]
            if 0 <= r < rows and 0 <= c < cols:
                out[r, c] = lane if what == "lane" else reg
    return out


def format_table(layout, shape, what: str = "lane") -> str:
    """The element table as text, like the paper's Figure 1 (rows R00.., columns C00..)."""
    t = element_table(layout, shape, what)
    rows, cols = shape
    head = "     " + " ".join(f"C{c:02d}" for c in range(cols))
    lines = [head] + [f"R{r:02d}  " + " ".join(f"{v:3d}" if v >= 0 else "  ." for v in t[r])
                      for r in range(rows)]
    return "\n".join(lines)


def _ink(rgba) -> str:
    """Black text on a light tile, white on a dark one (relative luminance)."""
    r, g, b = rgba[:3]
    return "black" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.45 else "white"


def _layout_figure(rows: int, cols: int, panels: int):
    """A figure for ``panels`` heatmaps of a rows x cols tile whose numbers stay legible in the
    book (report.MIN_TEXT_PX at the 785 px column): side by side when that fits the column,
    else stacked. Returns (fig, axes, fontsize)."""
    import matplotlib.pyplot as plt
    from .. import report

    cell = 0.42 if cols <= 16 else 0.26               # inches per element
    panel_w, panel_h = cols * cell + 1.0, rows * cell + 1.0
    side = report.displayed_px(7.0, panels * panel_w) >= report.MIN_TEXT_PX
    width = panels * panel_w if side else panel_w
    fs = max(7.0, report.min_fontsize_pt(width) + 0.2)
    nrows, ncols = (1, panels) if side else (panels, 1)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, panel_h * nrows + 0.4), squeeze=False)
    return fig, list(axes.ravel()), fs


def plot_layout(layout, shape=None, *, kind: str | Kind | None = None, title: str | None = None,
                highlight=None, annotate: bool = True, what=("lane", "reg")):
    """Heatmaps of the lane and the register holding each element; returns the Figure.

    ``highlight``: optional bool (rows, cols) array; those elements get a red frame (failure
    messages use it to point at wrong elements). Elements held by several slots show the first
    holder and a ``+n`` for the n other copies.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    k = get_kind(kind) if kind is not None else None
    shape = tuple(shape) if shape is not None else (k.shape if k else None)
    if shape is None:
        raise ValueError("give shape=(rows, cols) or kind=")
    lay = np.asarray(layout)
    rows, cols = shape
    counts = np.zeros(shape, dtype=np.int64)
    ok = (lay[..., 0] >= 0) & (lay[..., 0] < rows) & (lay[..., 1] >= 0) & (lay[..., 1] < cols)
    np.add.at(counts, (lay[ok][:, 0], lay[ok][:, 1]), 1)
    what = (what,) if isinstance(what, str) else tuple(what)
    fig, axes, fs = _layout_figure(rows, cols, len(what))
    for ax, w in zip(axes, what):
        t = element_table(lay, shape, w)
        vmax = 31 if w == "lane" else max(lay.shape[1] - 1, 1)
        cmap = plt.get_cmap("tab20b" if w == "lane" else "tab10").with_extremes(under="white")
        ax.imshow(np.where(t < 0, -1, t), cmap=cmap, vmin=0, vmax=vmax, aspect="equal")
        if annotate:
            for r in range(rows):
                for c in range(cols):
                    if t[r, c] < 0:
                        continue
                    s = str(t[r, c]) + (f"+{counts[r, c] - 1}" if counts[r, c] > 1 else "")
                    ax.text(c, r, s, ha="center", va="center", fontsize=fs,
                            color=_ink(cmap(t[r, c] / vmax)))
        if highlight is not None:
            for r, c in np.argwhere(np.asarray(highlight)):
                ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, ec="red", lw=1.5))
        ax.set_title({"lane": "lane holding each element",
                      "reg": "register (x[i]) holding each element"}[w], fontsize=fs + 2)
        step = 1 if max(rows, cols) <= 16 else 4
        ax.set_xticks(range(0, cols, step))
        ax.set_yticks(range(0, rows, step))
        ax.tick_params(labelsize=fs)
        ax.set_xlabel("col", fontsize=fs + 1)
        ax.set_ylabel("row", fontsize=fs + 1)
        for x in range(8, cols, 8):
            ax.axvline(x - 0.5, color="k", lw=0.6)
        for y in range(8, rows, 8):
            ax.axhline(y - 0.5, color="k", lw=0.6)
    fig.suptitle(title or (k.describe() if k else ""), fontsize=fs + 3)
    fig.tight_layout()
    return fig


def plot_mismatch(got, want, kind: str | Kind, title: str | None = None):
    """The expected layout with the elements whose holder differs in ``got`` framed in red."""
    k = get_kind(kind)
    g, w = np.asarray(got), np.asarray(want)
    bad = np.zeros(k.shape, dtype=bool)
    for lane, reg in np.argwhere((g != w).any(axis=-1)):
        for r, c in (w[lane, reg], g[lane, reg]):
            if 0 <= r < k.shape[0] and 0 <= c < k.shape[1]:
                bad[r, c] = True
    return plot_layout(w, k.shape, kind=k, highlight=bad,
                       title=title or f"{k.name}: expected layout, wrong elements framed")


def summary_row(trace, **extra) -> dict:
    """One row of a book table for a checked trace (what ``Trace.summary()`` says, in columns)."""
    k = trace.kind
    held = ("invalid" if not trace.ok else
            f"{int(trace.counts.min())} times" if trace.duplicated else "once")
    return {"kind": k.name, "values per lane": k.num_elements, "slots": k.slots,
            "elements": k.elements, "each element held": held, **extra}
