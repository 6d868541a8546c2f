"""Lab 05's hook: the in-register FA-1 kernel with its softmax step written elsewhere.

:func:`fa1_lab_source` takes ``kernels/05_flash_attention_fa1.cu`` without its kernel lines, adds
the learner's ``online_softmax_step``, then ``kernels/05_flash_attention_lab.cuh`` (the softmax
path ``SoftmaxLab`` that calls the step) and one ``fa1_lab_d<D>`` kernel per head dimension.
"""
from __future__ import annotations

from .. import toolchain
from ..tools import KERNELS_DIR
from .constants import FA1_HEAD_DIMS, KERNELS_FA1

FA1_LAB_NAME = "05_flash_attention_fa1_lab.cu"

#: The file whose text follows the softmax step: the ``SoftmaxLab`` path around it.
FA1_LAB_TAIL = "05_flash_attention_lab.cuh"

#: The device function a ``softmax_source`` must define (see :func:`fa1_lab_source`).
FA1_LAB_STEP = ("__device__ __forceinline__ void online_softmax_step(float (&x)[8], float (&m)[2], "
                "float (&l)[2], float (&alpha)[2], float scale_log2)")


#: The kernel file's own softmax paths (the chapter's), from the first line of the first to the
#: closing line of the last: the lab's exercise writes that arithmetic, so the lab's translation
#: unit leaves them out (its kernels use SoftmaxLab only).
COURSE_SOFTMAX = ("struct SoftmaxPaperBaseline {", "struct SoftmaxInRegister {")


def without_course_softmax(lines: list[str]) -> list[str]:
    """``lines`` of the kernel file with :data:`COURSE_SOFTMAX`'s structs blanked (line numbers
    kept)."""
    first, last = (next(i for i, l in enumerate(lines) if l.startswith(m)) for m in COURSE_SOFTMAX)
    end = next(i for i in range(last, len(lines)) if lines[i].startswith("};"))
    return lines[:first] + [""] * (end + 1 - first) + lines[end + 1:]


def fa1_lab_source(softmax_source: str, *, unroll: int | None = None) -> str:
    """CUDA source of ``kernels/05_flash_attention_fa1.cu`` with its kernels replaced by
    ``fa1_lab_d<D>`` (D = 64, 128, 512): the in-register kernel whose softmax arithmetic is
    ``softmax_source``, which must define :data:`FA1_LAB_STEP`::

        __device__ __forceinline__ void online_softmax_step(float (&x)[8], float (&m)[2],
                                                            float (&l)[2], float (&alpha)[2],
                                                            float scale_log2);

    ``x``: the lane's 8 accumulator registers of S = Q K^T (unscaled; x[0, 1, 4, 5] in row
    g = lane / 4, x[2, 3, 6, 7] in row g + 8). ``m``, ``l``: the lane's running max (log2 domain,
    -inf before the first tile) and sum of rows g and g + 8. On return ``x`` holds P (normalized,
    FA-1 form), ``m`` and ``l`` the new statistics, ``alpha`` the factor of the old output rows
    (``l_old 2^(m_old - m_new) / l_new``). Storing P and alpha to shared memory is the kernel's.
    ``unroll`` sets ``FA1_UNROLL`` (1 to compare SASS with the kernels file built with
    ``defines={"FA1_UNROLL": 1}``). Use with :func:`fa1` (``softmax_source=``) or
    :func:`fraglab.toolchain.compile`.
    """
    if not isinstance(softmax_source, str):
        raise TypeError(f"softmax_source must be a str, got {type(softmax_source).__name__}")
    lines = toolchain.kernel_path(KERNELS_FA1).read_text().splitlines()
    keep = [line for line in lines if not line.startswith("FA1_ALL(")]
    if len(lines) - len(keep) != len(FA1_HEAD_DIMS):
        raise RuntimeError(f"{KERNELS_FA1}.cu no longer ends with one FA1_ALL(D) line per head "
                           "dimension; update fa1_lab_source")
    keep = without_course_softmax(keep)
    head = "" if unroll is None else f"#define FA1_UNROLL {int(unroll)}\n"
    tail = (KERNELS_DIR / FA1_LAB_TAIL).read_text()
    kernels = "".join(f"FA1_KERNEL(fa1_lab, {d}, SoftmaxLab)\n" for d in FA1_HEAD_DIMS)
    return (head + "\n".join(keep) + "\n\n// ---- the softmax step (fa1_lab_source) ----\n"
            + softmax_source + f"\n\n// ---- {FA1_LAB_TAIL} (fa1_lab_source) ----\n" + tail
            + kernels)
