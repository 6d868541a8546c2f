"""The chapter's figures: the SASS timeline of the consumer path (no GPU needed), the 128-byte
swizzle, and TFLOP/s over the sweep from the record. Sized for the book's column (7.85 in at
100 dpi) with fonts of 9 pt or more."""
from __future__ import annotations

import numpy as np

from . import config, sass_evidence
from .report import BASELINE_LABELS, _res, best_variant, tflops_of

WIDTH = 7.85
LANES = ("hgmma", "wait", "exp2", "max", "mul", "fma")
LANE_LABELS = {"hgmma": "HGMMA", "wait": "wgmma wait", "exp2": "MUFU.EX2", "max": "FMNMX",
               "mul": "FMUL", "fma": "FFMA"}


def _plt():
    import matplotlib.pyplot as plt
    plt.rcParams.update({"font.size": 10, "axes.titlesize": 10, "legend.fontsize": 9,
                         "xtick.labelsize": 9, "ytick.labelsize": 9})
    return plt


def plot_timelines(variants=("nooverlap", "twostage"), dtype: str = "f16", d: int = 128):
    """One panel per variant: every HGMMA, wgmma wait and softmax instruction of the consumer
    path at its position in the SASS; softmax instructions that run while a wgmma of the
    warpgroup is in flight are drawn in orange, the others in grey."""
    plt = _plt()
    fig, axes = plt.subplots(len(variants), 1, figsize=(WIDTH, 1.9 * len(variants) + 0.6),
                             sharex=False)
    axes = np.atleast_1d(axes)
    for ax, v in zip(axes, variants):
        tl = sass_evidence.timeline(v, dtype, d)
        for y, lane in enumerate(LANES):
            rows = [r for r in tl if r["kind"] == lane]
            if lane in ("hgmma", "wait"):
                ax.scatter([r["i"] for r in rows], [y] * len(rows), marker="|", s=120,
                           color="C0" if lane == "hgmma" else "k")
                continue
            for beside, color in ((True, "C1"), (False, "0.6")):
                xs = [r["i"] for r in rows if (r["in_flight"] > 0) == beside]
                ax.scatter(xs, [y] * len(xs), marker="|", s=80, color=color)
        ov = sass_evidence.overlap(tl)
        ax.set_yticks(range(len(LANES)), [LANE_LABELS[k] for k in LANES])
        ax.invert_yaxis()
        ax.set_title(f"{v}: {ov['exp2_beside_wgmma']} of {ov['exp2']} MUFU.EX2 beside a wgmma "
                     f"in flight (orange)")
        ax.set_xlabel("instruction position in the consumer path (SASS)")
    fig.tight_layout()
    return fig


def plot_swizzle(rows: int = 8):
    """Which 16-byte chunk of a 128-byte row sits where: logical chunk c of row r at physical
    chunk c ^ (r % 8), so the 8 rows of one chunk column land in 8 different bank groups."""
    plt = _plt()
    grid = np.array([[(c ^ (r % 8)) for c in range(8)] for r in range(rows)])
    fig, ax = plt.subplots(figsize=(WIDTH, 3.4))
    ax.imshow(grid, cmap="tab10", aspect="auto")
    for r in range(rows):
        for c in range(8):
            ax.text(c, r, f"{c}->{grid[r, c]}", ha="center", va="center", fontsize=9)
    ax.set_xticks(range(8), [f"chunk {c}" for c in range(8)])
    ax.set_yticks(range(rows), [f"row {r}" for r in range(rows)])
    ax.set_title("logical 16-byte chunk -> physical chunk, 128-byte swizzle")
    fig.tight_layout()
    return fig


