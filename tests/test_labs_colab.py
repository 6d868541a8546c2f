"""Labs on Colab (issue "Grading that a wrong answer cannot pass", item 6): GPU accelerator metadata,
an Open-in-Colab link and a clone pinned to the course version, all from the one course address;
and on a CPU runtime, the setup cell fetches the course, installs what Colab lacks, says that
there is no GPU and carries on in GPU-less mode on the PTX interpreter.

The CPU runtime is simulated in a fresh Python process: the course is not importable (its
editable install is hidden), ``google.colab`` is importable, the notebook's folder is outside any
clone, ``git`` and ``pip`` are recorded instead of run (the "clone" is a link to this checkout),
and there is no GPU (``FRAGLAB_MODE`` unset: the machine's own probe decides).

The clone itself runs for real against a local repository (``file://``, no network): the course's
version tag is cloned when it exists, else the default branch, with one line saying so (issue #27:
no ``v0.1.0`` tag existed, and the first cell failed)."""
import json
import os
import re
import subprocess
import sys

import pytest

from fraglab import labs, report
from nbval_run import ROOT

LABS = sorted((ROOT / "labs").glob("*.ipynb"))
COLAB_DIR = "/content/fraglab-course"

SIMULATION = r'''
import json, os, pathlib, subprocess, sys, types
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.path[:] = [p for p in sys.path if p and pathlib.Path(p).resolve() != pathlib.Path(ROOT)]
try:
    import fraglab
    raise SystemExit("the course is still importable: the simulation is not a fresh runtime")
except ImportError:
    pass
sys.modules["google"] = types.ModuleType("google")
sys.modules["google.colab"] = types.ModuleType("google.colab")
calls = []
def fake_run(args, check=False, **kw):
    calls.append([str(a) for a in args])
    if args[0] == "git":
        os.symlink(ROOT, args[-1])              # the clone: this checkout
    elif "pip" in args:
        req = pathlib.Path(args[-1])
        assert req.is_file(), f"pip is asked to install {req}, which the clone lacks"
    return subprocess.CompletedProcess(args, 0)
subprocess.run = fake_run
exec(CELL, {"__name__": "__main__"})
import fraglab
from fraglab import device, hello_warp, launch
import numpy as np
x = np.arange(64, dtype=np.float32).reshape(2, 32)
got = launch.to_host(hello_warp.warp_sum(launch.to_device(x)))
print("RESULT", json.dumps({"calls": calls, "mode": device.mode(), "sums": [float(v) for v in got],
                           "fraglab": fraglab.__file__}))
'''


@pytest.mark.parametrize("lab", LABS, ids=[p.stem for p in LABS])
def test_lab_carries_colab_gpu_metadata_and_links(lab):
    nb = json.loads(lab.read_text())
    meta = nb["metadata"]
    assert meta.get("accelerator") == "GPU", "Colab would open the lab on a CPU runtime"
    assert meta.get("colab", {}).get("gpuType"), "no Colab GPU type (e.g. T4) in the metadata"
    top = "".join(nb["cells"][0]["source"])
    assert f"[Open in Colab]({report.lab_url(lab.stem, 'colab')})" in top


def test_the_course_address_is_written_in_one_place():
    """Every course URL in the labs, solutions, setup cell and README comes from _config.yml."""
    url, branch = report.course_address()
    owner_repo = url.split("github.com/", 1)[1]
    texts = {p.name: p.read_text() for p in [*LABS, *sorted((ROOT / "solutions").glob("*.ipynb"))]}
    texts["SETUP_CELL"] = labs.SETUP_CELL
    if (ROOT / "README.md").exists():
        texts["README.md"] = (ROOT / "README.md").read_text()
    found = 0
    for name, text in texts.items():
        for m in re.finditer(r"(?:github\.com|colab\.research\.google\.com/github)/([\w.-]+/[\w.-]+)", text):
            if "fraglab" in m.group(1).lower():
                found += 1
                assert m.group(1) == owner_repo, f"{name}: course address {m.group(1)}, not {owner_repo}"
    assert found, "no course link found at all"
    assert f"/blob/{branch}/" in report.lab_url("00_hello_warp")


def _simulate(tmp_path, cell):
    clone = tmp_path / "fraglab-course"
    assert cell.count(COLAB_DIR) == 1, "the setup cell's Colab folder moved: update this test"
    code = (f"ROOT = {str(ROOT)!r}\nCELL = {cell.replace(COLAB_DIR, str(clone))!r}\n" + SIMULATION)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FRAGLAB_MODE")}
    nb_dir = tmp_path / "notebooks"
    nb_dir.mkdir()
    return subprocess.run([sys.executable, "-c", code], cwd=nb_dir, env=env, capture_output=True,
                          text=True, timeout=300), clone


