"""The H100 run of chapter 10 (``python -m fraglab.fa3_pipelining bench --out DIR [--quick]``).

One process, sections in this order; ``DIR/results.json`` is rewritten after each (a failing
section records its error and the run goes on), the log goes to ``DIR/log.txt``:

a. ``variants``: registers, spills, ptxas's wgmma notes and the SASS overlap counts of every
   kernel (:mod:`.sass_evidence`; no GPU needed);
b. ``check``: the building blocks and every variant against float64 on fresh inputs, outputs
   poisoned (:mod:`.problems`: ragged N, N = 1, causal, bf16, peaky): pass/fail and relative
   error per case, never aborting;
c. ``headline``: every variant, the course's FA-2, chapter 09's last step (when importable),
   SDPA's flash backend and cuDNN's SDPA (:class:`fraglab.attention.Baselines`, on its one
   stream), interleaved by :func:`fraglab.bench.compare`, at N = 4096, d = 128, B*H = 32, f16,
   non-causal;
d. ``sweep``: the same at N 1k .. 16k, d 64, 128 and 256 (the variants that have it), causal and not.

:func:`tune` (``python -m fraglab.fa3_pipelining tune --out DIR``) is the tma rung's tuning sweep:
every candidate key tile and ring depth at each (d, N, causal) beside cuDNN and SDPA flash, f16,
then the picks in bf16 -> ``DIR/tma_table.json`` (:mod:`.tuning` reads it).

A few minutes on an H100, most of it compiling (``--quick``: N 1k and 4k only, fewer repeats).
"""
from __future__ import annotations

import os
import time

import numpy as np

from .. import bench as timing
from .. import device
from ..attention import Baselines, attention_flops, check_all
from ..attention.torch_sdpa import cupy_to_torch, rel_err
from ..progress import Log
from . import config, kernels, problems, sass_evidence

B, H = 4, 8                                     # B * H = 32 heads
HEADLINE = dict(n=4096, d=128, causal=False)
SIZES = (1024, 2048, 4096, 8192, 16384)
QUICK_SIZES = (1024, 4096)
BASELINES = ("cudnn", "sdpa_flash", "fa2", "ch09")


def _rep(n: int, quick: bool) -> dict:
    if quick:
        return dict(warmup=2, repeat=6, rounds=2)
    return dict(warmup=5, repeat=30, rounds=3) if n <= 4096 else dict(warmup=3, repeat=12, rounds=3)


def check(rng, log, quick: bool = False) -> list[dict]:
    """Every problem over its cases (all of them on a GPU; every other one with ``quick``), each
    result recorded."""
    return check_all(problems.PROBLEMS, rng, log,
                     cases=lambda p: p.cases_here()[::2] if quick else p.cases_here())


def baselines(log) -> Baselines:
    """cuDNN's and the flash backend's SDPA, the course's FA-2 and chapter 09's last step."""
    return Baselines(log, backends=("cudnn", "sdpa_flash"), course=("fa2", "ch09"))