def plot_sweep(doc: dict):
    """TFLOP/s over N of the best variant and the baselines: each head dimension of the record
    (64, 128, and 256 once measured) x causal or not."""
    plt = _plt()
    rows = _res(doc).get("sweep") or []
    best = f"fa3_{best_variant(doc)}"
    dims = [d for d in config.HEAD_DIMS if any(r["d"] == d for r in rows)] or [64, 128]
    fig, axes = plt.subplots(len(dims), 2, figsize=(WIDTH, 2.8 * len(dims)), sharex=True,
                             squeeze=False)
    names = {best: f"{best_variant(doc)} (ours)", **BASELINE_LABELS}
    for ax, (d, causal) in zip(axes.flat, [(d, c) for d in dims for c in (False, True)]):
        sel = sorted((r for r in rows if r["d"] == d and r["causal"] == causal), key=lambda r: r["N"])
        for k, label in names.items():
            pts = [(r["N"], tflops_of(r)[k]) for r in sel if k in tflops_of(r)]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=label, lw=2 if k == best else 1)
        ax.set_xscale("log", base=2)
        ax.set_title(f"d = {d}, {'causal' if causal else 'non-causal'}")
        ax.set_ylabel("TFLOP/s")
        ax.set_xlabel("N")
    axes.flat[0].legend(loc="lower right")
    fig.tight_layout()
    return fig


# --- the ping-pong kernel's timeline: producer, two consumers, the tensor cores -------------------

def pingpong_constants() -> dict[str, int]:
    """The ping-pong file's launch constants (:func:`.config.file_constants`): its consumer
    warpgroups (``fa3_consumers``; warpgroup 0 produces), rows, ring depth."""
    return config.file_constants("pingpong")


def consumers() -> int:
    """Consumer warpgroups of the ping-pong kernel's CTA (two: they take turns)."""
    return pingpong_constants()["fa3_consumers"]


def ring_depth() -> int:
    """The ping-pong kernel's K/V ring depth (``Fa3Config::STAGES`` at d = 64)."""
    return pingpong_constants()["fa3_d64_stages"]
#: Durations of the schematic timeline, in arbitrary units (not measured): one wgmma group
#: (S = Q K^T or O += P V of one tile), one softmax, one tile copied by a producer warp.
UNITS = {"gemm": 1.0, "softmax": 1.5, "copy": 1.5}


def pingpong_program(wg: int, tiles: int) -> list[tuple]:
    """The order of consumer warpgroup ``wg``'s synchronising steps in the ping-pong kernel
    (``PingPong::run`` in ``kernels/10_fa3_pipelining_pingpong.cu``, from its wait for Q to the
    epilogue's barrier), as ``(step, tile)`` tuples: ``wait_q``, ``wait_k``/``wait_v`` (an
    mbarrier "full"), ``turn`` (wait for the turn: a named barrier), ``pass`` (give it to the
    other warpgroup), ``qk``/``pv`` (a wgmma group issued), ``wgmma_wait`` (tile: groups left
    in flight), ``softmax``, ``release_k``/``release_v`` (an mbarrier "empty"), ``store``.
    ``tests/test_10_fa3_pipelining_timeline.py`` compares it with the kernel run on the PTX
    interpreter."""
    p = [("wait_q", None)] + ([("pass", None)] if wg == 1 else [])
    p += [("wait_k", 0), ("turn", None), ("qk", 0), ("pass", None), ("wgmma_wait", 0),
          ("release_k", 0), ("softmax", 0)]
    for j in range(1, tiles):
        p += [("wait_k", j), ("wait_v", j - 1), ("turn", None), ("qk", j), ("pv", j - 1),
              ("pass", None), ("wgmma_wait", 1), ("release_k", j), ("softmax", j),
              ("wgmma_wait", 0), ("release_v", j - 1)]
    p += [("wait_v", tiles - 1), ("turn", None), ("pv", tiles - 1)]
    p += [("pass", None)] if wg == 0 else []
    p += [("wgmma_wait", 0), ("release_v", tiles - 1), ("store", None)]
    return p


def producer_program(warp: int, tiles: int, stages: int | None = None) -> list[tuple]:
    """Producer warp ``warp`` (0-1 copy K, 2-3 copy V; warp w the tiles j with j % 2 == w % 2):
    ``arrive_q`` (its share of Q landed), then per tile ``wait_empty`` (from the second round
    of the ring on), ``copy`` and ``full`` (the stage's mbarrier)."""
    stages = ring_depth() if stages is None else stages
    p = [("arrive_q", None)]
    for j in range(warp % 2, tiles, 2):
        p += ([("wait_empty", j)] if j >= stages else []) + [("copy", j), ("full", j)]
    return p


