"""The H100 measurement run of the SGEMM ladder (``python -m fraglab.register_reuse bench``).

One process, in this order, each step recorded even when a rung fails in it:

a. **check**: every rung once against float64 (1024^3, and a ragged size for the rungs that
   take one);
b. **sweep**: the top rung's tiles (:func:`sweep_space`, ~36 configurations), all compiled up
   front (spilling ones dropped), each timed briefly at 4096^3 with
   :func:`fraglab.bench.time_kernel`; the winner runs as ``autotuned`` in the ladder;
c. **ladder**: every rung and cuBLAS (TF32 off) at each size, interleaved by
   :func:`fraglab.bench.compare`: median ms, TFLOP/s, share of cuBLAS;
d. **stalls**: Nsight Compute's warp-stall breakdown of ``smem``, ``tile1d`` (the seed's pair)
   and ``autotuned`` at 4096^3, with shared-load wavefronts (:mod:`fraglab.ncu`), in child
   processes;
e. everything into ``DIR/results.json`` through :func:`fraglab.bench.save_results` (device,
   clocks, throttle state), and a summary table.
"""
from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import numpy as np

from .. import bench, launch, ncu, report
from ..problem import Case
from ..progress import Log, Progress
from . import kernels, problems, sass_counts
from .seed import SEED

#: Square sizes and (M, N, K) shapes of the ladder; ``--quick`` keeps the first two of each.
SQUARE = (1024, 2048, 4096, 8192)
NON_SQUARE = ((4096, 4096, 1024), (8192, 2048, 4096), (2048, 8192, 512))
#: Rungs left out at a size because one call would take seconds (and why).
SKIP = {8192: {"naive": "uncoalesced: over a second per call at 8192^3"}}
#: Repeats of compare() by the largest dimension (calls of the slow rungs take long).
REPEATS = {1024: 100, 2048: 50, 4096: 30, 8192: 10}
SWEEP_SIZE = 4096
#: Rungs whose warp stalls Nsight Compute breaks down (the seed's pair, and our top rung).
STALL_RUNGS = ("smem", "tile1d", "autotuned")


def flops(m: int, n: int, k: int) -> int:
    return 2 * m * n * k


def _random(rng, *shape):
    return launch.to_device(rng.standard_normal(shape).astype(np.float32))


# --------------------------------------------------------------------------------------------
# a. correctness
# --------------------------------------------------------------------------------------------

def check(rng, log, size: int = 1024) -> list[dict]:
    """Every rung once against float64 at ``size``^3 (and 333x257x131 where it takes any size)."""
    out = []
    for variant in kernels.VARIANTS:
        p = problems.PROBLEMS[variant]
        cases = [Case(f"check{size}", m=size, n=size, k=size)]
        if variant in kernels.RAGGED_OK:
            cases.append(p.case("ragged"))
        for case in cases:
            try:
                r = p.evaluate(case, rng)
                rec = {"kernel": variant, "case": case.name, "error": r.error, "tol": r.tol,
                       "ok": r.ok}
            except Exception as exc:  # recorded, not fatal
                rec = {"kernel": variant, "case": case.name, "ok": False,
                       "failure": f"{type(exc).__name__}: {exc}"[:500]}
            log(f"  {variant:<14} {case.name:<10} "
                + (f"rel. error {rec['error']:.2e}" if "error" in rec else rec["failure"])
                + ("" if rec["ok"] else "  <-- WRONG"))
            out.append(rec)
    return out


# --------------------------------------------------------------------------------------------
# b. autotuning sweep
# --------------------------------------------------------------------------------------------

def sweep_space() -> list[dict]:
    """The configurations the sweep tries: block tiles 128x128, 128x256, 256x128; BK 8 or 16;
    warp tiles 32x64 (lanes 4x8) and 64x32 (lanes 4x8 or 8x4), 64 outputs per thread, or 64x64
    (128 outputs per thread); the block order GROUP 1 or 8. MINB asks ptxas for 2 blocks per SM
    where two fit at about 2 registers per output, else 1."""
    out = []
    for (bm, bn), bk, (wm, wn, lm), group in itertools.product(
            ((128, 128), (128, 256), (256, 128)), (8, 16),
            ((32, 64, 4), (64, 32, 4), (64, 32, 8), (64, 64, 4)), (1, 8)):
        t = dict(BM=bm, BN=bn, BK=bk, WM=wm, WN=wn, LM=lm, MINB=1, GROUP=group)
        outputs = wm * wn // 32                # per thread; registers ~ 2x that, at most 255
        t["MINB"] = 2 if kernels.threads("autotuned", t) * min(255, 2 * outputs) * 2 <= 65536 else 1
        try:
            out.append(kernels.tiles("autotuned", **t))
        except ValueError:
            continue
    return out


