"""The H100 run of the instruction diet (``python -m fraglab.instruction_diet bench --out DIR``).

One process, sections in this order; each is recorded in ``DIR/results.json`` as soon as it
ends (a failing one records its error and the run goes on), the log in ``DIR/log.txt``:

a. ``check``: every variant against float64 on fresh inputs (outputs poisoned): ragged N, causal,
   bf16, peaky softmax, N = 1 (:data:`CHECK_CASES` of :data:`.problems.PROBLEMS`), pass/fail
   and relative error per variant and case (recorded under the key ``step``);
b. ``sass``: the class counts of every variant (sm_90, f16, d = 64 and 128; :mod:`.classes`);
c. ``headline``: every variant, SDPA's flash backend and cuDNN's SDPA, interleaved by
   :func:`fraglab.bench.compare`, at N = 4096, d = 128, f16, B*H = 32, non-causal and causal;
d. ``sweep``: the same for N in 1k .. 16k, d 64 and 128, causal and not (every variant, so
   the chapter can show where each one pays), with the final variant's error against SDPA's output;
e. ``stalls``: Nsight Compute's warp-stall reasons of :data:`STALL_VARIANTS` (when ``ncu`` is
   there), through :mod:`fraglab.ncu`, in child processes;
f. ``sanitizer``: compute-sanitizer's memcheck and racecheck over every variant (N = 200, causal).

About 2-3 minutes on an H100 (``--quick``: less than one).
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from .. import bench as timing
from .. import child, device, ncu, tools
from ..attention import Baselines, attention_flops, check_all, random_qkv
from ..attention.torch_sdpa import cupy_to_torch, rel_err
from ..progress import Log
from . import classes
from .kernels import FINAL, VARIANTS, attention_launcher, kernel_name

B, H = 4, 8                                     # B * H = 32 heads
SIZES = (1024, 2048, 4096, 8192, 16384)
HEADLINE_N = 4096
#: Cases of every variant's check on the GPU (names in :data:`.problems.CASES`).
CHECK_CASES = ("f16 d64 full N=200", "f16 d128 causal N=200", "bf16 d128 full N=200",
               "bf16 d64 causal N=1024", "f16 d128 full N=1024", "N=1", "N=1 causal",
               "N=1000 causal peaky", "N=513 peaky bf16", "scale 0.5")
#: Variants whose warp stalls ncu breaks down: the start, skip_rescale (its vote and branch: the
#: seed's kernel-10 question) and the final variant (row sums by HMMA; at N = 4096 its 32-row kernel).
STALL_VARIANTS = ("fa2", "skip_rescale", FINAL)
BASELINES = ("sdpa_flash", "cudnn")


def _rep(n: int, quick: bool) -> dict:
    """Repeats by size: long calls need fewer."""
    if quick:
        return dict(warmup=2, repeat=6, rounds=2)
    return dict(warmup=5, repeat=50, rounds=5) if n <= 4096 else dict(warmup=3, repeat=20, rounds=4)


# --------------------------------------------------------------------------------------------
# a. correctness
# --------------------------------------------------------------------------------------------

def check(rng, log) -> list[dict]:
    """Every variant over :data:`CHECK_CASES`, each result recorded (never stopping) under the
    key ``step``: the committed H100 record's name for it, kept."""
    from .problems import PROBLEMS
    return check_all({v: PROBLEMS[v] for v in VARIANTS}, rng, log, key="step",
                     cases=lambda p: CHECK_CASES)


# --------------------------------------------------------------------------------------------
# c, d. timing beside SDPA
# --------------------------------------------------------------------------------------------

