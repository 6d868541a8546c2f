"""The chapter's findings, computed from the H100 record (``book/data/07_register_reuse/``).

Everything the chapter says with a number comes from here: :func:`glue_values` returns the
glued values of the record (name -> text; ``tests/test_book_record.py`` recomputes them),
:func:`ladder_table` and :func:`blocks_table` the HTML tables, and :func:`live_sass` the SASS
counts compiled on the machine that runs the chapter (any machine: they need NVRTC, not a GPU),
with :func:`live_glue_values` saying which compiler made them and whether they match the record's.
Nothing is typed in: when the lead replaces ``results.json`` with a newer run of
``python -m fraglab.register_reuse bench``, the chapter follows.

    doc = load()                       # the record (device, results)
    rows = live_sass(doc)              # sass_counts.report() of every rung, with the record's tiles
    glue_values(doc)                   # {"ch07-speedup-tile1d": "1.84x", ...}
"""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path

from .. import bench, report, sass, tools
from . import kernels, sass_counts

#: The record of the H100 run the chapter reads.
RESULTS = tools.REPO_ROOT / "book" / "data" / "07_register_reuse" / "results.json"
#: The size every per-rung figure is quoted at, and the performance goal there.
SIZE = 4096
GOAL = 0.90
#: Sizes the chapter explains the top rung's dip at (few blocks for 132 SMs).
SMALL = 1024
#: The rung the chapter's text calls the top one (its glue names: ch07-share-split-k, ...): the
#: last rung, split_k (rung 10), since its H100 record. Rung 9 (autotuned) keeps its own names
#: (its stalls, occupancy and the blocks at SMALL^3 the chapter explains).
CHAPTER_TOP = "split_k"
#: Issue 29's goal for the top rung: at least this share of cuBLAS FP32 at each shape (a
#: benchmark, read from the record's shape table; never a timed test).
GOAL_SHAPES = {(1024, 1024, 1024): 0.9, (2048, 2048, 2048): 1.0, (4096, 4096, 4096): 1.0,
               (6144, 6144, 6144): 1.0, (8192, 8192, 8192): 1.0, (4096, 4096, 1024): 1.0,
               (8192, 1024, 4096): 1.0}
#: Labels of the rungs (number and name) in tables and plots.
LABELS = {k: f"{i} {k}" for i, k in enumerate(kernels.VARIANTS, 1)}


def load(path: str | Path = RESULTS) -> dict:
    """The record written by ``bench.run`` (``{"device", "results", ...}``)."""
    return bench.load_results(path)


def shape_label(shape) -> str:
    return "x".join(str(int(s)) for s in shape)


def ladder_at(doc: dict, shape) -> dict | None:
    """The ladder entry of ``shape`` (an int for a cube, or (M, N, K)): ``{"rows", "skipped"}``."""
    shape = [shape] * 3 if isinstance(shape, int) else list(shape)
    for entry in doc["results"].get("ladder") or []:
        if list(entry["shape"]) == shape:
            return entry
    return None


def tuned_tiles(doc: dict) -> dict:
    """The tiles each rung ran with in the record: ``tiles``, with the sweep's winner for the
    autotuned rung (the ladder runs it with ``sweep.best``)."""
    res = doc["results"]
    tiles = {k: dict(v) for k, v in {**kernels.TILES, **(res.get("tiles") or {})}.items()}
    best = (res.get("sweep") or {}).get("best")
    if best:
        tiles["autotuned"] = dict(best)
    return tiles


def live_sass(doc: dict, arch: str = "sm_90") -> list[dict]:
    """:func:`.sass_counts.report` of every rung, compiled here with the record's tiles."""
    tiles = tuned_tiles(doc)
    return [sass_counts.report(k, arch, **tiles.get(k, {})) for k in kernels.VARIANTS]


def nvrtc_text() -> str:
    """The compiler that made the live SASS: ``NVRTC 12.9``."""
    major, minor = tools.nvrtc_version()
    return f"NVRTC {major}.{minor}"


