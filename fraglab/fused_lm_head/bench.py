"""The GPU run of chapter 11 (``python -m fraglab.fused_lm_head bench --out DIR [--quick]``), which
``python -m fraglab.chapter bench 11`` records in ``book/data/11_fused_lm_head/``. Sections:

a. ``check``: every Problem over its cases, each result recorded, never aborting
   (:func:`fraglab.problem.check_all`);
b. ``timing`` (GPU and torch only): the forward loss ('mean') of the course's kernel and of the
   anchors (:mod:`.anchors`: PyTorch eager, ``torch.compile``, Liger-Kernel, Cut Cross-Entropy)
   at Llama 3 8B's head and Gemma 2 2B's (:data:`HEADS`), N = :data:`TOKENS`, bf16, on inputs
   whose logits look like a trained model's (:func:`lm_inputs`; what they look like is measured
   and recorded per size: :func:`input_stats`); per size: each variant's loss against the FP32
   PyTorch loss (and the course's per-token losses), its peak memory beyond the inputs (torch's
   allocator counter, which CuPy's allocations go through here too), then all of them timed
   interleaved by :func:`fraglab.bench.compare`. ``--quick``: Llama 3 8B's head at N = 4096 only;
c. ``train`` (GPU and torch only): the same sizes, a training step each (the 'mean' loss, then
   the gradients for h and w by ``torch.autograd.grad``: :func:`.anchors.forward_backward`), the
   course's through its autograd Function in four settings (:data:`.anchors.COURSE_TRAIN`: the
   default backward rung with the filter off and on, the wgmma and the chunked rungs), and Cut
   Cross-Entropy a second time with its filter off (``cce_nofilter``); per variant its peak
   memory beyond the inputs and the two gradients it returns (torch's allocator counter; CuPy's
   allocations are routed through it, :func:`torch_world`), its gradients' relative difference
   from the course's, then all timed interleaved. At the smallest N of each head every variant's
   gradients are also compared with a float64 reference (:func:`_grad_errors`: what each
   filter costs). The course's filter: the tiles it skipped, counted once per size; the
   backward's kernels: G, dw and dh timed apart per rung (:func:`_breakdown`).

Every step of a variant is what a training loop pays: host synchronisations (Liger-Kernel's
count of targets, the course's argument checks) and Python included, each timed from the GPU's
events on one stream (``hold=False``: no gate, since some variants synchronise). Medians and
10th/90th percentiles of the repeats are recorded; fewer repeats at the larger sizes.

``DIR/results.json`` holds both and the device; the log (progress lines, with the time so far)
goes to ``DIR/log.txt``. About 6 minutes on an H100 (``torch.compile`` compiles twice a size);
``--quick`` about 1.
"""
from __future__ import annotations

import contextlib
import os
import time

import numpy as np

from .. import bench, device
from ..problem import check_all
from ..progress import Log
from . import anchors, backward, kernels, problems

#: (d, V) of the LM heads compared.
HEADS = {"llama3_8b": (4096, 128256), "gemma2_2b": (2304, 256000)}
TOKENS = (4096, 8192, 16384)
QUICK = {"llama3_8b": (4096,)}
#: A share of targets set to ignore_index (every variant skips them alike).
IGNORED = 0.05
#: The inputs' logits, a trained model's in outline (our model, not one measured from a real
#: one): z[i, v] = b[v] + NOISE e[i, v] + PEAK [v == target[i]] with e ~ N(0, 1). b[v] = -ln(v + 1):
#: word v is the (v+1)-th most frequent, its unigram probability ~ 1 / (v + 1) (Zipf's law; word
#: ids in frequency order, as a BPE vocabulary's roughly are: merges are learned most frequent
#: first); targets drawn from that unigram. NOISE = 1 and PEAK = 8 give a mean loss near 2 nats
#: and a softmax of which about 0.15 % of entries reach 2^-12 (measured per size:
#: :func:`input_stats`), the sparsity Cut Cross-Entropy's filter relies on (arXiv:2411.09009).
NOISE = 1.0
PEAK = 8.0
#: The softmax threshold the statistics count (the filter's, bf16: 2^-12).
STATS_EPS = backward.FILTER_EPS