def pingpong_timeline(tiles: int | None = None, stages: int | None = None,
                      units: dict | None = None) -> list[dict]:
    """Run :func:`pingpong_program` and :func:`producer_program` against each other with the
    schematic ``units``: every step starts once what it waits for has happened (a full stage, the
    turn, its wgmma group, both consumers' release of a stage), wgmma groups of both consumers
    run one after another on the SM's tensor cores in the order they were issued. Returns the
    intervals ``{"who", "what", "tile", "start", "end"}``; ``who`` is ``"p0"``-``"p3"`` (a
    producer warp's copy, ``what`` ``"K"`` or ``"V"``), ``"tc"`` (tensor cores, with ``"wg"``),
    ``"wg1"``, ``"wg2"`` (a consumer's softmax), and the instants ``"pass"`` (a consumer ``wg``
    passes the turn) and ``"empty"`` (both consumers have released stage ``tile % stages`` of
    ``what``). ``stages`` defaults to the kernel's ring depth, ``tiles`` to twice that."""
    stages = ring_depth() if stages is None else stages
    tiles = 2 * stages if tiles is None else tiles
    nc = consumers()
    u = {**UNITS, **(units or {})}
    progs = {("c", wg): pingpong_program(wg, tiles) for wg in range(nc)}
    progs.update({("p", w): producer_program(w, tiles, stages) for w in range(4)})
    pc = {k: 0 for k in progs}
    now = {k: 0.0 for k in progs}
    full, released, passes, turns = {}, {}, {wg: [] for wg in range(nc)}, {}
    groups = {wg: [] for wg in range(nc)}      # end times of issued wgmma groups
    tc_free, out = 0.0, []

    def ready(k, step, j):                            # the time the step may start, or None
        t = now[k]
        if step in ("wait_k", "wait_v"):
            key = (step[-1], j)
            return max(t, full[key]) if key in full else None
        if step == "turn":
            wg = k[1]
            n = turns.get(wg, 0)                      # the n-th wait meets the other's n-th pass
            other = passes[(wg + 1) % nc]
            return max(t, other[n]) if len(other) > n else None
        if step == "wgmma_wait":
            g = groups[k[1]]
            return max([t] + g[:len(g) - j])
        if step == "wait_empty":
            key = ("K" if k[1] < 2 else "V", j - stages)
            got = released.get(key, [])
            return max([t] + got) if len(got) == nc else None
        return t

    moved = True
    while moved:
        moved = False
        for k, prog in progs.items():
            while pc[k] < len(prog):
                step, j = prog[pc[k]]
                t = ready(k, step, j)
                if t is None:
                    break
                if step in ("qk", "pv"):
                    start = max(t, tc_free)
                    tc_free = start + u["gemm"]
                    groups[k[1]].append(tc_free)
                    out.append(dict(who="tc", wg=k[1], what=step, tile=j, start=start, end=tc_free))
                elif step == "softmax":
                    out.append(dict(who=f"wg{k[1] + 1}", what=step, tile=j, start=t,
                                    end=t + u["softmax"]))
                    t += u["softmax"]
                elif step == "copy":
                    out.append(dict(who=f"p{k[1]}", what="K" if k[1] < 2 else "V", tile=j,
                                    start=t, end=t + u["copy"]))
                    t += u["copy"]
                elif step == "full":
                    full[("k" if k[1] < 2 else "v", j)] = t
                elif step in ("release_k", "release_v"):
                    got = released.setdefault((step[-1].upper(), j), [])
                    got.append(t)
                    if len(got) == nc:          # the stage is empty: both have released it
                        out.append(dict(who="empty", what=step[-1].upper(), tile=j, start=t, end=t))
                elif step == "pass":
                    passes[k[1]].append(t)
                    out.append(dict(who="pass", wg=k[1], what="pass", tile=None, start=t, end=t))
                elif step == "turn":
                    turns[k[1]] = turns.get(k[1], 0) + 1
                now[k] = t
                pc[k] += 1
                moved = True
    stuck = [f"{k}: {progs[k][pc[k]]}" for k in progs if pc[k] < len(progs[k])]
    if stuck:
        raise RuntimeError("the ping-pong schedule deadlocks at " + "; ".join(stuck))
    return out


