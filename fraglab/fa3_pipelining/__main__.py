"""``python -m fraglab.fa3_pipelining``: chapter 10's command line.

    bench --out DIR [--quick]     the H100 run (checks, variants vs cuDNN / SDPA / FA-2) -> DIR/results.json
    sass [--json]                 registers, spills and the SASS overlap evidence of every variant (no GPU)
"""
from __future__ import annotations

import argparse
import json
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fraglab.fa3_pipelining",
                                 description="FlashAttention-3 pipelining on Hopper (topic 10)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bench", help="the H100 measurement run")
    b.add_argument("--out", required=True, help="folder for results.json and log.txt")
    b.add_argument("--quick", action="store_true", help="two sizes, few repeats")
    b.add_argument("--seed", type=int, default=0)
    s = sub.add_parser("sass", help="registers, spills, HGMMA beside the softmax (no GPU needed)")
    s.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.cmd == "bench":
        from . import bench
        bench.run(args.out, quick=args.quick, seed=args.seed)
    else:
        from . import sass_evidence
        rows = sass_evidence.all_evidence()
        print(json.dumps(rows, indent=1) if args.json else sass_evidence.table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
