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

RESULTS = tools.REPO_ROOT / "book" / "data" / "11_fused_lm_head" / "results.json"
#: Every glue name the chapter's prose cites.
CITED = ("ch11-checks", "ch11-course-8k", "ch11-eager-8k", "ch11-fastest-8k",
         "ch11-train-course-8k", "ch11-train-filter-8k", "ch11-train-chunked-8k",
         "ch11-train-atomic-8k",
         "ch11-train-fastest-8k", "ch11-train-cce-8k", "ch11-skipped-8k", "ch11-inputs-loss-8k",
         "ch11-inputs-share-8k", "ch11-inputs-tiles-8k", "ch11-inputs-shuffled-8k",
         "ch11-goal-time", "ch11-goal-memory", "ch11-bwd-wgmma-8k", "ch11-bwd-chunked-8k",
         "ch11-bwd-filter-gemms-8k")
NOT_YET = "not measured yet"
#: The size the prose cites: Llama 3 8B's head at N = 8192.
CITED_SIZE = ("llama3_8b", 8192)
NAMES = {"course": "course kernel", "eager": "PyTorch eager", "compile": "torch.compile",
         "liger": "Liger-Kernel", "cce": "Cut Cross-Entropy"}
#: The training step's variants, in the table's order (the course's four settings first).
TRAIN_NAMES = {"course": "course (wgmma)", "course_filter": "course + filter",
               "course_chunked": "course (chunked)", "course_atomic": "course (atomic)",
               "eager": "PyTorch eager",
               "compile": "torch.compile", "liger": "Liger-Kernel", "cce": "Cut Cross-Entropy"}
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


def goals(doc: dict) -> dict[str, str]:
    """The issue's two goals over every recorded training size: the course's step at or below
    the fastest anchor's time, and its peak memory beyond inputs and gradients at or below Cut
    Cross-Entropy's ('course' is the default rung, filter off; the filter's row is a variant)."""
    recs = (doc.get("results") or {}).get("train") or []
    time_ok, mem_ok, sizes = [], [], 0
    for rec in recs:
        timed = _timed(rec)
        fast = _fastest(timed)
        if "course" not in timed or fast is None:
            continue
        sizes += 1
        best = min(timed[k]["median_ms"] for k in ("course", "course_filter") if k in timed)
        if best <= timed[fast]["median_ms"]:
            time_ok.append(f"{rec['head']} {rec['n']}")
        if "cce" in timed and timed["course"]["peak_bytes"] <= timed["cce"]["peak_bytes"]:
            mem_ok.append(f"{rec['head']} {rec['n']}")
    if not sizes:
        return {"ch11-goal-time": NOT_YET, "ch11-goal-memory": NOT_YET}
    return {"ch11-goal-time": f"met at {len(time_ok)} of {sizes} sizes",
            "ch11-goal-memory": f"met at {len(mem_ok)} of {sizes} sizes"}


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
                      ("chunked", "course_chunked"), ("atomic", "course_atomic"), ("cce", "cce")):
        out[f"ch11-train-{key}-8k"] = _ms_mib(tt[name]) if name in tt else NOT_YET
    out.update(goals(doc))
    out.update(breakdown_values(doc))
    return out


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
BREAKDOWN_NAMES = {"wgmma": "wgmma", "wgmma_filter": "wgmma + filter",
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
    for key, name in (("wgmma", "ch11-bwd-wgmma-8k"), ("chunked", "ch11-bwd-chunked-8k")):
        r = br.get(key)
        cell = (lambda kind: _kernels_cell(r[kind], br["flop_each"])) if r else None
        out[name] = (f"G {cell('g')}, dw {cell('dw')}, dh {cell('dh')}" if r else NOT_YET)
    r = br.get("wgmma_filter")
    out["ch11-bwd-filter-gemms-8k"] = f"{r['dw'] + r['dh']:.1f} ms" if r else NOT_YET
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
        for dtype in ("bf16", "f16"):
            for cap in (False, True):
                k = kernels.kernel_name(dtype, cap)
                res = build.resources[k]
                occ = sass.occupancy(res["registers"], kernels.SMEM_BYTES, kernels.THREADS)
                rows.append({"target": arch, "kernel": k, "registers": res["registers"],
                             "spills (bytes)": res["spill_stores"] + res["spill_loads"],
                             "shared KB": kernels.SMEM_BYTES // 1024,
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
