"""The book as a reader sees it, read from the built HTML (issue 13's acceptance checks): code
outputs fit the text column, every formula rendered (no stray `$`), MathJax served by the build
itself, and every chapter opens with its objectives and ends by linking its lab.

The HTML is `_build/html` when it is newer than every source of the book (what `make book` left);
otherwise the test builds it there once (about a minute; nothing is executed)."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fraglab import report
from nbval_run import ROOT

bs4 = pytest.importorskip("bs4", reason="beautifulsoup4 comes with jupyter-book (make book installs it)")

HTML = ROOT / "_build" / "html"
CHAPTERS = sorted(p.stem for p in (ROOT / "book").glob("*.ipynb"))
SOURCES = [*(ROOT / "book").glob("*.ipynb"), *(ROOT / "book").glob("*.md"), ROOT / "_config.yml",
           ROOT / "_toc.yml", *(ROOT / "_static").rglob("*"), *(ROOT / "_extra").rglob("*")]


@pytest.fixture(scope="module")
def html_dir():
    newest = max(p.stat().st_mtime for p in SOURCES if p.is_file())
    stamp = HTML / "index.html"
    if not stamp.is_file() or stamp.stat().st_mtime < newest or \
            not all((HTML / "book" / f"{c}.html").is_file() for c in CHAPTERS):
        exe = shutil.which("jupyter-book", path=str(Path(sys.executable).parent)) or shutil.which("jupyter-book")
        if exe is None:
            pytest.skip("jupyter-book is not installed in this environment (make book installs it)")
        r = subprocess.run([exe, "build", str(ROOT), "--keep-going"], capture_output=True, text=True,
                           timeout=900)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    return HTML


def page(html_dir, name):
    return bs4.BeautifulSoup((html_dir / "book" / f"{name}.html").read_text(), "html.parser")


def article(soup):
    return soup.find("article") or soup.find("main") or soup


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_code_outputs_fit_the_column(html_dir, chapter):
    """No line of a code output is wider than report.CHAR_BUDGET monospace characters (what the
    785 px column shows without cutting); long outputs belong in tables or collapsed listings
    (report.listing: they scroll inside the column, so they are exempt)."""
    wide = []
    for out in article(page(html_dir, chapter)).select("div.cell_output"):
        for pre in out.find_all("pre"):
            if pre.find_parent(class_="fraglab-listing"):
                continue
            wide += [l for l in report.wide_lines(pre.get_text())]
    assert not wide, f"{len(wide)} output lines over {report.CHAR_BUDGET} characters, e.g. {wide[0]!r}"


@pytest.mark.parametrize("name", [*CHAPTERS, "references"])
def test_no_unrendered_math(html_dir, name):
    """A `$` left in the text is TeX the parser did not take as math (it shows as raw TeX)."""
    path = html_dir / "book" / f"{name}.html"
    if not path.is_file():
        pytest.skip(f"{name} is not built")
    body = article(bs4.BeautifulSoup(path.read_text(), "html.parser"))
    for tag in body.find_all(["pre", "code", "script", "style", "math"]):
        tag.decompose()
    for tag in body.select(".math, .cell_input, .cell_output"):
        tag.decompose()
    text = body.get_text(" ")
    hits = [text[max(0, m.start() - 60):m.end() + 60] for m in re.finditer(r"\$", text)]
    assert not hits, f"raw `$` in the text: {hits[:3]}"


def test_math_is_served_locally(html_dir):
    """MathJax is served by the build (_extra/mathjax -> /mathjax, with its fonts), and no page
    loads a script or a stylesheet from another host."""
    mathjax = html_dir / "mathjax" / "tex-chtml-full.js"
    assert mathjax.is_file(), "MathJax is not in the build"
    assert any((html_dir / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff"))
    uses_math = 0
    for p in [html_dir / "index.html", *sorted((html_dir / "book").glob("*.html"))]:
        soup = bs4.BeautifulSoup(p.read_text(), "html.parser")
        remote = [t.get("src") or t.get("href") for t in soup.find_all(["script", "link"])
                  if re.match(r"(https?:)?//", t.get("src") or (t.get("href") if t.name == "link"
                                                                  and "stylesheet" in (t.get("rel") or []) else "") or "")]
        assert not remote, f"{p.name} loads {remote}"
        srcs = [t.get("src") or "" for t in soup.find_all("script")]
        if any("mathjax" in s.lower() for s in srcs):
            uses_math += 1
            assert any(s.split("?")[0].endswith("/mathjax/tex-chtml-full.js") for s in srcs), srcs
    assert uses_math, "no page loads MathJax: is mathjax_path set?"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_has_objectives_and_links_its_lab(html_dir, chapter):
    body = article(page(html_dir, chapter))
    titles = [t.get_text(" ", strip=True) for t in body.select(".admonition-title")]
    assert "Objectives" in titles, f"no 'Objectives' admonition (titles: {titles})"
    assert "What you measured" in titles, f"no 'What you measured' admonition (titles: {titles})"
    text = body.get_text(" ")
    assert "Prerequisites" in text, "the objectives name no prerequisites"
    if not re.match(r"\d\d_", chapter):
        return                                    # an appendix (book/appendix_*) has no lab
    links = {a.get("href") for a in body.find_all("a")}
    want = {report.lab_url(chapter, "colab"), report.lab_url(chapter, "github")}
    assert links & want, f"no link to the lab ({sorted(want)})"
    assert (ROOT / "labs" / f"{chapter}.ipynb").is_file(), "the linked lab does not exist"


def test_launch_buttons_and_one_search_box(html_dir):
    soup = page(html_dir, CHAPTERS[0])
    colab = [a["href"] for a in soup.find_all("a", href=True) if "colab.research.google.com" in a["href"]]
    assert colab and all("/./" not in h for h in colab), colab
    assert not soup.select("header#pst-header .search-button-field"), "a second search box in the top bar"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_figures_have_numbered_captions_and_alt_text(html_dir, chapter):
    """Every image a code cell shows sits in a numbered figure with a caption and real alt text
    (report.figure_metadata on the cell)."""
    bad = []
    for img in article(page(html_dir, chapter)).select("div.cell_output img"):
        fig = img.find_parent("figure")
        alt = (img.get("alt") or "").strip()
        if fig is None or fig.find("figcaption") is None or not fig.select(".caption-number"):
            bad.append(f"no numbered caption: {alt[:50]!r}")
        elif not alt or alt.startswith("<Figure") or alt.endswith(".png"):
            bad.append(f"no alt text: {fig.find('figcaption').get_text(' ', strip=True)[:60]!r}")
    assert not bad, f"{len(bad)} figures: {bad[:3]}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_setup_cell_code_is_hidden(html_dir, chapter):
    """The setup cell (identical in every notebook) carries `remove-input`: the page shows its
    one-line `[gpu] ...` output, not its 15 lines of code."""
    body = article(page(html_dir, chapter))
    sources = [pre.get_text() for pre in body.select("div.cell_input pre")]
    assert not any("Setup: make the course" in s for s in sources), "the setup cell's code is shown"


#: Longest output a page shows open (the issue found dumps of 51 to 117 lines); longer ones are
#: collapsed (tag `hide-output`, or a closed report.listing), one click away.
MAX_OPEN_LINES = 50


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_long_outputs_are_collapsed(html_dir, chapter):
    long = []
    for out in article(page(html_dir, chapter)).select("div.cell_output"):
        for pre in out.find_all("pre"):
            n = len(pre.get_text().rstrip("\n").splitlines())
            details = pre.find_parent("details")
            collapsed = (details is not None and not details.has_attr("open")) or \
                pre.find_parent(class_="tag_hide-output") is not None
            if n > MAX_OPEN_LINES and not collapsed:
                long.append(f"{n} lines: {pre.get_text()[:60]!r}")
    assert not long, long[:3]
