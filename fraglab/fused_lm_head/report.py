"""The chapter's findings from its GPU record (``book/data/11_fused_lm_head/results.json``, written by
``python -m fraglab.chapter bench 11``): :func:`glue_values` (name -> text, the numbers the
prose cites; ``tests/test_book_record.py`` recomputes them from the record) and
:func:`comparison_table`. Without a record (a chapter not yet run on the GPU) every value says so.
:func:`logits_bytes` is the memory arithmetic the chapter opens with.

Functions take the loaded record (``{"device", "results"}``).
"""
from __future__ import annotations

from pathlib import Path

from .. import bench, report, tools
from .anchors import VARIANTS
from .report_records import (DATA, DH_EXIT, NCU_WGMMA, NOT_YET, PROFILE, TRAIN_NAMES,  # noqa: F401
                             dh_exit_text, load_profile, ncu_text, profile_rows,
                             profile_table, profile_values)

RESULTS = DATA / "results.json"
#: Every glue name the chapter's prose cites.
CITED = ("ch11-checks", "ch11-course-8k", "ch11-eager-8k", "ch11-fastest-8k",
         "ch11-train-course-8k", "ch11-train-filter-8k", "ch11-train-chunked-8k",
         "ch11-train-wgmma-8k",
         "ch11-train-fastest-8k", "ch11-train-cce-8k", "ch11-skipped-8k", "ch11-inputs-loss-8k",
         "ch11-inputs-share-8k", "ch11-inputs-tiles-8k", "ch11-inputs-shuffled-8k",
         "ch11-goal-time", "ch11-goal-time-filter", "ch11-goal-forward", "ch11-goal-memory",
         "ch11-bwd-tma-8k", "ch11-bwd-wgmma-8k", "ch11-bwd-chunked-8k",
         "ch11-bwd-filter-gemms-8k", "ch11-fwd-tflops-4k", "ch11-g-4k",
         "ch11-gerr-course", "ch11-gerr-filter", "ch11-gerr-cce", "ch11-gerr-cce-nofilter",
         "ch11-profile-course", "ch11-profile-filter", "ch11-profile-compile",
         "ch11-ratio-train-8k", "ch11-ratio-filter-8k", "ch11-ratio-fwd-8k", "ch11-ncu-wgmma",
         "ch11-clocks", "ch11-dh-exit", "ch11-g-skip-16k")
#: The size the prose cites: Llama 3 8B's head at N = 8192.
CITED_SIZE = ("llama3_8b", 8192)
NAMES = {"course": "course kernel", "eager": "PyTorch eager", "compile": "torch.compile",
         "liger": "Liger-Kernel", "cce": "Cut Cross-Entropy"}
#: Where the Cut Cross-Entropy filter-off pair sits apart from the anchors' defaults.
PAIRS = {"course": "cce_nofilter", "course_filter": "cce"}
#: Cut Cross-Entropy's memory plus this is the memory goal (bytes).
MEMORY_SLACK = 16 << 20
ANCHORS = ("eager", "compile", "liger", "cce")


def logits_bytes(n: int, v: int, itemsize: int = 4) -> int:
    """Bytes of an (n, v) logits matrix of ``itemsize``-byte elements (FP32: 4)."""
    return n * v * itemsize


def load(path: str | Path = RESULTS) -> dict:
    """The full record (not ``quick/``); an empty one before the first GPU run."""
    return bench.load_results(path) if Path(path).is_file() else {"results": {}}


def size_record(doc: dict, head: str, n: int, section: str = "timing") -> dict:
    """The record of one size in ``section`` ('timing' or 'train'; ``{}`` when not measured)."""
    for rec in (doc.get("results") or {}).get(section) or []:
        if rec.get("head") == head and rec.get("n") == n:
            return rec
    return {}


def _ms_mib(r: dict) -> str:
    return f"{r['median_ms']:.1f} ms, {r['peak_bytes'] / 2**20:,.0f} MiB"


def _timed(rec: dict) -> dict:
    return {k: r for k, r in (rec.get("variants") or {}).items() if "median_ms" in r}


def _fastest(timed: dict, names=ANCHORS):
    cands = {k: r for k, r in timed.items() if k in names}
    return min(cands, key=lambda k: cands[k]["median_ms"]) if cands else None