def timed(base: Baselines, rng, n: int, d: int, causal: bool, quick: bool, log,
          variants=config.VARIANTS, two_stage_rings=()) -> dict:
    """Every variant and every baseline that runs, interleaved, at (B, H, n, d), f16."""
    shape = (B, H, n, d)
    rec = {"N": n, "d": d, "causal": causal, "dtype": "f16", "B": B, "H": H,
           "flops": attention_flops(B, H, n, d, causal), "refused": {}}
    ts, qkv = base.inputs(rng, shape)
    runs, out = {}, None
    for v in (v for v in variants if d in config.head_dims(v)):
        try:
            runs[f"fa3_{v}"], out = kernels.attention_launcher(*qkv, causal=causal, variant=v)
        except Exception as exc:
            rec["refused"][f"fa3_{v}"] = f"{type(exc).__name__}: {exc}"[:300]
    for v in two_stage_rings:                 # one softmax copy instead of two
        try:
            runs[f"fa3_{v}_onesoftmax"] = kernels.attention_launcher(
                *qkv, causal=causal, variant=v, one_softmax=True)[0]
        except Exception as exc:
            rec["refused"][f"fa3_{v}_onesoftmax"] = f"{type(exc).__name__}: {exc}"[:300]
    for v in two_stage_rings:                 # the same kernels with 2-stage K/V rings
        try:
            runs[f"fa3_{v}_ring2"] = kernels.attention_launcher(*qkv, causal=causal, variant=v,
                                                                stages=2)[0]
        except Exception as exc:
            rec["refused"][f"fa3_{v}_ring2"] = f"{type(exc).__name__}: {exc}"[:300]
    for name, fn in base.callables(ts, qkv, causal, rec["refused"]).items():
        try:                                  # a baseline that refuses this size is left out
            fn()
            runs[name] = fn
        except Exception as exc:
            rec["refused"][name] = f"{type(exc).__name__}: {exc}"[:300]
    import cupy as cp
    cp.cuda.get_current_stream().synchronize()
    last = [k for k in runs if k.startswith("fa3_") and k[4:] in config.VARIANTS][-1:]
    if "sdpa_flash" in runs and last:         # its output beside SDPA's
        try:
            runs[last[0]]()
            want = runs["sdpa_flash"]()
            rec["rel_err_vs_sdpa"] = rel_err(cupy_to_torch(out, "f16"), want)
        except Exception as exc:
            rec["rel_err_vs_sdpa_failure"] = f"{type(exc).__name__}: {exc}"[:300]
    c = timing.compare(runs, baseline="cudnn" if "cudnn" in runs else None, progress=False,
                       **_rep(n, quick))
    rec["comparison"] = c
    rec["tflops"] = {k: rec["flops"] / (t.median_ms * 1e-3) / 1e12 for k, t in c.timings.items()}
    log(f"  N={n:<6} d={d:<4} causal={causal!s:<5} " + ", ".join(
        f"{k} {v:.0f}" for k, v in sorted(rec["tflops"].items(), key=lambda kv: -kv[1]))
        + " TFLOP/s")
    return rec


def run(out_dir, *, quick: bool = False, seed: int = 0) -> dict:
    """All sections into ``out_dir/results.json``; returns the results."""
    t0 = time.time()
    out_dir = os.fspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "results.json")
    log = Log(os.path.join(out_dir, "log.txt"))
    rng = np.random.default_rng(seed)
    results: dict = {"settings": {"quick": quick, "seed": seed, "B": B, "H": H,
                                  "headline": HEADLINE, "sizes": QUICK_SIZES if quick else SIZES},
                     "errors": {}}
    dev = timing.device_info() if device.gpu_available() else {"status": device.status_line()}
    log(f"[10_fa3_pipelining bench] {device.status_line()}")

    def save():
        results["elapsed_s"] = time.time() - t0
        timing.save_results(path, results, device=dev)

    def section(name, fn):
        log(f"({name})")
        try:
            results[name] = fn()
        except Exception as exc:              # recorded, the run goes on
            results["errors"][name] = f"{type(exc).__name__}: {exc}"[:1000]
            log(f"  !! {name} failed: {type(exc).__name__}: {exc}")
        save()

    section("variants", lambda: sass_evidence.all_evidence(dtypes=("f16", "bf16")))
    section("check", lambda: check(rng, log, quick))
    base = None
    try:
        base = baselines(log)
    except Exception as exc:
        results["errors"]["baselines"] = f"{type(exc).__name__}: {exc}"
    if base is not None and device.gpu_available():
        results["baseline_notes"] = base.notes
        import cupy as cp
        with base.stream():
            section("headline", lambda: timed(base, rng, quick=quick, log=log,
                                              two_stage_rings=("nooverlap", "twostage"), **HEADLINE))
            rows = results["sweep"] = []
            for n in (QUICK_SIZES if quick else SIZES):
                for d in config.HEAD_DIMS:
                    for causal in (False, True):
                        where = f"sweep N={n} d={d} causal={causal}"
                        try:
                            rows.append(timed(base, rng, n, d, causal, quick, log))
                        except Exception as exc:
                            results["errors"][where] = f"{type(exc).__name__}: {exc}"[:600]
                            log(f"  !! {where}: {type(exc).__name__}: {exc}")
                        cp.get_default_memory_pool().free_all_blocks()
                        save()
    save()
    log("\n" + summary_table(results))
    log(f"wrote {path} ({results['elapsed_s']:.0f} s)")
    return results


