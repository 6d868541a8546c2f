"""Figures the book shows are legible at the text column's width: every number or label at least
report.MIN_TEXT_PX (9 px) tall when the page shrinks the image to 785 px (CPU, matplotlib Agg).

Every figure cell of the committed book notebooks (a code cell with ``mystnb.figure`` metadata)
is measured: its own source runs here with the names it reads (the chapter's record, its live
SASS rows, ...: :data:`CHAPTER_NAMES`), and the figure it draws has no text below the minimum,
no legend over a label and no label on a plotted data series. A figure that cannot be drawn
without a GPU is in :data:`NOT_MEASURABLE`, with the reason; a figure cell of a chapter missing
from :data:`CHAPTER_NAMES` fails :func:`test_every_book_figure_is_measured`. A table's caption
(``report.table``) is plain text on the page: no Markdown backticks there (a figure's caption is
MyST and renders them)."""
import functools
import json
import re

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from fraglab import report, tools, tracer  # noqa: E402

BOOK = tools.REPO_ROOT / "book"

# The kinds whose layout heatmaps chapters 01 and 02 show.
BOOK_KINDS = ["acc_16x16x16_f32", "a_16x16x16_bf16_row", "a_16x16x16_f16_row", "b_32x8x16_f16_row"]

#: Figures whose cell draws what it measures on the GPU right there (no record to draw from).
NOT_MEASURABLE = {
    "fig-ch00-sweep": "times warp_sum on the GPU in the cell (bench.sweep); no record",
}


