"""Chapter 11's launch numbers, read back from its kernel files, their one home (``CONTRIBUTING.md``,
"Kernels"): every tile, block, ring depth and shared-memory size is an ``extern "C" __device__
const int lmh_*`` global of the file that launches with it, derived there from the ``constexpr``
the kernels use, never typed again in Python:

=============================  ==================================================================
``lmh_bm``, ``_bn``, ``_bk``,  the mma.sync tile and block (``kernels/11_fused_lm_head_config.cuh``:
``_stages``, ``_threads``      the forward, the atomic and the chunked backward)
``lmh_fwd_smem``               the forward's ring (``kernels/11_fused_lm_head.cu``)
``lmh_atomic_smem``            the atomic rung's ring and G tile (``kernels/11_fused_lm_head_bwd.cu``)
``lmh_gemm_bn``, ``_bk``,      the chunked rung's GEMMs and its G kernel
``_smem``, ``lmh_g_smem``      (``kernels/11_fused_lm_head_bwd_chunked.cu``)
``lmh_wgmma_*``                the Hopper rungs' forward and G kernel (``bm``, ``bn``, ``bk``,
                               ``stages``, ``threads``, ``smem``, ``g_smem``, and the setmaxnreg
                               budgets ``producer_regs``, ``consumer_regs``:
                               ``kernels/11_fused_lm_head_wgmma.cu``, the tma rung's file too)
``lmh_wgmma_gemm_*``           the Hopper rungs' two GEMMs (the same but ``g_smem``:
                               ``kernels/11_fused_lm_head_bwd_wgmma.cu``, the tma rung's file too)
=============================  ==================================================================

A launch reads them from the module it launches (:func:`launch_constants`, which follows a
``source=`` mutant or a lab's text); planning without a launch (a chunk's size, a scratch
budget, the module names ``kernels.BM`` and the like) reads them from the file's own build
(:func:`file_constants`).
"""
from __future__ import annotations

from .. import launch, toolchain

#: The prefix of every launch constant of chapter 11's kernel files.
PREFIX = "lmh_"
#: The Hopper rungs' target (wgmma.mma_async and setmaxnreg exist only there).
HOPPER_ARCH = "sm_90a"


def target(arch: str | None = None) -> str | None:
    """The target a launch here compiles for: ``arch``, else the interpreter's without a GPU
    (``None``, the GPU's own, with one)."""
    if arch is not None:
        return arch
    return launch.INTERPRETER_ARCH if launch.interpreted() else None


def file_constants(file: str, arch: str | None = None) -> dict[str, int]:
    """The ``lmh_*`` constants of ``file``'s own build for ``arch`` (default :func:`target`;
    every target gives the same numbers): what a plan reads without launching."""
    return toolchain.compile(file, target(arch)).constants(PREFIX)


def launch_constants(name: str, *, source: str | None = None,
                     arch: str | None = None) -> dict[str, int]:
    """The ``lmh_*`` constants of the module :func:`fraglab.launch.get_kernel` launches for
    ``name`` (``source`` instead of the file, as a mutant or the lab has it)."""
    return launch.constants(name, PREFIX, source=source, arch=arch)


def lazy_names(module: str, file: str, names: dict, arch: str | None = None):
    """A module ``__getattr__`` (PEP 562) for the names a module had before the kernel file became
    their one home: ``names`` maps an attribute (``BM``) to the constant it reads (``lmh_bm``) of
    ``file``, or to a ``(file, constant)`` pair; each read on use (:func:`file_constants`)."""
    def __getattr__(attr: str):
        if attr not in names:
            raise AttributeError(f"module {module!r} has no attribute {attr!r}")
        where, const = names[attr] if isinstance(names[attr], tuple) else (file, names[attr])
        return file_constants(where, arch)[const]
    return __getattr__
