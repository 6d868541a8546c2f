"""The backward pass of the fused loss: the gradients for h and w, the logits recomputed tile by tile
from h, w and the forward's per-token log-sum-exp. Three rungs (:data:`VARIANTS`, ``variant=``):

* ``"atomic"`` (``kernels/11_fused_lm_head_bwd.cu``): one block per (token block, vocabulary tile)
  computes G's tile and adds its shares of dh and dw to FP32 buffers with atomics, then two casts;
  needs an (n, d) and a (V, d) FP32 buffer, and its sums' order varies from run to run;
* ``"chunked"`` (``kernels/11_fused_lm_head_bwd_chunked.cu``, the default off Hopper): the
  vocabulary in chunks; per chunk G is written (16-bit, at most :data:`CHUNK_BYTES`), then dw's
  rows of the chunk by one GEMM (written once) and dh by another (an (n, d) FP32 buffer across
  chunks when there are several): no atomics, no (V, d) buffer, the same bits every run;
* ``"wgmma"``: the chunked rung on Hopper's warpgroup MMA (sm_90a): G from the forward's wgmma
  mainloop with G's epilogue (``kernels/11_fused_lm_head_wgmma.cu``), the two GEMMs with MN-major
  operands (``kernels/11_fused_lm_head_bwd_wgmma.cu``); the same G, flags and chunks;
* ``"tma"`` (the default on Hopper): the wgmma rung with its producers on the TMA: the G kernel
  is the forward's tma rung with G's epilogue (``kernels/11_fused_lm_head_tma.cu``), the GEMMs
  ``kernels/11_fused_lm_head_bwd_tma.cu``; the same results, bit for bit.

:func:`scratch_bytes` says what each rung allocates beyond the gradients.

    loss, lse = forward_with_lse(h, w, targets)                  # the forward, keeping lse
    dh, dw = linear_cross_entropy_backward(h, w, targets, lse, grad)

Arrays as :mod:`.kernels` takes them (CuPy on a GPU, NumPy on the interpreter; float16, or uint16
holding bf16). ``grad`` is the loss's gradient: one number for 'mean' and 'sum', one per token for
'none'. The gradients come back in h's element type (FP32 sums, rounded once); every argument is
checked before the first launch and the outputs start poisoned. :mod:`.autograd` wraps both
passes in a ``torch.autograd.Function``.
"""
from __future__ import annotations

import numpy as np

from .. import launch
from . import checks, config, kernels, rungs, wgmma

KERNELS = rungs.BACKWARD["atomic"].file
CHUNKED = rungs.BACKWARD["chunked"].file
#: The backward's rungs, in ladder order (their kernel files, targets and kernels:
#: ``rungs.BACKWARD``; :data:`KERNELS`, :data:`CHUNKED`, and for "wgmma" and "tma" the G kernel
#: of the forward's rung of the same name with the GEMMs of a file of their own).
VARIANTS = tuple(rungs.BACKWARD)
#: The Hopper rungs (sm_90a).
HOPPER = tuple(r for r, x in rungs.BACKWARD.items() if x.hopper)
#: The rung without ``variant=`` where Hopper's is not run (:func:`default_variant`).
DEFAULT = "chunked"
#: ``backward.BM`` and the like, as this module named them before the kernel files became their
#: one home, read from the builds on use (:mod:`.config`): the tile both rungs recompute (the
#: forward's, ``kernels/11_fused_lm_head_config.cuh``), the atomic rung's shared memory (its
#: pipeline's stages and G's 16-bit tile) and the chunked rung's GEMM tile (BM rows of C,
#: ``GEMM_BN`` columns of d, ``GEMM_BK`` of k a step) and shared memory.
__getattr__ = config.lazy_names(__name__, KERNELS, {
    **{k.upper(): (kernels.KERNELS, f"lmh_{k}") for k in ("bm", "bn", "bk", "stages", "threads")},
    "SMEM_BYTES": "lmh_atomic_smem", "GEMM_BN": (CHUNKED, "lmh_gemm_bn"),
    "GEMM_BK": (CHUNKED, "lmh_gemm_bk"), "GEMM_SMEM_BYTES": (CHUNKED, "lmh_gemm_smem")})
#: The chunked rung's budget for G, one chunk of the vocabulary (16-bit values, n x chunk words).
CHUNK_BYTES = 64 << 20
CAST_THREADS = 256
#: The skip threshold the brief and Cut Cross-Entropy use for bf16: a tile whose every
#: |softmax - onehot| is below 2^-12 is left out (``filter_eps=FILTER_EPS``); off by default.
FILTER_EPS = 2.0 ** -12


