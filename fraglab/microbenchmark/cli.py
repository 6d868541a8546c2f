"""The command line: ``python -m fraglab.microbenchmark all|paper|warm|cycles|power|ncu|table3|check``,
and the entry points of the child processes (``_child``, ``_info``, ``_ncu_driver``)."""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from .. import child
from .build_report import build_report, write_cubin
from .child_main import time_first_launches
from .kernels import DTYPES, LABELS, MAX_TILES, VARIANTS, launcher, random_inputs
from .ncu import drive, occupancy_table, run_ncu
from .power import relaunch_power, sustained_power
from .problems import check_correctness
from .processes import device_info_in_child, run_processes
from .record import RESULTS_DIR
from .run import run_all
from .setups import SETUPS
from .warm import epilogue_cycles, warm_compare


def _positive(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v}")
    return v


def _tiles(s: str) -> list[int]:
    try:
        t = [int(x) for x in s.split(",") if x]
    except ValueError:
        raise SystemExit(f"--tiles must be comma-separated integers, got {s!r}") from None
    if not t or any(not 1 <= x <= MAX_TILES for x in t):
        raise SystemExit(f"--tiles must be between 1 and {MAX_TILES}, got {s!r}")
    return t


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fraglab.microbenchmark",
                                description="The paper's micro-benchmark, reproduced and measured.")
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("all", help="everything; writes OUT/results.json and OUT/run.log")
    a.add_argument("--out", type=Path, default=RESULTS_DIR)
    a.add_argument("--processes", type=_positive, default=20)
    a.add_argument("--paper-budget", type=float, default=110.0,
                   help="seconds for the fresh-process loop (it stops early when spent)")
    a.add_argument("--no-ncu", action="store_true")
    a.add_argument("--no-power", action="store_true")
    a.add_argument("--quick", action="store_true", help="a smoke run, about a minute")
    pp = sub.add_parser("paper", help="the paper's measurement: one launch per fresh process")
    pp.add_argument("--processes", type=_positive, default=20)
    pp.add_argument("--setups", default="paper",
                    help="comma-separated, from: " + ", ".join(SETUPS) + " (or 'all')")
    pp.add_argument("--out", type=Path)
    for name, hlp in (("warm", "warm in-process comparison, both orders"),
                      ("cycles", "the epilogue in clock64 cycles"),
                      ("power", "NVML power: sustained loop and relaunch loop"),
                      ("ncu", "achieved occupancy with Nsight Compute"),
                      ("table3", "registers, shared memory, barriers from ptxas and SASS"),
                      ("check", "both kernels against NumPy")):
        q = sub.add_parser(name, help=hlp)
        q.add_argument("--out", type=Path)
        if name in ("warm", "cycles", "ncu"):
            q.add_argument("--tiles", default="1", help="comma-separated tile counts")
        if name == "table3":
            q.add_argument("--arch", default="sm_90")
    c = sub.add_parser("_child")
    c.add_argument("--config", required=True)
    c.add_argument("--cubin", required=True)
    c.add_argument("--later", type=int, default=3)
    sub.add_parser("_info")
    d = sub.add_parser("_ncu_driver")
    d.add_argument("--cubin", required=True)
    d.add_argument("--dtype", default="bf16")
    d.add_argument("--tiles", default="2048")
    return p


def _save(path: Path | None, name: str, payload) -> None:
    if path is None:
        return
    from .. import bench
    bench.save_results(Path(path) / f"{name}.json", payload)
    print(f"wrote {Path(path) / (name + '.json')}", flush=True)


def _children(args) -> int:
    """What the child processes run: ``_child`` (one fresh-process measurement), ``_info`` (the
    GPU's description) and ``_ncu_driver`` (the process ncu profiles)."""
    if args.cmd == "_child":
        child.emit(time_first_launches(json.loads(args.config), args.cubin, args.later))
    elif args.cmd == "_info":
        from .. import bench
        child.emit({"device": bench.device_info()})
    else:
        drive(args.cubin, args.dtype, [int(t) for t in args.tiles.split(",")])
    return 0


