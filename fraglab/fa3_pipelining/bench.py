"""The H100 run of chapter 10 (``python -m fraglab.fa3_pipelining bench --out DIR [--quick]``).

One process, sections in this order; ``DIR/results.json`` is rewritten after each (a failing
section records its error and the run goes on), the log goes to ``DIR/log.txt``:

a. ``variants``: registers, spills, ptxas's wgmma notes and the SASS overlap counts of every
   kernel (:mod:`.sass_evidence`; no GPU needed);
b. ``check``: the building blocks and every variant against float64 on fresh inputs, outputs
   poisoned (:mod:`.problems`: ragged N, N = 1, causal, bf16, peaky): pass/fail and relative
   error per case, never aborting;
c. ``headline``: every variant, the course's FA-2, chapter 09's last step (when importable),
   SDPA's flash backend and cuDNN's SDPA, interleaved by :func:`fraglab.bench.compare`, at
   N = 4096, d = 128, B*H = 32, f16, non-causal;
d. ``sweep``: the same at N 1k .. 16k, d 64 and 128, causal and not.

A few minutes on an H100, most of it compiling (``--quick``: N 1k and 4k only, fewer repeats).
"""
from __future__ import annotations

import os
import time

import numpy as np

from .. import bench as timing
from .. import device
from ..flash_attention.kernels import attention_flops, fa2_launcher, random_qkv
from ..progress import Log
from . import kernels, problems, sass_evidence

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
    """Every problem over its cases (all of them on a GPU), each result recorded."""
    out = []
    for name, p in problems.PROBLEMS.items():
        cases = p.cases_here()[::2] if quick else p.cases_here()
        bad = []
        for case in cases:
            try:
                r = p.evaluate(case, rng)
                rec = {"problem": name, "case": case.name, "error": r.error, "tol": r.tol,
                       "ok": bool(r.ok)}
            except Exception as exc:          # recorded, never fatal
                rec = {"problem": name, "case": case.name, "ok": False,
                       "failure": f"{type(exc).__name__}: {exc}"[:500]}
            if not rec["ok"]:
                bad.append(case.name)
            out.append(rec)
        worst = max((r.get("error", float("inf")) for r in out if r["problem"] == name), default=0)
        log(f"  {name:<22} {len(cases) - len(bad)}/{len(cases)} pass, worst rel. error "
            f"{worst:.2e}" + (f"  <-- WRONG: {', '.join(bad)}" if bad else ""))
    return out


class Baselines:
    """cuDNN's and the flash backend's SDPA on torch tensors (:mod:`fraglab.flash_attention.
    torch_interop`), the course's FA-2 and chapter 09's last step on the same memory."""

    def __init__(self, log):
        from ..flash_attention.torch_interop import sdpa_cudnn, sdpa_flash
        self.torch, self.flash, note = sdpa_flash()
        _, self.cudnn, note_cudnn = sdpa_cudnn()
        self.notes = {"sdpa_flash": note, "cudnn": note_cudnn}
        try:
            from ..instruction_diet import kernels as ch09
            self.ch09 = ch09.attention_launcher
            self.notes["ch09"] = f"fraglab.instruction_diet step {getattr(ch09, 'FINAL', '?')}"
        except Exception as exc:                          # not there yet, or broken
            self.ch09 = None
            self.notes["ch09"] = f"not importable: {type(exc).__name__}: {exc}"[:200]
        log("  baselines: " + "; ".join(f"{k}: {v}" for k, v in self.notes.items()))

    def stream(self):
        import cupy as cp
        if self.torch is None:
            return cp.cuda.Stream(non_blocking=True)
        return cp.cuda.ExternalStream(self.torch.cuda.current_stream().cuda_stream)

    def inputs(self, rng, shape, dtype="f16"):
        import cupy as cp
        from ..flash_attention.torch_interop import torch_to_cupy
        if self.torch is None:
            raw, _ = random_qkv(rng, shape, dtype)
            return None, [cp.asarray(a) for a in raw]
        tdt = self.torch.float16 if dtype == "f16" else self.torch.bfloat16
        ts = [self.torch.randn(shape, dtype=tdt, device="cuda") for _ in range(3)]
        return ts, [torch_to_cupy(t, dtype) for t in ts]

    def callables(self, ts, qkv, causal: bool, refused: dict) -> dict:
        """Name -> callable for every baseline that can be built here (failures in ``refused``)."""
        makers = {}
        for name, pair in (("cudnn", self.cudnn), ("sdpa_flash", self.flash)):
            if ts is not None and pair is not None:
                makers[name] = (lambda pair=pair: self._sdpa(pair, ts, causal))
        makers["fa2"] = lambda: fa2_launcher(*qkv, causal=causal)[0]
        if self.ch09 is not None:
            makers["ch09"] = lambda: self.ch09(*qkv, causal=causal)[0]
        out = {}
        for name, make in makers.items():
            try:
                out[name] = make()
            except Exception as exc:          # recorded, the others still run
                refused[name] = f"{type(exc).__name__}: {exc}"[:300]
        return out

    @staticmethod
    def _sdpa(pair, ts, causal):
        ctx, make = pair
        fn = make(*ts, causal)

        def call():
            with ctx():
                return fn()
        return call


def timed(base: Baselines, rng, n: int, d: int, causal: bool, quick: bool, log,
          variants=kernels.VARIANTS, two_stage_rings=()) -> dict:
    """Every variant and every baseline that runs, interleaved, at (B, H, n, d), f16."""
    shape = (B, H, n, d)
    rec = {"N": n, "d": d, "causal": causal, "dtype": "f16", "B": B, "H": H,
           "flops": attention_flops(B, H, n, d, causal), "refused": {}}
    ts, qkv = base.inputs(rng, shape)
    runs, out = {}, None
    for v in variants:
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
    last = [k for k in runs if k.startswith("fa3_") and k[4:] in kernels.VARIANTS][-1:]
    if ts is not None and base.flash is not None and last:   # its output beside SDPA's
        try:
            from ..flash_attention.torch_interop import cupy_to_torch
            runs[last[0]]()
            with base.flash[0]():
                want = base.flash[1](*ts, causal)().float()
            got = cupy_to_torch(out, "f16").float()
            rec["rel_err_vs_sdpa"] = float((got - want).norm() / want.norm())
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
        base = Baselines(log)
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
                for d in kernels.HEAD_DIMS:
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
