"""Chapter 03's findings from the SASS, as a record, glued numbers and plots.

:func:`sass_record` compiles ``kernels/03_permutation_and_quad_reduction.cu`` for every target with
this machine's NVRTC and counts what the chapter quotes; :func:`glue_values` turns a record into the
``{name: text}`` the chapter glues (``report.glue_all``). ``tests/test_book_sass.py`` recomputes
both on the CPU and compares them with the book's glued values: the compiler-independent ones
always, the totals when the book's NVRTC is the one installed here.

Totals depend on the compiler version: ptxas pads with ``NOP`` and schedules a little differently
(NVRTC 12.9 gives 96 and 94 instructions on the quad-mask path of sm_90 and sm_120 where NVRTC 13.0
gives 94 and 92). The *extra* instructions of the quad-mask path, NOPs aside, are the same.
"""
from __future__ import annotations

import re
from collections import Counter

from .. import sass, toolchain
from ..tools import nvrtc_version
from .names import KERNELS, MASKS, OPS, VARIANTS, reduce_acc_kernel, rowmax_kernel

#: The instructions ptxas adds to guard shuffles whose member masks may differ between lanes.
GUARD = ("MATCH", "REDUX", "VOTEU", "WARPSYNC", "BRA")
#: Resource-report columns of the rowmax comparison.
CLASSES = ("tensor", "shared", "barrier", "shuffle", "global")


def _base(op: str) -> str:
    return op.split(".")[0]


def sass_record(arches=None) -> dict:
    """What chapter 03 reads from the SASS, for each target (JSON-able)."""
    out = {"nvrtc": "{}.{}".format(*nvrtc_version()), "arches": {}}
    for arch in arches or toolchain.ARCHES:
        build = toolchain.compile(KERNELS, arch)
        listing = sass.disassemble(build)
        same, swap_counts = True, None
        for op in OPS:
            for m in MASKS:
                a = sass.normalized_listing(sass.function_text(listing, reduce_acc_kernel((16, 16), op, True, m)))
                b = sass.normalized_listing(sass.function_text(listing, reduce_acc_kernel((16, 16), op, False, m)))
                same &= a == b
                if (op, m) == ("max", "full"):
                    swap_counts = [len(a), len(b)]
        full = sass.main_path(sass.function_text(listing, "rowmax_fullmask_16x16"))
        quad = sass.main_path(sass.function_text(listing, "rowmax_quadmask_16x16"))
        extra = Counter(map(_base, quad)) - Counter(map(_base, full))
        shared = sass.main_path(sass.function_text(listing, rowmax_kernel("shared")))
        shared_ops = dict(sorted(Counter(o for o in shared if _base(o) in ("STS", "LDS", "BAR")).items()))
        rowmax = {}
        for variant in VARIANTS:
            k = rowmax_kernel(variant)
            r, c = build.resources[k], build.classes(k)
            rowmax[variant] = {"kernel": k, "registers": r["registers"], "smem": r["smem"],
                           "instructions": sum(c.values()), **{x: c[x] for x in CLASSES}}
        out["arches"][arch] = {
            "swap_identical": bool(same), "swap_counts": swap_counts,
            "full_path": len(full), "quad_path": len(quad),
            "full_nops": sum(_base(o) == "NOP" for o in full),
            "quad_nops": sum(_base(o) == "NOP" for o in quad),
            "shfl_full": sum(_base(o) == "SHFL" for o in full),
            "shfl_quad": sum(_base(o) == "SHFL" for o in quad),
            "extra": dict(sorted(extra.items())), "rowmax": rowmax, "shared_ops": shared_ops}
    return out


def _extra_text(extra: dict) -> str:
    return ", ".join(f"{k} {n}" for k, n in sorted(extra.items()) if k != "NOP") or "none"


#: Glue names whose text does not depend on the NVRTC version (the test always compares them).
STABLE = ("ch03-swap-identical", "ch03-guard-sm90", "ch03-extra-sm90", "ch03-extra-sm80",
          "ch03-extra-sm75", "ch03-r2ur-sm90", "ch03-shfl", "ch03-shared-stores", "ch03-shared-loads",
          "ch03-shared-barriers", "ch03-shared-kib")


