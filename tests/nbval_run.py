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
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, FRAGLAB_MODE=mode, PYTHONPATH=path)
    env.pop("MPLBACKEND", None)  # the kernel must keep its inline backend, or figures vanish
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        r = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "--nbval", "--nbval-current-env",
             "--nbval-sanitize-with", str(ROOT / "nbval_sanitize.cfg"), "--nbval-cell-timeout",
             "600", "-p", "no:cacheprovider", f"--junitxml={xml}", "--rootdir", tmp,
             str(notebook)],
            cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout)
        failed = set()
        if xml.exists():
            for case in ET.parse(xml).getroot().iter("testcase"):
                if case.find("failure") is not None or case.find("error") is not None:
                    name = case.get("name", "")
                    if name.startswith("Cell "):
                        failed.add(int(name.split()[1]))
    return r.returncode, failed, r.stdout + r.stderr


def graded_cells(nb: dict) -> set[int]:
    """Indices (among code cells, as nbval counts them) of the cells tagged ``graded``."""
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    return {i for i, c in enumerate(code) if "graded" in c.get("metadata", {}).get("tags", [])}
