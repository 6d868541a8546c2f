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
    assert g["ch07-goal-verdict"] == ("met" if at["autotuned"]["of_cublas"] >= 0.9 else "not met")


def test_a_different_record_gives_different_prose(doc):
    """Nothing is hard-coded: scale a rung's time and the glued speedup and verdict follow."""
    other = copy.deepcopy(doc)
    entry = rr_report.ladder_at(other, rr_report.SIZE)["rows"]
    entry["tile1d"]["tflops"] = 3 * entry["smem"]["tflops"]
    entry["autotuned"]["of_cublas"] = 0.5
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
    for fig in (plots.plot_ladder(doc, rows), plots.plot_sizes(doc), plots.plot_stalls(doc)):
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
