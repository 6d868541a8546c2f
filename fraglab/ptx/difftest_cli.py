"""``python -m fraglab.ptx.difftest record --out DIR``: run every generated kernel on the GPU
and on the interpreter (a process pool, overlapping the GPU), write the record and the
differences, print progress, the differences table and the coverage.

Options: ``--only REGEX`` (combinations whose opcode matches), ``--jobs N`` (interpreter
processes; default: the CPU count), ``--no-gpu`` (interpreter only: checks the generator and
writes no record), ``--examples K`` (examples per combination in differences.json)."""
from __future__ import annotations

import argparse
import json
import os
import re
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from . import difftest as D


def _interp_job(family, combos):
    import warnings
    warnings.simplefilter("ignore")
    t0 = time.process_time()
    cases, missing = D.build_family(combos)
    return family, D.run_interp(cases), time.process_time() - t0


def coverage(combos) -> dict:
    """Counts of instructions, (instruction, modifiers) and full combinations: generated,
    covered by a named GPU test, and neither."""
    from .difftest_gen import split
    gen, cov, none = set(), set(), set()
    for c in combos:
        if D.covered_by(c):
            cov.add(c)
            continue
        try:
            D.build(c)
            gen.add(c)
        except D.NoTest:
            none.add(c)

    def count(s):
        sp = [split(c) for c in s]
        return {"instructions": len({b for b, _, _ in sp}), "instruction+modifiers": len({(b, m) for b, m, _ in sp}),
                "combinations": len(s)}
    return {"generated": count(gen), "covered_by_gpu_test": count(cov), "untested": count(none),
            "all": count(set(combos)), "untested_list": sorted(none)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fraglab.ptx.difftest")
    sub = ap.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="run on the GPU and the interpreter; write the record")
    rec.add_argument("--out", required=True, type=Path)
    rec.add_argument("--only", default=None)
    rec.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    rec.add_argument("--no-gpu", action="store_true")
    rec.add_argument("--examples", type=int, default=4)
    sub.add_parser("coverage", help="print the coverage counts")
    a = ap.parse_args(argv)
    combos = D.combinations()
    if a.cmd == "coverage":
        print(json.dumps(coverage(combos), indent=1))
        return 0
    if a.only:
        combos = [c for c in combos if re.search(a.only, c)]
    return record(combos, a.out, a.jobs, not a.no_gpu, a.examples)


def record(combos, out: Path, jobs: int, gpu: bool, examples: int) -> int:
    t_start = time.time()
    fams = D.families(combos)
    print(f"{len(combos)} combinations, {len(fams)} modules; interpreter on {jobs} processes", flush=True)
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn"))
    order = sorted(fams, key=lambda f: -len(fams[f]))
    futures = [pool.submit(_interp_job, f, fams[f]) for f in order]
    cases, missing, gpu_out, gpu_s = {}, {}, {}, 0.0
    for i, f in enumerate(sorted(fams), 1):
        cs, miss = D.build_family(fams[f])
        cases.update(cs)
        missing.update(miss)
        if gpu:
            t0 = time.time()
            res = D.run_gpu(cs)
            gpu_out.update(res)
            gpu_s += time.time() - t0
            errs = sum(isinstance(r, str) for r in res.values())
            print(f"[{i:3d}/{len(fams)}] GPU {f:14s} {len(cs):3d} kernels {time.time() - t0:6.2f} s"
                  + (f"  {errs} failed" if errs else ""), flush=True)
    mine, cpu = {}, 0.0
    for k, fut in enumerate(futures, 1):
        f, res, s = fut.result()
        mine.update(res)
        cpu += s
        if k % 10 == 0 or k == len(futures):
            print(f"interpreter: {k}/{len(futures)} modules done ({time.time() - t_start:.0f} s)", flush=True)
    pool.shutdown()
    diffs, totals = [], {"combinations": len(cases), "differ": 0, "unspecified_only": 0, "errors": 0}
    for c in sorted(cases):
        case = cases[c]
        m = mine.get(c, "interpreter did not run")
        if not gpu:
            if isinstance(m, str):
                diffs.append({"combo": c, "arch": case.arch, "n": case.n, "error": m})
                totals["errors"] += 1
            continue
        r = D.compare_case(case, gpu_out.get(c, "GPU did not run"), m, examples)
        if r["bad"] or r["unspecified"]:
            diffs.append({"combo": c, "arch": case.arch, "n": case.n, **r})
            totals["differ" if r["bad"] else "unspecified_only"] += 1
            totals["errors"] += bool(r.get("error") or r.get("gpu_error"))
    cov = coverage(combos)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"device": _device(), "time": time.strftime("%Y-%m-%d %H:%M:%S"), "combinations": len(cases),
            "interpreter_cpu_s": round(cpu, 1), "gpu_s": round(gpu_s, 1)}
    (out / "differences.json").write_text(json.dumps({"meta": meta, "totals": totals, "coverage": cov,
                                                      "not_generated": missing, "differences": diffs}, indent=1))
    if gpu:
        size = D.save_record(out / "ptx_differential.npz", cases, gpu_out, meta)
        print(f"wrote {out / 'ptx_differential.npz'} ({size / 1e6:.2f} MB) and {out / 'differences.json'}")
    _print_table(diffs)
    c = cov
    print("coverage (instructions / instruction+modifiers / combinations):")
    for k in ("all", "generated", "covered_by_gpu_test", "untested"):
        v = c[k]
        print(f"  {k:22s} {v['instructions']:5d} {v['instruction+modifiers']:6d} {v['combinations']:6d}")
    if c["untested_list"]:
        print("  untested:", ", ".join(c["untested_list"][:40]), "..." if len(c["untested_list"]) > 40 else "")
    print(f"totals: {totals}; interpreter CPU {cpu:.0f} s, GPU {gpu_s:.0f} s, wall {time.time() - t_start:.0f} s")
    return 0


def _print_table(diffs):
    if not diffs:
        print("no differences")
        return
    print(f"{'combination':44s} {'arch':6s} {'differ':>7s} {'unspec':>7s}  first examples (inputs -> gpu / interp)")
    for d in diffs:
        if d.get("error") or d.get("gpu_error"):
            print(f"{d['combo']:44s} {d['arch']:6s} {'ERROR':>7s}  {d.get('error') or ''} {d.get('gpu_error') or ''}"[:220])
            continue
        ex = "; ".join(f"[{x['element']}].{x['output']} {','.join(x['inputs'])} -> {x['gpu']} / {x['interp']}"
                       for x in d["examples"][:2])
        print(f"{d['combo']:44s} {d['arch']:6s} {d['bad']:7d} {d['unspecified']:7d}  {ex}"[:260])


def _device() -> str:
    try:
        import cupy
        p = cupy.cuda.runtime.getDeviceProperties(0)
        return f"{p['name'].decode()} (cc {p['major']}.{p['minor']}), CuPy {cupy.__version__}, driver " \
               f"{cupy.cuda.runtime.driverGetVersion()}"
    except Exception:                                              # noqa: BLE001
        return "no GPU"
