"""Execute notebooks in place (the book's chapters are executed on a GPU and committed).

    python -m fraglab.notebooks book/00_hello_warp.ipynb [more.ipynb ...]

Each notebook runs top to bottom in a fresh kernel of the current Python, from its own folder;
a cell that raises stops it with the error. Outputs are written back into the file.

A chapter that ``python -m fraglab.chapter new`` wrote is a *draft* (notebook metadata
``fraglab.draft``), executed on the CPU; executed here on a GPU (its setup cell prints ``[gpu]``),
it is a draft no more (:func:`end_draft`).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path


def execute(path: str | Path, timeout: int = 900) -> float:
    import nbformat
    from nbclient import NotebookClient
    path = Path(path).resolve()
    nb = nbformat.read(path, as_version=4)
    t0 = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    for cell in nb.cells:  # keep the files stable: no volatile ids or timing metadata
        cell.pop("id", None)
        cell.metadata.pop("execution", None)
    nb.nbformat_minor = 4
    end_draft(nb)
    nbformat.write(nb, path)
    return time.perf_counter() - t0


def end_draft(nb) -> bool:
    """Drop the draft mark of a notebook whose setup cell (its first code cell) ran on a GPU;
    returns whether it did."""
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    first = "".join("".join(o.get("text", "")) for o in code[0].get("outputs", [])) if code else ""
    marks = nb["metadata"].get("fraglab", {})
    if not first.startswith("[gpu]") or "draft" not in marks:
        return False
    del marks["draft"]
    if not marks:
        del nb["metadata"]["fraglab"]
    return True


def main(argv=None) -> int:
    paths = sys.argv[1:] if argv is None else argv
    if not paths:
        print(__doc__)
        return 2
    failed = []
    for i, p in enumerate(paths, 1):
        print(f"[{i}/{len(paths)}] executing {p} ...", flush=True)
        try:
            print(f"[{i}/{len(paths)}] {p}: done in {execute(p):.1f} s", flush=True)
        except Exception as e:  # report, and go on with the next notebook
            failed.append(p)
            print(f"[{i}/{len(paths)}] {p}: FAILED: {type(e).__name__}: {str(e)[-1500:]}", flush=True)
    if failed:
        print("failed: " + ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