def glue_values(record: dict) -> dict[str, str]:
    """``{name: text}`` of every number chapter 03's prose cites, from :func:`sass_record`."""
    a = record["arches"]
    s90 = a["sm_90"]
    guard = {k: n for k, n in s90["extra"].items() if k in GUARD}
    ops = s90["shared_ops"]
    per = lambda base: ", ".join(f"{n} {o}" for o, n in ops.items() if _base(o) == base) or "none"
    return {
        "ch03-shared-stores": per("STS"),
        "ch03-shared-loads": per("LDS"),
        "ch03-shared-barriers": per("BAR"),
        "ch03-shared-kib": f"{s90['rowmax']['shared']['smem'] / 1024:g}",
        "ch03-nvrtc": record["nvrtc"],
        "ch03-swap-identical": "yes" if all(v["swap_identical"] for v in a.values()) else "no",
        "ch03-full-sm90": str(s90["full_path"]),
        "ch03-quad-sm90": str(s90["quad_path"]),
        "ch03-quad-sm120": str(a["sm_120"]["quad_path"]) if "sm_120" in a else "n/a",
        "ch03-guard-sm90": ", ".join(f"{n} {k}" for k, n in sorted(guard.items())),
        "ch03-extra-sm90": _extra_text(s90["extra"]),
        "ch03-extra-sm80": _extra_text(a["sm_80"]["extra"]),
        "ch03-extra-sm75": _extra_text(a["sm_75"]["extra"]),
        "ch03-r2ur-sm90": str(s90["extra"].get("R2UR", 0)),
        "ch03-shfl": str(s90["shfl_full"]),
    }


def counts_table(record: dict):
    """The per-target table of chapter 03 (a :class:`fraglab.report.Table`)."""
    from .. import report
    rows = [{"target": arch, "swap == no swap": "identical" if v["swap_identical"] else "DIFFERENT",
             "reduce (max, full)": v["swap_counts"][0], "rowmax full mask": v["full_path"],
             "rowmax quad masks": v["quad_path"], "extra on the quad path (NOPs aside)": _extra_text(v["extra"])}
            for arch, v in record["arches"].items()]
    return report.table(rows, caption=f"Instructions on the main path, NVRTC {record['nvrtc']}",
                        wrap=["extra on the quad path (NOPs aside)"], wrap_header=True)


def rowmax_table(record: dict, arches=("sm_80", "sm_90", "sm_120")):
    """Shared memory vs registers: the rowmax kernels' resources and instruction classes."""
    from .. import report
    short = {"registers": "regs", "smem": "smem B", "instructions": "instr."}
    rows = [{"target": arch, **{short.get(k, k): _short_kernel(v) if k == "kernel" else v
                                for k, v in r.items()}}
            for arch in arches for r in record["arches"][arch]["rowmax"].values()]
    return report.table(rows, caption=f"rowmax_<variant>_16x16 kernels (NVRTC {record['nvrtc']}): "
                        "registers, shared bytes, instructions and SASS classes")


def _short_kernel(name: str) -> str:
    """``rowmax_quadmask_16x16`` -> ``quadmask`` (the rowmax table's caption names the rest)."""
    return re.sub(r"^rowmax_(.*)_16x16$", r"\1", name)


