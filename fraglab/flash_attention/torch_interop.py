"""PyTorch next to the FA-2 kernel: ``scaled_dot_product_attention`` restricted to its flash
backend, and zero-copy DLPack views between torch tensors and the kernels' CuPy arrays (bf16
travels as uint16 bit patterns on the CuPy side). Imported only where torch is wanted."""
from __future__ import annotations

import numpy as np


def sdpa_flash():
    """``(torch, (context, make), note)``: ``context()`` is a context manager that allows only the
    flash backend of SDPA, ``make(q, k, v, causal)`` a callable running SDPA once, ``note`` the
    torch version. ``(None, None, reason)`` when torch or its CUDA device is missing."""
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:                                  # pragma: no cover - GPU machine only
        return None, None, f"torch not importable: {type(e).__name__}: {e}"
    if not torch.cuda.is_available():
        return None, None, "torch sees no CUDA device"

    def context():
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            return sdpa_kernel(SDPBackend.FLASH_ATTENTION)
        except ImportError:                                 # older torch
            return torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False,
                                                  enable_mem_efficient=False)

    def make(qt, kt, vt, causal):
        return lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
    return torch, (context, make), f"torch {torch.__version__}"


def sdpa_cudnn():
    """As :func:`sdpa_flash`, for SDPA's cuDNN backend (``SDPBackend.CUDNN_ATTENTION``, torch
    2.2 and newer); ``(None, None, reason)`` where torch, its GPU or that backend is missing."""
    torch, pair, note = sdpa_flash()
    if torch is None:
        return None, None, note
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        backend = SDPBackend.CUDNN_ATTENTION
    except (ImportError, AttributeError) as e:              # pragma: no cover - GPU machine only
        return None, None, f"torch {torch.__version__} has no cuDNN SDPA backend ({e})"
    return torch, (lambda: sdpa_kernel(backend), pair[1]), f"torch {torch.__version__}, cuDNN"


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
    tensors on the GPU viewed by CuPy (zero copy), or, without torch (``torch=None``), NumPy draws
    from ``rng`` copied to the GPU. For timing the course's kernels beside SDPA on equal inputs."""
    import cupy as cp
    if torch is None:
        from .kernels import random_qkv
        raw, _ = random_qkv(rng, shape, dtype)
        return None, [cp.asarray(a) for a in raw]
    tdt = torch.float16 if dtype == "f16" else torch.bfloat16
    ts = [torch.randn(shape, dtype=tdt, device="cuda") for _ in range(3)]
    return ts, [torch_to_cupy(t, dtype) for t in ts]
