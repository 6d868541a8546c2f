"""Topic 04_microbenchmark: the paper's benchmark (Morales 2025, section 4), reproduced and measured.

The kernels (``kernels/04_microbenchmark.cu``) compute the 16 row maxima of ``C = A @ B`` for
each 16x16 tile, one WMMA per warp, and differ only in the epilogue: through shared memory
(``smem``, the baseline) or in registers (``regs``, the paper's permutation and quad reduction).

This module has four parts:

* **Wrappers**: :func:`rowmax` (checked arguments, poisoned outputs), :func:`launcher` (a
  zero-argument launch for :mod:`fraglab.bench`), :func:`random_inputs` and :func:`reference`
  (NumPy, float64 of the rounded inputs).
* **The paper's measurement**: one timed launch per fresh process, baseline first, averaged over
  processes (:func:`run_processes`, the child is ``python -m fraglab.microbenchmark _child``),
  and the same with ONE factor changed at a time (:data:`VARIANTS`: launch order, module
  loading, loading the kernels before timing, an untimed warm-up launch).
* **Sound measurements**: warm, in-process, thousands of launches in both orders through
  :func:`fraglab.bench.compare` (:func:`warm_compare`); the epilogue alone in SM cycles
  (:func:`epilogue_cycles`); power through NVML during a sustained loop and during the paper's
  process-relaunch loop (:class:`PowerSampler`); resources from ptxas and SASS
  (:func:`build_report`) and occupancy from Nsight Compute (:func:`run_ncu`).
* **The record**: ``python -m fraglab.microbenchmark all --out DIR`` runs everything (about 3.5
  minutes on an H100) and writes ``DIR/results.json`` (with :func:`fraglab.bench.device_info`)
  and ``DIR/run.log``; :func:`reproduce_table`, :func:`findings` and the ``plot_*`` functions
  turn that file into the chapter's tables and figures.

Command line::

    python -m fraglab.microbenchmark all --out book/data/04_microbenchmark
    python -m fraglab.microbenchmark paper --processes 30 [--variants paper,warmup] [--out DIR]
    python -m fraglab.microbenchmark warm|cycles|power|ncu|table3|check [--out DIR]
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from . import launch, toolchain
from .dtypes import from_bf16, to_bf16  # noqa: F401  (used here and re-exported)

KERNELS = "04_microbenchmark"
WAYS = ("smem", "regs")
DTYPES = ("f16", "bf16")
LABELS = {"smem": "baseline (shared memory)", "regs": "in-register"}
MAX_TILES = 2**31 - 1                  # gridDim.x limit; one tile per 32-thread block
RESULTS_DIR = toolchain.REPO_ROOT / "book" / "data" / "04_microbenchmark"
CHILD_MARKER = "FRAGLAB_CHILD "

#: The paper's figures (Morales 2025, Tables 2-5), to compare with. Its Table 5 prints energy in
#: "uJ", but its own formula, power (W) x runtime (ms), gives mJ (120.79 W x 0.103 ms = 12.4 mJ):
#: the numbers are kept, read as mJ.
PAPER = {
    "H100": {"runtime_ms": {"smem": 0.103, "regs": 0.017}, "speedup": 6.1,
             "occupancy_pct": {"smem": 21.17, "regs": 21.91},
             "registers": {"smem": 32, "regs": 24}, "smem_bytes": {"smem": 1024, "regs": 0},
             "barriers": {"smem": 1, "regs": 0}, "power_w": {"smem": 120.79, "regs": 120.81},
             "energy": {"smem": 12.45, "regs": 2.06}, "energy_gain": 6.0},
    "RTX 5080": {"runtime_ms": {"smem": 0.06, "regs": 0.0117}, "speedup": 5.5,
                 "occupancy_pct": {"smem": 42.97, "regs": 44.37},
                 "power_w": {"smem": 55.53, "regs": 55.82},
                 "energy": {"smem": 3.60, "regs": 0.67}, "energy_gain": 5.4},
}


# ================================================================================================
# Names, inputs, reference
# ================================================================================================

def _check_way(way: str) -> str:
    if way not in WAYS:
        raise ValueError(f"way must be one of {', '.join(WAYS)} (smem = the shared-memory "
                         f"baseline, regs = in registers), got {way!r}")
    return way


def _check_dtype(dtype: str) -> str:
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return dtype


def kernel_name(way: str, dtype: str = "bf16", clock: bool = False) -> str:
    """``rowmax_<smem|regs>_<f16|bf16>[_clock]``."""
    return f"rowmax_{_check_way(way)}_{_check_dtype(dtype)}" + ("_clock" if clock else "")






def storage_dtype(dtype: str):
    """NumPy dtype that holds tiles of ``dtype``: float16, or uint16 bit patterns for bf16."""
    return np.float16 if _check_dtype(dtype) == "f16" else np.uint16


def random_inputs(n_tiles: int, dtype: str = "bf16", rng=None) -> tuple[np.ndarray, np.ndarray]:
    """Fresh standard-normal tiles ``a, b`` of shape (n_tiles, 16, 16) in storage form (host)."""
    rng = np.random.default_rng() if rng is None else rng
    a = rng.standard_normal((n_tiles, 16, 16), dtype=np.float32)
    b = rng.standard_normal((n_tiles, 16, 16), dtype=np.float32)
    return encode(a, dtype), encode(b, dtype)


def encode(x, dtype: str) -> np.ndarray:
    """float values -> storage form of ``dtype`` (rounded to nearest)."""
    return x.astype(np.float16) if _check_dtype(dtype) == "f16" else to_bf16(x)


def decode(x, dtype: str) -> np.ndarray:
    """Storage form -> float64 values (exact)."""
    x = np.asarray(x)
    f = x.astype(np.float32) if _check_dtype(dtype) == "f16" else from_bf16(x)
    return f.astype(np.float64)


def reference(a, b, dtype: str = "bf16") -> np.ndarray:
    """Row maxima (n_tiles, 16) of A[t] @ B[t] in float64 from the stored (rounded) inputs.

    The maximum is ``np.fmax``, as the kernels' ``fmaxf``: a NaN element loses against a number,
    so a row is NaN only when all of it is NaN. Products are summed explicitly (not by BLAS) when
    an input is not finite, so that inf and NaN follow IEEE rules element by element.
    """
    af, bf = decode(a, dtype), decode(b, dtype)
    if np.isfinite(af).all() and np.isfinite(bf).all():
        c = af @ bf
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            c = np.stack([(af[t][:, :, None] * bf[t][None, :, :]).sum(axis=1)
                          for t in range(af.shape[0])])
    return np.fmax.reduce(c, axis=2)


def tolerance(a, b, dtype: str = "bf16") -> np.ndarray:
    """Per-row absolute tolerance: 1e-5 x the largest |A||B| of the row (f32 accumulation)."""
    af, bf = np.abs(decode(a, dtype)), np.abs(decode(b, dtype))
    with np.errstate(invalid="ignore"):
        scale = np.nan_to_num(af @ bf, nan=0.0, posinf=0.0).max(axis=2)
    return 1e-5 * scale + 1e-30


# ================================================================================================
# Wrappers
# ================================================================================================

def _check_inputs(a, b, dtype: str) -> int:
    want = storage_dtype(dtype)
    hint = "" if dtype == "f16" else " (bf16 tiles travel as uint16 bit patterns: see to_bf16)"
    try:
        launch.check_array("a", a, dtype=want, shape=(None, 16, 16))
        launch.check_array("b", b, dtype=want, shape=(None, 16, 16))
    except TypeError as e:
        raise TypeError(f"{e}{hint}") from None
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"a and b must hold the same number of tiles, got {a.shape[0]} and "
                         f"{b.shape[0]}")
    n = a.shape[0]
    if not 1 <= n <= MAX_TILES:
        raise ValueError(f"the number of tiles must be between 1 and {MAX_TILES}, got {n}")
    return n


def _require_dtype_support(dtype: str) -> None:
    from . import device
    ok, why = device.supports(dtype)
    if not ok:
        raise RuntimeError(why)


def launcher(a, b, *, way: str = "regs", dtype: str = "bf16", clock: bool = False,
             source: str | None = None):
    """Check the arguments once and return ``(go, rows, cycles)``: ``go()`` launches the kernel
    (no synchronisation) into the same poisoned outputs ``rows`` (n, 16) float32 and, for
    ``clock=True``, ``cycles`` (n,) int64 (else None). Use ``go`` with :mod:`fraglab.bench`."""
    _check_way(way)
    _check_dtype(dtype)
    n = _check_inputs(a, b, dtype)
    _require_dtype_support(dtype)
    fn = launch.get_kernel(KERNELS, kernel_name(way, dtype, clock), source=source)
    rows = launch.poisoned((n, 16), np.float32)
    if clock:
        cycles = launch.poisoned((n,), np.int64)
        args = (a, b, rows, cycles, np.int32(n), np.uint32(0))
    else:
        cycles = None
        args = (a, b, rows, np.int32(n))

    def go():
        launch.launch(fn, n, 32, args)
    return go, rows, cycles


def rowmax(a, b, *, way: str = "regs", dtype: str = "bf16"):
    """Row maxima (n_tiles, 16) float32 (CuPy) of ``A[t] @ B[t]`` for each tile.

    ``a``, ``b``: C-contiguous CuPy arrays (n_tiles, 16, 16), float16 for ``dtype='f16'`` or uint16
    bf16 bit patterns for ``'bf16'`` (sm_80+). ``way``: ``'smem'`` (baseline) or ``'regs'``.
    """
    go, rows, _ = launcher(a, b, way=way, dtype=dtype)
    go()
    return rows


def rowmax_cycles(a, b, *, way: str = "regs", dtype: str = "bf16"):
    """The ``_clock`` kernel: ``(rows, cycles)``, cycles (n_tiles,) int64 = SM clock cycles each
    warp spent in the epilogue (from the accumulator ready to the row maxima computed)."""
    go, rows, cycles = launcher(a, b, way=way, dtype=dtype, clock=True)
    go()
    return rows, cycles


def check_correctness(dtype: str = "bf16", tiles: Sequence[int] = (1, 1009), rng=None) -> list[dict]:
    """Run both kernels (and their clock variants) on fresh random inputs, outputs poisoned, and
    compare with :func:`reference`. One record per (way, clock, tiles): ``ok``, max error/tol."""
    import cupy as cp
    rng = np.random.default_rng() if rng is None else rng
    out = []
    for n in tiles:
        a, b = random_inputs(n, dtype, rng)
        ref, tol = reference(a, b, dtype), tolerance(a, b, dtype)
        ag, bg = cp.asarray(a), cp.asarray(b)
        for way in WAYS:
            for clock in (False, True):
                go, rows, cyc = launcher(ag, bg, way=way, dtype=dtype, clock=clock)
                go()
                got = rows.get()
                err = np.abs(got.astype(np.float64) - ref) / tol
                rec = {"dtype": dtype, "tiles": n, "way": way, "clock": clock,
                       "unwritten": int(np.isnan(got).sum()),
                       "max_err_over_tol": float(np.nanmax(err)) if err.size else 0.0}
                rec["ok"] = rec["unwritten"] == 0 and rec["max_err_over_tol"] <= 1.0
                if clock:
                    c = cyc.get()
                    rec["cycles_positive"] = bool((c > 0).all())
                    rec["ok"] = rec["ok"] and rec["cycles_positive"]
                out.append(rec)
    return out


# ================================================================================================
# Table 3 from our build: ptxas report and SASS
# ================================================================================================

_SASS: dict[str, str] = {}


def kernel_sass(arch: str, kernel: str) -> str:
    """SASS text of one kernel of this topic for ``arch`` (the file is disassembled once)."""
    from . import sass
    b = toolchain.compile(KERNELS, arch)
    if b.key not in _SASS:
        _SASS[b.key] = b.sass()
    return sass.function_text(_SASS[b.key], kernel)


def build_report(arch: str = "sm_90", dtype: str = "bf16") -> dict:
    """Per way: registers, shared memory, barriers (ptxas) and SASS counts, for ``arch``."""
    from . import sass
    b = toolchain.compile(KERNELS, arch)
    out = {}
    for way in WAYS:
        k = kernel_name(way, dtype)
        r = b.resources[k]
        text = kernel_sass(arch, k)
        ops, cls = sass.count_opcodes(text), sass.count_classes(text)
        out[way] = {"kernel": k, "registers": r["registers"], "smem_bytes": r["smem"],
                    "barriers": r["barriers"], "stack_frame": r["stack_frame"],
                    "spill_stores": r["spill_stores"], "spill_loads": r["spill_loads"],
                    "instructions": int(sum(cls.values())),
                    "sass": {c: int(v) for c, v in cls.items()},
                    "opcodes": {o: int(ops.get(o, 0)) for o in ("HMMA", "STS", "LDS", "BAR",
                                                                 "SHFL", "FMNMX", "STG")}}
    return {"arch": arch, "dtype": dtype, "ways": out}


#: Base opcodes of the two epilogues (the clock reads must enclose all of them).
EPILOGUE_OPS = ("STS", "BAR", "LDS", "SHFL", "FMNMX")


def _opcode(line: str) -> str:
    """Base opcode of a SASS listing line (``@!P0 BAR.SYNC 0x0`` -> ``BAR``)."""
    parts = line.split()
    if parts and parts[0].startswith("@"):
        parts = parts[1:]
    return parts[0].split(".")[0] if parts else ""


def bracket(lines: Sequence[str], epilogue_ops: Sequence[str] = EPILOGUE_OPS) -> dict:
    """Check a SASS listing (``sass.listing``) of a clock-timed kernel: exactly two clock reads,
    the first after the last HMMA and before the first epilogue instruction, the second after
    the last one. ``problems`` lists what is wrong (empty: ``ok``)."""
    base = [_opcode(l) for l in lines]
    clocks = [i for i, l in enumerate(lines) if "SR_CLOCK" in l]
    mma = [i for i, o in enumerate(base) if o == "HMMA"]
    epi = [i for i, o in enumerate(base) if o in epilogue_ops]
    problems = []
    if len(clocks) != 2:
        problems.append(f"{len(clocks)} reads of the clock (SR_CLOCKLO) in the SASS; expected 2")
    if not mma:
        problems.append("no HMMA in the SASS")
    if not epi:
        problems.append("no epilogue instruction (" + ", ".join(epilogue_ops) + ") in the SASS")
    if not problems:
        if clocks[0] < max(mma):
            problems.append("the first clock read comes before the last HMMA")
        if clocks[0] > min(epi):
            problems.append(f"{lines[min(epi)]!r} comes before the first clock read")
        if clocks[1] < max(epi):
            problems.append(f"{lines[max(epi)]!r} comes after the second clock read")
    return {"clock_lines": clocks, "mma_lines": mma, "epilogue_lines": epi,
            "ok": not problems, "problems": problems}


def clock_bracket(arch: str = "sm_90", way: str = "regs", dtype: str = "bf16") -> dict:
    """:func:`bracket` for one of this topic's ``_clock`` kernels; adds its ``listing``."""
    from . import sass
    k = kernel_name(way, dtype, clock=True)
    lines = sass.listing(kernel_sass(arch, k))
    return {"arch": arch, "kernel": k, **bracket(lines), "listing": lines}


