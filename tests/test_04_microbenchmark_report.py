"""Chapter 4's report from the recorded run: the computed explanations are right, the tables are
HTML that fits, the figures are legible, and the notebook glues exactly what the code computes."""
import json
import math

import numpy as np
import pytest

from fraglab import microbenchmark as mb
from fraglab import report
from nbval_run import ROOT

NOTEBOOK = ROOT / "book" / "04_microbenchmark.ipynb"
RECORD = ROOT / "book" / "data" / "04_microbenchmark" / "results.json"


@pytest.fixture(scope="module")
def doc():
    return mb.load(RECORD)


def test_energy_multiplies_the_power_of_the_same_load(doc):
    e = mb.energy_rows(doc)
    ps = doc["power_sustained"]
    for variant in mb.VARIANTS:
        p, t, mj = e["waves"][variant]
        assert p == ps[f"{variant}, 8 full waves"]["mean_w_energy"]
        assert t == pytest.approx(mb.record.warm_summary(doc, "8 full waves")[variant])
        assert mj == pytest.approx(p * t)
        p1, t1, mj1 = e["one_block"][variant]
        assert p1 == ps[f"{variant}, one block"]["mean_w_energy"] and mj1 == pytest.approx(p1 * t1)
    # the numbers of the record: 368.9 W x 0.02486 ms, and 136.0 W x 0.00397 ms
    assert e["waves"]["smem"][0] == pytest.approx(368.87, abs=0.01)
    assert e["waves"]["smem"][2] == pytest.approx(368.87 * 0.024864, rel=1e-4)
    assert e["one_block"]["smem"][2] == pytest.approx(136.005 * 0.003968, rel=1e-4)


def test_power_and_energy_rows_sit_side_by_side(doc):
    rows = {r["claim"]: r for r in mb.reproduce_table(doc)}
    e = mb.energy_rows(doc)
    for variant in mb.VARIANTS:
        power = rows[f"Table 4: power (W), {mb.LABELS[variant]}"]
        energy = rows[f"Table 5: energy per operation (mJ), {mb.LABELS[variant]}"]
        # each energy is the power of the row above times a time of the same load
        assert energy["sound"] == pytest.approx(power["sound"] * e["one_block"][variant][1])
        assert energy["paper_way"] == pytest.approx(power["paper_way"] * e["paper_way"][variant][1])
        w_power = rows[f"power (W), 8 full waves, {mb.LABELS[variant]}"]["sound"]
        w_energy = rows[f"energy per launch (mJ), 8 full waves, {mb.LABELS[variant]}"]["sound"]
        assert w_energy == pytest.approx(w_power * e["waves"][variant][1])
        assert f"{power['sound']:.1f} W x" in energy["products"][1]


def test_first_launch_breakdown_adds_up(doc):
    br = mb.first_launch_breakdown(doc)
    for name, row in br.items():
        s = mb.record.paper_way_summary(doc, name)
        for variant in mb.VARIANTS:
            parts = row[variant]
            assert parts["total"] == pytest.approx(s["first_ms"][variant]["mean"] * 1e3)
            assert parts["load"] + parts["launch"] + parts["rest"] == pytest.approx(parts["total"])
            assert parts["load"] == pytest.approx(s["host_us"]["load"][variant]["mean"])
    g = br["paper"]
    assert sum(g["gap"].values()) == pytest.approx(g["gap_total"])
    assert g["gap"]["load"] / g["gap_total"] > 0.9          # lazy module loading dominates


def test_epilogue_against_kernel_time(doc):
    ev = mb.epilogue_vs_kernel(doc)
    assert ev["saving_cycles"] == 84 and ev["saving_ns"] == pytest.approx(84 / 1980 * 1e3)
    assert ev["timer_step_ns"] == pytest.approx(32.0)
    # the warm one-block medians differ by exactly one step of the events' clock
    assert ev["one_block_median_diff_ns"] == pytest.approx(ev["timer_step_ns"])
    wv = ev["waves"]
    assert wv["resident"] == 132 * 32 and wv["warps"] == 33792
    assert wv["bound_ns"] == pytest.approx(wv["saving_per_warp_cycles"] * 33792 / 4224 / 1980 * 1e3)
    assert 0 < wv["mean_diff_ns"] < wv["bound_ns"] < wv["serial_saving_us"] * 1e3


def test_power_idle_windows(doc):
    pi = mb.power_idle(doc)
    assert pi["idle_w"] == doc["power_sustained"]["idle"]["mean_w_energy"]
    assert all(v > 0 for v in pi["below_idle_w"].values())      # the claim the text explains
    assert pi["relaunch_start_s"] < pi["idle_start_s"]           # from run.log's phase lines
    assert pi["temp_start_c"] <= pi["temp_warm_c"][0] <= pi["temp_end_c"]
    assert mb.explain.phase_starts("[  12.5 s] == a phase\nx\n[ 3.0 s] == b") == {"a phase": 12.5,
                                                                               "b": 3.0}