def _stall(doc: dict, variant: str) -> dict:
    rec = (doc["results"].get("stalls") or {}).get(variant) or {}
    fams = rec.get("stalls") or {}
    fam = fams.get("smsp__average_warps") or next(iter(fams.values()), {})
    return {k: v for k, v in fam.items() if isinstance(v, (int, float))}


def stalls(doc: dict) -> dict[str, dict[str, float]]:
    """``{rung: {reason: cycles per issued instruction}}`` of the rungs Nsight Compute profiled
    (``selected`` left out: it is 1 by definition)."""
    st = doc["results"].get("stalls") or {}
    return {k: {r: v for r, v in _stall(doc, k).items() if r != "selected"}
            for k in kernels.VARIANTS if isinstance(st.get(k), dict) and _stall(doc, k)}


def top_stalls(stall: dict[str, float], within: float = 0.01) -> str:
    """The largest stall reason, in words (``mio throttle``), with those within ``within`` of it
    (a tie reads ``long scoreboard and short scoreboard``)."""
    if not stall:
        return "n/a"
    top = max(stall.values())
    names = [r for r, v in sorted(stall.items(), key=lambda kv: -kv[1]) if v >= top * (1 - within)]
    return " and ".join(n.replace("_", " ") for n in names)


def achieved_occupancy(doc: dict, variant: str) -> float | None:
    """Achieved occupancy (share of the SM's warp slots) where Nsight Compute measured it."""
    rec = (doc["results"].get("stalls") or {}).get(variant) or {}
    pct = (rec.get("metrics") or {}).get("sm__warps_active.avg.pct_of_peak_sustained_active")
    return pct / 100 if isinstance(pct, (int, float)) else None


def _pct(x) -> str:
    return report.fmt(None if x is None else 100 * x, "{:.1f}%")


def _frac(x) -> str:
    return "n/a" if x is None else str(Fraction(x).limit_denominator(64))


def ladder_table(doc: dict, sass_rows: list[dict], size: int = SIZE) -> report.Tables:
    """One row per rung: TFLOP/s and share of cuBLAS at ``size``^3 beside the seed's (A6000)
    share; shared words per FFMA from SASS beside the napkin, LDS instructions per FFMA,
    registers, spills, occupancy (theoretical from ptxas, achieved where ncu measured it)."""
    entry = ladder_at(doc, size) or {"rows": {}}
    seed = doc["results"].get("seed_figures", {}).get("of_cublas", {})
    rows = []
    for r in sass_rows:
        k = r["kernel"]
        m = entry["rows"].get(k)
        glob = not r["napkin_words_per_ffma"]
        rows.append([LABELS[k], report.fmt(m and m["tflops"], "{:.1f}"), _pct(m and m["of_cublas"]),
                     _pct(seed.get(k)) if k in seed else "-",
                     f"{r['ldg_per_ffma']:g} LDG" if glob else _frac(r["words_per_ffma"]),
                     "2 (global)" if glob else r["napkin"], report.fmt(r["lds_per_ffma"], "{:.3f}"),
                     r["registers"], r["spill_bytes"], _pct(r["occupancy"]),
                     _pct(achieved_occupancy(doc, k)) if achieved_occupancy(doc, k) else "-"])
    cub = entry["rows"].get("cublas")
    rows.append(["cuBLAS (TF32 off)", report.fmt(cub and cub["tflops"], "{:.1f}"), "100.0%",
                 "100.0%"] + ["-"] * 7)
    header = ["rung", "TFLOP/s", "of cuBLAS", "seed (A6000)", "words / FFMA (SASS)", "napkin",
              "LDS / FFMA", "regs", "spill bytes", "occup.", "occup. (ncu)"]
    whole = report.Table(header, rows, f"Table 2: the ladder at M = N = K = {size}.",
                         wrap_header=True, check=False)
    return whole.split(at=[header.index("words / FFMA (SASS)")])     # speed, then the code