# ================================================================================================
# The paper's measurement: one timed launch per fresh process
# ================================================================================================

#: The paper's procedure, as a child process of ours runs it: bf16, one tile (one block of one
#: warp), the baseline first, the CUDA default module loading (LAZY since CUDA 12.2), nothing
#: loaded or launched before the timed launches.
PAPER_CONFIG = {"dtype": "bf16", "tiles": 1, "order": ("smem", "regs"), "module_loading": "LAZY",
                "preload": False, "warmup": False}

#: One factor changed at a time from PAPER_CONFIG.
VARIANTS = {
    "paper": {},
    "regs_first": {"order": ("regs", "smem")},
    "eager": {"module_loading": "EAGER"},
    "preload": {"preload": True},
    "warmup": {"warmup": True},
}
VARIANT_LABELS = {
    "paper": "the paper's way (baseline first, lazy loading, cold)",
    "regs_first": "in-register kernel launched first",
    "eager": "CUDA_MODULE_LOADING=EAGER",
    "preload": "both kernels loaded before the timed launches",
    "warmup": "one untimed launch of each kernel first",
}
FACTOR_VALUES = {"order": {("smem", "regs"), ("regs", "smem")},
                 "module_loading": {"LAZY", "EAGER"}, "preload": {False, True},
                 "warmup": {False, True}, "dtype": set(DTYPES)}


def variant_config(overrides: dict | None = None) -> dict:
    """PAPER_CONFIG with ``overrides`` applied and checked (orders become tuples)."""
    cfg = dict(PAPER_CONFIG)
    for k, v in (overrides or {}).items():
        if k not in PAPER_CONFIG:
            raise ValueError(f"unknown factor {k!r}; known: {', '.join(PAPER_CONFIG)}")
        cfg[k] = tuple(v) if k == "order" else v
    if cfg["module_loading"] not in FACTOR_VALUES["module_loading"]:
        raise ValueError(f"module_loading must be LAZY or EAGER, got {cfg['module_loading']!r}")
    if sorted(cfg["order"]) != sorted(WAYS) and not (len(cfg["order"]) == 1
                                                     and cfg["order"][0] in WAYS):
        raise ValueError(f"order must be a permutation of {WAYS} (or one way), got {cfg['order']}")
    _check_dtype(cfg["dtype"])
    if not isinstance(cfg["tiles"], int) or not 1 <= cfg["tiles"] <= MAX_TILES:
        raise ValueError(f"tiles must be an int between 1 and {MAX_TILES}, got {cfg['tiles']!r}")
    return cfg


def one_factor_problems(variants: dict[str, dict]) -> list[str]:
    """What is wrong with a plan of variants (name -> overrides of PAPER_CONFIG): each one but a
    ``paper`` reference must change exactly one factor, and order, module_loading, preload and
    warmup must each be varied. Returns a list of problems (empty: the plan is sound)."""
    problems = []
    if "paper" not in variants or variants["paper"]:
        problems.append("the plan needs a 'paper' entry with no change: the reference to vary from")
    varied = set()
    for name, ov in variants.items():
        if name == "paper":
            continue
        try:
            cfg = variant_config(ov)
        except (ValueError, TypeError) as e:
            problems.append(f"{name}: {e}")
            continue
        changed = [k for k in PAPER_CONFIG if cfg[k] != PAPER_CONFIG[k]]
        if len(changed) != 1:
            problems.append(f"{name}: changes {len(changed)} factors ({', '.join(changed) or 'none'}); "
                            "change exactly one, so that a difference has one cause")
        else:
            varied.add(changed[0])
    for factor in ("order", "module_loading", "preload", "warmup"):
        if factor not in varied:
            problems.append(f"no variant changes {factor!r} alone")
    return problems


class ChildError(RuntimeError):
    """A measurement child process failed or printed no result line."""


def parse_child_output(stdout: str) -> dict:
    """The result a child printed: the JSON after the last line that starts with CHILD_MARKER."""
    found = None
    for line in stdout.splitlines():
        if line.startswith(CHILD_MARKER):
            found = line[len(CHILD_MARKER):]
    if found is None:
        tail = "\n".join(stdout.strip().splitlines()[-8:])
        raise ChildError(f"the child printed no line starting with {CHILD_MARKER.strip()!r}; "
                         f"its last output:\n{tail or '(nothing)'}")
    try:
        rec = json.loads(found)
    except json.JSONDecodeError as e:
        raise ChildError(f"the child's result line is not JSON ({e}): {found[:200]!r}") from None
    if not isinstance(rec, dict) or "first" not in rec:
        raise ChildError(f"the child's result has no 'first' timings: {found[:200]!r}")
    return rec


def child_command(config: dict, cubin: str | os.PathLike, later: int = 3) -> list[str]:
    return [sys.executable, "-m", "fraglab.microbenchmark", "_child",
            "--config", json.dumps(_jsonable_config(config)), "--cubin", str(cubin),
            "--later", str(int(later))]


def child_env(config: dict) -> dict:
    """The child's environment: ours, plus CUDA_MODULE_LOADING and a PYTHONPATH that finds us."""
    path = os.pathsep.join(p for p in (str(toolchain.REPO_ROOT), os.environ.get("PYTHONPATH", ""))
                           if p)
    return dict(os.environ, CUDA_MODULE_LOADING=config["module_loading"], PYTHONPATH=path,
                PYTHONUNBUFFERED="1")


def _jsonable_config(cfg: dict) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.items()}


