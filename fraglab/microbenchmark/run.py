"""``python -m fraglab.microbenchmark all``: every measurement, in an order that keeps this process
free of a CUDA context while the fresh-process measurements run, into one record."""
from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from ..progress import Log
from ..stats import summary
from .build_report import build_report, clock_bracket, write_cubin
from .kernels import DTYPES, VARIANTS, launcher, random_inputs
from .ncu import occupancy_table, run_ncu
from .power import relaunch_power, sustained_power
from .problems import check_correctness
from .processes import device_info_in_child, run_processes
from .record import compact
from .report import findings, format_table, reproduce_table
from .setups import SETUPS
from .warm import epilogue_cycles, fill_tiles, warm_compare

#: Seconds of each power loop: (relaunch loop per kernel, sustained loop per load, idle), for a
#: full run and for ``--quick``.
POWER_S = {"full": (6.0, 4.0, 2.0), "quick": (3.0, 1.0, 1.0)}

#: What ``all`` does by default and roughly how long each part takes on an H100 (seconds).
PLAN = {"setup": 15, "paper_way": 110, "power_relaunch": 14, "ncu": 30, "check": 5, "warm": 25,
        "cycles": 5, "power_sustained": 20}


def _setup(doc: dict, log: Log) -> tuple[dict, str]:
    log.phase("setup: the GPU (from a child process) and the build")
    info = device_info_in_child()
    arch = "sm_" + info["compute_capability"].replace(".", "")
    log(f"  {info['name']} ({arch}), driver {info['driver_version']}, CUDA runtime "
        f"{info['cuda_runtime']}, NVRTC {info['nvrtc_version']}, CuPy {info['cupy_version']}")
    doc["device_before"] = info
    doc["build"] = {a: build_report(a) for a in dict.fromkeys((arch, "sm_90", "sm_120"))}
    doc["clock_bracket"] = {a: {w: {k: v for k, v in clock_bracket(a, w).items() if k != "listing"}
                                for w in VARIANTS} for a in dict.fromkeys((arch, "sm_90"))}
    for w, r in doc["build"][arch]["ways"].items():
        log(f"  {w}: {r['registers']} registers, {r['smem_bytes']} B shared, {r['barriers']} "
            f"barrier(s), {r['opcodes']['STS']} STS / {r['opcodes']['LDS']} LDS / "
            f"{r['opcodes']['SHFL']} SHFL")
    return info, arch


