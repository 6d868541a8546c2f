"""The GPU run of chapter 11 (``python -m fraglab.fused_lm_head bench --out DIR [--quick]``), which
``python -m fraglab.chapter bench 11`` records in ``book/data/11_fused_lm_head/``. Sections:

a. ``check``: every Problem over its cases, each result recorded, never aborting
   (:func:`fraglab.problem.check_all`);
b. ``timing`` (GPU only): ``warp_scan`` on :data:`ROWS` rows (``--quick``: :data:`QUICK_ROWS`),
   the median of many runs through :mod:`fraglab.bench` and the bandwidth it reaches.

``DIR/results.json`` holds both and the device; the log goes to ``DIR/log.txt``.
"""
from __future__ import annotations

import os
import time

import numpy as np

from .. import bench, device, launch
from ..problem import check_all
from ..progress import Log
from . import kernels, problems

ROWS, QUICK_ROWS = 1 << 22, 1 << 16


def timing(rows: int, rng, quick: bool) -> dict:
    """warp_scan on ``rows`` random rows: median, spread and GB/s (each row is read and written
    once: 256 bytes)."""
    x = launch.to_device(rng.integers(-1000, 1000, (rows, 32), dtype=np.int32))
    t = bench.time_kernel(lambda: kernels.warp_scan(x), warmup=3 if quick else 10,
                          repeat=30 if quick else 300)
    return {"rows": rows, "median_ms": t.median_ms, "p10_ms": t.p10_ms, "p90_ms": t.p90_ms,
            "n": t.n, "gbs": rows * 256 / 1e9 / (t.median_ms * 1e-3)}


def run(out_dir, *, quick: bool = False, seed: int = 0) -> dict:
    """Both sections into ``out_dir/results.json``; returns the results."""
    t0 = time.time()
    os.makedirs(out_dir, exist_ok=True)
    log = Log(os.path.join(out_dir, "log.txt"))
    rng = np.random.default_rng(seed)
    log(f"[11_fused_lm_head bench] {device.status_line()}")
    results = {"settings": {"quick": quick, "seed": seed}, "errors": {},
               "check": check_all(problems.PROBLEMS, rng, log)}
    if device.gpu_available():
        results["timing"] = timing(QUICK_ROWS if quick else ROWS, rng, quick)
        log(f"  warp_scan: {results['timing']['median_ms']:.4f} ms, "
            f"{results['timing']['gbs']:.0f} GB/s")
    else:
        results["errors"]["timing"] = f"not timed: {device.status_line()}"
    results["elapsed_s"] = time.time() - t0
    dev = bench.device_info() if device.gpu_available() else {"status": device.status_line()}
    bench.save_results(os.path.join(out_dir, "results.json"), results, device=dev)
    log(f"wrote {os.path.join(out_dir, 'results.json')} ({results['elapsed_s']:.0f} s)")
    return results
