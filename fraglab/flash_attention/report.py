"""Reading chapter 5's record (``python -m fraglab.flash_attention bench``): the numbers the
chapter glues into its prose, its tables as HTML, and the reproduce-or-refute rows.

    res = report.load()["results"]
    report.fa1_html(res); report.fa2_html(res); report.throttling(res); report.verdicts(res)
"""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path

from ..report import H100_SXM, Table
from ..tools import REPO_ROOT

RESULTS = REPO_ROOT / "book" / "data" / "05_flash_attention" / "results.json"

#: The paper's Table 6 (H100): FA-1 kernel with a shared-memory softmax against Algorithm 4.
PAPER = {"baseline_ms": 2.199, "inregister_ms": 1.615, "speedup": 1.36}

#: The H100's dense (no sparsity) f16 tensor-core peak, TFLOP/s (NVIDIA's H100 SXM5 datasheet).
H100_DENSE_F16_TFLOPS = H100_SXM["dense_f16_tflops"]


def load(path: str | Path | None = None) -> dict:
    """The saved record (``format``, ``created_utc``, ``device``, ``results``)."""
    from ..bench import load_results
    return load_results(Path(path or RESULTS))


def expected_rescalings(n_blocks: int) -> Fraction:
    """Expected number of blocks 2..n that raise the running maximum of a row, for scores in
    random order (i.i.d., no ties): block j holds the largest of the first j blocks with
    probability 1/j, so the expectation is sum_{j=2}^{n} 1/j = H_n - 1 (the first block sets
    the maximum and is not a rescaling). Exact, as a fraction."""
    if n_blocks < 1:
        raise ValueError(f"n_blocks must be at least 1, got {n_blocks}")
    return sum((Fraction(1, j) for j in range(2, n_blocks + 1)), Fraction(0))


def comparisons(res: dict) -> list[dict]:
    """Every timed comparison of the record, in the order they ran."""
    out = [res[k]["comparison"] for k in ("fa1_paper_pair", "fa1_fair_pair", "fa1_full_gpu")
           if k in res]
    if "fa2_warps" in res:
        out.append(res["fa2_warps"]["comparison"])
    return out + [r["comparison"] for r in res.get("fa2_vs_sdpa", []) if "comparison" in r]


def throttling(res: dict) -> dict:
    """The clock read after each comparison: how many comparisons ended with NVML reporting a
    clock limit reason (which ones), the lowest and highest SM clock, and the FA-2/SDPA ratios
    of the comparisons with and without a reason."""
    cs = comparisons(res)
    flagged = [bool(c["clocks"].get("reasons")) for c in cs]
    mhz = [c["clocks"]["sm_mhz"] for c in cs]
    reasons = sorted({r for c in cs for r in c["clocks"].get("reasons") or []})
    below = sum(f and c["clocks"]["sm_mhz"] < c["clocks"]["sm_max_mhz"] for f, c in zip(flagged, cs))
    fa2 = [r for r in res.get("fa2_vs_sdpa", []) if "fraction_of_sdpa" in r]
    split = {True: [], False: []}
    for r in fa2:
        split[bool(r["comparison"]["clocks"].get("reasons"))].append(r["fraction_of_sdpa"])
    lowest = min(cs, key=lambda c: c["clocks"]["sm_mhz"])["clocks"]
    fa1 = [res[k]["comparison"] for k in ("fa1_paper_pair", "fa1_fair_pair", "fa1_full_gpu") if k in res]
    return {"total": len(cs), "flagged": sum(flagged), "reasons": reasons,
            "fa1_total": len(fa1), "fa1_flagged": sum(bool(c["clocks"].get("reasons")) for c in fa1),
            "flagged_below_max": below, "min_mhz": min(mhz), "max_mhz": max(mhz),
            "max_clock_mhz": lowest["sm_max_mhz"], "lowest_fraction": lowest["sm_fraction_of_max"],
            "fa2_ratio_flagged": split[True], "fa2_ratio_clear": split[False]}


def _med(res: dict, key: str, name: str) -> float:
    return res[key]["comparison"]["timings"][name]["median_ms"]


