"""Command lines of the topics (``python -m fraglab.<topic> ...``): one argparse parser whose
sub-commands and their options come from a table, so that each topic's ``__main__`` only says
what its commands are and what they run."""
from __future__ import annotations

import argparse
from typing import Mapping, Sequence


def subcommands(prog: str, description: str,
                commands: Mapping[str, tuple[str, Sequence[tuple[str, dict]]]]) -> argparse.ArgumentParser:
    """A parser with one required sub-command (``args.cmd``) per entry of ``commands``:
    ``{name: (help, [(flag, keyword arguments of add_argument), ...])}``."""
    ap = argparse.ArgumentParser(prog=prog, description=description)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, (text, options) in commands.items():
        parser = sub.add_parser(name, help=text)
        for flag, kw in options:
            parser.add_argument(flag, **kw)
    return ap


def bench_options(quick_help: str, *extra: tuple[str, dict]) -> list[tuple[str, dict]]:
    """The options every topic's ``bench`` command takes (``--out``, ``--quick`` with what it
    trims here, ``--seed``), with ``extra`` ones after ``--quick``."""
    return [("--out", dict(required=True, help="folder for results.json and log.txt")),
            ("--quick", dict(action="store_true", help=quick_help)), *extra,
            ("--seed", dict(type=int, default=0))]
