"""``python -m fraglab.fused_lm_head``: chapter 11's command line.

    bench --out DIR [--quick] [--seed N]    the GPU run (checks, timing) -> DIR/results.json
    profile --out DIR [--ncu]               one training step of each variant traced -> DIR/profile.json

``python -m fraglab.chapter bench 11`` runs it, records DIR/results.json in
``book/data/11_fused_lm_head/`` and re-executes the chapter.
"""
from __future__ import annotations

import sys

from ..cli import bench_options, subcommands

#: Sub-commands: name -> (help, [(flag, keyword arguments of add_argument)]).
COMMANDS = {"bench": ("the GPU run: every Problem's cases, then the fused loss timed against "
                      "PyTorch eager, torch.compile, Liger-Kernel and Cut Cross-Entropy",
                      bench_options("Llama 3 8B's head at N = 4096 only, fewer repeats")),
            "profile": ("where a training step's time goes: every activity on the GPU of one step "
                        "per variant (PyTorch's profiler), optionally ncu on the course's kernels", [
                            ("--out", dict(required=True, help="folder for profile.json")),
                            ("--head", dict(default="llama3_8b")), ("--n", dict(type=int, default=4096)),
                            ("--ncu", dict(action="store_true", help="also ncu the course's kernels"))]),
            "profile-child": ("(what ncu watches) two course training steps", [
                ("--head", dict(default="llama3_8b")), ("--n", dict(type=int, default=4096))])}


def main(argv=None) -> int:
    args = subcommands("python -m fraglab.fused_lm_head",
                       "A fused LM head: matmul, then an in-register log-sum-exp (topic 11)",
                       COMMANDS).parse_args(argv)
    if args.cmd == "profile":
        from . import profile
        print(profile.summary(profile.run(args.out, args.head, args.n, with_ncu=args.ncu)))
        return 0
    if args.cmd == "profile-child":
        from . import profile
        profile.child(args.head, args.n)
        return 0
    from . import bench
    bench.run(args.out, quick=args.quick, seed=args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
