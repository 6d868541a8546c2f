"""Chapter 11's GPU records beside the bench's (``book/data/11_fused_lm_head/``): the traced
training steps (``profile.json``, ``python -m fraglab.fused_lm_head profile``), ncu on the wgmma
rung (``ncu_wgmma.json``) and the A/B of the dh GEMM's early exit (``dh_exit_ab.json``), as the
chapter's tables and glue show them (through :mod:`.report`).
"""
from __future__ import annotations

from pathlib import Path

from .. import bench, report, tools

DATA = tools.REPO_ROOT / "book" / "data" / "11_fused_lm_head"
NOT_YET = "not measured yet"
#: The training step's variants, in the table's order (the course's four settings first).
TRAIN_NAMES = {"course": "course (tma)", "course_filter": "course + filter",
               "course_wgmma": "course (wgmma)", "course_chunked": "course (chunked)",
               "eager": "PyTorch eager", "compile": "torch.compile", "liger": "Liger-Kernel",
               "cce": "Cut Cross-Entropy", "cce_nofilter": "CCE, filter off"}

PROFILE = DATA / "profile.json"


def load_profile(path: str | Path = PROFILE) -> dict:
    """The traced training steps (``python -m fraglab.fused_lm_head profile``), or ``{}``."""
    return bench.load_results(path) if Path(path).is_file() else {}


def profile_rows(prof: dict, top: int = 5) -> list[dict]:
    """Per traced variant: the step, the GPU busy and idle in it, and its largest activities."""
    res = prof.get("results") or {}
    rows = []
    for name, r in (res.get("variants") or {}).items():
        acts = sorted(r["kernels"].items(), key=lambda kv: -kv[1]["ms"])
        rows.append({"variant": TRAIN_NAMES.get(name, name), "step": f"{r['step_ms']:.1f} ms",
                     "GPU busy": f"{r['busy_ms']:.1f} ms", "GPU idle": f"{r['idle_ms']:.1f} ms",
                     "largest activities (launches, ms)": "; ".join(
                         f"{k} x{g['count']} {g['ms']:.1f}" for k, g in acts[:top])})
    return rows


def profile_table(prof: dict):
    rows = profile_rows(prof) or [{"variant": "-", "step": "-", "GPU busy": "-", "GPU idle": "-",
                                   "largest activities (launches, ms)": NOT_YET}]
    res = prof.get("results") or {}
    name = (prof.get("device") or {}).get("name") or NOT_YET
    return report.table(rows, caption=f"One training step traced (PyTorch's profiler, every GPU "
                        f"activity), {res.get('head', '-')} at N = {res.get('n', '-')}, on {name}",
                        wrap=["largest activities (launches, ms)"])


def profile_values(prof: dict) -> dict[str, str]:
    res = (prof.get("results") or {}).get("variants") or {}
    out = {}
    for key, name in (("course", "course"), ("filter", "course_filter"), ("compile", "compile")):
        r = res.get(name)
        out[f"ch11-profile-{key}"] = (f"{r['step_ms']:.1f} ms, of which the GPU was busy "
                                      f"{r['busy_ms']:.1f} and idle {r['idle_ms']:.1f}" if r
                                      else NOT_YET)
    return out


#: ncu on the wgmma rung's kernels (cp.async producer), the measurement the tma rung answers.
NCU_WGMMA = DATA / "ncu_wgmma.json"


def ncu_text(doc: dict, kernel: str = "forward") -> str:
    """What ncu read of ``kernel`` in :data:`NCU_WGMMA`: the tensor pipe's and the issue slots'
    busy shares, the L2's, and the warps' commonest wait."""
    rec = ((doc.get("results") or {}).get("ncu") or {}).get(kernel) or {}
    m = rec.get("metrics") or {}
    stalls = (rec.get("stalls") or {}).get("smsp__average_warps") or {}
    stalls = {k: v for k, v in stalls.items() if k != "selected"}
    try:
        top = max(stalls, key=stalls.get)
        where = (doc.get("device") or {}).get("name", "?")
        return (f"on {where}: the tensor pipe busy {m['sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed']:.0f} % "
                f"of the kernel, the issue slots {m['smsp__issue_active.avg.pct_of_peak_sustained_active']:.0f} %, "
                f"the L2 {m['lts__throughput.avg.pct_of_peak_sustained_elapsed']:.0f} % of its peak, and warps "
                f"waiting mostly on '{top.replace('_', ' ')}' ({stalls[top]:.1f} cycles an instruction)")
    except (KeyError, ValueError):
        return NOT_YET


#: The dh GEMM's early exit timed against the kernel before it (its "method" says how: one
#: process, interleaved, the tma rung with the filter).
DH_EXIT = DATA / "dh_exit_ab.json"


def dh_exit_text(doc: dict) -> str:
    """The dh GEMM's milliseconds before and after its early exit, at both heads' N = 16384."""
    runs = {(r["head"], r["n"]): r["runs"] for r in doc.get("sizes") or []}
    parts = []
    for head, name in (("llama3_8b", "Llama 3 8B"), ("gemma2_2b", "Gemma 2 2B")):
        r = runs.get((head, 16384), {}).get("tma_filter")
        if not r:
            return NOT_YET
        old, new = r["median_ms"]["old"], r["median_ms"]["new"]
        same = not any(r["differing"].values())
        parts.append(f"{old['dh']:.1f} to {new['dh']:.1f} ms at {name}'s head (the whole "
                     f"backward {old['total']:.1f} to {new['total']:.1f} ms"
                     f"{', the same bits' if same else ', DIFFERENT bits'})")
    where = (doc.get("device") or {}).get("name", "?")
    return " and from ".join(parts) + f", N = 16,384, on {where}"