def run_child(config: dict, cubin, *, later: int = 3, timeout_s: float = 120,
              _command: Callable | None = None) -> dict:
    """Run one child process; return its parsed record plus ``wall_s`` (raises ChildError)."""
    cmd = (_command or child_command)(config, cubin, later)
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=child_env(config),
                           cwd=str(toolchain.REPO_ROOT), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise ChildError(f"the child ran longer than {timeout_s} s") from None
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-8:])
        raise ChildError(f"the child exited with status {r.returncode}:\n{tail}")
    rec = parse_child_output(r.stdout)
    rec["wall_s"] = wall
    return rec


def run_processes(variants: dict[str, dict] | None = None, processes: int = 20, *, cubin,
                  discard_rounds: int = 1, later: int = 3, budget_s: float | None = None,
                  min_rounds: int = 3, timeout_s: float = 120, log: Callable = print,
                  _command: Callable | None = None) -> dict:
    """The paper's measurement, for each variant: ``processes`` fresh processes, each timing one
    launch of each kernel with CUDA events, in rounds that run one process per variant (their
    order rotates each round, so slow drift hits all variants alike). The first
    ``discard_rounds`` rounds are kept apart, as the paper's script discards its first runs.
    Stops early, after at least ``min_rounds`` measured rounds, when ``budget_s`` is spent.

    Returns ``{"variants": {name: {"config", "records", "discarded", "failures", "summary"}},
    "rounds", "stopped_by_budget", "elapsed_s"}``.
    """
    variants = dict(VARIANTS if variants is None else variants)
    if processes < 1:
        raise ValueError(f"processes must be >= 1, got {processes}")
    cfgs = {name: variant_config(ov) for name, ov in variants.items()}
    res = {name: {"config": _jsonable_config(cfg), "overrides": _jsonable_config(variants[name]),
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
        parts = []
        for name in names:
            recs = res[name]["records"]
            if recs and all(w in r["first"] for r in recs for w in WAYS):
                m = {w: np.mean([r["first"][w] for r in recs]) for w in WAYS}
                parts.append(f"{name} {m['smem']:.4f}/{m['regs']:.4f} ms")
        elapsed = time.perf_counter() - t0
        tag = "warm-up round (discarded)" if rnd < discard_rounds else "round"
        log(f"  [paper-way] {tag} {rnd + 1}/{total} ({elapsed:.0f} s): "
            + (", ".join(parts) if parts else "..."))
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


def _stats(x) -> dict:
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return {"n": 0}
    return {"n": int(x.size), "mean": float(x.mean()), "median": float(np.median(x)),
            "p10": float(np.percentile(x, 10)), "p90": float(np.percentile(x, 90)),
            "min": float(x.min()), "max": float(x.max()),
            "std": float(x.std(ddof=1)) if x.size > 1 else 0.0}


def summarize_processes(records: list[dict]) -> dict:
    """Statistics of per-process records. ``speedup_of_means`` is the paper's figure (mean
    baseline time / mean in-register time over processes); ``speedup_of_medians`` is robust to
    outliers; ``later`` is the same single-launch timing of the 2nd, 3rd, ... launches."""
    out = {"n": len(records)}
    if not records:
        return out
    ways = [w for w in WAYS if all(w in r["first"] for r in records)]
    out["first_ms"] = {w: _stats([r["first"][w] for r in records]) for w in ways}
    later = {w: [x for r in records for x in r.get("later", {}).get(w, [])] for w in ways}
    out["later_ms"] = {w: _stats(v) for w, v in later.items() if v}
    # host time inside the timed window: finding (and lazily loading) the kernel, then launching
    out["host_us"] = {}
    for part in ("load", "launch", "later_launch"):
        vals = {w: [x for r in records for x in np.atleast_1d(r.get("host_us", {}).get(part, {})
                                                            .get(w, []))] for w in ways}
        out["host_us"][part] = {w: _stats(v) for w, v in vals.items() if len(v)}
    out["wall_s"] = _stats([r["wall_s"] for r in records if "wall_s" in r])
    modes = sorted({str(r.get("loading_mode")) for r in records})
    out["loading_mode_reported"] = modes
    if set(WAYS) <= set(ways):
        f = out["first_ms"]
        out["speedup_of_means"] = f["smem"]["mean"] / f["regs"]["mean"]
        out["speedup_of_medians"] = f["smem"]["median"] / f["regs"]["median"]
        if set(WAYS) <= set(out["later_ms"]):
            lm = out["later_ms"]
            out["later_speedup_of_medians"] = lm["smem"]["median"] / lm["regs"]["median"]
    return out


def _child_main(args) -> int:
    """One fresh process timing the first launches, as the paper's executable does."""
    t_start = time.perf_counter()
    cfg = variant_config(json.loads(args.config))
    import cupy as cp
    t_import = time.perf_counter()
    cubin = Path(args.cubin).read_bytes()
    n, dtype = cfg["tiles"], cfg["dtype"]
    store = storage_dtype(dtype)
    # Like the paper's cudaMalloc: creates the context; no kernel runs (cupy.empty launches none).
    a = cp.empty((n, 16, 16), dtype=store)
    b = cp.empty((n, 16, 16), dtype=store)
    rows = cp.empty((n, 16), dtype=np.float32)
    cp.cuda.runtime.deviceSynchronize()
    t_ctx = time.perf_counter()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    state: dict = {"module": None, "fns": {}}
    args_k = (a, b, rows, np.int32(n))
    grid, block = (n,), (32,)

    # The module is loaded from the cubin, as the CUDA runtime loads a program's own module:
    # with LAZY loading at the first launch of one of its kernels, with EAGER at initialisation.
    # The child loads it itself (not through launch.get_kernel) because *when* that happens is
    # the variable under test.
    def function(way):
        if way not in state["fns"]:
            if state["module"] is None:
                state["module"] = cp.cuda.function.Module()
                state["module"].load(cubin)
            state["fns"][way] = state["module"].get_function(kernel_name(way, dtype))
        return state["fns"][way]

    if cfg["module_loading"] == "EAGER":
        state["module"] = cp.cuda.function.Module()
        state["module"].load(cubin)
    if cfg["preload"]:
        for w in cfg["order"]:
            function(w)
    if cfg["warmup"]:
        for w in cfg["order"]:
            function(w)(grid, block, args_k)
        cp.cuda.runtime.deviceSynchronize()

    def timed(way):
        # CUDA events around one launch; the function is looked up (and, lazily, loaded) inside,
        # where the runtime does it for a program like the paper's. Called directly (not through
        # launch.launch) to keep Python's share of the window as small as the paper's C++.
        start.record()
        h0 = time.perf_counter_ns()
        fn = function(way)
        h1 = time.perf_counter_ns()
        fn(grid, block, args_k)
        h2 = time.perf_counter_ns()
        stop.record()
        stop.synchronize()
        return cp.cuda.get_elapsed_time(start, stop), (h1 - h0) / 1e3, (h2 - h1) / 1e3

    first, host_load, host_launch = {}, {}, {}
    for w in cfg["order"]:
        first[w], host_load[w], host_launch[w] = timed(w)
    later = {w: [] for w in cfg["order"]}
    later_launch = {w: [] for w in cfg["order"]}
    for _ in range(args.later):
        for w in cfg["order"]:
            ms, _, hl = timed(w)
            later[w].append(ms)
            later_launch[w].append(hl)
    try:
        import ctypes
        mode = ctypes.c_int(0)
        ctypes.CDLL("libcuda.so.1").cuModuleGetLoadingMode(ctypes.byref(mode))
        loading = {1: "EAGER", 2: "LAZY"}.get(mode.value, str(mode.value))
    except Exception:
        loading = None
    rec = {"first": first, "host_us": {"load": host_load, "launch": host_launch,
                                       "later_launch": later_launch},
           "later": later, "loading_mode": loading,
           "order": list(cfg["order"]),
           "startup_s": {"import": t_import - t_start, "context": t_ctx - t_import}}
    print(CHILD_MARKER + json.dumps(rec), flush=True)
    return 0


# ================================================================================================
# Sound measurements, in process
# ================================================================================================

def fill_tiles(sm_count: int, waves: int = 1, blocks_per_sm: int = 32) -> int:
    """Tiles that fill the GPU ``waves`` times: one-warp blocks are limited to ``blocks_per_sm``
    resident blocks per SM (32 on sm_80 .. sm_90), hence SMs x 32 x waves."""
    return int(sm_count) * int(blocks_per_sm) * int(waves)


def warm_compare(n_tiles: int, dtype: str = "bf16", *, first: str = "smem", repeat: int = 3000,
                 rounds: int = 10, warmup: int = 50, flush_l2: bool = False, rng=None,
                 progress: bool = False):
    """Both kernels on the same fresh inputs, timed warm in this process with
    :func:`fraglab.bench.compare` (CUDA events, gate, warm-up, rotating rounds). ``first`` is the
    kernel warmed up and timed first in round 1. Ratios are baseline / in-register."""
    import cupy as cp
    from . import bench
    _check_way(first)
    a, b = random_inputs(n_tiles, dtype, rng)
    ag, bg = cp.asarray(a), cp.asarray(b)
    go = {w: launcher(ag, bg, way=w, dtype=dtype)[0] for w in WAYS}
    order = [first] + [w for w in WAYS if w != first]
    return bench.compare({w: go[w] for w in order}, baseline="smem", warmup=warmup,
                         repeat=repeat, rounds=rounds, flush_l2=flush_l2, progress=progress)


def epilogue_cycles(n_tiles: int, dtype: str = "bf16", *, launches: int = 200, warmup: int = 5,
                    rng=None) -> dict:
    """SM cycles of the epilogue, per warp, from the ``_clock`` kernels. Launches alternate
    between the two kernels; ``warmup`` launches of each are recorded apart (``first``).
    Returns ``{way: {"cycles": [...], "first": [...]}}``."""
    import cupy as cp
    a, b = random_inputs(n_tiles, dtype, rng)
    ag, bg = cp.asarray(a), cp.asarray(b)
    ref, tol = reference(a, b, dtype), tolerance(a, b, dtype)
    runs = {w: launcher(ag, bg, way=w, dtype=dtype, clock=True) for w in WAYS}
    out = {w: {"cycles": [], "first": []} for w in WAYS}
    for i in range(warmup + launches):
        for w in (WAYS if i % 2 == 0 else WAYS[::-1]):
            go, rows, cyc = runs[w]
            cyc.fill(-1)
            go()
            c = cyc.get()
            out[w]["first" if i < warmup else "cycles"].extend(int(v) for v in c)
    for w in WAYS:
        got = runs[w][1].get().astype(np.float64)
        if not (np.abs(got - ref) <= tol).all():
            raise RuntimeError(f"the {w} clock kernel computed wrong row maxima")
    return out


# ================================================================================================
# Power (NVML)
# ================================================================================================

class PowerSampler:
    """Sample the GPU's power in a thread every ``period_s`` while a ``with`` block runs, and
    read NVML's energy counter at both ends (mean power = energy / time, independent of sampling).

    ``result()`` gives ``seconds``, ``t_s``/``power_w`` (the samples), ``mean_w_samples``,
    ``mean_w_energy`` (None if the counter is unavailable) and ``source`` (which NVML reading).
    Raises ``RuntimeError`` on entry when NVML (``pynvml``, from nvidia-ml-py) is not usable.
    """

    def __init__(self, pci_bus_id: str | None = None, index: int = 0, period_s: float = 0.025):
        self.pci_bus_id, self.index, self.period_s = pci_bus_id, index, period_s
        self.t, self.p = [], []

    def __enter__(self):
        try:
            import pynvml as nv
        except ImportError as e:
            raise RuntimeError("pynvml is not installed (pip install nvidia-ml-py)") from e
        self.nv = nv
        try:
            nv.nvmlInit()
        except Exception as e:
            raise RuntimeError(f"NVML is not usable here: {e}") from e
        try:
            self.h = nv.nvmlDeviceGetHandleByPciBusId(self.pci_bus_id) if self.pci_bus_id \
                else nv.nvmlDeviceGetHandleByIndex(self.index)
        except Exception:
            self.h = nv.nvmlDeviceGetHandleByIndex(self.index)
        self.source = self._pick_source()
        self.e0 = self._energy()
        self.t0 = time.perf_counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _pick_source(self) -> str:
        nv = self.nv
        fid = getattr(nv, "NVML_FI_DEV_POWER_INSTANT", None)
        if fid is not None:
            try:
                if self._instant(fid) is not None:
                    self.fid = fid
                    return "nvml field POWER_INSTANT"
            except Exception:
                pass
        return "nvmlDeviceGetPowerUsage"

    def _instant(self, fid):
        v = self.nv.nvmlDeviceGetFieldValues(self.h, [fid])[0]
        if getattr(v, "nvmlReturn", 1) != 0:
            return None
        kind = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}.get(
            getattr(v, "valueType", 1), "uiVal")
        return float(getattr(v.value, kind)) / 1000.0

    def read_w(self) -> float:
        if self.source.startswith("nvml field"):
            w = self._instant(self.fid)
            if w is not None:
                return w
        return self.nv.nvmlDeviceGetPowerUsage(self.h) / 1000.0

    def _energy(self):
        try:
            return self.nv.nvmlDeviceGetTotalEnergyConsumption(self.h) / 1000.0   # mJ -> J
        except Exception:
            return None

    def _run(self):
        while not self._stop.is_set():
            try:
                w = self.read_w()
                self.t.append(time.perf_counter() - self.t0)
                self.p.append(w)
            except Exception:
                pass
            self._stop.wait(self.period_s)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.t1 = time.perf_counter()
        self.e1 = self._energy()
        try:
            self.nv.nvmlShutdown()
        except Exception:
            pass
        return False

    def result(self) -> dict:
        secs = self.t1 - self.t0
        energy = (self.e1 - self.e0) if (self.e0 is not None and self.e1 is not None) else None
        return {"seconds": secs, "t_s": self.t, "power_w": self.p, "source": self.source,
                "period_s": self.period_s,
                "mean_w_samples": float(np.mean(self.p)) if self.p else None,
                "mean_w_energy": energy / secs if energy is not None and secs > 0 else None,
                "energy_j": energy}


def _w(x) -> str:
    return "n/a" if x is None else f"{x:.1f}"


def _mean_power(r: dict) -> float | None:
    return r.get("mean_w_energy") or r.get("mean_w_samples")


def sustained_power(launches: dict[str, Callable], seconds: float = 4.0, *, idle_s: float = 2.0,
                    pci_bus_id: str | None = None, period_s: float = 0.025,
                    log: Callable = print) -> dict:
    """Mean power while each callable is launched back to back for ``seconds`` (in this process,
    warm), and while the GPU idles for ``idle_s`` first. Each entry adds ``launches`` (count)
    and ``launch_rate_hz``."""
    import cupy as cp
    out = {}
    with PowerSampler(pci_bus_id, period_s=period_s) as s:
        time.sleep(idle_s)
    out["idle"] = s.result()
    log(f"  [power] idle: {_w(_mean_power(out['idle']))} W")
    for name, go in launches.items():
        for _ in range(20):
            go()
        cp.cuda.runtime.deviceSynchronize()
        n = 0
        with PowerSampler(pci_bus_id, period_s=period_s) as s:
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                for _ in range(256):
                    go()
                n += 256
                cp.cuda.get_current_stream().synchronize()
        r = s.result()
        r["launches"] = n
        r["launch_rate_hz"] = n / r["seconds"]
        out[name] = r
        log(f"  [power] {name}: {_w(_mean_power(r))} W, {n} launches "
            f"({r['launch_rate_hz'] / 1e3:.0f} k/s)")
    return out


def relaunch_power(cubin, seconds: float = 6.0, *, ways=WAYS, config: dict | None = None,
                   pci_bus_id: str | None = None, period_s: float = 0.05, log: Callable = print,
                   _command: Callable | None = None) -> dict:
    """The paper's power method, short: for each kernel, fresh processes that each launch it once
    are started back to back for ``seconds`` while NVML is sampled. Measures mostly what the GPU
    draws while processes start and stop, not the kernel."""
    out = {}
    for way in ways:
        cfg = variant_config({**(config or {}), "order": (way,)})
        n = fails = 0
        with PowerSampler(pci_bus_id, period_s=period_s) as s:
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                try:
                    run_child(cfg, cubin, later=0, _command=_command)
                    n += 1
                except ChildError:
                    fails += 1
        r = s.result()
        r.update(processes=n, failures=fails)
        out[way] = r
        log(f"  [power, relaunch loop] {way}: {_w(_mean_power(r))} W over {n} processes")
    return out


# ================================================================================================
# Nsight Compute: achieved occupancy
# ================================================================================================

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


def find_ncu() -> str | None:
    for c in (shutil.which("ncu"), "/usr/local/cuda/bin/ncu"):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def ncu_command(ncu: str, cubin, dtype: str = "bf16", tiles: Sequence[int] = (2048,),
                metrics: Sequence[str] = NCU_METRICS) -> list[str]:
    kernels = f"regex:^rowmax_(smem|regs)_{_check_dtype(dtype)}$"
    return [ncu, "--csv", "--print-units", "base", "-k", kernels,
            "--metrics", ",".join(metrics),
            sys.executable, "-m", "fraglab.microbenchmark", "_ncu_driver", "--cubin", str(cubin),
            "--dtype", dtype, "--tiles", ",".join(str(int(t)) for t in tiles)]


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
    ncu, no permission to the performance counters, a timeout, nothing parsed)."""
    ncu = ncu or find_ncu()
    if ncu is None:
        return {"ok": False, "error": "ncu (Nsight Compute) not found on PATH or in /usr/local/cuda/bin"}
    path = os.pathsep.join(p for p in (str(toolchain.REPO_ROOT), os.environ.get("PYTHONPATH", ""))
                           if p)
    env = dict(os.environ, PYTHONPATH=path, PYTHONUNBUFFERED="1")
    out: dict = {}
    # If this ncu does not know one of the metrics it reports nothing at all: then try again
    # with the one metric the table needs.
    for metrics in (NCU_METRICS, (ACHIEVED, "launch__grid_size")):
        cmd = ncu_command(ncu, cubin, dtype, tiles, metrics)
        t0 = time.perf_counter()
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env,
                               cwd=str(toolchain.REPO_ROOT))
        except subprocess.TimeoutExpired:
            return {"ok": False, "command": cmd, "error": f"ncu ran longer than {timeout_s} s"}
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


def _ncu_driver_main(args) -> int:
    import cupy as cp
    cubin = Path(args.cubin).read_bytes()
    mod = cp.cuda.function.Module()
    mod.load(cubin)
    fns = {w: mod.get_function(kernel_name(w, args.dtype)) for w in WAYS}
    for n in (int(t) for t in args.tiles.split(",")):
        a, b = random_inputs(n, args.dtype)
        ag, bg = cp.asarray(a), cp.asarray(b)
        rows = cp.empty((n, 16), dtype=np.float32)
        for w in WAYS:
            fns[w]((n,), (32,), (ag, bg, rows, np.int32(n)))
        cp.cuda.runtime.deviceSynchronize()
    return 0


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


# ================================================================================================
# Running everything
# ================================================================================================

class Log:
    """Print (flushed) and append to a log file."""

    def __init__(self, path: Path | None = None):
        self.path = path
        self.t0 = time.perf_counter()
        if path:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")

    def __call__(self, msg: str = "") -> None:
        print(msg, flush=True)
        if self.path:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(msg + "\n")

    def phase(self, name: str) -> None:
        self(f"[{time.perf_counter() - self.t0:6.1f} s] == {name}")


def _info_main(args) -> int:
    from . import bench
    print(CHILD_MARKER + json.dumps({"first": {}, "device": bench.device_info()}), flush=True)
    return 0


def device_info_in_child(timeout_s: float = 120) -> dict:
    """bench.device_info() from a child process, so that this process creates no CUDA context
    before the fresh-process measurements."""
    r = subprocess.run([sys.executable, "-m", "fraglab.microbenchmark", "_info"],
                       capture_output=True, text=True, timeout=timeout_s,
                       env=child_env({"module_loading": "LAZY"}), cwd=str(toolchain.REPO_ROOT))
    if r.returncode != 0:
        raise ChildError("could not read the GPU's description: " + (r.stdout + r.stderr)[-2000:])
    return parse_child_output(r.stdout)["device"]


def write_cubin(arch: str, folder) -> Path:
    """Compile this topic for ``arch`` and write its cubin into ``folder`` (for child processes)."""
    folder = Path(folder)
    b = toolchain.compile(KERNELS, arch)
    p = folder / f"{KERNELS}.{arch}.cubin"
    p.write_bytes(b.cubin)
    return p


#: Seconds of each power loop: (relaunch loop per kernel, sustained loop per load, idle), for a
#: full run and for ``--quick``.
POWER_S = {"full": (6.0, 4.0, 2.0), "quick": (3.0, 1.0, 1.0)}

#: What ``all`` does by default and roughly how long each part takes on an H100 (seconds).
PLAN = {"setup": 15, "paper_way": 110, "power_relaunch": 14, "ncu": 30, "check": 5, "warm": 25,
        "cycles": 5, "power_sustained": 20}


def run_all(out: Path, *, processes: int = 20, paper_budget_s: float = 110.0,
            ncu: bool = True, power: bool = True, quick: bool = False) -> dict:
    """Everything, in an order that keeps this process free of a CUDA context while the
    fresh-process measurements run. Writes ``out/results.json`` and ``out/run.log``."""
    from . import bench
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    log = Log(out / "run.log")
    t0 = time.perf_counter()
    speed = "quick" if quick else "full"
    if quick:
        processes, paper_budget_s = 3, 20.0
    log(f"fraglab.microbenchmark all -> {out}/results.json (planned about "
        f"{sum(PLAN.values()) if not quick else 60} s; progress below)")
    doc: dict = {"plan_s": PLAN, "quick": quick, "settings": {"processes": processes,
                                                               "paper_budget_s": paper_budget_s}}
    log.phase("setup: the GPU (from a child process) and the build")
    info = device_info_in_child()
    arch = "sm_" + info["compute_capability"].replace(".", "")
    log(f"  {info['name']} ({arch}), driver {info['driver_version']}, CUDA runtime "
        f"{info['cuda_runtime']}, NVRTC {info['nvrtc_version']}, CuPy {info['cupy_version']}")
    doc["device_before"] = info
    doc["build"] = {a: build_report(a) for a in dict.fromkeys((arch, "sm_90", "sm_120"))}
    doc["clock_bracket"] = {a: {w: {k: v for k, v in clock_bracket(a, w).items() if k != "listing"}
                                for w in WAYS} for a in dict.fromkeys((arch, "sm_90"))}
    for w, r in doc["build"][arch]["ways"].items():
        log(f"  {w}: {r['registers']} registers, {r['smem_bytes']} B shared, {r['barriers']} "
            f"barrier(s), {r['opcodes']['STS']} STS / {r['opcodes']['LDS']} LDS / "
            f"{r['opcodes']['SHFL']} SHFL")
    tmp = Path(tempfile.mkdtemp(prefix="fraglab04_"))
    try:
        cubin = write_cubin(arch, tmp)

        log.phase(f"the paper's way: {processes} fresh processes per variant, interleaved")
        doc["paper_way"] = run_processes(VARIANTS, processes, cubin=cubin, log=log,
                                         budget_s=paper_budget_s)
        for name, v in doc["paper_way"]["variants"].items():
            s = v["summary"]
            if s.get("n"):
                log(f"  {name:11} n={s['n']:3}  baseline {s['first_ms']['smem']['mean']:.4f} ms, "
                    f"in-register {s['first_ms']['regs']['mean']:.4f} ms (means): "
                    f"{s['speedup_of_means']:.2f}x  (loading mode {s['loading_mode_reported']})")

        pci = info.get("pci_bus_id")
        if power:
            log.phase("power, the paper's way: a process relaunch loop per kernel")
            try:
                doc["power_relaunch"] = relaunch_power(cubin, POWER_S[speed][0],
                                                       pci_bus_id=pci, log=log)
            except RuntimeError as e:
                doc["power_relaunch"] = {"error": str(e)}
                log(f"  not measured: {e}")

        if ncu:
            log.phase("occupancy: Nsight Compute on a small driver process")
            sms = info["sm_count"]
            tiles = (2048, fill_tiles(sms), fill_tiles(sms, 8))
            doc["ncu"] = run_ncu(cubin, "bf16", tiles)
            doc["ncu"]["tiles"] = list(tiles)
            if doc["ncu"]["ok"]:
                for r in occupancy_table(doc["ncu"]):
                    log(f"  {r['kernel']:16} {str(r['tiles']):>6} tiles: achieved {r['achieved_pct']}% "
                        f"(theoretical {r['theoretical_pct']}%, block limit {r['limit_blocks']}, "
                        f"register limit {r['limit_registers']})")
            else:
                log(f"  not measured: {doc['ncu']['error']}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    log.phase("correctness (both dtypes, 1 and 1009 tiles, all four kernels each)")
    rng = np.random.default_rng()
    checks = [r for d in DTYPES for r in check_correctness(d, (1, 1009), rng)]
    doc["correctness"] = checks
    bad = [r for r in checks if not r["ok"]]
    log(f"  {len(checks) - len(bad)}/{len(checks)} correct" + (f"; WRONG: {bad}" if bad else ""))

    log.phase("warm, in process: fraglab.bench.compare, both orders")
    sms = info["sm_count"]
    configs = [("one block", 1, False), ("one block, L2 flushed", 1, True),
               ("paper's profiling grid", 2048, False), ("one full wave", fill_tiles(sms), False),
               ("8 full waves", fill_tiles(sms, 8), False)]
    rep = 300 if quick else 2000
    doc["warm"] = []
    for dtype in DTYPES:
        for label, n, flush in configs:
            if dtype == "f16" and label not in ("one block", "8 full waves"):
                continue
            for first in WAYS:
                cmp = warm_compare(n, dtype, first=first, repeat=rep, flush_l2=flush, rng=rng,
                                   rounds=10)
                d = cmp.to_dict()
                doc["warm"].append({"label": label, "tiles": n, "dtype": dtype, "first": first,
                                    "flush_l2": flush, "comparison": d})
                t = cmp.timings
                log(f"  {dtype:4} {label:24} {first} first: baseline {t['smem'].median_ms * 1e3:7.2f} us "
                    f"[{t['smem'].p10_ms * 1e3:.2f}-{t['smem'].p90_ms * 1e3:.2f}], in-register "
                    f"{t['regs'].median_ms * 1e3:7.2f} us [{t['regs'].p10_ms * 1e3:.2f}-"
                    f"{t['regs'].p90_ms * 1e3:.2f}]: {cmp.ratios()['regs']:.3f}x")

    log.phase("the epilogue alone: clock64 cycles per warp")
    doc["cycles"] = {}
    for label, n, launches, warm in (("one block", 1, 40 if quick else 400, 5),
                                     ("8 full waves", fill_tiles(sms, 8), 1, 1)):
        c = epilogue_cycles(n, "bf16", launches=launches, warmup=warm, rng=rng)
        for w in WAYS:
            c[w]["stats"] = _stats(c[w]["cycles"])
            if n > 1:   # keep the record small: statistics of all, 4096 samples for the plots
                c[w]["first"] = _stats(c[w]["first"])
                keep = rng.choice(len(c[w]["cycles"]), min(4096, len(c[w]["cycles"])),
                                  replace=False)
                c[w]["cycles"] = [c[w]["cycles"][i] for i in np.sort(keep)]
        doc["cycles"][label] = {"tiles": n, **c}
        log(f"  {label:12}: baseline median {c['smem']['stats']['median']:.0f} cycles, "
            f"in-register {c['regs']['stats']['median']:.0f} cycles")

    if power:
        log.phase("power, sustained: back-to-back launches in this process")
        launches = {}
        for label, n in (("one block", 1), ("8 full waves", fill_tiles(sms, 8))):
            a, b = random_inputs(n, "bf16", rng)
            import cupy as cp
            ag, bg = cp.asarray(a), cp.asarray(b)
            for w in WAYS:
                launches[f"{w}, {label}"] = launcher(ag, bg, way=w, dtype="bf16")[0]
        try:
            doc["power_sustained"] = sustained_power(launches, POWER_S[speed][1],
                                                     idle_s=POWER_S[speed][2],
                                                     pci_bus_id=pci, log=log)
        except RuntimeError as e:
            doc["power_sustained"] = {"error": str(e)}
            log(f"  not measured: {e}")

    doc["elapsed_s"] = time.perf_counter() - t0
    doc["clocks_after"] = bench.clock_check()
    doc["reproduce"] = reproduce_table(doc)
    doc["findings"] = findings(doc)
    bench.save_results(out / "results.json", _compact(doc),
                       {"log": "run.log",
                        "command": "python -m fraglab.microbenchmark all --out " + str(out)})
    log.phase(f"done in {doc['elapsed_s']:.0f} s: {out / 'results.json'}")
    log(format_table(doc["reproduce"]))
    for line in doc["findings"]:
        log("- " + line)
    return doc


# ================================================================================================
# Reading a record: the reproduce-or-refute table, findings, plots
# ================================================================================================

def _compact(x, key: str = ""):
    """Round long float lists (times in ms, power samples) so that the record stays small:
    6 decimals of a millisecond is 1 ns, below the CUDA events' resolution."""
    if isinstance(x, dict):
        return {k: _compact(v, k) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        if key in ("times_ms", "t_s", "power_w") and all(isinstance(v, float) for v in x):
            return [round(v, 6 if key == "times_ms" else 3) for v in x]
        return [_compact(v, key) for v in x]
    return x


def load(path=None) -> dict:
    """The ``results`` of a record written by ``all``, with ``device`` and ``created_utc`` added.
    Default: ``$FRAGLAB_MICROBENCHMARK_RESULTS``, else the book's record."""
    from . import bench
    path = path or os.environ.get("FRAGLAB_MICROBENCHMARK_RESULTS") or RESULTS_DIR / "results.json"
    doc = bench.load_results(Path(path))
    res = dict(doc["results"])
    res["device"] = doc["device"]
    res["created_utc"] = doc.get("created_utc")
    return res


def _warm(doc: dict, label: str, dtype: str = "bf16") -> dict | None:
    """Medians over both orders of a warm configuration: {way: median_ms, ratio, p10/p90}."""
    runs = [w for w in doc.get("warm", []) if w["label"] == label and w["dtype"] == dtype]
    if not runs:
        return None
    out = {}
    for way in WAYS:
        x = np.concatenate([np.asarray(r["comparison"]["timings"][way]["times_ms"]) for r in runs])
        out[way] = float(np.median(x))
        out[way + "_p10"] = float(np.percentile(x, 10))
        out[way + "_p90"] = float(np.percentile(x, 90))
    out["ratio"] = out["smem"] / out["regs"]
    out["ratio_by_order"] = {r["first"]: r["comparison"]["ratios"]["regs"] for r in runs}
    return out


def _paper_way(doc: dict, name: str = "paper") -> dict | None:
    v = doc.get("paper_way", {}).get("variants", {}).get(name)
    return v["summary"] if v and v["summary"].get("n") else None


def _cycles(doc: dict, label: str = "one block") -> dict | None:
    c = doc.get("cycles", {}).get(label)
    if not c:
        return None
    return {w: float(c[w]["stats"]["median"]) if "stats" in c[w] else
            float(np.median(c[w]["cycles"])) for w in WAYS}


def _fmt(x, spec=".3g", unit="") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{x:{spec}}{unit}"


def _verdict(paper, ours, rel: float = 0.25) -> str:
    if paper is None or ours is None:
        return "not measured"
    if isinstance(paper, int) and isinstance(ours, (int, np.integer)):
        return "same" if paper == ours else "differs"
    return "reproduced" if abs(math.log(ours / paper)) <= math.log(1 + rel) else "not reproduced"


def reproduce_table(doc: dict, gpu: str = "H100") -> list[dict]:
    """Rows: claim, the paper's figure, ours measured the paper's way, ours measured soundly, and
    a verdict for each of ours (numbers within 25 % of the paper's count as reproduced)."""
    P = PAPER[gpu]
    pw = _paper_way(doc)
    w1, wg = _warm(doc, "one block"), _warm(doc, "8 full waves")
    cyc = _cycles(doc)
    arch = "sm_" + str(doc.get("device", doc.get("device_before", {})).get(
        "compute_capability", "9.0")).replace(".", "")
    build = doc.get("build", {}).get(arch) or doc.get("build", {}).get("sm_90")
    rows = []

    def row(claim, paper, ours_pw, ours_sound, fmt=".3g", note=""):
        rows.append({"claim": claim, "paper": paper, "paper_way": ours_pw, "sound": ours_sound,
                     "verdict_paper_way": _verdict(paper, ours_pw),
                     "verdict_sound": _verdict(paper, ours_sound), "fmt": fmt, "note": note})

    f = pw["first_ms"] if pw else None
    row("Table 2: baseline runtime (ms)", P["runtime_ms"]["smem"],
        f["smem"]["mean"] if f else None, w1["smem"] if w1 else None, ".4f",
        "sound: warm median, one block")
    row("Table 2: in-register runtime (ms)", P["runtime_ms"]["regs"],
        f["regs"]["mean"] if f else None, w1["regs"] if w1 else None, ".4f",
        "sound: warm median, one block")
    row("Table 2: speedup (x)", P["speedup"], pw["speedup_of_means"] if pw else None,
        w1["ratio"] if w1 else None, ".2f", "paper's way: ratio of means over processes")
    row("speedup, a grid that fills the GPU 8 times (x)", None, None,
        wg["ratio"] if wg else None, ".2f", "the paper reports throughput as comparable")
    row("epilogue, baseline (SM cycles)", None, None, cyc["smem"] if cyc else None, ".0f",
        "clock64 around the epilogue, one warp")
    row("epilogue, in-register (SM cycles)", None, None, cyc["regs"] if cyc else None, ".0f")
    for key, label in (("registers", "registers per thread"), ("smem_bytes", "shared memory (bytes)"),
                       ("barriers", "barriers")):
        for way in WAYS:
            ours = build["ways"][way][key] if build else None
            row(f"Table 3: {label}, {LABELS[way]}", P[key][way], None, ours, "d",
                f"ptxas, {build['arch']}" if build else "")
    occ = {}
    if doc.get("ncu", {}).get("ok"):
        for r in occupancy_table(doc["ncu"]):
            if r["tiles"] == 2048:
                occ["smem" if "_smem_" in r["kernel"] else "regs"] = r["achieved_pct"]
    for way in WAYS:
        row(f"Table 3: achieved occupancy (%), {LABELS[way]}", P["occupancy_pct"][way], None,
            occ.get(way), ".1f", "ncu, 2048 one-warp blocks (the paper's profiling grid)")
    pr, ps = doc.get("power_relaunch", {}), doc.get("power_sustained", {})
    for way in WAYS:
        ours_pw = _mean_power(pr[way]) if way in pr else None
        key = f"{way}, 8 full waves"
        ours_s = _mean_power(ps[key]) if key in ps else None
        row(f"Table 4: power (W), {LABELS[way]}", P["power_w"][way], ours_pw, ours_s, ".1f",
            "paper's way: process relaunch loop; sound: back-to-back launches, 8 full waves")
    e_pw, e_s = {}, {}
    for way in WAYS:
        if f and way in pr and _mean_power(pr[way]):
            e_pw[way] = _mean_power(pr[way]) * f[way]["mean"]                  # W x ms = mJ
        key = f"{way}, one block"
        if w1 and key in ps and _mean_power(ps[key]):
            e_s[way] = _mean_power(ps[key]) * w1[way]
    for way in WAYS:
        row(f"Table 5: energy per operation (mJ), {LABELS[way]}", P["energy"][way],
            e_pw.get(way), e_s.get(way), ".3g",
            "power (W) x runtime (ms); the paper prints uJ for the same product; sound: "
            "sustained one-block power x warm median")
    row("Table 5: efficiency gain (x)", P["energy_gain"],
        e_pw["smem"] / e_pw["regs"] if len(e_pw) == 2 else None,
        e_s["smem"] / e_s["regs"] if len(e_s) == 2 else None, ".2f")
    return rows


def format_table(rows: list[dict]) -> str:
    """The reproduce-or-refute table as text."""
    head = ("claim", "paper (H100)", "ours, paper's way", "ours, sound way", "verdict")
    body = []
    for r in rows:
        fmt = r["fmt"]

        def f(x):
            if x is None:
                return "-"
            return format(int(x), "d") if fmt == "d" else format(float(x), fmt)
        v = []
        if r["paper"] is not None:
            if r["paper_way"] is not None:
                v.append(f"paper's way {r['verdict_paper_way']}")
            if r["sound"] is not None:
                v.append(f"sound {r['verdict_sound']}")
        body.append((r["claim"], f(r["paper"]), f(r["paper_way"]), f(r["sound"]),
                     "; ".join(v) or ("measured" if r["sound"] is not None else "not measured")))
    widths = [max(len(x[i]) for x in (head, *body)) for i in range(len(head))]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    return "\n".join([line(head), line(["-" * w for w in widths]), *map(line, body)])


def findings(doc: dict) -> list[str]:
    """Sentences that follow from a record: each factor's effect on the paper's ratio, the warm
    ratios, the epilogue's cycles. Thresholds are stated in the sentences."""
    out = []
    pw = _paper_way(doc)
    if pw:
        f = pw["first_ms"]
        out.append(f"The paper's way ({pw['n']} fresh processes, baseline first): baseline "
                   f"{f['smem']['mean'] * 1e3:.1f} us, in-register {f['regs']['mean'] * 1e3:.1f} us "
                   f"(means), a ratio of {pw['speedup_of_means']:.2f}x (paper: 6.1x on an H100).")
        if "later_ms" in pw and set(WAYS) <= set(pw["later_ms"]):
            lm = pw["later_ms"]
            out.append(f"In the same processes, later launches timed the same way take "
                       f"{lm['smem']['median'] * 1e3:.1f} us and {lm['regs']['median'] * 1e3:.1f} us "
                       f"(medians): {pw['later_speedup_of_medians']:.2f}x.")
        for name, label in VARIANT_LABELS.items():
            s = _paper_way(doc, name)
            if name == "paper" or not s:
                continue
            out.append(f"Changing one thing, {label}: baseline {s['first_ms']['smem']['mean'] * 1e3:.1f} us, "
                       f"in-register {s['first_ms']['regs']['mean'] * 1e3:.1f} us, "
                       f"{s['speedup_of_means']:.2f}x.")
    w1, wg = _warm(doc, "one block"), _warm(doc, "8 full waves")
    if w1:
        out.append(f"Warm, in process (both orders pooled): one block {w1['smem'] * 1e3:.2f} us "
                   f"vs {w1['regs'] * 1e3:.2f} us, {w1['ratio']:.3f}x (by order: " +
                   ", ".join(f"{k} first {v:.3f}x" for k, v in w1["ratio_by_order"].items()) + ").")
    if wg:
        out.append(f"Warm, 8 full waves of one-warp blocks: {wg['smem'] * 1e3:.2f} us vs "
                   f"{wg['regs'] * 1e3:.2f} us, {wg['ratio']:.3f}x.")
    cyc = _cycles(doc)
    if cyc:
        mhz = (doc.get("clocks_after") or {}).get("sm_mhz") or \
            (doc.get("device_before", {}).get("clocks", {}) or {}).get("sm_max_mhz")
        d = cyc["smem"] - cyc["regs"]
        ns = f" = {d / mhz * 1e3:.0f} ns at {mhz:.0f} MHz" if mhz else ""
        out.append(f"The epilogue alone: {cyc['smem']:.0f} cycles through shared memory, "
                   f"{cyc['regs']:.0f} in registers: {d:.0f} cycles saved per warp{ns}.")
        if w1 and mhz:
            gap_us = (w1["smem"] - w1["regs"]) * 1e3
            out.append(f"The warm one-block difference is {gap_us * 1e3:.0f} ns; the epilogue "
                       f"accounts for {d / mhz * 1e3:.0f} ns of it.")
    if pw and w1:
        target = w1["ratio"]
        close = [VARIANT_LABELS[n] for n in VARIANT_LABELS if n != "paper" and _paper_way(doc, n)
                 and abs(math.log(_paper_way(doc, n)["speedup_of_means"] / target)) < math.log(1.25)]
        if close:
            out.append("Single changes that bring the fresh-process ratio within 25 % of the warm "
                       "ratio: " + "; ".join(close) + ".")
        else:
            out.append("No single change brings the fresh-process ratio within 25 % of the warm "
                       "ratio.")
    return out


def conclusion(doc: dict) -> list[str]:
    """The chapter's conclusion, as paragraphs that follow from a record by stated rules: a ratio
    "reproduces" the paper's when within 25 %; a single change "explains" the gap when it brings
    the fresh-process ratio within 25 % of the warm one."""
    pw, w1, wg = _paper_way(doc), _warm(doc, "one block"), _warm(doc, "8 full waves")
    if not (pw and w1):
        return ["The record lacks the fresh-process or the warm measurements: no conclusion."]
    near = lambda x, y: abs(math.log(x / y)) <= math.log(1.25)
    paper = PAPER["H100"]["speedup"]
    out = []
    s_pw, s_w = pw["speedup_of_means"], w1["ratio"]
    out.append(f"Measured the paper's way, the in-register kernel comes out {s_pw:.2f}x faster "
               f"than the baseline (the paper: {paper}x on an H100): "
               + ("the paper's figure is reproduced." if near(s_pw, paper) else
                  "the paper's figure is not reproduced.")
               + f" Measured warm in one process, one block, both orders: {s_w:.2f}x"
               + (f"; on a grid that fills the GPU eight times: {wg['ratio']:.2f}x." if wg else "."))
    effects = {n: _paper_way(doc, n)["speedup_of_means"] for n in VARIANTS
               if n != "paper" and _paper_way(doc, n)}
    explain = [n for n, v in effects.items() if near(v, s_w)]
    if not near(s_pw, s_w):
        if explain:
            out.append("The two differ, and changing one factor alone closes the gap: "
                       + "; ".join(f"{VARIANT_LABELS[n]} ({effects[n]:.2f}x)" for n in explain)
                       + ". What the paper's method times is therefore not the epilogue but "
                       "what those changes remove from the timed launch.")
        else:
            out.append("The two differ, and no single factor closes the gap: "
                       + "; ".join(f"{VARIANT_LABELS[n]}: {v:.2f}x" for n, v in effects.items())
                       + ". The factors add up; the chapter's tables show each one's share.")
        if "regs_first" in effects and effects["regs_first"] < 1:
            out.append(f"With the in-register kernel launched first, the ratio turns to "
                       f"{effects['regs_first']:.2f}x: the kernel launched first in a process "
                       "pays for something the second does not, whichever kernel it is.")
    else:
        out.append("The fresh-process and warm ratios agree: the launch method does not change "
                   "the comparison on this machine.")
    cyc = _cycles(doc)
    if cyc:
        d = cyc["smem"] - cyc["regs"]
        out.append(f"The epilogue itself is {'cheaper' if d > 0 else 'not cheaper'} in registers: "
                   f"{cyc['regs']:.0f} against {cyc['smem']:.0f} SM cycles per warp "
                   f"({cyc['smem'] / cyc['regs']:.1f}x fewer cycles), a real saving of "
                   f"{d:.0f} cycles, small next to a whole launch.")
    return out


class recorded_compares:
    """Record every :func:`fraglab.bench.compare` call made inside a ``with`` block: the order of
    its variants, its settings and its result (``.calls``). Progress output is turned off.

    ``stand_in=True`` (no GPU) runs compare with a stand-in timer that returns made-up times
    (baseline about 3.2 us, in-register about 3.0 us, 3 % noise) without calling the variants:
    the plan of a measurement can then be checked anywhere, its numbers cannot.
    """

    def __init__(self, stand_in: bool = False, rng=None):
        self.stand_in = stand_in
        self.rng = np.random.default_rng() if rng is None else rng
        self.calls: list[dict] = []

    def __enter__(self):
        from . import bench
        self.bench, self.real = bench, bench.compare
        names: dict[int, str] = {}

        def timer(fn, n, flush_l2):
            base = {"smem": 0.0032, "regs": 0.0030}.get(names.get(id(fn)), 0.0031)
            return list(base * (1 + 0.03 * self.rng.standard_normal(n)))

        def spy(variants, **kw):
            names.update({id(f): k for k, f in variants.items()})
            kw["progress"] = False
            if self.stand_in:
                kw["_timer"] = timer
            result = self.real(variants, **kw)
            self.calls.append({"order": list(variants), "settings": {
                k: v for k, v in kw.items() if k != "_timer"}, "result": result})
            return result
        bench.compare = spy
        return self

    def __exit__(self, *exc):
        self.bench.compare = self.real
        return False


def warm_plan_problems(calls: list[dict], summary) -> list[str]:
    """What a warm measurement lacks (empty: sound). ``calls`` from :class:`recorded_compares`;
    ``summary`` maps "smem first" and "regs first" to ``{way: {"median_us", "p10_us",
    "p90_us"}, "speedup": baseline median / in-register median}``."""
    problems = []
    if len(calls) < 2:
        return [f"bench.compare was called {len(calls)} time(s); measure both orders: two calls"]
    firsts = {c["order"][0] for c in calls if sorted(c["order"]) == sorted(WAYS)}
    for w in WAYS:
        if w not in firsts:
            problems.append(f"no bench.compare call of both kernels with {w!r} first")
    by_first = {}
    for c in calls:
        st = c["settings"]
        warm = st.get("warmup", 10)
        rep = st.get("repeat", 200)
        if warm < 1:
            problems.append(f"a call with {c['order'][0]!r} first has no warm-up (warmup={warm})")
        if rep < 1000:
            problems.append(f"a call with {c['order'][0]!r} first times {rep} launches per kernel; "
                            "take at least 1000")
        by_first[c["order"][0]] = c["result"]
    if not isinstance(summary, dict):
        return problems + [f"the summary must be a dict, got {type(summary).__name__}"]
    for w in WAYS:
        key = f"{w} first"
        if key not in summary:
            problems.append(f"the summary has no {key!r} entry")
            continue
        if w not in by_first:
            continue
        got, cmp = summary[key], by_first[w]
        for way in WAYS:
            t = cmp.timings[way]
            want = {"median_us": t.median_ms * 1e3, "p10_us": t.p10_ms * 1e3,
                    "p90_us": t.p90_ms * 1e3}
            entry = got.get(way) if isinstance(got, dict) else None
            if not isinstance(entry, dict):
                problems.append(f"summary[{key!r}] has no {way!r} entry with median and spread")
                continue
            for k, v in want.items():
                if k not in entry:
                    problems.append(f"summary[{key!r}][{way!r}] lacks {k!r} (report the spread)")
                elif not math.isclose(float(entry[k]), v, rel_tol=1e-6):
                    problems.append(f"summary[{key!r}][{way!r}][{k!r}] = {entry[k]}, but that "
                                    f"run measured {v:.6g}")
        sp = got.get("speedup") if isinstance(got, dict) else None
        ratio = cmp.timings["smem"].median_ms / cmp.timings["regs"].median_ms
        if sp is None or not math.isclose(float(sp), ratio, rel_tol=1e-6):
            problems.append(f"summary[{key!r}]['speedup'] = {sp}, expected baseline median / "
                            f"in-register median = {ratio:.6g}")
    return problems


def clock_source_problems(source: str, kernel: str, arches=toolchain.ARCHES) -> dict:
    """Compile a learner's clock-timed in-register kernel for each target and check its SASS with
    :func:`bracket` (epilogue: SHFL and FMNMX), plus: both clock reads predicated (made to wait
    with ``clock_after``), no shared memory. Returns ``{arch: [problems]}``."""
    from . import sass
    out = {}
    for arch in arches:
        b = toolchain.compile("lab04_clock.cu", arch, source=source)
        if kernel not in b.resources:
            out[arch] = [f"no kernel named {kernel!r} (found {b.kernels})"]
            continue
        text = b.sass(kernel)
        lines = sass.listing(text)
        r = bracket(lines, ("SHFL", "FMNMX"))
        probs = list(r["problems"])
        for i in r["clock_lines"]:
            if not lines[i].startswith("@"):
                probs.append(f"the clock read {lines[i]!r} does not wait for anything: read it "
                             "with clock_after(dependency)")
        if sass.count_classes(text)["shared"]:
            probs.append("the in-register epilogue uses shared memory")
        out[arch] = probs
    return out


def cycles_of_source(source: str, kernel: str, *, launches: int = 50, rng=None) -> dict:
    """Run a learner's clock-timed f16 kernel (signature of the ``_clock`` kernels) on one tile
    ``launches`` times: ``{"cycles": [...], "rows_ok": bool}``."""
    import cupy as cp
    rng = np.random.default_rng() if rng is None else rng
    a, b = random_inputs(1, "f16", rng)
    fn = launch.get_kernel("lab04_clock.cu", kernel, source=source)
    ag, bg = cp.asarray(a), cp.asarray(b)
    rows = launch.poisoned((1, 16), np.float32)
    cyc = launch.poisoned((1,), np.int64)
    out = []
    for _ in range(launches):
        launch.launch(fn, 1, 32, (ag, bg, rows, cyc, np.int32(1), np.uint32(0)), sync=True)
        out.append(int(cyc.get()[0]))
    got = rows.get().astype(np.float64)
    return {"cycles": out, "rows_ok": bool((np.abs(got - reference(a, b, "f16"))
                                            <= tolerance(a, b, "f16")).all())}


def _plt():
    import matplotlib.pyplot as plt
    return plt


def plot_time_distributions(doc: dict, ax=None):
    """Times of both kernels, per method (log scale): first launch in a fresh process, later
    launches timed the same way, and warm in-process (one block; 8 full waves)."""
    plt = _plt()
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.8))
    groups = []
    pw = doc.get("paper_way", {}).get("variants", {}).get("paper")
    if pw and pw["records"]:
        groups.append(("fresh process,\nfirst launch", {w: [r["first"][w] for r in pw["records"]] for w in WAYS}))
        groups.append(("fresh process,\nlater launches", {w: [x for r in pw["records"]
                                                              for x in r.get("later", {}).get(w, [])]
                                                          for w in WAYS}))
    for label in ("one block", "8 full waves"):
        runs = [w for w in doc.get("warm", []) if w["label"] == label and w["dtype"] == "bf16"]
        if runs:
            groups.append((f"warm, in process,\n{label}", {w: np.concatenate(
                [r["comparison"]["timings"][w]["times_ms"] for r in runs]) for w in WAYS}))
    for gi, (label, data) in enumerate(groups):
        for k, w in enumerate(WAYS):
            x = np.asarray(data[w], dtype=np.float64) * 1e3
            if x.size == 0:
                continue
            pos = 3 * gi + k
            ax.boxplot([x], positions=[pos], widths=0.7, showfliers=False,
                       patch_artist=True, boxprops={"facecolor": f"C{k}", "alpha": 0.5},
                       medianprops={"color": "k"})
            jitter = np.random.default_rng(0).uniform(-0.25, 0.25, min(x.size, 400))
            ax.scatter(pos + jitter, np.random.default_rng(1).choice(x, jitter.size, replace=False),
                       s=3, color=f"C{k}", alpha=0.4)
    ax.set_xticks([3 * g + 0.5 for g in range(len(groups))], [g[0] for g in groups], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("time per launch (us)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=f"C{k}", alpha=0.5) for k in range(2)]
    ax.legend(handles, [LABELS[w] for w in WAYS], fontsize=8, loc="upper right")
    ax.grid(alpha=0.3, axis="y")
    return ax


def plot_speedups(doc: dict, ax=None):
    """Baseline / in-register per method, with the paper's 6.1x as a line."""
    plt = _plt()
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.6))
    labels, vals, colors = [], [], []
    for name in VARIANTS:
        s = _paper_way(doc, name)
        if s:
            labels.append("fresh: " + name.replace("_", " "))
            vals.append(s["speedup_of_means"])
            colors.append("C3")
    pw = _paper_way(doc)
    if pw and "later_speedup_of_medians" in pw:
        labels.append("fresh: later\nlaunches")
        vals.append(pw["later_speedup_of_medians"])
        colors.append("C1")
    for label in ("one block", "one block, L2 flushed", "paper's profiling grid", "one full wave",
                  "8 full waves"):
        w = _warm(doc, label)
        if w:
            labels.append("warm: " + label)
            vals.append(w["ratio"])
            colors.append("C0")
    ax.bar(range(len(vals)), vals, color=colors)
    for i, v in enumerate(vals):
        ax.text(i, v, f"{v:.2f}", ha="center", va="bottom", fontsize=7)
    ax.axhline(PAPER["H100"]["speedup"], color="k", ls="--", lw=1, label="paper, H100: 6.1x")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xticks(range(len(vals)), labels, rotation=40, ha="right", fontsize=7)
    ax.set_ylabel("baseline time / in-register time")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    return ax