def _label(t: dict) -> str:
    return (f"{t['BM']}x{t['BN']}x{t['BK']} warp {t['WM']}x{t['WN']} LM{t['LM']} "
            f"MINB{t['MINB']} G{t['GROUP']}")


def autotune(rng, log, size: int = SWEEP_SIZE, space: list[dict] | None = None,
             repeat: int = 20) -> dict:
    """Compile every configuration first (dropping those that fail or spill), then time each at
    ``size``^3. Returns ``{"records", "best", "cublas_ms"}``."""
    from .. import device
    space = sweep_space() if space is None else space
    records, ready = [], []
    arch = device.arch()
    for t in space:
        rec = {"tiles": t, "label": _label(t)}
        try:
            b = kernels.build("autotuned", arch, **t)
            res = b.resources["sgemm_autotuned"]
            rec.update(registers=res["registers"], spill_bytes=res["spill_stores"] + res["spill_loads"])
            if rec["spill_bytes"]:
                rec["skipped"] = "spills to local memory"
            else:
                ready.append(rec)
        except Exception as exc:
            rec["skipped"] = f"{type(exc).__name__}: {exc}"[:300]
        records.append(rec)
    log(f"  {len(ready)} of {len(space)} configurations compile without spills")
    a, b = _random(rng, size, size), _random(rng, size, size)
    cub = bench.time_kernel(lambda: kernels.cublas(a, b), warmup=3, repeat=repeat, name="cublas")
    bar = Progress(len(ready))
    for i, rec in enumerate(ready, 1):
        try:
            run, _ = kernels.sgemm_launcher(a, b, "autotuned", **rec["tiles"])
            t = bench.time_kernel(run, warmup=3, repeat=repeat, name=rec["label"])
            rec.update(median_ms=t.median_ms, p10_ms=t.p10_ms, p90_ms=t.p90_ms,
                       tflops=flops(size, size, size) / t.median_ms / 1e9,
                       of_cublas=cub.median_ms / t.median_ms)
            bar.show(i, f"{rec['label']}: {rec['tflops']:.1f} TFLOP/s ({rec['of_cublas']:.1%})")
        except Exception as exc:
            rec["failure"] = f"{type(exc).__name__}: {exc}"[:300]
            bar.show(i, f"{rec['label']}: FAILED {rec['failure'][:80]}")
    bar.close()
    timed = [r for r in ready if "tflops" in r]
    best = max(timed, key=lambda r: r["tflops"]) if timed else None
    if best:
        log(f"  best: {best['label']} {best['tflops']:.1f} TFLOP/s = {best['of_cublas']:.1%} of "
            f"cuBLAS ({cub.median_ms:.3f} ms)\n  -> TILES['autotuned'] = {best['tiles']}")
    return {"size": size, "records": records, "best": best and best["tiles"],
            "cublas_ms": cub.median_ms}


# --------------------------------------------------------------------------------------------
# c. the ladder
# --------------------------------------------------------------------------------------------

def ladder_at(rng, log, shape: tuple[int, int, int], tuned: dict | None) -> dict:
    """Every rung that takes ``shape`` and cuBLAS, interleaved; ratios against cuBLAS."""
    m, n, k = shape
    a, b = _random(rng, m, k), _random(rng, k, n)
    variants, skipped = {"cublas": lambda: kernels.cublas(a, b)}, {}
    for variant in kernels.VARIANTS:
        why = SKIP.get(max(shape), {}).get(variant)
        if why:
            skipped[variant] = why
            continue
        try:
            over = tuned if variant == "autotuned" and tuned else {}
            run, _ = kernels.sgemm_launcher(a, b, variant, **over)
            run()
            import cupy
            cupy.cuda.get_current_stream().synchronize()   # a launch error shows here, not in compare
            variants[variant] = run
        except Exception as exc:
            skipped[variant] = f"{type(exc).__name__}: {exc}"[:300]
    cmp = bench.compare(variants, baseline="cublas", warmup=2,
                        repeat=REPEATS.get(max(shape), 5), rounds=5, progress=False)
    rows = {}
    for name, t in cmp.timings.items():
        rows[name] = {"median_ms": t.median_ms, "p10_ms": t.p10_ms, "p90_ms": t.p90_ms,
                      "tflops": flops(m, n, k) / t.median_ms / 1e9,
                      "of_cublas": cmp.ratios()[name]}
    log(f"  {m}x{n}x{k}: " + ", ".join(f"{name} {r['tflops']:.1f}" for name, r in rows.items())
        + " TFLOP/s" + (f"; skipped {sorted(skipped)}" if skipped else ""))
    return {"shape": [m, n, k], "rows": rows, "skipped": skipped, "comparison": cmp.to_dict()}


