"""The chapter's kernels as :class:`fraglab.problem.Problem` s: one per attention variant
(f16/bf16, d 64/128 and 256 where the variant has it, causal or not, ragged N, N = 1, peaky softmax) and one per building block.

Attention inputs, reference (float64 on the inputs' exact values) and tolerances are every
attention chapter's (:func:`fraglab.attention.attention_problem`); cases marked ``slow`` run on
GPUs only, the others
(one head, N <= 130, a CTA of 384 threads) are small enough for the PTX interpreter, and one
case runs five key tiles through the first CTA only (``first_cta``): more tiles than the rings
have stages, so that every stage is refilled, and a stage released too early or read before its
copy was waited for is caught there (:mod:`fraglab.ptx`'s asynchronous-hazard checks).
"""
from __future__ import annotations

import numpy as np

from .. import device, launch
from ..attention import LOG2E, attention_problem, check_fa2_arguments
from ..problem import Case, Problem
from . import config, kernels
from .maps import map_arguments, tensor_maps
from .tma_tile import TMA_TILE


def _requires(case: Case) -> tuple[bool, str]:
    return device.can_run(config.ARCH, instead=config.INSTEAD)


def first_cta_rows(n: int, causal: bool, rows: int | None = None) -> slice:
    """The query rows of the grid's first CTA (blockIdx.x = 0): rows 0 .. ``rows`` - 1 (a CTA's
    query rows, default the files' own ``fa3_rows``: 128), or with ``causal`` the last CTA's
    rows (the kernel schedules the CTA with the most key tiles first)."""
    rows = config.file_constants("twostage")["fa3_rows"] if rows is None else rows
    qb = -(-n // rows) - 1 if causal else 0
    return slice(qb * rows, min(n, (qb + 1) * rows))


def run_attention(q, k, v, dtype, causal, scale, *, variant: str, first_cta: bool = False,
                  source: str | None = None):
    """O as float64 from the FA-3 ``variant`` (``source``: a replacement .cu text, the lab's).
    ``first_cta``: only the rows of :func:`first_cta_rows`; on the interpreter only that CTA runs
    (all key tiles of the sweep at a fifth of the cost of the grid), on a GPU the whole grid."""
    return ATTENTION[variant].run(q=q, k=k, v=v, dtype=dtype, causal=causal, scale=scale,
                                  first_cta=first_cta, source=source)


def _kernel(variant: str):
    """The variant's O for device arrays (with ``first_cta`` on the interpreter: that CTA's rows
    only, the others left poisoned)."""
    def kernel(q, k, v, *, causal, scale, first_cta=False, source=None, **config):
        if first_cta and launch.interpreted():
            return _first_cta_on_interpreter(q, k, v, causal, variant, scale, source)
        run, out = kernels.attention_launcher(q, k, v, causal=causal, variant=variant,
                                              scale=scale, source=source, **config)
        run()
        return out
    return kernel


def _rows(q, causal, first_cta=False, **_):
    return first_cta_rows(q.shape[2], causal) if first_cta else None


def _first_cta_on_interpreter(q, k, v, causal, variant, scale, source):
    """The launch of :func:`kernels.attention_launcher`, for block (0, 0) only."""
    from .. import ptx
    device.require(config.ARCH, f"the FA-3 kernel {variant!r}", config.INSTEAD)
    dtype, (b, h, n, d), sc = check_fa2_arguments(q, k, v, causal, scale, config.head_dims(variant))
    out = launch.poisoned(q.shape, q.dtype)
    name = config.kernel_file(variant) + ("" if source is None else "_lab")
    prog = ptx.load(name, config.ARCH, source=source)
    c = prog.constants("fa3_")                       # the file's own tile and ring depth
    rows, bc = c["fa3_rows"], c[f"fa3_d{d}_key_tile"]
    maps = tensor_maps(q, k, v, rows, bc) if variant in config.TMA_VARIANTS else ()
    ptx.launch(prog, config.kernel_name(variant, dtype, d), grid=(-(-n // rows), b * h),
               block=c["fa3_threads"], args=(q, k, v, out, np.int32(n), np.float32(sc * LOG2E),
                                             np.int32(bool(causal)), *map_arguments(maps)),
               shared_mem=c[f"fa3_d{d}_smem"], blocks=[(0, 0, 0)])
    return out


def attention_cases(variant: str) -> tuple:
    """Every compiled kernel of ``variant`` (dtype x d) causal and not on a ragged N = 300 (three
    key tiles of 128, or five of 64), edges, and the small cases the interpreter runs (d = 256:
    one, where the variant has it)."""
    dims = config.head_dims(variant)
    grid = [Case(f"{t} d{d} {'causal' if c else 'full'}", shape=(2, 3, 300, d), dtype=t,
                 causal=c, slow=True)
            for t in ("f16", "bf16") for d in dims for c in (False, True)]
    wg3 = [] if variant not in config.TMA_VARIANTS else [
        Case("small f16 d64 causal N=130, three consumers", shape=(1, 1, 130, 64), dtype="f16",
             causal=True, edge=True, consumers=3, key_tile=64, stages=2),
        Case("bf16 d128 N=700 peaky, three consumers", shape=(1, 2, 700, 128), dtype="bf16",
             q_scale=8.0, edge=True, slow=True, consumers=3, key_tile=64, stages=3)]
    d256 = [] if 256 not in dims else [
        Case("N=1000 causal peaky d256", edge=True, slow=True, shape=(1, 2, 1000, 256),
             dtype="bf16", causal=True, q_scale=12.0),
        Case("small bf16 d256 causal N=72 peaky", shape=(1, 1, 72, 256), dtype="bf16",
             causal=True, q_scale=6.0, edge=True)]
    edges = [Case(f"N={n}{' causal' if c else ''}{' peaky' if qs > 1 else ''} d{d}", edge=True,
                  slow=True, shape=(1, 2, n, d), dtype="f16", causal=c, q_scale=qs)
             for n, c, qs, d in ((1, False, 1.0, 64), (1, True, 1.0, 128), (129, True, 1.0, 64),
                                 (256, False, 1.0, 128), (1000, True, 1.0, 128),
                                 (513, False, 12.0, 64), (777, True, 12.0, 128))]
    small = [Case("small f16 d64 full", shape=(1, 1, 96, 64), dtype="f16"),
             Case("small f16 d64 causal N=130", shape=(1, 1, 130, 64), dtype="f16", causal=True,
                  edge=True),
             Case("small bf16 d64 peaky", shape=(1, 1, 72, 64), dtype="bf16", q_scale=8.0,
                  edge=True),
             # five key tiles for every row of the first CTA, the maximum moving between them:
             # more tiles than stages, so every K and V stage is released and refilled
             Case("f16 d64 N=640 peaky, first CTA (rings wrap)", shape=(1, 1, 640, 64),
                  dtype="f16", q_scale=4.0, first_cta=True, edge=True)]
    return (*grid, *edges, *small, *d256, *wg3, Case("scale 0.5", shape=(1, 2, 200, 64), dtype="f16",
                                                scale=0.5, slow=True))


ATTENTION = {v: attention_problem(
    f"10_fa3_pipelining/{v}",
    f"softmax(Q K^T * scale) V, FA-3 main loop '{v}' ({config.DESCRIPTIONS[v]}), sm_90a",
    _kernel(v), attention_cases(v), requires=_requires, rows=_rows) for v in config.VARIANTS}


# --------------------------------------------------------------------------------------------
# Building blocks
# --------------------------------------------------------------------------------------------

def _gemm_inputs(rng, n, k, b_major):
    a = rng.standard_normal((64, k)).astype(np.float16)
    b = rng.standard_normal((n, k) if b_major == "k" else (k, n)).astype(np.float16)
    return dict(a=a, b=b, b_major=b_major)


def _gemm_reference(a, b, b_major):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return a64 @ (b64.T if b_major == "k" else b64)


def _gemm_run(a, b, b_major):
    return kernels.wgmma_gemm(launch.to_device(a), launch.to_device(b), b_major=b_major)


WGMMA_GEMM = Problem(
    "10_fa3_pipelining/wgmma_gemm", "C (64 x N) = A B with wgmma.mma_async from swizzled shared memory",
    inputs=_gemm_inputs, reference=_gemm_reference, run=_gemm_run, tol=1e-5,
    requires=_requires,
    cases=(Case("k-major n64 K64", n=64, k=64, b_major="k"),
           Case("k-major n128 K128", n=128, k=128, b_major="k"),
           Case("mn-major n64 K32", n=64, k=32, b_major="mn", edge=True),
           Case("mn-major n128 K128", n=128, k=128, b_major="mn"),
           Case("k-major n64 K16", n=64, k=16, b_major="k", edge=True),
           Case("mn-major n128 K80", n=128, k=80, b_major="mn", edge=True)))


MBARRIER_RING = Problem(
    "10_fa3_pipelining/mbarrier_ring", "2 x + stage: chunks through an mbarrier-guarded ring",
    inputs=lambda rng, chunks: dict(
        x=rng.standard_normal(chunks * kernels.ring_constants()["ring_chunk"]).astype(np.float32)),
    reference=lambda x: kernels.mbarrier_ring_reference(x),
    run=lambda x: kernels.mbarrier_ring(launch.to_device(x)), tol=0, requires=_requires,
    labels=("i",),
    cases=(Case("1 chunk", chunks=1, edge=True), Case("2 chunks", chunks=2),
           Case("7 chunks", chunks=7)))


def _tile_inputs(rng, d, n_valid):
    rows = kernels.swizzle_constants()["swizzle_tile_rows"]
    return dict(src=rng.integers(0, 1 << 16, size=(rows, d), dtype=np.uint16), n_valid=n_valid)


SWIZZLE_TILE = Problem(
    "10_fa3_pipelining/swizzle_tile", "the 128-byte swizzled image of a tile copied by cp.async",
    inputs=_tile_inputs, reference=lambda src, n_valid: kernels.sw128_image(src, n_valid),
    run=lambda src, n_valid: kernels.swizzle_tile(launch.to_device(src), n_valid), tol=0,
    requires=_requires,
    cases=(Case("d64 full", d=64, n_valid=128), Case("d128 ragged", d=128, n_valid=77, edge=True),
           Case("d64 empty", d=64, n_valid=0, edge=True)))

WARPSPEC_ROWSUM = Problem(
    "10_fa3_pipelining/warpspec_rowsum", "row sums through producer/consumer warpgroups (setmaxnreg)",
    inputs=lambda rng, tiles: dict(x=rng.standard_normal((tiles, 128, 32)).astype(np.float32)),
    reference=lambda x: x.astype(np.float64).sum(axis=2),
    run=lambda x: kernels.warpspec_rowsum(launch.to_device(x)), tol=1e-6, requires=_requires,
    labels=("tile", "row"),
    cases=(Case("1 tile", tiles=1, edge=True), Case("5 tiles", tiles=5)))

BLOCKS = {"wgmma_gemm": WGMMA_GEMM, "mbarrier_ring": MBARRIER_RING, "swizzle_tile": SWIZZLE_TILE,
          "warpspec_rowsum": WARPSPEC_ROWSUM, "tma_tile": TMA_TILE}
PROBLEMS = {**BLOCKS, **{f"attention_{v}": p for v, p in ATTENTION.items()}}


def interpreter_ready() -> tuple[bool, str]:
    """Can the small cases run here? On a GPU: a Hopper one; without: an interpreter that runs
    sm_90a PTX (``fraglab.ptx.SUPPORTS_SM90A``)."""
    ok, why = _requires(Case("probe"))
    if not ok and not device.gpu_available():
        return False, ("the PTX interpreter does not run sm_90a (wgmma, mbarrier) yet: "
                       "fraglab.ptx.SUPPORTS_SM90A is not True")
    return ok, why