def plot_cycles(doc: dict, axes=None):
    """Histograms of the epilogue's SM cycles per warp, one panel per grid."""
    plt = _plt()
    labels = [k for k in ("one block", "8 full waves") if k in doc.get("cycles", {})]
    if axes is None:
        _, axes = plt.subplots(1, max(1, len(labels)), figsize=(8, 3), squeeze=False)
        axes = axes[0]
    for ax, label in zip(axes, labels):
        c = doc["cycles"][label]
        allc = np.concatenate([np.asarray(c[w]["cycles"], dtype=float) for w in WAYS])
        hi = np.percentile(allc, 99.5)
        bins = np.linspace(0, hi * 1.05, 60)
        for k, w in enumerate(WAYS):
            x = np.asarray(c[w]["cycles"], dtype=float)
            ax.hist(np.clip(x, 0, hi * 1.05), bins=bins, alpha=0.6, color=f"C{k}",
                    label=f"{LABELS[w]}: median {np.median(x):.0f}")
        n = c["tiles"]
        ax.set_title(f"{label} ({n} warp{'s' if n > 1 else ''} per launch)", fontsize=9)
        ax.set_xlabel("SM cycles in the epilogue")
        ax.legend(fontsize=7)
    return axes


def plot_power(doc: dict, ax=None):
    """Power samples over time: idle, the sustained loops, the relaunch loops."""
    plt = _plt()
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.2))
    t_off = 0.0
    for src, prefix in ((doc.get("power_sustained", {}), "sustained: "),
                        (doc.get("power_relaunch", {}), "relaunch loop: ")):
        for name, r in src.items():
            if not isinstance(r, dict) or not r.get("power_w"):
                continue
            t = np.asarray(r["t_s"]) + t_off
            ax.plot(t, r["power_w"], lw=0.8, label=prefix + name)
            t_off = t[-1] + 0.5
    ax.set_xlabel("time (s, segments placed end to end)")
    ax.set_ylabel("power (W)")
    ax.legend(fontsize=6, ncol=2)
    ax.grid(alpha=0.3)
    return ax