def _repeats(n: int, quick: bool) -> tuple[int, int]:
    """(warm-up, repeats) of one size: fewer at the big sizes."""
    if quick:
        return 1, 4
    return (1, 10) if n <= 4096 else (1, 6) if n <= 8192 else (1, 4)


@contextlib.contextmanager
def torch_world(torch):
    """One non-blocking stream current for CuPy and torch, and CuPy's allocations taken from
    torch's caching allocator (so that ``torch.cuda.max_memory_allocated`` counts them)."""
    import cupy

    def alloc(size):
        t = torch.empty(max(int(size), 1), dtype=torch.uint8, device="cuda")
        return cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(t.data_ptr(), size, t), 0)

    s = cupy.cuda.Stream(non_blocking=True)
    cupy.cuda.set_allocator(alloc)
    try:
        with s, torch.cuda.stream(torch.cuda.ExternalStream(s.ptr)):
            yield s
    finally:
        s.synchronize()
        cupy.cuda.set_allocator(cupy.get_default_memory_pool().malloc)


def lm_inputs(torch, n: int, d: int, v: int, seed: int, dev: str = "cuda"):
    """bf16 h (n, d), w (v, d) and int64 targets (:data:`IGNORED` of them ignore_index) whose
    logits h w^T follow the model of :data:`NOISE` and :data:`PEAK`: h[:, 0] = 1 and w[:, 0] = b
    carry the frequency bias; the other d - 1 columns carry the noise (random h and w scaled so
    that their products have standard deviation NOISE); each h row moves along its target's
    row of w so that the target's logit gains PEAK."""
    g = torch.Generator(device=dev).manual_seed(seed)
    s = (NOISE ** 2 / (d - 1)) ** 0.25
    x = torch.randn(v, d - 1, device=dev, generator=g)
    u = torch.randn(n, d - 1, device=dev, generator=g)
    zipf = 1.0 / torch.arange(1, v + 1, device=dev, dtype=torch.float64)
    t = torch.multinomial(zipf / zipf.sum(), n, replacement=True, generator=g)
    xt = x[t]
    u += (PEAK / s ** 2) * xt / (xt * xt).sum(dim=1, keepdim=True)
    h = torch.cat([torch.ones(n, 1, device=dev), u * s], dim=1).to(torch.bfloat16)
    bias = -torch.log(torch.arange(1, v + 1, device=dev, dtype=torch.float32))
    w = torch.cat([bias[:, None], x * s], dim=1).to(torch.bfloat16)
    del x, u, xt
    drop = torch.rand(n, device=dev, generator=g) < IGNORED
    return h, w, torch.where(drop, torch.full_like(t, kernels.IGNORE_INDEX), t)


