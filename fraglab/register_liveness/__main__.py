"""``python -m fraglab.register_liveness``: chapter 08's command line.

    bench --out DIR [--quick]     the H100 run (check, resources, throughput, causal loops,
                                  register caps, Triton) -> DIR/results.json
    sass [--arch sm_90] [--sweep] registers, spills, LDL/STL and occupancy of every variant,
                                  from the compiler alone (no GPU needed)
"""
from __future__ import annotations

import argparse
import json
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fraglab.register_liveness",
                                 description="Q's liveness in the FA-2 kernel (topic 08_register_liveness)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bench", help="the H100 measurement run")
    b.add_argument("--out", required=True, help="folder for results.json and log.txt")
    b.add_argument("--quick", action="store_true", help="fewer cases, sizes and repeats")
    b.add_argument("--seed", type=int, default=0)
    s = sub.add_parser("sass", help="registers, spills and occupancy from the compiler")
    s.add_argument("--arch", default="sm_90")
    s.add_argument("--sweep", action="store_true", help="the register-cap sweep instead")
    s.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.cmd == "bench":
        from . import bench
        bench.run(args.out, quick=args.quick, seed=args.seed)
    else:
        from . import resources
        rows = resources.sweep_rows(args.arch) if args.sweep else resources.all_rows(args.arch)
        print(json.dumps(rows, indent=1) if args.json else resources.table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
