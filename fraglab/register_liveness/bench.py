"""The H100 run of chapter 08 (``python -m fraglab.register_liveness bench --out DIR``).

One process, each step recorded even when it fails (its error is kept and the run goes on);
``DIR/results.json`` is rewritten after every step, ``DIR/log.txt`` keeps the lines:

a. **check**: every variant against float64 on fresh random inputs (outputs poisoned): d 64,
   128, 256, f16 and bf16, causal, ragged N, peaky softmax (:mod:`.problems`);
b. **resources**: registers, spills, LDL/STL, occupancy of every variant for this GPU
   (:mod:`.resources`), and the register-cap sweep's;
c. **throughput**: N = 4096, B*H = 32, f16, non-causal, d = 64/128/256: every variant, the
   d = 256 tiles of 64 keys, chapter 05's ``fa2`` (d <= 128) and SDPA's flash backend
   (:class:`fraglab.attention.Baselines`, on its one stream), interleaved by
   :func:`fraglab.bench.compare`;
c2. **d256**: d = 256 again, :data:`.rounds.KERNELS` with SDPA flash and SDPA cuDNN in one
   process, interleaved, the whole comparison repeated in :data:`.rounds.ROUNDS` rounds, each
   also without cuDNN; SM clock and power sampled over each (:mod:`.rounds`);
d. **causal**: the two-loop kernels against the single masked loop (and SDPA), causal;
e. **sweep**: ``--maxrregcount`` caps on ``qreg`` and ``qreload`` at d = 128 and 256, timed;
f. **triton**: the seed's setting where Triton is importable (:mod:`.triton_fa`): q loaded
   before the loops vs inside them, ``n_regs``/``n_spills`` and time, causal and not.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from .. import bench, device, report
from ..attention import Baselines, attention_flops, check_all
from ..attention.torch_sdpa import cupy_to_torch, rel_err
from ..progress import Log
from . import kernels, problems, resources, rounds

B, H, N = 4, 8, 4096
#: Cases of the check step (names in :func:`.problems.cases`).
CHECK_CASES = ("f16 d64 full", "bf16 d64 causal", "f16 d128 causal", "bf16 d128 full",
               "f16 d256 full", "f16 d256 causal", "bf16 d256 causal", "N=1 causal d256",
               "N=17 causal d128", "N=1000 causal d256", "N=513 peaky d256", "N=300 causal peaky d64")


def check(rng, log, quick: bool) -> list[dict]:
    """Every variant over :data:`CHECK_CASES` (every other one with ``quick``), each recorded."""
    names = CHECK_CASES[::2] if quick else CHECK_CASES
    return check_all({v: problems.PROBLEMS[v] for v in kernels.VARIANTS}, rng, log,
                     key="variant", cases=lambda p: names)


def _inputs(base: Baselines, d: int, dtype: str = "f16"):
    """q, k, v (B, H, N, d) as torch tensors (for SDPA and Triton; None without torch) and CuPy
    views of the same memory."""
    return base.inputs(np.random.default_rng(1), (B, H, N, d), dtype)


def _timed(cmp, flops: float) -> dict:
    base = cmp.baseline
    return {name: {"median_ms": t.median_ms, "p10_ms": t.p10_ms, "p90_ms": t.p90_ms,
                   "tflops": flops / (t.median_ms * 1e-3) / 1e12,
                   "of_baseline": cmp.timings[base].median_ms / t.median_ms}
            for name, t in cmp.timings.items()}


def throughput(d: int, causal: bool, names: list, ctx: dict, knobs: dict | None = None) -> dict:
    """Time ``names`` (variants, ``variant@knob=value`` entries, ``fa2``, ``sdpa_flash``) at
    N = 4096, B*H = 32, f16; returns the rows keyed by name, SDPA the baseline."""
    import cupy as cp
    base, stream = ctx["base"], ctx["stream"]
    ts, (q, k, v) = _inputs(base, d)
    runs, skipped, outs = {}, {}, {}
    for name in names:
        try:
            if name == "sdpa_flash":
                if ts is None or name not in base.sdpa:
                    raise RuntimeError(base.notes[name])
                runs[name] = base.sdpa_call(name, ts, causal)
                continue
            if name == "fa2":
                if name not in base.course:
                    raise RuntimeError(base.notes[name])
                run, out = base.course[name](q, k, v, causal=causal)
            else:
                variant, _, knob = name.partition("@")
                kw = dict(knobs or {})
                if knob:
                    key, val = knob.split("=")
                    kw[key] = int(val)
                run, out = kernels.attention_launcher(q, k, v, causal=causal, variant=variant, **kw)
            run()
            stream.synchronize()
            runs[name], outs[name] = run, out
        except Exception as exc:
            skipped[name] = f"{type(exc).__name__}: {exc}"[:300]
    if not runs:
        raise RuntimeError(f"nothing ran at d = {d}: {skipped}")
    base_name = "sdpa_flash" if "sdpa_flash" in runs else next(iter(runs))
    cmp = bench.compare(runs, progress=False, baseline=base_name, **ctx["rep"])
    rows = _timed(cmp, attention_flops(B, H, N, d, causal))
    if "sdpa_flash" in runs:                                # agreement with SDPA's output
        want = runs["sdpa_flash"]()
        stream.synchronize()
        for name, out in outs.items():
            rows[name]["rel_err_vs_sdpa"] = rel_err(cupy_to_torch(out, "f16"), want)
    del ts, q, k, v, outs
    cp.get_default_memory_pool().free_all_blocks()
    return {"d": d, "causal": causal, "N": N, "B": B, "H": H, "rows": rows, "skipped": skipped,
            "comparison": cmp.to_dict()}


def _line(res: dict) -> str:
    return (f"  d={res['d']} {'causal' if res['causal'] else 'full'}: " + ", ".join(
        f"{k} {r['tflops']:.0f}" for k, r in res["rows"].items()) + " TFLOP/s"
        + (f"; skipped {sorted(res['skipped'])}" if res["skipped"] else ""))


def throughput_names(d: int) -> list:
    names = list(kernels.VARIANTS)
    if d == 256:
        names += [f"{v}@bn=64" for v in ("qreg", "qreload", "qreload_oneloop")]
    else:
        names.append("fa2")
    return names + ["sdpa_flash"]


def d256_step(ctx: dict, log, quick: bool, pci_bus_id: str | None = None) -> dict:
    """Step c2 (:mod:`.rounds`): the course's d = 256 kernels, SDPA flash and SDPA cuDNN, in
    rounds with and without cuDNN; each output checked against SDPA flash's first."""
    base, stream = ctx["base"], ctx["stream"]
    ts, (q, k, v) = _inputs(base, rounds.D)
    runs, outs, skipped = {}, {}, {}
    for name in rounds.KERNELS:
        try:
            variant, _, knob = name.partition("@")
            kw = {key: int(val) for key, val in [knob.split("=")]} if knob else {}
            run, out = kernels.attention_launcher(q, k, v, causal=rounds.CAUSAL, variant=variant,
                                                  **kw)
            run()
            stream.synchronize()
            runs[name], outs[name] = run, out
        except Exception as exc:
            skipped[name] = f"{type(exc).__name__}: {exc}"[:300]
    runs.update(base.callables(ts, None, rounds.CAUSAL, skipped))   # SDPA flash and cuDNN
    flops = attention_flops(B, H, N, rounds.D, rounds.CAUSAL)
    log(f"  d256: {len(runs)} callables ({', '.join(runs)}), "
        f"{rounds.QUICK_ROUNDS if quick else rounds.ROUNDS} rounds x {len(rounds.CONDITIONS)} "
        "conditions" + (f"; skipped {skipped}" if skipped else ""))
    recs = rounds.run_rounds(runs, flops, rounds=rounds.QUICK_ROUNDS if quick else rounds.ROUNDS,
                             rep=rounds.QUICK_REP if quick else rounds.REP, log=log,
                             monitor=lambda: rounds.Monitor(pci_bus_id))
    rel = {}
    if rounds.FLASH in runs:                                # agreement with SDPA's output
        want = runs[rounds.FLASH]()
        stream.synchronize()
        rel = {name: rel_err(cupy_to_torch(out, "f16"), want) for name, out in outs.items()}
        if rounds.CUDNN in runs:
            got = runs[rounds.CUDNN]()
            stream.synchronize()
            rel[rounds.CUDNN] = rel_err(got, want)
    del ts, q, k, v, outs
    return {"d": rounds.D, "causal": rounds.CAUSAL, "N": N, "B": B, "H": H, "dtype": "f16",
            "kernels": list(rounds.KERNELS), "conditions": {c: list(b) for c, b in
                                                            rounds.CONDITIONS.items()},
            "rep": rounds.QUICK_REP if quick else rounds.REP, "skipped": skipped,
            "rel_err_vs_sdpa": rel, "rounds": recs, "spread": rounds.spread(recs)}


