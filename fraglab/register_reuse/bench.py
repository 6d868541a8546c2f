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

Rung 10's shape table is its own run (``sweep-shapes``, :func:`sweep_shapes`): per shape of
:data:`kernels.TABLE_SHAPES`, the wave model's best (tiles, split) candidates, each checked
against cuBLAS, then timed interleaved with cuBLAS, short for all and long for the finalists
(with rung 9 and the other block order beside them), into ``DIR/shape_table.json``.
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
from . import kernels, problems, sass_counts, switches
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
        elif variant == "split_k":                 # any M and N; K, N multiples of 4
            cases.append(p.case("ragged_split"))
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
    if "split_k" in rows:                       # what rung 10 ran with: its shape table's pick
        rows["split_k"]["tiles"] = kernels.tiles_for(m, n, k)
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
                     "tiles": kernels.TILES, "seed_figures": SEED,
                     "shape_table": kernels.shape_table()}   # rung 10's tiles per shape
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


# --------------------------------------------------------------------------------------------
# rung 10's shape table (``python -m fraglab.register_reuse sweep-shapes``)
# --------------------------------------------------------------------------------------------

#: Candidates the wave model keeps per shape (rung 9's tiles, unsplit, are always timed too),
#: and how many of them the second, longer round confirms.
SHAPE_TOP, SHAPE_FINALISTS = 8, 3
#: Tiles per shape that the switches (:data:`switches.TRIALS`) are tried on.
SWITCH_BASES = 2
#: The quick (CPU smoke) mode's shape: small enough for the PTX interpreter (ragged: GUARD = 1).
QUICK_SHAPES = ((36, 40, 20),)


def shape_candidates(m: int, n: int, k: int, top: int = SHAPE_TOP,
                     switch_bases: int = SWITCH_BASES, switch_trials: int = 99) -> list[dict]:
    """The (tiles, split) pairs timed at M x N x K: every :data:`kernels.SHAPE_CONFIGS` x
    :data:`kernels.SPLITS` pair (slices of at least 4 BK steps) ranked by the wave model, the
    best ``top`` kept, and rung 9's tiles unsplit (the reference) added; then the first
    ``switch_trials`` of :data:`switches.TRIALS` that apply (:func:`switches.switch_variants`)
    on ``switch_bases`` distinct tiles: the shape table's pick (:func:`kernels.tiles_for`), then
    the model's best (the wave model cannot rank switches: the H100 does)."""
    ranked = []
    for t, prior in zip(kernels.SHAPE_CONFIGS, kernels.PRIOR_TFLOPS):
        for split in kernels.SPLITS:
            splits, k_split = kernels.split_plan(k, t["BK"], split)
            if splits != split or (split > 1 and k_split < 4 * t["BK"]):
                continue
            ranked.append((kernels.wave_model(m, n, k, t, split, prior), {**t, "SPLIT": split}))
    ranked.sort(key=lambda r: r[0])
    # Every candidate names its switches (all off here): tiles_for would otherwise hand each one
    # the switches of the table's entry, once the measured table has picked some.
    off = {s: 0 for s in kernels.SWITCHES}
    out = [kernels.tiles_for(m, n, k, **{**off, **t}) for _, t in ranked[:top]]
    ref = kernels.tiles_for(m, n, k, **{**off, **kernels.TILES["autotuned"], "SPLIT": 1})
    out += [ref] if ref not in out else []
    bases: list[dict] = []                   # the switches on the table's pick, the model's best
    for t in [kernels.tiles_for(m, n, k, **off), *out]:
        if len(bases) < switch_bases and all(_tile_shape(t) != _tile_shape(b) for b in bases):
            bases.append(t)
    for t in bases:
        out += [v for v in switches.switch_variants(t, switches.TRIALS[:switch_trials])
                if v not in out]
    return out


def _tile_shape(t: dict) -> tuple:
    return tuple(t[x] for x in ("BM", "BN", "BK", "WM", "WN", "LM"))


def _cand_options(quick: bool) -> dict:
    """The quick mode's candidates: the best two tiles, one switch trial (REGDB) on the best."""
    return dict(top=2, switch_bases=1, switch_trials=1) if quick else {}


