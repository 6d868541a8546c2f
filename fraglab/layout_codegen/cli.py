"""Command line: ``python -m fraglab.layout_codegen show|header`` (see the package docstring)."""
from __future__ import annotations

import argparse

from ..fragments import recording
from .emit import HEADER_ARCH, HEADER_PATH, generate, header, header_is_current
from .plan import KINDS, plan


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fraglab.layout_codegen",
                                 description="From a fragment layout to CUDA register code.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("show", help="print the plan and the generated code of kinds")
    s.add_argument("--arch", default=None)
    s.add_argument("kind", nargs="*")
    h = sub.add_parser("header", help=f"write {HEADER_PATH.name} from the {HEADER_ARCH} recording")
    h.add_argument("--check", action="store_true", help="only check that it is up to date")
    a = ap.parse_args(argv)
    if a.cmd == "header":
        if a.check:
            ok = header_is_current()
            print(f"{HEADER_PATH.name} is {'up to date' if ok else 'stale: run without --check'}")
            return 0 if ok else 1
        HEADER_PATH.write_text(header())
        print(f"wrote {HEADER_PATH}")
        return 0
    print(recording.source_line(a.arch))
    for name in a.kind or KINDS:
        p = plan(name, arch=a.arch)
        print(p.describe())
        print(generate(p))
    return 0
