"""Topic 07_register_reuse, the chapter's report: values computed from the record (nothing typed),
tables and figures that fit the column, SASS counts a learner can reproduce (CPU only)."""
import copy
import json
import re

import pytest

from fraglab import report
from fraglab import register_reuse as rr
from fraglab.register_reuse import plots, report as rr_report
from nbval_run import ROOT

BOOK = ROOT / "book" / "07_register_reuse.ipynb"


@pytest.fixture(scope="module")
def doc():
    return rr_report.load()


@pytest.fixture(scope="module")
def rows(doc):
    return rr_report.live_sass(doc)


def _num(text):
    return float(re.sub(r"[^0-9.]", "", text))


def test_glue_values_follow_the_record(doc):
    g = rr.glue_values(doc)
    assert all(k.startswith("ch07-") and isinstance(v, str) and v for k, v in g.items())
    at = rr_report.ladder_at(doc, rr_report.SIZE)["rows"]
    assert g["ch07-tflops-tile1d"] == f"{at['tile1d']['tflops']:.1f}"
    assert g["ch07-share-autotuned"] == f"{100 * at['autotuned']['of_cublas']:.1f}%"
    assert _num(g["ch07-speedup-tile1d"]) == pytest.approx(
        at["tile1d"]["tflops"] / at["smem"]["tflops"], abs=0.006)
    seed = doc["results"]["seed_figures"]
    assert g["ch07-seed-share-tile1d"] == f"{100 * seed['of_cublas']['tile1d']:.1f}%"
    assert g["ch07-seed-speedup"] == f"{seed['speedup_tile1d_over_smem']}x"
    assert g["ch07-gpu"] == doc["device"]["name"]
    top = rr_report.CHAPTER_TOP
    assert top == rr.FINAL, "the chapter's top rung is the ladder's last"
    assert g["ch07-top"] == top
    assert g["ch07-goal-verdict"] == ("met" if at[top]["of_cublas"] >= 0.9 else "not met")


def test_a_different_record_gives_different_prose(doc):
    """Nothing is hard-coded: scale a rung's time and the glued speedup and verdict follow."""
    other = copy.deepcopy(doc)
    entry = rr_report.ladder_at(other, rr_report.SIZE)["rows"]
    entry["tile1d"]["tflops"] = 3 * entry["smem"]["tflops"]
    entry[rr_report.CHAPTER_TOP]["of_cublas"] = 0.5
    other["device"]["name"] = "Some GPU"
    g = rr.glue_values(other)
    assert g["ch07-speedup-tile1d"] == "3.00x"
    assert g["ch07-goal-verdict"] == "not met"
    assert g["ch07-gpu"] == "Some GPU"


def test_stalls_are_read_from_the_record(doc):
    st = rr_report.stalls(doc)
    assert set(st) <= set(rr.VARIANTS) and "selected" not in st.get("smem", {})
    g = rr.glue_values(doc)
    if "smem" in st:
        assert g["ch07-top-stall-smem"].split(" and ")[0] == \
            max(st["smem"], key=st["smem"].get).replace("_", " ")
        assert g["ch07-mio-smem"] == f"{st['smem']['mio_throttle']:.2f}"
    assert rr_report.top_stalls({"a_b": 5.0, "c": 4.99, "d": 1.0}) == "a b and c"


def test_live_sass_counts_equal_the_record(doc, rows):
    """The book quotes the record's SASS counts (NVRTC on the GPU machine); a fresh build with
    the compiler `make test` installs gives the same (issue 13, item 8)."""
    assert rr_report.sass_differences(doc, rows) == []
    assert rr_report.live_glue_values(doc, rows)["ch07-live-agree"] == "the same counts"
    by = {r["kernel"]: r for r in rows}
    assert by["smem"]["words_per_ffma"] == 2.0
    assert by["tile1d"]["words_per_ffma"] == pytest.approx(9 / 8)