def _precompile(defines: list[dict], arch: str, log) -> dict[str, dict]:
    """Compile rung 10 with each set of ``defines`` (in parallel processes: NVRTC takes seconds
    per build; the disk cache hands the builds to this process), then read each build's registers
    and spills here. Returns {label: {"registers", "spill_bytes"} or {"failure"}}."""
    import concurrent.futures as cf
    import multiprocessing as mp
    import os
    todo = [d for i, d in enumerate(defines) if d not in defines[:i]]
    workers = max(1, min(len(todo), (os.cpu_count() or 2) - 1, 12))
    if workers > 1:
        with cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
            list(pool.map(_compile_one, [(d, arch) for d in todo]))
    out = {}
    for d in todo:
        key = _build_key(d)
        try:
            res = kernels.build("split_k", arch, **d).resources["sgemm_split_k"]
            out[key] = {"registers": res["registers"],
                        "spill_bytes": res["spill_stores"] + res["spill_loads"]}
        except Exception as exc:
            out[key] = {"failure": f"{type(exc).__name__}: {exc}"[:300]}
    log(f"  {len(todo)} builds of split_k for {arch}: " + ", ".join(
        f"{k} {v.get('registers', 'FAILED')}r" + (f" SPILLS {v['spill_bytes']}B" if v.get("spill_bytes") else "")
        for k, v in out.items()))
    return out


def _build_key(t: dict) -> str:
    """A build's name: its defines (SPLIT is a launch parameter), GUARD as U0/U1."""
    return kernels.config_label(kernels.defines(t)) + f" U{t['GUARD']}"


def _compile_one(job) -> None:
    d, arch = job
    try:
        kernels.build("split_k", arch, **d)
    except Exception:
        pass                                   # reported by the parent's own build


def _scaled_diff(c, ref, a, b) -> float:
    """max |C - C_ref| / (|A| @ |B|) on the device (GPU or NumPy), C_ref by cuBLAS: both FP32."""
    xp = np
    if type(c).__module__.startswith("cupy"):
        import cupy as xp
    scale = xp.abs(a) @ xp.abs(b)
    d = xp.abs(c.astype(xp.float64) - ref) / xp.maximum(scale.astype(xp.float64), 1e-300)
    return float(xp.where(xp.isnan(d), xp.inf, d).max())


