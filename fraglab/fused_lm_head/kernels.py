"""The wrapper of ``kernels/11_fused_lm_head.cu``: :func:`fused_linear_cross_entropy`, the LM head's
matmul and its cross-entropy in one pass whose logits never reach global memory.

Arrays: CuPy on a GPU, NumPy on the PTX interpreter; ``float16``, or ``uint16`` holding bf16 bit
patterns (:func:`fraglab.dtypes.to_bf16`; CuPy and NumPy have no bfloat16). PyTorch tensors are
taken too (bf16 included) and the loss comes back as a tensor: CUDA tensors through DLPack
without a copy, CPU ones (interpreter) through NumPy. Every argument is checked before the
first launch; the outputs start poisoned.

The forward is a ladder of two rungs (:data:`VARIANTS`, one kernel file each, chosen with
``variant=``): ``"mma"``, ``kernels/11_fused_lm_head.cu`` (mma.sync, compute capability 8.0 and
newer), and ``"wgmma"``, ``kernels/11_fused_lm_head_wgmma.cu``
(Hopper's warpgroup MMA, sm_90a; :mod:`.wgmma`). Both write the same partials, merged by the mma
file's ``lmhead_merge``. By default (:func:`default_variant`) a Hopper GPU runs :data:`FINAL`.
"""
from __future__ import annotations

import contextlib

import numpy as np

from .. import device, launch
from . import checks, config, rungs, wgmma
# the wrapper's names for what the checks hold (the callers' ``kernels.IGNORE_INDEX`` and so on)
from .checks import D_MULTIPLE, IGNORE_INDEX, REDUCTIONS, max_rows, requires  # noqa: F401

KERNELS = rungs.FORWARD["mma"].file
#: The forward's rungs, in ladder order (their files, targets and kernels: ``rungs.FORWARD``;
#: :data:`KERNELS`, then the wgmma rung's, then the tma rung's, its producer on the TMA).
VARIANTS = tuple(rungs.FORWARD)
FINAL = VARIANTS[-1]
#: Threads per block of the merge kernel (any: it reads blockDim).
MERGE_THREADS = 256
#: Most vocabulary splits of a launch (each split's partials are 12 bytes a token).
MAX_SPLITS = 64


def tile(arch: str | None = None) -> dict[str, int]:
    """The mma rung's launch numbers, read back from :data:`KERNELS`'s build
    (:func:`.config.file_constants`): ``lmh_bm``, ``lmh_bn``, ``lmh_bk``, ``lmh_stages``,
    ``lmh_threads`` (the tile and block of the forward and of the backward's recomputed tiles,
    ``kernels/11_fused_lm_head_config.cuh``) and ``lmh_fwd_smem``."""
    return config.file_constants(KERNELS, arch)


#: ``kernels.BM`` and the like: the mma rung's numbers as this module named them before its kernel
#: file became their one home, read from the build on use (:func:`tile`).
__getattr__ = config.lazy_names(__name__, KERNELS, {
    "BM": "lmh_bm", "BN": "lmh_bn", "BK": "lmh_bk", "STAGES": "lmh_stages",
    "THREADS": "lmh_threads", "SMEM_BYTES": "lmh_fwd_smem"})


def kernel_name(dtype: str, softcap: bool) -> str:
    """The forward kernel for ``dtype`` ('f16' or 'bf16'), with or without the soft-cap."""
    return rungs.kernel_name(rungs.FORWARD["mma"], "fwd", dtype, softcap)


def default_variant(dtype: str = "bf16") -> str:
    """The rung a call without ``variant=`` runs: :data:`FINAL` on a GPU that runs it (Hopper),
    else ``"mma"``, on the PTX interpreter too (the wgmma rung runs there when asked for)."""
    if not launch.interpreted() and device.can_run(wgmma.ARCH)[0]:
        return FINAL
    return "mma"


