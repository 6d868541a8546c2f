"""Labs are their solution notebooks with the exercise regions cut out, mechanically.

In a solution notebook, an exercise is a region of a code cell between two marker lines::

    # BEGIN EXERCISE 1
    #| raise NotImplementedError("Exercise 1: ...")     <- stub line: kept in the lab, uncommented
    v = values.copy()                                    <- solution line: cut from the lab
    # END EXERCISE

``//`` works as the comment leader too (for CUDA source held in a Python string), so ``//|`` marks
a stub line there. Everything outside the regions is copied unchanged, except the outputs of code
cells: a lab opens as a learner meets it, with no ``PASS`` line before anything has run. Grading
(:mod:`fraglab.grading`) takes the checks and their expected outputs from the solution.

    python -m fraglab.labs build   # write labs/*.ipynb from solutions/*.ipynb
    python -m fraglab.labs check   # fail if a lab is not exactly what build would write
    python -m fraglab.labs setup   # write SETUP_CELL into the first code cell of every notebook
"""
from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path

from . import __version__
from .toolchain import REPO_ROOT

SOLUTIONS_DIR = REPO_ROOT / "solutions"
LABS_DIR = REPO_ROOT / "labs"

BEGIN = re.compile(r"^\s*(#|//)\s*BEGIN EXERCISE\s+(\S+)")
END = re.compile(r"^\s*(#|//)\s*END EXERCISE\b")
STUB = re.compile(r"^(\s*)(#|//)\| ?(.*)$")


#: The first code cell of every notebook (book, labs, solutions, the chapter template); a test
#: checks they are identical (``python -m fraglab.labs setup`` writes it into every notebook). On
#: Colab it clones the course at this package's version (``fraglab.__version__``, the one home of
#: the version) and, when that tag does not exist (yet), the default branch, saying so in one line.
SETUP_CELL = """\
# Setup: make the course's `fraglab` package importable (on Colab, fetch the course first).
import pathlib, subprocess, sys
here = pathlib.Path.cwd().resolve()
root = next((p for p in (here, *here.parents) if (p / "fraglab" / "__init__.py").is_file()), None)
if root is None and "google.colab" in sys.modules:
    root = pathlib.Path("/content/fraglab-course")
    if not root.exists():
        # the course's address (_config.yml) and the version this notebook belongs to
        git = ["git", "clone", "-q", "--depth", "1", "https://github.com/fraglab-course/fraglab"]
        pinned = subprocess.run([*git, "--branch", "@VERSION@", str(root)],
                                capture_output=True, text=True)
        if pinned.returncode:   # no such tag (yet): take the default branch, and say so
            why = next((l for l in pinned.stderr.splitlines() if l.startswith("fatal")), "")
            print(f"Could not clone version @VERSION@ ({why}): cloning the default branch instead.")
            subprocess.run([*git, str(root)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-r",
                    str(root / "requirements-colab.txt")], check=True)
if root is None:
    raise RuntimeError("Open this notebook from a clone of the course (see its README).")
sys.path.insert(0, str(root))
import fraglab
print(fraglab.status_line())""".replace("@VERSION@", "v" + __version__)


class LabFormatError(ValueError):
    """A solution notebook's exercise markers are malformed."""


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def regions(text: str, where: str = "") -> list[tuple[str, int, int]]:
    """``(exercise id, begin line, end line)`` of each region in a cell's text (0-based lines)."""
    out, open_at, open_id = [], None, None
    for i, line in enumerate(text.splitlines()):
        if BEGIN.match(line):
            if open_at is not None:
                raise LabFormatError(f"{where}: line {i + 1}: BEGIN EXERCISE inside exercise {open_id}")
            open_at, open_id = i, BEGIN.match(line).group(2)
        elif END.match(line):
            if open_at is None:
                raise LabFormatError(f"{where}: line {i + 1}: END EXERCISE without BEGIN")
            out.append((open_id, open_at, i))
            open_at = None
    if open_at is not None:
        raise LabFormatError(f"{where}: exercise {open_id} has no END EXERCISE")
    return out


def cut(text: str, where: str = "") -> str:
    """The lab version of a cell's text: inside each region, only the stub lines, uncommented."""
    lines = text.splitlines(keepends=True)
    drop: set[int] = set()
    replace: dict[int, str] = {}
    for _, b, e in regions(text, where):
        for i in range(b + 1, e):
            m = STUB.match(lines[i].rstrip("\n"))
            if m:
                replace[i] = m.group(1) + m.group(3) + ("\n" if lines[i].endswith("\n") else "")
            else:
                drop.add(i)
    return "".join(replace.get(i, l) for i, l in enumerate(lines) if i not in drop)


def make_lab(solution: dict, where: str = "notebook") -> dict:
    """The lab notebook (a new dict) for a solution notebook dict."""
    lab = copy.deepcopy(solution)
    ids: list[str] = []
    for k, cell in enumerate(lab["cells"]):
        text = _source(cell)
        found = regions(text, f"{where} cell {k}")
        if found and cell["cell_type"] != "code":
            raise LabFormatError(f"{where} cell {k}: exercise markers belong in code cells")
        if found:
            ids += [r[0] for r in found]
            cell["source"] = cut(text, f"{where} cell {k}")
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    if not ids:
        raise LabFormatError(f"{where}: no exercise regions; a lab needs at least one")
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise LabFormatError(f"{where}: exercise ids used twice: {sorted(dup)}")
    return lab


def read(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def write(path: Path, nb: dict) -> None:
    Path(path).write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def build(check_only: bool = False) -> list[str]:
    """Write (or, with ``check_only``, compare) every lab. Returns the names of stale labs."""
    stale = []
    for sol in sorted(SOLUTIONS_DIR.glob("*.ipynb")):
        lab_path = LABS_DIR / sol.name
        lab = make_lab(read(sol), str(sol.relative_to(REPO_ROOT)))
        if not lab_path.exists() or read(lab_path) != lab:
            stale.append(sol.name)
            if not check_only:
                write(lab_path, lab)
    return stale


def setup_notebooks() -> list[Path]:
    """The notebooks whose first code cell is :data:`SETUP_CELL`: the book's, solutions, labs."""
    return sorted(p for d in ("book", "solutions", "labs") for p in (REPO_ROOT / d).glob("*.ipynb"))


def write_setup_cells(paths=None) -> list[str]:
    """Set the first code cell's text of each notebook (default :func:`setup_notebooks`) to
    :data:`SETUP_CELL`, one notebook at a time (read, change that cell, write back at once: others
    may be editing other cells). Its metadata (``remove-input``) and outputs stay. Returns the
    notebooks that changed."""
    changed = []
    for path in (setup_notebooks() if paths is None else map(Path, paths)):
        nb = read(path)
        cell = next(c for c in nb["cells"] if c["cell_type"] == "code")
        if _source(cell) != SETUP_CELL:
            cell["source"] = SETUP_CELL.splitlines(keepends=True)
            write(path, nb)
            changed.append(path.name if path.parent.name == "" else f"{path.parent.name}/{path.name}")
    return changed


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv not in (["build"], ["check"], ["setup"]):
        print(__doc__)
        return 2
    if argv == ["setup"]:
        print("setup cell written into: " + (", ".join(write_setup_cells()) or "nothing"))
        return 0
    stale = build(check_only=argv == ["check"])
    if argv == ["check"] and stale:
        print("labs differ from their solutions outside the exercise regions (run "
              "`python -m fraglab.labs build`): " + ", ".join(stale))
        return 1
    print("rebuilt: " + (", ".join(stale) or "nothing") if argv == ["build"] else "all labs up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