def test_tables(doc, rows):
    t = rr_report.ladder_table(doc, rows)
    assert [r[0] for r in t.rows] == [rr_report.LABELS[k] for k in rr.VARIANTS] + ["cuBLAS (TF32 off)"]
    html = t._repr_html_()
    assert "overflow-x:auto" in html and "Table 2" in html
    assert [r[0] for r in rr_report.rungs_table().rows] == [rr_report.LABELS[k] for k in rr.VARIANTS]
    assert len(repr(t)) < report.CHAR_BUDGET
    b = rr_report.blocks_table(doc, rows)
    top = [r for r in b.rows if r[0] == rr_report.LABELS["autotuned"]][0]
    bm, bn, _ = rr.block_tile("autotuned", rr_report.tuned_tiles(doc)["autotuned"])
    assert top[2] == (1024 // bm) * (1024 // bn)
    r10 = [r for r in b.rows if r[0] == rr_report.LABELS["split_k"]][0]
    g = rr_report.grid(doc, "split_k", (1024,) * 3)
    assert r10[2] == g["tile_blocks"] * g["splits"] and f"K in {g['splits']}" in r10[1]
    s = rr_report.shapes_table(doc)
    entries = rr_report.record_table(doc)["entries"]
    assert len(s.rows) == len(entries) and s.rows[0][0] == "1024^3"
    assert s.rows[0][5] == f"{entries[0]['of_cublas']:.2f}x"
    assert s.rows[0][6] == f"{entries[0]['autotuned_of_cublas']:.2f}x"
    assert "Table 4" in s._repr_html_()


def test_the_grids_at_1024_are_computed_from_the_record(doc):
    """Wave quantization from the grid: rung 9's blocks are its tiles over the shape, its slots
    the SMs times the blocks the record's SASS row fits; rung 10's tiles and split are those the
    record's ladder ran at that shape, its slots from its build's registers."""
    sms = doc["device"]["sm_count"]
    t9 = rr_report.tuned_tiles(doc)["autotuned"]
    g9 = rr_report.grid(doc, "autotuned", (1024,) * 3)
    per9 = {r["kernel"]: r for r in doc["results"]["sass"]}["autotuned"]["blocks_per_sm"]
    assert g9["blocks"] == (1024 // t9["BM"]) * (1024 // t9["BN"])
    assert g9["slots"] == sms * per9 and g9["fill"] == g9["blocks"] / g9["slots"]
    g = rr.glue_values(doc)
    assert g["ch07-r9-blocks-small"] == str(g9["blocks"])
    assert g["ch07-r9-fill-small"] == f"{100 * g9['blocks'] / g9['slots']:.1f}%"
    for entry in doc["results"]["ladder"]:
        ran = entry["rows"].get("split_k", {}).get("tiles")
        if ran:                     # the table the record keeps is the one its ladder ran with
            got = rr_report.grid(doc, "split_k", entry["shape"])["tiles"]
            assert {k: got[k] for k in ran} == ran, entry["shape"]
    g10 = rr_report.grid(doc, "split_k", (1024,) * 3)
    regs = rr_report.build_registers(doc, g10["tiles"])
    assert regs and g10["blocks_per_sm"] == rr.occupancy(
        regs, rr.shared_bytes("split_k", g10["tiles"]),
        rr.threads("split_k", g10["tiles"]))["blocks_per_sm"]
    assert g["ch07-r10-blocks-small"] == str(g10["tile_blocks"] * g10["splits"])
    partial = g10["splits"] * 1024 * 1024 * 4
    assert g["ch07-extra-mib-small"] == f"{2 * partial / 2**20:g} MiB"
    with pytest.raises(ValueError, match="models rungs"):
        rr_report.grid(doc, "tile1d", (1024,) * 3)


def test_a_shape_outside_the_table_takes_the_nearest_entry(doc):
    table = rr_report.record_table(doc)
    shape = (3072, 3072, 3072)
    assert shape not in [tuple(e["shape"]) for e in table["entries"]]
    near = rr.kernels.nearest_entry(*shape, table=table)
    got = rr_report.grid(doc, "split_k", shape)["tiles"]
    assert {k: got[k] for k in ("BM", "BN", "BK", "WM", "WN")} == \
        {k: near["tiles"][k] for k in ("BM", "BN", "BK", "WM", "WN")}


def test_the_goal_is_stated_shape_by_shape_from_the_record(doc):
    g = rr.glue_values(doc)
    by = {tuple(e["shape"]): e["of_cublas"] for e in rr_report.record_table(doc)["entries"]}
    met = [s for s, v in rr_report.GOAL_SHAPES.items() if by[s] >= v]
    assert g["ch07-goal-n-met"] == str(len(met)) and g["ch07-goal-n"] == "7"
    assert g["ch07-goal-small-x"] == "0.90x" and g["ch07-goal-large-x"] == "1.00x"
    for s in rr_report.GOAL_SHAPES:
        text = ("{}^3".format(s[0]) if len(set(s)) == 1 else "x".join(map(str, s))) \
            + f" ({by[s]:.2f}x)"
        assert text in (g["ch07-goal-met"] if s in met else g["ch07-goal-missed"])
    # another record: 2048^3 past cuBLAS, 1024^3 below its goal; the glued text follows
    other = copy.deepcopy(doc)
    for e in other["results"]["shape_table"]["entries"]:
        if tuple(e["shape"]) == (2048,) * 3:
            e["of_cublas"] = 1.01
        if tuple(e["shape"]) == (1024,) * 3:
            e["of_cublas"] = 0.85
    g2 = rr.glue_values(other)
    assert "2048^3 (1.01x)" in g2["ch07-goal-met"] and "1024^3 (0.85x)" in g2["ch07-goal-missed"]
    assert g2["ch07-goal-n-met"] == str(len(met) - ((1024,) * 3 in met) + ((2048,) * 3 not in met))


def test_a_record_before_rung_10_glues_no_rung_10_values(doc):
    other = copy.deepcopy(doc)
    other["results"]["tiles"].pop("split_k")
    g = rr.glue_values(other)
    assert "ch07-r10-blocks-small" not in g and "ch07-goal-met" not in g
    rows = rr_report.blocks_table(other, rr_report.live_sass(other)).rows
    assert rr_report.LABELS["split_k"] not in [r[0] for r in rows]


@pytest.mark.parametrize("variant", rr.VARIANTS[1:])
def test_each_rung_is_a_diff_of_the_one_before(variant):
    text = rr_report.diff_text(variant)
    before = rr.VARIANTS[rr.VARIANTS.index(variant) - 1]
    assert text.startswith(f"--- 07_register_reuse_{before}.cu\n+++ 07_register_reuse_{variant}.cu")
    assert f"sgemm_{variant}" in text
    shown = rr_report.diff_listing(variant)
    assert "<details" in shown._repr_html_() and len(repr(shown)) <= report.CHAR_BUDGET


def test_figures_are_legible(doc, rows):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for fig in (plots.plot_ladder(doc, rows), plots.plot_sizes(doc), plots.plot_stalls(doc),
                plots.plot_waves(doc)):
        assert report.smallest_text_px(fig) >= report.MIN_TEXT_PX
        assert fig.get_figwidth() * 100 <= report.COLUMN_PX + 1
        plt.close(fig)


def test_the_chapter_glues_the_record_and_types_no_measurement(doc):
    nb = json.loads(BOOK.read_text())
    glued = report.glued_values(BOOK)
    want = rr.glue_values(doc)
    assert {k: glued.get(k) for k in want} == want
    assert report.glue_names_cited(BOOK) <= set(glued)
    prose = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    assert "`{glue" not in prose, "a glue role inside a code span is not rendered"
    prose = re.sub(r"\{glue:text\}`[^`]+`", "", prose)
    typed = [v for v in want.values() if re.search(r"\d\.\d", v) and v in prose]
    assert not typed, f"measured values typed into the prose instead of glued: {typed}"
    assert report.lab_url("07_register_reuse", "colab") in prose
    assert report.lab_url("07_register_reuse", "github") in prose


def test_a_record_without_ncu_or_a_rung_still_renders(doc, rows):
    """ncu missing on the GPU machine, a rung that failed at one size: the chapter still runs
    and says n/a where the record has nothing."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    other = copy.deepcopy(doc)
    other["results"]["stalls"] = {"skipped": "ncu (Nsight Compute) not found on this machine"}
    del rr_report.ladder_at(other, rr_report.SIZE)["rows"]["tile1d"]
    g = rr.glue_values(other)
    assert g["ch07-mio-smem"] == "n/a" and g["ch07-speedup-tile1d"] == "n/a"
    assert g["ch07-achieved-smem"] == "n/a"
    rr_report.ladder_table(other, rows)._repr_html_()
    for fig in (plots.plot_ladder(other, rows), plots.plot_sizes(other), plots.plot_stalls(other)):
        plt.close(fig)


# --- rung 10's switches: the sweep's timings per setting (record), their SASS (compiled here) ---

def _candidate(doc, shape, label):
    sweep = rr_report.record_table(doc)["sweep"]
    sw = next(s for s in sweep if tuple(s["entry"]["shape"]) == tuple(shape))
    return next(c for c in sw["candidates"] if c["label"] == label)


def test_switch_trials_read_the_sweeps_first_round(doc):
    """Each setting is the candidate with the pick's tiles and split, that switch on and the
    others off, timed in the same round; the pick's GROUP first, another where it lacks one."""
    x = rr_report.switch_trials(doc, (4096,) * 3)
    assert list(x) == list(rr_report.SWITCH_SETS)
    for name, label in (("off", ""), ("RDB", " RDB"), ("O1", " O1"), ("RDB + O1", " RDB O1"),
                        ("LM = 8", " L8")):
        c = _candidate(doc, (4096,) * 3, "128x128x8/64x64 M2 G8 S1" + label)
        assert x[name] == c["short"]["of_cublas"], name
    # at 8192^3 the pick is G1 and the sweep timed the switches off with G8 only
    x8 = rr_report.switch_trials(doc, (8192,) * 3)
    assert x8["off"] == _candidate(doc, (8192,) * 3, "128x128x8/64x64 M2 G8 S1")["short"]["of_cublas"]
    assert x8["RDB"] == _candidate(doc, (8192,) * 3, "128x128x8/64x64 M2 G1 S1 RDB")["short"]["of_cublas"]
    # at 1024^3 the pick splits K in 4: the unsplit candidate of the same tiles is not "off"
    x1 = rr_report.switch_trials(doc, (1024,) * 3)
    assert x1["off"] == _candidate(doc, (1024,) * 3, "128x128x8/64x64 M2 G8 S4")["short"]["of_cublas"]
    # rung 9's tile, with the swizzle
    t9 = {**rr_report.tuned_tiles(doc)["autotuned"], "SPLIT": 1}
    r9 = rr_report.switch_trials(doc, (4096,) * 3, t9, rr_report.SWIZZLE_SETS)
    assert r9["SWZ"] == _candidate(doc, (4096,) * 3,
                                   "128x256x16/64x64 M1 G8 S1 SWZ")["short"]["of_cublas"]
    assert rr_report.switch_trials(doc, (123, 45, 67)) == {k: None for k in rr_report.SWITCH_SETS}


def test_switches_table_and_glue_follow_the_record(doc):
    t = rr_report.switches_table(doc)
    assert [r[0] for r in t.rows] == ["1024^3", "2048^3", "4096^3", "6144^3", "8192^3",
                                      "4096x4096x1024", "8192x1024x4096"]
    x = rr_report.switch_trials(doc, (4096,) * 3)
    row = t.rows[2]
    assert row[3:8] == [f"{v:.3f}" for v in x.values()]
    assert row[8] == f"{100 * (x['RDB + O1'] / x['off'] - 1):+.1f}%"
    assert "Table 6" in t._repr_html_() and t.width_px <= report.COLUMN_PX
    g = rr.glue_values(doc)
    assert g["ch07-sw-off-4096"] == f"{x['off']:.2f}x" and g["ch07-sw-both-4096"] == \
        f"{x['RDB + O1']:.2f}x"
    assert g["ch07-sw-gain-4096"] == row[8]
    entries = rr_report.record_table(doc)["entries"]
    picked = [e for e in entries if tuple(e["shape"]) in rr_report.GOAL_SHAPES
              and e["tiles"].get("REGDB") and e["tiles"].get("ORDER") == 1]
    assert g["ch07-sw-picked-n"] == str(len(picked))
    lo, hi = g["ch07-sw-gain-both-range"].split(" to ")
    gains = [100 * (v["RDB + O1"] / v["off"] - 1) for s in rr_report.GOAL_SHAPES
             if s != (1024,) * 3 for v in [rr_report.switch_trials(doc, s)]]
    assert (lo, hi) == (f"{min(gains):+.1f}%", f"{max(gains):+.1f}%")
    # another record: the switches slow the pick at 4096^3; the text follows, and a setting the
    # sweep did not time reads n/a
    other = copy.deepcopy(doc)
    _candidate(other, (4096,) * 3, "128x128x8/64x64 M2 G8 S1 RDB O1")["short"]["of_cublas"] = 0.5
    _candidate(other, (8192,) * 3, "128x128x8/64x64 M2 G8 S1")["short"]["of_cublas"] = None
    g2 = rr.glue_values(other)
    assert g2["ch07-sw-both-4096"] == "0.50x" and g2["ch07-sw-gain-4096"].startswith("-")
    assert g2["ch07-sw-off-8192"] == "n/a" and g2["ch07-sw-gain-8192"] == "n/a"
    # a record whose table was never measured (no sweep) glues no switch values
    other["results"]["shape_table"].pop("sweep")
    assert not [k for k in rr.glue_values(other) if k.startswith("ch07-sw-")]


def test_the_switches_sass_compiled_here(doc):
    """Table 5's counts: REGDB puts FFMAs after the loop's barrier (none without it), the row
    snake carries more .reuse flags and reads the register file less; the glue quotes them."""
    from fraglab.register_reuse import switch_sass
    rows = switch_sass.live_rows(doc)
    assert [r["setting"] for r in rows] == list(switch_sass.SETTINGS) * 2
    by = {r["setting"]: r for r in rows[:4]}
    assert by["off"]["tiles"] == {**rr_report.rung10_tiles(doc, (4096,) * 3), **rr_report.SWITCHES_OFF}
    assert by["off"]["ffma_after_barrier"] == by["O1"]["ffma_after_barrier"] == 0
    assert 0 < by["RDB"]["ffma_after_barrier"] <= by["off"]["ffma"]
    assert by["O1"]["reuse_flags"] > by["off"]["reuse_flags"]
    assert by["O1"]["from_file"] < by["off"]["from_file"]
    assert all(r["ffma"] == by["off"]["ffma"] for r in rows[:4])
    g = switch_sass.glue_values(rows)
    assert g["ch07-live-sw-after-rdb"] == str(by["RDB"]["ffma_after_barrier"])
    assert g["ch07-live-sw-reuse-o1"] == str(by["O1"]["reuse_flags"])
    t = switch_sass.table(rows)
    assert len(t.rows) == 8 and "Table 5" in t._repr_html_() and t.width_px <= report.COLUMN_PX
    glued = report.glued_values(BOOK)
    assert set(g) <= set(glued), "the chapter glues the live switch counts"