def figure_cells() -> dict[str, tuple[str, str]]:
    """{figure name: (notebook stem, cell source)} of every figure cell of the book."""
    out = {}
    for path in sorted(BOOK.glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            name = cell.get("metadata", {}).get("mystnb", {}).get("figure", {}).get("name")
            if name:
                assert name not in out, f"figure {name} twice"
                out[name] = (path.stem, "".join(cell["source"]))
    return out


# --- the names each chapter's figure cells read, built here from its record and the compiler ----

def _ch00():
    from fraglab import hello_warp
    return dict(hello_warp=hello_warp)


def _ch01():
    bk = tracer.get_kind("a_16x16x16_bf16_row")
    truth = tracer.layout(bk)
    bad = tracer.decode(bk, tracer.simulate_dump(bk, truth, "paper"), "paper")
    kind = tracer.get_kind("acc_16x16x16_f32")
    return dict(tracer=tracer, kind=kind, t=tracer.Trace(kind, tracer.layout(kind)), bk=bk,
                truth=truth, bad=bad)


def _ch02():
    from fraglab import forward_mapping as fm, fragments, warp
    kind = fragments.get_kind("acc_16x16x16_f32")
    return dict(tracer=tracer, fm=fm, warp=warp, kind=kind, lay=tracer.layout(kind), GPU=False)


def _ch03():
    from fraglab import permutation_and_quad_reduction as pq, warp
    from fraglab.permutation_and_quad_reduction import report as pq_report
    return dict(pq=pq, pq_report=pq_report, warp=warp, lay=warp.accumulator_16x16_sm80(),
                sass_rec=pq_report.sass_record())


def _ch04():
    from fraglab import microbenchmark as mb
    return dict(mb=mb, doc=mb.load())


def _ch05():
    from fraglab import flash_attention as fa
    doc = fa.report.load()
    return dict(fa=fa, doc=doc, res=doc["results"], rng=np.random.default_rng(5))


def _ch07():
    from fraglab import register_reuse as rr
    from fraglab.register_reuse import plots, report as rr_report
    doc = rr_report.load()
    return dict(rr=rr, plots=plots, rr_report=rr_report, doc=doc,
                sass_rows=rr_report.live_sass(doc))


def _ch08():
    from fraglab import register_liveness as rl
    from fraglab.register_liveness import plots, report as rl_report
    return dict(rl=rl, plots=plots, rl_report=rl_report, doc=rl_report.load())


def _ch09():
    from fraglab.instruction_diet import classes, plots, report as diet_report
    return dict(classes=classes, plots=plots, diet_report=diet_report, doc=diet_report.load(),
                rows=classes.ladder("f16", 128, "sm_90"))


def _ch10():
    from fraglab.fa3_pipelining import plots, report as fa3_report
    return dict(plots=plots, fa3_report=fa3_report, doc=fa3_report.load())


def _ch11():
    from fraglab.fused_lm_head import report as lmh_report
    return dict(lmh_report=lmh_report, record=lmh_report.load())


def _ch06():
    from fraglab import layout_codegen as lc
    kinds = [k for k in lc.KINDS if k != "acc_8x8x4_f64"]
    return dict(lc=lc, plans={k: lc.plan(k, tracer.layout(k)) for k in kinds})


def _appendix():
    from fraglab import ptx
    row = np.arange(32, dtype=np.float32).reshape(1, 32)         # lane i holds i
    return dict(ptx=ptx, hello=ptx.load("00_hello_warp"),
                where=dict(grid=1, block=32, args=(row, np.zeros(1, np.float32), np.int32(1))))


#: Notebook stem -> the names its figure cells read (cached: records load and SASS compiles once).
CHAPTER_NAMES = {"00_hello_warp": _ch00, "01_tracer": _ch01, "02_forward_mapping": _ch02,
                 "03_permutation_and_quad_reduction": _ch03, "04_microbenchmark": _ch04,
                 "05_flash_attention": _ch05, "06_layout_codegen": _ch06, "07_register_reuse": _ch07,
                 "08_register_liveness": _ch08, "09_instruction_diet": _ch09,
                 "10_fa3_pipelining": _ch10, "11_fused_lm_head": _ch11,
                 "appendix_ptx_interpreter": _appendix}


@functools.lru_cache(maxsize=None)
def chapter_names(stem: str) -> dict:
    return CHAPTER_NAMES[stem]()


def draw(name: str):
    """Run figure ``name``'s committed cell on the CPU; return the figure it drew."""
    stem, source = figure_cells()[name]
    plt.close("all")
    ns = {"np": np, "plt": plt, "report": report, "display": lambda *a, **k: None,
          **chapter_names(stem)}
    exec(compile(source, f"{stem}:{name}", "exec"), ns)
    fig = ns.get("fig")
    return fig if isinstance(fig, matplotlib.figure.Figure) else plt.gcf()


# --- what is wrong with a figure ---------------------------------------------------------------

def collisions(fig, drawn: bool = False) -> list[str]:
    """Labels a reader cannot read: free text (``ax.text``, annotations) under a legend, or with a
    data series (a line with a legend label) running through it, sampled every pixel along each
    segment. (Unlabelled lines are a diagram's frames and rules, drawn around its labels.)
    ``drawn``: the figure was drawn already (by ``report.smallest_text_px``) and not changed since,
    so the positions are those of that drawing (a second drawing of a figure of a few hundred
    labels costs as much as the first)."""
    if not drawn:
        fig.canvas.draw()
    r = fig.canvas.get_renderer()
    texts = [t for ax in fig.axes for t in ax.texts if t.get_visible() and t.get_text().strip()]
    boxes = [t.get_window_extent(r) for t in texts]
    found = []
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is not None and legend.get_visible():
            lb = legend.get_window_extent(r)
            found += [f"the legend covers {t.get_text()!r}" for t, b in zip(texts, boxes)
                      if b.overlaps(lb)]
        for line in ax.get_lines():
            if not line.get_visible() or line.get_label().startswith("_"):
                continue
            xy = np.column_stack([np.asarray(line.get_xdata(), float),
                                  np.asarray(line.get_ydata(), float)])
            xy = line.get_transform().transform(xy)
            xy = xy[np.isfinite(xy).all(axis=1)]
            if len(xy) >= 2:
                xy = np.concatenate([np.linspace(a, b, int(np.hypot(*(b - a))) + 2)
                                     for a, b in zip(xy[:-1], xy[1:])])
            for t, b in zip(texts, boxes):
                if t.axes is ax and len(xy) and (
                        (xy[:, 0] > b.x0) & (xy[:, 0] < b.x1)
                        & (xy[:, 1] > b.y0) & (xy[:, 1] < b.y1)).any():
                    found.append(f"{t.get_text()!r} lies on the line {line.get_label()!r}")
    return found


# --- the tests ---------------------------------------------------------------------------------

def test_every_book_figure_is_measured():
    cells = figure_cells()
    missing = sorted(n for n, (stem, _) in cells.items()
                     if n not in NOT_MEASURABLE and stem not in CHAPTER_NAMES)
    assert not missing, (f"figure cells of chapters this test cannot draw: {missing}; add the "
                         "names they read to CHAPTER_NAMES (or the reason to NOT_MEASURABLE)")
    assert set(NOT_MEASURABLE) <= set(cells), "NOT_MEASURABLE names a figure the book lost"


@pytest.mark.parametrize("name", sorted(n for n in figure_cells() if n not in NOT_MEASURABLE))
def test_book_figure_is_legible(name):
    fig = draw(name)
    px = report.smallest_text_px(fig)               # draws the figure
    bad = collisions(fig, drawn=True)
    plt.close("all")
    assert px >= report.MIN_TEXT_PX, f"{name}: smallest text {px:.1f} px at the column width"
    assert not bad, f"{name}: " + "; ".join(bad)


def test_table_captions_are_plain_text():
    # report.table's <caption> is shown as it is: a backtick would show up raw on the page
    # (chapter 08's Q-modes table did)
    bad = []
    for path in sorted(BOOK.glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            for out in cell.get("outputs", []):
                html = "".join(out.get("data", {}).get("text/html", ""))
                bad += [f"{path.stem} table: {c}" for c in re.findall(r"<caption>(.*?)</caption>",
                                                                       html, re.S) if "`" in c]
    assert not bad, "table captions with Markdown backticks:\n" + "\n".join(bad)


def test_collisions_are_found():
    # the check can fail: a legend over an annotation, a label on a line
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1], [0, 1], label="the line")
    ax.text(0.5, 0.5, "on the line", ha="center", va="center")
    ax.text(0.05, 0.95, "under the legend", va="top")
    ax.legend(loc="upper left")
    found = collisions(fig)
    report.smallest_text_px(fig)                     # as the legibility test reads a figure
    again = collisions(fig, drawn=True)
    plt.close(fig)
    assert "'on the line' lies on the line 'the line'" in found
    assert "the legend covers 'under the legend'" in found
    assert again == found


