"""Why warps wait: Nsight Compute's warp-state (stall) breakdown of a rung, in a child process.

``ncu`` profiles a child ``python -m fraglab.register_reuse profile --kernel K --size S``,
which runs the rung twice (the first call loads the module); ncu measures the second launch
(``--launch-skip 1 --launch-count 1``) with the sections ``WarpStateStats``, ``Occupancy``,
``SpeedOfLight`` and ``LaunchStats`` plus :data:`SHARED_METRICS`, and prints the raw page as CSV,
which :func:`parse_raw_csv` reads. The stall reasons are WarpStateStats' metrics
``smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio``: cycles a warp spends in
that state per instruction issued (``selected`` is 1 by definition), returned under the family
``smsp__average_warps``. The seed article's story is that ``smem`` stalls on the MIO throttle
(the shared-memory instruction queue is full) and ``tile1d`` much less; ncu 2025 on the H100
agrees.
"""
from __future__ import annotations

import csv
import io
import json

from .. import child, tools

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


def command(ncu_path, kernel: str, size: int, tiles: dict | None = None,
            metrics: tuple = ()) -> list[str]:
    """The ncu command line that profiles rung ``kernel`` (with ``tiles``, default its
    :data:`~.kernels.TILES`) at ``size``^3, collecting :data:`SECTIONS` and ``metrics``."""
    extra = ["--tiles", json.dumps(tiles)] if tiles else []
    return [str(ncu_path), "--csv", "--page", "raw", "--clock-control", "none",
            *[a for s in SECTIONS for a in ("--section", s)],
            *(["--metrics", ",".join(metrics)] if metrics else []),
            "--kernel-name", f"sgemm_{kernel}", "--launch-skip", "1", "--launch-count", "1",
            *child.python_command("fraglab.register_reuse", "profile", "--kernel", kernel,
                                  "--size", str(size), *extra)]


def _number(text: str):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return text


def parse_raw_csv(stdout: str) -> dict:
    """The metrics of the one profiled kernel from ``ncu --csv --page raw`` (a header row of
    metric names, a row of units, a row per kernel): ``{"stalls": {reason: value}, "units",
    "metrics": {name: value}}``; stall reasons are the ``*issue_stalled_<reason>*`` metrics."""
    lines = [ln for ln in stdout.splitlines() if ln.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
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


def stall_breakdown(kernels_: tuple = ("smem", "tile1d"), size: int = 4096, log=print,
                    tiles: dict | None = None, metrics: tuple = ()) -> dict:
    """Profile each rung of ``kernels_`` at ``size``^3 (``tiles[kernel]`` overrides its tiles)
    in a child process under ncu; skipped with the reason when ncu is missing, recorded with
    the failure when a child fails."""
    ncu_path = tools.find_tool("ncu", required=False)
    if ncu_path is None:
        log("  ncu not found: stall breakdown skipped")
        return {"skipped": "ncu (Nsight Compute) not found on this machine"}
    out = {"ncu": str(ncu_path), "size": size}
    for kernel in kernels_:
        cmd = command(ncu_path, kernel, size, (tiles or {}).get(kernel), metrics)
        try:
            r = child.run(cmd, timeout_s=240, check=False)
            rec = parse_raw_csv(r.stdout)
            rec["metrics"].update({k: v for k, v in _all(r.stdout).items() if k in metrics})
            rec["wall_s"] = r.wall_s
            top = _top(rec["stalls"])
            log(f"  {kernel}: " + ", ".join(f"{k} {v:.2f}" for k, v in top))
        except Exception as exc:
            rec = {"failure": f"{type(exc).__name__}: {exc}"[:1500], "command": " ".join(cmd)}
            log(f"  {kernel}: ncu FAILED: {rec['failure'][:300]}")
        out[kernel] = rec
    return out


def _all(stdout: str) -> dict:
    """Every column of the raw page, by metric name (for metrics asked for by name)."""
    lines = [ln for ln in stdout.splitlines() if ln.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    return {n: _number(v) for n, v in zip(rows[0], rows[-1])} if len(rows) >= 3 else {}


def _top(stalls: dict, n: int = 4) -> list[tuple[str, float]]:
    """The ``n`` largest stall reasons of the first metric family that has numbers."""
    for family in sorted(stalls):
        vals = {k: v for k, v in stalls[family].items() if isinstance(v, float)}
        if vals:
            return sorted(vals.items(), key=lambda kv: -kv[1])[:n]
    return []
