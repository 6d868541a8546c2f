"""Why warps wait: Nsight Compute's warp-state (stall) breakdown of one kernel, in a child process.

``ncu`` profiles a child ``python -m <topic> profile ...`` that launches the kernel twice (the
first call loads the module); ncu measures the second launch (``--launch-skip 1 --launch-count
1``, :func:`command`) with the sections :data:`SECTIONS` (and metrics asked for by name, e.g.
:data:`SHARED_METRICS`), and prints the raw page as CSV, which :func:`parse_raw_csv` reads. The
stall reasons are WarpStateStats' metrics
``smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio``: cycles a warp spends in
that state per instruction issued (``selected`` is 1 by definition), returned under the family
``smsp__average_warps``. :func:`stall_breakdown` runs one child per kernel and records each
result, or why there is none (ncu missing, a child failing, the time budget spent).

Chapters 07 (why ``smem`` stalls on the MIO throttle and ``tile1d`` much less) and 09 (the
stalls of the diet's steps) use it.
"""
from __future__ import annotations

import csv
import io
import time

from . import child, tools

#: Sections collected (documented names of ``ncu --list-sections``).
SECTIONS = ("WarpStateStats", "Occupancy", "SpeedOfLight", "LaunchStats")
#: Shared-memory traffic: wavefronts per shared load instruction show bank conflicts (1 for a
#: conflict-free 32-bit load, 4 for a 128-bit one without broadcasts).
SHARED_METRICS = ("smsp__inst_executed_op_shared_ld.sum",
                  "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
                  "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
                  "smsp__inst_executed.sum")
#: Raw metrics kept besides the stall reasons.
KEEP = ("gpu__time_duration.sum", "sm__warps_active.avg.pct_of_peak_sustained_active",
        "sm__throughput.avg.pct_of_peak_sustained_elapsed", "launch__registers_per_thread",
        "launch__occupancy_limit_registers", "smsp__cycles_active.avg",
        "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active")


def command(ncu_path, kernel_name: str, module: str, *args: str, metrics: tuple = (),
            sections: tuple = SECTIONS) -> list[str]:
    """The ncu command line that profiles the second launch of ``kernel_name`` in a child
    ``python -m module *args``, collecting ``sections`` (:data:`SECTIONS`) and ``metrics``."""
    return [str(ncu_path), "--csv", "--page", "raw", "--clock-control", "none",
            *[a for s in sections for a in ("--section", s)],
            *(["--metrics", ",".join(metrics)] if metrics else []),
            "--kernel-name", kernel_name, "--launch-skip", "1", "--launch-count", "1",
            *child.python_command(module, *args)]


def _number(text: str):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return text


def _rows(stdout: str) -> list[list[str]]:
    lines = [ln for ln in stdout.splitlines() if ln.startswith('"')]
    return list(csv.reader(io.StringIO("\n".join(lines))))


def parse_raw_csv(stdout: str) -> dict:
    """The metrics of the one profiled kernel from ``ncu --csv --page raw`` (a header row of
    metric names, a row of units, a row per kernel): ``{"stalls": {family: {reason: value}},
    "units", "metrics": {name: value}}``; stall reasons are the ``*issue_stalled_<reason>*``
    metrics, the other metrics those of :data:`KEEP`."""
    rows = _rows(stdout)
    if len(rows) < 3:
        raise ValueError("ncu printed no kernel row; its output ends with:\n"
                         + "\n".join(stdout.strip().splitlines()[-6:]))
    names, units, values = rows[0], rows[1], rows[-1]
    stalls, metrics, unit_of = {}, {}, {}
    for name, unit, value in zip(names, units, values):
        if "issue_stalled_" in name and ("ratio" in name or "pct" in name or unit):
            reason = name.split("issue_stalled_", 1)[1].split("_per_")[0].split(".")[0]
            stalls.setdefault(name.split("issue_stalled_")[0].rstrip("_"), {})[reason] = _number(value)
            unit_of[name] = unit
        elif name in KEEP:
            metrics[name] = _number(value)
            unit_of[name] = unit
    return {"stalls": stalls, "metrics": metrics, "units": unit_of}


def raw_columns(stdout: str) -> dict:
    """Every column of the raw page by metric name (for metrics asked for by name); ``{}``
    without a kernel row."""
    rows = _rows(stdout)
    return {n: _number(v) for n, v in zip(rows[0], rows[-1])} if len(rows) >= 3 else {}


def top_stalls(stalls: dict, n: int = 4) -> list[tuple[str, float]]:
    """The ``n`` largest stall reasons (cycles per issued instruction) of the first metric family
    that has numbers, largest first."""
    for family in sorted(stalls):
        vals = {k: v for k, v in stalls[family].items() if isinstance(v, float)}
        if vals:
            return sorted(vals.items(), key=lambda kv: -kv[1])[:n]
    return []


def stall_breakdown(names, command_of, log=print, *, timeout_s: float = 240.0,
                    budget_s: float | None = None, metrics: tuple = (), keep=None) -> dict:
    """Profile each of ``names`` under ncu, one child each: ``command_of(ncu_path, name)`` is its
    command line (:func:`command`). Returns ``{"ncu": path, name: parse_raw_csv's record (with
    ``metrics`` from the raw page and ``wall_s``)}``; a child that fails is recorded with its
    failure and command, a name left when ``budget_s`` (if given) is spent as skipped, and the
    whole run as skipped when ncu is missing. ``keep(name)``: also keep every raw column whose
    metric name it accepts (e.g. the pipe utilizations of a section)."""
    ncu_path = tools.find_tool("ncu", required=False)
    if ncu_path is None:
        log("  ncu not found: stall breakdown skipped")
        return {"skipped": "ncu (Nsight Compute) not found on this machine"}
    out: dict = {"ncu": str(ncu_path)}
    t0 = time.perf_counter()
    for name in names:
        timeout = timeout_s
        if budget_s is not None:
            left = budget_s - (time.perf_counter() - t0)
            if left < 20:
                out[name] = {"skipped": f"the stall section's {budget_s:.0f} s were spent"}
                continue
            timeout = min(timeout_s, left)
        cmd = command_of(ncu_path, name)
        try:
            r = child.run(cmd, timeout_s=timeout, check=False)
            rec = parse_raw_csv(r.stdout)
            rec["metrics"].update({k: v for k, v in raw_columns(r.stdout).items()
                                   if k in metrics or (keep is not None and keep(k))})
            rec["wall_s"] = r.wall_s
            log(f"  {name}: " + ", ".join(f"{k} {v:.2f}" for k, v in top_stalls(rec["stalls"])))
        except Exception as exc:
            rec = {"failure": f"{type(exc).__name__}: {exc}"[:1500], "command": " ".join(cmd)}
            log(f"  {name}: ncu FAILED: {rec['failure'][:300]}")
        out[name] = rec
    return out