def test_setup_cell_on_a_colab_cpu_runtime_installs_and_goes_gpu_less(tmp_path):
    from fraglab import device
    if device.gpu_available():
        pytest.skip("this machine has a GPU: a CPU runtime cannot be simulated here")
    r, clone = _simulate(tmp_path, labs.SETUP_CELL)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    lines = r.stdout.splitlines()
    status = next(l for l in lines if l.startswith("[cpu]"))
    assert "no GPU" in status and "PTX interpreter" in status, status
    res = json.loads(next(l for l in lines if l.startswith("RESULT "))[len("RESULT "):])
    git, pip = res["calls"]
    assert git[:2] == ["git", "clone"] and git[-1] == str(clone) and "--branch" in git
    assert pip[1:4] == ["-m", "pip", "install"] and pip[-1] == str(clone / "requirements-colab.txt")
    assert res["mode"] == "cpu" and res["sums"] == [496.0, 1520.0]   # a kernel ran, interpreted
    assert res["fraglab"].startswith(str(clone)), "the course was imported from the clone"


def test_requirements_colab_has_what_gpu_less_mode_needs():
    """Colab ships NumPy, matplotlib and CuPy; GPU-less mode also needs NVRTC (compiling for the
    interpreter), the CUDA headers (mma.h) and nvdisasm (SASS)."""
    req = (ROOT / "requirements-colab.txt").read_text()
    names = {re.split(r"[<>=\s;\[]", l.strip())[0] for l in req.splitlines()
             if l.strip() and not l.lstrip().startswith("#")}
    for need in ("nvidia-cuda-nvrtc-cu12", "nvidia-cuda-runtime-cu12", "nvidia-cuda-nvcc-cu12",
                 "nvidia-cuda-nvdisasm"):
        assert need in names, f"requirements-colab.txt lacks {need}"


def test_setup_cell_outside_a_clone_and_outside_colab_says_what_to_do(tmp_path):
    code = (f"import sys\nsys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]\n"
            f"exec({labs.SETUP_CELL!r})\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0 and "Open this notebook from a clone of the course" in r.stderr


# --- the clone itself: a real git, a local repository, no network ----------------------------------

CLONE_RUN = r'''
import os, pathlib, subprocess, sys, types
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.modules["google"] = types.ModuleType("google")
sys.modules["google.colab"] = types.ModuleType("google.colab")
real_run = subprocess.run
def run(args, *a, **kw):             # git runs for real; pip is only checked
    if "pip" in args:
        assert pathlib.Path(args[-1]).is_file(), f"the clone lacks {args[-1]}"
        return subprocess.CompletedProcess(args, 0)
    return real_run(args, *a, **kw)
subprocess.run = run
exec(CELL, {"__name__": "__main__"})
'''


def _course_repo(tmp_path, tag):
    """A course repository of two commits, the first tagged ``tag`` (or nothing): its fraglab says
    which commit the clone checked out."""
    repo = tmp_path / "origin"
    (repo / "fraglab").mkdir(parents=True)
    (repo / "requirements-colab.txt").write_text("# nothing\n")

    def git(*args):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=_git_env())

    git("init", "-q", "-b", "main")
    for rev in ("tagged", "newest"):
        (repo / "fraglab" / "__init__.py").write_text(f"def status_line():\n    return 'checked out: {rev}'\n")
        git("add", ".")
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", rev)
        if rev == "tagged" and tag:
            git("tag", tag)
    return repo


def _git_env():
    """git with no user or system configuration and no protocol but file://: nothing reaches a
    network (an https:// clone fails at once)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FRAGLAB_MODE")}
    return {**env, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_ALLOW_PROTOCOL": "file", "GIT_TERMINAL_PROMPT": "0"}


def _run_setup_clone(tmp_path, origin_url):
    url, _ = report.course_address()
    cell = labs.SETUP_CELL
    assert cell.count(f'"{url}"') == 1 and cell.count(COLAB_DIR) == 1, "the cell changed: update this test"
    clone = tmp_path / "fraglab-course"
    cell = cell.replace(f'"{url}"', repr(origin_url)).replace(COLAB_DIR, str(clone))
    nb_dir = tmp_path / "notebooks"
    nb_dir.mkdir()
    r = subprocess.run([sys.executable, "-c", f"CELL = {cell!r}\n" + CLONE_RUN], cwd=nb_dir,
                       env=_git_env(), capture_output=True, text=True, timeout=120)
    return r, clone


@pytest.mark.parametrize("tagged", [True, False], ids=["version-tagged", "no-tags"])
def test_setup_cell_clones_the_version_or_falls_back_to_the_default_branch(tmp_path, tagged):
    import fraglab
    version = f"v{fraglab.__version__}"
    origin = _course_repo(tmp_path, version if tagged else None)
    r, clone = _run_setup_clone(tmp_path, origin.as_uri())
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    lines = r.stdout.splitlines()
    if tagged:
        assert lines == ["checked out: tagged"], r.stdout
    else:
        assert len(lines) == 2 and lines[1] == "checked out: newest", r.stdout
        said = lines[0]
        assert version in said and "default branch" in said, said
        assert "fatal: Remote branch" in said, f"git's reason is not in the line: {said}"


def test_setup_cell_without_the_course_repository_fails_with_gits_reason(tmp_path):
    r, clone = _run_setup_clone(tmp_path, (tmp_path / "nowhere").as_uri())
    assert r.returncode != 0 and "CalledProcessError" in r.stderr
    said = r.stdout.splitlines()
    assert len(said) == 1 and "default branch" in said[0] and "nowhere" in said[0], r.stdout
    assert not clone.exists()
