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


def refused_here(topic: str) -> str | None:
    """Why the GPU in use cannot re-run ``topic``'s notebook as it was executed (on the H100): the
    checks of the topic's Problems this GPU refuses (``fraglab.runs_where.refusals``: chapter 10
    needs a Hopper, chapter 05's FA-2 compute capability 8.0), or None where it runs them all or
    there is no GPU. The GPU tier's nbval of a chapter skips with this reason (a lab's does not:
    its graded cells say what runs where on every GPU)."""
    from fraglab import device, runs_where
    if not device.gpu_available():
        return None
    cc = tuple(device.target_cc())
    r = runs_where.refusals(topic, cc)
    refused = sum(sum(v.values()) for v in r.skipped.values())
    if not refused:
        return None
    return (f"this GPU (compute capability {cc[0]}.{cc[1]}) refuses {refused} of {topic}'s "
            f"{r.total} checks, so its notebook cannot re-run as executed: {next(iter(r.skipped))}")
