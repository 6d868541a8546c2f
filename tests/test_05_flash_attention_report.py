"""Chapter 5's report from the recorded run: the computed values are right and the notebook
glues exactly what the code computes."""
import json
import math
from fractions import Fraction

import numpy as np
import pytest

from fraglab import flash_attention as fa
from fraglab import report
from nbval_run import ROOT

NOTEBOOK = ROOT / "book" / "05_flash_attention.ipynb"
RECORD = ROOT / "book" / "data" / "05_flash_attention" / "results.json"


@pytest.fixture(scope="module")
def record():
    return json.loads(RECORD.read_text())


def test_expected_rescalings_is_the_harmonic_number_minus_one():
    assert fa.expected_rescalings(1) == 0
    assert fa.expected_rescalings(2) == Fraction(1, 2)
    h64 = sum(Fraction(1, j) for j in range(1, 65))
    assert fa.expected_rescalings(64) == h64 - 1
    assert f"{float(fa.expected_rescalings(64)):.2f}" == "3.74"
    # H_n - 1 ~ ln n + 0.5772 - 1 + 1/(2n): not ln n
    assert float(fa.expected_rescalings(64)) == pytest.approx(math.log(64) + 0.5772157 - 1 + 1 / 128,
                                                              abs=1e-4)
    with pytest.raises(ValueError):
        fa.expected_rescalings(0)


def test_rescalings_by_simulation():
    rng = np.random.default_rng(1)
    bm = rng.standard_normal((20000, 64))
    grows = bm >= np.maximum.accumulate(bm, axis=1)
    assert grows[:, 1:].sum(axis=1).mean() == pytest.approx(float(fa.expected_rescalings(64)),
                                                            abs=0.05)


def test_throttling_count(record):
    th = fa.throttling(record["results"])
    assert (th["flagged"], th["total"]) == (12, 22)
    assert th["reasons"] == ["sw_power_cap"] and th["min_mhz"] == 1755
    assert th["fa1_flagged"] == 0 and th["fa1_total"] == 3
    assert len(th["fa2_ratio_flagged"]) + len(th["fa2_ratio_clear"]) == 18
    # counted from the raw record, independently
    res = record["results"]
    cs = [res[k]["comparison"] for k in ("fa1_paper_pair", "fa1_fair_pair", "fa1_full_gpu")]
    cs += [res["fa2_warps"]["comparison"]] + [r["comparison"] for r in res["fa2_vs_sdpa"]]
    assert sum(bool(c["clocks"]["reasons"]) for c in cs) == th["flagged"]


def test_speedups_and_peak_shares(record):
    res = record["results"]
    sp = fa.report.speedups(res)
    t = res["fa1_paper_pair"]["comparison"]["timings"]
    assert sp["paper_size"]["paper_style"] == pytest.approx(
        t["paper_baseline"]["median_ms"] / t["inregister"]["median_ms"])
    assert fa.report.gain_share(1.36) == pytest.approx(1.0)
    v = fa.glue_values(record)
    assert v["ch05-paper-style"] == "1.29x" and v["ch05-fair"] == "1.08x"
    best = fa.report.best_fa2(res)
    assert v["ch05-best-fa2-share"] == f"{best['tflops']['fa2'] / report.H100_SXM['dense_f16_tflops']:.0%}"
    assert v["ch05-fa2-over-fa1"] == "10.2x" and v["ch05-bench-s"] == "8.6 s"
    assert v["ch05-capped"] == "12" and v["ch05-comparisons"] == "22"


def test_verdicts_present_both_baselines(record):
    rows = fa.verdicts(record["results"])
    speed = next(r for r in rows if r[0] == "speedup, paper's size")
    assert speed[2] == "1.29x" and speed[3] == "1.08x"
    assert speed[4] == "81% / 24% of its gain" and "reproduced" not in speed[4]
    html = fa.verdicts_html(record["results"])._repr_html_()
    assert "ours, paper-style" in html and "ours, fair" in html


def test_notebook_glues_what_the_code_computes(record):
    glued = report.glued_values(NOTEBOOK)
    want = fa.glue_values(record)
    assert {k: glued.get(k) for k in want} == want
    assert glued["ch05-rescalings-expected"] == f"{float(fa.expected_rescalings(64)):.2f}"
    assert report.glue_names_cited(NOTEBOOK) <= set(glued)


def test_notebook_text():
    nb = json.loads(NOTEBOOK.read_text())
    text = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    assert "about a minute" not in text and "about $\\ln n$" not in text
    # no inline math continued on a line that starts with "+" (it renders as a list item)
    for line in text.splitlines():
        assert not line.lstrip().startswith("+ \\"), line
    for cell in nb["cells"]:
        for o in cell.get("outputs", []):
            if o["output_type"] == "stream":
                assert not report.wide_lines("".join(o["text"]))
