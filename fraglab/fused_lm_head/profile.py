"""Where a training step's milliseconds go (``python -m fraglab.fused_lm_head profile --out DIR``):
one step of the course (:data:`.anchors.COURSE_TRAIN`'s settings) and of each anchor, traced by
PyTorch's profiler (CUPTI: every kernel, memset and copy on the GPU, CuPy's launches included, as
they share the process), at one size (Llama 3 8B's head, N = 4096 by default).

Per variant the record holds the step's time from CUDA events around it, the GPU's busy time (the
union of its activities' intervals) and the rest (the GPU idle inside the step: launch gaps, host
work, synchronisations), and every activity grouped under a short name (:func:`short_name`) with
its count and milliseconds. What is listed adds up to the step: busy + idle = step.

``ncu`` (optional, ``--ncu``): the Speed-of-Light and memory sections of the course's forward, G,
dw and dh kernels at that size, one child a kernel (:func:`ncu_kernels`).
"""
from __future__ import annotations

import os
import re
import time

from .. import bench
from ..progress import Log
from . import anchors, bench as topic_bench

#: The size profiled by default: (head, N).
SIZE = ("llama3_8b", 4096)


def short_name(name: str) -> str:
    """A kernel's name without template arguments and argument lists, cut to 60 characters."""
    s = re.sub(r"\(.*", "", name)
    s = re.sub(r"<.*>", "<>", s)
    s = s.replace("void ", "").strip()
    return s[:60]


def _union_ms(intervals: list[tuple[float, float]]) -> float:
    """Milliseconds covered by the union of ``(start_us, end_us)`` intervals."""
    total, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total / 1e3


