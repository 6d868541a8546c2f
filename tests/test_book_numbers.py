"""One number per fact: a number the prose glues is the number the table beside it shows.

tests/test_book_record.py proves that every glued value is what the topic computes from its record
today; this file proves that the prose and the stored tables agree with each other, where a chapter
shows the same fact twice (a run's table and the prose that cites it). Each entry names the glued
value, the table (its caption's start) in the chapter's stored outputs, the row (column values)
and the column that must read the same. Cheap: the stored notebooks only, nothing executed."""
import json

import pytest

from fraglab import report
from nbval_run import ROOT

bs4 = pytest.importorskip("bs4", reason="beautifulsoup4 comes with jupyter-book (make book installs it)")

#: (chapter, glue name, caption start, row, column); a row's value that is a glue name stands for
#: the glued text (``"16k, causal"`` for the N and causal columns)
SAME = [
    # d = 256 in the tuning run: the prose's best point is the tuning table's row
    ("10_fa3_pipelining", "ch10-d256-best-tflops", "Table: the tuning sweep's pick",
     {"d": "256", "N": "ch10-d256-best-n"}, "TFLOP/s"),
    ("10_fa3_pipelining", "ch10-d256-best-cudnn", "Table: the tuning sweep's pick",
     {"d": "256", "N": "ch10-d256-best-n"}, "cuDNN"),
    # the headline size as the sweep measured it (the prose names both runs)
    ("10_fa3_pipelining", "ch10-sweep-headline-tma", "Table: TFLOP/s, f16",
     {"N": "4096", "d": "128", "causal": "no"}, "tma"),
    ("10_fa3_pipelining", "ch10-sweep-headline-cudnn", "Table: TFLOP/s, f16",
     {"N": "4096", "d": "128", "causal": "no"}, "cuDNN SDPA"),
    # the headline comparison: the variants' table shows its TFLOP/s at d = 128
    *[("10_fa3_pipelining", f"ch10-tflops-{v}", "Table: the four main loops",
       {"variant": v, "d": "128"}, "TFLOP/s") for v in ("nooverlap", "twostage", "threestage", "pingpong")],
]


def tables(chapter: str) -> dict[str, list[dict[str, str]]]:
    """{caption: rows as {column: text}} of every HTML table in the chapter's stored outputs."""
    nb = json.loads((ROOT / "book" / f"{chapter}.ipynb").read_text())
    out = {}
    for cell in nb["cells"]:
        for o in cell.get("outputs", []):
            html = o.get("data", {}).get("text/html")
            if not html:
                continue
            soup = bs4.BeautifulSoup("".join(html) if isinstance(html, list) else html, "html.parser")
            for t in soup.find_all("table"):
                trs = t.find_all("tr")
                if not trs:
                    continue
                head = [c.get_text(" ", strip=True) for c in trs[0].find_all(["th", "td"])]
                rows = [dict(zip(head, (c.get_text(" ", strip=True) for c in tr.find_all(["th", "td"]))))
                        for tr in trs[1:]]
                cap = t.find("caption")
                out[cap.get_text(" ", strip=True) if cap else ""] = rows
    return out


@pytest.mark.parametrize("chapter, name, caption, row, column", SAME, ids=[s[1] for s in SAME])
def test_a_glued_number_is_the_number_its_table_shows(chapter, name, caption, row, column):
    glued = report.glued_values(ROOT / "book" / f"{chapter}.ipynb")
    assert name in glued, f"{chapter} glues no {name}"
    found = {c: rows for c, rows in tables(chapter).items() if c.startswith(caption)}
    assert len(found) == 1, f"{len(found)} tables captioned {caption!r} in {chapter}"
    want = {}
    for k, v in row.items():
        if v in glued:                    # "16k, causal": N, then the mask
            n, _, mask = glued[v].partition(", ")
            want[k] = n
            if mask:
                want["causal"] = "yes" if mask == "causal" else "no"
        else:
            want[k] = v
    rows = [r for r in next(iter(found.values())) if all(r.get(k) == v for k, v in want.items())]
    assert len(rows) == 1, f"{len(rows)} rows {want} in {caption!r}"
    assert rows[0].get(column) == glued[name], \
        f"the prose says {glued[name]} ({name}), the table {rows[0].get(column)} ({caption!r}, {want}, {column})"
