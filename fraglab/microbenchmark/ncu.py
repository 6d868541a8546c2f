"""Achieved occupancy from Nsight Compute: run ``ncu`` on a small driver process (``python -m
fraglab.microbenchmark _ncu_driver``) and parse its CSV."""
from __future__ import annotations

import csv
import io
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from .. import child, tools
from .kernels import VARIANTS, check_dtype, kernel_name, random_inputs

NCU_METRICS = (
    "sm__warps_active.avg.pct_of_peak_sustained_active",       # achieved occupancy
    "sm__maximum_warps_per_active_cycle_pct",                  # theoretical occupancy
    "launch__occupancy_limit_blocks", "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem", "launch__occupancy_limit_warps",
    "launch__registers_per_thread", "launch__shared_mem_per_block_static",
    "launch__grid_size", "launch__block_size",
    "smsp__sass_inst_executed_op_shared_ld.sum", "smsp__sass_inst_executed_op_shared_st.sum",
    "gpu__time_duration.sum",
)
ACHIEVED = NCU_METRICS[0]


def ncu_command(ncu: str, cubin, dtype: str = "bf16", tiles: Sequence[int] = (2048,),
                metrics: Sequence[str] = NCU_METRICS) -> list[str]:
    kernels = f"regex:^rowmax_(smem|regs)_{check_dtype(dtype)}$"
    return [str(ncu), "--csv", "--print-units", "base", "-k", kernels,
            "--metrics", ",".join(metrics),
            *child.python_command("fraglab.microbenchmark", "_ncu_driver", "--cubin", str(cubin),
                                  "--dtype", dtype, "--tiles", ",".join(str(int(t)) for t in tiles))]


def _number(s: str):
    s = s.strip().replace(",", "")
    try:
        v = float(s)
    except ValueError:
        return s
    return int(v) if v.is_integer() and "." not in s else v


def parse_ncu_csv(text: str) -> list[dict]:
    """Parse ``ncu --csv`` output (one row per kernel launch and metric, the "details" page):
    returns one dict per launch ``{"id", "kernel", "grid", "block", "metrics": {name: value}}``
    in launch order. Lines that are not CSV (``==PROF==`` messages, program output) are skipped."""
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        return []
    body = [l for l in lines[start:] if l.startswith('"')]
    launches: dict[str, dict] = {}
    for row in csv.DictReader(io.StringIO("\n".join(body))):
        key = row.get("ID")
        if key is None or row.get("Metric Name") is None:
            continue
        rec = launches.setdefault(key, {"id": _number(key), "kernel": row.get("Kernel Name", ""),
                                        "grid": row.get("Grid Size", ""),
                                        "block": row.get("Block Size", ""), "metrics": {}})
        rec["metrics"][row["Metric Name"]] = _number(row.get("Metric Value", ""))
    return sorted(launches.values(), key=lambda r: (str(type(r["id"])), r["id"]))


def run_ncu(cubin, dtype: str = "bf16", tiles: Sequence[int] = (2048,), *, timeout_s: float = 75,
            ncu: str | None = None) -> dict:
    """Run ncu on a small driver process (each kernel launched once per entry of ``tiles``) and
    parse it. Never raises for a tool problem: ``ok`` False and ``error`` say what went wrong (no
    ncu, no permission to the performance counters, a timeout, nothing parsed). ``ncu``: the
    tool's path (default: :func:`fraglab.tools.find_tool`)."""
    ncu = ncu or tools.find_tool("ncu", required=False)
    if not ncu:
        return {"ok": False, "error": "ncu (Nsight Compute) not found: install Nsight Compute "
                "(it ships with the CUDA toolkit) or put its folder on PATH"}
    out: dict = {}
    # If this ncu does not know one of the metrics it reports nothing at all: then try again
    # with the one metric the table needs.
    for metrics in (NCU_METRICS, (ACHIEVED, "launch__grid_size")):
        cmd = ncu_command(ncu, cubin, dtype, tiles, metrics)
        t0 = time.perf_counter()
        try:
            r = child.run(cmd, timeout_s=timeout_s, check=False)
        except child.ChildError as e:
            return {"ok": False, "command": cmd, "error": f"ncu: {e}"}
        out = interpret_ncu(r.stdout, r.stderr, r.returncode)
        out.update(command=cmd, seconds=time.perf_counter() - t0)
        if out["ok"] or "ERR_NVGPUCTRPERM" in out.get("error", ""):
            break
    return out


def interpret_ncu(stdout: str, stderr: str = "", returncode: int = 0) -> dict:
    """ncu's output -> ``{"ok", "kernels", "error"?, "returncode", "output_tail"}``."""
    text = stdout + "\n" + stderr
    out = {"returncode": returncode, "output_tail": "\n".join(text.strip().splitlines()[-15:])}
    kernels = parse_ncu_csv(stdout)
    out["kernels"] = kernels
    if "ERR_NVGPUCTRPERM" in text:
        out.update(ok=False, error="ncu may not read the GPU's performance counters here "
                   "(ERR_NVGPUCTRPERM: profiling is restricted to admin users on this machine; "
                   "see NVIDIA's note on ERR_NVGPUCTRPERM). Occupancy was not measured.")
    elif not kernels:
        out.update(ok=False, error=f"ncu exited with status {returncode} and reported no "
                   "kernel metrics (see output_tail)")
    else:
        out["ok"] = True
    return out


def drive(cubin_path, dtype: str, tiles: Sequence[int]) -> None:
    """The process ncu profiles: each kernel launched once per entry of ``tiles``."""
    import cupy as cp
    mod = cp.cuda.function.Module()
    mod.load(Path(cubin_path).read_bytes())
    fns = {w: mod.get_function(kernel_name(w, dtype)) for w in VARIANTS}
    for n in tiles:
        a, b = random_inputs(n, dtype)
        ag, bg = cp.asarray(a), cp.asarray(b)
        rows = cp.empty((n, 16), dtype=np.float32)
        for w in VARIANTS:
            fns[w]((n,), (32,), (ag, bg, rows, np.int32(n)))
        cp.cuda.runtime.deviceSynchronize()


def occupancy_table(ncu_result: dict) -> list[dict]:
    """One row per profiled launch: kernel, tiles, achieved and theoretical occupancy, limiters."""
    rows = []
    for k in ncu_result.get("kernels", []):
        m = k["metrics"]
        rows.append({"kernel": k["kernel"], "tiles": m.get("launch__grid_size"),
                     "achieved_pct": m.get(ACHIEVED),
                     "theoretical_pct": m.get("sm__maximum_warps_per_active_cycle_pct"),
                     "limit_blocks": m.get("launch__occupancy_limit_blocks"),
                     "limit_registers": m.get("launch__occupancy_limit_registers"),
                     "limit_shared_mem": m.get("launch__occupancy_limit_shared_mem"),
                     "limit_warps": m.get("launch__occupancy_limit_warps"),
                     "registers": m.get("launch__registers_per_thread"),
                     "smem_static": m.get("launch__shared_mem_per_block_static"),
                     "shared_ld": m.get("smsp__sass_inst_executed_op_shared_ld.sum"),
                     "shared_st": m.get("smsp__sass_inst_executed_op_shared_st.sum"),
                     "duration_ns": m.get("gpu__time_duration.sum")})
    return rows
