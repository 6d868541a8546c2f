"""``python -m fraglab.ptx.difftest record --out DIR``: run every generated kernel on the GPU
and on the interpreter (a process pool, overlapping the GPU), write the record and the
differences, print progress, the differences table and the coverage.

Options: ``--only REGEX`` (combinations whose opcode matches), ``--jobs N`` (worker processes,
each with its own CUDA context so that the driver's JIT compiles run in parallel; default: the
CPU count), ``--no-gpu`` (interpreter only: checks the generator and writes no record),
``--examples K`` (examples per combination in differences.json).

``python -m fraglab.ptx.difftest ptxas`` assembles every generated kernel with ptxas for its
target (where ptxas is installed) and lists the combinations it rejects; ``coverage`` prints
the coverage counts."""
from __future__ import annotations

import argparse
import json
import os
import re
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path

from . import core as D


def _job(family, combos, gpu, examples, fake=False):
    """One module's combinations, in a worker process: the GPU run (a CUDA context per worker,
    so the driver's JIT compiles run in parallel), the interpreter run and the comparison."""
    import warnings
    warnings.simplefilter("ignore")
    t0, c0 = time.time(), time.process_time()
    cases, missing = D.build_family(combos)
    g = D.run_gpu(cases) if gpu else {}
    gpu_s = time.time() - t0
    c1 = time.process_time()
    mine = D.run_interp(cases)
    cpu = time.process_time() - c1
    if fake:                                   # a self-test of the pipeline: the interpreter as the "GPU"
        g, gpu = mine, True
    res = {}
    for c, case in cases.items():
        if gpu:
            res[c] = D.compare_case(case, g[c], mine[c], examples)
        elif isinstance(mine[c], str):
            res[c] = {"bad": case.n, "unspecified": 0, "error": mine[c], "examples": []}
    return family, g, res, missing, cpu, gpu_s, time.process_time() - c0


def coverage(combos) -> dict:
    """Counts of instructions, (instruction, modifiers) and full combinations: generated,
    covered by a named GPU test, and neither."""
    from .gen import split
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
    rec.add_argument("--fake-gpu", action="store_true", help="pipeline self-test: record the interpreter's "
                     "outputs as if they were the GPU's (never commit such a record)")
    sub.add_parser("coverage", help="print the coverage counts")
    px = sub.add_parser("ptxas", help="assemble every generated kernel with ptxas; list the rejected ones")
    px.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    a = ap.parse_args(argv)
    combos = D.combinations()
    if a.cmd == "coverage":
        print(json.dumps(coverage(combos), indent=1))
        return 0
    if a.cmd == "ptxas":
        return ptxas_check(combos, a.jobs)
    if a.only:
        combos = [c for c in combos if re.search(a.only, c)]
    return record(combos, a.out, a.jobs, not a.no_gpu or a.fake_gpu, a.examples, a.fake_gpu)