def ratio_rows(doc: dict) -> list[dict]:
    """Per training size: the course's step (default, and with its filter) and its forward, each
    over the fastest anchor's at its defaults (below 1: faster), and its memory against Cut
    Cross-Entropy's."""
    rows = []
    for rec in (doc.get("results") or {}).get("train") or []:
        tt = _timed(rec)
        fast = _fastest(tt)
        fwd = _timed(size_record(doc, rec["head"], rec["n"]))
        ffast = _fastest(fwd)
        if "course" not in tt or fast is None:
            continue
        row = {"head": rec["head"], "N": rec["n"], "fastest": NAMES[fast],
               "step": tt["course"]["median_ms"] / tt[fast]["median_ms"]}
        if "course_filter" in tt:
            row["step + filter"] = tt["course_filter"]["median_ms"] / tt[fast]["median_ms"]
        if "course" in fwd and ffast:
            row["forward"] = fwd["course"]["median_ms"] / fwd[ffast]["median_ms"]
            row["fastest forward"] = NAMES[ffast]
        if "cce" in tt:
            row["memory - CCE (MiB)"] = (tt["course"]["peak_bytes"] - tt["cce"]["peak_bytes"]) / 2**20
        rows.append(row)
    return rows


def ratio_table(doc: dict):
    """:func:`ratio_rows` as the chapter shows them."""
    rows = [{k: (f"{v:.2f}x" if isinstance(v, float) and "MiB" not in k
                 else f"{v:+,.0f}" if isinstance(v, float) else v) for k, v in r.items()}
            for r in ratio_rows(doc)]
    if not rows:
        rows = [{"head": "-", "N": "-", "fastest": "-", "step": "-"}]
    name = (doc.get("device") or {}).get("name") or NOT_YET
    return report.table(rows, caption="The course over the fastest anchor at its defaults "
                        "(time ratios, below 1x is faster), and its peak memory beyond Cut "
                        f"Cross-Entropy's, on {name}", wrap=["fastest forward"])


def goals(doc: dict) -> dict[str, str]:
    """The goals over every recorded size: the course's training step (its default, filter off;
    and with its filter) at or below the fastest anchor's at their defaults, its forward at or
    below the fastest anchor's forward, and its peak memory beyond inputs and gradients at most
    Cut Cross-Entropy's plus :data:`MEMORY_SLACK`."""
    rows = ratio_rows(doc)
    if not rows:
        return {k: NOT_YET for k in ("ch11-goal-time", "ch11-goal-time-filter",
                                     "ch11-goal-forward", "ch11-goal-memory")}
    n = len(rows)

    def count(ok) -> str:
        return f"met at {sum(bool(ok(r)) for r in rows)} of {n} sizes"
    return {"ch11-goal-time": count(lambda r: r["step"] <= 1.0),
            "ch11-goal-time-filter": count(lambda r: r.get("step + filter", 9) <= 1.0),
            "ch11-goal-forward": count(lambda r: r.get("forward", 9) <= 1.0),
            "ch11-goal-memory": count(lambda r: r.get("memory - CCE (MiB)", 1e9)
                                      <= MEMORY_SLACK / 2**20)}


def _ratio_text(a: dict, b: dict, b_name: str) -> str:
    x = a["median_ms"] / b["median_ms"]
    return f"{x:.2f}x {b_name}'s time ({a['median_ms']:.1f} against {b['median_ms']:.1f} ms)"


