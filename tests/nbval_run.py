"""Run nbval on one notebook in a subprocess and report which code cells failed."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_nbval(notebook: Path, mode: str, timeout: int = 900) -> tuple[int, set[int], str]:
    """(return code, indices of failed code cells, output) of nbval on ``notebook`` in ``mode``."""
    rc, cells, out = run_nbval_many([notebook], mode, timeout)
    return rc, cells[Path(notebook).resolve()][1], out


def run_nbval_many(notebooks, mode: str, timeout: int = 900
                   ) -> tuple[int, dict[Path, tuple[int, set[int]]], str]:
    """nbval on several notebooks in one process (one start-up; nbval starts a fresh kernel for
    each notebook): (return code, ``{notebook: (cells run, indices of failed code cells)}``,
    output). The notebooks lie in the repository (the rootdir, so that the report names each)."""
    notebooks = [Path(n).resolve() for n in notebooks]
    ids = {".".join(n.relative_to(ROOT).parts): n for n in notebooks}
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, FRAGLAB_MODE=mode, PYTHONPATH=path)
    env.pop("MPLBACKEND", None)  # the kernel must keep its inline backend, or figures vanish
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        r = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "--nbval", "--nbval-current-env",
             "--nbval-sanitize-with", str(ROOT / "nbval_sanitize.cfg"), "--nbval-cell-timeout",
             "600", "-p", "no:cacheprovider", f"--junitxml={xml}", "--rootdir", str(ROOT),
             *map(str, notebooks)],
            cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout * len(notebooks))
        cells = {n: (0, set()) for n in notebooks}
        if xml.exists():
            for case in ET.parse(xml).getroot().iter("testcase"):
                nb = ids.get(case.get("classname", ""))
                if nb is None:
                    continue
                ran, failed = cells[nb]
                name = case.get("name", "")
                if (case.find("failure") is not None or case.find("error") is not None) \
                        and name.startswith("Cell "):
                    failed.add(int(name.split()[1]))
                cells[nb] = (ran + 1, failed)
    return r.returncode, cells, r.stdout + r.stderr


def graded_cells(nb: dict) -> set[int]:
    """Indices (among code cells, as nbval counts them) of the cells tagged ``graded``."""
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    return {i for i, c in enumerate(code) if "graded" in c.get("metadata", {}).get("tags", [])}
