"""The chapter's measurements (:func:`run_bench`) and their text summary (:func:`summary_table`).

``python -m fraglab.flash_attention bench --out DIR`` runs them: about ten seconds plus
compilation on an H100 (at most 3 minutes), writing ``DIR/results.json`` and ``DIR/bench.log``.
"""
from __future__ import annotations

import os
import time

import numpy as np

from .. import bench as timing
from .. import device
from ..attention import Baselines, as_float, attention_flops, attention_reference, random_qkv
from ..attention.torch_sdpa import cupy_to_torch, rel_err
from ..progress import Log
from .constants import FA2_HEAD_DIMS, FA2_WARPS, VARIANTS
from .kernels import fa1_launcher, fa2_launcher


def run_bench(out_dir, *, quick: bool = False, bh: tuple[int, int] = (4, 8)) -> dict:
    """The chapter's measurements; writes ``out_dir/results.json`` and returns the results.

    (a) FA-1 pairs at the paper's size (d = 512, N = 1024, one head): paper baseline vs
        in-register, and fair baseline vs in-register, each one :func:`fraglab.bench.compare`
        run; then all three at a size that fills the GPU (B*H = 32, N = 2048, d = 128).
    (b) FA-2 vs ``torch.nn.functional.scaled_dot_product_attention`` restricted to the flash
        backend, B*H = 32, N in 1024..8192, d in 64, 128, f16, causal and not, and bf16 at
        N = 4096, d = 128: TFLOP/s from medians, FLOPs = 4 B H N^2 d (halved when causal). The
        number of warps per block is picked first (4 vs 8 at N = 4096, d = 128). Each FA-2
        output is checked against SDPA's (relative error, max difference). SDPA runs on the
        stream of :class:`fraglab.attention.Baselines` (one stream for CuPy and torch).

    The JSON is rewritten after every section, so an interrupted run keeps what it measured; a
    section that fails records its error and the run goes on. The printed lines also go to
    ``out_dir/bench.log``.
    """
    import cupy as cp

    t_start = time.time()
    out_dir = os.fspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "results.json")
    log = Log(os.path.join(out_dir, "bench.log"))
    rep = dict(repeat=30, rounds=3, warmup=5) if quick else dict(repeat=100, rounds=5, warmup=10)
    rep_fa2 = dict(repeat=20, rounds=2, warmup=3) if quick else dict(repeat=40, rounds=4, warmup=5)
    results: dict = {"settings": {"quick": quick, "fa1": rep, "fa2": rep_fa2}, "errors": {}}
    dev_info = timing.device_info()
    rng = np.random.default_rng(0)
    base = Baselines(backends=("sdpa_flash",))
    log(f"[05_flash_attention bench] {device.status_line()}")

    def save():
        results["elapsed_s"] = time.time() - t_start
        timing.save_results(path, results, device=dev_info)

    def failed(where: str, e: BaseException):
        results["errors"][where] = f"{type(e).__name__}: {e}"
        log(f"  !! {where} failed: {type(e).__name__}: {e}")

    with base.stream() as stream:
        try:
            _bench_fa1(results, rng, rep, rep_fa2, log)
        except Exception as e:                              # pragma: no cover - GPU machine only
            failed("fa1", e)
        cp.get_default_memory_pool().free_all_blocks()
        save()
        log(f"  ... {time.time() - t_start:.0f} s")
        _bench_fa2(results, rng, rep_fa2, quick, bh, base, stream, save, failed, log)
    save()
    log("\n" + summary_table(results))
    log(f"wrote {path} ({results['elapsed_s']:.0f} s)")
    return results


def _tflops(flops: float, comparison) -> dict:
    return {name: flops / (t.median_ms * 1e-3) / 1e12 for name, t in comparison.timings.items()}


def _bench_fa1(results: dict, rng, rep: dict, rep_full: dict, log: Log) -> None:
    import cupy as cp
    shape = (1, 1, 1024, 512)
    (qn, kn, vn), exact = random_qkv(rng, shape, "f16")
    q, k, v = (cp.asarray(a) for a in (qn, kn, vn))
    ref = attention_reference(*exact)
    runs = {}
    results["fa1_check_rel_err"] = {}
    for var in VARIANTS:
        run, out = fa1_launcher(q, k, v, var)
        run()
        cp.cuda.get_current_stream().synchronize()
        err = float(np.linalg.norm(as_float(out, "f16") - ref) / np.linalg.norm(ref))
        runs[var] = run
        results["fa1_check_rel_err"][var] = err
        log(f"  fa1 {var}: relative error vs float64 reference {err:.2e}")
    flops = attention_flops(*shape)
    for key, pair in (("fa1_paper_pair", ("paper_baseline", "inregister")),
                      ("fa1_fair_pair", ("fair_baseline", "inregister"))):
        log(f"(a) {key}: {pair[0]} vs {pair[1]}, d=512, N=1024, B*H=1")
        c = timing.compare({p: runs[p] for p in pair}, baseline=pair[0], **rep)
        log(c.table())
        results[key] = {"shape": shape, "flops": flops, "comparison": c, "tflops": _tflops(flops, c)}
    shape = (4, 8, 2048, 128)
    (qn, kn, vn), _ = random_qkv(rng, shape, "f16")
    q, k, v = (cp.asarray(a) for a in (qn, kn, vn))
    runs = {var: fa1_launcher(q, k, v, var)[0] for var in VARIANTS}
    log("(a) fa1_full_gpu: all three, d=128, N=2048, B*H=32")
    c = timing.compare(runs, baseline="paper_baseline", **rep_full)
    log(c.table())
    flops = attention_flops(*shape)
    results["fa1_full_gpu"] = {"shape": shape, "flops": flops, "comparison": c,
                               "tflops": _tflops(flops, c)}