# ================================================================================================
# Command line
# ================================================================================================

def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fraglab.microbenchmark",
                                description="The paper's micro-benchmark, reproduced and measured.")
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("all", help="everything; writes OUT/results.json and OUT/run.log")
    a.add_argument("--out", type=Path, default=RESULTS_DIR)
    a.add_argument("--processes", type=_positive, default=20)
    a.add_argument("--paper-budget", type=float, default=110.0,
                   help="seconds for the fresh-process loop (it stops early when spent)")
    a.add_argument("--no-ncu", action="store_true")
    a.add_argument("--no-power", action="store_true")
    a.add_argument("--quick", action="store_true", help="a smoke run, about a minute")
    pp = sub.add_parser("paper", help="the paper's measurement: one launch per fresh process")
    pp.add_argument("--processes", type=_positive, default=20)
    pp.add_argument("--variants", default="paper",
                    help="comma-separated, from: " + ", ".join(VARIANTS) + " (or 'all')")
    pp.add_argument("--out", type=Path)
    for name, hlp in (("warm", "warm in-process comparison, both orders"),
                      ("cycles", "the epilogue in clock64 cycles"),
                      ("power", "NVML power: sustained loop and relaunch loop"),
                      ("ncu", "achieved occupancy with Nsight Compute"),
                      ("table3", "registers, shared memory, barriers from ptxas and SASS"),
                      ("check", "both kernels against NumPy")):
        q = sub.add_parser(name, help=hlp)
        q.add_argument("--out", type=Path)
        if name in ("warm", "cycles", "ncu"):
            q.add_argument("--tiles", default="1", help="comma-separated tile counts")
        if name == "table3":
            q.add_argument("--arch", default="sm_90")
    c = sub.add_parser("_child")
    c.add_argument("--config", required=True)
    c.add_argument("--cubin", required=True)
    c.add_argument("--later", type=int, default=3)
    sub.add_parser("_info")
    d = sub.add_parser("_ncu_driver")
    d.add_argument("--cubin", required=True)
    d.add_argument("--dtype", default="bf16")
    d.add_argument("--tiles", default="2048")
    return p