def timed(base: Baselines, rng, n: int, d: int, causal: bool, variants, quick: bool, log,
          dtype: str = "f16") -> dict:
    """Every variant of ``variants`` and the baselines (SDPA's flash and cuDNN backends, on
    :class:`fraglab.attention.Baselines`' one stream), interleaved, at (B, H, n, d)."""
    import cupy as cp
    shape = (B, H, n, d)
    rec = {"N": n, "d": d, "causal": causal, "dtype": dtype, "B": B, "H": H,
           "flops": attention_flops(B, H, n, d, causal)}
    ts, (q, k, v) = base.inputs(rng, shape, dtype)
    runs, outs, skipped = {}, {}, {}
    for variant in variants:
        try:
            run, out = attention_launcher(q, k, v, causal=causal, variant=variant)
            run()
            cp.cuda.get_current_stream().synchronize()   # a launch error shows here
            runs[variant], outs[variant] = run, out
        except Exception as exc:
            skipped[variant] = f"{type(exc).__name__}: {exc}"[:300]
    refused: dict = {}
    bl = base.callables(ts, None, causal, refused)
    base.notes.update({f"{name} refused": why for name, why in refused.items()})
    if "sdpa_flash" in bl and outs:
        want = bl["sdpa_flash"]()
        rec["rel_err_vs_sdpa"] = {variant: rel_err(cupy_to_torch(out, dtype), want)
                                  for variant, out in outs.items()}
        del want
    runs.update(bl)
    c = timing.compare(runs, baseline="sdpa_flash" if "sdpa_flash" in runs else None,
                       progress=False, **_rep(n, quick))
    rec["median_ms"] = {k: t.median_ms for k, t in c.timings.items()}
    rec["tflops"] = {k: rec["flops"] / (t.median_ms * 1e-3) / 1e12 for k, t in c.timings.items()}
    if "sdpa_flash" in rec["tflops"]:
        rec["of_sdpa"] = {k: v / rec["tflops"]["sdpa_flash"] for k, v in rec["tflops"].items()}
    rec["comparison"] = c.to_dict()
    rec["skipped"] = skipped
    tf = rec["tflops"]
    log(f"  N={n:<5} d={d:<3} {'causal' if causal else 'full  '} "
        + " ".join(f"{k} {tf[k]:.0f}" for k in tf) + " TFLOP/s"
        + (f"; skipped {sorted(skipped)}" if skipped else ""))
    del ts, q, k, v, runs, outs
    cp.get_default_memory_pool().free_all_blocks()
    return rec


def sweep_configs(quick: bool = False) -> list[tuple[int, int, bool]]:
    sizes = (1024, 4096) if quick else SIZES
    return [(n, d, c) for n in sizes for d in (64, 128) for c in (False, True)]


# --------------------------------------------------------------------------------------------
# e. stalls
# --------------------------------------------------------------------------------------------

def stall_command(ncu_path, variant: str, n: int = HEADLINE_N, d: int = 128) -> list[str]:
    """ncu on the second launch of ``variant`` in a child ``profile`` run (the first loads it)."""
    return ncu.command(ncu_path, kernel_name(variant, "f16", d), "fraglab.instruction_diet",
                       "profile", "--variant", variant, "--n", str(n), "--d", str(d))


def stalls(log, variants=STALL_VARIANTS, n: int = HEADLINE_N, budget_s: float = 120.0) -> dict:
    """ncu's stall reasons of each variant (child processes, :func:`fraglab.ncu.stall_breakdown`);
    variants left when ``budget_s`` is spent are recorded as skipped."""
    res = ncu.stall_breakdown(variants, lambda path, v: stall_command(path, v, n), log,
                              timeout_s=90.0, budget_s=budget_s)
    return res if "skipped" in res else {"ncu": res.pop("ncu"), "N": n, "d": 128, **res}


def profile(variant: str, n: int, d: int, causal: bool = False, heads: int = B * H) -> None:
    """Run ``variant`` (or every variant: ``all``) twice at (1, heads, n, d), f16 (the child that ncu
    or compute-sanitizer watches)."""
    import cupy as cp
    raw, _ = random_qkv(np.random.default_rng(0), (1, heads, n, d), "f16")
    q, k, v = (cp.asarray(a) for a in raw)
    for name in (VARIANTS if variant == "all" else (variant,)):
        run, _ = attention_launcher(q, k, v, variant=name, causal=causal)
        for _ in range(2):
            run()
    cp.cuda.get_current_stream().synchronize()


#: compute-sanitizer tools run over every variant (one child each), ragged N, causal, both d.
SANITIZERS = ("memcheck", "racecheck")


def sanitize(log, budget_s: float = 100.0) -> dict:
    """compute-sanitizer's verdict on every variant (N = 200, causal, d = 64 and 128), one child per
    tool and head dimension, within ``budget_s``."""
    path = tools.find_tool("compute-sanitizer", required=False)
    if path is None:
        log("  compute-sanitizer not found: skipped")
        return {"skipped": "compute-sanitizer not found on this machine"}
    out, t0 = {"tool": str(path)}, time.perf_counter()
    for tool in SANITIZERS:
        for d in (64, 128):
            key = f"{tool} d{d}"
            left = budget_s - (time.perf_counter() - t0)
            if left < 15:
                out[key] = {"skipped": f"the section's {budget_s:.0f} s were spent"}
                continue
            cmd = [str(path), "--tool", tool, "--error-exitcode", "3",
                   *child.python_command("fraglab.instruction_diet", "profile", "--variant", "all",
                                         "--n", "200", "--d", str(d), "--causal", "--heads", "2")]
            try:
                r = child.run(cmd, timeout_s=min(60.0, left), check=False)
                summary_line = [ln for ln in (r.stdout + r.stderr).splitlines() if "ERROR SUMMARY" in ln]
                out[key] = {"returncode": r.returncode, "clean": r.returncode == 0,
                            "summary": summary_line[-1] if summary_line else child.tail(r, 3),
                            "wall_s": r.wall_s}
            except Exception as exc:          # a timeout says nothing about errors
                out[key] = {"clean": None, "failure": f"{type(exc).__name__}: {exc}"[:500]}
            verdict = {True: "clean", False: "NOT clean", None: "incomplete"}[out[key]["clean"]]
            log(f"  {key}: {verdict}" + ("" if out[key]["clean"] else f" {out[key]}"[:300]))
    return out