def glue_values(doc: dict) -> dict[str, str]:
    """Every value of :data:`CITED`, as the prose shows it (phrases that read in the prose with a
    record and without one)."""
    res = doc.get("results") or {}
    checks = res.get("check") or []
    where = (doc.get("device") or {}).get("name") or "a machine without a GPU"
    passed = sum(bool(r.get("ok")) for r in checks)
    rec = size_record(doc, *CITED_SIZE)
    timed = _timed(rec)
    fastest = _fastest(timed)
    train = size_record(doc, *CITED_SIZE, section="train")
    tt = _timed(train)
    tfast = _fastest(tt)
    inp = rec.get("inputs") or {}
    filt = train.get("course_filter") or {}
    out = {
        "ch11-checks": f"{passed} of {len(checks)} passed, on {where}" if checks
        else "none yet (no GPU run recorded)",
        "ch11-course-8k": _ms_mib(timed["course"]) if "course" in timed else NOT_YET,
        "ch11-eager-8k": _ms_mib(timed["eager"]) if "eager" in timed else NOT_YET,
        "ch11-fastest-8k": (f"{NAMES[fastest]}: {_ms_mib(timed[fastest])}" if fastest
                            else NOT_YET),
        "ch11-train-fastest-8k": (f"{NAMES[tfast]}: {_ms_mib(tt[tfast])}" if tfast else NOT_YET),
        "ch11-skipped-8k": (f"{filt['share_skipped']:.1%} of {filt['tiles']:,} tiles" if filt
                            else NOT_YET),
        "ch11-inputs-loss-8k": f"{inp['mean_loss']:.2f} nats" if inp else NOT_YET,
        "ch11-inputs-share-8k": f"{inp['share_at_or_above_eps']:.3%}" if inp else NOT_YET,
        "ch11-inputs-tiles-8k": f"{inp['share_tiles_kept']:.1%}" if inp else NOT_YET,
        "ch11-inputs-shuffled-8k": f"{inp['share_tiles_kept_shuffled']:.1%}" if inp else NOT_YET,
    }
    for key, name in (("course", "course"), ("filter", "course_filter"),
                      ("chunked", "course_chunked"), ("wgmma", "course_wgmma"), ("cce", "cce")):
        out[f"ch11-train-{key}-8k"] = _ms_mib(tt[name]) if name in tt else NOT_YET
    for key, name in (("train", "course"), ("filter", "course_filter")):
        out[f"ch11-ratio-{key}-8k"] = (_ratio_text(tt[name], tt[tfast], NAMES[tfast])
                                       if name in tt and tfast else NOT_YET)
    out["ch11-ratio-fwd-8k"] = (_ratio_text(timed["course"], timed[fastest], NAMES[fastest])
                                if "course" in timed and fastest else NOT_YET)
    four = _timed(size_record(doc, "llama3_8b", 4096))
    for key, name in (("ch11-fwd-tflops-4k", "course"),):
        out[key] = f"{four[name]['tflops']:,.0f} TFLOP/s" if name in four else NOT_YET
    br = size_record(doc, "llama3_8b", 4096, section="train").get("breakdown") or {}
    out["ch11-g-4k"] = (f"{br['wgmma']['g']:.1f} ms ({br['flop_each'] / br['wgmma']['g'] / 1e9:,.0f} "
                        f"TFLOP/s) with cp.async, {br['tma']['g']:.1f} ms ({br['flop_each'] / br['tma']['g'] / 1e9:,.0f} "
                        "TFLOP/s) with the TMA" if "wgmma" in br and "tma" in br else NOT_YET)
    out.update(goals(doc))
    out.update(breakdown_values(doc))
    out.update(grad_error_values(doc))
    out.update(profile_values(load_profile()))
    out["ch11-ncu-wgmma"] = ncu_text(load_profile(NCU_WGMMA))
    out["ch11-clocks"] = clocks_text(doc)
    out["ch11-dh-exit"] = dh_exit_text(load_profile(DH_EXIT))
    return out


def clocks_text(doc: dict, head: str = "llama3_8b") -> str:
    """The SM clock NVML sampled after the training comparisons of ``head``'s smallest and
    largest N, with the throttle reasons it gave."""
    recs = sorted((r for r in (doc.get("results") or {}).get("train") or [] if r.get("head") == head),
                  key=lambda r: r["n"])
    parts = []
    for r in (recs[0], recs[-1]) if recs else ():
        c = (r.get("comparison") or {}).get("clocks") or {}
        if "sm_mhz" in c:
            why = ", ".join(c.get("reasons") or []) or "no throttle reason"
            parts.append(f"{c['sm_mhz']:,} MHz at N = {r['n']:,} ({why})")
    return " and ".join(parts) if parts else NOT_YET


def _cell(r: dict | None, failed: bool) -> str:
    if r and "median_ms" in r:
        return f"{r['median_ms']:.1f} ms / {r['peak_bytes'] / 2**20:,.0f} MiB"
    return "failed" if failed else "-"


def comparison_table(doc: dict, section: str = "timing"):
    """Time and peak memory of every variant at every size (dashes before the first GPU run):
    the forward loss (``section='timing'``: memory beyond the inputs) or the training step
    (``'train'``: beyond the inputs and the two gradients)."""
    names = NAMES if section == "timing" else TRAIN_NAMES
    what = ("Forward loss ('mean', bf16): median time / peak memory beyond the inputs"
            if section == "timing" else "Training step (loss, dh, dw; bf16): median time / peak "
            "memory beyond the inputs and gradients")
    recs = (doc.get("results") or {}).get(section) or []
    if not recs:
        return report.table([{"head": "-", "N": "-", **{names[k]: "-" for k in names}}],
                            caption=f"{what}: {NOT_YET} (python -m fraglab.chapter bench 11)",
                            wrap=list(names.values()))
    rows = []
    for rec in recs:
        row = {"head": rec["head"], "N": f"{rec['n']:,}"}
        for k, label in names.items():
            row[label] = _cell((rec.get("variants") or {}).get(k), k in rec.get("failures", {}))
        rows.append(row)
    name = (doc.get("device") or {}).get("name")
    return report.table(rows, caption=f"{what}, on {name}", wrap=list(names.values()))