def shapes(quick: bool = False) -> list[tuple[int, int, int]]:
    sq = SQUARE[:2] if quick else SQUARE
    return [(s, s, s) for s in sq] + list(NON_SQUARE[:1] if quick else NON_SQUARE)


# --------------------------------------------------------------------------------------------
# the whole run
# --------------------------------------------------------------------------------------------

# --------------------------------------------------------------------------------------------
# d. stalls
# --------------------------------------------------------------------------------------------

def stalls(size: int, log, tiles: dict | None = None, rungs=STALL_RUNGS) -> dict:
    """ncu's warp-stall breakdown of ``rungs`` at ``size``^3 (``tiles[rung]`` overrides a rung's
    tiles), with the shared-load wavefronts, one child ``profile`` run each."""
    def command_of(ncu_path, rung):
        t = (tiles or {}).get(rung)
        return ncu.command(ncu_path, f"sgemm_{rung}", "fraglab.register_reuse", "profile",
                           "--variant", rung, "--size", str(size),
                           *(["--tiles", json.dumps(t)] if t else []), metrics=ncu.SHARED_METRICS)
    res = ncu.stall_breakdown(rungs, command_of, log, metrics=ncu.SHARED_METRICS)
    return res if "skipped" in res else {"ncu": res.pop("ncu"), "size": size, **res}


def run(out: Path, quick: bool = False, seed: int = 0) -> dict:
    """Steps a-e into ``out`` (``results.json``, ``log.txt``); returns the results dict."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    log = Log(out / "log.txt")
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    results: dict = {"quick": quick, "seed": seed, "cublas_settings": kernels.cublas_settings(),
                     "tiles": kernels.TILES, "seed_figures": SEED}
    steps = [
        ("check", lambda: check(rng, log, 512 if quick else 1024)),
        ("sass", lambda: [sass_counts.report(k) for k in kernels.VARIANTS]),
        ("sweep", lambda: autotune(rng, log, space=sweep_space()[:6] if quick else None,
                                   size=2048 if quick else SWEEP_SIZE)),
        ("ladder", lambda: [ladder_at(rng, log, s, (results.get("sweep") or {}).get("best"))
                            for s in shapes(quick)]),
        ("stalls", lambda: stalls(2048 if quick else 4096, log,
                                  {"autotuned": (results.get("sweep") or {}).get("best")})),
    ]
    for name, step in steps:
        log.phase(name)
        try:
            results[name] = step()
        except Exception as exc:  # a failing step is recorded; the others still run
            results[name] = {"failure": f"{type(exc).__name__}: {exc}"[:1000]}
            log(f"  {name} FAILED: {results[name]['failure']}")
    if isinstance(results.get("sass"), list):
        log(sass_counts.table(results["sass"]))
    results["wall_s"] = time.perf_counter() - t0
    bench.save_results(out / "results.json", results)
    log.phase("summary")
    log(summary(results))
    return results


def summary(results: dict) -> str:
    """The ladder at each size: TFLOP/s and share of cuBLAS, one row per rung."""
    ladder = results.get("ladder")
    if not isinstance(ladder, list) or not ladder:
        return "no ladder results"
    names = ["cublas", *kernels.VARIANTS]
    heads = ["x".join(map(str, r["shape"])) for r in ladder]
    lines = report.text_grid("TFLOP/s (of cuBLAS)", heads, ladder, names,
                             lambda row: f"{row['tflops']:.1f} ({row['of_cublas']:.0%})")
    best = (results.get("sweep") or {}).get("best")
    if best:
        lines.append(f"autotuned tiles: {best}")
    return "\n".join(lines)
