"""A new chapter from one command, and a chapter's GPU run recorded and executed by another.

    python -m fraglab.chapter new NN name [--title TEXT] [--list] [--no-execute]
    python -m fraglab.chapter bench NN [--out DIR] [--quick] [--dry-run]
    python -m fraglab.chapter list [--bench]
    python -m fraglab.chapter boxes [--check]

``new`` writes the minimal files of topic ``NN_name`` from the template tree
``fraglab/chapter_template/`` (its README says how a template reads): kernel, package (wrappers,
Problems, report, lab checks, bench, command line), chapter, solution, lab (cut from the solution
by :mod:`fraglab.labs`), tests, wrong answers and a cheat for the lab's exercise; and it adds the
topic to ``_toc.yml``, to CONTRIBUTING.md's module map and to the roadmap in ``book/intro.md``.
The example it writes is a real, small chapter (a warp scan with one graded CUDA exercise) that
passes the test suite as it is. It then executes the solution and the chapter on the CPU (the PTX
interpreter): the chapter stays a *draft* (notebook metadata ``fraglab.draft``) until it is
executed on a GPU. ``--list`` prints the files it would write (and edit), writing nothing.

``bench`` is the chapter's GPU step: ``python -m fraglab.<name> bench --out DIR/bench_<name>``,
then its ``results.json`` (and ``log.txt``) copied into ``book/data/NN_name/``, then
``python -m fraglab.notebooks book/NN_name.ipynb`` (executing on a GPU ends a draft).
``--dry-run`` prints those steps and runs nothing; ``--quick`` runs the bench's quick version and
records nothing.

``list`` prints the book's topics (``NN_name``), with ``--bench`` those with a ``bench`` module
(what ``.ci/gpu bench`` runs).

``boxes`` writes the "What runs where" box (:mod:`fraglab.runs_where`, the one home of those
facts) into every chapter and solution (a markdown cell right after the title and objectives,
replaced where it is already), then cuts the labs again; ``--check`` writes nothing and fails
when a box differs from what the facts render.
"""
from __future__ import annotations

import importlib
import json
import keyword
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from . import labs, report, runs_where
from .tools import REPO_ROOT

TEMPLATE_DIR = Path(__file__).resolve().parent / "chapter_template"
#: Files ``new`` edits (one entry each for the new topic).
EDITED = ("_toc.yml", "CONTRIBUTING.md", "book/intro.md")
#: The lab, which ``new`` cuts from the solution (no template of its own).
LAB = "labs/{topic}.ipynb"
#: Names the template's notebooks use for something else.
RESERVED = {"np", "plt", "rng", "record", "glued", "lab", "grade", "launch", "report", "toolchain",
            "x", "y", "fig", "ax", "rows", "arch", "case", "ran", "fraglab", "chapter"}
#: The bench's output folder (as ``.ci/gpu``'s ``$OUT``; git ignores it).
BENCH_OUT = "_gpu_out"


class ChapterError(ValueError):
    """A chapter's number or name is unusable, or the repository lacks what a step needs."""


# --- names and files -------------------------------------------------------------------------------

def topics(bench: bool = False, root: Path = REPO_ROOT) -> list[str]:
    """The book's topics (``NN_name``), in order; ``bench``: only those with a bench module."""
    found = sorted(p.stem for p in (root / "book").glob("[0-9][0-9]_*.ipynb"))
    return [t for t in found if not bench or (root / "fraglab" / t[3:] / "bench.py").is_file()]


def topic_of(nn: str, root: Path = REPO_ROOT) -> str:
    """The topic ``NN_name`` with number ``nn``."""
    found = [t for t in topics(root=root) if t[:2] == nn]
    if not found:
        raise ChapterError(f"no chapter {nn}: the book has {', '.join(topics(root=root))}")
    return found[0]