def default_variant(dtype: str = "bf16") -> str:
    """The rung a call without ``variant=`` runs: the forward's default where that is a Hopper
    rung (:data:`HOPPER`, on a Hopper GPU), else :data:`DEFAULT` (the interpreter runs the Hopper
    rungs when asked)."""
    fwd = kernels.default_variant(dtype)
    return fwd if fwd in HOPPER else DEFAULT


def kernel_name(dtype: str, softcap: bool) -> str:
    """The backward kernel for ``dtype`` ('f16' or 'bf16'), with or without the soft-cap."""
    return rungs.kernel_name(rungs.BACKWARD["atomic"], "bwd", dtype, softcap)


def _xp():
    return np if launch.interpreted() else __import__("cupy")


def lse_from_partials(part):
    """Each token's log-sum-exp (natural log, float32 (n,)) from the forward's partials (3, splits,
    n): the splits' (max, sum) merged in float64, with array operations (no copy to the host)."""
    xp = _xp()
    m = part[0].astype(xp.float64)
    l = part[1].astype(xp.float64)
    top = m.max(axis=0)
    lse2 = top + xp.log2((l * xp.exp2(m - top)).sum(axis=0))
    return (lse2 * np.log(2.0)).astype(xp.float32)


def forward_with_lse(h, w, targets, ignore_index: int = kernels.IGNORE_INDEX,
                     reduction: str = "mean", softcap: float | None = None, *,
                     splits: int | None = None, variant: str | None = None,
                     keep: dict | None = None):
    """:func:`fraglab.fused_lm_head.fused_linear_cross_entropy` on arrays of this mode, and each
    token's log-sum-exp for the backward pass: ``(loss, lse)``. ``variant``: the forward's rung;
    ``keep``: a dict that receives ``bmax``, each filter block's largest logit (the Hopper rungs;
    None on the mma rung), for :func:`backward_launcher`'s ``bmax``."""
    kept: dict = {}
    run, _ = kernels.launcher(h, w, targets, ignore_index, reduction, softcap, splits=splits,
                              variant=variant, keep=kept, block_max=keep is not None)
    loss = run()
    if keep is not None:
        keep["bmax"] = kept["bmax"]
    return loss, lse_from_partials(kept["part"])