# --------------------------------------------------------------------------------------------
# the whole run
# --------------------------------------------------------------------------------------------

def run(out, quick: bool = False, seed: int = 0, stall: bool = True) -> dict:
    """Sections a-e into ``out`` (``results.json``, ``log.txt``); returns the results."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    log = Log(out / "log.txt")
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    log(f"[09_instruction_diet bench] {device.status_line()}")
    dev = timing.device_info()
    # "steps": the committed H100 record's key for the variants, kept
    results: dict = {"quick": quick, "seed": seed, "steps": list(VARIANTS), "final": FINAL,
                     "B": B, "H": H, "failures": {}}

    def save():
        results["wall_s"] = time.perf_counter() - t0
        timing.save_results(out / "results.json", results, device=dev)

    base: list = []

    def headline():
        base.append(Baselines(log))
        results["baselines"] = base[0].notes
        rows = []
        with base[0].stream():
            for c in (False, True):
                try:
                    rows.append(timed(base[0], rng, HEADLINE_N, 128, c, VARIANTS, quick, log))
                except Exception as exc:              # the other mode still runs
                    results["failures"][f"headline causal={c}"] = f"{type(exc).__name__}: {exc}"[:500]
                    log(f"  headline causal={c} FAILED: {exc}")
        return rows

    def sweep():
        b = base[0] if base else Baselines(log)
        rows = []
        with b.stream():
            for n, d, c in sweep_configs(quick):
                if (n, d) == (HEADLINE_N, 128):
                    continue                          # measured in the headline section
                try:
                    rows.append(timed(b, rng, n, d, c, VARIANTS, quick, log))
                except Exception as exc:              # one size failing does not stop the rest
                    results["failures"][f"sweep N={n} d={d} causal={c}"] = f"{type(exc).__name__}: {exc}"[:500]
                    log(f"  N={n} d={d} causal={c} FAILED: {exc}")
                results["sweep"] = rows
                save()
        return rows

    sections = [("check", lambda: check(rng, log)),
                ("sass", lambda: {f"d{d}": classes.ladder("f16", d, "sm_90") for d in (64, 128)}),
                ("headline", headline), ("sweep", sweep)]
    if stall and not quick:
        sections.append(("stalls", lambda: stalls(log)))
        sections.append(("sanitizer", lambda: sanitize(
            log, budget_s=min(100.0, 330.0 - (time.perf_counter() - t0)))))
    for name, fn in sections:
        log.phase(name)
        try:
            results[name] = fn()
        except Exception as exc:
            results["failures"][name] = f"{type(exc).__name__}: {exc}"[:1000]
            log(f"  {name} FAILED: {results['failures'][name]}")
        save()
    log.phase("summary")
    log(summary(results))
    log(f"wrote {out / 'results.json'} ({time.perf_counter() - t0:.0f} s)")
    return results


def summary(results: dict) -> str:
    """The headline (N = 4096, d = 128) per variant: TFLOP/s and share of SDPA flash; then the
    final variant over the sweep."""
    lines = []
    for rec in results.get("headline") or []:
        tf, of = rec.get("tflops", {}), rec.get("of_sdpa", {})
        lines.append(f"N={rec['N']} d={rec['d']} {'causal' if rec['causal'] else 'non-causal'}: "
                     "TFLOP/s (of SDPA flash)")
        for k, v in tf.items():
            lines.append(f"  {k:<16} {v:7.1f}" + (f"  ({of[k]:.2f}x)" if k in of else ""))
    rows = results.get("sweep") or []
    if rows:
        lines.append(f"{FINAL} over the sweep (x SDPA flash / x cuDNN):")
        for rec in rows:
            tf = rec.get("tflops", {})
            if FINAL not in tf:
                continue
            r = [f"{tf[FINAL] / tf[b]:.2f}" if b in tf else "-" for b in BASELINES]
            lines.append(f"  N={rec['N']:<5} d={rec['d']:<3} {'causal' if rec['causal'] else 'full  '}"
                         f" {tf[FINAL]:7.1f} TFLOP/s  {r[0]} / {r[1]}")
    checks = results.get("check")
    if isinstance(checks, list):
        bad = [f"{r['step']}:{r['case']}" for r in checks if not r.get("ok")]   # the record's key
        lines.append("check: " + ("all pass" if not bad else "FAILED " + ", ".join(bad)))
    return "\n".join(lines) or "no results"
