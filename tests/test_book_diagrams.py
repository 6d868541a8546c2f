"""The book's diagrams are drawn from the course's own data, on the CPU, legible at the text
column's width: chapter 00's (and the appendix's) shuffle butterfly from the PTX interpreter's
run of the compiled kernel, chapter 05's FA-2 tiles from the kernel's tile constants, chapter
06's lane-bit picture from the generator's plan. Each test also changes the data and sees the
figure change."""
import dataclasses
import re

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.collections import LineCollection  # noqa: E402

from fraglab import hello_warp, ptx, report, toolchain  # noqa: E402
from fraglab import layout_codegen as lc  # noqa: E402
from fraglab.flash_attention import constants as fa_constants, plots as fa_plots  # noqa: E402

LANES = np.arange(32)


def _texts(fig) -> list[str]:
    return [t.get_text() for t in fig.findobj(matplotlib.text.Text) if t.get_text().strip()]


def _legible(fig):
    px = report.smallest_text_px(fig)
    assert px >= report.MIN_TEXT_PX, f"smallest text {px:.1f} px at the column width"


# --- chapter 00 and the appendix: the butterfly ---------------------------------------------------

def _reads_drawn(ax) -> list[list[tuple[int, int]]]:
    """(source lane, reading lane) of every line the butterfly draws, per step (by height)."""
    steps: dict[float, list] = {}
    for coll in ax.collections:
        if isinstance(coll, LineCollection):
            for seg in coll.get_segments():
                (x0, y0), (x1, _) = seg
                steps.setdefault(round(float(y0), 3), []).append((round(x0), round(x1)))
    return [sorted(steps[y]) for y in sorted(steps, reverse=True)]


def test_butterfly_is_the_interpreters_record_of_warp_sum():
    row = np.arange(32, dtype=np.float32)
    tr = hello_warp.butterfly(row)
    assert [s.offset for s in tr] == [16, 8, 4, 2, 1]
    for s in tr:
        assert s.mode == "bfly" and s.text.startswith("shfl.sync.bfly")
        assert np.array_equal(s.src, LANES ^ s.offset)
        assert s.combine.startswith("add.f32")
    vals = tr.values()
    assert np.array_equal(vals[0], row)
    assert np.array_equal(vals[1], row + row[LANES ^ 16])
    assert (vals[-1] == row.sum()).all()

    fig = hello_warp.plot_butterfly(tr)
    _legible(fig)
    drawn = _reads_drawn(fig.axes[0])
    assert drawn == [sorted(zip(s.src.tolist(), LANES.tolist())) for s in tr]
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels[1:] == [f"lane ^ {o}\nadd.f32" for o in (16, 8, 4, 2, 1)]
    assert f"{row.sum():g}" in _texts(fig)
    plt.close(fig)


def test_butterfly_follows_the_kernel():
    """Another loop order in the CUDA source: the trace and the picture follow it."""
    src = toolchain.kernel_path("00_hello_warp").read_text()
    loop = "for (int offset = 16; offset > 0; offset /= 2)"
    assert src.count(loop) == 2
    up = "for (int offset = 1; offset < 32; offset *= 2)"
    tr = hello_warp.butterfly(source=src.replace(loop, up))
    assert [s.offset for s in tr] == [1, 2, 4, 8, 16]
    fig = hello_warp.plot_butterfly(tr)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()][1] == "lane ^ 1\nadd.f32"
    assert _reads_drawn(fig.axes[0])[0] == sorted(zip((LANES ^ 1).tolist(), LANES.tolist()))
    plt.close(fig)


def test_shuffle_trace_reads_the_handlers_routing_and_leaves_the_run_alone():
    """shfl.sync.down past lane 31 reads the lane itself (the PTX ISA's clamp): the probe reports
    what the interpreter does, not lane ^ offset; and the kernel's result is unchanged."""
    src = toolchain.kernel_path("00_hello_warp").read_text().replace(
        "__shfl_xor_sync(FULL_MASK, v, offset);    //",
        "__shfl_down_sync(FULL_MASK, v, offset); //")
    prog = ptx.load("00_hello_warp", source=src)
    row = np.arange(32, dtype=np.float32).reshape(1, 32)
    out = np.zeros(1, np.float32)
    tr = ptx.shuffle_trace(prog, "warp_sum", grid=1, block=32, args=(row, out, np.int32(1)))
    assert [s.mode for s in tr] == ["down"] * 5 and tr[0].offset is None
    for s, k in zip(tr, (16, 8, 4, 2, 1)):
        assert np.array_equal(s.src, np.where(LANES + k < 32, LANES + k, LANES))
    assert out[0] == row.sum()                   # lane 0 of a down-reduction holds the sum
    ax = tr.plot()
    assert _reads_drawn(ax)[0] == sorted(zip(tr[0].src.tolist(), LANES.tolist()))
    plt.close(ax.figure)
    with pytest.raises(ValueError, match="executed no shfl.sync"):
        ptx.shuffle_trace(prog, "hello_warp", grid=1, block=32,
                          args=(np.zeros(32, np.int32), np.zeros((32, 8), np.float32)))


# --- chapter 05: FA-2's tiles ---------------------------------------------------------------------