def inputs_table(doc: dict):
    """Per size: what the inputs' softmax looks like, and the tiles the course's filter
    skipped (dashes before the first GPU run)."""
    rows = []
    for rec in (doc.get("results") or {}).get("timing") or []:
        inp = rec.get("inputs") or {}
        filt = size_record(doc, rec["head"], rec["n"], "train").get("course_filter") or {}
        rows.append({"head": rec["head"], "N": f"{rec['n']:,}",
                     "mean loss": f"{inp['mean_loss']:.2f}" if inp else "-",
                     "p(target)": f"{inp['mean_p_target']:.2f}" if inp else "-",
                     "entries >= 2^-12": f"{inp['share_at_or_above_eps']:.3%}" if inp else "-",
                     "tiles kept": f"{inp['share_tiles_kept']:.1%}" if inp else "-",
                     "kept, shuffled ids": (f"{inp['share_tiles_kept_shuffled']:.1%}" if inp
                                            else "-"),
                     "filter skipped": f"{filt['share_skipped']:.1%}" if filt else "-"})
    if not rows:
        rows = [{"head": "-", "N": "-", "mean loss": "-", "p(target)": "-",
                 "entries >= 2^-12": "-", "tiles kept": "-", "kept, shuffled ids": "-",
                 "filter skipped": "-"}]
    return report.table(rows, caption="The inputs' softmax (FP32), and the course's filter"
                        + ("" if (doc.get("results") or {}).get("timing") else f": {NOT_YET}"),
                        wrap=["entries >= 2^-12", "kept, shuffled ids", "filter skipped"])


#: The backward settings of the breakdown (``bench.BREAKDOWN``), as the table names them.
BREAKDOWN_NAMES = {"tma": "tma", "tma_filter": "tma + filter",
                   "tma_filter_all": "tma + filter, every tile's logits",
                   "wgmma": "wgmma", "wgmma_filter": "wgmma + filter",
                   "chunked": "chunked (mma.sync)"}


def _kernels_cell(ms: float | None, flop: float | None) -> str:
    """Milliseconds, and the TFLOP/s of ``flop`` in them (None: a filtered product, whose
    work is not the whole product's)."""
    if ms is None:
        return "-"
    return f"{ms:.1f} ms" + ("" if flop is None else f" ({flop / ms / 1e9:,.0f})")


def breakdown_table(doc: dict):
    """Per size and backward setting: the milliseconds of its G kernels, dw GEMMs and dh GEMMs
    (each summed over the chunks), with the TFLOP/s of an unfiltered product of 2 N V d in
    parentheses (dashes before the first GPU run)."""
    rows = []
    for rec in (doc.get("results") or {}).get("train") or []:
        br = rec.get("breakdown") or {}
        for key, label in BREAKDOWN_NAMES.items():
            if key not in br:
                continue
            r, flop = br[key], None if "filter" in key else br["flop_each"]
            rows.append({"head": rec["head"], "N": f"{rec['n']:,}", "backward": label,
                         **{col: _kernels_cell(r.get(kind), flop)
                            for kind, col in (("g", "G"), ("dw", "dw GEMM"), ("dh", "dh GEMM"))},
                         "sum": f"{sum(r.values()):.1f} ms"})
    if not rows:
        rows = [{"head": "-", "N": "-", "backward": "-", "G": "-", "dw GEMM": "-", "dh GEMM": "-",
                 "sum": "-"}]
    name = (doc.get("device") or {}).get("name") or NOT_YET
    return report.table(rows, caption="The backward's kernels: ms summed over the chunks (and the "
                        "TFLOP/s of a whole 2 N V d product; with the filter, ms only), median of "
                        f"5 runs, on {name}", wrap=["backward"])