def _host_timer(fn, n, flush_l2):
    """Wall-clock milliseconds of ``n`` calls: the quick mode's timer on the interpreter (no GPU
    events there; these numbers measure the interpreter, nothing else)."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def _repeats(m: int, n: int, k: int, budget_ms: float, lo: int, hi: int) -> int:
    est_ms = flops(m, n, k) / 45e9            # ~45 TFLOP/s
    return int(min(hi, max(lo, budget_ms / est_ms)))


def sweep_shape(rng, log, shape, builds: dict, *, quick: bool = False, _timer=None) -> dict:
    """One shape: the candidates (:func:`shape_candidates`) checked against cuBLAS, then timed
    interleaved with cuBLAS twice (a short round for all, a long one for the best
    :data:`SHAPE_FINALISTS`, rung 9 and the winner with the other block order GROUP)."""
    m, n, k = shape
    a, b = _random(rng, m, k), _random(rng, k, n)
    base = kernels.cublas if _timer is None else (lambda x, y: x @ y)
    ref = base(a, b).astype(np.float64)
    runs, cands = {"cublas": lambda: base(a, b)}, []
    for t in shape_candidates(m, n, k, **_cand_options(quick)):
        rec = {"tiles": t, "label": kernels.config_label(t), "build": builds.get(_build_key(t))}
        cands.append(rec)
        if (rec["build"] or {}).get("spill_bytes") or "failure" in (rec["build"] or {}):
            rec["skipped"] = "spills or does not compile"
            continue
        try:
            run, c = kernels.sgemm_launcher(a, b, "split_k", **t)
            run()
            rec["scaled_diff"] = _scaled_diff(c, ref, a, b)
            if not rec["scaled_diff"] <= 8 * k * 2.0 ** -24:
                rec["skipped"] = f"WRONG: scaled difference {rec['scaled_diff']:.2e} from cuBLAS"
                log(f"  {rec['label']}: {rec['skipped']}")
                continue
            runs[rec["label"]] = run
        except Exception as exc:
            rec["skipped"] = f"{type(exc).__name__}: {exc}"[:300]
    r1 = 1 if quick else _repeats(m, n, k, 300, 6, 100)
    cmp1 = bench.compare(runs, baseline="cublas", warmup=0 if quick else 2, repeat=r1,
                         rounds=min(5, r1), progress=False, _timer=_timer)
    ratio1 = cmp1.ratios()
    for rec in cands:
        if rec["label"] in ratio1:
            rec["short"] = {"median_ms": cmp1.timings[rec["label"]].median_ms,
                            "of_cublas": ratio1[rec["label"]]}
    timed = sorted((r for r in cands if "short" in r), key=lambda r: -r["short"]["of_cublas"])
    if not timed:
        raise RuntimeError(f"no candidate ran at {m}x{n}x{k}: "
                           + "; ".join(f"{r['label']}: {r.get('skipped')}" for r in cands))
    final = {"cublas": runs["cublas"], **{r["label"]: runs[r["label"]]
                                          for r in timed[:SHAPE_FINALISTS]}}
    lead = timed[0]["tiles"]
    other = {**lead, "GROUP": 1 if lead["GROUP"] > 1 else 8}     # the L2 block-order switch
    extra = {kernels.config_label(other): ("split_k", other)}
    if kernels.whole_tiles(m, n, k, kernels.TILES["autotuned"]):
        extra["rung 9 (autotuned)"] = ("autotuned", {})
    for label, (variant, over) in extra.items():
        if label in final:
            continue
        try:
            run, c = kernels.sgemm_launcher(a, b, variant, **over)
            run()
            if _scaled_diff(c, ref, a, b) <= 8 * k * 2.0 ** -24:
                final[label] = run
        except Exception as exc:
            log(f"  {label}: {type(exc).__name__}: {exc}"[:200])
    r2 = 1 if quick else _repeats(m, n, k, 1000, 10, 300)
    cmp2 = bench.compare(final, baseline="cublas", warmup=0 if quick else 3, repeat=r2,
                         rounds=min(5, r2), progress=False, _timer=_timer)
    ratio2 = cmp2.ratios()
    tiles_of = {**{r["label"]: r["tiles"] for r in timed}, kernels.config_label(other): other}
    best = max((x for x in ratio2 if x in tiles_of), key=lambda x: ratio2[x])
    t_best, cub = cmp2.timings[best], cmp2.timings["cublas"]
    entry = {"shape": [m, n, k], "tiles": {x: v for x, v in tiles_of[best].items()
                                           if x != "GUARD" and (v or x not in kernels.SWITCHES)},
             "label": best, "measured": _timer is None, "median_ms": t_best.median_ms,
             "tflops": flops(m, n, k) / t_best.median_ms / 1e9, "of_cublas": ratio2[best],
             "cublas_ms": cub.median_ms, "cublas_tflops": flops(m, n, k) / cub.median_ms / 1e9,
             "autotuned_of_cublas": ratio2.get("rung 9 (autotuned)")}
    log(f"  {m}x{n}x{k}: {best}  {entry['tflops']:.1f} TFLOP/s = {entry['of_cublas']:.2f}x cuBLAS"
        f" ({cub.median_ms:.4f} ms)" + (f"; rung 9 {entry['autotuned_of_cublas']:.2f}x"
                                        if entry["autotuned_of_cublas"] else ""))
    return {"entry": entry, "candidates": cands, "short": cmp1.to_dict(), "long": cmp2.to_dict()}


def sweep_shapes(out: Path, quick: bool = False, seed: int = 0, shapes_=None, _timer=None) -> dict:
    """Rung 10's table: each shape of :data:`kernels.TABLE_SHAPES` swept (:func:`sweep_shape`),
    into ``out/shape_table.json`` (a :func:`fraglab.bench.save_results` record whose ``results``
    :func:`kernels.shape_table` reads) and ``out/shape_log.txt``. ``quick``: one tiny shape,
    two candidates, the interpreter's wall clock where there is no GPU (a smoke test of the
    pipeline: ``measured`` stays false). On an H100 the full run takes about 2-4 minutes."""
    from .. import device
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    log = Log(out / "shape_log.txt")
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    gpu = device.gpu_available()
    if not gpu and _timer is None:
        _timer = _host_timer
    shape_list = list(shapes_ or (QUICK_SHAPES if quick else kernels.TABLE_SHAPES))
    arch = device.arch() if gpu else "sm_90"
    log.phase(f"compile ({arch})")
    cand = {tuple(s): shape_candidates(*s, **_cand_options(quick)) for s in shape_list}
    defs = [kernels.defines(t) for ts in cand.values() for t in ts]
    defs += [{**d, "GROUP": 1 if d["GROUP"] > 1 else 8} for d in defs]
    builds = _precompile(defs, arch, log)
    rows, bar = [], Progress(len(shape_list))
    for i, s in enumerate(shape_list, 1):
        log.phase("x".join(map(str, s)))
        try:
            rows.append(sweep_shape(rng, log, s, builds, quick=quick, _timer=_timer))
        except Exception as exc:
            rows.append({"shape": list(s), "failure": f"{type(exc).__name__}: {exc}"[:1000]})
            log(f"  FAILED: {rows[-1]['failure']}")
        bar.show(i, f"{'x'.join(map(str, s))} done ({time.perf_counter() - t0:.0f} s)")
    bar.close()
    measured = _timer is None
    results = {"measured": measured, "quick": quick, "seed": seed,
               "status": ("measured by python -m fraglab.register_reuse sweep-shapes" if measured
                          else "unmeasured: a smoke run on the interpreter (wall clock)"),
               "sm_count": kernels.H100_SMS, "cublas_settings": kernels.cublas_settings(),
               "entries": [r["entry"] for r in rows if "entry" in r], "builds": builds,
               "sweep": rows, "wall_s": time.perf_counter() - t0}
    bench.save_results(out / "shape_table.json", results,
                       device=None if gpu else {"name": "no GPU (interpreter)", "sm_count": None})
    log.phase("summary")
    log(shape_summary(results))
    return results


def write_seed_table(path=kernels.SHAPE_TABLE) -> dict:
    """The wave model's table (:func:`kernels.seed_entry` for each shape), marked unmeasured:
    what rung 10 uses until an H100 sweep replaces it."""
    results = {"measured": False,
               "status": "unmeasured: the wave model's picks (kernels.seed_entry), to be replaced "
                         "by python -m fraglab.register_reuse sweep-shapes on the H100",
               "sm_count": kernels.H100_SMS,
               "entries": [kernels.seed_entry(*s) for s in kernels.TABLE_SHAPES]}
    bench.save_results(path, results, device={"name": "unmeasured (wave model)",
                                              "sm_count": kernels.H100_SMS})
    return results


def shape_summary(results: dict) -> str:
    """One line per shape: the pick, its TFLOP/s and share of cuBLAS, rung 9's share."""
    lines = [f"{'shape':<18} {'pick':<30} {'ms':>9} {'TFLOP/s':>8} {'x cuBLAS':>9} {'rung 9':>7}"]
    for e in results.get("entries") or []:
        r9 = e.get("autotuned_of_cublas")
        lines.append(f"{'x'.join(map(str, e['shape'])):<18} {e['label']:<30} "
                     f"{e.get('median_ms', float('nan')):>9.4f} {e.get('tflops', float('nan')):>8.1f} "
                     f"{e.get('of_cublas', float('nan')):>9.2f} " + (f"{r9:>7.2f}" if r9 else f"{'-':>7}"))
    for r in results.get("sweep") or []:
        if "failure" in r:
            lines.append(f"{'x'.join(map(str, r['shape'])):<18} FAILED: {r['failure'][:80]}")
    return "\n".join(lines)
