"""How chapters show results: numbers glued into the prose from the record, HTML tables that fit
the page, and numbered figure captions. The one place the book's presentation helpers live.

    from fraglab import report
    report.glue("speedup", ratio, "{:.2f}x")     # the prose says {glue:text}`speedup`
    report.table(rows, caption="Table 1: ...")   # rows: list of dicts (or a header + list rows)

``glue`` writes the same output ``myst_nb.glue(name, value, display=False)`` does, without
importing myst_nb (the GPU machine that executes the chapters has no Sphinx). Every glued value
is a string formatted here, so the page shows exactly what the record gives, and
:func:`glued_values` reads them back from an executed notebook for the prose-vs-record test.
"""
from __future__ import annotations

import html
import re
import json
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

#: The MIME prefix myst-nb uses for glued values that are not displayed where they are computed.
GLUE_PREFIX = "application/papermill.record/"


def fmt(value: Any, spec: str = "{}") -> str:
    """``spec.format(value)``; ``None`` becomes "n/a"."""
    return "n/a" if value is None else spec.format(value)


def glue(name: str, value: Any, spec: str = "{}") -> str:
    """Record ``fmt(value, spec)`` under ``name`` for ``{glue:text}`name``` in the prose (hidden
    where it is computed). Returns the text."""
    text = fmt(value, spec)
    from IPython.display import display
    display({GLUE_PREFIX + "text/plain": repr(text)}, raw=True,
            metadata={"scrapbook": {"name": name, "mime_prefix": GLUE_PREFIX}})
    return text


def glued_values(notebook: str | Path) -> dict[str, str]:
    """``{name: text}`` of every value glued in an executed notebook (read from its outputs)."""
    nb = json.loads(Path(notebook).read_text())
    out = {}
    for cell in nb["cells"]:
        for o in cell.get("outputs", []):
            meta = (o.get("metadata") or {}).get("scrapbook")
            if meta and o.get("output_type") == "display_data":
                raw = o["data"].get(meta["mime_prefix"] + "text/plain", "")
                raw = "".join(raw) if isinstance(raw, list) else raw
                try:
                    out[meta["name"]] = str(eval(raw, {"__builtins__": {}}))  # a str's repr
                except Exception:
                    out[meta["name"]] = raw
    return out