def breakdown_values(doc: dict) -> dict[str, str]:
    """The breakdown at the cited size, for the prose."""
    rec = size_record(doc, *CITED_SIZE, section="train")
    br = rec.get("breakdown") or {}
    out = {}
    for key, name in (("tma", "ch11-bwd-tma-8k"), ("wgmma", "ch11-bwd-wgmma-8k"),
                      ("chunked", "ch11-bwd-chunked-8k")):
        r = br.get(key)
        cell = (lambda kind: _kernels_cell(r[kind], br["flop_each"])) if r else None
        out[name] = (f"G {cell('g')}, dw {cell('dw')}, dh {cell('dh')}" if r else NOT_YET)
    r = br.get("tma_filter")
    out["ch11-bwd-filter-gemms-8k"] = f"{r['dw'] + r['dh']:.1f} ms" if r else NOT_YET
    parts = []
    for head, label in (("llama3_8b", "Llama 3 8B"), ("gemma2_2b", "Gemma 2 2B")):
        b = size_record(doc, head, 16384, section="train").get("breakdown") or {}
        if "tma_filter" in b and "tma_filter_all" in b:
            parts.append(f"{b['tma_filter_all']['g']:.1f} ms to {b['tma_filter']['g']:.1f} ms "
                         f"at {label}'s head")
    out["ch11-g-skip-16k"] = (" and from ".join(parts) + " (N = 16,384)") if parts else NOT_YET
    return out


def scratch_rows(n: int = 8192) -> list[dict]:
    """Each backward rung's buffers beyond the gradients at both heads (computed, not measured:
    :func:`fraglab.fused_lm_head.backward.scratch_bytes`), beside the FP32 logits."""
    from . import backward
    rows = []
    for head, (d, v) in (("llama3_8b", (4096, 128256)), ("gemma2_2b", (2304, 256000))):
        for variant in backward.VARIANTS:
            parts = backward.scratch_bytes(n, v, d, variant)
            rows.append({"head": head, "N": f"{n:,}", "rung": variant,
                         "buffers": ", ".join(f"{k} {b / 2**20:,.0f} MiB" for k, b in parts.items()),
                         "total": f"{sum(parts.values()) / 2**20:,.0f} MiB",
                         "FP32 logits": f"{logits_bytes(n, v) / 2**20:,.0f} MiB"})
    return rows


def plot_time_memory(doc: dict):
    """Training step: median time (top) and peak memory beyond inputs and gradients (bottom,
    log scale) against N, one panel per head, one line per variant; without a record, empty
    panels that say so."""
    import matplotlib.pyplot as plt
    plt.rcParams.update({"font.size": 10, "axes.titlesize": 10, "legend.fontsize": 9,
                         "xtick.labelsize": 9, "ytick.labelsize": 9})
    recs = (doc.get("results") or {}).get("train") or []
    heads = ("llama3_8b", "gemma2_2b")
    fig, axes = plt.subplots(2, 2, figsize=(7.85, 5.6), sharex=True)
    for col, head in enumerate(heads):
        mine = sorted((r for r in recs if r.get("head") == head), key=lambda r: r["n"])
        axes[0, col].set_title(head)
        for i, (k, label) in enumerate(TRAIN_NAMES.items()):
            pts = [(r["n"], r["variants"][k]) for r in mine if "median_ms" in
                   (r.get("variants") or {}).get(k, {})]
            if not pts:
                continue
            xs = [n for n, _ in pts]
            style = dict(marker="o", color=f"C{i}", label=label if col == 0 else None,
                         linestyle="-" if k.startswith("course") else "--")
            axes[0, col].plot(xs, [r["median_ms"] for _, r in pts], **style)
            axes[1, col].plot(xs, [max(r["peak_bytes"], 2**20) / 2**20 for _, r in pts], **style)
        axes[1, col].set_yscale("log")
        axes[1, col].set_xscale("log", base=2)
        axes[1, col].set_xticks([4096, 8192, 16384], ["4k", "8k", "16k"])
        axes[1, col].set_xlabel("tokens N")
        if not mine:
            for ax in axes[:, col]:
                ax.text(0.5, 0.5, NOT_YET, transform=ax.transAxes, ha="center", va="center")
    axes[0, 0].set_ylabel("time (ms)")
    axes[1, 0].set_ylabel("peak MiB (log)")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=4, frameon=False)
        fig.tight_layout(rect=(0, 0.1, 1, 1))
    else:
        fig.tight_layout()
    return fig


# --- what the chapter reads from the compiler ------------------------------------------------------

def _function(text: str, start: str, end: str) -> str:
    """The lines of ``text`` from the one holding ``start`` to the one before ``end``."""
    i = text.index(start)
    i = text.rindex("\n", 0, i) + 1
    return text[i:text.index(end, i)].rstrip() + "\n"


