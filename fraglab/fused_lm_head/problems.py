"""The fused LM head as a :class:`fraglab.problem.Problem`: what the tests, the lab's graded cell
and the benchmark's check run, each the same way. Inputs are drawn fresh (h, w rounded to the
kernel's element type; the float64 reference reads the rounded values), the outputs start
poisoned (the wrapper), and the error is ``|loss - ref| / |ref|`` over the token vector (or the
one number of 'sum' and 'mean')."""
from __future__ import annotations

import numpy as np

from .. import device, launch
from ..dtypes import from_bf16, to_bf16
from ..problem import Case, Problem
from . import kernels, wgmma

#: Relative error allowed, f16 and bf16 alike: the reference reads the rounded inputs, so what is
#: left is FP32 accumulation over d, ex2.approx (2^-22 relative) and tanhf; measured errors are
#: about 1e-7, and one vocabulary tile left out costs more than 1e-3.
TOL = {"f16": 2e-5, "bf16": 2e-5}
#: Standard deviation of the random logits (h and w entries scaled so that h . w has it).
LOGIT_STD = 3.0
#: How far a peaky row's one large logit stands above the rest.
PEAK = 40.0


def rounded(x, dtype: str):
    """float values -> (the kernel's array: float16 or uint16 bf16 bits, their float64 values)."""
    if dtype == "f16":
        raw = np.asarray(x, np.float32).astype(np.float16)
        return raw, raw.astype(np.float64)
    if dtype == "bf16":
        raw = to_bf16(x)
        return raw, from_bf16(raw).astype(np.float64)
    raise ValueError(f"dtype must be 'f16' or 'bf16', got {dtype!r}")


#: ``cold`` inputs: the logits' offset of the cold words (e^-40 ~ 4e-18: no filter keeps them)
#: and the blocks (the G kernels' 128-word filter blocks) that alternate cold and warm.
COLD, COLD_BLOCK = 40.0, 128


