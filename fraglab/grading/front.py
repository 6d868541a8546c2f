"""The grader's front end: which lab a path is, reading it, and printing a reason.

Every mistake in what was asked (a typo in the path, a book chapter, a half-saved notebook, no GPU
for ``--mode gpu``) is a :class:`UsageError` whose message says what to do; the command line
prints it in one to three lines and exits with status 2, with no traceback.
"""
from __future__ import annotations

import difflib
import json
from pathlib import Path

from .. import labs


class UsageError(Exception):
    """A mistake in what was asked: the message says what to do (exit status 2)."""


def lab_names() -> list[str]:
    """The labs' ``NN_name`` (one per solution notebook)."""
    return sorted(p.stem for p in labs.SOLUTIONS_DIR.glob("*.ipynb"))


def _lab_path(name: str) -> str:
    return f"labs/{name}.ipynb"


def _in_book(p: Path) -> bool:
    try:
        return p.resolve().parent == (labs.REPO_ROOT / "book").resolve()
    except OSError:
        return False


def resolve(path) -> tuple[Path, str]:
    """The solution notebook to grade ``path`` against, and a note: ``''`` for a lab's own name,
    ``'graded as labs/NN_name.ipynb'`` for a renamed copy (a name containing exactly one lab's
    ``NN_name``: ``my_00_hello_warp.ipynb``, ``00_hello_warp-Copy1.ipynb``)."""
    p, names = Path(path), lab_names()
    if not p.exists():
        close = difflib.get_close_matches(p.stem, names, n=1, cutoff=0.6)
        where = p.parent if p.parent.is_dir() else Path("labs")
        if close:
            raise UsageError(f"no file {path}: did you mean {where / (close[0] + '.ipynb')}?")
        raise UsageError(f"no file {path}. The labs are labs/NN_name.ipynb, NN_name one of:\n  "
                         + ", ".join(names))
    if p.is_dir() or p.suffix != ".ipynb":
        raise UsageError(f"{path} is not a notebook: give a lab, e.g. {_lab_path(names[0])}")
    if _in_book(p) and p.stem in names:
        raise UsageError(f"{path} is the book's chapter, not the lab: grade {_lab_path(p.stem)} "
                         f"(make grade LAB={_lab_path(p.stem)})")
    if p.stem in names:
        return labs.SOLUTIONS_DIR / p.name, ""
    found = [n for n in names if n in p.stem]
    if len(found) == 1:
        return labs.SOLUTIONS_DIR / f"{found[0]}.ipynb", f"graded as {_lab_path(found[0])}"
    if found:
        raise UsageError(f"{path}: its name contains several labs' names ({', '.join(found)}): "
                         "rename it to one lab's, e.g. " + _lab_path(found[0]))
    raise UsageError(f"{path} is not a lab: its name contains no lab's NN_name. Name it after its "
                     f"lab (e.g. my_{names[0]}.ipynb) or grade one of labs/NN_name.ipynb")


def read_notebook(path) -> dict:
    """The notebook at ``path``; a file that is not one (half-saved, not JSON) is a UsageError."""
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise UsageError(f"could not read {path} as a notebook (is it saved completely? "
                         f"JSONDecodeError at line {e.lineno}): save it again in Jupyter, then "
                         "grade it again") from None
    except UnicodeDecodeError:
        raise UsageError(f"could not read {path} as a notebook (not UTF-8 text)") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise UsageError(f"could not read {path} as a notebook (its JSON has no cells)")
    return nb


def markers_message(missing: list[str], every: bool, lab: str) -> str:
    """One message for an exercise region whose BEGIN/END EXERCISE markers are gone."""
    if every:
        return (f"the notebook has none of the lab's exercise markers (regions "
                f"{', '.join(missing)}): is it the lab? Grade {lab}, or a copy of it")
    return (f"the notebook has lost the markers of exercise region(s) {', '.join(missing)}: put "
            f"back their BEGIN EXERCISE / END EXERCISE lines (as in {lab})")


def reason_lines(text: str, more: str, limit: int = 600, keep: int = 300) -> list[str]:
    """The first lines of a failure's reason, ``limit`` characters at most but never cut inside
    the first ``keep``; when something is left out, the last line is ``(more: <more>)``."""
    lines = [" ".join(l.split()) for l in text.strip().splitlines()]
    lines = [l for l in lines if l]
    out: list[str] = []
    used = 0
    cut = False
    for line in lines:
        if used + len(line) <= limit:
            out.append(line)
            used += len(line)
            continue
        cut = True
        if used < keep:
            room = limit - used
            head = line[:room]
            space = head.rfind(" ")
            if space > keep - used:
                head = head[:space]
            out.append(head + " …")
        break
    if cut:
        out.append(f"(more: {more})")
    return out or ["(no reason given)"]
