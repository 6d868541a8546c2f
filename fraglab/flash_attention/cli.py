"""``python -m fraglab.flash_attention bench --out DIR``: the command line of the topic."""
from __future__ import annotations

import argparse

from .. import device
from .bench import run_bench


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fraglab.flash_attention",
                                description="Topic 05_flash_attention benchmarks")
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bench", help="FA-1 pairs and FA-2 vs SDPA (about ten seconds plus compilation on an H100)")
    b.add_argument("--out", required=True, help="folder for results.json")
    b.add_argument("--quick", action="store_true", help="fewer sizes and repeats (a smoke test)")
    args = p.parse_args(argv)
    if args.cmd == "bench":
        device.require_gpu("the benchmark")
        run_bench(args.out, quick=args.quick)
    return 0