def lse_vs_online_softmax() -> str:
    """A unified diff: chapter 05's ``online_softmax`` (``kernels/fa2_mma.cuh``) into this
    chapter's ``lse_tile`` (``kernels/11_fused_lm_head_lse.cuh``)."""
    import difflib
    fa2 = (tools.KERNELS_DIR / "fa2_mma.cuh").read_text()
    old = _function(fa2, "template <int D, int BN>\n__device__ __forceinline__ void online_softmax",
                    "\n// O += P V")
    lse = (tools.KERNELS_DIR / "11_fused_lm_head_lse.cuh").read_text()
    new = lse[lse.rindex("\n", 0, lse.index("__device__ __forceinline__ void lse_tile")) + 1:]
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                        "kernels/fa2_mma.cuh: online_softmax",
                                        "kernels/11_fused_lm_head_lse.cuh: lse_tile"))


def resource_rows(arches=("sm_80", "sm_90")) -> list[dict]:
    """ptxas's report for every forward kernel and target, with sm_90's occupancy."""
    from .. import sass, toolchain
    from . import kernels
    rows = []
    for arch in arches:
        build = toolchain.compile(kernels.KERNELS, arch)
        c = build.constants("lmh_")
        for dtype in ("bf16", "f16"):
            for cap in (False, True):
                k = kernels.kernel_name(dtype, cap)
                res = build.resources[k]
                occ = sass.occupancy(res["registers"], c["lmh_fwd_smem"], c["lmh_threads"])
                rows.append({"target": arch, "kernel": k, "registers": res["registers"],
                             "spills (bytes)": res["spill_stores"] + res["spill_loads"],
                             "shared KB": c["lmh_fwd_smem"] // 1024,
                             "blocks / SM (sm_90)": occ["blocks_per_sm"]})
    return rows


#: The opcodes the SASS table counts in the main loop.
LOOP_OPCODES = ("HMMA", "LDSM", "LDGSTS", "SHFL", "MUFU", "STS", "LDS", "STG", "LDL", "STL")


def loop_rows(arches=("sm_80", "sm_90"), kernel: str = "lmhead_fwd_bf16") -> list[dict]:
    """Opcode counts of ``kernel``'s main loop (the loop with the HMMAs, the tile's epilogue
    inside it) per target; ``LDS`` counts only executed loads (ptxas's ``@!PT LDS RZ, [RZ]``
    placeholders, which never run, are left out)."""
    from .. import sass, toolchain
    from . import kernels
    rows = []
    for arch in arches:
        loop = sass.main_loop(toolchain.compile(kernels.KERNELS, arch).sass(kernel), "HMMA")
        ops = [sass.base_opcode(line) for line in loop if not line.startswith("@!PT")]
        rows.append({"target": arch, "instructions": len(loop),
                     **{op: ops.count(op) for op in LOOP_OPCODES}})
    return rows


# --- the gradients against float64, and where a step's time goes ----------------------------------

#: The variants the gradient-error table shows, in its order.
GERR_NAMES = {"course": "course", "course_filter": "course + filter", "compile": "torch.compile",
              "liger": "Liger-Kernel", "cce": "Cut Cross-Entropy", "cce_nofilter": "CCE, filter off"}


def grad_error_rows(doc: dict) -> list[dict]:
    """Per head (its smallest N) and variant: dh's and dw's relative error against float64."""
    rows = []
    for rec in (doc.get("results") or {}).get("train") or []:
        for k, label in GERR_NAMES.items():
            e = (rec.get("grad_errors") or {}).get(k) or {}
            if "dh" in e:
                rows.append({"head": rec["head"], "N": f"{rec['n']:,}", "variant": label,
                             "dh error": f"{e['dh']:.1e}", "dw error": f"{e['dw']:.1e}"})
    return rows


def grad_error_values(doc: dict) -> dict[str, str]:
    """dh's error of the course, the course with its filter, Cut Cross-Entropy and Cut
    Cross-Entropy without its filter, at Llama 3 8B's head (its smallest N)."""
    rec = next((r for r in (doc.get("results") or {}).get("train") or []
                if r.get("head") == "llama3_8b" and r.get("grad_errors")), {})
    e = rec.get("grad_errors") or {}
    out = {}
    for key, name in (("course", "course"), ("filter", "course_filter"), ("cce", "cce"),
                      ("cce-nofilter", "cce_nofilter")):
        r = e.get(name) or {}
        out[f"ch11-gerr-{key}"] = (f"{r['dh']:.1e} (dh) and {r['dw']:.1e} (dw)" if "dh" in r
                                   else NOT_YET)
    return out