def _table3(args) -> int:
    r = build_report(args.arch)
    for w, v in r["ways"].items():
        print(f"{LABELS[w]:26} {v['registers']:3} registers  {v['smem_bytes']:5} B shared  "
              f"{v['barriers']} barrier(s)  {v['opcodes']}")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "table3.json").write_text(json.dumps(r, indent=1) + "\n")
    return 0


def _paper(args) -> int:
    names = list(SETUPS) if args.setups == "all" else args.setups.split(",")
    unknown = [n for n in names if n not in SETUPS]
    if unknown:
        raise SystemExit(f"unknown setup(s) {unknown}; known: {', '.join(SETUPS)}")
    info = device_info_in_child()
    arch = "sm_" + info["compute_capability"].replace(".", "")
    with tempfile.TemporaryDirectory(prefix="fraglab04_") as tmp:
        cubin = write_cubin(arch, Path(tmp))
        res = run_processes({n: SETUPS[n] for n in names}, args.processes, cubin=cubin)
    for n in names:
        s = res["variants"][n]["summary"]
        if s.get("n"):
            print(f"{n:11} n={s['n']}: baseline {s['first_ms']['smem']['mean']:.4f} ms, "
                  f"in-register {s['first_ms']['regs']['mean']:.4f} ms: "
                  f"{s['speedup_of_means']:.2f}x (paper, H100: 0.103 / 0.017 ms, 6.1x)")
    _save(args.out, "paper_way", res)
    return 0


def _on_gpu(args) -> int:
    """The commands that measure in this process: check, warm, cycles, power, ncu."""
    from .. import device
    device.require_gpu(f"`{args.cmd}`")
    if args.cmd == "check":
        recs = [r for d in DTYPES for r in check_correctness(d)]
        for r in recs:
            print(("ok   " if r["ok"] else "WRONG"), r)
        _save(args.out, "check", recs)
        return 0 if all(r["ok"] for r in recs) else 1
    if args.cmd == "warm":
        out = []
        for n in _tiles(args.tiles):
            for first in VARIANTS:
                cmp = warm_compare(n, first=first, progress=True)
                print(f"{n} tiles, {first} first:\n{cmp.table()}", flush=True)
                out.append({"tiles": n, "first": first, "comparison": cmp})
        _save(args.out, "warm", out)
        return 0
    if args.cmd == "cycles":
        out = {}
        for n in _tiles(args.tiles):
            c = epilogue_cycles(n)
            out[str(n)] = c
            print(f"{n} tiles: baseline median {np.median(c['smem']['cycles']):.0f} cycles, "
                  f"in-register {np.median(c['regs']['cycles']):.0f}", flush=True)
        _save(args.out, "cycles", out)
        return 0
    if args.cmd == "power":
        import cupy as cp
        a, b = random_inputs(1)
        ag, bg = cp.asarray(a), cp.asarray(b)
        res = {"sustained": sustained_power({w: launcher(ag, bg, variant=w)[0] for w in VARIANTS})}
        with tempfile.TemporaryDirectory(prefix="fraglab04_") as tmp:
            res["relaunch"] = relaunch_power(write_cubin(device.arch(), Path(tmp)))
        _save(args.out, "power", res)
        return 0
    with tempfile.TemporaryDirectory(prefix="fraglab04_") as tmp:     # ncu
        r = run_ncu(write_cubin(device.arch(), Path(tmp)), tiles=_tiles(args.tiles))
    if r["ok"]:
        for row in occupancy_table(r):
            print(row)
    else:
        print("ncu: " + r["error"] + "\n" + r.get("output_tail", ""))
    _save(args.out, "ncu", r)
    return 0 if r["ok"] else 1


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.cmd.startswith("_"):
        return _children(args)
    if args.cmd == "table3":
        return _table3(args)
    if args.cmd == "all":
        run_all(args.out, processes=args.processes, paper_budget_s=args.paper_budget,
                ncu=not args.no_ncu, power=not args.no_power, quick=args.quick)
        return 0
    if args.cmd == "paper":
        return _paper(args)
    return _on_gpu(args)