class Table:
    """An HTML table (Jupyter shows it as HTML, the book renders it scrolling inside the column)."""

    def __init__(self, header: Sequence[str], rows: Sequence[Sequence[Any]], caption: str = "",
                 align: Sequence[str] | None = None):
        self.header, self.rows, self.caption = list(header), [list(r) for r in rows], caption
        self.align = list(align) if align else ["left"] + ["right"] * (len(header) - 1)

    def _repr_html_(self) -> str:
        cell = lambda tag, v, a: f'<{tag} style="text-align:{a}">{html.escape(str(v))}</{tag}>'
        head = "".join(cell("th", h, a) for h, a in zip(self.header, self.align))
        body = "".join("<tr>" + "".join(cell("td", v, a) for v, a in zip(r, self.align)) + "</tr>"
                       for r in self.rows)
        cap = f"<caption>{html.escape(self.caption)}</caption>" if self.caption else ""
        return (f'<div class="fraglab-table" style="overflow-x:auto;max-width:100%">'
                f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>")

    def __repr__(self) -> str:   # plain text for terminals and nbval: short, never wide
        return f"<table: {len(self.rows)} rows x {len(self.header)} columns" + \
            (f", {self.caption!r}" if self.caption else "") + ">"

    def to_markdown(self) -> str:
        line = lambda vals: "| " + " | ".join(str(v) for v in vals) + " |"
        sep = "| " + " | ".join("---:" if a == "right" else "---" for a in self.align) + " |"
        return "\n".join([line(self.header), sep, *(line(r) for r in self.rows)])


def table(rows: Iterable[Mapping[str, Any]] | Sequence[Sequence[Any]], header=None, *,
          caption: str = "", align=None) -> Table:
    """A :class:`Table` from a list of dicts (keys are the header) or from ``header`` + rows."""
    rows = list(rows)
    if header is None:
        if not rows or not isinstance(rows[0], Mapping):
            raise ValueError("give header=[...] with list rows, or rows as dicts")
        header = list(rows[0])
        rows = [[r.get(h, "") for h in header] for r in rows]
    return Table(header, rows, caption, align)


def text_grid(corner: str, heads: Sequence[str], sections: Sequence[Mapping[str, Any]],
              names: Iterable[str], cell, *, first: int = 20, width: int = 20) -> list[str]:
    """Lines of a fixed-width text table for a run's closing summary: a header (``corner``, then
    ``heads``), then a line per name with one cell a section: ``cell(section["rows"][name])``,
    or ``-`` where the section has no (or an empty) row of that name."""
    lines = [f"{corner:<{first}}" + "".join(f"{h:>{width}}" for h in heads)]
    for name in names:
        cells = []
        for s in sections:
            row = s["rows"].get(name)
            cells.append(cell(row) if row else "-")
        lines.append(f"{name:<{first}}" + "".join(f"{c:>{width}}" for c in cells))
    return lines


# --- the prose-vs-record contract -----------------------------------------------------------------
#
# A chapter's numbers reach its prose one way: the notebook calls ``report.glue_all(values)`` with
# ``values`` from a function of the record (by convention ``<topic>.glue_values(record)``, returning
# ``{name: text}``), and the markdown cites ``{glue:text}`name```. tests/test_book_record.py reads the
# names used in the markdown, the values glued in the outputs (:func:`glued_values`) and, where the
# topic has a recorded data file, recomputes ``glue_values`` and compares text with text.

_GLUE_ROLE = re.compile(r"\{glue(?::(?:text|md|any|figure|math))?\}`([^`<]+?)(?::[^`]*)?`")


def glue_all(values: Mapping[str, Any]) -> dict[str, str]:
    """Glue every ``{name: text}`` (already formatted strings; other values go through ``str``)
    and return them, so a notebook cell can both glue and show what it glued."""
    out = {}
    for name, value in values.items():
        out[name] = glue(name, value if isinstance(value, str) else str(value))
    return out


def glue_output(name: str, text: str) -> dict:
    """The nbformat output that ``glue(name, text)`` displays (for tools that edit notebooks)."""
    return {"output_type": "display_data", "data": {GLUE_PREFIX + "text/plain": repr(text)},
            "metadata": {"scrapbook": {"name": name, "mime_prefix": GLUE_PREFIX}}}


def glue_names_cited(notebook: str | Path) -> set[str]:
    """Names the notebook's markdown cites with ``{glue:text}`name``` (or ``{glue}``, ``{glue:md}``...)."""
    nb = json.loads(Path(notebook).read_text())
    names = set()
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            names |= set(_GLUE_ROLE.findall("".join(cell["source"])))
    return names


# --- figures: numbered captions and alt text ------------------------------------------------------

def figure_metadata(name: str, caption: str, alt: str) -> dict:
    """Cell metadata that makes myst-nb render the cell's image as a numbered figure
    (``numfig``), with a caption and alt text. Merge it into the cell's metadata:
    ``cell["metadata"].update(report.figure_metadata("fig-ch01-lanes", "The lane ...", "Heatmap ..."))``.
    Cite it in the prose with ``{numref}`fig-ch01-lanes```."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", name):
        raise ValueError(f"figure name {name!r}: use lowercase letters, digits and dashes")
    return {"mystnb": {"figure": {"name": name, "caption": caption}, "image": {"alt": alt}}}


#: Width of the theme's text column, in CSS pixels, in a 1400 px window: a wider image is shrunk
#: to it. (Notebook figures are PNGs at matplotlib's 100 dpi, cropped to their content.)
COLUMN_PX = 785
#: Monospace characters of a code output that fit the column: measured in headless Chromium at a
#: 1400 px window, an output <pre> shows 90 characters of the theme's code font before it cuts;
#: 88 leaves a margin. tests/test_book_html.py fails on a longer output line.
CHAR_BUDGET = 88
#: Smallest legible text in a figure, in CSS pixels at the displayed width.
MIN_TEXT_PX = 9.0


def displayed_px(fontsize_pt: float, fig_width_in: float, dpi: float = 100.0,
                 column_px: float = COLUMN_PX) -> float:
    """Height in CSS pixels of ``fontsize_pt`` text in a figure ``fig_width_in`` wide saved at
    ``dpi``, when the page shrinks the image to the column (never enlarges it)."""
    image_px = fig_width_in * dpi
    scale = min(1.0, column_px / image_px)
    return fontsize_pt / 72.0 * dpi * scale


def min_fontsize_pt(fig_width_in: float, dpi: float = 100.0, px: float = MIN_TEXT_PX) -> float:
    """The smallest font size (points) that stays ``px`` tall at the column width."""
    return px * 72.0 / dpi / min(1.0, COLUMN_PX / (fig_width_in * dpi))


def smallest_text_px(fig, dpi: float = 100.0) -> float:
    """Height in CSS pixels, at the column width, of the smallest visible text of a matplotlib
    figure as the notebook shows it (saved at ``dpi`` with a tight bounding box)."""
    fig.canvas.draw()
    width_in = fig.get_tightbbox(fig.canvas.get_renderer()).width
    sizes = [t.get_fontsize() for t in fig.findobj(lambda a: hasattr(a, "get_text")
                                                   and hasattr(a, "get_fontsize"))
             if t.get_visible() and t.get_text().strip()]
    return displayed_px(min(sizes), width_in, dpi) if sizes else float("inf")


def wide_lines(text: str, budget: int = CHAR_BUDGET) -> list[str]:
    """Lines of ``text`` longer than ``budget`` characters."""
    return [l for l in text.splitlines() if len(l) > budget]


# --- peaks: throughput in context -----------------------------------------------------------------

#: Datasheet peaks of the course's GPU (NVIDIA H100 SXM5 80 GB datasheet): dense tensor TFLOP/s
#: (the 2:4-sparse figures are twice these) and HBM3 bandwidth.
H100_SXM = {"dense_f16_tflops": 989.4, "dense_bf16_tflops": 989.4, "dense_tf32_tflops": 494.7,
            "hbm_tb_s": 3.35}
H100_SOURCE = "NVIDIA H100 Tensor Core GPU datasheet (SXM5)"


def share(value: float, peak: float, spec: str = "{:.0%}") -> str:
    """``value / peak`` formatted as a percentage (``"49%"``)."""
    return spec.format(value / peak)


# --- the course address: links to the labs --------------------------------------------------------

def course_address(config: str | Path | None = None) -> tuple[str, str]:
    """(repository URL, branch) from ``_config.yml``'s ``repository:`` block (the one place the
    course's address is written)."""
    path = Path(config) if config else Path(__file__).resolve().parents[1] / "_config.yml"
    text = path.read_text()
    block = re.search(r"^repository:\s*\n((?:[ \t]+.*\n?)+)", text, re.M)
    if not block:
        raise ValueError(f"{path}: no repository: block")
    url = re.search(r"^\s+url:\s*(\S+)", block.group(1), re.M)
    branch = re.search(r"^\s+branch:\s*(\S+)", block.group(1), re.M)
    return url.group(1).rstrip("/"), (branch.group(1) if branch else "main")


def lab_url(topic: str, where: str = "colab", config: str | Path | None = None) -> str:
    """Where a reader opens lab ``labs/<topic>.ipynb``: on Colab (``where="colab"``) or GitHub."""
    url, branch = course_address(config)
    path = f"blob/{branch}/labs/{topic}.ipynb"
    if where == "github":
        return f"{url}/{path}"
    if where == "colab":
        return "https://colab.research.google.com/github/" + url.split("github.com/", 1)[1] + "/" + path
    raise ValueError(f"where must be 'colab' or 'github', got {where!r}")


def book_url(page: str, config: str | Path | None = None) -> str:
    """Where a reader opens the built book's page ``book/<page>`` (``NN_name``, an appendix,
    ``intro``): ``_config.yml``'s ``html: baseurl:`` where it is set, else the GitHub Pages site
    of the one course address (``https://<owner>.github.io/<repo>/``), then ``book/<page>.html``."""
    path = Path(config) if config else Path(__file__).resolve().parents[1] / "_config.yml"
    block = re.search(r"^html:\s*\n((?:[ \t]+.*\n?)+)", path.read_text(), re.M)
    base = re.search(r"^\s+baseurl:\s*[\"']?([^\s\"']+)", block.group(1), re.M) if block else None
    if base:
        site = base.group(1)
    else:
        owner, repo = course_address(path)[0].split("github.com/", 1)[1].split("/")[:2]
        site = f"https://{owner.lower()}.github.io/{repo}/"
    return f"{site.rstrip('/')}/book/{page}.html"


# --- long or wide text: listings that collapse and scroll, messages that wrap ---------------------

class Listing:
    """A long text (a kernel's source, a SASS listing) shown collapsed: a one-line summary that
    opens to the full text, which scrolls inside the column instead of being cut. Plain-text
    ``repr`` (terminals, nbval) is the summary line only."""

    def __init__(self, text: str, title: str, open: bool = False):
        self.text, self.title, self.open = text.rstrip("\n"), title, open

    @property
    def summary(self) -> str:
        return f"{self.title} ({len(self.text.splitlines())} lines)"

    def _repr_html_(self) -> str:
        return (f'<details class="fraglab-listing"{" open" if self.open else ""}>'
                f"<summary>{html.escape(self.summary)}</summary>"
                f'<pre style="overflow-x:auto;max-width:100%">{html.escape(self.text)}</pre></details>')

    def __repr__(self) -> str:
        return self.summary


def listing(text: str, title: str, open: bool = False) -> Listing:
    """``text`` as a collapsed :class:`Listing` titled ``title`` (the full text one click away)."""
    return Listing(text, title, open)


def wrap(text: str, width: int = CHAR_BUDGET, indent: str = "    ") -> str:
    """Every line of ``text`` wrapped to ``width`` characters (continuations indented), so a long
    message reads in the column."""
    import textwrap
    return "\n".join(textwrap.fill(line, width, subsequent_indent=indent, break_on_hyphens=False)
                     if len(line) > width else line for line in text.splitlines())


#: compute-sanitizer's record, per tool and topic, over each topic's ``PROBLEMS`` (``.ci/gpu
#: sanitize``, written by ``.ci/sanitize_topics.py --summary``).
SANITIZER_RECORD = Path(__file__).resolve().parent.parent / "book" / "data" / "sanitizer.json"


def sanitizer_verdict(topic: str, path: str | Path = SANITIZER_RECORD) -> str:
    """One phrase for the prose: what compute-sanitizer said of ``topic``'s kernels (e.g.
    ``'clean under memcheck, racecheck and synccheck (56 launches each)'``), or why there is
    no verdict."""
    p = Path(path)
    if not p.exists():
        return "not run (no record)"
    tools = json.loads(p.read_text()).get("tools", {})
    ran = {t: v[topic] for t, v in tools.items() if topic in v}
    if not ran:
        return "not run for this chapter"
    dirty = [t for t, v in ran.items() if not v.get("clean")]
    if dirty:
        return "NOT clean under " + ", ".join(f"{t} ({ran[t].get('summary')})" for t in dirty)
    names = list(ran)
    listed = ", ".join(names[:-1]) + (" and " if len(names) > 1 else "") + names[-1]
    counts = {v["launches"] for v in ran.values()}
    each = f"{counts.pop()} launches each" if len(counts) == 1 else "every launch"
    return f"clean under {listed} ({each})"
