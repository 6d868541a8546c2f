"""The Makefile's first check: the Python it builds the course with is new enough (pyproject's
requires-python), said in one line, before pip's "no matching distribution for cupy" (issue #27)."""
import os
import re
import shutil
import subprocess
import sys

import pytest

from nbval_run import ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")

FAKE_PYTHON = """#!/bin/sh
# a Python {version}: prints its version, and fails the Makefile's version_info comparison
case "$*" in
  *python_version*) echo {version} ;;
  *) exit 1 ;;
esac
"""


def _make(*args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    return subprocess.run(["make", "-s", "--no-print-directory", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def _minimum():
    m = re.search(r'^requires-python\s*=\s*">=([0-9.]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    return m.group(1)


@pytest.mark.parametrize("target", ["python-version", "test", "book"])
def test_an_old_python_is_one_line_before_any_venv_or_pip(tmp_path, target):
    fake = tmp_path / "python3.9"
    fake.write_text(FAKE_PYTHON.format(version="3.9.18"))
    fake.chmod(0o755)
    venv = tmp_path / "venv"
    r = _make(target, f"PYTHON={fake}", f"VENV={venv}")
    assert r.returncode != 0
    assert r.stdout.splitlines() == [
        f"The course needs Python {_minimum()} or newer; {fake} is 3.9.18 "
        f"(run make PYTHON=python3.X with X >= {_minimum().split('.')[1]})."], r.stdout + r.stderr
    assert not venv.exists(), "a venv was made before the check"


def test_a_missing_python_is_one_line(tmp_path):
    r = _make("python-version", f"PYTHON={tmp_path / 'nopython'}")
    assert r.returncode != 0 and "is not found" in r.stdout and len(r.stdout.splitlines()) == 1


def test_this_python_passes_the_check():
    assert sys.version_info >= tuple(int(x) for x in _minimum().split("."))
    r = _make("python-version", f"PYTHON={sys.executable}")
    assert r.returncode == 0 and r.stdout == "", r.stdout + r.stderr