def input_stats(torch, h, w, t, seed: int = 0, rows: int = 1024) -> dict:
    """What the inputs' softmax looks like (FP32 logits, ``rows`` tokens at a time): mean loss,
    entropy and target probability over the tokens not ignored, the share of softmax entries at
    or above :data:`STATS_EPS`, and the share of the backward's (128-token, 128-word) tiles with
    one such entry or a target (the tiles a filter keeps), with the vocabulary in its order and
    in a random order (what the order is worth; Cut Cross-Entropy sorts it itself)."""
    n, v = h.shape[0], w.shape[0]
    tile = kernels.tile()
    bm, bn = tile["lmh_bm"], tile["lmh_bn"]
    dev = h.device
    perm = torch.randperm(v, device=dev, generator=torch.Generator(device=dev).manual_seed(seed))
    keep = t != kernels.IGNORE_INDEX
    loss = ent = pt = 0.0
    big = 0
    kept = kept_perm = 0
    pad = -(-v // bn) * bn - v
    for r0 in range(0, n, rows):
        z = (h[r0:r0 + rows] @ w.T).float()
        tt, kk = t[r0:r0 + rows], keep[r0:r0 + rows]
        lse = torch.logsumexp(z, dim=1)
        p = torch.exp(z - lse[:, None])
        safe = torch.where(kk, tt, torch.zeros_like(tt))
        zt = z.gather(1, safe[:, None])[:, 0]
        loss += float(((lse - zt) * kk).sum())
        pt += float((torch.exp(zt - lse) * kk).sum())
        ent += float((-(p * torch.log(p.clamp_min(1e-30))).sum(1) * kk).sum())
        mark = p >= STATS_EPS
        mark[kk.nonzero()[:, 0], safe[kk]] = True
        mark &= kk[:, None]
        big += int(mark.sum())
        for m, acc in ((mark, "id"), (mark[:, perm], "perm")):
            mm = torch.nn.functional.pad(m, (0, pad))
            rb = -(-mm.shape[0] // bm)
            mm = torch.nn.functional.pad(mm, (0, 0, 0, rb * bm - mm.shape[0]))
            tiles = int(mm.view(rb, bm, -1, bn).any(dim=3).any(dim=1).sum())
            if acc == "id":
                kept += tiles
            else:
                kept_perm += tiles
        del z, p, mark
    live = int(keep.sum())
    total_tiles = -(-n // bm) * -(-v // bn)
    return {"mean_loss": loss / live, "mean_entropy": ent / live, "mean_p_target": pt / live,
            "share_at_or_above_eps": big / (live * v), "eps": STATS_EPS,
            "tiles": total_tiles, "tiles_kept": kept, "tiles_kept_shuffled": kept_perm,
            "share_tiles_kept": kept / total_tiles, "share_tiles_kept_shuffled": kept_perm / total_tiles}


def _train_repeats(n: int, quick: bool) -> tuple[int, int]:
    """(warm-up, repeats) of one training-step size."""
    if quick:
        return 1, 3
    return (1, 6) if n <= 4096 else (1, 4) if n <= 8192 else (1, 3)


def peak_bytes(torch, fn):
    """``(bytes, result)``: the peak of allocated memory during ``fn()`` beyond what was
    allocated before it (the inputs), as torch's allocator counts it."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_allocated() - before), out


def _value(x) -> float:
    return float(x.item() if hasattr(x, "item") else x)


def one_size(torch, found: dict, head: str, n: int, seed: int, quick: bool, log) -> dict:
    """Every variant at one size: loss against FP32, peak memory, then the interleaved timing."""
    d, v = HEADS[head]
    rec = {"head": head, "n": n, "d": d, "v": v, "variants": {}, "failures": {}}
    anchors.fresh_compile(found)
    h, w, t = lm_inputs(torch, n, d, v, seed)
    rec["inputs"] = input_stats(torch, h, w, t, seed)
    torch.cuda.empty_cache()
    ref = anchors.fp32_reference(h, w, t, "none").double()
    keep = t != kernels.IGNORE_INDEX
    ref_mean = float(ref.sum() / keep.sum())
    rec["fp32_mean"] = ref_mean
    per_token = torch.from_dlpack(anchors.course_loss(h, w, t, "none")()).double()
    rec["course_per_token_rel_error"] = float((per_token - ref).norm() / ref.norm())
    rec["course_per_token_max_abs_error"] = float((per_token - ref).abs().max())
    del per_token, ref
    torch.cuda.empty_cache()

    calls = {"course": lambda: anchors.course_loss(h, w, t, "mean")}
    calls.update({k: (lambda f=f: (lambda: f(h, w, t, "mean"))) for k, f in found.items()})
    timed = {}
    for name, make in calls.items():
        try:
            fn = make()
            _value(fn())                                     # warm-up (compiles, autotunes)
            if name == "course":                             # its launcher's buffers count too
                peak, out = peak_bytes(torch, lambda: anchors.course_loss(h, w, t, "mean")())
            else:
                peak, out = peak_bytes(torch, fn)
            loss = _value(out)
            rec["variants"][name] = {"peak_bytes": peak, "loss": loss,
                                     "rel_error_vs_fp32": abs(loss - ref_mean) / abs(ref_mean)}
            timed[name] = fn
        except Exception as exc:                             # noqa: BLE001 - recorded
            rec["failures"][name] = f"{type(exc).__name__}: {exc}"[:400]
        torch.cuda.empty_cache()
    if not timed:
        return rec
    warmup, repeat = _repeats(n, quick)
    cmp = bench.compare(timed, baseline="course" if "course" in timed else next(iter(timed)), warmup=warmup, repeat=repeat, rounds=2,
                        hold=False, progress=False)
    for name, tm in cmp.timings.items():
        rec["variants"][name].update(median_ms=tm.median_ms, p10_ms=tm.p10_ms, p90_ms=tm.p90_ms,
                                     runs=tm.n, tflops=2 * n * d * v / tm.median_ms / 1e9)
    rec["comparison"] = cmp.to_dict()
    st = rec["inputs"]
    log(f"  inputs: mean loss {st['mean_loss']:.2f}, {100 * st['share_at_or_above_eps']:.3f} % of "
        f"softmax entries >= 2^-12, tiles kept {100 * st['share_tiles_kept']:.1f} % "
        f"({100 * st['share_tiles_kept_shuffled']:.1f} % with the vocabulary shuffled)")
    log(f"  {head} N={n}: " + ", ".join(
        f"{k} {r['median_ms']:.2f} ms {r['peak_bytes'] / 2**20:.0f} MiB err {r['rel_error_vs_fp32']:.1e}"
        for k, r in rec["variants"].items() if "median_ms" in r)
        + "".join(f"; {k} FAILED: {e}" for k, e in rec["failures"].items()))
    del h, w, t
    torch.cuda.empty_cache()
    return rec


def _rel_diff(torch, a, b) -> float:
    return float(torch.linalg.vector_norm((a.float() - b.float()).flatten())
                 / torch.linalg.vector_norm(b.float().flatten()))


def _filter_count(torch, h, w, t) -> dict:
    """The tiles the course's filter skips on these inputs (the chunked rung, 'mean')."""
    conv = [kernels.from_torch(k, x) for k, x in (("h", h), ("w", w), ("targets", t))]
    _, lse = backward.forward_with_lse(*conv)
    stats: dict = {}
    backward.linear_cross_entropy_backward(*conv, lse, 1.0, filter_eps=backward.FILTER_EPS,
                                           stats=stats)
    torch.cuda.synchronize()
    return {"skipped": stats["skipped"], "tiles": stats["tiles"],
            "share_skipped": stats["skipped"] / stats["tiles"], "eps": backward.FILTER_EPS}


#: The backward settings whose kernels :func:`_breakdown` times: name -> (rung, filter_eps,
#: whether the G kernel gets the forward's block maxima, as the autograd step gives them with
#: the filter on; "tma_filter_all" computes every tile's logits again, as before the skip).
BREAKDOWN = {"tma": ("tma", None, False), "tma_filter": ("tma", backward.FILTER_EPS, True),
             "tma_filter_all": ("tma", backward.FILTER_EPS, False),
             "wgmma": ("wgmma", None, False), "wgmma_filter": ("wgmma", backward.FILTER_EPS, True),
             "chunked": ("chunked", None, False)}


def _breakdown(torch, h, w, t, runs: int = 5) -> dict:
    """Where the backward's time goes: per :data:`BREAKDOWN` setting, the median over ``runs``
    (after one warm-up) of the milliseconds its G kernels, dw GEMMs and dh GEMMs took, each
    summed over the chunks (CUDA events around every launch, ``backward.kernel_ms``), and the
    FLOPs of one of the three products unfiltered (2 N V d)."""
    import statistics
    conv = [kernels.from_torch(k, x) for k, x in (("h", h), ("w", w), ("targets", t))]
    keep: dict = {}
    _, lse = backward.forward_with_lse(*conv, keep=keep)     # the blocks' maxima, as autograd's
    out = {"flop_each": 2.0 * h.shape[0] * w.shape[0] * h.shape[1]}
    for name, (variant, eps, skip) in BREAKDOWN.items():
        if variant in backward.HOPPER and not device.can_run(backward.wgmma.ARCH)[0]:
            continue
        events: dict = {}
        run, res = backward.backward_launcher(*conv, lse, 1.0, filter_eps=eps, variant=variant,
                                              events=events, bmax=keep["bmax"] if skip else None)
        samples = []
        for _ in range(runs + 1):
            run()
            samples.append(backward.kernel_ms(events))
        out[name] = {k: statistics.median(s[k] for s in samples[1:]) for k in samples[0]}
        del run, res
        torch.cuda.empty_cache()
    return out


def grad_reference(torch, h, w, t, rows: int = 1024):
    """dh and dw of the 'mean' loss in float64 on the GPU, from the bf16 inputs, ``rows`` tokens
    at a time: the whole softmax, minus the one-hot targets, over the count of tokens kept."""
    hd, wd = h.double(), w.double()
    keep = t != kernels.IGNORE_INDEX
    count = int(keep.sum())
    dh = torch.empty_like(hd)
    dw = torch.zeros_like(wd)
    for r0 in range(0, h.shape[0], rows):
        z = hd[r0:r0 + rows] @ wd.T
        p = torch.softmax(z, dim=1)
        kk = keep[r0:r0 + rows]
        idx = kk.nonzero()[:, 0]
        p[idx, t[r0:r0 + rows][idx]] -= 1.0
        p *= kk[:, None].double() / max(count, 1)
        dh[r0:r0 + rows] = p @ wd
        dw += p.T @ hd[r0:r0 + rows]
        del z, p
    return dh, dw


def _grad_errors(torch, h, w, t, steps: dict, log) -> dict:
    """Each step's dh and dw against :func:`grad_reference` (relative norm of the difference):
    what rounding to bf16 costs every variant, and what a gradient filter adds to it."""
    ref = grad_reference(torch, h, w, t)
    out = {}
    for name, step in steps.items():
        try:
            _, dh, dw = step()
            out[name] = {"dh": float(torch.linalg.vector_norm((dh.double() - ref[0]).flatten())
                                     / torch.linalg.vector_norm(ref[0].flatten())),
                         "dw": float(torch.linalg.vector_norm((dw.double() - ref[1]).flatten())
                                     / torch.linalg.vector_norm(ref[1].flatten()))}
            del dh, dw
        except Exception as exc:       # noqa: BLE001 - recorded
            out[name] = {"failure": f"{type(exc).__name__}: {exc}"[:300]}
        torch.cuda.empty_cache()
    del ref
    torch.cuda.empty_cache()
    log("  gradient error vs float64: " + ", ".join(
        f"{k} dh {r['dh']:.1e} dw {r['dw']:.1e}" for k, r in out.items() if "dh" in r))
    return out


def one_size_train(torch, found: dict, head: str, n: int, seed: int, quick: bool, log) -> dict:
    """Every variant's training step at one size: loss, gradients against the course's, peak
    memory beyond the inputs and the gradients, then the interleaved timing."""
    d, v = HEADS[head]
    rec = {"head": head, "n": n, "d": d, "v": v, "variants": {}, "failures": {}}
    anchors.fresh_compile(found)
    h, w, t = lm_inputs(torch, n, d, v, seed)
    grad_bytes = h.numel() * h.element_size() + w.numel() * w.element_size()
    rec["course_scratch_bytes"] = {k: backward.scratch_bytes(n, v, d, variant)
                                   for k, (variant, _) in anchors.COURSE_TRAIN.items()}
    rec["course_filter"] = _filter_count(torch, h, w, t)
    rec["breakdown"] = _breakdown(torch, h, w, t)
    log(f"  backward kernels {head} N={n}: " + "; ".join(
        f"{k} " + ", ".join(f"{kind} {ms:.1f} ms" for kind, ms in r.items())
        for k, r in rec["breakdown"].items() if isinstance(r, dict)))
    steps = {k: anchors.forward_backward(anchors.course_train(k), h, w, t)
             for k in anchors.COURSE_TRAIN}
    steps.update({k: anchors.forward_backward(f, h, w, t) for k, f in found.items()})
    if "cce" in found and anchors.cce_without_filter() is not None:
        steps["cce_nofilter"] = anchors.forward_backward(anchors.cce_without_filter(), h, w, t)
    if n == min(TOKENS):
        rec["grad_errors"] = _grad_errors(torch, h, w, t, steps, log)
    timed, course_grads = {}, None
    for name, step in steps.items():
        try:
            step()                                           # warm-up (compiles, autotunes)
            torch.cuda.empty_cache()
            peak, (loss, dh, dw) = peak_bytes(torch, step)
            r = {"peak_bytes": peak - grad_bytes, "loss": _value(loss)}
            if name == "course":
                course_grads = (dh, dw)
            elif course_grads is not None:
                r["dh_rel_diff_vs_course"] = _rel_diff(torch, dh, course_grads[0])
                r["dw_rel_diff_vs_course"] = _rel_diff(torch, dw, course_grads[1])
            rec["variants"][name] = r
            timed[name] = step
            del loss, dh, dw
        except Exception as exc:                             # noqa: BLE001 - recorded
            rec["failures"][name] = f"{type(exc).__name__}: {exc}"[:400]
        torch.cuda.empty_cache()
    course_grads = None
    torch.cuda.empty_cache()
    if timed:
        warmup, repeat = _train_repeats(n, quick)
        cmp = bench.compare(timed, baseline="course" if "course" in timed else next(iter(timed)),
                            warmup=warmup, repeat=repeat, rounds=2, hold=False, progress=False)
        for name, tm in cmp.timings.items():
            rec["variants"][name].update(median_ms=tm.median_ms, p10_ms=tm.p10_ms,
                                         p90_ms=tm.p90_ms, runs=tm.n)
        rec["comparison"] = cmp.to_dict()
    log(f"  train {head} N={n}: " + ", ".join(
        f"{k} {r['median_ms']:.1f} ms {r['peak_bytes'] / 2**20:.0f} MiB"
        for k, r in rec["variants"].items() if "median_ms" in r)
        + "".join(f"; {k} FAILED: {e}" for k, e in rec["failures"].items()))
    del h, w, t, steps, timed
    torch.cuda.empty_cache()
    return rec


def timing(quick: bool, seed: int, log) -> tuple[list, dict]:
    """Every head and size of :data:`HEADS` x :data:`TOKENS` (``quick``: :data:`QUICK`)."""
    torch, why = anchors.torch_or_reason()
    if torch is None:
        return [], {"timing": f"not timed: {why}"}
    ok, why = kernels.requires("bf16")
    if not ok:
        return [], {"timing": f"not timed: {why}"}
    found, missing = anchors.make(log)
    out, train = [], []
    with torch_world(torch):
        sizes = [(hd, n) for hd, ns in (QUICK if quick else {k: TOKENS for k in HEADS}).items()
                 for n in ns]
        start = time.time()
        for i, (head, n) in enumerate(sizes, 1):
            t0 = time.time()
            log(f"[{i}/{len(sizes)}] {head} (d, V) = {HEADS[head]}, N = {n} "
                f"(timing for {t0 - start:.0f} s so far) ...")
            out.append(one_size(torch, found, head, n, seed + i, quick, log))
            train.append(one_size_train(torch, found, head, n, seed + i, quick, log))
            log(f"    ({time.time() - t0:.0f} s)")
    notes = {f"skipped_{k}": v for k, v in missing.items()}
    notes["train"] = train
    return out, notes


def _cases(quick: bool):
    """The cases checked before timing: every case for this machine, or two per problem in the
    quick mode (a smoke test; on the interpreter the full set takes minutes)."""
    return (lambda p: tuple(p.cases_here())[:2]) if quick else None


def run(out_dir, *, quick: bool = False, seed: int = 0) -> dict:
    """Both sections into ``out_dir/results.json``; returns the results."""
    t0 = time.time()
    os.makedirs(out_dir, exist_ok=True)
    log = Log(os.path.join(out_dir, "log.txt"))
    rng = np.random.default_rng(seed)
    log(f"[11_fused_lm_head bench] {device.status_line()}")
    results = {"settings": {"quick": quick, "seed": seed, "heads": HEADS, "tokens": TOKENS,
                            "ignored": IGNORED, "dtype": "bf16", "reduction": "mean",
                            "logits": {"noise": NOISE, "peak": PEAK, "bias": "-ln(v + 1)",
                                       "targets": "unigram ~ 1 / (v + 1)"},
                            "variants": anchors.SETTINGS},
               "errors": {}, "check": check_all(problems.PROBLEMS, rng, log, cases=_cases(quick))}
    if device.gpu_available():
        results["timing"], notes = timing(quick, seed, log)
        results["train"] = notes.pop("train", [])
        results["errors"].update(notes)
    else:
        results["errors"]["timing"] = f"not timed: {device.status_line()}"
    results["elapsed_s"] = time.time() - t0
    dev = bench.device_info() if device.gpu_available() else {"status": device.status_line()}
    bench.save_results(os.path.join(out_dir, "results.json"), results, device=dev)
    log(f"wrote {os.path.join(out_dir, 'results.json')} ({results['elapsed_s']:.0f} s)")
    return results