def plot_mask_cost(record: dict):
    """Bars per target: the main path with the full mask, and with the quad masks split into the
    guard (MATCH, REDUX, VOTEU, WARPSYNC, BRA), R2UR, and the rest. Returns the Figure."""
    import matplotlib.pyplot as plt
    import numpy as np

    arches = list(record["arches"])
    x = np.arange(len(arches))
    fig, ax = plt.subplots(figsize=(7.2, 3.6))
    full = [record["arches"][a]["full_path"] for a in arches]
    ax.bar(x - 0.2, full, 0.38, color="C0", label="full mask 0xffffffff")
    bottom = np.zeros(len(arches))
    parts = (("guard: MATCH, REDUX, VOTEU, WARPSYNC, BRA", lambda e: sum(e.get(k, 0) for k in GUARD), "C3"),
             ("R2UR (descriptor moved to uniform registers)", lambda e: e.get("R2UR", 0), "C1"))
    rest = [record["arches"][a]["quad_path"] - sum(f(record["arches"][a]["extra"]) for _, f, _ in parts)
            for a in arches]
    ax.bar(x + 0.2, rest, 0.38, color="C7", label="quad masks: the rest")
    bottom += rest
    for label, f, color in parts:
        h = [f(record["arches"][a]["extra"]) for a in arches]
        ax.bar(x + 0.2, h, 0.38, bottom=bottom, color=color, label=label)
        bottom += h
    for xi, t in zip(x, full):
        ax.text(xi - 0.2, t + 1, str(t), ha="center", va="bottom", fontsize=9)
    for xi, a in zip(x, arches):
        ax.text(xi + 0.2, record["arches"][a]["quad_path"] + 1, str(record["arches"][a]["quad_path"]),
                ha="center", va="bottom", fontsize=9)
    ax.set_xticks(x, arches, fontsize=9)
    ax.set_ylabel("instructions on the main path", fontsize=9)
    ax.set_ylim(0, max(record["arches"][a]["quad_path"] for a in arches) * 1.45)
    ax.tick_params(labelsize=9)
    ax.legend(fontsize=8.5, loc="upper left", frameon=False)
    ax.set_title(f"rowmax_*mask_16x16, NVRTC {record['nvrtc']}", fontsize=10)
    fig.tight_layout()
    return fig


def plot_bit_layout(shape, spec: int, layout, panel: int = 16):
    """One accumulator tile (rows x cols) with, in each cell, the lane (top) and the register
    (bottom) that hold it; colours mark the quads. A side longer than ``panel`` is cut into
    panels of ``panel`` (8x32: two 8x16 halves one above the other; 32x8: two 16x8 halves side by
    side), so the figure fits the book's column without being shrunk and its 10 pt numbers stay
    12.5 px tall there (``report.smallest_text_px``). Returns the Figure."""
    import matplotlib.pyplot as plt
    import numpy as np

    rows, cols = shape
    lanes = np.zeros(shape, int)
    regs = np.zeros(shape, int)
    for lane in range(32):
        for r in range(layout.shape[1]):
            lanes[tuple(layout[lane, r])], regs[tuple(layout[lane, r])] = lane, r
    wide = cols > rows
    n = -(-max(rows, cols) // panel) if max(rows, cols) > panel else 1
    pr, pc = (rows, -(-cols // n)) if wide else (-(-rows // n), cols)   # one panel's cells
    grid = (n, 1) if wide else (1, n)
    fs, cw, ch = 10.0, 0.40, 0.36                      # font (pt), inches per column and per row
    fig, axes = plt.subplots(*grid, figsize=(grid[1] * (pc * cw + 0.55) + 0.3,
                                             grid[0] * (pr * ch + 0.75) + 0.35), squeeze=False)
    for k, ax in enumerate(axes.flat):
        r0, c0 = (0, k * pc) if wide else (k * pr, 0)
        sub = (slice(r0, min(rows, r0 + pr)), slice(c0, min(cols, c0 + pc)))
        ax.imshow(lanes[sub] // 4, cmap="tab10", vmin=0, vmax=9, alpha=0.45, aspect="auto")
        for (row, col), lane in np.ndenumerate(lanes[sub]):
            ax.text(col, row, f"{lane}\n{regs[sub][row, col]}", ha="center", va="center",
                    fontsize=fs, linespacing=1.0)
        h, w = lanes[sub].shape
        ax.set_xticks(range(w), [str(c0 + c) for c in range(w)], fontsize=fs)
        ax.set_yticks(range(h), [str(r0 + r) for r in range(h)], fontsize=fs)
        ax.set_xlabel("column", fontsize=fs)
        ax.set_ylabel("row", fontsize=fs)
        if n > 1:
            ax.set_title(f"columns {c0}-{c0 + w - 1}" if wide else f"rows {r0}-{r0 + h - 1}",
                         fontsize=fs)
    fig.suptitle(f"{rows}x{cols}: lane / register in each cell (spec {spec:#010x})", fontsize=fs + 1)
    fig.tight_layout()
    return fig
