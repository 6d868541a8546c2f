"""``python -m fraglab.instruction_diet``: the instruction diet's command line.

    bench --out DIR [--quick] [--no-stalls]   the H100 run -> DIR/results.json, DIR/log.txt
    classes [--d 128] [--dtype f16] [--arch sm_90] [--scope loop|kernel]
                                              class counts of every variant (CPU; no GPU needed)
    profile --variant V|all [--n 4096] [--d 128] [--causal]
                                              run variants twice (the child ncu/compute-sanitizer watch)
"""
from __future__ import annotations

import argparse
import sys

from ..cli import bench_options, subcommands

#: Sub-commands: name -> (help, [(flag, keyword arguments of add_argument)]).
COMMANDS = {
    "bench": ("the H100 measurement run", bench_options("fewer sizes and repeats, no ncu",
        ("--no-stalls", dict(action="store_true", help="skip the ncu stall breakdown")))),
    "classes": ("SASS instruction classes of every variant", [
        ("--d", dict(type=int, default=128, choices=(64, 128))),
        ("--dtype", dict(default="f16", choices=("f16", "bf16"))),
        ("--arch", dict(default="sm_90")),
        ("--scope", dict(default="loop", choices=("loop", "kernel")))]),
    "profile": ("run one variant (or all) twice (for ncu, compute-sanitizer)", [
        ("--variant", dict(required=True, help="a variant, or all")),
        ("--causal", dict(action="store_true")),
        ("--heads", dict(type=int, default=32, help="B*H")),
        ("--n", dict(type=int, default=4096)),
        ("--d", dict(type=int, default=128, choices=(64, 128)))]),
}


def parser() -> argparse.ArgumentParser:
    return subcommands("python -m fraglab.instruction_diet",
                       "FA-2 instruction diet (topic 09_instruction_diet)", COMMANDS)


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.cmd == "bench":
        from . import bench
        bench.run(args.out, quick=args.quick, seed=args.seed, stall=not args.no_stalls)
    elif args.cmd == "classes":
        from . import classes
        rows = classes.ladder(args.dtype, args.d, args.arch)
        print(f"{args.scope} of every variant, {args.dtype} d={args.d} {args.arch}:")
        print(classes.text_table(rows, args.scope))
    else:
        from . import bench
        bench.profile(args.variant, args.n, args.d, causal=args.causal, heads=args.heads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