def record(combos, out: Path, jobs: int, gpu: bool, examples: int, fake: bool = False) -> int:
    t_start = time.time()
    fams = D.families(combos)
    print(f"{len(combos)} combinations, {len(fams)} modules; GPU and interpreter on {jobs} processes",
          flush=True)
    order = sorted(fams, key=lambda f: -len(fams[f]))
    gpu_out, results, missing, cpu, gpu_s = {}, {}, {}, 0.0, 0.0
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        futures = [pool.submit(_job, f, fams[f], gpu and not fake, examples, fake) for f in order]
        for k, fut in enumerate(as_completed(futures), 1):
            try:
                f, g, res, miss, c, gs, _ = fut.result()
            except Exception as e:                                 # noqa: BLE001
                print(f"a worker failed: {type(e).__name__}: {e}", flush=True)
                continue
            gpu_out.update(g)
            results.update(res)
            missing.update(miss)
            cpu += c
            gpu_s += gs
            bad = sum(1 for r in res.values() if r["bad"])
            print(f"[{k:3d}/{len(fams)}] {f:16s} {len(fams[f]):3d} kernels  GPU+JIT {gs:5.1f} s  interpreter "
                  f"{c:5.1f} s  {bad} differ  ({time.time() - t_start:.0f} s)", flush=True)
    cases = {}
    for f in fams:
        cases.update(D.build_family(fams[f])[0])
    diffs = [{"combo": c, "arch": cases[c].arch, "n": cases[c].n, **r} for c, r in sorted(results.items())
             if r["bad"] or r["unspecified"]]
    totals = {"combinations": len(cases), "differ": sum(1 for d in diffs if d["bad"]),
              "unspecified_only": sum(1 for d in diffs if not d["bad"]),
              "errors": sum(1 for d in diffs if d.get("error") or d.get("gpu_error"))}
    cov = coverage(combos)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"device": "FAKE: the interpreter" if fake else _device() if gpu else "no GPU", "time": time.strftime("%Y-%m-%d %H:%M:%S"),
            "combinations": len(cases), "interpreter_cpu_s": round(cpu, 1), "gpu_s": round(gpu_s, 1)}
    (out / "differences.json").write_text(json.dumps({"meta": meta, "totals": totals, "coverage": cov,
                                                      "not_generated": missing, "differences": diffs}, indent=1))
    if gpu:
        size = D.save_record(out / "ptx_differential.npz", cases, gpu_out, meta)
        print(f"wrote {out / 'ptx_differential.npz'} ({size / 1e6:.2f} MB) and {out / 'differences.json'}")
    _print_table(diffs)
    print("coverage (instructions / instruction+modifiers / combinations):")
    for k in ("all", "generated", "covered_by_gpu_test", "untested"):
        v = cov[k]
        print(f"  {k:22s} {v['instructions']:5d} {v['instruction+modifiers']:6d} {v['combinations']:6d}")
    if cov["untested_list"]:
        print("  untested:", ", ".join(cov["untested_list"][:40]), "..." if len(cov["untested_list"]) > 40 else "")
    print(f"totals: {totals}; interpreter CPU {cpu:.0f} s, GPU+JIT {gpu_s:.0f} s (summed over processes), "
          f"wall {time.time() - t_start:.0f} s")
    return 0


def ptxas_check(combos, jobs: int) -> int:
    """Assemble every generated module with ptxas (where installed) for its target; list the
    combinations ptxas rejects (one module per combination for the failing modules)."""
    import subprocess
    import tempfile
    from concurrent.futures import ThreadPoolExecutor
    fams = D.families(combos)
    tmp = Path(tempfile.mkdtemp())

    def asm(item):
        name, arch, text = item
        p = tmp / f"{name}.ptx"
        p.write_text(text)
        r = subprocess.run(["ptxas", f"-arch={arch}", str(p), "-o", "/dev/null"], capture_output=True, text=True)
        return name, r.returncode, r.stderr

    items = []
    for f, cs in fams.items():
        cases = D.build_family(cs)[0]
        items += [(f"{f}_{arch}", arch, text) for arch, text in D.modules(cases).items()]
    bad = []
    with ThreadPoolExecutor(jobs) as ex:
        failed = [n for n, rc, _ in ex.map(asm, items) if rc]
        one = []
        for f, cs in fams.items():
            if not any(n.startswith(f + "_") for n in failed):
                continue
            for c, case in D.build_family(cs)[0].items():
                one.append((D.kernel_name(c), case.arch, D.modules({c: case})[case.arch]))
        for n, rc, err in ex.map(asm, one):
            if rc:
                msg = next((ln.split("error", 1)[1].strip(" :") for ln in err.splitlines() if "error" in ln), err)
                bad.append((n, msg))
    print(f"{len(items)} modules assembled, {len(bad)} kernels rejected by ptxas")
    for n, msg in bad:
        print(f"  {n}: {msg}")
    return 1 if bad else 0


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