# ---- why d = 64 stays below cuDNN: the pipes' utilization under ncu -------------------------

#: (variant, d) pairs profiled by :func:`pipes`, at N = 4096, B*H = 32, f16, non-causal.
PIPE_CASES = (("tma", 64), ("tma", 128), ("tma", 256), ("pingpong", 64))


def profile(variant: str, n: int, d: int, causal: bool = False) -> None:
    """Run ``variant`` twice at (B, H, n, d), f16 (the child that ncu watches)."""
    import cupy as cp
    from ..attention import random_qkv
    raw, _ = random_qkv(np.random.default_rng(0), (B, H, n, d), "f16")
    q, k, v = (cp.asarray(a) for a in raw)
    run, _ = kernels.attention_launcher(q, k, v, variant=variant, causal=causal)
    for _ in range(2):
        run()
    cp.cuda.get_current_stream().synchronize()


def pipes(out_dir, n: int = 4096) -> dict:
    """ncu on each of :data:`PIPE_CASES` (one child each: the stall reasons and the compute
    workload section's pipe utilizations) -> ``out_dir/pipes.json``."""
    from .. import ncu
    os.makedirs(out_dir, exist_ok=True)
    log = Log(os.path.join(out_dir, "pipes_log.txt"))
    names = [f"{v} d{d}" for v, d in PIPE_CASES]

    def command_of(path, name):
        v, d = name.split(" d")
        return ncu.command(path, config.kernel_name(v, "f16", int(d)), "fraglab.fa3_pipelining",
                           "profile", "--variant", v, "--n", str(n), "--d", d,
                           sections=(*ncu.SECTIONS, "ComputeWorkloadAnalysis", "InstructionStats"))
    res = ncu.stall_breakdown(names, command_of, log, timeout_s=120.0,
                              keep=lambda k: "pipe" in k or "issue_active" in k or "inst_executed" in k)
    res = {"N": n, "B": B, "H": H, **res}
    timing.save_results(os.path.join(out_dir, "pipes.json"), res, device=timing.device_info())
    return res


# ---- the tma rung's tuning sweep (tuning.py keeps the table it writes) ----------------------

def tune_sweep(base, rng, log, *, sizes=SIZES, dims=(64, 128, 256), dtype="f16",
          quick: bool = False, picks: dict | None = None) -> list[dict]:
    """Time the candidates (or, with ``picks`` {(d, N, causal): config}, only those) beside the
    baselines at every (d, N, causal). One record per point: TFLOP/s and the comparison."""
    from .tuning import candidates, label
    rows = []
    for n in sizes:
        for d in dims:
            for causal in (False, True):
                configs = [picks[(d, n, causal)]] if picks else candidates(d)
                rec = {"N": n, "d": d, "causal": causal, "dtype": dtype, "B": B, "H": H,
                       "flops": attention_flops(B, H, n, d, causal), "refused": {}}
                ts, qkv = base.inputs(rng, (B, H, n, d), dtype)
                runs = {}
                for c in configs:
                    try:
                        runs[label(c)] = kernels.attention_launcher(
                            *qkv, causal=causal, variant="tma", **c)[0]
                    except Exception as exc:          # recorded
                        rec["refused"][label(c)] = f"{type(exc).__name__}: {exc}"[:300]
                for name, fn in base.callables(ts, qkv, causal, rec["refused"]).items():
                    if name in ("cudnn", "sdpa_flash"):
                        try:
                            fn()
                            runs[name] = fn
                        except Exception as exc:
                            rec["refused"][name] = f"{type(exc).__name__}: {exc}"[:300]
                c = timing.compare(runs, baseline="cudnn" if "cudnn" in runs else None,
                                   progress=False, **_rep(n, quick))
                rec["comparison"] = c
                rec["tflops"] = {k: rec["flops"] / (t.median_ms * 1e-3) / 1e12
                                 for k, t in c.timings.items()}
                mine = {k: v for k, v in rec["tflops"].items() if k.startswith("tma")}
                if mine:
                    best = max(mine, key=mine.get)
                    rec["pick"] = next(x for x in configs if label(x) == best)
                    cu = rec["tflops"].get("cudnn")
                    rec["x_cudnn"] = mine[best] / cu if cu else None
                log(f"  {dtype} N={n:<6} d={d:<4} causal={causal!s:<5} " + ", ".join(
                    f"{k} {v:.0f}" for k, v in sorted(rec["tflops"].items(), key=lambda kv: -kv[1]))
                    + " TFLOP/s" + (f"  pick {label(rec['pick'])}, x cuDNN {rec['x_cudnn']:.3f}"
                                    if rec.get("x_cudnn") else ""))
                rows.append(rec)
                if device.gpu_available():
                    import cupy as cp
                    cp.get_default_memory_pool().free_all_blocks()
    return rows