def blocks_table(doc: dict, sass_rows: list[dict], size: int = SMALL) -> report.Table:
    """Blocks of each warp-tiled rung at ``size``^3 against the SMs and the blocks that fit on
    one SM: why a big tile is slow on a small matrix. Rung 10's row is its grid at that size
    (:func:`grid`: its tiles from the shape table, K split, blocks per SM of that build)."""
    sms = doc["device"]["sm_count"]
    tiles = tuned_tiles(doc)
    entry = ladder_at(doc, size) or {"rows": {}}
    rows = []
    for r in sass_rows:
        k = r["kernel"]
        if k not in ("tile1d", "tile2d", "warptile", "double_buffer", "autotuned", "split_k"):
            continue
        m = entry["rows"].get(k)
        if k == "split_k":
            if k not in (doc["results"].get("tiles") or {}):
                continue                              # a record older than rung 10
            g = grid(doc, k, (size, size, size))
            rows.append([LABELS[k], f"{g['tile']}, K in {g['splits']}", g["blocks"],
                         report.fmt(g["blocks_per_sm"]), f"{g['blocks'] / sms:.2f}",
                         _pct(min(1.0, g["blocks"] / g["slots"]) if g["slots"] else None),
                         _pct(m and m["of_cublas"])])
            continue
        bm, bn, _ = kernels.block_tile(k, tiles[k])
        blocks = -(-size // bm) * -(-size // bn)
        rows.append([LABELS[k], f"{bm}x{bn}", blocks, r["blocks_per_sm"],
                     f"{blocks / sms:.2f}", _pct(min(1.0, blocks / (sms * r["blocks_per_sm"]))),
                     _pct(m and m["of_cublas"])])
    return report.table(rows, ["rung", "block tile", f"blocks at {size}^3", "blocks per SM",
                               f"blocks / {sms} SMs", "SM slots filled",
                               "of cuBLAS"],
                        caption=f"Table 3: blocks against SMs at M = N = K = {size}.",
                        wrap_header=True)


# --- rung 10: the grid at a shape, wave quantization, the shape table ----------------------------

def record_table(doc: dict) -> dict:
    """The shape table the record's ladder ran rung 10 with (``results.shape_table``, a copy of
    ``shape_table.json`` at the time of the run); :func:`.kernels.shape_table` for an older
    record."""
    return doc["results"].get("shape_table") or kernels.shape_table()


def rung10_tiles(doc: dict, shape) -> dict:
    """What rung 10 launches at ``shape`` with the record's table: :func:`.kernels.tiles_for`
    (nearest entry, SPLIT as launched, GUARD from the shape) fed that table's nearest entry."""
    entry = kernels.nearest_entry(*shape, table=record_table(doc))
    return kernels.tiles_for(*shape, **entry["tiles"])


def build_registers(doc: dict, t: dict) -> int | None:
    """Registers a thread of rung 10's build with tiles ``t``, from the sweep's builds in the
    record's shape table (None where that build is not there)."""
    key = kernels.config_label(kernels.defines({k: v for k, v in t.items() if k != "GUARD"})) \
        + f" U{t.get('GUARD', 0)}"
    return ((record_table(doc).get("builds") or {}).get(key) or {}).get("registers")


def grid(doc: dict, variant: str, shape) -> dict:
    """The grid ``variant`` (``autotuned`` or ``split_k``) launches at ``shape`` (M, N, K) and how
    it fills the GPU of the record: ``tiles``, ``tile`` (``BMxBN``), ``tile_blocks`` (tiles of C),
    ``splits``, ``blocks``, ``blocks_per_sm`` (registers and shared memory, :func:`fraglab.sass.
    occupancy`: rung 9's from the record's SASS row, rung 10's from its build in the shape table,
    else its MINB, the floor ptxas was asked for), ``slots`` (SMs x blocks per SM), ``waves``
    (blocks / slots), ``fill`` (blocks / (whole waves x slots): the share of the slots busy on
    average when every block takes the same time) and ``k_split`` (columns of K a block sums)."""
    m, n, k = shape
    sms = doc["device"]["sm_count"]
    if variant == "split_k":
        t = rung10_tiles(doc, shape)
        splits, k_split = kernels.split_plan(k, t["BK"], t["SPLIT"])
        regs = build_registers(doc, t)
        per_sm = t["MINB"] if regs is None else sass.occupancy(
            regs, kernels.shared_bytes(variant, t), kernels.threads(variant, t))["blocks_per_sm"]
    elif variant == "autotuned":
        t = tuned_tiles(doc)[variant]
        splits, k_split = 1, k
        row = {r["kernel"]: r for r in doc["results"].get("sass") or []}.get(variant) or {}
        per_sm = row.get("blocks_per_sm") or t["MINB"]
    else:
        raise ValueError(f"grid() models rungs autotuned and split_k, not {variant!r}")
    tile_blocks = -(-m // t["BM"]) * -(-n // t["BN"])
    blocks, slots = tile_blocks * splits, sms * per_sm
    return {"tiles": t, "tile": f"{t['BM']}x{t['BN']}", "tile_blocks": tile_blocks,
            "splits": splits, "k_split": k_split, "blocks": blocks, "blocks_per_sm": per_sm,
            "slots": slots, "waves": blocks / slots, "fill": blocks / (-(-blocks // slots) * slots)}


def _shape_text(shape) -> str:
    return f"{shape[0]}^3" if len(set(shape)) == 1 else shape_label(shape)


def shapes_table(doc: dict) -> report.Table | report.Tables:
    """Rung 10's shape table as the record's ladder ran it: per shape the tiles and split it
    launches, its blocks against the slots of the SMs (:func:`grid`), its TFLOP/s and share of
    cuBLAS in the sweep's final round, and rung 9's share in the same round."""
    rows = []
    for e in record_table(doc)["entries"]:
        g = grid(doc, "split_k", e["shape"])
        t = g["tiles"]
        r9 = e.get("autotuned_of_cublas")
        rows.append([_shape_text(e["shape"]), f"{g['tile']}x{t['BK']} / {t['WM']}x{t['WN']}",
                     g["splits"], f"{g['blocks']} / {g['slots']}",
                     report.fmt(e.get("tflops"), "{:.1f}"),
                     report.fmt(e.get("of_cublas"), "{:.2f}x"),
                     "-" if r9 is None else f"{r9:.2f}x"])
    header = ["M x N x K", "block / warp tile", "K split", "blocks / slots", "TFLOP/s",
              "x cuBLAS", "rung 9, x cuBLAS"]
    return report.table(rows, header, caption="Table 4: rung 10's shape table, measured on "
                        "the H100 (the sweep's final round, interleaved with cuBLAS FP32).",
                        wrap_header=True)


def _mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:g} MiB"


def _rung10_findings(doc: dict) -> dict[str, str]:
    """The numbers of the chapter's rung-10 section: rung 9's and rung 10's grids at SMALL^3,
    the partial sums' traffic there, the shape table, issue 29's goal shape by shape."""
    f = {}
    small = (SMALL,) * 3
    r9, r10 = grid(doc, "autotuned", small), grid(doc, "split_k", small)
    for name, g in (("r9", r9), ("r10", r10)):
        f.update({f"{name}_tile": g["tile"], f"{name}_tile_blocks_small": str(g["tile_blocks"]),
                  f"{name}_blocks_small": str(g["blocks"]),
                  f"{name}_bps_small": str(g["blocks_per_sm"]),
                  f"{name}_slots_small": str(g["slots"]), f"{name}_fill_small": _pct(g["fill"]),
                  f"{name}_waves_small": f"{g['waves']:.2f}"})
    f["r10_split_small"], f["r10_ksplit_small"] = str(r10["splits"]), str(r10["k_split"])
    # rung 9's speed at SMALL^3 as a share of its own at SIZE^3 (beside the slots it fills)
    t9 = [((ladder_at(doc, s) or {"rows": {}})["rows"].get("autotuned") or {}).get("tflops")
          for s in (SMALL, SIZE)]
    f["r9_speed_small"] = _pct(t9[0] / t9[1] if all(t9) else None)
    # split-K's price at SMALL^3: every slice writes an M x N partial that the reduction reads
    partial = r10["splits"] * SMALL * SMALL * 4 if r10["splits"] > 1 else 0
    f["c_mib_small"] = _mib(SMALL * SMALL * 4)
    f["partial_mib_small"] = _mib(partial)
    f["extra_mib_small"] = _mib(2 * partial)
    l2 = doc["device"].get("l2_cache_bytes")
    f["l2_mib"] = report.fmt(l2 and l2 / 2**20, "{:g} MiB")
    extra_s = 2 * partial / (report.H100_SXM["hbm_tb_s"] * 1e12)
    f["extra_us_small"] = f"{extra_s * 1e6:.1f} us"
    row = ((ladder_at(doc, SMALL) or {"rows": {}})["rows"].get("split_k") or {})
    f["extra_share_small"] = _pct(row.get("median_ms") and extra_s / (row["median_ms"] / 1e3))
    f["ms_small_split_k"] = report.fmt(row.get("median_ms") and row["median_ms"] * 1e3,
                                       "{:.1f} us")
    table = record_table(doc)
    entries = table.get("entries") or []
    split = [e for e in entries if grid(doc, "split_k", e["shape"])["splits"] > 1]
    f["table_n"], f["table_split_n"] = str(len(entries)), str(len(split))
    f["table_split_shapes"] = ", ".join(_shape_text(e["shape"]) for e in split) or "none"
    f["table_measured"] = ("measured on the H100" if table.get("measured") else
                           "not yet measured: the wave model's picks")
    # issue 29's goal, shape by shape, from the record's table
    by = {tuple(e["shape"]): e for e in entries}
    met, missed = [], []
    for shape, goal in GOAL_SHAPES.items():
        x = (by.get(shape) or {}).get("of_cublas")
        text = f"{_shape_text(shape)} ({report.fmt(x, '{:.2f}x')})"
        (met if x is not None and x >= goal else missed).append(text)
    f["goal_small_x"] = f"{GOAL_SHAPES[small]:.2f}x"
    f["goal_large_x"] = f"{min(v for s, v in GOAL_SHAPES.items() if s != small):.2f}x"
    f["goal_n"], f["goal_n_met"] = str(len(GOAL_SHAPES)), str(len(met))
    f["goal_met"], f["goal_missed"] = ", ".join(met) or "none", ", ".join(missed) or "none"
    large = [(by.get(s) or {}).get("of_cublas") for s in GOAL_SHAPES if s != small]
    large = [x for x in large if x is not None]
    f["goal_large_range"] = (f"{min(large):.2f}x to {max(large):.2f}x" if large else "n/a")
    return f


def glue_values(doc: dict) -> dict[str, str]:
    """Every number the chapter's prose quotes from the record, formatted, by glue name
    (``ch07-...``). SASS counts are the record's (compiled on the GPU machine during the run)."""
    return {"ch07-" + k.replace("_", "-"): v for k, v in _findings(doc).items()}


def _findings(doc: dict) -> dict[str, str]:
    dev, res = doc["device"], doc["results"]
    sass_rows = res.get("sass") if isinstance(res.get("sass"), list) else []
    clocks = dev.get("clocks") or {}
    seed = res.get("seed_figures") or {}
    sass = {r["kernel"]: r for r in sass_rows}
    at = (ladder_at(doc, SIZE) or {"rows": {}})["rows"]
    small = (ladder_at(doc, SMALL) or {"rows": {}})["rows"]
    top = CHAPTER_TOP
    f = {
        "gpu": dev.get("name"), "driver": dev.get("driver_version"),
        "sm_clock": report.fmt(clocks.get("sm_mhz"), "{} MHz"),
        "sm_clock_max": report.fmt(clocks.get("sm_max_mhz"), "{} MHz"),
        "mem_clock": report.fmt(clocks.get("mem_mhz"), "{} MHz"),
        "sm_count": dev.get("sm_count"), "cuda_runtime": dev.get("cuda_runtime"),
        "record_nvrtc": report.fmt(dev.get("nvrtc_version"), "NVRTC {}"),
        "record_date": (doc.get("created_utc") or "")[:10], "cupy": dev.get("cupy_version"),
        "cublas_compute": (res.get("cublas_settings") or {}).get("cupy_compute_type_float32"),
        "size": SIZE, "small": SMALL,
        "goal": _pct(GOAL),
    }
    f = {k: report.fmt(v) for k, v in f.items()}
    t1 = seed.get("tiles_tile1d") or {}
    f["seed_tiles"] = ", ".join(f"{k} = {v}" for k, v in t1.items()) or "n/a"
    f["tm"] = report.fmt(t1.get("TM"))
    for k in ("smem", "tile1d", "tile2d"):
        f[f"seed_share_{k}"] = _pct(seed.get("of_cublas", {}).get(k))
    f["seed_speedup"] = report.fmt(seed.get("speedup_tile1d_over_smem"), "{}x")
    f["seed_cublas_gflops"] = report.fmt(seed.get("gflops", {}).get("cublas"), "{:,}")
    f["seed_registers"] = report.fmt(seed.get("registers_tile1d"))
    ran = res.get("tiles") or kernels.TILES          # the rungs that existed when the record ran
    for k in tuple(v for v in kernels.VARIANTS if v in ran) + ("cublas",):
        m = at.get(k)
        f[f"tflops_{k}"] = report.fmt(m and m["tflops"], "{:.1f}")
        f[f"share_{k}"] = _pct(m and m["of_cublas"])
        f[f"share_small_{k}"] = _pct((small.get(k) or {}).get("of_cublas"))
    f["tflops_small_cublas"] = report.fmt((small.get("cublas") or {}).get("tflops"), "{:.1f}")
    speed = at.get("tile1d") and at.get("smem") and at["tile1d"]["tflops"] / at["smem"]["tflops"]
    f["speedup_tile1d"] = report.fmt(speed, "{:.2f}x")
    share = (at.get(top) or {}).get("of_cublas")
    f["top"] = top
    f["goal_verdict"] = ("n/a" if share is None else "met" if share >= GOAL else "not met")
    named = tuple(dict.fromkeys(("smem", "tile1d", "autotuned", top)))
    for k in named:
        r = sass.get(k)
        if r:
            f[f"words_{k}"] = _frac(r["words_per_ffma"])
            f[f"lds_{k}"] = report.fmt(r["lds_per_ffma"], "{:.3f}")
            f[f"napkin_{k}"] = r["napkin"]
            f[f"regs_{k}"] = report.fmt(r["registers"])
            f[f"occ_{k}"] = _pct(r["occupancy"])
            f[f"ffma_{k}"] = report.fmt(r["loop"]["ffma"])
            f[f"ldsn_{k}"] = report.fmt(r["loop"]["lds"])
            f[f"lds128_{k}"] = report.fmt(r["loop"]["lds128"])
            f[f"blocks_sm_{k}"] = report.fmt(r["blocks_per_sm"])
    st = stalls(doc)
    for k in named:
        s = st.get(k)
        f[f"top_stall_{k}"] = top_stalls(s)
        f[f"mio_{k}"] = report.fmt(s and s.get("mio_throttle"), "{:.2f}")
        f[f"stall_total_{k}"] = report.fmt(s and sum(s.values()) + 1, "{:.1f}")
        f[f"achieved_{k}"] = _pct(achieved_occupancy(doc, k))
    f["ncu_size"] = report.fmt((res.get("stalls") or {}).get("size"))
    sw = res.get("sweep") or {}
    recs = sw.get("records") or []
    timed = [r for r in recs if "tflops" in r]
    f["sweep_n"], f["sweep_clean"] = str(len(recs)), str(len(timed))
    best = max(timed, key=lambda r: r["tflops"]) if timed else None
    f["sweep_best"] = best["label"] if best else "n/a"
    f["sweep_best_share"] = _pct(best and best["of_cublas"])
    if "split_k" in ran:                              # a record with rung 10
        f.update(_rung10_findings(doc))
        if record_table(doc).get("sweep"):            # a measured table: the switches' effect
            f.update(_switch_findings(doc))
    return f


#: What :func:`live_sass` rows must equal in the record's ``sass`` rows to count as the same.
COMPARED = ("lds_per_ffma", "words_per_ffma", "registers", "spill_bytes", "occupancy")


def sass_differences(doc: dict, sass_rows: list[dict]) -> list[str]:
    """Where the live SASS counts differ from the record's (empty: the same). Rungs newer than
    the record are left out here (:func:`not_in_record` names them)."""
    rec = {r["kernel"]: r for r in doc["results"].get("sass") or [] if isinstance(r, dict)}
    out = []
    for r in sass_rows:
        old = rec.get(r["kernel"])
        if old is None:
            continue
        out += [f"{r['kernel']} {key}: {r[key]} here, {old.get(key)} in the record"
                for key in COMPARED if r[key] != old.get(key)]
    return out


def not_in_record(doc: dict, sass_rows: list[dict]) -> list[str]:
    """Rungs compiled here that the record's ``sass`` rows lack (newer than the record)."""
    rec = {r["kernel"] for r in doc["results"].get("sass") or [] if isinstance(r, dict)}
    return [r["kernel"] for r in sass_rows if r["kernel"] not in rec]


def live_glue_values(doc: dict, sass_rows: list[dict]) -> dict[str, str]:
    """The compiler of the live counts and whether they equal the record's (``ch07-live-...``;
    they depend on the machine, so :func:`glue_values` leaves them out)."""
    diff = sass_differences(doc, sass_rows)
    return {"ch07-live-nvrtc": nvrtc_text(),
            "ch07-live-agree": "the same counts" if not diff else
            f"different counts ({len(diff)}: " + "; ".join(diff[:3]) + ")"}


def source_text(variant: str) -> str:
    """Rung ``variant``'s file, ``kernels/07_register_reuse_<variant>.cu``."""
    return (tools.KERNELS_DIR / f"{kernels.kernel_file(variant)}.cu").read_text()


def diff_text(variant: str, context: int = 2) -> str:
    """The unified diff of rung ``variant``'s file against the previous rung's (show it with
    :func:`fraglab.report.listing`: collapsed, scrolling inside the column)."""
    import difflib
    i = kernels.VARIANTS.index(variant)
    if i == 0:
        raise ValueError(f"{variant} is the first rung: nothing to diff against")
    old, new = (f"{kernels.kernel_file(k)}.cu" for k in kernels.VARIANTS[i - 1:i + 1])
    return "\n".join(difflib.unified_diff(
        source_text(kernels.VARIANTS[i - 1]).splitlines(), source_text(variant).splitlines(),
        old, new, lineterm="", n=context))


def diff_listing(variant: str):
    """:func:`diff_text` as a collapsed listing titled with the rung and what it changes."""
    before = kernels.VARIANTS[kernels.VARIANTS.index(variant) - 1]
    return report.listing(diff_text(variant), f"{LABELS[variant]}, the diff against {LABELS[before]}")


def rungs_table() -> report.Table:
    """Each rung and what it changes (:data:`.kernels.CHANGES`)."""
    return report.table([[LABELS[k], kernels.CHANGES[k]] for k in kernels.VARIANTS],
                        ["rung", "what it changes from the rung before"],
                        caption="Table 1: the rungs.", align=["left", "left"], wrap=[1])



# --- rung 10's tuning switches: the sweep's timings per setting (their SASS: switch_sass.py) ---

#: Switch settings compared on one tile (Tables 5 and 6), by column; SWIZZLE only on rung 9's
#: tile (the one whose padded A store has bank conflicts). SWITCHES_OFF: all switches off.
SWITCH_SETS = {"off": {}, "RDB": {"REGDB": 1}, "O1": {"ORDER": 1},
               "RDB + O1": {"REGDB": 1, "ORDER": 1}, "LM = 8": {"LM": 8}}
SWIZZLE_SETS = {"off": {}, "SWZ": {"SWIZZLE": 1}, "RDB + O1": {"REGDB": 1, "ORDER": 1},
                "RDB + SWZ + O1": {"REGDB": 1, "SWIZZLE": 1, "ORDER": 1}, "LM = 8": {"LM": 8}}
SWITCHES_OFF = {"REGDB": 0, "ORDER": 0, "SWIZZLE": 0, "LM": 4}
_SAME = ("BM", "BN", "BK", "WM", "WN", "MINB", "SPLIT")


def switch_trials(doc: dict, shape, tiles: dict | None = None, sets=SWITCH_SETS) -> dict:
    """``{setting: x cuBLAS}`` at ``shape`` in the sweep's first round (all candidates of the
    shape interleaved with cuBLAS in one process): ``tiles`` (default: the pick's, with its
    split) with each of ``sets`` on and the other switches off; None where the sweep did not
    time it. A candidate with the tiles' GROUP is taken first, else one with another."""
    sw = next((s for s in record_table(doc).get("sweep") or []
               if list(s["entry"]["shape"]) == list(shape)), {})
    base, out = tiles or (sw.get("entry") or {}).get("tiles") or {}, {}
    for name, on in sets.items():
        want = {**SWITCHES_OFF, **on}
        hits = sorted((c for c in sw.get("candidates") or []
                       if all(c["tiles"].get(k) == base.get(k) for k in _SAME)
                       and all(c["tiles"].get(k, SWITCHES_OFF[k]) == v for k, v in want.items())
                       and (c.get("short") or {}).get("of_cublas") is not None),
                      key=lambda c: c["tiles"].get("GROUP") != base.get("GROUP"))
        out[name] = hits[0]["short"]["of_cublas"] if hits else None
    return out


def _gain(x, base) -> str:
    return "n/a" if x is None or not base else f"{100 * (x / base - 1):+.1f}%"


def switches_table(doc: dict) -> report.Table | report.Tables:
    """Table 6: per shape of issue 29's goal, x cuBLAS of the pick's tiles with the switches
    off, each on, both, and LM = 8 (:func:`switch_trials`), and what both gain over none."""
    rows = []
    for shape in GOAL_SHAPES:
        t, x = rung10_tiles(doc, shape), switch_trials(doc, shape)
        rows.append([_shape_text(shape), f"{t['BM']}x{t['BN']}x{t['BK']} / {t['WM']}x{t['WN']}",
                     t["SPLIT"], *(report.fmt(v, "{:.3f}") for v in x.values()),
                     _gain(x["RDB + O1"], x["off"])])
    return report.table(rows, ["M x N x K", "block / warp tile", "K split", *SWITCH_SETS,
                               "RDB + O1 over off"], wrap_header=True, caption="Table 6: rung "
                        "10's switches on the H100, x cuBLAS FP32 (the sweep's first round: all "
                        "candidates of a shape interleaved).")


def _switch_findings(doc: dict) -> dict[str, str]:
    """The switches' measured effect at SIZE^3 and 8192^3, over the large shapes (gains over
    the switches off), on rung 9's tile (SWIZZLE), and how many goal shapes pick RDB + O1."""
    x = {s: switch_trials(doc, s) for s in GOAL_SHAPES}
    large, f = [s for s in GOAL_SHAPES if s != (SMALL,) * 3], {}
    for n in (SIZE, 8192):
        s = x[(n,) * 3]
        f[f"sw_off_{n}"], f[f"sw_both_{n}"] = (report.fmt(s[k], "{:.2f}x")
                                               for k in ("off", "RDB + O1"))
        f[f"sw_gain_{n}"] = _gain(s["RDB + O1"], s["off"])

    def span(values, spec):
        v = sorted(v for v in values if v is not None)
        return f"{spec(v[0])} to {spec(v[-1])}" if v else "n/a"
    f["sw_off_range"] = span([x[s]["off"] for s in large], "{:.2f}x".format)
    for key, name in (("rdb", "RDB"), ("o1", "O1"), ("both", "RDB + O1"), ("l8", "LM = 8")):
        f[f"sw_gain_{key}_range"] = span([x[s][name] / x[s]["off"] - 1 for s in large
                                          if x[s][name] and x[s]["off"]], "{:+.1%}".format)
    by = {tuple(e["shape"]): e["tiles"] for e in record_table(doc).get("entries") or []}
    f["sw_picked_n"] = str(sum(bool(by.get(s, {}).get("REGDB")) and by[s].get("ORDER") == 1
                               for s in GOAL_SHAPES))
    t9 = tuned_tiles(doc)["autotuned"]
    r9 = switch_trials(doc, (SIZE,) * 3, {**t9, "SPLIT": 1}, SWIZZLE_SETS)
    f.update({f"sw_r9tile_{k}": report.fmt(r9[n], "{:.2f}x") for k, n in zip(
        ("off", "swz", "both", "all", "l8"), SWIZZLE_SETS)})
    f["sw_r9tile"] = f"{t9['BM']}x{t9['BN']}x{t9['BK']}"
    return f

