"""PyTorch's attention next to the course's kernels: ``scaled_dot_product_attention`` restricted to
one backend (:func:`sdpa`: flash, cuDNN or memory-efficient), and zero-copy DLPack views between
torch tensors and the kernels' CuPy arrays (bf16 travels as uint16 bit patterns on the CuPy
side). Imported only where torch is wanted; nothing here imports torch at module level."""
from __future__ import annotations

import numpy as np

#: Backend name -> (``SDPBackend`` member, the keyword arguments of the older
#: ``torch.backends.cuda.sdp_kernel`` that allow only it, or None where it has none).
BACKENDS = {
    "sdpa_flash": ("FLASH_ATTENTION",
                   dict(enable_flash=True, enable_math=False, enable_mem_efficient=False)),
    "cudnn": ("CUDNN_ATTENTION", None),
    "sdpa_efficient": ("EFFICIENT_ATTENTION",
                       dict(enable_flash=False, enable_math=False, enable_mem_efficient=True)),
}


def sdpa(backend: str = "sdpa_flash"):
    """``(torch, (context, make), note)`` for one SDPA backend of :data:`BACKENDS`: ``context()``
    is a context manager that allows only that backend, ``make(q, k, v, causal)`` a callable
    running SDPA once, ``note`` the torch version. ``(None, None, reason)`` when torch, its CUDA
    device or (cuDNN, torch older than 2.2) the backend is missing."""
    member, legacy = BACKENDS[backend]
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:                                  # pragma: no cover - GPU machine only
        return None, None, f"torch not importable: {type(e).__name__}: {e}"
    if not torch.cuda.is_available():
        return None, None, "torch sees no CUDA device"
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        chosen = getattr(SDPBackend, member)

        def context():
            return sdpa_kernel(chosen)
    except (ImportError, AttributeError) as e:              # older torch
        if legacy is None:
            return None, None, f"torch {torch.__version__} has no cuDNN SDPA backend ({e})"

        def context():
            return torch.backends.cuda.sdp_kernel(**legacy)

    def make(qt, kt, vt, causal):
        return lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
    return torch, (context, make), f"torch {torch.__version__}" + (", cuDNN" if backend == "cudnn" else "")


def sdpa_flash():
    """:func:`sdpa` of the flash backend."""
    return sdpa("sdpa_flash")


def torch_to_cupy(t, dtype: str):
    """A CUDA torch tensor (float16 or bfloat16) as a CuPy array sharing its memory (bf16 as
    uint16 bits)."""
    import cupy as cp
    import torch
    if dtype == "f16":
        return cp.from_dlpack(t)
    return cp.from_dlpack(t.view(torch.int16)).view(cp.uint16)


def cupy_to_torch(a, dtype: str):
    """A kernel's CuPy output (float16, or uint16 bf16 bits) as a torch tensor sharing its memory."""
    import torch
    if dtype == "f16":
        return torch.from_dlpack(a)
    return torch.from_dlpack(a.view(np.int16)).view(torch.bfloat16)


def attention_inputs(torch, rng, shape, dtype: str = "f16"):
    """``(torch tensors or None, [q, k, v] as CuPy arrays)`` of ``shape``: standard-normal torch
    tensors on the GPU (on torch's current stream) viewed by CuPy (zero copy), or, without torch
    (``torch=None``), NumPy draws from ``rng`` copied to the GPU. For timing the course's kernels
    beside SDPA on equal inputs."""
    import cupy as cp
    if torch is None:
        from .inputs import random_qkv
        raw, _ = random_qkv(rng, shape, dtype)
        return None, [cp.asarray(a) for a in raw]
    tdt = torch.float16 if dtype == "f16" else torch.bfloat16
    ts = [torch.randn(shape, dtype=tdt, device="cuda") for _ in range(3)]
    return ts, [torch_to_cupy(t, dtype) for t in ts]


def rel_err(got, want) -> float:
    """||got - want|| / ||want|| of two torch tensors, in float32."""
    got, want = got.float(), want.float()
    return float((got - want).norm() / want.norm())