def check_new(nn: str, name: str, root: Path = REPO_ROOT) -> str:
    """``NN_name``, after checking that a new topic may take this number and name."""
    if not re.fullmatch(r"\d\d", nn):
        raise ChapterError(f"the number must be two digits (e.g. 11), got {nn!r}")
    if not re.fullmatch(r"[a-z][a-z0-9_]*[a-z0-9]", name) or "__" in name:
        raise ChapterError(f"the name must be a Python module name in lowercase (e.g. warp_scan), "
                           f"got {name!r}")
    if keyword.iskeyword(name) or name in RESERVED:
        raise ChapterError(f"{name!r} is a name the notebooks use for something else: choose another")
    taken = [t for t in topics(root=root) if t[:2] == nn or t[3:] == name]
    if taken:
        raise ChapterError(f"chapter {taken[0]} has this number or name already")
    topic = f"{nn}_{name}"
    clash = [p for p, _ in files(nn, name) if (root / p).exists() and p not in EDITED]
    clash += [f"fraglab/{name}{s}" for s in (".py", "") if (root / "fraglab" / f"{name}{s}").exists()]
    if clash:
        raise ChapterError(f"{topic}: {clash[0]} exists already")
    return topic


def _target(template: str, topic: str, name: str) -> str:
    """The repository path a template (its path under TEMPLATE_DIR) becomes."""
    path = template[:-len(".tmpl")]
    if path.endswith(".nb"):
        path = path[:-len(".nb")] + ".ipynb"
    return "/".join(part.replace("TOPIC", topic).replace("NAME", name) for part in path.split("/"))


def templates() -> list[str]:
    """Every template, as its path under :data:`TEMPLATE_DIR`."""
    return sorted(p.relative_to(TEMPLATE_DIR).as_posix() for p in TEMPLATE_DIR.rglob("*.tmpl"))


def files(nn: str, name: str) -> list[tuple[str, str]]:
    """``(path, what new does to it)`` for every file of topic ``nn_name``: ``written`` (from a
    template), ``cut from the solution`` (the lab) or ``edited``."""
    topic = f"{nn}_{name}"
    out = [(_target(t, topic, name), "written") for t in templates()]
    out.append((LAB.format(topic=topic), "cut from the solution"))
    return sorted(out) + [(p, "edited") for p in EDITED]


# --- writing a new chapter -------------------------------------------------------------------------

def values(nn: str, name: str, title: str, root: Path = REPO_ROOT) -> dict[str, str]:
    """What the templates' ``@@KEY@@`` stand for."""
    topic = f"{nn}_{name}"
    config = root / "_config.yml"
    url, branch = report.course_address(config)
    return {"NN": nn, "N": str(int(nn)), "NAME": name, "TOPIC": topic, "TITLE": title,
            "COLAB_LAB": report.lab_url(topic, "colab", config),
            "GITHUB_LAB": report.lab_url(topic, "github", config),
            "BOOK": report.book_url(topic, config)}


def render(text: str, vals: dict[str, str]) -> str:
    for key, value in vals.items():
        text = text.replace(f"@@{key}@@", value)
    text = text.replace("@@SETUP@@", labs.SETUP_CELL)
    left = re.search(r"@@\w+@@", text)
    if left:
        raise ChapterError(f"the template uses {left.group(0)}, which nothing fills in")
    return text


_CELL = re.compile(r"^%% (metadata|markdown|code)\s*(.*)$")


def notebook(text: str) -> dict:
    """A notebook from a ``.nb.tmpl`` text (cells started by ``%% markdown`` / ``%% code``, each
    optionally followed by its metadata as JSON; ``%% metadata {...}`` for the notebook's)."""
    meta, cells = {}, []
    for line in text.splitlines(keepends=True):
        m = _CELL.match(line.rstrip("\n"))
        if m and m.group(1) == "metadata":
            meta = json.loads(m.group(2))
        elif m:
            cells.append({"cell_type": m.group(1), "metadata": json.loads(m.group(2) or "{}"),
                          "source": []})
            if m.group(1) == "code":
                cells[-1].update(execution_count=None, outputs=[])
        elif cells:
            cells[-1]["source"].append(line)
        elif line.strip():
            raise ChapterError(f"text before the first cell: {line.strip()[:60]!r}")
    for c in cells:
        c["source"] = "".join(c["source"]).strip("\n").splitlines(keepends=True)
    return {"cells": cells, "metadata": meta, "nbformat": 4, "nbformat_minor": 4}


