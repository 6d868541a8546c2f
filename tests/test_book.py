"""The book: every chapter listed, executed on a GPU with outputs committed, builds without
warnings; on a GPU machine its chapters pass nbval."""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nbval_run import ROOT, refused_here, run_nbval

CHAPTERS = sorted((ROOT / "book").glob("*.ipynb"))
TOC = (ROOT / "_toc.yml").read_text()


def draft(page: Path) -> str | None:
    """Why a chapter is a draft (notebook metadata ``fraglab.draft``), or None."""
    return json.loads(page.read_text())["metadata"].get("fraglab", {}).get("draft")


def executed_on(page: Path) -> str:
    """Chapters (book/NN_*.ipynb) are executed on a GPU; an appendix about the CPU interpreter
    (book/appendix_*.ipynb) on the CPU, and nbval re-runs it in that mode. So is a draft, a
    chapter that `python -m fraglab.chapter new` wrote and executed on the CPU, until
    `python -m fraglab.chapter bench NN` executes it on a GPU (which ends the draft)."""
    return "gpu" if re.match(r"\d\d_", page.stem) and not draft(page) else "cpu"


def test_a_draft_says_how_it_ends():
    for chapter in CHAPTERS:
        if draft(chapter):
            assert f"python -m fraglab.chapter bench {chapter.stem[:2]}" in draft(chapter), chapter.name


def test_toc_lists_exactly_the_chapters():
    listed = set(re.findall(r"file:\s*(\S+)", TOC))
    on_disk = {f"book/{p.stem}" for p in CHAPTERS} | {f"book/{p.stem}" for p in (ROOT / "book").glob("*.md")}
    assert listed | {"book/intro"} == on_disk, f"toc {sorted(listed)} vs files {sorted(on_disk)}"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_was_executed_on_a_gpu(chapter):
    nb = json.loads(chapter.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(c.get("outputs") for c in code[:1]), "not executed: the setup cell has no output"
    first = "".join(code[0]["outputs"][0].get("text", ""))
    mode = executed_on(chapter)
    assert first.startswith(f"[{mode}]"), f"not executed in {mode} mode: {first!r}"
    for c in code:
        for o in c.get("outputs", []):
            assert o.get("output_type") != "error", f"a stored error output: {o.get('evalue')}"
    # nbval takes a cell with outputs and no execution count for one never run, and fails it
    # ("Unrun reference cell has outputs"): a cell executed alone must be numbered too
    unrun = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
             and c.get("outputs") and c.get("execution_count") is None]
    assert not unrun, f"cells {unrun} have outputs and no execution count"


def _readable_text(page: Path) -> str:
    """What a reader sees: markdown, code and text outputs (not images' base64 data)."""
    if page.suffix != ".ipynb":
        return page.read_text()
    parts = []
    for c in json.loads(page.read_text())["cells"]:
        parts.append("".join(c["source"]))
        for o in c.get("outputs", []):
            parts.append("".join(o.get("text", "")))
            for mime, data in o.get("data", {}).items():
                if mime.startswith("text/"):
                    parts.append("".join(data))
    return "\n".join(parts)


@pytest.mark.parametrize("page", [*CHAPTERS, *(ROOT / "book").glob("*.md")],
                         ids=lambda p: p.name)
def test_no_placeholders(page):
    text = _readable_text(page)
    for pattern in (r"\bTODO\b", r"\bFIXME\b", r"\bTBD\b", r"\bXXX\b", r"[Pp]laceholder",
                    r"[Ll]orem ipsum"):
        m = re.search(pattern, text)
        assert m is None, f"{page.name} contains {m.group(0)!r}: {text[max(0, m.start() - 80):m.end() + 80]!r}"
    if page.suffix == ".ipynb":  # a paragraph left as a marker, like RESULTS_HERE
        for c in json.loads(page.read_text())["cells"]:
            if c["cell_type"] == "markdown":
                src = "".join(c["source"])
                assert not re.fullmatch(r"\s*[A-Z][A-Z_]{5,}\s*", src.split("\n\n")[0]), src[:80]


@pytest.mark.slow
def test_book_builds_without_warnings(tmp_path):
    exe = shutil.which("jupyter-book", path=str(Path(sys.executable).parent)) or shutil.which("jupyter-book")
    if exe is None:
        pytest.skip("jupyter-book is not installed in this environment (make test installs it)")
    r = subprocess.run([exe, "build", str(ROOT), "--warningiserror", "--keep-going",
                        "--path-output", str(tmp_path)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    for p in CHAPTERS:
        assert (tmp_path / "_build" / "html" / "book" / f"{p.stem}.html").is_file()


@pytest.mark.nbval
@pytest.mark.gpu
@pytest.mark.parametrize("chapter", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_passes_nbval_on_the_gpu(chapter):
    why = refused_here(chapter.stem)
    if why:
        pytest.skip(why)
    rc, failed, out = run_nbval(chapter, executed_on(chapter))
    assert rc == 0 and not failed, out[-4000:]


NOTEBOOKS = sorted(p for d in ("book", "labs", "solutions") for p in (ROOT / d).glob("*.ipynb"))


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[f"{p.parent.name}/{p.stem}" for p in NOTEBOOKS])
def test_every_code_cell_parses(nb):
    """Catches a broken cell on any machine, before a GPU run finds it."""
    import ast
    cells = [c for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code"]
    for i, c in enumerate(cells):
        src = "".join(c["source"])
        src = "\n".join(l for l in src.splitlines() if not l.lstrip().startswith(("%", "!")))
        try:
            ast.parse(src)
        except SyntaxError as e:
            raise AssertionError(f"code cell {i}: {e}") from None
