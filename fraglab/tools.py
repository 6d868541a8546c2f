"""Where things are: the repository, NVRTC, CUDA headers (CCCL's among them), the CUDA binary
tools and the compile cache. Every other module asks here; nothing here imports the rest of the package.

    python -m fraglab.tools clean-cache     # empty the on-disk compile cache (make clean does)
"""
from __future__ import annotations

import os
import re
import shutil
import sys
from functools import lru_cache
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
KERNELS_DIR = REPO_ROOT / "kernels"

#: The on-disk compile cache keeps at most this many builds; the oldest are dropped first.
CACHE_MAX_ENTRIES = int(os.environ.get("FRAGLAB_CACHE_MAX_ENTRIES", "3000"))


class ToolchainError(RuntimeError):
    """A tool or header the course needs is missing; the message says how to get it."""


def nvrtc():
    """CuPy's NVRTC binding (the one compiler the course uses)."""
    try:
        from cupy_backends.cuda.libs import nvrtc as lib
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ToolchainError("CuPy is not installed: run `make test` or "
                             "`pip install -e .` (see the README)") from e
    return lib


@lru_cache(maxsize=None)
def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC library CuPy loaded."""
    try:
        return tuple(nvrtc().getVersion())
    except ToolchainError:
        raise
    except Exception as e:  # libnvrtc missing
        raise ToolchainError(
            "CuPy found no NVRTC library. Install the wheel matching your CuPy "
            "(nvidia-cuda-nvrtc-cu12 for cupy-cuda12x) or a CUDA toolkit.\n" + str(e)) from e


def _pip_nvidia_dirs() -> list[Path]:
    """Folders of the pip `nvidia.*` wheels (cuda_runtime, cuda_nvcc, cu13, ...)."""
    out = []
    for entry in sys.path:
        root = Path(entry or ".") / "nvidia"
        if root.is_dir():
            out.extend(sorted(p for p in root.iterdir() if p.is_dir()))
    return out


def _header_cuda_major(include_dir: Path) -> int | None:
    """CUDA major version of a header folder, read from cuda_runtime_api.h (None if unknown)."""
    for name in ("cuda_runtime_api.h", "cuda.h"):
        h = include_dir / name
        if h.is_file():
            m = re.search(r"#define\s+CUDART?_VERSION\s+(\d+)", h.read_text(errors="replace"))
            if m:
                return int(m.group(1)) // 1000
    return None


def _include_candidates() -> list[Path]:
    cands: list[Path] = []
    if os.environ.get("CUDA_PATH"):
        cands.append(Path(os.environ["CUDA_PATH"]) / "include")
    cands.append(Path("/usr/local/cuda/include"))
    cands += [d / "include" for d in _pip_nvidia_dirs()]
    seen, out = set(), []
    for c in cands:
        if c.is_dir() and c.resolve() not in seen:
            seen.add(c.resolve())
            out.append(c)
    return out


@lru_cache(maxsize=None)
def include_dirs() -> tuple[Path, ...]:
    """Header folders that together provide ``mma.h`` and ``crt/mma.h`` for this NVRTC, and
    CCCL (:func:`cccl_dir`) when they lack it.

    ``mma.h`` only forwards to ``crt/mma.h``; the pip wheels split them (``cuda_runtime`` has the
    first, ``cuda_nvcc`` the second), so both folders are returned when needed. Folders whose CUDA
    major version differs from NVRTC's are passed over: CUDA 13 headers do not suit NVRTC 12.
    """
    dirs = _toolkit_dirs()
    cccl = cccl_dir(dirs)
    return dirs if cccl is None or cccl in dirs else dirs + (cccl,)


def _has_cccl(d: Path) -> bool:
    """Whether `d` is a CCCL include folder: libcu++'s ``<nv/target>`` and ``<cuda/std/...>``,
    which ``<cooperative_groups.h>``, ``<cuda/barrier>`` and ``<cuda/pipeline>`` include."""
    return (d / "nv" / "target").is_file() and (d / "cuda" / "std" / "type_traits").is_file() \
        and (d / "cuda" / "barrier").is_file()


def _cupy_cccl() -> Path | None:
    """The copy of CCCL's libcu++ that CuPy ships (NVRTC comes through CuPy, so it is there
    wherever the course compiles), without importing CuPy."""
    import importlib.util
    spec = importlib.util.find_spec("cupy")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        d = Path(root) / "_core" / "include" / "cupy" / "_cccl" / "libcudacxx"
        if d.is_dir():
            return d
    return None


def cccl_dir(dirs: tuple[Path, ...] | None = None) -> Path | None:
    """Where CCCL's headers are for this NVRTC (None: nowhere): a CUDA 12 toolkit keeps them in
    its include folder, CUDA 13 in ``include/cccl``; the pip wheels of the runtime lack them (the
    ``nvidia-cuda-cccl`` wheel has them), and CuPy ships a copy. The toolkit's own come first,
    then a wheel's, then CuPy's, then a toolkit of another CUDA version's ``include/cccl``."""
    dirs = _toolkit_dirs() if dirs is None else dirs
    cands = [c for d in dirs for c in (d, d / "cccl")]
    cands += [c for d in _include_candidates() for c in (d, d / "cccl")
              if _header_cuda_major(d) in (nvrtc_version()[0], None)]
    cands.append(_cupy_cccl())
    cands += [d / "cccl" for d in _include_candidates()]
    return next((c for c in cands if c is not None and _has_cccl(c)), None)


