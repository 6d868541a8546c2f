"""``python -m fraglab.instruction_diet``: the instruction diet's command line.

    bench --out DIR [--quick] [--no-stalls]   the H100 run -> DIR/results.json, DIR/log.txt
    classes [--d 128] [--dtype f16] [--arch sm_90] [--scope loop|kernel]
                                              class counts of every step (CPU; no GPU needed)
    profile --step S|all [--n 4096] [--d 128] [--causal]
                                              run steps twice (the child ncu/compute-sanitizer watch)
"""
from __future__ import annotations

import argparse
import sys


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m fraglab.instruction_diet",
                                 description="FA-2 instruction diet (topic 09_instruction_diet)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bench", help="the H100 measurement run")
    b.add_argument("--out", required=True, help="folder for results.json and log.txt")
    b.add_argument("--quick", action="store_true", help="fewer sizes and repeats, no ncu")
    b.add_argument("--no-stalls", action="store_true", help="skip the ncu stall breakdown")
    b.add_argument("--seed", type=int, default=0)
    c = sub.add_parser("classes", help="SASS instruction classes of every step")
    c.add_argument("--d", type=int, default=128, choices=(64, 128))
    c.add_argument("--dtype", default="f16", choices=("f16", "bf16"))
    c.add_argument("--arch", default="sm_90")
    c.add_argument("--scope", default="loop", choices=("loop", "kernel"))
    p = sub.add_parser("profile", help="run one step (or all) twice (for ncu, compute-sanitizer)")
    p.add_argument("--step", required=True, help="a step, or all")
    p.add_argument("--causal", action="store_true")
    p.add_argument("--heads", type=int, default=32, help="B*H")
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--d", type=int, default=128, choices=(64, 128))
    return ap


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.cmd == "bench":
        from . import bench
        bench.run(args.out, quick=args.quick, seed=args.seed, stall=not args.no_stalls)
    elif args.cmd == "classes":
        from . import classes
        rows = classes.ladder(args.dtype, args.d, args.arch)
        print(f"{args.scope} of every step, {args.dtype} d={args.d} {args.arch}:")
        print(classes.text_table(rows, args.scope))
    else:
        from . import bench
        bench.profile(args.step, args.n, args.d, causal=args.causal, heads=args.heads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
