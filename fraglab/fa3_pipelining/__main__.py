"""``python -m fraglab.fa3_pipelining``: chapter 10's command line.

    bench --out DIR [--quick]     the H100 run (checks, variants vs cuDNN / SDPA / FA-2) -> DIR/results.json
    pipes --out DIR               ncu: pipe utilization of the tma rung at d 64/128/256 -> DIR/pipes.json
    profile --variant V --d D     run one variant twice (the child ncu watches)
    tune --out DIR [--quick]      the tma rung's key tile and ring depth per (d, N, causal) -> DIR/tma_table.json
    sass [--json]                 registers, spills and the SASS overlap evidence of every variant (no GPU)
"""
from __future__ import annotations

import json
import sys

from ..cli import bench_options, subcommands

#: Sub-commands: name -> (help, [(flag, keyword arguments of add_argument)]).
COMMANDS = {
    "bench": ("the H100 measurement run", bench_options("two sizes, few repeats")),
    "tune": ("the tma rung's tuning sweep (H100)", bench_options("N 1k and 4k only, few repeats")),
    "pipes": ("ncu: pipe utilization and stalls of the tma rung at d 64/128/256 (H100)", [
        ("--out", dict(required=True))]),
    "profile": ("run one variant twice (the child ncu watches)", [
        ("--variant", dict(required=True)), ("--n", dict(type=int, default=4096)),
        ("--d", dict(type=int, default=128, choices=(64, 128, 256))),
        ("--causal", dict(action="store_true"))]),
    "sass": ("registers, spills, HGMMA beside the softmax (no GPU needed)", [
        ("--json", dict(action="store_true"))]),
}


def main(argv=None) -> int:
    ap = subcommands("python -m fraglab.fa3_pipelining",
                     "FlashAttention-3 pipelining on Hopper (topic 10)", COMMANDS)
    args = ap.parse_args(argv)
    if args.cmd == "bench":
        from . import bench
        bench.run(args.out, quick=args.quick, seed=args.seed)
    elif args.cmd == "pipes":
        from . import bench
        bench.pipes(args.out)
    elif args.cmd == "profile":
        from . import bench
        bench.profile(args.variant, args.n, args.d, causal=args.causal)
    elif args.cmd == "tune":
        from . import bench
        bench.tune(args.out, quick=args.quick, seed=args.seed)
    else:
        from . import sass_evidence
        rows = sass_evidence.all_evidence()
        print(json.dumps(rows, indent=1) if args.json else sass_evidence.table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
