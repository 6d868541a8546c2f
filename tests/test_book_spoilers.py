"""No lab answer in the book: no exercise region's solution (its lines, comments and blanks aside)
appears in a page's sources or stored outputs - as a listing with line numbers, a diff or plain
text - unless the cell that shows it is collapsed (``hide-input`` / ``hide-output``) and the
markdown cell before it links the lab and says "Spoiler". Read from the notebooks, not from a
built book: a fraction of a second."""
import json
import re

import pytest

from fraglab.grading import build
from nbval_run import ROOT

#: A listing's line prefix: "  31 | ", a diff's "+"/"-", a prompt.
_PREFIX = re.compile(r"^\s*(?:\d+\s*[|:]\s?|[+\-](?![+\-=])\s?|>>>\s?|\.\.\.\s)")


def code_lines(text: str) -> list[str]:
    """Lines of code as a reader compares them: listing prefixes, comments and blank lines
    gone, blanks collapsed (``#pragma`` kept: a CUDA directive, not a Python comment)."""
    out = []
    for line in text.splitlines():
        s = _PREFIX.sub("", line).strip()
        if not s.startswith("#pragma"):
            s = re.sub(r"(//|#).*$", "", s).strip()
        if s:
            out.append(" ".join(s.split()))
    return out


def answers() -> list[tuple[str, str, list[str]]]:
    """(lab, region, its solution's code lines) of every region of two lines or more."""
    out = []
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        for rid, body in build.region_bodies(build.read(path)).items():
            kept = [l for l in body.splitlines() if not l.strip().startswith(("#|", "//|"))]
            lines = code_lines("\n".join(kept))
            if len(lines) >= 2:
                out.append((path.stem, rid, lines))
    return out


def cells(path):
    """(index, cell, what the page shows of it: source and stored text outputs)."""
    if path.suffix == ".md":
        yield 0, {"cell_type": "markdown", "metadata": {}}, path.read_text()
        return
    for k, c in enumerate(json.loads(path.read_text())["cells"]):
        shown = "".join(c["source"])
        for o in c.get("outputs", []):
            shown += "\n" + "".join(o.get("text", ""))
            for kind, value in o.get("data", {}).items():
                if kind.startswith("text/"):
                    shown += "\n" + "".join(value)
        yield k, c, shown


PAGES = sorted(p for p in (ROOT / "book").iterdir() if p.suffix in (".ipynb", ".md"))


def shown_answers(path) -> list[tuple[int, str, str]]:
    """(cell, lab, region) of every answer a page shows."""
    found = []
    keys = answers()
    all_cells = list(cells(path))
    for k, c, shown in all_cells:
        text = "\n" + "\n".join(code_lines(shown)) + "\n"
        for lab, rid, lines in keys:
            if "\n" + "\n".join(lines) + "\n" in text:
                found.append((k, lab, rid))
    return found


def test_the_matcher_sees_a_listing_with_line_numbers_and_a_diff():
    body = "    for (int o = 16; o > 0; o /= 2)  // the butterfly\n        v += f(v, o);\n"
    want = code_lines(body)
    listing = " 30 |     for (int o = 16; o > 0; o /= 2)\n 31 |         v += f(v, o);\n"
    diff = "+    for (int o = 16; o > 0; o /= 2)\n+        v += f(v, o);\n"
    for shown in (listing, diff, body):
        assert "\n".join(want) in "\n".join(code_lines(shown))


@pytest.mark.parametrize("path", PAGES, ids=[p.name for p in PAGES])
def test_no_page_shows_a_lab_answer_unless_collapsed_after_a_spoiler_note(path):
    if path.suffix != ".ipynb":
        assert not shown_answers(path), f"{path.name} shows a lab's answer"
        return
    nb = json.loads(path.read_text())
    for k, lab, rid in shown_answers(path):
        cell = nb["cells"][k]
        tags = cell.get("metadata", {}).get("tags", [])
        before = next((nb["cells"][j] for j in range(k - 1, -1, -1)
                       if nb["cells"][j]["cell_type"] == "markdown"), None)
        note = "".join(before["source"]) if before else ""
        where = f"{path.name} cell {k} shows the answer to {lab} region {rid}"
        assert cell["cell_type"] == "code" and {"hide-input", "hide-output"} & set(tags), \
            f"{where}: collapse it (tag hide-output or hide-input) or leave it out"
        assert "Spoiler" in note and f"labs/{lab}.ipynb" in note, \
            f"{where}: the markdown before it must link the lab and say 'Spoiler'"