def _fresh_processes(doc: dict, log: Log, info: dict, arch: str, *, processes: int,
                     paper_budget_s: float, ncu: bool, power: bool, speed: str) -> None:
    """Everything that runs in child processes: the paper's way, its power loop, ncu."""
    tmp = Path(tempfile.mkdtemp(prefix="fraglab04_"))
    try:
        cubin = write_cubin(arch, tmp)
        log.phase(f"the paper's way: {processes} fresh processes per variant, interleaved")
        doc["paper_way"] = run_processes(SETUPS, processes, cubin=cubin, log=log,
                                         budget_s=paper_budget_s)
        for name, v in doc["paper_way"]["variants"].items():
            s = v["summary"]
            if s.get("n"):
                log(f"  {name:11} n={s['n']:3}  baseline {s['first_ms']['smem']['mean']:.4f} ms, "
                    f"in-register {s['first_ms']['regs']['mean']:.4f} ms (means): "
                    f"{s['speedup_of_means']:.2f}x  (loading mode {s['loading_mode_reported']})")
        if power:
            log.phase("power, the paper's way: a process relaunch loop per kernel")
            try:
                doc["power_relaunch"] = relaunch_power(cubin, POWER_S[speed][0],
                                                       pci_bus_id=info.get("pci_bus_id"), log=log)
            except RuntimeError as e:
                doc["power_relaunch"] = {"error": str(e)}
                log(f"  not measured: {e}")
        if ncu:
            log.phase("occupancy: Nsight Compute on a small driver process")
            sms = info["sm_count"]
            tiles = (2048, fill_tiles(sms), fill_tiles(sms, 8))
            doc["ncu"] = run_ncu(cubin, "bf16", tiles)
            doc["ncu"]["tiles"] = list(tiles)
            if doc["ncu"]["ok"]:
                for r in occupancy_table(doc["ncu"]):
                    log(f"  {r['kernel']:16} {str(r['tiles']):>6} tiles: achieved {r['achieved_pct']}% "
                        f"(theoretical {r['theoretical_pct']}%, block limit {r['limit_blocks']}, "
                        f"register limit {r['limit_registers']})")
            else:
                log(f"  not measured: {doc['ncu']['error']}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _correctness(doc: dict, log: Log, rng) -> None:
    log.phase("correctness (both dtypes, 1 and 1009 tiles, all four kernels each)")
    checks = [r for d in DTYPES for r in check_correctness(d, (1, 1009), rng)]
    doc["correctness"] = checks
    bad = [r for r in checks if not r["ok"]]
    log(f"  {len(checks) - len(bad)}/{len(checks)} correct" + (f"; WRONG: {bad}" if bad else ""))


def _warm(doc: dict, log: Log, sms: int, rng, quick: bool) -> None:
    log.phase("warm, in process: fraglab.bench.compare, both orders")
    configs = [("one block", 1, False), ("one block, L2 flushed", 1, True),
               ("paper's profiling grid", 2048, False), ("one full wave", fill_tiles(sms), False),
               ("8 full waves", fill_tiles(sms, 8), False)]
    rep = 300 if quick else 2000
    doc["warm"] = []
    for dtype in DTYPES:
        for label, n, flush in configs:
            if dtype == "f16" and label not in ("one block", "8 full waves"):
                continue
            for first in VARIANTS:
                cmp = warm_compare(n, dtype, first=first, repeat=rep, flush_l2=flush, rng=rng,
                                   rounds=10)
                doc["warm"].append({"label": label, "tiles": n, "dtype": dtype, "first": first,
                                    "flush_l2": flush, "comparison": cmp.to_dict()})
                t = cmp.timings
                log(f"  {dtype:4} {label:24} {first} first: baseline {t['smem'].median_ms * 1e3:7.2f} us "
                    f"[{t['smem'].p10_ms * 1e3:.2f}-{t['smem'].p90_ms * 1e3:.2f}], in-register "
                    f"{t['regs'].median_ms * 1e3:7.2f} us [{t['regs'].p10_ms * 1e3:.2f}-"
                    f"{t['regs'].p90_ms * 1e3:.2f}]: {cmp.ratios()['regs']:.3f}x")


def _cycles(doc: dict, log: Log, sms: int, rng, quick: bool) -> None:
    log.phase("the epilogue alone: clock64 cycles per warp")
    doc["cycles"] = {}
    for label, n, launches, warm in (("one block", 1, 40 if quick else 400, 5),
                                     ("8 full waves", fill_tiles(sms, 8), 1, 1)):
        c = epilogue_cycles(n, "bf16", launches=launches, warmup=warm, rng=rng)
        for w in VARIANTS:
            c[w]["stats"] = summary(c[w]["cycles"])
            if n > 1:   # keep the record small: statistics of all, 4096 samples for the plots
                c[w]["first"] = summary(c[w]["first"])
                keep = rng.choice(len(c[w]["cycles"]), min(4096, len(c[w]["cycles"])),
                                  replace=False)
                c[w]["cycles"] = [c[w]["cycles"][i] for i in np.sort(keep)]
        doc["cycles"][label] = {"tiles": n, **c}
        log(f"  {label:12}: baseline median {c['smem']['stats']['median']:.0f} cycles, "
            f"in-register {c['regs']['stats']['median']:.0f} cycles")


def _sustained_power(doc: dict, log: Log, info: dict, rng, speed: str) -> None:
    import cupy as cp
    log.phase("power, sustained: back-to-back launches in this process")
    launches = {}
    for label, n in (("one block", 1), ("8 full waves", fill_tiles(info["sm_count"], 8))):
        a, b = random_inputs(n, "bf16", rng)
        ag, bg = cp.asarray(a), cp.asarray(b)
        for w in VARIANTS:
            launches[f"{w}, {label}"] = launcher(ag, bg, variant=w, dtype="bf16")[0]
    try:
        doc["power_sustained"] = sustained_power(launches, POWER_S[speed][1],
                                                 idle_s=POWER_S[speed][2],
                                                 pci_bus_id=info.get("pci_bus_id"), log=log)
    except RuntimeError as e:
        doc["power_sustained"] = {"error": str(e)}
        log(f"  not measured: {e}")


def run_all(out: Path, *, processes: int = 20, paper_budget_s: float = 110.0,
            ncu: bool = True, power: bool = True, quick: bool = False) -> dict:
    """Everything, in an order that keeps this process free of a CUDA context while the
    fresh-process measurements run. Writes ``out/results.json`` and ``out/run.log``."""
    from .. import bench
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    log = Log(out / "run.log")
    t0 = time.perf_counter()
    speed = "quick" if quick else "full"
    if quick:
        processes, paper_budget_s = 3, 20.0
    log(f"fraglab.microbenchmark all -> {out}/results.json (planned about "
        f"{sum(PLAN.values()) if not quick else 60} s; progress below)")
    doc: dict = {"plan_s": PLAN, "quick": quick, "settings": {"processes": processes,
                                                               "paper_budget_s": paper_budget_s}}
    info, arch = _setup(doc, log)
    _fresh_processes(doc, log, info, arch, processes=processes, paper_budget_s=paper_budget_s,
                     ncu=ncu, power=power, speed=speed)
    rng = np.random.default_rng()
    _correctness(doc, log, rng)
    _warm(doc, log, info["sm_count"], rng, quick)
    _cycles(doc, log, info["sm_count"], rng, quick)
    if power:
        _sustained_power(doc, log, info, rng, speed)

    doc["elapsed_s"] = time.perf_counter() - t0
    doc["clocks_after"] = bench.clock_check()
    doc["reproduce"] = reproduce_table(doc)
    doc["findings"] = findings(doc)
    bench.save_results(out / "results.json", compact(doc),
                       {"log": "run.log",
                        "command": "python -m fraglab.microbenchmark all --out " + str(out)})
    log.phase(f"done in {doc['elapsed_s']:.0f} s: {out / 'results.json'}")
    log(format_table(doc["reproduce"]))
    for line in doc["findings"]:
        log("- " + line)
    return doc