def speedups(res: dict) -> dict:
    """The in-register FA-1 kernel's speedup (ratio of medians) over each baseline, at the
    paper's size (its own pair) and at the full-GPU size (one three-way comparison)."""
    return {"paper_size": {"paper_style": _med(res, "fa1_paper_pair", "paper_baseline")
                           / _med(res, "fa1_paper_pair", "inregister"),
                           "fair": _med(res, "fa1_fair_pair", "fair_baseline")
                           / _med(res, "fa1_fair_pair", "inregister")},
            "full_gpu": {"paper_style": _med(res, "fa1_full_gpu", "paper_baseline")
                         / _med(res, "fa1_full_gpu", "inregister"),
                         "fair": _med(res, "fa1_full_gpu", "fair_baseline")
                         / _med(res, "fa1_full_gpu", "inregister")}}


def gain_share(ours: float, paper: float = PAPER["speedup"]) -> float:
    """Our gain (speedup - 1) as a fraction of the paper's."""
    return (ours - 1) / (paper - 1)


def verdicts(res: dict) -> list[list[str]]:
    """The reproduce-or-refute rows: claim, the paper's figure, ours against the paper-style
    baseline, ours against the fair baseline, and the verdict (the share of the paper's gain
    each speedup shows; runtimes are not comparable: the kernels differ)."""
    sp = speedups(res)
    ps, fair = sp["paper_size"]["paper_style"], sp["paper_size"]["fair"]
    share = lambda s: f"{gain_share(s):.0%}"
    return [
        ["baseline, ms", f"{PAPER['baseline_ms']:.3f}",
         f"{_med(res, 'fa1_paper_pair', 'paper_baseline'):.3f}",
         f"{_med(res, 'fa1_fair_pair', 'fair_baseline'):.3f}", "not comparable"],
        ["in-register, ms", f"{PAPER['inregister_ms']:.3f}",
         f"{_med(res, 'fa1_paper_pair', 'inregister'):.3f}",
         f"{_med(res, 'fa1_fair_pair', 'inregister'):.3f}", "not comparable"],
        ["speedup, paper's size", f"{PAPER['speedup']:.2f}x", f"{ps:.2f}x", f"{fair:.2f}x",
         f"{share(ps)} / {share(fair)} of its gain"],
        ["speedup, full GPU", "-", f"{sp['full_gpu']['paper_style']:.2f}x",
         f"{sp['full_gpu']['fair']:.2f}x", "no paper figure"],
    ]


def verdicts_html(res: dict, caption: str = "") -> Table:
    head = ["claim", "paper", "ours, paper-style", "ours, fair", "verdict"]
    return Table(head, verdicts(res), caption, align=["left", "right", "right", "right", "left"])


def fa1_html(res: dict, caption: str = "") -> Table:
    """The FA-1 comparisons: medians, spread, speedup over the comparison's baseline, TFLOP/s
    and their share of the H100's dense f16 tensor peak."""
    rows = []
    for key in ("fa1_paper_pair", "fa1_fair_pair", "fa1_full_gpu"):
        r = res[key]
        c = r["comparison"]
        base = c["timings"][c["baseline"]]["median_ms"]
        for name, t in c["timings"].items():
            tf = r["tflops"][name]
            rows.append([key.replace("fa1_", "").replace("_", " "), ", ".join(map(str, r["shape"])),
                         name.replace("_", " "), f"{t['median_ms']:.3f}",
                         f"{t['p10_ms']:.3f}-{t['p90_ms']:.3f}", f"{base / t['median_ms']:.2f}x",
                         f"{tf:.1f}", f"{tf / H100_DENSE_F16_TFLOPS:.1%}"])
    head = ["comparison", "B, H, N, d", "kernel", "ms", "p10-p90", "speedup", "TFLOP/s", "% peak"]
    return Table(head, rows, caption, align=["left", "left", "left"] + ["right"] * 5)


def fa2_html(res: dict, caption: str = "") -> Table:
    """FA-2 against SDPA's flash backend: TFLOP/s, their share of the dense f16 tensor peak, the
    ratio, the difference of the outputs, and whether the clock was capped after the timing."""
    rows = []
    for r in res.get("fa2_vs_sdpa", []):
        tf = r["tflops"]
        cl = r["comparison"]["clocks"]
        rows.append([r["dtype"], r["N"], r["d"], "yes" if r["causal"] else "no",
                     f"{tf['fa2']:.1f}", f"{tf['fa2'] / H100_DENSE_F16_TFLOPS:.0%}",
                     f"{tf['sdpa_flash']:.1f}", f"{tf['sdpa_flash'] / H100_DENSE_F16_TFLOPS:.0%}",
                     f"{r['fraction_of_sdpa']:.2f}", f"{r['rel_err_vs_sdpa']:.1e}",
                     f"{cl['sm_mhz']}" + (" capped" if cl.get("reasons") else "")])
    head = ["dtype", "N", "d", "causal", "FA-2", "% peak", "SDPA", "% peak", "ratio", "diff.",
            "MHz"]
    return Table(head, rows, caption, align=["left"] + ["right"] * 10)


