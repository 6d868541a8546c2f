"""Explanations computed from a record: where the first launch's time goes, why the epilogue's
cycle saving and the kernel's time difference are not the same number, what "idle" means in the
power measurements, energy as one power times one time, and throughput against the GPU's peaks.

Every function takes the record (:func:`.record.load`) and returns plain numbers; the chapter
glues them into its prose, so that a sentence and the record cannot disagree.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ..report import H100_SXM
from .kernels import VARIANTS
from .power import mean_power
from .record import RESULTS_DIR, cycle_medians, from_saved, paper_way_summary, warm_summary
from .setups import SETUPS

#: Parts of a first timed launch, in the order they happen inside the timed window.
PARTS = ("load", "launch", "rest")
PART_LABELS = {"load": "host: find and (lazily) load the kernel",
               "launch": "host: the launch call", "rest": "the rest (GPU side)"}

#: One 16x16x16 tile product: 2 * 16^3 operations; bytes moved: A and B (2-byte elements) read,
#: 16 float row maxima written.
FLOP_PER_TILE = 2 * 16 ** 3
BYTES_PER_TILE = 2 * 16 * 16 * 2 + 16 * 4


def first_launch_breakdown(doc: dict) -> dict:
    """Per setup and kernel, the mean first-launch time (us) split into the host's time to
    find and load the kernel, the launch call, and the rest (the GPU's part): means over the
    same processes, so the three parts add up exactly to the mean the paper's statistic uses.

    ``{setup: {variant: {"total", "load", "launch", "rest"}, "gap": {part: baseline - in-register},
    "gap_total"}}``."""
    out = {}
    for name in SETUPS:
        v = doc.get("paper_way", {}).get("variants", {}).get(name)
        if not v or not v.get("records"):
            continue
        rec = v["records"]
        row = {}
        for w in VARIANTS:
            total = float(np.mean([r["first"][w] for r in rec])) * 1e3
            load = float(np.mean([r["host_us"]["load"][w] for r in rec]))
            launch = float(np.mean([r["host_us"]["launch"][w] for r in rec]))
            row[w] = {"total": total, "load": load, "launch": launch,
                      "rest": total - load - launch}
        row["gap"] = {p: row["smem"][p] - row["regs"][p] for p in PARTS}
        row["gap_total"] = row["smem"]["total"] - row["regs"]["total"]
        out[name] = row
    return out


def timer_step_ns(doc: dict) -> float:
    """The smallest step between distinct warm event times in the record (ns): the resolution
    of the CUDA events' clock on this GPU."""
    steps = []
    for w in doc.get("warm", []):
        for t in w["comparison"]["timings"].values():
            u = np.unique(np.round(np.asarray(t["times_ms"]) * 1e6, 3))
            if u.size > 1:
                steps.append(np.diff(u).min())
    return float(min(steps)) if steps else float("nan")


def sm_mhz(doc: dict) -> float | None:
    """The SM clock the cycle counts are converted with (read after the run, else the maximum)."""
    return (doc.get("clocks_after") or {}).get("sm_mhz") or \
        (doc.get("device_before", doc.get("device", {})).get("clocks", {}) or {}).get("sm_max_mhz")


def _warm_times_ns(doc: dict, label: str) -> dict:
    runs = [w for w in doc.get("warm", []) if w["label"] == label and w["dtype"] == "bf16"]
    return {w: np.concatenate([np.asarray(r["comparison"]["timings"][w]["times_ms"]) for r in runs])
            * 1e6 for w in VARIANTS}


def epilogue_vs_kernel(doc: dict) -> dict:
    """The epilogue's saving in SM cycles (clock64, per warp) against the whole kernel's time
    difference (CUDA events).

    One block (one warp): the saving in ns, the event clock's step, and the warm difference of
    medians and of means. Eight full waves: the mean saving per warp includes the time a warp
    waits for the SM; summed over all warps it would be the saving if warps ran one after the
    other; divided by the warps resident at once (SMs x the 32-block limit per SM) it is an upper
    bound on what the kernel can save, since warps overlap; and the measured difference."""
    mhz = sm_mhz(doc)
    cyc = cycle_medians(doc)
    t1 = _warm_times_ns(doc, "one block")
    out = {"mhz": mhz, "cycles": cyc, "saving_cycles": cyc["smem"] - cyc["regs"],
           "saving_ns": (cyc["smem"] - cyc["regs"]) / mhz * 1e3,
           "timer_step_ns": timer_step_ns(doc),
           "one_block_median_diff_ns": float(np.median(t1["smem"]) - np.median(t1["regs"])),
           "one_block_mean_diff_ns": float(np.mean(t1["smem"]) - np.mean(t1["regs"]))}
    c8 = doc.get("cycles", {}).get("8 full waves")
    if c8:
        warps = int(c8["tiles"])
        sms = int(doc.get("device", {}).get("sm_count") or doc["device_before"]["sm_count"])
        resident = sms * 32                      # one-warp blocks: 32 resident blocks per SM
        per_warp = c8["smem"]["stats"]["mean"] - c8["regs"]["stats"]["mean"]
        t8 = _warm_times_ns(doc, "8 full waves")
        out["waves"] = {"warps": warps, "resident": resident, "saving_per_warp_cycles": per_warp,
                        "serial_saving_us": per_warp * warps / mhz,
                        "bound_ns": per_warp * warps / resident / mhz * 1e3,
                        "median_diff_ns": float(np.median(t8["smem"]) - np.median(t8["regs"])),
                        "mean_diff_ns": float(np.mean(t8["smem"]) - np.mean(t8["regs"]))}
    return out


def phase_starts(log_text: str) -> dict[str, float]:
    """``{phase title: seconds since the start}`` from a ``run.log`` (its ``[  t s] == title``
    lines)."""
    return {m.group(2).strip(): float(m.group(1))
            for m in re.finditer(r"^\[\s*([\d.]+) s\] == (.*)$", log_text, re.M)}


def power_idle(doc: dict, log_text: str | None = None) -> dict:
    """What the record's "idle" is, beside the relaunch loops it is compared with: mean powers,
    how far below idle each loop is, when each was measured (from ``run.log``), and the GPU's
    temperature at the start, during the warm comparisons (just before the idle reading) and at
    the end."""
    if log_text is None:
        p = RESULTS_DIR / "run.log"
        log_text = p.read_text() if Path(p).is_file() else ""
    ps, pr = doc.get("power_sustained", {}), doc.get("power_relaunch", {})
    idle = mean_power(ps["idle"])
    phases = phase_starts(log_text)
    start = lambda key: next((t for k, t in phases.items() if k.startswith(key)), None)
    temps = [w["comparison"]["clocks"].get("temperature_c") for w in doc.get("warm", [])]
    temps = [t for t in temps if t is not None]
    return {"idle_w": idle,
            "relaunch_w": {w: mean_power(pr[w]) for w in VARIANTS if w in pr},
            "below_idle_w": {w: idle - mean_power(pr[w]) for w in VARIANTS if w in pr},
            "relaunch_processes": {w: pr[w].get("processes") for w in VARIANTS if w in pr},
            "relaunch_seconds": {w: pr[w]["seconds"] for w in VARIANTS if w in pr},
            "relaunch_start_s": start("power, the paper's way"),
            "idle_start_s": start("power, sustained"),
            "temp_start_c": (doc.get("device_before", {}).get("clocks") or {}).get("temperature_c"),
            "temp_warm_c": (min(temps), max(temps)) if temps else None,
            "temp_end_c": (doc.get("clocks_after") or {}).get("temperature_c")}


def energy_rows(doc: dict) -> dict:
    """Energy per launch (mJ) as one power (W) times one time (ms) of the same load:

    * ``paper_way``: the relaunch loop's power x the mean first launch in fresh processes;
    * ``one_block``: the sustained one-block loop's power x the warm one-block median;
    * ``waves``: the sustained 8-full-wave loop's power x the warm 8-full-wave median.

    ``{load: {variant: (power_w, time_ms, energy_mj)}}``; a load missing from the record is left
    out."""
    out = {}
    pw = paper_way_summary(doc)
    pr, ps = doc.get("power_relaunch", {}), doc.get("power_sustained", {})
    if pw and all(w in pr for w in VARIANTS):
        out["paper_way"] = {w: (mean_power(pr[w]), pw["first_ms"][w]["mean"]) for w in VARIANTS}
    for load, label in (("one_block", "one block"), ("waves", "8 full waves")):
        s = warm_summary(doc, label)
        if s and all(f"{w}, {label}" in ps for w in VARIANTS):
            out[load] = {w: (mean_power(ps[f"{w}, {label}"]), s[w]) for w in VARIANTS}
    return {k: {w: (p, t, p * t) for w, (p, t) in v.items()} for k, v in out.items()}


def waves_throughput(doc: dict) -> dict:
    """The warm 8-full-wave launches as throughput: tensor TFLOP/s and bytes per second, with
    their share of the H100's dense BF16 peak and HBM3 bandwidth, and whether the data fit in L2."""
    s = warm_summary(doc, "8 full waves")
    tiles = next(w["tiles"] for w in doc["warm"] if w["label"] == "8 full waves")
    l2 = doc.get("device", {}).get("l2_cache_bytes") or doc["device_before"]["l2_cache_bytes"]
    out = {"tiles": tiles, "bytes": tiles * BYTES_PER_TILE, "l2_bytes": l2}
    for w in VARIANTS:
        sec = s[w] * 1e-3
        tf = tiles * FLOP_PER_TILE / sec / 1e12
        tb = tiles * BYTES_PER_TILE / sec / 1e12
        out[w] = {"tflops": tf, "tb_s": tb, "tensor_share": tf / H100_SXM["dense_bf16_tflops"],
                  "hbm_share": tb / H100_SXM["hbm_tb_s"]}
    return out


def glue_values(record: dict, log_text: str | None = None) -> dict[str, str]:
    """``{name: text}`` of every number chapter 4's prose cites, computed from the record (the
    saved file's JSON, or :func:`.record.load`'s form). The chapter glues exactly these."""
    doc = from_saved(record)
    pw = doc["paper_way"]
    br = first_launch_breakdown(doc)["paper"]
    ev = epilogue_vs_kernel(doc)
    pi = power_idle(doc, log_text)
    en = energy_rows(doc)
    tp = waves_throughput(doc)
    w1 = warm_summary(doc, "one block")
    g, tot = br["gap"], br["gap_total"]
    e = lambda load, w, spec: (f"{en[load][w][0]:.1f} W x {en[load][w][1]:.5f} ms = "
                                        + spec.format(en[load][w][2]) + " mJ")
    v = {
        "ch04-run-s": f"{doc['elapsed_s']:.0f} s",
        "ch04-paper-way-s": f"{pw['elapsed_s']:.0f} s",
        "ch04-paper-way-processes": f"{pw['rounds'] - pw['discard_rounds']}",
        "ch04-paper-ratio": f"{paper_way_summary(doc)['speedup_of_means']:.2f}x",
        "ch04-warm-ratio": f"{w1['ratio']:.2f}x",
        "ch04-gap-us": f"{tot:.0f} us",
        "ch04-gap-load": f"{g['load']:.0f} us ({g['load'] / tot:.0%})",
        "ch04-gap-launch": f"{g['launch']:.0f} us ({g['launch'] / tot:.0%})",
        "ch04-gap-rest": f"{g['rest']:.1f} us ({g['rest'] / tot:.1%})",
        "ch04-first-launch-call-us": f"{br['smem']['launch']:.0f} us",
        "ch04-later-launch-call-us":
            f"{paper_way_summary(doc)['host_us']['later_launch']['smem']['median']:.0f} us",
        "ch04-epi-cycles-saved": f"{ev['saving_cycles']:.0f}",
        "ch04-epi-saving-ns": f"{ev['saving_ns']:.0f} ns",
        "ch04-mhz": f"{ev['mhz']:.0f} MHz",
        "ch04-timer-step-ns": f"{ev['timer_step_ns']:.0f} ns",
        "ch04-warm-median-diff-ns": f"{ev['one_block_median_diff_ns']:.0f} ns",
        "ch04-warm-mean-diff-ns": f"{ev['one_block_mean_diff_ns']:.0f} ns",
        "ch04-idle-w": f"{pi['idle_w']:.1f} W",
        "ch04-relaunch-w": " and ".join(f"{x:.1f} W" for x in pi["relaunch_w"].values()),
        "ch04-below-idle-w": " and ".join(f"{x:.1f} W" for x in pi["below_idle_w"].values()),
        "ch04-relaunch-start-s": f"{pi['relaunch_start_s']:.0f} s",
        "ch04-idle-start-s": f"{pi['idle_start_s']:.0f} s",
        "ch04-temp-start-c": f"{pi['temp_start_c']} °C",
        "ch04-temp-warm-c": f"{pi['temp_warm_c'][0]}-{pi['temp_warm_c'][1]} °C",
        "ch04-temp-end-c": f"{pi['temp_end_c']} °C",
        "ch04-sound-energy-smem": e("one_block", "smem", "{:.3f}"),
        "ch04-sound-energy-regs": e("one_block", "regs", "{:.3f}"),
        "ch04-waves-energy-smem": e("waves", "smem", "{:.2f}"),
        "ch04-waves-energy-regs": e("waves", "regs", "{:.2f}"),
        "ch04-paper-way-energy-smem": e("paper_way", "smem", "{:.1f}"),
        "ch04-waves-tflops": f"{tp['regs']['tflops']:.1f} TFLOP/s",
        "ch04-waves-tensor-share": f"{tp['regs']['tensor_share']:.1%}",
        "ch04-waves-tb-s": f"{tp['regs']['tb_s']:.2f} TB/s",
        "ch04-waves-hbm-share": f"{tp['regs']['hbm_share']:.0%}",
        "ch04-waves-mb": f"{tp['bytes'] / 1e6:.1f} MB",
        "ch04-l2-mb": f"{tp['l2_bytes'] / 2 ** 20:.0f} MiB",
    }
    if "waves" in ev:
        wv = ev["waves"]
        v.update({"ch04-waves-warps": f"{wv['warps']}", "ch04-waves-resident": f"{wv['resident']}",
                  "ch04-waves-saving-cycles": f"{wv['saving_per_warp_cycles']:.0f}",
                  "ch04-waves-serial-ms": f"{wv['serial_saving_us'] / 1e3:.1f} ms",
                  "ch04-waves-bound-us": f"{wv['bound_ns'] / 1e3:.2f} us",
                  "ch04-waves-diff-us": f"{wv['mean_diff_ns'] / 1e3:.2f} us"})
    return v