def triton_step(ctx: dict, log, quick: bool) -> dict:
    try:
        from . import triton_fa
    except Exception as exc:
        return {"skipped": f"Triton not importable: {type(exc).__name__}: {exc}"[:300]}
    base, stream = ctx["base"], ctx["stream"]
    if base.torch is None or "sdpa_flash" not in base.sdpa:
        return {"skipped": "torch (which the Triton kernels take) is missing: "
                + base.notes["sdpa_flash"]}
    out = {"version": triton_fa.triton.__version__, "tiles": triton_fa.TILES, "rows": []}
    for d in ((128,) if quick else (64, 128, 256)):
        for causal in (True, False):
            ts, _ = _inputs(base, d)
            runs, regs, outs = {}, {}, {}
            rec = {"d": d, "causal": causal}
            try:
                for where in ("q_before_loop", "q_in_loop"):
                    run, o, holder = triton_fa.launcher(*ts, causal=causal,
                                                        q_in_loop=where == "q_in_loop")
                    run()
                    stream.synchronize()
                    runs[where], outs[where], regs[where] = run, o, triton_fa.registers(holder)
                runs["sdpa_flash"] = base.sdpa_call("sdpa_flash", ts, causal)
                cmp = bench.compare(runs, progress=False, baseline="sdpa_flash", **ctx["rep"])
                rec.update(rows=_timed(cmp, attention_flops(B, H, N, d, causal)), registers=regs)
                want = runs["sdpa_flash"]()
                stream.synchronize()
                for where, o in outs.items():
                    rec["rows"][where]["rel_err_vs_sdpa"] = rel_err(o, want)
                log(f"  triton d={d} {'causal' if causal else 'full'}: " + ", ".join(
                    f"{w} {rec['rows'][w]['tflops']:.0f} TFLOP/s ({regs[w].get('n_regs')} regs, "
                    f"{regs[w].get('n_spills')} spills)" for w in regs))
            except Exception as exc:
                rec["failure"] = f"{type(exc).__name__}: {exc}"[:400]
                log(f"  triton d={d} causal={causal} FAILED: {rec['failure']}")
            out["rows"].append(rec)
            del ts, runs, outs
    return out