def choose_splits(row_blocks: int, n_tiles: int, sms: int) -> tuple[int, int]:
    """``(splits, tiles_per_split)``: how many ranges of vocabulary tiles to cut, so that
    ``row_blocks * splits`` blocks fill ``sms`` multiprocessors (one block each) in waves that
    end nearly full; no split is empty. The fewest splits among the best-filled."""
    best = None
    for s in range(1, min(n_tiles, MAX_SPLITS) + 1):
        per = -(-n_tiles // s)
        s_real = -(-n_tiles // per)
        blocks = row_blocks * s_real
        waves = -(-blocks // sms)
        # the last wave's emptiness, and the longest block's share of its wave's work
        fill = blocks / (waves * sms) * (n_tiles / (s_real * per))
        key = (round(fill, 2), -s_real)
        if best is None or key > best[0]:
            best = (key, s_real, per)
        if blocks >= 4 * sms:
            break
    return best[1], best[2]


# --- PyTorch in, PyTorch out --------------------------------------------------------------------

def is_torch(x) -> bool:
    """Is ``x`` a torch tensor (without importing torch)?"""
    return type(x).__module__.split(".")[0] == "torch"


def from_torch(name: str, x):
    """A torch tensor as an array of this mode (no copy on the GPU): bf16 as uint16 bits."""
    import torch
    if launch.interpreted():
        if x.is_cuda:
            raise TypeError(f"{name} is a CUDA tensor, but kernels run on the PTX interpreter "
                            "here: pass a CPU tensor")
        t = x.detach()
        return (t.view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.bfloat16
                else t.numpy())
    import cupy
    if not x.is_cuda:
        raise TypeError(f"{name} is a CPU tensor: move it to the GPU with .cuda()")
    t = x.detach()
    if t.dtype == torch.bfloat16:
        return cupy.from_dlpack(t.view(torch.int16)).view(np.uint16)
    return cupy.from_dlpack(t)


@contextlib.contextmanager
def torch_stream():
    """On a GPU, CuPy's current stream made torch's current stream for the block, so that the
    kernels queue behind (and before) torch's work: CuPy keeps one current stream per thread, and
    torch's autograd engine runs a backward pass on a thread of its own, where CuPy's would
    otherwise be the legacy default stream, unordered with a non-blocking stream of torch's.
    Nothing on the interpreter."""
    if launch.interpreted():
        yield
        return
    import cupy
    import torch
    with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
        yield


def to_torch(a, like):
    """An array of this mode as a torch tensor (through DLPack on the GPU, NumPy on the
    interpreter): what :func:`fused_linear_cross_entropy` and the autograd Function return."""
    import torch
    if launch.interpreted():
        return torch.from_numpy(np.asarray(a))
    return torch.from_dlpack(a)


# --- the launch ---------------------------------------------------------------------------------

def launcher(h, w, targets, ignore_index: int = IGNORE_INDEX, reduction: str = "mean",
             softcap: float | None = None, *, splits: int | None = None, source: str | None = None,
             variant: str | None = None,
             name: str = KERNELS, keep: dict | None = None, block_max: bool = False):
    """Check the arguments of :func:`fused_linear_cross_entropy` (arrays of this mode), allocate
    the poisoned partials and losses, and return ``(run, out)``: ``run()`` launches the forward
    and merge kernels (and the reduction) once on the current stream and returns the result
    (for :mod:`fraglab.bench`); ``out`` holds the per-token losses. ``splits``: vocabulary
    splits (default :func:`choose_splits`); ``variant``: the rung (:data:`VARIANTS`, default
    :func:`default_variant`); ``source`` replaces the rung's kernel file, compiled as ``name``
    (the lab); ``keep``: a dict that receives the partials ``part`` (3, splits, n), from
    which :func:`fraglab.fused_lm_head.backward.lse_from_partials` gets each token's log-sum-exp
    for the backward pass. ``block_max`` (the Hopper rungs, with ``keep``): ``keep["bmax"]``
    receives each (128-token, 128-word: ``lmh_bn``) block's largest logit, float32 (ceil(n / 128),
    ceil(V / BN)), with which the backward's filter skips the tiles no token can reach
    (``backward_launcher(bmax=)``); None on the mma rung."""
    # the targets' values last, just before the caller launches (their check waits for the GPU,
    # which then idles until the first launch: the host's preparations come first)
    dtype, (n, v, d), cap = checks.check_arguments(h, w, targets, ignore_index, reduction, softcap,
                                                   check_targets=False)
    variant = checks.check_variant(variant, rungs.FORWARD, lambda: default_variant(dtype))
    maps, rung = (), rungs.FORWARD[variant]
    fwd_name, arch = rungs.kernel_name(rung, "fwd", dtype, cap is not None), rung.arch
    name = rung.file if name == KERNELS else name
    checks.check_rung(rung, "mma")
    if rung.hopper:
        c = config.launch_constants(name, source=source, arch=arch)    # the module launched
        bm, bn, threads, smem = (c[f"lmh_wgmma_{k}"] for k in ("bm", "bn", "threads", "smem"))
        if rung.tensor_maps:
            maps = wgmma.tensor_maps(h, w, c)
    else:
        c = config.launch_constants(name, source=source)
        bm, bn, threads, smem = c["lmh_bm"], c["lmh_bn"], c["lmh_threads"], c["lmh_fwd_smem"]
    row_blocks, n_tiles = -(-n // bm), -(-v // bn)
    if splits is None:
        splits, per = choose_splits(row_blocks, n_tiles, launch.sm_count())
    else:
        launch.check_range("splits", splits, 1, min(n_tiles, MAX_SPLITS))
        per = -(-n_tiles // splits)
        splits = -(-n_tiles // per)          # no empty split
    tg = targets if targets.dtype == np.int32 else targets.astype(np.int32)
    part = launch.poisoned((3, splits, n), np.float32)
    loss = launch.poisoned((n,), np.float32)
    if keep is not None:
        keep["part"] = part
    fwd = launch.get_kernel(name, fwd_name, source=source, arch=arch)
    merge = (launch.get_kernel(KERNELS, "lmhead_merge") if rung.hopper
             else launch.get_kernel(name, "lmhead_merge", source=source))
    fwd_args = (h, w, tg, part, np.int32(n), np.int32(v), np.int32(d), np.int32(per),
                np.float32(cap or 0.0))
    merge_args = (part, tg, loss, np.int32(n), np.int32(splits), np.int32(ignore_index))
    xp = np if launch.interpreted() else __import__("cupy")
    # each filter block's largest logit (Hopper rungs, when asked): -inf, then atomic maxima;
    # a filter block is the mma tile's width (the flags' unit, kernels/11_fused_lm_head_wgmma.cu)
    nb = -(-v // tile()["lmh_bn"]) if block_max and rung.hopper else 0
    bmax = xp.full((row_blocks, nb) if nb else (1,), -np.inf, np.float32)
    if keep is not None:
        keep["bmax"] = bmax if nb else None
    if rung.hopper:
        fwd_args += (bmax, np.int32(nb))
    fwd_args += tuple(m.device for m in maps)
    # the count of tokens not ignored stays on the device (no synchronisation before the launch)
    count = None if reduction != "mean" else (targets != ignore_index).sum()

    checks.check_target_values(targets, ignore_index, v)

    def run():
        if nb:
            bmax[...] = -np.inf
        launch.launch(fwd, (row_blocks, splits), threads, fwd_args, shared_mem=smem)
        launch.launch(merge, -(-n // MERGE_THREADS), MERGE_THREADS, merge_args)
        if reduction == "none":
            return loss
        total = loss.sum(dtype=np.float64)
        if reduction == "mean":           # NaN when every token is ignored, as PyTorch
            total = xp.where(count > 0, total / xp.maximum(count, 1), np.nan)
        return total.astype(np.float32)

    run.tensor_maps = maps          # alive as long as the launcher (their bytes point at h and w)
    return run, loss


def fused_linear_cross_entropy(h, w, targets, ignore_index: int = IGNORE_INDEX,
                               reduction: str = "mean", softcap: float | None = None, *,
                               splits: int | None = None, variant: str | None = None):
    """Cross-entropy of the logits ``h w^T`` against ``targets``, without the logits in memory:
    per token ``logsumexp_v(z_v) - z_target`` with ``z = h w^T`` (``softcap``: ``z = cap
    tanh(z / cap)``, as Gemma 2), 0 for a token whose target is ``ignore_index``.

    ``h`` (N, d) and ``w`` (V, d): float16, or uint16 holding bf16 (CuPy on a GPU, NumPy on the
    interpreter), or torch tensors (float16 / bfloat16); d a multiple of 16, any N and V.
    ``targets`` (N,) int32 or int64, each in [0, V) or ``ignore_index``. ``reduction``: 'none'
    (float32 (N,)), 'sum', or 'mean' over the tokens not ignored (NaN when all are, as PyTorch).
    FP32 accumulation and losses. Needs compute capability 8.0 (:func:`requires`);
    ``variant``: the rung, :data:`VARIANTS` (``"wgmma"`` and ``"tma"`` need sm_90a), default
    :func:`default_variant`."""
    torch_in = is_torch(h)
    if torch_in or is_torch(w) or is_torch(targets):
        if not (is_torch(h) and is_torch(w) and is_torch(targets)):
            raise TypeError("h, w and targets must all be torch tensors, or none of them")
        h, w, targets = (from_torch(k, x) for k, x in (("h", h), ("w", w), ("targets", targets)))
    run, _ = launcher(h, w, targets, ignore_index, reduction, softcap, splits=splits,
                      variant=variant)
    out = run()
    return to_torch(out, h) if torch_in else out

