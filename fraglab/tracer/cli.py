"""The tracer's command line (``python -m fraglab.tracer``)::

    python -m fraglab.tracer kinds                       # the num_elements table
    python -m fraglab.tracer record [--out fraglab/layouts/sm_90.json]   # needs a GPU
    python -m fraglab.tracer show [--arch sm_90] [KIND ...]
"""
from __future__ import annotations

import argparse
from pathlib import Path

from .. import device
from ..fragments import KINDS, UnsupportedKind, get_kind, num_elements_table
from ..fragments import recording
from ..fragments.fit import describe_fit
from .decode import TraceError
from .live import layout, source_line
from .plots import format_table
from .record import record


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fraglab.tracer", description="Fragment layouts: which lane and register hold which element.")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("kinds", help="print every fragment kind and its num_elements")
    r = sub.add_parser("record", help="trace every kind on this GPU and write the JSON recording")
    r.add_argument("--out", help="output file (default fraglab/layouts/<arch>.json)")
    r.add_argument("--kinds", help="comma-separated kind names (default: all)")
    r.add_argument("--keep-going", action="store_true",
                   help="record the kinds that trace well, list the failures, exit 1")
    s = sub.add_parser("show", help="print layouts and fitted formulas")
    s.add_argument("--arch", default=None, help="a recording's arch (default: this machine)")
    s.add_argument("kind", nargs="*")
    a = p.parse_args(argv)
    if a.cmd == "kinds":
        print(num_elements_table())
        return 0
    if a.cmd == "record":
        names = a.kinds.split(",") if a.kinds else None
        print(device.status_line())
        rec = record(a.out, names, keep_going=a.keep_going)
        dest = Path(a.out) if a.out else recording.recording_path(rec["arch"])
        print(f"wrote {dest}: {len(rec['kinds'])} kinds traced, "
              f"{len(rec['unsupported'])} unsupported, {len(rec.get('failed', {}))} failed")
        return 1 if rec.get("failed") else 0
    print(source_line(a.arch))
    for name in a.kind or list(KINDS):
        k = get_kind(name)
        try:
            lay = layout(k, a.arch)
        except (recording.RecordingMissing, UnsupportedKind, TraceError) as e:
            print(f"{name}: {e}")
            continue
        print(f"\n{k.name}  {k.describe()}")
        print(format_table(lay, k.shape, "lane"))
        print(describe_fit(lay, k))
    return 0