def run(out: Path, quick: bool = False, seed: int = 0) -> dict:
    """Steps a-f (c2 after c) into ``out`` (``results.json``, ``log.txt``); returns the results dict."""
    import cupy as cp
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    log = Log(out / "log.txt")
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    dev = bench.device_info()
    log(f"[08_register_liveness bench] {device.status_line()}")
    base = Baselines(backends=("sdpa_flash", "cudnn"), course=("fa2",))
    rep = dict(repeat=12, rounds=2, warmup=2) if quick else dict(repeat=30, rounds=3, warmup=3)
    arch = device.arch()
    results: dict = {"quick": quick, "seed": seed, "sdpa": base.notes["sdpa_flash"],
                     "cudnn": base.notes["cudnn"], "arch": arch,
                     "shape": [B, H, N],
                     "variants": list(kernels.VARIANTS), "bn": kernels.key_tiles(), "errors": {}}
    steps = [
        ("check", lambda: check(rng, log, quick)),
        ("resources", lambda: [resources.resources(v, d, "f16", arch, **kn)
                               for d in kernels.HEAD_DIMS for v in kernels.VARIANTS
                               for kn in ([{}, {"bn": 64}] if d == 256 else [{}])]),
        ("throughput", lambda: [throughput(d, False, throughput_names(d), ctx)
                                for d in kernels.HEAD_DIMS]),
        ("d256", lambda: d256_step(ctx, log, quick, dev.get("pci_bus_id"))),
        ("causal", lambda: [throughput(d, True, ["qreg", "qreg_oneloop", "qreload", "qreload_oneloop",
                                                 "sdpa_flash"], ctx)
                            for d in ((128, 256) if quick else kernels.HEAD_DIMS)]),
        ("sweep", lambda: sweep(ctx, arch, log, quick)),
        ("triton", lambda: triton_step(ctx, log, quick)),
    ]
    with base.stream() as stream:
        ctx = {"base": base, "stream": stream, "rep": rep}
        for name, step in steps:
            log.phase(name)
            try:
                results[name] = step()
                if name in ("throughput", "causal"):
                    for r in results[name]:
                        log(_line(r))
            except Exception as exc:
                results["errors"][name] = f"{type(exc).__name__}: {exc}"[:1000]
                log(f"  {name} FAILED: {results['errors'][name]}")
            results["wall_s"] = time.perf_counter() - t0
            bench.save_results(out / "results.json", results, device=dev)
            cp.get_default_memory_pool().free_all_blocks()
    log.phase("summary")
    log(summary(results))
    log(f"wrote {out / 'results.json'} ({results['wall_s']:.0f} s)")
    return results


