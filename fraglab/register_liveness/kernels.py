"""Wrappers of the chapter-08 kernels (``kernels/08_register_liveness_<mode>.cu``, one body in
``kernels/08_register_liveness.cuh``): chapter 05's FA-2 kernel with one thing changed, how long
Q's fragments stay live.

A variant is a Q mode, with ``_oneloop`` for the single masked key loop instead of chapter 05's
two loops (unmasked, then masked):

==================  ========================================================================
``qreg``            Q's A fragments loaded once and held in registers across the key sweep
``qreload``         each fragment reloaded from shared memory (ldmatrix) right before its mma
``qglobal``         each fragment re-read from global memory (L1/L2) at every key tile
==================  ========================================================================

Compile-time knobs (:func:`build_spec`): ``bn`` (keys a tile at d = 256: 32 or 64),
``maxrregcount`` (NVRTC's ``--maxrregcount=N``) and ``minb`` (``__launch_bounds__``' blocks per
SM). Tensors as chapter 05's ``fa2``: ``(B, H, N, d)`` float16, or uint16 holding bf16; d 64, 128
or 256; any N; checked by the same functions (:mod:`fraglab.attention.checks`).
"""
from __future__ import annotations

import numpy as np

from .. import launch, toolchain
from ..attention import LOG2E, check_qkv, check_scale, fa2_output, require_fa2_gpu

MODES = ("qreg", "qreload", "qglobal")
VARIANTS = (*MODES, *(f"{m}_oneloop" for m in MODES))
HEAD_DIMS = (64, 128, 256)
#: Keys a K/V tile the sweep may ask for at d = 256 (``-DFA08_BN256``); the header's own tiles
#: are read back from a build (:func:`key_tiles`).
BN_256_CHOICES = (32, 64)
DEFAULT_MINB = 2
#: Lab 08's kernels: the name learner sources compile under, and their head dimensions.
LAB_NAME = "08_register_liveness_lab"
LAB_HEAD_DIMS = (64, 128)
#: What each variant does, one line (the chapter's tables).
CHANGES = {
    "qreg": "Q's fragments in registers for the whole key sweep (chapter 05)",
    "qreload": "Q's fragment reloaded from shared memory (ldmatrix) at each use",
    "qglobal": "Q's fragment re-read from global memory at each key tile (the seed's pass)",
}


def split(variant: str) -> tuple[str, str]:
    """``'qreload_oneloop'`` -> ``('qreload', 'one')``; ``'qreg'`` -> ``('qreg', 'two')``."""
    launch.check_choice("variant", variant, VARIANTS)
    mode, _, loops = variant.partition("_")
    return mode, ("one" if loops else "two")


def file_constants(defines: dict | None = None) -> dict[str, int]:
    """The ``fa08_*`` launch constants of the header as a build with ``defines`` gives them
    (``fa08_rows``, ``fa08_threads``, ``fa08_d<D>_key_tile``, ``fa08_d<D>_smem``: every mode's
    file shares them), read from the compiled module (:meth:`fraglab.toolchain.Build.constants`;
    any target gives the same numbers)."""
    return toolchain.compile("08_register_liveness_qreg", launch.INTERPRETER_ARCH,
                             defines=defines).constants("fa08_")


def key_tiles() -> dict[int, int]:
    """Keys a K/V tile by head dimension (the header's ``Cfg<D>::BN``)."""
    c = file_constants()
    return {d: c[f"fa08_d{d}_key_tile"] for d in HEAD_DIMS}


def smem_bytes(d: int, bn: int | None = None) -> int:
    """Dynamic shared memory of a block (``Cfg<D>::SMEM``: Q, K and V tiles) with ``bn`` keys a
    tile at d = 256, read back from the build."""
    spec = build_spec("qreg", "f16", d, bn=bn)
    return file_constants(spec["defines"] or None)[f"fa08_d{d}_smem"]


