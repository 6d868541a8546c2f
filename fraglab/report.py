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