def test_small_text_is_found():
    fig, ax = plt.subplots(figsize=(13.92, 3))          # shrunk to 785 px: 6 pt is 4.7 px
    ax.text(0.5, 0.5, "tiny", fontsize=6)
    ax.tick_params(labelsize=12)
    assert report.smallest_text_px(fig) < report.MIN_TEXT_PX
    plt.close(fig)


@pytest.mark.parametrize("name", BOOK_KINDS)
def test_layout_heatmap_numbers_are_legible(name):
    k = tracer.get_kind(name)
    fig = tracer.plot_layout(tracer.layout(k), kind=k)
    px = report.smallest_text_px(fig)
    plt.close(fig)
    assert px >= report.MIN_TEXT_PX, f"{name}: smallest text {px:.1f} px at the column width"


def test_displayed_px_arithmetic():
    # a 13.9-inch figure at 100 dpi is shrunk to 785 px: 6 pt text is 4.7 px (the old heatmaps)
    assert report.displayed_px(6, 13.92) == pytest.approx(6 / 72 * 100 * 785 / 1392)
    assert report.displayed_px(9, 5.0) == pytest.approx(12.5)        # not enlarged
    assert report.displayed_px(report.min_fontsize_pt(12.0), 12.0) == pytest.approx(report.MIN_TEXT_PX)