def build_spec(variant: str, dtype: str, d: int, *, bn: int | None = None,
               maxrregcount: int | None = None, minb: int | None = None) -> dict:
    """Where a kernel comes from: ``{"name", "kernel", "defines", "options"}`` for
    :func:`fraglab.toolchain.compile` / :func:`fraglab.launch.get_kernel`. The default build
    (no knob) compiles the whole file; a knob compiles the kernels of head dimension ``d`` only."""
    mode, loops = split(variant)
    launch.check_choice("dtype", dtype, ("f16", "bf16"))
    launch.check_choice("head dimension d", d, HEAD_DIMS)
    defines, options = {}, ()
    own = key_tiles()[d] if bn is not None else None
    if bn is not None and bn != own:
        if d != 256:
            raise ValueError(f"bn (keys a tile) is fixed at {own} for d = {d}; it varies at d = 256 only")
        launch.check_choice("bn", bn, BN_256_CHOICES)
        defines["FA08_BN256"] = int(bn)
    if maxrregcount is not None:
        launch.check_range("maxrregcount", maxrregcount, 64, 255)
        options = (f"--maxrregcount={int(maxrregcount)}",)
        defines["FA08_NO_BOUNDS"] = 1        # ptxas ignores the cap under __launch_bounds__
    if minb is not None and minb != DEFAULT_MINB:
        launch.check_range("minb", minb, 1, 4)
        defines["FA08_MINB"] = int(minb)
    if defines or options:
        defines["FA08_ONLY_D"] = d
    return {"name": f"08_register_liveness_{mode}", "kernel": f"fa08_{mode}_{dtype}_d{d}_{loops}",
            "defines": defines, "options": options}


def build(variant: str, dtype: str, d: int, arch=None, **knobs):
    """``(Build, kernel name)`` of one variant for ``arch`` (the GPU in use by default)."""
    spec = build_spec(variant, dtype, d, **knobs)
    b = toolchain.compile(spec["name"], arch, defines=spec["defines"], options=spec["options"])
    return b, spec["kernel"]


def attention_launcher(q, k, v, *, causal: bool = False, variant: str = "qreload",
                       scale: float | None = None, bn: int | None = None,
                       maxrregcount: int | None = None, minb: int | None = None, out=None,
                       source: str | None = None):
    """Check everything, allocate the (poisoned) output, return ``(launch, out)``:
    ``launch()`` runs the kernel once (for :mod:`fraglab.bench`). ``source``: a CUDA string
    defining the ``fa08_lab_*`` kernels (lab 08: :func:`.lab.lab_source`) to run instead."""
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    launch.check_choice("variant", variant, VARIANTS)
    dtype, (b, h, n, d) = check_qkv(q, k, v, HEAD_DIMS, 16, "cp.async copies 16 bytes")
    sc = check_scale(scale, d)
    spec = build_spec(variant, dtype, d, bn=bn, maxrregcount=maxrregcount, minb=minb)
    require_fa2_gpu(dtype)
    out = fa2_output(q, out)
    if source is not None:
        if not isinstance(source, str):
            raise TypeError(f"source must be a str of CUDA code, got {type(source).__name__}")
        if d not in LAB_HEAD_DIMS or spec["defines"] or spec["options"]:
            raise ValueError(f"a lab source is compiled for d in {LAB_HEAD_DIMS} with the default "
                             "tiles and bounds only")
        spec = {**spec, "name": LAB_NAME, "kernel": spec["kernel"].replace(
            f"fa08_{split(variant)[0]}_", "fa08_lab_")}
    where = dict(source=source, defines=spec["defines"], options=spec["options"])
    fn = launch.get_kernel(spec["name"], spec["kernel"], **where)
    c = launch.constants(spec["name"], "fa08_", **where)
    smem, threads = c[f"fa08_d{d}_smem"], c["fa08_threads"]
    args = (q, k, v, out, np.int32(n), np.float32(sc * LOG2E), np.int32(bool(causal)))
    grid = (-(-n // c["fa08_rows"]), b * h)
    return (lambda: launch.launch(fn, grid, threads, args, shared_mem=smem)), out


def attention(q, k, v, *, causal: bool = False, variant: str = "qreload", scale: float | None = None,
              **knobs):
    """softmax(Q K^T * scale) V with one of :data:`VARIANTS` (default ``'qreload'``).
    ``q``, ``k``, ``v``: (B, H, N, d) float16, or uint16 holding bf16; d 64, 128 or 256; any
    N >= 1; ``causal`` masks keys after the query. ``knobs``: ``bn``, ``maxrregcount``,
    ``minb`` (:func:`build_spec`). Needs compute capability 8.0+ (or the PTX interpreter).
    Returns O (same dtype and shape)."""
    run, out = attention_launcher(q, k, v, causal=causal, variant=variant, scale=scale, **knobs)
    run()
    return out