def lm_head_inputs(rng, n: int = 40, v: int = 300, d: int = 64, dtype: str = "bf16",
                   peaky: bool = False, ignored: float = 0.0, ignore_index: int = kernels.IGNORE_INDEX,
                   reduction: str = "none", softcap: float | None = None,
                   splits: int | None = None, cold: bool = False, cold_block: int = COLD_BLOCK,
                   cold_target: bool = False) -> dict:
    """h (n, d), w (v, d) and targets (n,) int64 as NumPy, with the options the wrapper takes.
    Logits ~ N(0, LOGIT_STD^2); ``peaky``: every row has one logit PEAK above the others, at its
    target for half the rows and elsewhere for the rest; ``ignored``: that fraction of targets
    set to ``ignore_index``; ``cold``: the words of every even 128-word block (:data:`COLD_BLOCK`)
    get logits :data:`COLD` lower (through h's column 0, set to 1, and w's, -COLD there) and are
    never targets, so that a filter skips exactly those blocks, whatever the draw;
    ``cold_block``: blocks of that many words instead; ``cold_target``: the targets in the first
    warm block only (the second has none), and token 0's the middle word of the second cold
    block all the same (its |softmax - 1| counts)."""
    scale = (LOGIT_STD / np.sqrt(d)) ** 0.5
    w = rng.standard_normal((v, d)) * scale
    h = rng.standard_normal((n, d)) * scale
    targets = rng.integers(0, v, n)
    if cold:
        is_cold = (np.arange(v) // cold_block) % 2 == 0
        h[:, 0] = 1.0
        w[:, 0] = np.where(is_cold, -COLD, 0.0)
        warm = np.flatnonzero(~is_cold)
        targets = warm[rng.integers(0, len(warm), n)]
        if cold_target:
            targets = cold_block + rng.integers(0, cold_block, n)
            targets[0] = 2 * cold_block + cold_block // 2
    if peaky:
        peak = np.where(np.arange(n) % 2 == 0, targets, rng.integers(0, v, n))
        wp = w[peak]
        h = h + PEAK * wp / (wp * wp).sum(axis=1, keepdims=True)
    if ignored:
        targets = np.where(rng.random(n) < ignored, ignore_index, targets)
    h_raw, _ = rounded(h, dtype)
    w_raw, _ = rounded(w, dtype)
    return {"h": h_raw, "w": w_raw, "targets": targets.astype(np.int64), "dtype": dtype,
            "ignore_index": ignore_index, "reduction": reduction, "softcap": softcap,
            "splits": splits}


def as_float64(a, dtype: str) -> np.ndarray:
    return (np.asarray(a).astype(np.float64) if dtype == "f16"
            else from_bf16(np.asarray(a)).astype(np.float64))


def lm_head_reference(h, w, targets, dtype, ignore_index, reduction, softcap, **_):
    """The losses in float64 from the rounded inputs, written independently of the kernel: the
    full logits matrix, a max-shifted log-sum-exp, the target's logit, NumPy's reductions."""
    z = as_float64(h, dtype) @ as_float64(w, dtype).T
    if softcap is not None:
        z = softcap * np.tanh(z / softcap)
    zmax = z.max(axis=1)
    lse = zmax + np.log(np.exp(z - zmax[:, None]).sum(axis=1))
    keep = targets != ignore_index
    zt = z[np.arange(len(targets)), np.where(keep, targets, 0)]
    loss = np.where(keep, lse - zt, 0.0)
    if reduction == "none":
        return loss
    if reduction == "sum":
        return np.asarray(loss.sum())
    return np.asarray(loss.sum() / keep.sum() if keep.any() else np.nan)


def run_kernel(h, w, targets, ignore_index, reduction, softcap, splits, source=None,
               name=kernels.KERNELS, variant="mma", **_):
    """The wrapper on the Problem's inputs (moved where kernels run); ``source`` and ``name``:
    another kernel file (the lab's); ``variant``: the rung (the mma one unless told)."""
    run, _ = kernels.launcher(*(launch.to_device(x) for x in (h, w, targets)), ignore_index,
                              reduction, softcap, splits=splits, source=source,
                              name=name, variant=variant)
    return run()


def requires(case: Case) -> tuple[bool, str]:
    return kernels.requires(case.params.get("dtype", "bf16"))


#: The cases the forward and the backward share (their inputs take the same parameters): plain
#: draws, peaky rows, ignored tokens, the soft-cap, a vocabulary of one word, and two large ones.
SHARED_CASES = {c.name: c for c in (
    Case("random", dtype="bf16"),
    Case("random_f16", dtype="f16"),
    Case("peaky", peaky=True, edge=True),
    Case("ignored", ignored=0.4, edge=True),
    Case("ignore_index_in_vocab", ignored=0.3, ignore_index=3, edge=True),
    Case("softcap", peaky=True, softcap=10.0, edge=True),
    Case("softcap_f16", dtype="f16", softcap=2.0, edge=True),
    Case("one_word", n=5, v=1, d=16, edge=True),
    Case("mean", ignored=0.2, reduction="mean"),
    Case("big_f16_softcap", n=777, v=4099, d=512, dtype="f16", softcap=30.0, slow=True),
    Case("wide", n=300, v=2000, d=2304, ignored=0.1, reduction="mean", slow=True),
)}


def _cases(*cases) -> tuple:
    """A case table: each entry a :class:`Case`, or the name of one of :data:`SHARED_CASES`."""
    return tuple(SHARED_CASES[c] if isinstance(c, str) else c for c in cases)


#: Small cases run on the PTX interpreter too; ``slow`` ones on GPUs only.
CASES = _cases(
    "random", "random_f16", "peaky", "ignored", "ignore_index_in_vocab",
    Case("all_ignored_sum", ignored=1.0, reduction="sum", edge=True),
    Case("ragged", n=37, v=301, d=48, edge=True),
    "softcap", "softcap_f16",
    Case("splits", n=130, v=700, d=160, splits=3, edge=True),
    "one_word",
    Case("sum", reduction="sum"),
    "mean",
    Case("big", n=1000, v=5003, d=256, peaky=True, slow=True),
    "big_f16_softcap", "wide",
)

PROBLEMS = {
    "fused_linear_cross_entropy": Problem(
        "11_fused_lm_head/fused_linear_cross_entropy",
        "per-token cross-entropy of h w^T against targets, logits never in global memory",
        inputs=lm_head_inputs, reference=lm_head_reference, run=run_kernel, cases=CASES,
        tol=lambda case: TOL[case.params.get("dtype", "bf16")], requires=requires,
        labels=("token",)),
}


# --- the Hopper rung (variant "wgmma") -----------------------------------------------------------

def run_wgmma(**inp):
    """The wrapper with ``variant="wgmma"`` on the Problem's inputs (``source``: a mutant of
    ``kernels/11_fused_lm_head_wgmma.cu``)."""
    return run_kernel(**{**inp, "name": wgmma.FILE}, variant="wgmma")


def requires_wgmma(case: Case, fallback: str = "mma") -> tuple[bool, str]:
    """The mma rung's refusal first (below 8.0 the chapter runs nothing), then Hopper's, naming
    the rung that runs instead."""
    ok, why = requires(case)
    if not ok:
        return ok, why
    return device.can_run(wgmma.ARCH, wgmma.NEEDS, wgmma.INSTEAD.format(fallback))


#: The mma rung's cases (with 256-word tiles, "ragged" and "splits" cut the vocabulary otherwise),
#: and one whose splits hold several tiles of several chunks of d, the last of each ragged.
WGMMA_CASES = CASES + (
    Case("tiles_and_chunks", n=130, v=1100, d=208, splits=2, ignored=0.1, edge=True),
)

PROBLEMS["fused_linear_cross_entropy_wgmma"] = Problem(
    "11_fused_lm_head/fused_linear_cross_entropy_wgmma",
    "the same loss by the wgmma rung (sm_90a): warpgroup MMA, a producer warpgroup, mbarriers",
    inputs=lm_head_inputs, reference=lm_head_reference, run=run_wgmma, cases=WGMMA_CASES,
    tol=lambda case: TOL[case.params.get("dtype", "bf16")], requires=requires_wgmma,
    labels=("token",))



# --- the backward pass ---------------------------------------------------------------------------

#: Relative error allowed for dh and dw (each ``‖got - ref‖ / ‖ref‖``): the gradients are rounded
#: once to the inputs' type at the end (relative 2^-9 for bf16, 2^-12 for f16, about a third of
#: it as a norm), and G's tile is rounded to it before the two products (as much again, averaged
#: over the products' sums); FP32 sums. Measured: see the tests.
BWD_TOL = {"f16": 1e-3, "bf16": 8e-3}
#: The scalar gradient of 'mean' and 'sum' in the cases (not 1, so a missing factor shows).
GRAD_SCALE = 0.75


def backward_inputs(rng, n: int = 24, v: int = 200, d: int = 32, dtype: str = "bf16",
                    peaky: bool = False, ignored: float = 0.0,
                    ignore_index: int = kernels.IGNORE_INDEX, reduction: str = "none",
                    softcap: float | None = None, splits: int | None = None,
                    filter_eps: float | None = None, chunk_bytes: int | None = None,
                    cold: bool = False, cold_block: int = COLD_BLOCK,
                    cold_target: bool = False) -> dict:
    """:func:`lm_head_inputs` and the loss's gradient ``grad``: N(0, 1) per token for 'none',
    :data:`GRAD_SCALE` for 'mean' and 'sum'; ``filter_eps`` and ``chunk_bytes`` (the chunked
    rung's budget for G; a small one cuts the vocabulary into several chunks) as the wrapper
    takes them."""
    inp = lm_head_inputs(rng, n, v, d, dtype, peaky, ignored, ignore_index, reduction, softcap,
                         splits, cold, cold_block, cold_target)
    inp["grad"] = (rng.standard_normal(n).astype(np.float32) if reduction == "none"
                   else np.asarray(GRAD_SCALE, np.float32))
    inp["filter_eps"] = filter_eps
    inp["chunk_bytes"] = chunk_bytes
    return inp


def backward_reference(h, w, targets, dtype, ignore_index, reduction, softcap, grad, **_):
    """dh and dw in float64 from the rounded inputs, independently of the kernel: the whole
    logits matrix, its softmax, minus the one-hot targets, times each token's gradient of the
    loss (and the soft-cap's derivative), then two matrix products."""
    hf, wf = as_float64(h, dtype), as_float64(w, dtype)
    x = hf @ wf.T
    z = softcap * np.tanh(x / softcap) if softcap is not None else x
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    keep = targets != ignore_index
    rows = np.flatnonzero(keep)
    p[rows, targets[rows]] -= 1.0
    if reduction == "none":
        dl = np.asarray(grad, np.float64)
    elif reduction == "sum":
        dl = np.full(len(targets), float(grad))
    else:
        dl = np.full(len(targets), float(grad) / keep.sum() if keep.any() else 0.0)
    g = p * np.where(keep, dl, 0.0)[:, None]
    if softcap is not None:
        g *= 1.0 - np.tanh(x / softcap) ** 2
    return {"dh": g @ wf, "dw": g.T @ hf}


def run_backward(h, w, targets, grad, dtype, ignore_index, reduction, softcap, splits,
                 filter_eps, chunk_bytes=None, stats=None, source=None, variant="chunked",
                 block_max=True, **_):
    """The course's forward (for lse) then its backward on the Problem's inputs; dh and dw as
    float64 (poison, NaN, stays NaN). ``stats``: receives the skipped tiles; ``source``: another
    kernel file for the rung (a mutant; for a Hopper rung a dict of files, which may hold the
    forward's too); ``variant``: the backward's rung. A Hopper rung with the filter on runs the
    forward of its own rung, keeping the blocks' largest logits for the G kernel's skip
    (``block_max=False``: not)."""
    from . import backward
    h, w, targets, grad = (launch.to_device(x) for x in (h, w, targets, grad))
    preskip = block_max and filter_eps is not None and variant in backward.HOPPER
    keep: dict | None = {} if preskip else None
    _, lse = backward.forward_with_lse(h, w, targets, ignore_index, reduction, softcap,
                                       splits=splits, variant=variant if preskip else None,
                                       keep=keep)
    dh, dw = backward.linear_cross_entropy_backward(
        h, w, targets, lse, grad, ignore_index, reduction, softcap, filter_eps=filter_eps,
        stats=stats, source=source, variant=variant,
        chunk_bytes=backward.CHUNK_BYTES if chunk_bytes is None else chunk_bytes,
        bmax=keep["bmax"] if keep else None)
    return {"dh": as_float64(launch.to_host(dh), dtype), "dw": as_float64(launch.to_host(dw), dtype)}


#: Small cases run on the PTX interpreter too; ``slow`` ones on GPUs only.
BWD_CASES = _cases(
    "random", "random_f16", "peaky", "ignored", "ignore_index_in_vocab",
    Case("all_ignored_mean", ignored=1.0, reduction="mean", edge=True),
    Case("ragged", n=37, v=201, d=48, edge=True),
    "softcap", "softcap_f16",
    Case("blocks_and_chunks", n=130, v=130, d=144, reduction="sum", edge=True),
    "one_word", "mean",
    Case("filter", n=4, v=1100, d=32, peaky=True, filter_eps=2.0 ** -12, chunk_bytes=2 * 4 * 128 * 4,
         edge=True),
    # the filter on words whose even 128-word blocks never count and odd ones always do (every
    # draw): two 256-word tiles a chunk, so that each tile has a skipped and a kept block
    Case("filter_cold", n=8, v=600, d=32, cold=True, filter_eps=2.0 ** -12,
         chunk_bytes=2 * 8 * 128 * 4, edge=True),
    # chunks of one 128-word block on the cold inputs: blocks 0, 2 and 4 (the first, a middle
    # and the last, ragged chunk) never count, so dh's GEMM of the middle one has nothing to add
    Case("filter_cold_chunks", n=8, v=600, d=32, cold=True, filter_eps=2.0 ** -12,
         chunk_bytes=2 * 8 * 128, edge=True),
    # cold and warm halves of 256 words, the Hopper G kernel's tile: with the forward's block
    # maxima its CTAs of cold tiles have nothing to do, except tile 2, where token 0's target is;
    # warm tile 3 holds no target, so only its softmax keeps it
    Case("filter_cold_tiles", n=8, v=1100, d=32, cold=True, cold_block=256, cold_target=True,
         filter_eps=2.0 ** -12, edge=True),
    # the chunked rung with 3 chunks of one tile (the last ragged): dh's FP32 sums across chunks
    Case("chunks", n=40, v=300, d=32, ignored=0.2, chunk_bytes=2 * 40 * 128, edge=True),
    Case("big", n=1000, v=5003, d=256, peaky=True, reduction="mean", slow=True),
    Case("big_filter", n=1000, v=5003, d=256, peaky=True, reduction="mean",
         filter_eps=2.0 ** -12, slow=True),
    Case("big_chunks", n=1000, v=5003, d=256, ignored=0.1, chunk_bytes=2 * 1000 * 128 * 7, slow=True),
    "big_f16_softcap", "wide",
)


def _interpreted_only(names: tuple, cases: tuple) -> tuple:
    """``cases`` with every one not in ``names`` marked ``slow`` (GPUs only; the interpreter runs
    ``names``)."""
    return tuple(c if c.slow or c.name in names else Case(c.name, edge=c.edge, slow=True, **c.params)
                 for c in cases)


def _backward_problem(name: str, title: str, run, cases, req=requires) -> Problem:
    """A backward rung's Problem: :func:`backward_inputs`, the float64 reference, BWD_TOL."""
    return Problem(f"11_fused_lm_head/{name}", title, inputs=backward_inputs,
                   reference=backward_reference, run=run, cases=cases,
                   tol=lambda case: BWD_TOL[case.params.get("dtype", "bf16")], requires=req,
                   labels=("row", "col"))


PROBLEMS["linear_cross_entropy_backward"] = _backward_problem(
    "linear_cross_entropy_backward",
    "dh = G w and dw = G^T h, G = dloss (softmax(h w^T) - onehot), logits recomputed tile by tile; "
    "the chunked rung (G per vocabulary chunk, two GEMMs)", run_backward, BWD_CASES)


def run_backward_atomic(**inp):
    """:func:`run_backward` with the atomic rung."""
    return run_backward(**inp, variant="atomic")


#: The atomic rung's cases: fewer on the interpreter (the rungs share the G step, which the
#: chunked rung's cases cover), every one on a GPU.
ATOMIC_INTERPRETED = ("random", "ragged", "softcap_f16", "all_ignored_mean", "filter")
ATOMIC_CASES = _interpreted_only(ATOMIC_INTERPRETED, tuple(
    c for c in BWD_CASES if c.name not in ("chunks", "big_chunks")))

PROBLEMS["linear_cross_entropy_backward_atomic"] = _backward_problem(
    "linear_cross_entropy_backward_atomic",
    "the same gradients by the atomic rung (FP32 sums with atomics, a (V, d) FP32 buffer)",
    run_backward_atomic, ATOMIC_CASES)


def run_backward_wgmma(**inp):
    """:func:`run_backward` with the wgmma rung (G and both GEMMs on Hopper's warpgroup MMA;
    ``source``: a mutant of ``kernels/11_fused_lm_head_wgmma.cu``, or a dict from file name to
    text, as ``backward.backward_launcher`` takes it)."""
    return run_backward(**inp, variant="wgmma")


#: The wgmma rung's cases: on the interpreter those that reach each path of its kernels (ragged
#: rows and words, a chunk of one block, so the G tile's second half lies past it, several tiles
#: a chunk, the filter's votes and skipped k steps, the soft-cap, no word at all kept); every one
#: on Hopper.
WGMMA_INTERPRETED = ("random", "ragged", "softcap_f16", "filter", "filter_cold",
                     "filter_cold_chunks", "filter_cold_tiles", "chunks", "blocks_and_chunks", "all_ignored_mean",
                     "one_word")
WGMMA_BWD_CASES = _interpreted_only(WGMMA_INTERPRETED, BWD_CASES)

PROBLEMS["linear_cross_entropy_backward_wgmma"] = _backward_problem(
    "linear_cross_entropy_backward_wgmma",
    "the same gradients by the wgmma rung (the chunked rung with G and both GEMMs on warpgroup "
    "MMA, sm_90a)", run_backward_wgmma, WGMMA_BWD_CASES,
    lambda case: requires_wgmma(case, fallback="chunked"))


def run_backward_tma(**inp):
    """:func:`run_backward` with the tma rung (the wgmma rung with its G kernel's producer on the
    TMA; ``source`` as for :func:`run_backward_wgmma`, the G kernel's file ``wgmma.TMA_FILE``)."""
    return run_backward(**inp, variant="tma")


#: The tma rung's backward cases on the interpreter: its producers' edges (ragged rows, words and
#: columns; the filter's skipped k steps; several chunks); the consumers are the wgmma rung's,
#: covered there. Every case on Hopper.
TMA_BWD_INTERPRETED = ("ragged", "filter_cold", "filter_cold_tiles")

PROBLEMS["linear_cross_entropy_backward_tma"] = _backward_problem(
    "linear_cross_entropy_backward_tma",
    "the same gradients by the tma rung (the wgmma rung, its G kernel's producer on the TMA)",
    run_backward_tma, _interpreted_only(TMA_BWD_INTERPRETED, BWD_CASES),
    lambda case: requires_wgmma(case, fallback="chunked"))


def run_tma(**inp):
    """The wrapper with ``variant="tma"`` on the Problem's inputs (``source``: a mutant of
    ``kernels/11_fused_lm_head_tma.cu``)."""
    return run_kernel(**{**inp, "name": wgmma.TMA_FILE}, variant="tma")


#: The tma rung's cases on the interpreter: those that reach its boxes' edges (rows past n and V,
#: columns past d, several tiles and chunks a split; the consumers are the wgmma rung's, whose
#: cases cover the rest); every case on Hopper.
TMA_INTERPRETED = ("ragged", "tiles_and_chunks")

PROBLEMS["fused_linear_cross_entropy_tma"] = Problem(
    "11_fused_lm_head/fused_linear_cross_entropy_tma",
    "the same loss by the tma rung (sm_90a): the wgmma rung with its producer on the TMA",
    inputs=lm_head_inputs, reference=lm_head_reference, run=run_tma,
    cases=_interpreted_only(TMA_INTERPRETED, WGMMA_CASES),
    tol=lambda case: TOL[case.params.get("dtype", "bf16")], requires=requires_wgmma,
    labels=("token",))
