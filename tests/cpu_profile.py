"""Where a test run's CPU time goes, by test and by unit of work, whatever else shares the machine.

pytest's ``--durations`` gives wall time, which on a shared 2-core machine measures the neighbours
as much as the tests. With ``FRAGLAB_CPU_PROFILE=FILE`` every process of the run (each xdist
worker) appends one JSON line per test to FILE: its node id, its unit of work
(``conftest.work_unit``), wall seconds, and CPU seconds of the process itself and of the child
processes it waited for (nbval's pytest and its notebook kernels, the grader's children,
compilers), setup, call and teardown together. Then::

    python tests/cpu_profile.py FILE [N]     # CPU seconds by unit and by file, the N largest

A module-scoped fixture's work lands on the first test that uses it (as in ``--durations``)."""
from __future__ import annotations

import json
import os
import resource
import sys
import time

import pytest

ENV = "FRAGLAB_CPU_PROFILE"


def _cpu() -> tuple[float, float]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    out = os.environ.get(ENV)
    if not out:
        yield
        return
    t0, (s0, c0) = time.perf_counter(), _cpu()
    yield
    t1, (s1, c1) = time.perf_counter(), _cpu()
    from conftest import work_unit
    line = json.dumps({"test": item.nodeid, "unit": work_unit(item.nodeid), "wall": round(t1 - t0, 3),
                       "cpu": round(s1 - s0, 3), "children": round(c1 - c0, 3), "pid": os.getpid()})
    with open(out, "a") as f:
        f.write(line + "\n")


def summary(path: str, n: int = 40) -> str:
    rows = [json.loads(line) for line in open(path) if line.strip()]
    by_unit, by_file = {}, {}
    for r in rows:
        total = r["cpu"] + r["children"]
        by_unit[r["unit"]] = by_unit.get(r["unit"], 0.0) + total
        f = r["unit"].split(":")[0]
        by_file[f] = by_file.get(f, 0.0) + total
    lines = [f"{len(rows)} tests, {sum(by_file.values()):.0f} CPU-s in all "
             f"({sum(r['cpu'] for r in rows):.0f} in the test processes, "
             f"{sum(r['children'] for r in rows):.0f} in their children)", "", "by unit:"]
    lines += [f"  {v:8.1f}  {k}" for k, v in sorted(by_unit.items(), key=lambda kv: -kv[1])[:n]]
    lines += ["", "by file:"]
    lines += [f"  {v:8.1f}  {k}" for k, v in sorted(by_file.items(), key=lambda kv: -kv[1])[:n]]
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40))
