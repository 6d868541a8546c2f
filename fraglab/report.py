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


class TableTooWide(ValueError):
    """A :class:`Table` whose estimated width (:func:`table_px`) is more than its box."""


class Table:
    """An HTML table (Jupyter shows it as HTML, the book renders it inside the column).

    The book's stylesheet keeps a cell on one line; ``wrap`` names the columns (header names or
    indices) whose long text may wrap, ``wrap_header=True`` lets every header wrap between
    words (a narrow column of numbers under a long header). ``max_px`` is the box the table must fit (a code cell's
    output at a 1400 px window, :data:`OUTPUT_BOX_PX`, by default): a wider table (the estimate
    :func:`table_px`) raises :class:`TableTooWide` when it is made, unless ``check=False`` (a
    table about to be split or transposed). :meth:`split` (stacked tables), :meth:`transpose`,
    ``wrap`` or shorter headers are the ways out; :func:`table` splits a table that needs it
    unless told otherwise."""

    def __init__(self, header: Sequence[str], rows: Sequence[Sequence[Any]], caption: str = "",
                 align: Sequence[str] | None = None, *, wrap: Iterable[int | str] = (),
                 wrap_header: bool = False, max_px: float | None = None, check: bool = True):
        self.header, self.rows, self.caption = list(header), [list(r) for r in rows], caption
        self.align = list(align) if align else ["left"] + ["right"] * (len(header) - 1)
        self.wrap = {self.header.index(w) if isinstance(w, str) else int(w) for w in wrap}
        self.wrap_header = bool(wrap_header)
        self.max_px = OUTPUT_BOX_PX if max_px is None else max_px
        if check and self.width_px > self.max_px:
            raise TableTooWide(self._too_wide())

    @property
    def width_px(self) -> float:
        """Estimated narrowest width of the table in the book (:func:`table_px`)."""
        return table_px(self.header, self.rows, caption=self.caption, wrap=self.wrap,
                        wrap_header=self._heads())

    def _heads(self) -> range:
        return range(len(self.header)) if self.wrap_header else range(0)

    def _too_wide(self) -> str:
        cols = column_px(self.header, self.rows, wrap=self.wrap, wrap_header=self._heads())
        widest = sorted(range(len(cols)), key=lambda j: -cols[j])[:3]
        return (f"table {self.caption[:60]!r} is about {self.width_px:.0f} px wide, more than the "
                f"{self.max_px:.0f} px column (widest columns: "
                + ", ".join(f"{self.header[j]!r} {cols[j]:.0f} px" for j in widest)
                + "): split it (Table.split), transpose it (Table.transpose), let long text "
                  "wrap (wrap=[...], wrap_header=True) or shorten the headers")

    def _repr_html_(self) -> str:
        def cell(tag, v, j):
            wraps = j in self.wrap or (tag == "th" and self.wrap_header)
            ws = ";white-space:normal" if wraps else ""
            return f'<{tag} style="text-align:{self.align[j]}{ws}">{html.escape(str(v))}</{tag}>'
        head = "".join(cell("th", h, j) for j, h in enumerate(self.header))
        body = "".join("<tr>" + "".join(cell("td", v, j) for j, v in enumerate(r)) + "</tr>"
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

    def _part(self, cols: Sequence[int], caption: str, keep: int = 1) -> "Table":
        """The table's columns ``cols``; a row with only empty cells past ``keep`` is left out."""
        rows = [r for r in self.rows if any(str(r[j]) != "" for j in cols[keep:])]
        return Table([self.header[j] for j in cols], [[r[j] for j in cols] for r in rows],
                     caption, [self.align[j] for j in cols],
                     wrap=[cols.index(j) for j in cols if j in self.wrap],
                     wrap_header=self.wrap_header, max_px=self.max_px)

    def split(self, keep: int = 1, at: Sequence[int] = ()) -> "Tables":
        """The table as stacked tables that each fit ``max_px``: every part repeats the first
        ``keep`` columns (the rows' names), then takes the other columns in order, a new part
        starting at each column index in ``at`` and wherever the next column would not fit.
        The first part carries the caption, the others "(continued)"."""
        px = column_px(self.header, self.rows, wrap=self.wrap, wrap_header=self._heads())
        room = self.max_px - sum(px[:keep])
        bounds = [keep, *sorted(j for j in set(at) if keep < j < len(px)), len(px)]
        parts = [run for lo, hi in zip(bounds, bounds[1:]) for run in _even_runs(px, lo, hi, room)]
        caps = [self.caption] + [f"{self.caption} (continued)" if self.caption else ""] * len(parts)
        return Tables([self._part([*range(keep), *c], caps[i], keep) for i, c in enumerate(parts)],
                      whole=self)

    def transpose(self, corner: str | None = None) -> "Table":
        """Rows become columns: the first column's values are the new header (after ``corner``,
        by default the old first header), each other column a row named by its header."""
        head = [self.header[0] if corner is None else corner, *(str(r[0]) for r in self.rows)]
        rows = [[h, *(r[j] for r in self.rows)] for j, h in enumerate(self.header) if j > 0]
        return Table(head, rows, self.caption, ["left"] + ["right"] * len(self.rows),
                     wrap_header=self.wrap_header, max_px=self.max_px)


def _even_runs(px: Sequence[float], lo: int, hi: int, room: float) -> list[list[int]]:
    """Columns ``lo..hi-1`` (widths ``px``) in the fewest runs of at most ``room`` px, cut
    about evenly: greedy runs of at most ``total / k`` plus one column hold at most ``k`` runs."""
    total, widest = sum(px[lo:hi]), max(px[lo:hi])
    k = max(1, -int(-total // room)) if room > 0 else hi - lo
    while True:
        cap, runs, width = min(room, total / k + widest), [[]], 0.0
        for j in range(lo, hi):
            if runs[-1] and width + px[j] > cap:
                runs.append([])
                width = 0.0
            runs[-1].append(j)
            width += px[j]
        if len(runs) <= k or k >= hi - lo:
            return runs
        k += 1


class Tables:
    """Tables shown one under the other (what :meth:`Table.split` gives); ``header``, ``rows``
    and ``caption`` are the whole table's, before it was split."""

    def __init__(self, parts: Sequence[Table], whole: Table | None = None):
        self.parts, self.whole = list(parts), whole or parts[0]
        self.header, self.rows, self.caption = self.whole.header, self.whole.rows, self.whole.caption

    def _repr_html_(self) -> str:
        return "".join(t._repr_html_() for t in self.parts)

    def __repr__(self) -> str:   # one short line, as a Table's
        return f"<{len(self.parts)} stacked tables: {len(self.rows)} rows x " \
            f"{len(self.header)} columns" + (f", {self.caption!r}" if self.caption else "") + ">"

    def to_markdown(self) -> str:
        return "\n\n".join(t.to_markdown() for t in self.parts)


def table(rows: Iterable[Mapping[str, Any]] | Sequence[Sequence[Any]], header=None, *,
          caption: str = "", align=None, wrap: Iterable[int | str] = (),
          wrap_header: bool = False, max_px: float | None = None,
          fit: str = "split") -> Table | Tables:
    """A :class:`Table` from a list of dicts (keys are the header) or from ``header`` + rows.
    A table wider than ``max_px`` (the column, by default) is never shown cut: ``fit="split"``
    stacks it as tables that fit (:meth:`Table.split`), ``fit="transpose"`` transposes it,
    ``fit="raise"`` raises :class:`TableTooWide` (a topic's builder that wants to choose)."""
    rows = list(rows)
    if header is None:
        if not rows or not isinstance(rows[0], Mapping):
            raise ValueError("give header=[...] with list rows, or rows as dicts")
        header = list(rows[0])
        rows = [[r.get(h, "") for h in header] for r in rows]
    if fit not in ("split", "transpose", "raise"):
        raise ValueError(f"fit must be 'split', 'transpose' or 'raise', got {fit!r}")
    if fit == "raise":
        return Table(header, rows, caption, align, wrap=wrap, wrap_header=wrap_header,
                     max_px=max_px)
    t = Table(header, rows, caption, align, wrap=wrap, wrap_header=wrap_header, max_px=max_px,
              check=False)
    if t.width_px <= t.max_px:
        return t
    return t.split() if fit == "split" else t.transpose()


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


# --- widths: what fits the column, estimated from the text ----------------------------------------
#
# Calibrated once (issue #27) in headless Chromium 156 (Debian), window 1400 px wide, on the
# built book at c2f70f1: a script in each page measured every table, cell and <pre>.
# - Boxes: a code cell's output area is 784 px wide, so are a prose (Markdown) table's box and an
#   output <pre>; a code cell's input <pre> is 780 px with 16 px of padding each side. Inside a
#   collapsed block (tags hide-input / hide-output: a <details>) both are 762 px.
# - Code: the theme's monospace stack falls back to DejaVu Sans Mono, 14 px: 8.43 px a character
#   (0.602 em); an input line of 88 characters fits (748 px), 86 in a collapsed block.
# - Tables: `system-ui` is DejaVu Sans, a wide face (Segoe UI, SF, Roboto are narrower, so what
#   fits here fits there). A Table's cells are 14.4 px (0.9 em) with 8.64 px padding each side,
#   headers bold, one line each (fraglab.css: nowrap); a Markdown table's cells 16 px with 8 px
#   padding, wrapping between words. A table is as wide as its columns (no borders between them),
#   each column as wide as its widest cell: a whole cell that keeps to one line, its longest word
#   where it wraps. Inline code in a Markdown table is 0.875 em of the code font plus 10 px
#   (padding and border).
# - Characters: DejaVu Sans's advances measured per character, grouped to 0.04 em (below; any
#   other character 1 em); bold is 1.1 x regular + 0.03 em. Against Chromium's width of the
#   4,606 cells of the book's 56 tables the estimate is 2% under to 7% over, 0.5% over on average;
#   of the 56 tables it puts the same 14 over their box that Chromium does.

OUTPUT_BOX_PX = 784        #: a code cell's output (a Table, an output <pre>), a prose table's box
COLLAPSED_BOX_PX = 762     #: the same inside a collapsed block (hide-input, hide-output)
INPUT_PRE_PX = 780         #: a code cell's input <pre> (its padding included)
CODE_PAD_PX = 32           #: padding of a <pre>, both sides
CODE_CHAR_PX = 8.43        #: one character of code (DejaVu Sans Mono, 14 px)
TABLE_FONT_PX, TABLE_PAD_PX = 14.4, 8.64        #: a Table's cells: font size, padding a side
PROSE_TABLE_FONT_PX, PROSE_TABLE_PAD_PX = 16.0, 8.0   #: a Markdown table's cells

#: DejaVu Sans advance widths in em, by group (Chromium's, rounded to 0.04 em).
_EM_GROUPS = {
    0.28: "'IJijl", 0.32: " ,./:;\\|\u00b7", 0.36: "-f", 0.40: "!()[]rt\u00b2\u00b9",
    0.44: '"', 0.48: "*_`\u2013", 0.52: "?sz\u207b", 0.56: "FLck", 0.60: "PTYaeovxy",
    0.64: "0123456789$EKSbdghnpqu{}\u00b5", 0.68: "BCRVXZ", 0.72: "AU", 0.76: "&DGHN",
    0.80: "OQw", 0.84: "#+<=>^~\u00d7\u2192\u2212\u2248\u2264\u2265", 0.88: "M",
    0.96: "%m", 1.00: "@W\u2014\u2026",
}
_EM = {c: em for em, chars in _EM_GROUPS.items() for c in chars}


def code_chars(box_px: float = INPUT_PRE_PX) -> int:
    """Characters of a code line that fit a <pre> ``box_px`` wide (padding included): 88 in a
    code cell's input, 86 in a collapsed one."""
    return int((box_px - CODE_PAD_PX) / CODE_CHAR_PX)


def text_px(text: str, font_px: float = TABLE_FONT_PX, bold: bool = False) -> float:
    """Estimated width in CSS pixels of ``text`` on one line in the book's sans-serif face."""
    em = sum(_EM.get(c, 1.0) for c in str(text))
    return (1.1 * em + 0.03 * len(str(text)) if bold else em) * font_px


#: Inline code in prose: its font size (em of the text around it) and its padding and border.
INLINE_CODE_EM, INLINE_CODE_PAD_PX = 0.875, 10.0


def _cell_px(text: Any, wraps: bool, font_px: float, bold: bool, markdown: bool = False) -> float:
    text = " ".join(str(text).split())
    if not markdown:
        return max((text_px(w, font_px, bold) for w in (text.split() if wraps else [text])),
                   default=0.0)
    units, cur = [], []              # words (no break inside), each a list of (piece, is_code)
    for part in re.split(r"(`[^`]*`)", text):
        code = len(part) >= 2 and part[0] == part[-1] == "`"
        for k, piece in enumerate((part[1:-1] if code else part).split(" ")):
            if k and wraps:
                units.append(cur)
                cur = []
            elif k:
                cur.append((" ", code))
            if piece:
                cur.append((piece, code))
    units.append(cur)
    code_px = CODE_CHAR_PX / 14.0 * INLINE_CODE_EM * font_px
    return max((sum(len(p) * code_px + INLINE_CODE_PAD_PX if c else text_px(p, font_px, bold)
                    for p, c in u) for u in units), default=0.0)


def column_px(header: Sequence[Any], rows: Sequence[Sequence[Any]], *, wrap: Iterable[int] = (),
              wrap_header: Iterable[int] = (), font_px: float = TABLE_FONT_PX,
              pad_px: float = TABLE_PAD_PX, markdown: bool = False) -> list[float]:
    """Estimated width of each column: its widest cell (the header bold), padding included.
    A column in ``wrap`` (indices) breaks between words, so its longest word counts; so does a
    header in ``wrap_header``. ``markdown``: text in backticks is inline code."""
    wrap, heads = set(wrap), set(wrap) | set(wrap_header)
    return [max([_cell_px(h, j in heads, font_px, True, markdown)]
                + [_cell_px(r[j], j in wrap, font_px, False, markdown) for r in rows if j < len(r)])
            + 2 * pad_px for j, h in enumerate(header)]


def table_px(header: Sequence[Any], rows: Sequence[Sequence[Any]], *, caption: str = "",
             wrap: Iterable[int] = (), wrap_header: Iterable[int] = (),
             font_px: float = TABLE_FONT_PX, pad_px: float = TABLE_PAD_PX,
             markdown: bool = False) -> float:
    """Estimated narrowest width in CSS pixels at which the table shows all its columns: the sum
    of :func:`column_px` (the caption wraps, so only its longest word counts). Defaults: a
    :class:`Table` as the book renders it; a Markdown table: ``markdown_table_px``."""
    cols = column_px(header, rows, wrap=wrap, wrap_header=wrap_header, font_px=font_px,
                     pad_px=pad_px, markdown=markdown)
    return max(sum(cols), _cell_px(caption, True, font_px, True))


def markdown_table_px(header: Sequence[str], rows: Sequence[Sequence[str]]) -> float:
    """:func:`table_px` of a Markdown table in the prose (cells wrap between words; text in
    backticks is inline code)."""
    return table_px(header, rows, wrap=range(len(header)), font_px=PROSE_TABLE_FONT_PX,
                    pad_px=PROSE_TABLE_PAD_PX, markdown=True)


# --- peaks: throughput in context -----------------------------------------------------------------

#: Datasheet peaks of the course's GPU (NVIDIA H100 SXM5 80 GB datasheet): dense tensor TFLOP/s
#: (the 2:4-sparse figures are twice these) and HBM3 bandwidth.
H100_SXM = {"dense_f16_tflops": 989.4, "dense_bf16_tflops": 989.4, "dense_tf32_tflops": 494.7,
            "hbm_tb_s": 3.35}


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