def best_fa2(res: dict) -> dict:
    """The FA-2 row with the highest throughput."""
    return max(res["fa2_vs_sdpa"], key=lambda r: r["tflops"]["fa2"])


def fa2_over_fa1(res: dict) -> dict:
    """FA-2 against the in-register FA-1 kernel at the full-GPU size (f16, not causal)."""
    fa1 = res["fa1_full_gpu"]
    b, h, n, d = fa1["shape"]
    same = next(r for r in res["fa2_vs_sdpa"] if r["dtype"] == "f16" and r["N"] == n
                and r["d"] == d and not r["causal"] and (r["B"], r["H"]) == (b, h))
    f1, f2 = fa1["tflops"]["inregister"], same["tflops"]["fa2"]
    return {"shape": (b, h, n, d), "fa1_tflops": f1, "fa2_tflops": f2, "ratio": f2 / f1}


def glue_values(record: dict) -> dict[str, str]:
    """``{name: text}`` of every number chapter 5's prose cites from the record (the saved
    file's JSON). The chapter glues exactly these."""
    res = record["results"]
    sp, th = speedups(res), throttling(res)
    best, f21 = best_fa2(res), fa2_over_fa1(res)
    peak = H100_DENSE_F16_TFLOPS
    ratio = lambda causal: [r["fraction_of_sdpa"] for r in res["fa2_vs_sdpa"] if r["causal"] == causal]
    return {
        "ch05-bench-s": f"{res['elapsed_s']:.1f} s",
        "ch05-paper-style": f"{sp['paper_size']['paper_style']:.2f}x",
        "ch05-fair": f"{sp['paper_size']['fair']:.2f}x",
        "ch05-paper-style-gain": f"{gain_share(sp['paper_size']['paper_style']):.0%}",
        "ch05-fair-gain": f"{gain_share(sp['paper_size']['fair']):.0%}",
        "ch05-full-paper-style": f"{sp['full_gpu']['paper_style']:.2f}x",
        "ch05-full-fair": f"{sp['full_gpu']['fair']:.2f}x",
        "ch05-capped": f"{th['flagged']}",
        "ch05-comparisons": f"{th['total']}",
        "ch05-capped-reasons": ", ".join(th["reasons"]) or "none",
        "ch05-capped-below-max": f"{th['flagged_below_max']}",
        "ch05-min-mhz": f"{th['min_mhz']} MHz",
        "ch05-max-mhz": f"{th['max_clock_mhz']} MHz",
        "ch05-lowest-fraction": f"{th['lowest_fraction']:.0%}",
        "ch05-fa1-capped": f"{th['fa1_flagged']} of {th['fa1_total']}",
        "ch05-n-capped-fa2": f"{len(th['fa2_ratio_flagged'])}",
        "ch05-n-fa2": f"{len(th['fa2_ratio_flagged']) + len(th['fa2_ratio_clear'])}",
        "ch05-noncausal-range": f"{min(ratio(False)):.2f} to {max(ratio(False)):.2f}",
        "ch05-causal-range": f"{min(ratio(True)):.2f} to {max(ratio(True)):.2f}",
        "ch05-best-fa2": f"{best['tflops']['fa2']:.1f} TFLOP/s",
        "ch05-best-fa2-share": f"{best['tflops']['fa2'] / peak:.0%}",
        "ch05-best-sdpa": f"{best['tflops']['sdpa_flash']:.1f} TFLOP/s",
        "ch05-best-sdpa-share": f"{best['tflops']['sdpa_flash'] / peak:.0%}",
        "ch05-best-shape": f"N = {best['N']}, d = {best['d']}, {best['dtype']}"
                           + (", causal" if best["causal"] else ", not causal"),
        "ch05-peak": f"{peak:.0f} TFLOP/s",
        "ch05-fa1-tflops": f"{f21['fa1_tflops']:.1f} TFLOP/s",
        "ch05-fa1-share": f"{f21['fa1_tflops'] / peak:.0%}",
        "ch05-fa2-same-tflops": f"{f21['fa2_tflops']:.1f} TFLOP/s",
        "ch05-fa2-over-fa1": f"{f21['ratio']:.1f}x",
    }

