"""Chapter 11's rungs in one table: for each rung of the forward (:data:`FORWARD`) and of the
backward (:data:`BACKWARD`), its kernel files, its target and the names of its kernels, which
the wrappers (:mod:`.kernels`, :mod:`.backward`) and the autograd Function take from here. The
tiles are the files' own (``lmh_*`` constants, :mod:`.config`).

A kernel's name is ``lmhead_<tag>_<kind>_<dtype>``, ``_softcap`` after it where the soft-cap is
compiled in (:func:`kernel_name`): ``kind`` ``fwd`` (the forward), ``g`` (the backward's G
kernel), ``dw`` and ``dh`` (its GEMMs, which never see the cap); the mma rungs' names are older
than the rule and keep their own (``lmhead_fwd_*``, ``lmhead_bwd_*``, ``lmhead_bwdc_*``).
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import launch
from . import config


@dataclass(frozen=True)
class Rung:
    """One rung: ``file`` holds its forward or G kernel, ``gemm_file`` the backward's GEMMs
    (the chunked rungs), ``arch`` the target it is built for (None: the GPU's, or the
    interpreter's sm_80), ``names`` the kernel name of each kind before the dtype,
    ``tensor_maps`` whether its kernels load through the TMA (two tensor maps a launch)."""
    name: str
    file: str
    arch: str | None
    names: dict
    gemm_file: str | None = None
    tensor_maps: bool = False

    @property
    def hopper(self) -> bool:
        return self.arch == config.HOPPER_ARCH


def _hopper(rung: str, file: str, gemm_file: str | None, kinds, tensor_maps: bool = False) -> Rung:
    return Rung(rung, file, config.HOPPER_ARCH, {k: f"lmhead_{rung}_{k}" for k in kinds}, gemm_file,
                tensor_maps)


#: The forward's rungs, in ladder order.
FORWARD = {
    "mma": Rung("mma", "11_fused_lm_head", None, {"fwd": "lmhead_fwd"}),
    "wgmma": _hopper("wgmma", "11_fused_lm_head_wgmma", None, ("fwd",)),
    "tma": _hopper("tma", "11_fused_lm_head_tma", None, ("fwd",), tensor_maps=True),
}
#: The backward's rungs, in ladder order: the Hopper rungs' G kernel is in the forward's file of
#: the same rung, their GEMMs in a file of their own.
BACKWARD = {
    "atomic": Rung("atomic", "11_fused_lm_head_bwd", None,
                   {"bwd": "lmhead_bwd", "cast": "lmhead_bwd_cast"}),
    "chunked": Rung("chunked", "11_fused_lm_head_bwd_chunked", None,
                    {"g": "lmhead_bwdc_g", "dw": "lmhead_bwdc_dw", "dh": "lmhead_bwdc_dh"},
                    "11_fused_lm_head_bwd_chunked"),
    "wgmma": _hopper("wgmma", "11_fused_lm_head_wgmma", "11_fused_lm_head_bwd_wgmma",
                     ("g", "dw", "dh")),
    "tma": _hopper("tma", "11_fused_lm_head_tma", "11_fused_lm_head_bwd_tma", ("g", "dw", "dh"),
                   tensor_maps=True),
}
#: The kinds a soft-cap is compiled into (the GEMMs and the casts never see it).
CAPPED = ("fwd", "bwd", "g")


def kernel_name(rung: Rung, kind: str, dtype: str, softcap: bool = False) -> str:
    """The kernel of ``kind`` of ``rung`` for ``dtype`` ('f16' or 'bf16'), with or without the
    soft-cap (where :data:`CAPPED`)."""
    launch.check_choice("dtype", dtype, ("f16", "bf16"))
    launch.check_choice("kind", kind, tuple(rung.names))
    return f"{rung.names[kind]}_{dtype}" + ("_softcap" if softcap and kind in CAPPED else "")