def _positive(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v}")
    return v


def _tiles(s: str) -> list[int]:
    try:
        t = [int(x) for x in s.split(",") if x]
    except ValueError:
        raise SystemExit(f"--tiles must be comma-separated integers, got {s!r}") from None
    if not t or any(not 1 <= x <= MAX_TILES for x in t):
        raise SystemExit(f"--tiles must be between 1 and {MAX_TILES}, got {s!r}")
    return t


def _save(path: Path | None, name: str, payload) -> None:
    if path is None:
        return
    from . import bench
    bench.save_results(Path(path) / f"{name}.json", payload)
    print(f"wrote {Path(path) / (name + '.json')}", flush=True)


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.cmd == "_child":
        return _child_main(args)
    if args.cmd == "_info":
        return _info_main(args)
    if args.cmd == "_ncu_driver":
        return _ncu_driver_main(args)
    if args.cmd == "table3":
        r = build_report(args.arch)
        for w, v in r["ways"].items():
            print(f"{LABELS[w]:26} {v['registers']:3} registers  {v['smem_bytes']:5} B shared  "
                  f"{v['barriers']} barrier(s)  {v['opcodes']}")
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            (Path(args.out) / "table3.json").write_text(json.dumps(r, indent=1) + "\n")
        return 0
    if args.cmd == "all":
        run_all(args.out, processes=args.processes, paper_budget_s=args.paper_budget,
                ncu=not args.no_ncu, power=not args.no_power, quick=args.quick)
        return 0
    if args.cmd == "paper":
        names = list(VARIANTS) if args.variants == "all" else args.variants.split(",")
        unknown = [n for n in names if n not in VARIANTS]
        if unknown:
            raise SystemExit(f"unknown variant(s) {unknown}; known: {', '.join(VARIANTS)}")
        info = device_info_in_child()
        arch = "sm_" + info["compute_capability"].replace(".", "")
        with tempfile.TemporaryDirectory(prefix="fraglab04_") as tmp:
            cubin = write_cubin(arch, Path(tmp))
            res = run_processes({n: VARIANTS[n] for n in names}, args.processes, cubin=cubin)
        for n in names:
            s = res["variants"][n]["summary"]
            if s.get("n"):
                print(f"{n:11} n={s['n']}: baseline {s['first_ms']['smem']['mean']:.4f} ms, "
                      f"in-register {s['first_ms']['regs']['mean']:.4f} ms: "
                      f"{s['speedup_of_means']:.2f}x (paper, H100: 0.103 / 0.017 ms, 6.1x)")
        _save(args.out, "paper_way", res)
        return 0
    from . import bench, device
    device.require_gpu(f"`{args.cmd}`")
    if args.cmd == "check":
        recs = [r for d in DTYPES for r in check_correctness(d)]
        for r in recs:
            print(("ok   " if r["ok"] else "WRONG"), r)
        _save(args.out, "check", recs)
        return 0 if all(r["ok"] for r in recs) else 1
    if args.cmd == "warm":
        out = []
        for n in _tiles(args.tiles):
            for first in WAYS:
                cmp = warm_compare(n, first=first, progress=True)
                print(f"{n} tiles, {first} first:\n{cmp.table()}", flush=True)
                out.append({"tiles": n, "first": first, "comparison": cmp})
        _save(args.out, "warm", out)
        return 0
    if args.cmd == "cycles":
        out = {}
        for n in _tiles(args.tiles):
            c = epilogue_cycles(n)
            out[str(n)] = c
            print(f"{n} tiles: baseline median {np.median(c['smem']['cycles']):.0f} cycles, "
                  f"in-register {np.median(c['regs']['cycles']):.0f}", flush=True)
        _save(args.out, "cycles", out)
        return 0
    if args.cmd == "power":
        import cupy as cp
        a, b = random_inputs(1)
        ag, bg = cp.asarray(a), cp.asarray(b)
        res = {"sustained": sustained_power({w: launcher(ag, bg, way=w)[0] for w in WAYS})}
        with tempfile.TemporaryDirectory(prefix="fraglab04_") as tmp:
            res["relaunch"] = relaunch_power(write_cubin(device.arch(), Path(tmp)))
        _save(args.out, "power", res)
        return 0
    if args.cmd == "ncu":
        with tempfile.TemporaryDirectory(prefix="fraglab04_") as tmp:
            r = run_ncu(write_cubin(device.arch(), Path(tmp)), tiles=_tiles(args.tiles))
        if r["ok"]:
            for row in occupancy_table(r):
                print(row)
        else:
            print("ncu: " + r["error"] + "\n" + r.get("output_tail", ""))
        _save(args.out, "ncu", r)
        return 0 if r["ok"] else 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