def chunk_tiles(n: int, v: int, chunk_bytes: int = CHUNK_BYTES) -> int:
    """Vocabulary tiles (of ``lmh_bn`` words, the mma tile's) in one chunk of the chunked rung: as
    many as keep G (n x chunk words, 16-bit) within ``chunk_bytes``, at least one, at most all of
    V's."""
    bn = kernels.tile()["lmh_bn"]
    fit = int(chunk_bytes) // (2 * max(int(n), 1) * bn)
    return max(1, min(fit, -(-int(v) // bn)))


def scratch_bytes(n: int, v: int, d: int, variant: str | None = DEFAULT,
                  chunk_bytes: int = CHUNK_BYTES) -> dict[str, int]:
    """What ``variant`` (None: :func:`default_variant`) allocates beyond the gradients, by buffer
    (bytes): the atomic rung's FP32 sums of dh and dw; the chunked rungs' G (one chunk), its
    tiles' flags and, with more than one chunk, dh's FP32 sums. Counters and the dl and gscale
    vectors (n + 2 floats) left out."""
    variant = checks.check_variant(variant, rungs.BACKWARD, default_variant)
    if variant == "atomic":
        return {"dh32": 4 * n * d, "dw32": 4 * v * d}
    # "chunked", "wgmma" and "tma": the same buffers
    tiles = chunk_tiles(n, v, chunk_bytes)
    bm, bn = kernels.tile()["lmh_bm"], kernels.tile()["lmh_bn"]
    out = {"G": 2 * n * tiles * bn, "flags": -(-n // bm) * tiles}
    if tiles < -(-v // bn):
        out["dh32"] = 4 * n * d
    return out


def backward_launcher(h, w, targets, lse, grad, ignore_index: int = kernels.IGNORE_INDEX,
                      reduction: str = "mean", softcap: float | None = None, *,
                      filter_eps: float | None = None, out=None,
                      source: str | dict | None = None, variant: str | None = None,
                      chunk_bytes: int = CHUNK_BYTES, events: dict | None = None,
                      poison: bool = True, check_targets: bool = True, bmax=None):
    """Check everything, allocate, and return ``(run, res)``: ``run()`` launches the rung's
    kernels on the current stream and returns ``(dh, dw)``; ``res`` holds them and ``skipped``
    (a one-element uint32 array: tiles left out by the filter, counted by the last run).
    ``out``: ``(dh, dw)`` arrays to write into (the autograd Function's tensors), poisoned here
    first. ``source``: another kernel file for the rung (a mutant; for "wgmma" the G kernel's
    file, or a dict from file name, ``wgmma.FILE`` or ``wgmma.GEMM_FILE``, to its text).
    ``variant``: :data:`VARIANTS` (default :func:`default_variant`); ``chunk_bytes``: the
    chunked rungs' budget for G. ``events`` (a GPU, the chunked rungs): a dict that each ``run()``
    fills with ``{"g" | "dw" | "dh": [(start, end) CUDA events of each launch]}``, so that a
    caller can add up where the time goes (:func:`kernel_ms`). ``poison=False``: ``out`` is not
    poisoned first (the kernels write every element; the checks poison, a training step need not
    pay a pass over dw for it); ``check_targets``: as :func:`.checks.check_backward_arguments` takes it.
    ``bmax``: the forward's largest logit of each filter block (:func:`forward_with_lse`'s
    ``keep``); with the filter on, the Hopper rungs' G kernel then skips the tiles where no token
    can reach ``filter_eps`` (the same flags, G and gradients, fewer logits recomputed); the
    other rungs ignore it."""
    dtype, (n, v, d), cap, g = checks.check_backward_arguments(
        h, w, targets, lse, grad, ignore_index, reduction, softcap, filter_eps, check_targets)
    variant = checks.check_variant(variant, rungs.BACKWARD, lambda: default_variant(dtype))
    if bmax is not None:
        tile = kernels.tile()
        launch.check_array("bmax", bmax, dtype=np.float32,
                           shape=(-(-n // tile["lmh_bm"]), -(-v // tile["lmh_bn"])))
    checks.check_rung(rungs.BACKWARD[variant], DEFAULT)
    checks.check_chunk_bytes(chunk_bytes)
    xp = _xp()
    if out is None:
        dh, dw = launch.poisoned((n, d), h.dtype), launch.poisoned((v, d), h.dtype)
    else:
        dh, dw = out
        launch.check_array("dh", dh, dtype=h.dtype, shape=(n, d))
        launch.check_array("dw", dw, dtype=h.dtype, shape=(v, d))
        if poison:
            for a in (dh, dw):
                a[...] = launch.poisoned((1,), h.dtype)[0]
    tg = targets if targets.dtype == np.int32 else targets.astype(np.int32)
    # dl scaled to at most 1 in magnitude (G's 16-bit tile), gscale in FP32 after the products
    if reduction == "none":
        top = xp.abs(g).max()
        safe = xp.where(top > 0, top, xp.float32(1))
        dl = (g / safe).astype(xp.float32)
        gscale = safe.reshape(1).astype(xp.float32)
    else:
        dl = xp.ones(n, xp.float32)
        gscale = g.reshape(1)
        if reduction == "mean":
            count = (targets != ignore_index).sum()
            gscale = xp.where(count > 0, gscale / xp.maximum(count, 1), xp.float32(0))
        gscale = gscale.astype(xp.float32)
    skipped = xp.zeros(1, xp.uint32)
    eps = np.float32(filter_eps if filter_eps is not None else 0.0)
    res = {"dh": dh, "dw": dw, "skipped": skipped}
    if variant == "atomic":
        run = _atomic(h, w, tg, lse, dl, gscale, skipped, dh, dw, dtype, (n, v, d), ignore_index,
                      cap, eps, source)
    else:
        run = _chunked(h, w, tg, lse, dl, gscale, skipped, dh, dw, dtype, (n, v, d),
                       ignore_index, cap, eps, source, chunk_tiles(n, v, chunk_bytes),
                       rung=variant, events=events,
                       bmax=bmax if filter_eps is not None else None)
    return run, res


def _atomic(h, w, tg, lse, dl, gscale, skipped, dh, dw, dtype, nvd, ignore_index, cap, eps, source):
    """The atomic rung's ``run``: FP32 sums zeroed, the kernel, two casts."""
    n, v, d = nvd
    xp = _xp()
    dh32 = xp.zeros((n, d), xp.float32)
    dw32 = xp.zeros((v, d), xp.float32)
    bwd = launch.get_kernel(KERNELS, kernel_name(dtype, cap is not None), source=source)
    cast = launch.get_kernel(KERNELS, rungs.kernel_name(rungs.BACKWARD["atomic"], "cast", dtype),
                             source=source)
    c = config.launch_constants(KERNELS, source=source)
    args = (h, w, tg, lse, dl, dh32, dw32, skipped, np.int32(n), np.int32(v), np.int32(d),
            np.int32(ignore_index), np.float32(cap or 0.0), eps, gscale)
    grid = (-(-n // c["lmh_bm"]), -(-v // c["lmh_bn"]))
    sms = launch.sm_count()

    def run():
        for a in (dh32, dw32, skipped):
            a[...] = 0
        launch.launch(bwd, grid, c["lmh_threads"], args, shared_mem=c["lmh_atomic_smem"])
        for src, dst in ((dh32, dh), (dw32, dw)):
            pairs = src.size // 2
            blocks = max(1, min(-(-pairs // CAST_THREADS), 8 * sms))
            launch.launch(cast, blocks, CAST_THREADS, (src, dst, np.int64(src.size)))
        return dh, dw
    return run


def _chunked(h, w, tg, lse, dl, gscale, skipped, dh, dw, dtype, nvd, ignore_index, cap, eps,
             source, tiles, rung="chunked", events=None, bmax=None):
    """The chunked rungs' ``run``: per chunk of ``tiles`` vocabulary tiles, G, dw's rows, dh;
    ``rung``: "chunked" (mma.sync), or a Hopper rung (:data:`HOPPER`: its G kernel, the wgmma
    GEMMs; ``source``: :func:`backward_launcher`'s; ``bmax``: the forward's block maxima, which
    its G kernel reads with the filter on)."""
    n, v, d = nvd
    xp = _xp()
    r = rungs.BACKWARD[rung]
    on_wgmma = r.hopper
    names = {k: rungs.kernel_name(r, k, dtype, cap is not None) for k in ("g", "dw", "dh")}
    # the launch numbers of the modules launched (source= included): the G kernel's grid, block
    # and shared memory, the GEMMs' tile of C, block and shared memory
    if on_wgmma:
        gfile, gemm_file = r.file, r.gemm_file
        src = source if isinstance(source, dict) else {gfile: source}
        gc = config.launch_constants(gfile, source=src.get(gfile), arch=wgmma.ARCH)
        mc = config.launch_constants(gemm_file, source=src.get(gemm_file), arch=wgmma.ARCH)
        # G, its flags and the GEMMs' k steps in 128-token x 128-word blocks: the mma tile's
        unit = kernels.tile()
        bm, bn = unit["lmh_bm"], unit["lmh_bn"]
        g_grid = lambda nt: (-(-n // gc["lmh_wgmma_bm"]),                              # noqa: E731
                             -(-nt * bn // gc["lmh_wgmma_bn"]))
        g_threads, g_smem = gc["lmh_wgmma_threads"], gc["lmh_wgmma_g_smem"]
        gemm_bm, gemm_bn, gemm_threads, gemm_smem = (mc[f"lmh_wgmma_gemm_{k}"]
                                                     for k in ("bm", "bn", "threads", "smem"))
    else:
        c = config.launch_constants(r.file, source=source)
        bm, bn = c["lmh_bm"], c["lmh_bn"]
        g_grid = lambda nt: (-(-n // bm), nt)                                          # noqa: E731
        g_threads, g_smem = c["lmh_threads"], c["lmh_g_smem"]
        gemm_bm, gemm_bn = bm, c["lmh_gemm_bn"]
        gemm_threads, gemm_smem = c["lmh_threads"], c["lmh_gemm_smem"]
    n_tiles, row_blocks = -(-v // bn), -(-n // bm)
    chunks = -(-n_tiles // tiles)
    ldg = tiles * bn
    G = launch.poisoned((n, ldg), h.dtype)
    flags = xp.zeros((row_blocks, tiles), xp.uint8)
    dh32 = xp.zeros((n, d), xp.float32) if chunks > 1 else xp.zeros((1,), xp.float32)
    if on_wgmma:
        gk = launch.get_kernel(gfile, names["g"], source=src.get(gfile), arch=r.arch)
        maps = wgmma.tensor_maps(h, w, gc) if r.tensor_maps else ()
        dwk, dhk = (launch.get_kernel(gemm_file, names[k], source=src.get(gemm_file), arch=r.arch)
                    for k in ("dw", "dh"))
        gmaps = wgmma.gemm_maps(G, h, w, mc) if r.tensor_maps else {"dw": (), "dh": ()}
        pre = ((bmax, np.int32(bmax.shape[1])) if bmax is not None
               else (xp.zeros(1, xp.float32), np.int32(0)))
    else:
        maps, gmaps = (), {"dw": (), "dh": ()}
        gk, dwk, dhk = (launch.get_kernel(r.file, names[k], source=source) for k in ("g", "dw", "dh"))
    col_blocks = -(-d // gemm_bn)
    if events is not None and launch.interpreted():
        raise ValueError("events= times launches on a GPU; the interpreter has no CUDA events")

    def timed(kind, *args, **kw):
        if events is None:
            return launch.launch(*args, **kw)
        import cupy
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        launch.launch(*args, **kw)
        end.record()
        events.setdefault(kind, []).append((start, end))

    def run():
        skipped[...] = 0
        if events is not None:
            events.clear()
        for c in range(chunks):
            t0 = c * tiles
            nt = min(tiles, n_tiles - t0)
            v0 = t0 * bn
            if on_wgmma:                  # votes OR into the flags: zeros first
                flags[...] = 0
                timed("g", gk, g_grid(nt), g_threads,
                      (h, w, tg, lse, dl, G, np.int32(ldg), flags, skipped, np.int32(n),
                       np.int32(v), np.int32(d), np.int32(v0), np.int32(nt),
                       np.int32(ignore_index), np.float32(cap or 0.0), eps, *pre,
                       *(m.device for m in maps)),
                      shared_mem=g_smem)
            else:
                timed("g", gk, g_grid(nt), g_threads,
                      (h, w, tg, lse, dl, G, np.int32(ldg), flags, skipped, np.int32(n),
                       np.int32(v), np.int32(d), np.int32(v0), np.int32(ignore_index),
                       np.float32(cap or 0.0), eps), shared_mem=g_smem)
            timed("dw", dwk, (nt, col_blocks), gemm_threads,
                  (G, np.int32(ldg), h, flags, np.int32(nt), np.int32(min(v - v0, nt * bn)),
                   np.int32(n), np.int32(d), np.int32(v0), gscale, dw,
                   *(m.device for m in gmaps["dw"])),
                  shared_mem=gemm_smem)
            mode = (1 if c > 0 else 0) | (2 if c == chunks - 1 else 0)
            timed("dh", dhk, (-(-n // gemm_bm), col_blocks), gemm_threads,
                  (G, np.int32(ldg), w, flags, np.int32(nt), np.int32(nt * bn), np.int32(n),
                   np.int32(d), np.int32(v), np.int32(v0), gscale, dh32, dh, np.int32(mode),
                   *(m.device for m in gmaps["dh"])),
                  shared_mem=gemm_smem)
        return dh, dw
    return run


def kernel_ms(events: dict) -> dict[str, float]:
    """Milliseconds each kind of launch took in a run that filled ``events``
    (:func:`backward_launcher`), summed over the chunks; synchronises on the last event."""
    out = {}
    for kind, pairs in events.items():
        pairs[-1][1].synchronize()
        out[kind] = sum(__import__("cupy").cuda.get_elapsed_time(s, e) for s, e in pairs)
    return out


def linear_cross_entropy_backward(h, w, targets, lse, grad, ignore_index: int = kernels.IGNORE_INDEX,
                                  reduction: str = "mean", softcap: float | None = None, *,
                                  filter_eps: float | None = None, stats: dict | None = None,
                                  source: str | dict | None = None, variant: str | None = None,
                                  chunk_bytes: int = CHUNK_BYTES, bmax=None):
    """``(dh, dw)``: the gradients of :func:`fraglab.fused_lm_head.fused_linear_cross_entropy`
    (same ``h``, ``w``, ``targets`` and options) for the loss's gradient ``grad``, given the
    forward's log-sum-exp ``lse`` (float32 (n,), :func:`forward_with_lse`):
    ``dh = G w`` and ``dw = G^T h`` with ``G = dl (softmax(z) - onehot(target)) z'`` (0 for ignored
    tokens; ``z'`` the soft-cap's derivative). FP32 accumulation, results in h's element type.
    ``filter_eps``: leave out the vocabulary tiles whose every ``|softmax - onehot|`` is below it
    (e.g. :data:`FILTER_EPS`); None (default): none left out. ``stats``: a dict that receives
    ``skipped``, how many tiles were left out. ``source``: another kernel file for the rung (a
    mutant). ``variant``: the rung, :data:`VARIANTS` (default :func:`default_variant`);
    ``chunk_bytes``: the chunked rungs' budget for G (a small one makes several chunks);
    ``bmax``: as :func:`backward_launcher` takes it."""
    run, res = backward_launcher(h, w, targets, lse, grad, ignore_index, reduction, softcap,
                                 filter_eps=filter_eps, source=source, variant=variant,
                                 chunk_bytes=chunk_bytes, bmax=bmax)
    out = run()
    if stats is not None:
        stats["skipped"] = int(res["skipped"][0])
        tile = kernels.tile()
        stats["tiles"] = -(-int(h.shape[0]) // tile["lmh_bm"]) * -(-int(w.shape[0]) // tile["lmh_bn"])
    return out

