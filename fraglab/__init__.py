"""fraglab: the Python tooling of the register-level tensor-core course.

- :mod:`fraglab.toolchain` - the one compile path (NVRTC -> PTX, CUBIN, ptxas report), GPU or not
- :mod:`fraglab.sass`      - SASS listings and instruction counts by opcode and class
- :mod:`fraglab.device`    - is there a GPU, which one, what it supports; gpu/cpu mode
- :mod:`fraglab.launch`    - the one launch path, argument checks, poisoned outputs
- :mod:`fraglab.warp`      - a NumPy emulator of a warp: shuffles with CUDA's mask rules, fragments
- :mod:`fraglab.bench`     - the one benchmark path (CUDA events, medians, ratios, device record)
- :mod:`fraglab.labs`      - cutting labs from solutions, and grading checks
- one module per topic with the Python wrappers of its kernels, e.g. :mod:`fraglab.hello_warp`
"""
import os as _os

#: The course's version: the one place it is written (pyproject.toml reads it; the notebooks' setup
#: cell clones the tag ``v<version>`` on Colab). Set before the imports, so any module may import it.
__version__ = "0.1.0"

# NVRTC 12.9+ caches compiles in ~/.nv/ComputeCache, and a cached build carries no ptxas report
# (registers, spills): turn that cache off before NVRTC is loaded (fraglab.toolchain explains).
_os.environ.setdefault("CUDA_CACHE_DISABLE", "1")

from .toolchain import ARCHES, Build, CompileError, compile  # noqa: F401
from .device import gpu_available, mode, status_line  # noqa: F401

