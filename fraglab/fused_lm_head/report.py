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
CITED = ("ch11-checks", "ch11-course-8k", "ch11-eager-8k", "ch11-fastest-8k")
NOT_YET = "not measured yet"
#: The size the prose cites: Llama 3 8B's head at N = 8192.
CITED_SIZE = ("llama3_8b", 8192)
NAMES = {"course": "course kernel", "eager": "PyTorch eager", "compile": "torch.compile",
         "liger": "Liger-Kernel", "cce": "Cut Cross-Entropy"}


def logits_bytes(n: int, v: int, itemsize: int = 4) -> int:
    """Bytes of an (n, v) logits matrix of ``itemsize``-byte elements (FP32: 4)."""
    return n * v * itemsize


def load(path: str | Path = RESULTS) -> dict:
    """The record; an empty one before the first GPU run."""
    return bench.load_results(path) if Path(path).is_file() else {"results": {}}


def size_record(doc: dict, head: str, n: int) -> dict:
    """The record of one size (``{}`` when not measured)."""
    for rec in (doc.get("results") or {}).get("timing") or []:
        if rec.get("head") == head and rec.get("n") == n:
            return rec
    return {}


def _ms_mib(r: dict) -> str:
    return f"{r['median_ms']:.1f} ms, {r['peak_bytes'] / 2**20:,.0f} MiB"


def glue_values(doc: dict) -> dict[str, str]:
    """Every value of :data:`CITED`, as the prose shows it (phrases that read in the prose with a
    record and without one)."""
    res = doc.get("results") or {}
    checks = res.get("check") or []
    where = (doc.get("device") or {}).get("name") or "a machine without a GPU"
    passed = sum(bool(r.get("ok")) for r in checks)
    rec = size_record(doc, *CITED_SIZE)
    timed = {k: r for k, r in (rec.get("variants") or {}).items() if "median_ms" in r}
    anchors_timed = {k: r for k, r in timed.items() if k != "course"}
    fastest = min(anchors_timed, key=lambda k: anchors_timed[k]["median_ms"]) if anchors_timed else None
    return {
        "ch11-checks": f"{passed} of {len(checks)} passed, on {where}" if checks
        else "none yet (no GPU run recorded)",
        "ch11-course-8k": _ms_mib(timed["course"]) if "course" in timed else NOT_YET,
        "ch11-eager-8k": _ms_mib(timed["eager"]) if "eager" in timed else NOT_YET,
        "ch11-fastest-8k": (f"{NAMES[fastest]}: {_ms_mib(anchors_timed[fastest])}" if fastest
                            else NOT_YET),
    }


def comparison_table(doc: dict):
    """Time and peak memory beyond the inputs of every variant at every size (dashes before the
    first GPU run)."""
    recs = (doc.get("results") or {}).get("timing") or []
    if not recs:
        return report.table([{"head": "-", "N": "-", **{NAMES[k]: "-" for k in VARIANTS}}],
                            caption=f"Forward loss: {NOT_YET} (python -m fraglab.chapter bench 11)")
    rows = []
    for rec in recs:
        row = {"head": rec["head"], "N": f"{rec['n']:,}"}
        for k in VARIANTS:
            r = (rec.get("variants") or {}).get(k) or {}
            row[NAMES[k]] = (f"{r['median_ms']:.1f} ms / {r['peak_bytes'] / 2**20:,.0f} MiB"
                             if "median_ms" in r else "failed" if k in rec.get("failures", {})
                             else "-")
        rows.append(row)
    name = (doc.get("device") or {}).get("name")
    return report.table(rows, caption=f"Forward loss ('mean', bf16): median time / peak memory "
                        f"beyond the inputs, on {name}", wrap=list(NAMES.values()))


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