def test_throughput_against_the_peaks(doc):
    tp = mb.waves_throughput(doc)
    t = mb.record.warm_summary(doc, "8 full waves")["regs"] * 1e-3
    assert tp["regs"]["tflops"] == pytest.approx(33792 * 8192 / t / 1e12)
    assert tp["regs"]["tensor_share"] == pytest.approx(tp["regs"]["tflops"]
                                                       / report.H100_SXM["dense_bf16_tflops"])
    assert tp["regs"]["hbm_share"] == pytest.approx(tp["regs"]["tb_s"] / report.H100_SXM["hbm_tb_s"])
    assert tp["bytes"] < tp["l2_bytes"]


def test_conclusion_and_findings_state_no_unsupported_claim(doc):
    text = "\n".join(mb.conclusion(doc) + mb.findings(doc))
    assert "factors add up" not in text and "accounts for" not in text
    assert "93%" in text and "steps of 32 ns" in text


def test_glue_values_from_the_saved_file(doc):
    raw = json.loads(RECORD.read_text())
    v = mb.glue_values(raw)
    assert v == mb.glue_values(doc)
    assert v["ch04-run-s"] == "125 s" and v["ch04-paper-way-s"] == "82 s"
    assert v["ch04-waves-energy-smem"] == "368.9 W x 0.02486 ms = 9.17 mJ"
    assert v["ch04-epi-saving-ns"] == "42 ns" and v["ch04-timer-step-ns"] == "32 ns"


def test_notebook_glues_what_the_code_computes():
    glued = report.glued_values(NOTEBOOK)
    want = mb.glue_values(json.loads(RECORD.read_text()))
    assert {k: glued.get(k) for k in want} == want
    assert report.glue_names_cited(NOTEBOOK) <= set(glued)


def test_notebook_prints_no_wide_line_and_no_text_table():
    nb = json.loads(NOTEBOOK.read_text())
    for i, cell in enumerate(nb["cells"]):
        for o in cell.get("outputs", []):
            text = "".join(o.get("text", "")) if o["output_type"] == "stream" else \
                ("" if "text/html" in o.get("data", {}) or "image/png" in o.get("data", {})
                 else "".join(o.get("data", {}).get("text/plain", "")))
            assert not report.wide_lines(text), (i, report.wide_lines(text))
    text = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    for stale in ("three and a half minutes", "about 110 s", "accounts for", "factors add up"):
        assert stale not in text


def test_tables_are_html_with_every_column(doc):
    t = mb.reproduce_html(doc)
    html = t._repr_html_()
    for col in ("claim", "paper", "ours, paper&#x27;s way", "ours, sound way", "reproduced?"):
        assert col in html
    rows = {r[0]: r for r in t.rows}
    assert rows["T2 speedup (x)"][1:] == ["6.10", "20.81", "1.01", "no / no"]
    assert rows["T4 power W, baseline"][4] == "yes / yes"
    assert rows["energy mJ, 8 waves, baseline"][3] == "9.17"
    # every row fits: no cell longer than the widest short claim
    assert max(len(str(c)) for r in t.rows for c in r) <= 32
    assert len(repr(t).splitlines()) == 1
    for f in (mb.loading_html, mb.warm_html, mb.occupancy_html, mb.power_html):
        assert "<table>" in f(doc)._repr_html_()


@pytest.mark.parametrize("plot", ["plot_speedups", "plot_power", "plot_loading",
                                  "plot_time_distributions", "plot_cycles"])
def test_figures_are_legible(doc, plot):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    getattr(mb, plot)(doc)
    fig = plt.gcf()
    fig.tight_layout()
    try:
        if plot in ("plot_speedups", "plot_power", "plot_loading"):
            assert report.smallest_text_px(fig) >= report.MIN_TEXT_PX
        if plot == "plot_speedups":
            ax = fig.axes[0]
            assert ax.get_xscale() == "log"
            lo = min(b.get_width() for b in ax.patches)
            assert lo == pytest.approx(mb.record.paper_way_summary(doc, "regs_first")["speedup_of_means"])
            assert ax.get_xlim()[0] < lo                              # the 0.04x bar is visible
        if plot == "plot_power":
            ax = fig.axes[0]
            idle = doc["power_sustained"]["idle"]["mean_w_energy"]
            assert any(np.allclose(l.get_ydata(), idle) for l in ax.get_lines())   # the idle line
            leg = ax.get_legend().get_window_extent()
            assert leg.y1 <= ax.get_window_extent().y0                # legend below the axes
    finally:
        plt.close("all")


def test_energy_units():
    # the paper's own product, W x ms, is mJ: 120.79 W x 0.103 ms
    assert math.isclose(120.79 * 0.103, 12.44, rel_tol=1e-3)