def test_fa2_tiles_are_the_kernels():
    """The tile sizes the diagram draws are the .cu file's: FA2_BN, BM = 16 * W (16 = M of
    mma.m16n8k16) and the shared-memory size."""
    cu = toolchain.kernel_path(fa_constants.KERNELS_FA2).read_text()
    bn = int(re.search(r"constexpr int FA2_BN = (\d+);", cu).group(1))
    per_warp = int(re.search(r"BM = (\d+) \* W;", cu).group(1))
    for d in fa_constants.FA2_HEAD_DIMS:
        for w in fa_constants.FA2_WARPS:
            t = fa_plots.fa2_tiles(d, w)
            assert (t["bn"], t["rows_per_warp"], t["bm"]) == (bn, per_warp, per_warp * w)
            assert (t["s_accs"], t["o_accs"]) == (bn // 8, d // 8)
            assert t["smem"] == (per_warp * w + 2 * bn) * d * 2
    with pytest.raises(ValueError, match="d must be one of"):
        fa_plots.fa2_tiles(96, 4)


def _k_tile_width(fig) -> float:
    ax = fig.axes[0]
    label = next(t for t in ax.texts if t.get_text().startswith("K_j^T"))
    x, y = label.get_position()
    hits = [p.get_width() for p in ax.patches if isinstance(p, plt.Rectangle)
            and p.get_fill() and p.contains_point(ax.transData.transform((x, y)))
            and p.get_alpha() in (None, 1.0)]
    return max(hits)


def test_fa2_diagram_is_legible_and_follows_the_constants(monkeypatch):
    fig = fa_plots.plot_fa2_tiles()
    _legible(fig)
    t = fa_plots.fa2_tiles()
    text = "\n".join(_texts(fig))
    assert f"{t['bn']} keys" in text and f"{t['bm']} rows" in text
    assert f"{t['s_accs']} accumulators" in text and f"{t['smem'] // 1024} KiB" in text
    assert _k_tile_width(fig) == t["bn"]
    plt.close(fig)

    monkeypatch.setattr(fa_constants, "FA2_BN", 32)
    fig = fa_plots.plot_fa2_tiles()
    text = "\n".join(_texts(fig))
    assert "32 keys" in text and f"{t['bn']} keys" not in text
    assert _k_tile_width(fig) == 32
    plt.close(fig)

    fig = fa_plots.plot_fa2_tiles(fa_constants.FA2_HEAD_DIMS[-1], fa_constants.FA2_WARPS[-1])
    assert sum(t.get_text().startswith("warp ") for t in fig.axes[0].texts) == \
        fa_constants.FA2_WARPS[-1]
    plt.close(fig)


# --- chapter 06: the plan's lane bits -------------------------------------------------------------

SHAPES = ("acc_16x16x16_f32", "acc_32x8x16_f32", "acc_8x32x16_f32")


@pytest.mark.parametrize("kind", SHAPES)
def test_bit_map_agrees_with_the_plan(kind):
    """The lane bits that only move an element along a row (column bits) are the row
    butterfly's, those that move it down a column the column butterfly's; the register bits
    likewise split the registers into the plan's groups."""
    p = lc.plan(kind)
    bm = lc.bit_map(p)
    assert {b for b, (r, c) in enumerate(bm["lane"]) if c and not r} == set(p.rows.lane_bits)
    assert {b for b, (r, c) in enumerate(bm["lane"]) if r and not c} == set(p.cols.lane_bits)
    along_row = sum(1 << j for j, (r, c) in enumerate(bm["reg"]) if c and not r)
    assert sorted(tuple(g) for g in p.rows.groups) == sorted(
        tuple(x for x in range(p.n_regs) if x & ~along_row == base)
        for base in range(p.n_regs) if base & along_row == 0)


def _lines(fig) -> list[tuple]:
    return sorted((tuple(np.round(l.get_ydata(), 3)), l.get_color(), l.get_linestyle())
                  for ax in fig.axes for l in ax.lines if len(l.get_xdata()) == 2)


def test_lane_bit_figure_is_legible_and_drawn_from_the_plan():
    plans = [lc.plan(k) for k in SHAPES]
    fig = lc.plot_lane_bits(*plans)
    _legible(fig)
    assert len(fig.axes) == 3
    text = "\n".join(_texts(fig))
    for p in plans:
        assert p.name in text and f"shuffle offsets {p.rows.offsets_text()}" in text
        assert f"fold {p.cols.groups_text()}" in text
    lines = _lines(fig)
    assert len(lines) == sum(bin(r).count("1") + bin(c).count("1") for p in plans
                             for r, c in lc.bit_map(p)["lane"] + lc.bit_map(p)["reg"])
    plt.close(fig)

    # chapter 06's renumbered H100 table (lane bit 2 also flips lane bit 0): offsets 5, 8, 16
    h100 = plans[0].layout
    images = [1, 2, 5, 8, 16]
    mixed_table = np.empty_like(h100)
    for lane in range(32):
        new = 0
        for b in range(5):
            new ^= images[b] if lane >> b & 1 else 0
        mixed_table[new] = h100[lane]
    mixed = lc.plan("acc_16x16x16_f32", mixed_table)
    assert mixed.cols.offsets == (5, 8, 16)
    fig2 = lc.plot_lane_bits(mixed)
    assert "shuffle offsets 5, 8, 16" in "\n".join(_texts(fig2))
    assert _lines(fig2) != _lines(lc.plot_lane_bits(plans[0]))
    plt.close("all")


def test_bit_map_refuses_a_layout_without_a_bit_picture():
    p = lc.plan("acc_16x16x16_f32")
    lay = p.layout.copy()
    lay[[0, 5], 0] = lay[[5, 0], 0]          # swap one element between lanes 0 and 5
    with pytest.raises(ValueError, match="not affine"):
        lc.bit_map(dataclasses.replace(p, layout=lay))
