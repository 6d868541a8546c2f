"""The paper's measurement, parent side: one timed launch of each kernel per fresh process
(:mod:`.child_main` is what the process runs), in rounds over the setups, and its statistics."""
from __future__ import annotations

import json
import os
import time
from typing import Callable

import numpy as np

from .. import child
from ..child import ChildError
from ..stats import summary
from .kernels import VARIANTS
from .setups import SETUPS, jsonable_config, setup_config

MODULE = "fraglab.microbenchmark"


def parse_child_output(stdout: str) -> dict:
    """The record a measuring child printed (:func:`fraglab.child.parse`); it must hold the
    ``first`` timings."""
    rec = child.parse(stdout)
    if "first" not in rec:
        raise ChildError(f"the child's result has no 'first' timings: {json.dumps(rec)[:200]}")
    return rec


def child_command(config: dict, cubin: str | os.PathLike, later: int = 3) -> list[str]:
    return child.python_command(MODULE, "_child", "--config", json.dumps(jsonable_config(config)),
                                "--cubin", str(cubin), "--later", str(int(later)))


def run_child(config: dict, cubin, *, later: int = 3, timeout_s: float = 120,
              _command: Callable | None = None) -> dict:
    """Run one child process (``CUDA_MODULE_LOADING`` from ``config``); return its parsed record
    plus ``wall_s`` (raises ChildError)."""
    cmd = (_command or child_command)(config, cubin, later)
    r = child.run(cmd, timeout_s=timeout_s,
                  extra_env={"CUDA_MODULE_LOADING": config["module_loading"]})
    rec = parse_child_output(r.stdout)
    rec["wall_s"] = r.wall_s
    return rec


def device_info_in_child(timeout_s: float = 120) -> dict:
    """bench.device_info() from a child process, so that this process creates no CUDA context
    before the fresh-process measurements."""
    try:
        r = child.run(child.python_command(MODULE, "_info"), timeout_s=timeout_s,
                      extra_env={"CUDA_MODULE_LOADING": "LAZY"})
    except ChildError as e:
        raise ChildError(f"could not read the GPU's description: {e}") from None
    return child.parse(r.stdout)["device"]


def _round_line(res: dict, names: list[str]) -> str:
    parts = []
    for name in names:
        recs = res[name]["records"]
        if recs and all(w in r["first"] for r in recs for w in VARIANTS):
            m = {w: np.mean([r["first"][w] for r in recs]) for w in VARIANTS}
            parts.append(f"{name} {m['smem']:.4f}/{m['regs']:.4f} ms")
    return ", ".join(parts) if parts else "..."


def run_processes(setups: dict[str, dict] | None = None, processes: int = 20, *, cubin,
                  discard_rounds: int = 1, later: int = 3, budget_s: float | None = None,
                  min_rounds: int = 3, timeout_s: float = 120, log: Callable = print,
                  _command: Callable | None = None) -> dict:
    """The paper's measurement, for each setup (:data:`.setups.SETUPS`): ``processes`` fresh
    processes, each timing one launch of each kernel with CUDA events, in rounds that run one
    process per setup (their order rotates each round, so slow drift hits all setups alike). The
    first ``discard_rounds`` rounds are kept apart, as the paper's script discards its first runs.
    Stops early, after at least ``min_rounds`` measured rounds, when ``budget_s`` is spent.

    Returns ``{"variants": {name: {"config", "records", "discarded", "failures", "summary"}},
    "rounds", "stopped_by_budget", "elapsed_s"}`` (``"variants"``, the setups, is the record's
    key since the first H100 run; the record keeps it).
    """
    setups = dict(SETUPS if setups is None else setups)
    if processes < 1:
        raise ValueError(f"processes must be >= 1, got {processes}")
    cfgs = {name: setup_config(ov) for name, ov in setups.items()}
    res = {name: {"config": jsonable_config(cfg), "overrides": jsonable_config(setups[name]),
                  "records": [], "discarded": [], "failures": []} for name, cfg in cfgs.items()}
    names = list(cfgs)
    total = discard_rounds + processes
    t0 = time.perf_counter()
    stopped = False
    done = 0
    for rnd in range(total):
        k = rnd % len(names)
        for name in names[k:] + names[:k]:
            try:
                rec = run_child(cfgs[name], cubin, later=later, timeout_s=timeout_s,
                                _command=_command)
            except ChildError as e:
                res[name]["failures"].append({"round": rnd, "error": str(e)})
                if rnd == 0 and len(res[name]["failures"]) == 1:
                    log(f"  [paper-way] {name}: child failed: {str(e).splitlines()[0]}")
                continue
            rec["round"] = rnd
            res[name]["records" if rnd >= discard_rounds else "discarded"].append(rec)
        done = rnd + 1
        if rnd == 0 and not any(v["records"] or v["discarded"] for v in res.values()):
            raise ChildError("every child of the first round failed: " +
                             res[names[0]]["failures"][0]["error"])
        elapsed = time.perf_counter() - t0
        tag = "warm-up round (discarded)" if rnd < discard_rounds else "round"
        log(f"  [paper-way] {tag} {rnd + 1}/{total} ({elapsed:.0f} s): {_round_line(res, names)}")
        if (budget_s is not None and elapsed > budget_s and rnd + 1 < total
                and rnd + 1 - discard_rounds >= min_rounds):
            stopped = True
            log(f"  [paper-way] time budget of {budget_s:.0f} s spent: stopping after "
                f"{rnd + 1 - discard_rounds} measured rounds")
            break
    for name in names:
        res[name]["summary"] = summarize_processes(res[name]["records"])
    return {"variants": res, "rounds": done, "discard_rounds": discard_rounds,
            "stopped_by_budget": stopped, "elapsed_s": time.perf_counter() - t0,
            "later_launches": later}


def summarize_processes(records: list[dict]) -> dict:
    """Statistics of per-process records. ``speedup_of_means`` is the paper's figure (mean
    baseline time / mean in-register time over processes); ``speedup_of_medians`` is robust to
    outliers; ``later`` is the same single-launch timing of the 2nd, 3rd, ... launches."""
    out = {"n": len(records)}
    if not records:
        return out
    present = [w for w in VARIANTS if all(w in r["first"] for r in records)]
    out["first_ms"] = {w: summary([r["first"][w] for r in records]) for w in present}
    later = {w: [x for r in records for x in r.get("later", {}).get(w, [])] for w in present}
    out["later_ms"] = {w: summary(v) for w, v in later.items() if v}
    # host time inside the timed window: finding (and lazily loading) the kernel, then launching
    out["host_us"] = {}
    for part in ("load", "launch", "later_launch"):
        vals = {w: [x for r in records for x in np.atleast_1d(r.get("host_us", {}).get(part, {})
                                                            .get(w, []))] for w in present}
        out["host_us"][part] = {w: summary(v) for w, v in vals.items() if len(v)}
    out["wall_s"] = summary([r["wall_s"] for r in records if "wall_s" in r])
    modes = sorted({str(r.get("loading_mode")) for r in records})
    out["loading_mode_reported"] = modes
    if set(VARIANTS) <= set(present):
        f = out["first_ms"]
        out["speedup_of_means"] = f["smem"]["mean"] / f["regs"]["mean"]
        out["speedup_of_medians"] = f["smem"]["median"] / f["regs"]["median"]
        if set(VARIANTS) <= set(out["later_ms"]):
            lm = out["later_ms"]
            out["later_speedup_of_medians"] = lm["smem"]["median"] / lm["regs"]["median"]
    return out