def plot_pingpong(tiles: int | None = None, stages: int | None = None):
    """The warp-specialised ping-pong kernel over ``tiles`` key tiles (default: one more than the
    ring holds, so the producer waits for a stage once), from :func:`pingpong_timeline`: each
    producer warp's copies of K and V tiles into the ``stages`` ring stages, the tensor cores
    running each consumer warpgroup's S = Q K^T and O += P V, each consumer's softmax; the turn
    passed between the consumers (triangles) and a stage emptied for the producer (arrows).
    Durations are schematic; the order and the waits are the kernel's."""
    from matplotlib.patches import Patch
    stages = ring_depth() if stages is None else stages
    tiles = stages + 1 if tiles is None else tiles
    nc, rows_per_cta = consumers(), pingpong_constants()["fa3_rows"]
    from matplotlib.lines import Line2D
    plt = _plt()
    ev = pingpong_timeline(tiles, stages)
    rows = ["p0", "p1", "p2", "p3", "tc", *[f"wg{w + 1}" for w in range(nc)]]
    labels = {f"p{w}": f"producer warp {w}: {'K' if w < 2 else 'V'}" for w in range(4)}
    labels["tc"] = "tensor cores (wgmma)"
    labels.update({f"wg{w + 1}": f"warpgroup {w + 1}: softmax" for w in range(nc)})
    wg_color = {w: f"C{w}" for w in range(nc)}
    fig, ax = plt.subplots(figsize=(WIDTH, 4.9))
    first_copy = {}
    for e in ev:
        if e["who"] in ("pass", "empty"):
            continue
        y = rows.index(e["who"])
        if e["who"].startswith("p"):
            first_copy[(e["what"], e["tile"])] = e
            color, text = "0.8", f"{e['what']}{e['tile']}>s{e['tile'] % stages}"
        elif e["who"] == "tc":
            color = wg_color[e["wg"]]
            text = ("S" if e["what"] == "qk" else "PV") + str(e["tile"])
        else:
            color, text = wg_color[int(e["who"][2:]) - 1], f"sm{e['tile']}"
        ax.broken_barh([(e["start"], e["end"] - e["start"])], (y - 0.36, 0.72), facecolors=color,
                       edgecolors="k", linewidth=0.6)
        ax.text((e["start"] + e["end"]) / 2, y, text, ha="center", va="center", fontsize=9,
                color="white" if e["who"] == "tc" else "black")
    tc = rows.index("tc")
    for e in ev:
        if e["who"] == "pass":
            ax.plot(e["start"], tc + 0.5, marker="^", ms=7, color=wg_color[e["wg"]], mec="k",
                    mew=0.5, zorder=4)
        elif e["who"] == "empty" and (e["what"], e["tile"] + stages) in first_copy:
            nxt = first_copy[(e["what"], e["tile"] + stages)]
            ax.annotate("", (nxt["start"], rows.index(nxt["who"]) + 0.36), (e["start"], tc - 0.36),
                        arrowprops=dict(arrowstyle="->", color="k", lw=1, ls="--"))
    ax.set_yticks(range(len(rows)), [labels[r] for r in rows])
    ax.set_ylim(len(rows) - 0.4, -0.6)
    ax.set_xlim(0, max(e["end"] for e in ev) + 0.2)
    ax.set_xlabel("time (schematic: a wgmma group 1, a softmax 1.5, a tile copy 1.5)")
    ax.grid(alpha=0.3, axis="x")
    handles = [Patch(color=wg_color[w]) for w in range(nc)]
    names = [f"warpgroup {w + 1} ({rows_per_cta // nc} rows)" for w in range(nc)]
    handles += [Line2D([], [], marker="^", ls="", color="0.5", mec="k"),
                Line2D([], [], color="k", ls="--")]
    names += ["turn passed", "stage emptied"]
    ax.legend(handles, names, ncol=4, loc="lower center", bbox_to_anchor=(0.4, 1.0),
              frameon=False, handlelength=1.5, columnspacing=1.2)
    fig.tight_layout()
    return fig