def sweep(ctx: dict, arch: str, log, quick: bool) -> dict:
    """Resources and time of the register caps (:data:`.resources.SWEEP_CAPS`), f16, non-causal."""
    rows = [resources.resources(v, d, "f16", arch, maxrregcount=cap)
            for d in resources.SWEEP_DIMS for v in resources.SWEEP_VARIANTS
            for cap in resources.SWEEP_CAPS]
    timed = []
    for d in ((256,) if quick else resources.SWEEP_DIMS):
        names = [f"{v}@maxrregcount={c}" if c else v for v in resources.SWEEP_VARIANTS
                 for c in resources.SWEEP_CAPS] + ["sdpa_flash"]
        timed.append(throughput(d, False, names, ctx))
        log(_line(timed[-1]))
    return {"resources": rows, "timed": timed}


def summary(results: dict) -> str:
    """TFLOP/s and share of SDPA flash per variant and d (non-causal), then checks and the
    causal loops. Works on the loaded JSON too."""
    lines = []
    tp = results.get("throughput")
    if isinstance(tp, list) and tp:
        names = []
        for r in tp:
            names += [k for k in r["rows"] if k not in names]
        lines += report.text_grid("TFLOP/s (of SDPA)", [f"d={r['d']}" for r in tp], tp, names,
                                  lambda row: f"{row['tflops']:.0f} ({row['of_baseline']:.0%})",
                                  first=26, width=14)
    chk = results.get("check")
    if isinstance(chk, list):
        bad = sorted({f"{r['variant']}/{r['case']}" for r in chk if not r.get("ok")})
        lines.append(f"check: {len(chk) - len(bad)} of {len(chk)} pass" + (f"; FAIL {bad}" if bad else ""))
    lines += d256_lines(results.get("d256"))
    for r in results.get("causal") or []:
        lines.append(_line(r).strip())
    if results.get("errors"):
        lines.append(f"errors: {results['errors']}")
    return "\n".join(lines)


def d256_lines(res) -> list[str]:
    """The d = 256 rounds in the summary: per condition, min / median / max over the rounds of
    each kernel's ratio to SDPA flash and cuDNN, the SM clock and the power."""
    if not isinstance(res, dict) or not res.get("spread"):
        return []
    lines = []
    for cond, sp in res["spread"].items():
        def mmm(x, f="{:.2f}"):
            return "n/a" if not x.get("n") else "/".join(f.format(x[k]) for k in
                                                         ("min", "median", "max"))
        lines.append(f"d=256, {sp['rounds']} rounds {cond} (min/median/max): SM "
                     f"{mmm(sp['sm_mhz'], '{:.0f}')} MHz, {mmm(sp['power_w'], '{:.0f}')} W")
        for key, x in sp["ratios"].items():
            if key.split("/")[0] in rounds.KERNELS or key == "sdpa_flash/cudnn":
                lines.append(f"  {key:<34} {mmm(x)}")
    return lines