def trace_step(torch, step, warmup: int = 2, repeats: int = 3, trace_path: str | None = None) -> dict:
    """One profiled step after ``warmup`` unprofiled ones (repeated ``repeats`` times, the median
    step kept): the step's milliseconds by CUDA events, the GPU's busy milliseconds, and the
    activities grouped by :func:`short_name` (``{name: {"count", "ms"}}``)."""
    from torch.profiler import ProfilerActivity, profile
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    runs = []
    for _ in range(repeats):
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            torch.cuda.synchronize()
        groups: dict = {}
        spans = []
        for ev in prof.events():
            if getattr(ev, "device_type", None) is None or "CUDA" not in str(ev.device_type):
                continue
            t0 = ev.time_range.start
            t1 = ev.time_range.end
            spans.append((t0, t1))
            g = groups.setdefault(short_name(ev.name), {"count": 0, "ms": 0.0})
            g["count"] += 1
            g["ms"] += (t1 - t0) / 1e3
        step_ms = start.elapsed_time(end)
        if trace_path and not runs:
            prof.export_chrome_trace(trace_path)
        runs.append({"step_ms": step_ms, "busy_ms": _union_ms(spans), "kernels": groups})
    runs.sort(key=lambda r: r["step_ms"])
    best = runs[len(runs) // 2]
    best["idle_ms"] = max(best["step_ms"] - best["busy_ms"], 0.0)
    best["step_ms_runs"] = [r["step_ms"] for r in runs]
    return best


def run(out_dir, head: str = SIZE[0], n: int = SIZE[1], seed: int = 0, with_ncu: bool = False) -> dict:
    """Trace every variant's training step at (``head``, ``n``) -> ``out_dir/profile.json``."""
    os.makedirs(out_dir, exist_ok=True)
    log = Log(os.path.join(out_dir, "profile_log.txt"))
    torch, why = anchors.torch_or_reason()
    res: dict = {"head": head, "n": n, "variants": {}, "failures": {}}
    if torch is None:
        res["failures"]["all"] = why
        return res
    d, v = topic_bench.HEADS[head]
    res.update(d=d, v=v)
    found, missing = anchors.make(log)
    res["missing"] = missing
    t0 = time.time()
    with topic_bench.torch_world(torch):
        h, w, t = topic_bench.lm_inputs(torch, n, d, v, seed)
        steps = {k: anchors.forward_backward(anchors.course_train(k), h, w, t)
                 for k in ("course", "course_filter")}
        steps.update({k: anchors.forward_backward(f, h, w, t) for k, f in found.items()})
        for name, step in steps.items():
            try:
                r = trace_step(torch, step, trace_path=os.path.join(out_dir, f"trace_{name}.json")
                               if name.startswith("course") else None)
                res["variants"][name] = r
                top = sorted(r["kernels"].items(), key=lambda kv: -kv[1]["ms"])[:8]
                log(f"  {name}: step {r['step_ms']:.1f} ms = busy {r['busy_ms']:.1f} + idle "
                    f"{r['idle_ms']:.1f}; " + ", ".join(f"{k} x{g['count']} {g['ms']:.1f}"
                                                        for k, g in top))
            except Exception as exc:       # noqa: BLE001 - recorded
                res["failures"][name] = f"{type(exc).__name__}: {exc}"[:400]
                log(f"  {name} FAILED: {res['failures'][name]}")
            torch.cuda.empty_cache()
        del h, w, t, steps
    if with_ncu:
        res["ncu"] = ncu_kernels(out_dir, head, n, log)
    res["elapsed_s"] = time.time() - t0
    bench.save_results(os.path.join(out_dir, "profile.json"), res, device=bench.device_info())
    return res


#: The course's kernels ncu reads at the profiled size: label -> (kernel name, ncu launch skip).
NCU_KERNELS = {"forward": ("lmhead_wgmma_fwd_bf16", 1), "G": ("lmhead_wgmma_g_bf16", 1),
               "dw": ("lmhead_wgmma_dw_bf16", 1), "dh": ("lmhead_wgmma_dh_bf16", 1)}
#: Metrics read besides the sections (L2 and DRAM throughput, tensor pipe).
NCU_METRICS = ("lts__t_sectors.avg.pct_of_peak_sustained_elapsed",
               "lts__throughput.avg.pct_of_peak_sustained_elapsed",
               "dram__throughput.avg.pct_of_peak_sustained_elapsed",
               "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
               "sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active",
               "gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
               "smsp__issue_active.avg.pct_of_peak_sustained_active")


def child(head: str, n: int, seed: int = 0) -> None:
    """What ncu watches: two course training steps (every kernel launched at least twice)."""
    torch, why = anchors.torch_or_reason()
    if torch is None:
        raise SystemExit(why)
    d, v = topic_bench.HEADS[head]
    with topic_bench.torch_world(torch):
        h, w, t = topic_bench.lm_inputs(torch, n, d, v, seed)
        step = anchors.forward_backward(anchors.course_train("course"), h, w, t)
        for _ in range(2):
            step()
        torch.cuda.synchronize()


def ncu_kernels(out_dir, head: str, n: int, log) -> dict:
    """ncu's Speed-of-Light and memory sections and :data:`NCU_METRICS` for each of
    :data:`NCU_KERNELS` (one child each)."""
    from .. import ncu

    def command_of(path, label):
        name, _ = NCU_KERNELS[label]
        return ncu.command(path, name, "fraglab.fused_lm_head", "profile-child", "--head", head,
                           "--n", str(n), metrics=NCU_METRICS,
                           sections=("SpeedOfLight", "MemoryWorkloadAnalysis", "LaunchStats",
                                     "Occupancy", "WarpStateStats"))
    return ncu.stall_breakdown(list(NCU_KERNELS), command_of, log, timeout_s=240.0,
                               metrics=NCU_METRICS,
                               keep=lambda k: any(s in k for s in ("pipe", "issue_active", "lts__",
                                                                    "dram__", "throughput",
                                                                    "duration")))


def summary(res: dict) -> str:
    """A few lines: per variant step = busy + idle and its top activities."""
    lines = [f"{res.get('head')} N={res.get('n')}"]
    for name, r in res.get("variants", {}).items():
        top = sorted(r["kernels"].items(), key=lambda kv: -kv[1]["ms"])[:6]
        lines.append(f"{name:>14}: {r['step_ms']:.1f} ms = {r['busy_ms']:.1f} busy + "
                     f"{r['idle_ms']:.1f} idle | " + "; ".join(
                         f"{k} x{g['count']} {g['ms']:.2f}" for k, g in top))
    return "\n".join(lines)

