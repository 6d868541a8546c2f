"""The landing page and the references (issue #27): the landing picture is the course's own figure,
drawn from the recorded layouts, and stays true to them; the roadmap lists every page of the
table of contents, the appendix included; the paper is linked where the book first cites it and
in the references; a "Fig. N" in the prose names the paper's figure as the paper's (the book's
own figures are cited with {numref}, so a bare "Fig. 2" read as the book's chapter-00 figure).

Regenerate the landing picture (after a new recording of the layouts) with:
    python tests/test_book_intro.py
"""
import hashlib
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
INTRO = ROOT / "book" / "intro.md"
REFERENCES = ROOT / "book" / "references.md"
PICTURE = ROOT / "_static" / "intro_acc16_lanes.png"
KIND, ARCH = "acc_16x16x16_f32", "sm_90"
#: The paper's canonical address: its PDF in the author's repository (the paper's footnote 2 names
#: the repository; no arXiv, HAL or DOI record of it was found).
PAPER_URL = "https://github.com/Z6BQw2/in-register-wmma-poc/blob/main/paper.pdf"


def source_tag() -> str:
    """What the picture is drawn from: the recording's arch, GPU, kind, and a digest of the table."""
    from fraglab.fragments import recording
    lay = np.ascontiguousarray(recording.recorded_layout(KIND, ARCH), dtype=np.int64)
    gpu = recording.load_recording(ARCH)["device"]["name"]
    return f"{ARCH} ({gpu}) {KIND} sha256:{hashlib.sha256(lay.tobytes()).hexdigest()[:16]}"


def draw(path: Path = PICTURE) -> Path:
    """The lane holding each element of the 16x16 f32 accumulator, as the H100 recorded it: the
    top panel of chapter 01's figure, drawn by the same function (tracer.plot_layout)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from fraglab import tracer
    from fraglab.fragments import recording
    gpu = recording.load_recording(ARCH)["device"]["name"]
    fig = tracer.plot_layout(recording.recorded_layout(KIND, ARCH), kind=KIND, what=("lane",),
                             title=f"The 16x16 f32 WMMA accumulator, traced on the {gpu.split()[1]}")
    fig.savefig(path, dpi=100, metadata={"Software": None, "fraglab-source": source_tag(),
                                         "fraglab-matplotlib": matplotlib.__version__})
    plt.close(fig)
    return path


def _png_text(path: Path) -> dict:
    from PIL import Image
    with Image.open(path) as im:
        return dict(im.text), im.size


def test_landing_picture_is_drawn_from_the_current_recording():
    assert PICTURE.is_file(), "no landing picture: run python tests/test_book_intro.py"
    text, size = _png_text(PICTURE)
    assert text.get("fraglab-source") == source_tag(), (
        "the landing picture was drawn from another recording: run python tests/test_book_intro.py")
    assert size[0] <= 800, f"{size[0]} px wide: wider than the text column"


def test_landing_picture_redraws_the_same(tmp_path):
    """Pixel for pixel where matplotlib is the version that drew it (fonts and antialiasing differ
    between versions); the size always."""
    import matplotlib
    from PIL import Image
    new = draw(tmp_path / "x.png")
    text, size = _png_text(PICTURE)
    assert _png_text(new)[1] == size
    if text.get("fraglab-matplotlib") != matplotlib.__version__:
        pytest.skip(f"drawn with matplotlib {text.get('fraglab-matplotlib')}, here {matplotlib.__version__}")
    with Image.open(PICTURE) as a, Image.open(new) as b:
        assert np.array_equal(np.asarray(a), np.asarray(b)), "run python tests/test_book_intro.py"


def test_intro_shows_the_picture():
    intro = INTRO.read_text()
    assert f"../_static/{PICTURE.name}" in intro
    m = re.search(r"```\{image\} \.\./_static/" + re.escape(PICTURE.name) + r"\n((?::\w+:.*\n)+)", intro)
    assert m and ":alt:" in m.group(1), "the picture needs alt text"


def test_roadmap_lists_every_page_of_the_toc():
    toc = re.findall(r"file: book/(\S+)", (ROOT / "_toc.yml").read_text())
    pages = [p for p in toc if p != "references"]
    intro = INTRO.read_text()
    table = intro[intro.index("| Topic | What you build | Status |"):]
    table = table[:table.index("\n\n")]
    rows = re.findall(r"^\| ((?:`[\w]+`(?:, )?)+) \|", table, re.M)
    listed = [t for r in rows for t in re.findall(r"`(\w+)`", r)]
    assert listed == pages, f"roadmap {listed} != table of contents {pages}"


def test_the_paper_is_linked_in_the_references_and_where_first_cited():
    refs = REFERENCES.read_text()
    entry = refs[refs.index("(morales2025)="):refs.index("(morales-code)=")]
    assert f"]({PAPER_URL})" in entry, "the references' entry for the paper has no link to it"
    intro = INTRO.read_text()
    first = intro.index("Accelerating")
    assert intro.index(f"]({PAPER_URL})") - first < 200, "the intro's first citation is not linked"


def _prose():
    """(where, text) of every markdown cell of the book's notebooks and every book/*.md page."""
    for p in sorted((ROOT / "book").glob("*.ipynb")):
        for k, c in enumerate(json.loads(p.read_text())["cells"]):
            if c["cell_type"] == "markdown":
                yield f"{p.name} cell {k}", "".join(c["source"])
    for p in sorted((ROOT / "book").glob("*.md")):
        yield p.name, p.read_text()


def bare_figure_mentions(text: str) -> list[str]:
    """Each "Fig. N"/"Figure N" whose sentence does not say it is the paper's (the words "paper"
    or the citation morales2025 within 45 characters before it, or "of the paper" right after)."""
    out = []
    for m in re.finditer(r"\b(?:Fig\.|Figure)\s*\d+", text):
        before, after = text[max(0, m.start() - 45):m.start()], text[m.end():m.end() + 14]
        if not (re.search(r"paper|morales2025", before) or after.startswith(" of the paper")):
            out.append(text[max(0, m.start() - 50):m.end() + 20])
    return out


def test_figure_mentions_in_the_prose_are_the_papers():
    bad = {w: hits for w, t in _prose() if (hits := bare_figure_mentions(t))}
    assert not bad, f"a 'Fig. N' that does not say it is the paper's (the book's own use {{numref}}): {bad}"


def test_the_figure_check_catches_a_bare_mention():
    assert bare_figure_mentions("1. **a permutation** (its Fig. 2): each lane swaps")
    assert not bare_figure_mentions("1. **a permutation** (the paper's Fig. 2): each lane swaps")
    assert not bare_figure_mentions("registers (Fig. 2 of the paper swaps x[2])")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    print("wrote", draw())