def _plain(title: str) -> str:
    """``title`` as a YAML scalar."""
    return title if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9 ,.()'-]*", title) else json.dumps(title)


def add_to_toc(text: str, topic: str, title: str) -> str:
    """``_toc.yml`` with a part for ``topic``, before the first part whose first chapter comes
    after it (or that has no numbered chapter: the appendix, the back matter)."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, l in enumerate(lines) if re.match(r"\s*- caption:", l)] + [len(lines)]
    at = len(lines)
    for a, b in zip(starts, starts[1:]):
        nums = [m.group(1) for l in lines[a:b] for m in [re.search(r"file:\s*book/(\d\d)_", l)] if m]
        if not nums or nums[0] > topic[:2]:
            at = a
            break
    part = [f"  - caption: {_plain(title)}\n", "    chapters:\n", f"      - file: book/{topic}\n"]
    return "".join(lines[:at] + part + lines[at:])


def _insert_row(text: str, header: str, row: str, number_of, nn: str, where: str) -> str:
    """``text`` with ``row`` added to the markdown table under the line ``header``, after the
    last row whose ``number_of(row)`` is not above ``nn``."""
    lines = text.splitlines(keepends=True)
    try:
        h = next(i for i, l in enumerate(lines) if l.strip() == header)
    except StopIteration:
        raise ChapterError(f"{where}: no table with the header {header!r}") from None
    end, at = h + 2, h + 2
    while end < len(lines) and lines[end].startswith("|"):
        num = number_of(lines[end])
        end += 1
        if num is not None and num <= nn:
            at = end
    return "".join(lines[:at] + [row + "\n"] + lines[at:])


def add_to_contributing(text: str, nn: str, name: str) -> str:
    row = (f"| `fraglab/{name}/` | {nn}: `kernels`, `problems`, `report`, `lab`, `bench`, `__main__` "
           "(as `python -m fraglab.chapter new` wrote them) |")
    num = lambda l: (m.group(1) if (m := re.search(r"\| (\d\d)[:,]", l)) else None)
    return _insert_row(text, "| topic | its files |", row, num, nn, "CONTRIBUTING.md")


def add_to_roadmap(text: str, topic: str, title: str) -> str:
    row = f"| `{topic}` | {title} | being written |"
    num = lambda l: (m.group(1) if (m := re.match(r"\| `(\d\d)_", l)) else None)
    return _insert_row(text, "| Topic | What you build | Status |", row, num, topic[:2],
                       "book/intro.md")


def _notebook_env() -> dict:
    env = dict(os.environ, FRAGLAB_MODE="cpu", PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p))
    env.pop("MPLBACKEND", None)      # the kernel keeps its inline backend: figures are stored
    return env


def new(nn: str, name: str, title: str | None = None, execute: bool = True, log=print) -> list[str]:
    """Write topic ``nn_name`` (see the module's doc); returns the paths written or edited."""
    topic = check_new(nn, name)
    title = title or name.replace("_", " ").capitalize()
    if not re.fullmatch(r"[^|`@\n]{1,80}", title):
        raise ChapterError(f"the title must be one line of at most 80 characters without |, ` "
                           f"or @, got {title!r}")
    vals = values(nn, name, title)
    for t in templates():
        path = REPO_ROOT / _target(t, topic, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = render((TEMPLATE_DIR / t).read_text(), vals)
        if path.suffix == ".ipynb":
            labs.write(path, notebook(text))
        else:
            path.write_text(text)
    edits = {"_toc.yml": lambda s: add_to_toc(s, topic, title),
             "CONTRIBUTING.md": lambda s: add_to_contributing(s, nn, name),
             "book/intro.md": lambda s: add_to_roadmap(s, topic, title)}
    for rel in EDITED:
        (REPO_ROOT / rel).write_text(edits[rel]((REPO_ROOT / rel).read_text()))
    solution, chapter = (REPO_ROOT / d / f"{topic}.ipynb" for d in ("solutions", "book"))
    if execute:      # the solution stores its PASS line; the chapter its outputs (a CPU draft)
        log(f"executing solutions/{topic}.ipynb and book/{topic}.ipynb on the PTX interpreter ...")
        runs = [subprocess.Popen([sys.executable, "-m", "fraglab.notebooks", str(nb)],
                                 cwd=REPO_ROOT, env=_notebook_env()) for nb in (solution, chapter)]
        if [r.wait() for r in runs] != [0, 0]:
            raise ChapterError(f"a notebook of {topic} failed to execute (above); its files stay")
    importlib.invalidate_caches()          # the new package's PROBLEMS, for its boxes
    boxes(paths=[chapter, solution], cut_labs=False)
    labs.write(REPO_ROOT / LAB.format(topic=topic), labs.make_lab(labs.read(solution), str(solution)))
    return [p for p, _ in files(nn, name)]


# --- what runs where --------------------------------------------------------------------------------

def box_paths(root: Path = REPO_ROOT) -> list[Path]:
    """Every notebook that shows a "What runs where" box: the book's chapters and appendices,
    and the solutions (the labs are cut from them)."""
    book = sorted((root / "book").glob("[0-9][0-9]_*.ipynb")) + \
        sorted((root / "book").glob("appendix_*.ipynb"))
    return book + sorted((root / "solutions").glob("*.ipynb"))


def boxes(check: bool = False, paths=None, cut_labs: bool = True) -> list[str]:
    """Write each notebook's box as :mod:`fraglab.runs_where` renders it (only that cell
    changes), or with ``check`` only list the notebooks whose box differs; then, unless
    ``cut_labs`` is False, cut the labs again. Returns the paths (relative) that differed."""
    stale = []
    for path in (box_paths() if paths is None else [Path(p) for p in paths]):
        nb = labs.read(path)
        want = runs_where.expected_box(path, nb)
        found = runs_where.box_of(nb)
        if found and found[1] == want:
            continue
        stale.append(path.relative_to(REPO_ROOT).as_posix() if path.is_relative_to(REPO_ROOT)
                     else str(path))
        if not check:
            labs.write(path, runs_where.with_box(path, nb))
    if stale and cut_labs and not check:
        labs.build()
    return stale


# --- a chapter's GPU run ---------------------------------------------------------------------------

def bench_steps(nn: str, out: str = BENCH_OUT, quick: bool = False) -> list[tuple[str, list[str]]]:
    """``(what, command)`` of each step of ``bench`` for chapter ``nn``; a command is an argv
    (``python`` stands for this interpreter), or ``["cp", files..., folder]``."""
    topic = topic_of(nn)
    name = topic[3:]
    if topic not in topics(bench=True):
        raise ChapterError(f"{topic} has no bench module (fraglab/{name}/bench.py)")
    run_dir = f"{out}/bench_{name}"
    steps = [("run the chapter's benchmark",
              ["python", "-m", f"fraglab.{name}", "bench", "--out", run_dir]
              + (["--quick"] if quick else []))]
    if not quick:
        steps += [("record it", ["cp", f"{run_dir}/results.json", f"{run_dir}/log.txt",
                                 f"book/data/{topic}/"]),
                  ("execute the chapter", ["python", "-m", "fraglab.notebooks", f"book/{topic}.ipynb"])]
    return steps


def bench(nn: str, out: str = BENCH_OUT, quick: bool = False, dry_run: bool = False,
          log=print) -> int:
    """Run (or, with ``dry_run``, print) :func:`bench_steps`; the first failing step's exit
    status, or 0. A folder ``out`` that is relative is the repository's."""
    steps = bench_steps(nn, out, quick)
    from . import device
    if not dry_run and not device.gpu_available():
        raise ChapterError(f"bench times kernels on a GPU, and this machine has none "
                           f"({device.status_line()}); --dry-run prints the steps")
    for what, argv in steps:
        log(f"# {what}\n{shlex.join(argv)}")
    if quick:
        log("# (a quick run is not recorded)")
    if dry_run:
        return 0
    for what, argv in steps:
        log(f"== {what}")
        if argv[0] == "cp":              # results.json must be there; log.txt may not
            dest = REPO_ROOT / argv[-1]
            dest.mkdir(parents=True, exist_ok=True)
            for f in argv[1:-1]:
                if f.endswith("results.json") or (REPO_ROOT / f).is_file():
                    shutil.copy2(REPO_ROOT / f, dest)
        else:
            rc = subprocess.run([sys.executable, *argv[1:]], cwd=REPO_ROOT).returncode
            if rc:
                log(f"!! {what} exited {rc}")
                return rc
    return 0


# --- command line ----------------------------------------------------------------------------------

def main(argv=None) -> int:
    from .cli import subcommands
    ap = subcommands("python -m fraglab.chapter", "a new chapter; a chapter's GPU run", {
        "new": ("write a new topic's files (an example chapter that passes the tests)", [
            ("nn", dict(help="its number, two digits")),
            ("name", dict(help="its name: fraglab/<name>/, kernels/NN_<name>.cu, ...")),
            ("--title", dict(help="the chapter's title (default: from the name)")),
            ("--list", dict(action="store_true", help="print the files it writes; write nothing")),
            ("--no-execute", dict(action="store_true",
                                  help="leave the solution and the chapter unexecuted"))]),
        "bench": ("the chapter's GPU run: bench, record in book/data/, execute the chapter", [
            ("nn", dict(help="the chapter's number")),
            ("--out", dict(default=BENCH_OUT, help=f"the bench's folder (default {BENCH_OUT})")),
            ("--quick", dict(action="store_true", help="the bench's quick run, not recorded")),
            ("--dry-run", dict(action="store_true", help="print the steps; run nothing"))]),
        "list": ("the book's topics", [
            ("--bench", dict(action="store_true", help="only those with a bench module"))]),
        "boxes": ("write every chapter's and lab's 'What runs where' box (fraglab.runs_where)", [
            ("--check", dict(action="store_true",
                             help="write nothing; exit 1 if a box differs from the facts"))]),
    })
    args = ap.parse_args(argv)
    try:
        if args.cmd == "list":
            print("\n".join(topics(bench=args.bench)))
        elif args.cmd == "boxes":
            stale = boxes(check=args.check)
            if args.check:
                print("boxes differ from fraglab.runs_where (run `python -m fraglab.chapter "
                      "boxes`): " + ", ".join(stale) if stale else "every box is up to date")
                return 1 if stale else 0
            print("wrote the box of " + (", ".join(stale) or "nothing (all up to date)"))
        elif args.cmd == "bench":
            return bench(args.nn, args.out, quick=args.quick, dry_run=args.dry_run)
        elif args.list:
            for path, what in files(args.nn, args.name):
                print(path + ("" if what == "written" else f"  ({what})"))
        else:
            written = new(args.nn, args.name, args.title, execute=not args.no_execute)
            print(f"wrote chapter {args.nn}_{args.name}: {len(written)} files written or edited "
                  "(--list names them); next: CONTRIBUTING.md, \"Adding a chapter\"")
    except ChapterError as e:
        print(f"python -m fraglab.chapter {args.cmd}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
