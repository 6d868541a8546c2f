"""``python -m fraglab.flash_attention bench --out DIR``: the command line of the topic."""
from __future__ import annotations

from .. import device
from ..cli import subcommands
from .bench import run_bench


#: Sub-commands: name -> (help, [(flag, keyword arguments of add_argument)]).
COMMANDS = {
    "bench": ("FA-1 pairs and FA-2 vs SDPA (about ten seconds plus compilation on an H100)", [
        ("--out", dict(required=True, help="folder for results.json")),
        ("--quick", dict(action="store_true", help="fewer sizes and repeats (a smoke test)"))]),
}


def main(argv=None) -> int:
    args = subcommands("python -m fraglab.flash_attention", "Topic 05_flash_attention benchmarks",
                       COMMANDS).parse_args(argv)
    if args.cmd == "bench":
        device.require_gpu("the benchmark")
        run_bench(args.out, quick=args.quick)
    return 0
