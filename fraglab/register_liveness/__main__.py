"""``python -m fraglab.register_liveness``: chapter 08's command line.

    bench --out DIR [--quick]     the H100 run (check, resources, throughput, d = 256 rounds
                                  beside SDPA flash and cuDNN, causal loops, register caps,
                                  Triton) -> DIR/results.json
    sass [--arch sm_90] [--sweep] registers, spills, LDL/STL and occupancy of every variant,
                                  from the compiler alone (no GPU needed)
"""
from __future__ import annotations

import json
import sys

from ..cli import bench_options, subcommands


#: Sub-commands: name -> (help, [(flag, keyword arguments of add_argument)]).
COMMANDS = {
    "bench": ("the H100 measurement run", bench_options("fewer cases, sizes and repeats")),
    "sass": ("registers, spills and occupancy from the compiler", [
        ("--arch", dict(default="sm_90")),
        ("--sweep", dict(action="store_true", help="the register-cap sweep instead")),
        ("--json", dict(action="store_true"))]),
}


def main(argv=None) -> int:
    args = subcommands("python -m fraglab.register_liveness",
                       "Q's liveness in the FA-2 kernel (topic 08_register_liveness)", COMMANDS).parse_args(argv)
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