def _bench_fa2(results: dict, rng, rep: dict, quick: bool, bh, base: Baselines, stream, save,
               failed, log: Log) -> None:
    import cupy as cp
    note = results["sdpa"] = base.notes["sdpa_flash"]
    log(f"(b) FA-2 vs SDPA (flash backend): {note}")
    b_, h_ = bh

    def inputs(dtype, n, d):
        return base.inputs(rng, (b_, h_, n, d), dtype)

    best = 4
    try:                                   # pick the warps per block
        ts, (q, k, v) = inputs("f16", 4096, 128)
        cands = {f"fa2_w{w}": fa2_launcher(q, k, v, warps=w)[0] for w in FA2_WARPS}
        log("(b) warps per block, N=4096, d=128, f16, non-causal")
        c = timing.compare(cands, **rep)
        log(c.table())
        best = int(min(c.timings, key=lambda name: c.timings[name].median_ms)[len("fa2_w"):])
        results["fa2_warps"] = {"comparison": c, "chosen": best}
        log(f"  -> {best} warps per block")
        del ts, q, k, v, cands
    except Exception as e:                                  # pragma: no cover - GPU machine only
        failed("fa2_warps", e)
    save()

    configs = [("f16", n, d, causal) for n in ((1024, 4096) if quick else (1024, 2048, 4096, 8192))
               for d in FA2_HEAD_DIMS for causal in (False, True)]
    configs += [("bf16", 4096, 128, False), ("bf16", 4096, 128, True)]
    rows = results["fa2_vs_sdpa"] = []
    for dtype, n, d, causal in configs:
        where = f"fa2 {dtype} N={n} d={d} causal={causal}"
        log(f"(b) {where}")
        rec = {"dtype": dtype, "B": b_, "H": h_, "N": n, "d": d, "causal": causal, "warps": best,
               "flops": attention_flops(b_, h_, n, d, causal)}
        try:
            ts, (q, k, v) = inputs(dtype, n, d)
            ours, out = fa2_launcher(q, k, v, causal=causal, warps=best)
            variants = {"fa2": ours}
            refused: dict = {}
            variants.update(base.callables(ts, None, causal, refused))
            if refused:
                rec["refused"] = refused
            if "sdpa_flash" in variants:
                ours()
                want = variants["sdpa_flash"]()
                stream.synchronize()
                got = cupy_to_torch(out, dtype)
                rec["rel_err_vs_sdpa"] = rel_err(got, want)
                rec["max_abs_diff_vs_sdpa"] = float((got.float() - want.float()).abs().max())
                rec["fa2_nan"] = bool(base.torch.isnan(got).any())
                del want, got
            c = timing.compare(variants, baseline="sdpa_flash" if "sdpa_flash" in variants else None,
                               progress=False, **rep)
            rec["comparison"] = c
            rec["tflops"] = _tflops(rec["flops"], c)
            if "sdpa_flash" in rec["tflops"]:
                rec["fraction_of_sdpa"] = rec["tflops"]["fa2"] / rec["tflops"]["sdpa_flash"]
            rows.append(rec)
            log("    " + ", ".join(f"{name} {c.timings[name].median_ms:.3f} ms "
                                   f"{rec['tflops'][name]:.1f} TFLOP/s" for name in c.timings)
                + (f", fa2/sdpa {rec['fraction_of_sdpa']:.2f}" if "fraction_of_sdpa" in rec else "")
                + (f", rel err vs sdpa {rec['rel_err_vs_sdpa']:.1e}" if "rel_err_vs_sdpa" in rec else ""))
        except Exception as e:                              # pragma: no cover - GPU machine only
            failed(where, e)
        ts = q = k = v = ours = out = variants = None
        cp.get_default_memory_pool().free_all_blocks()
        save()


def summary_table(results: dict) -> str:
    """A short text table of :func:`run_bench`'s results (also works on the loaded JSON)."""
    def med(c, name):
        t = c.timings[name] if hasattr(c, "timings") else c["timings"][name]
        return t.median_ms if hasattr(t, "median_ms") else t["median_ms"]

    lines = []
    for key in ("fa1_paper_pair", "fa1_fair_pair", "fa1_full_gpu"):
        if key in results:
            r = results[key]
            c = r["comparison"]
            names = list(r["tflops"])
            base = names[0]
            lines.append(f"{key} {tuple(r['shape'])}: " + ", ".join(
                f"{n} {med(c, n):.3f} ms ({med(c, base) / med(c, n):.2f}x)" for n in names))
    if results.get("fa2_vs_sdpa"):
        lines.append(f"{'dtype':>5} {'N':>5} {'d':>4} {'causal':>6} {'fa2 TFLOP/s':>12} "
                     f"{'sdpa TFLOP/s':>13} {'fa2/sdpa':>9}")
        for r in results["fa2_vs_sdpa"]:
            if "tflops" not in r:
                continue
            tf = r["tflops"]
            sd = tf.get("sdpa_flash")
            lines.append(f"{r['dtype']:>5} {r['N']:>5} {r['d']:>4} {str(r['causal']):>6} "
                         f"{tf['fa2']:>12.1f} " + (f"{sd:>13.1f} {tf['fa2'] / sd:>9.2f}" if sd
                                                    else f"{'-':>13} {'-':>9}"))
    return "\n".join(lines)