def tune(out_dir, *, quick: bool = False, seed: int = 0) -> dict:
    """The sweep (f16, every candidate), the table, then the picks in bf16 at d 128 and 256,
    N >= 4k; ``out_dir/tma_table.json`` rewritten after each part."""
    from .tuning import SIZES, candidates, table_of
    t0 = time.time()
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "tma_table.json")
    log = Log(os.path.join(out_dir, "tune_log.txt"))
    rng = np.random.default_rng(seed)
    sizes = (1024, 4096) if quick else SIZES
    res: dict = {"settings": {"quick": quick, "seed": seed, "sizes": sizes,
                              "candidates": {d: candidates(d) for d in (64, 128, 256)}},
                 "errors": {}}
    dev = timing.device_info()
    log(f"[10_fa3_pipelining tune] {device.status_line()}")

    def save():
        res["elapsed_s"] = time.time() - t0
        timing.save_results(path, res, device=dev)

    base = baselines(log)
    res["baseline_notes"] = base.notes
    with base.stream():
        try:
            res["f16"] = tune_sweep(base, rng, log, sizes=sizes, quick=quick)
            res["table"] = table_of(res["f16"])
        except Exception as exc:                      # recorded
            res["errors"]["f16"] = f"{type(exc).__name__}: {exc}"[:1000]
        save()
        if "table" in res:
            picks = {(e["d"], e["N"], e["causal"]): {"key_tile": e["key_tile"], "stages": e["stages"],
                                                     "consumers": e.get("consumers", 2)}
                     for e in res["table"]["entries"]}
            try:
                res["bf16"] = tune_sweep(base, rng, log, sizes=[n for n in sizes if n >= 4096],
                                    dims=(128, 256), dtype="bf16", quick=quick, picks=picks)
            except Exception as exc:
                res["errors"]["bf16"] = f"{type(exc).__name__}: {exc}"[:1000]
        save()
    log(f"wrote {path} ({time.time() - t0:.0f} s)")
    return res


def summary_table(results: dict) -> str:
    """A short text table (also for the loaded JSON): checks, then TFLOP/s by configuration."""
    from .report import best_variant, tflops_of
    lines = []
    checks = results.get("check") or []
    if checks:
        bad = [f"{r['problem']} [{r['case']}]" for r in checks if not r.get("ok")]
        lines.append(f"check: {len(checks) - len(bad)}/{len(checks)} pass"
                     + (": WRONG " + ", ".join(bad[:8]) if bad else ""))
    rows = ([results["headline"]] if isinstance(results.get("headline"), dict) else []) \
        + list(results.get("sweep") or [])
    if rows:
        best = best_variant(results)
        lines.append(f"{'N':>6} {'d':>4} {'causal':>6} {'best fa3':>9} {'cudnn':>7} "
                     f"{'flash':>7} {'fa2':>6} {'ch09':>6} {'fa3/cudnn':>9}")
        for r in rows:
            tf = tflops_of(r)
            f3, cu = tf.get(f"fa3_{best}"), tf.get("cudnn")

            def fmt(x, w):
                return f"{x:>{w}.0f}" if x else f"{'-':>{w}}"
            lines.append(f"{r['N']:>6} {r['d']:>4} {str(r['causal']):>6} {fmt(f3, 9)} "
                         f"{fmt(cu, 7)} {fmt(tf.get('sdpa_flash'), 7)} {fmt(tf.get('fa2'), 6)} "
                         f"{fmt(tf.get('ch09'), 6)} "
                         + (f"{f3 / cu:>9.2f}" if f3 and cu else f"{'-':>9}"))
        lines.append(f"(best variant: {best})")
    return "\n".join(lines)
