"""``python -m fraglab.register_reuse``: the SGEMM ladder's command line.

    bench --out DIR [--quick]        the H100 run (check, sweep, ladder, ncu stalls) -> DIR/results.json
    sweep-shapes --out DIR [--quick | --seed-only]  rung 10's table -> DIR/shape_table.json
    sass [--arch sm_90]              LDS per FFMA of every rung's main loop, registers, occupancy
    switches [--arch sm_90]          rung 10's switches: SASS and shared-memory banks per config
    profile --variant V --size S [--tiles JSON]  run one rung twice (the child ncu profiles)
"""
from __future__ import annotations

import json
import sys

from ..cli import bench_options, subcommands


#: Sub-commands: name -> (help, [(flag, keyword arguments of add_argument)]).
COMMANDS = {
    "bench": ("the H100 measurement run", bench_options("small sizes and a short sweep")),
    "sass": ("LDS per FFMA from SASS, registers, occupancy", [
        ("--arch", dict(default="sm_90")), ("--json", dict(action="store_true"))]),
    "sweep-shapes": ("rung 10's shape table: tiles and split per shape, timed against cuBLAS", [
        ("--out", dict(required=True, help="folder for shape_table.json and shape_log.txt")),
        ("--quick", dict(action="store_true", help="one tiny shape, two candidates (a smoke "
                                                   "test; on the interpreter without a GPU)")),
        ("--seed", dict(type=int, default=0)),
        ("--seed-only", dict(action="store_true", help="write the wave model's table "
                                                       "(unmeasured) to --out, time nothing"))]),
    "switches": ("rung 10's tuning switches: SASS (words/FFMA, .reuse, register banks) and "
                 "shared banks per configuration", [("--arch", dict(default="sm_90")),
                                                    ("--json", dict(action="store_true"))]),
    "profile": ("run one rung twice (for ncu)", [
        ("--variant", dict(required=True)), ("--size", dict(type=int, default=4096)),
        ("--tiles", dict(default="{}", help="tile overrides as JSON"))]),
}


def main(argv=None) -> int:
    args = subcommands("python -m fraglab.register_reuse", "FP32 SGEMM ladder (topic 07_register_reuse)",
                       COMMANDS).parse_args(argv)

    if args.cmd == "bench":
        from . import bench
        bench.run(args.out, quick=args.quick, seed=args.seed)
    elif args.cmd == "sweep-shapes":
        from pathlib import Path

        from . import bench
        if args.seed_only:
            bench.write_seed_table(Path(args.out) / "shape_table.json")
        else:
            bench.sweep_shapes(args.out, quick=args.quick, seed=args.seed)
    elif args.cmd == "sass":
        from . import kernels, sass_counts
        rows = [sass_counts.report(k, args.arch) for k in kernels.VARIANTS]
        print(json.dumps(rows, indent=1) if args.json else sass_counts.table(rows))
    elif args.cmd == "switches":
        from . import switches
        rows = switches.evidence(arch=args.arch)
        print(json.dumps(rows, indent=1) if args.json else switches.table(rows))
    else:
        import cupy
        import numpy as np

        from . import kernels
        rng = np.random.default_rng(0)
        a = cupy.asarray(rng.standard_normal((args.size, args.size), dtype=np.float32))
        b_ = cupy.asarray(rng.standard_normal((args.size, args.size), dtype=np.float32))
        run, _ = kernels.sgemm_launcher(a, b_, args.variant, **json.loads(args.tiles))
        for _ in range(2):
            run()
        cupy.cuda.get_current_stream().synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