@lru_cache(maxsize=None)
def _toolkit_dirs() -> tuple[Path, ...]:
    """The folders of ``mma.h`` and ``crt/mma.h`` (:func:`include_dirs` without CCCL)."""
    major = nvrtc_version()[0]
    cands = [c for c in _include_candidates() if _header_cuda_major(c) in (major, None)]
    for c in cands:  # one folder with both: a full toolkit
        if (c / "mma.h").is_file() and (c / "crt" / "mma.h").is_file() \
                and _header_cuda_major(c) == major:
            return (c,)
    top = [c for c in cands if (c / "mma.h").is_file() and _header_cuda_major(c) == major]
    crt = [c for c in cands if (c / "crt" / "mma.h").is_file()]
    if top and crt:
        return (top[0], crt[0])
    raise ToolchainError(
        f"No CUDA {major}.x headers providing both mma.h and crt/mma.h were found (looked in: "
        + ", ".join(map(str, _include_candidates())) + "). With pip, install "
        f"nvidia-cuda-runtime-cu{major} and nvidia-cuda-nvcc-cu{major}; or set CUDA_PATH to a "
        "CUDA toolkit of the same major version as NVRTC.")


#: How a learner gets each tool when it is missing.
_HOW_TO_GET = {
    "nvdisasm": "install the nvidia-cuda-nvdisasm wheel (requirements.txt)",
    "ptxas": "install the nvidia-cuda-nvcc wheel (requirements.txt)",
    "ncu": "install Nsight Compute (it ships with the CUDA toolkit)",
    "compute-sanitizer": "install the CUDA toolkit",
}


def find_tool(name: str, *, required: bool = True) -> Path | None:
    """Path of a CUDA binary tool (nvdisasm, ptxas, ncu, compute-sanitizer): pip wheels,
    ``CUDA_PATH``, /usr/local/cuda, then ``PATH``. Missing: :class:`ToolchainError` saying how to
    get it, or ``None`` when ``required=False``."""
    cands = [d / "bin" / name for d in _pip_nvidia_dirs()]
    if os.environ.get("CUDA_PATH"):
        cands.append(Path(os.environ["CUDA_PATH"]) / "bin" / name)
    cands.append(Path("/usr/local/cuda/bin") / name)
    which = shutil.which(name)
    if which:
        cands.append(Path(which))
    for c in cands:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    if not required:
        return None
    raise ToolchainError(f"`{name}` not found: "
                         + _HOW_TO_GET.get(name, "put a CUDA toolkit's bin/ on PATH"))


def cache_dir() -> Path:
    """The on-disk compile cache: ``$FRAGLAB_CACHE`` or ``~/.cache/fraglab``."""
    d = Path(os.environ.get("FRAGLAB_CACHE", Path.home() / ".cache" / "fraglab"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def prune_cache(max_entries: int = CACHE_MAX_ENTRIES) -> int:
    """Drop the least recently written builds beyond ``max_entries``; returns how many went."""
    try:
        entries = [p for p in cache_dir().iterdir() if p.is_dir() and ".tmp" not in p.name]
        entries.sort(key=lambda p: p.stat().st_mtime)
    except OSError:
        return 0
    gone = entries[:max(0, len(entries) - max_entries)]
    for p in gone:
        shutil.rmtree(p, ignore_errors=True)
    # compile locks (toolchain._compile_lock) whose build is gone or never came (a compile
    # error), once they are old enough not to be held
    import time
    for f in cache_dir().glob(".lock-*"):
        try:
            if not (f.parent / f.name[len(".lock-"):]).exists() and time.time() - f.stat().st_mtime > 600:
                f.unlink()
        except OSError:
            pass
    return len(gone)


def clean_cache() -> Path:
    """Remove the whole on-disk compile cache (``make clean``)."""
    d = cache_dir()
    shutil.rmtree(d, ignore_errors=True)
    return d


if __name__ == "__main__":
    if sys.argv[1:] != ["clean-cache"]:
        print(__doc__)
        sys.exit(2)
    print(f"removed {clean_cache()}")
