"""Topic 09_instruction_diet: the chapter's numbers, tables and figures from a fake record (the
real one comes from the H100: ``book/data/09_instruction_diet/results.json``)."""
import json

import pytest

from fraglab import report
from fraglab.instruction_diet import VARIANTS, FINAL, bench, classes, plots
from fraglab.instruction_diet import report as dr


def fake_record(with_stalls=True) -> dict:
    """A record shaped like ``bench.run``'s, with made-up timings (never shown as measurements);
    the variants under the record's keys ``steps`` and ``step``, as the H100 record has them."""
    def timed(n, d, causal, base=300.0):
        tf = {s: base * (0.9 + 0.03 * i) for i, s in enumerate(VARIANTS)}
        tf.update(sdpa_flash=base, cudnn=base * 1.2)
        return {"N": n, "d": d, "causal": causal, "dtype": "f16", "B": 4, "H": 8,
                "tflops": tf, "of_sdpa": {k: v / base for k, v in tf.items()},
                "median_ms": {k: 1.0 for k in tf}}
    sass = {f"d{d}": [{**classes.counts(""), "step": s, "registers": 200 + i, "spill_bytes": 0,
                       "loop": {**{k: 10 for k in classes.ORDER}, "tensor": 128, "local": 0},
                       "loop_instructions": 500 - 10 * i, "hmma_share": 0.2 + 0.01 * i}
                      for i, s in enumerate(VARIANTS)] for d in (64, 128)}
    res = {"steps": list(VARIANTS), "final": FINAL, "baselines": {"sdpa_flash": "torch 2.9"},
           "check": [{"step": s, "case": "x", "ok": True, "error": 2e-4} for s in VARIANTS],
           "sass": sass, "headline": [timed(4096, 128, c) for c in (False, True)],
           "sweep": [timed(n, d, c) for n, d, c in bench.sweep_configs() if (n, d) != (4096, 128)]}
    if with_stalls:
        res["stalls"] = {s: {"stalls": {"smsp__average_warps": {"short_scoreboard": 1.5, "wait": 0.8,
                                                                "selected": 1.0}}}
                         for s in bench.STALL_VARIANTS}
    return {"device": {"name": "NVIDIA H100 80GB HBM3", "clocks": {"sm_mhz": 1980}},
            "created_utc": "2026-11-23T07:00:00+00:00", "results": res}


def test_glue_values_from_a_fake_record():
    g = dr.glue_values(fake_record())
    assert all(k.startswith("ch09-") and isinstance(v, str) for k, v in g.items())
    assert g["ch09-gpu"] == "NVIDIA H100 80GB HBM3" and g["ch09-record-date"] == "2026-11-23"
    assert g["ch09-final"] == FINAL and g["ch09-tflops-sdpa-flash"] == "300"
    assert g["ch09-final-of-sdpa"] == f"{0.9 + 0.03 * (len(VARIANTS) - 1):.2f}x"
    assert g["ch09-checks-pass"] == str(len(VARIANTS)) and g["ch09-sweep-count"] == "20"
    assert g["ch09-goal-headline-verdict"] in ("met", "not met")
    assert all(len(v) < 60 for v in g.values())


def test_glue_values_survive_an_empty_record():
    g = dr.glue_values({"results": {"failures": {"headline": "boom"}}})
    assert g["ch09-final-of-sdpa"] == "n/a" and g["ch09-goal-headline-verdict"] == "n/a"


def test_tables_from_a_fake_record():
    doc = fake_record()
    html = dr.variant_table(doc)._repr_html_()
    assert all(s in html for s in VARIANTS) and "sdpa_flash" in html and "cudnn" in html
    assert len(dr.sweep_table(doc).rows) == 20
    st = dr.stall_table(doc)
    assert isinstance(st, report.Table) and "short scoreboard" in st._repr_html_()
    assert dr.stall_table(fake_record(with_stalls=False)).startswith("[stalls]")
    assert len(dr.changes_table().rows) == len(VARIANTS)


def test_summary_reads_a_fake_record():
    text = bench.summary(fake_record()["results"])
    assert "N=4096" in text and FINAL in text and "check: all pass" in text
    assert max(len(line) for line in text.splitlines()) <= report.CHAR_BUDGET


def test_figures_are_legible():
    doc = fake_record()
    for fig in (plots.plot_classes(dr.sass_rows(doc)), plots.plot_sweep(doc)):
        assert report.smallest_text_px(fig) >= report.MIN_TEXT_PX


def test_live_glue_names_the_variants():
    rows = dr.sass_rows(fake_record())
    ev = [{"count": i} for i in range(4)]
    g = dr.live_glue_values(rows, ev)
    assert g["ch09-live-loop-fa2"] == "500" and g["ch09-live-evidence-rz"] == "3"


def test_the_record_when_there_is_one():
    if not dr.RESULTS.exists():
        pytest.skip("book/data/09_instruction_diet/results.json is written by the H100 run "
                    "(python -m fraglab.instruction_diet bench); not recorded yet")
    doc = json.loads(dr.RESULTS.read_text())
    g = dr.glue_values(doc)
    assert g["ch09-checks"] == g["ch09-checks-pass"], "a variant failed its check on the H100"


def test_an_empty_record_reads_n_a(tmp_path):
    doc = dr.load(tmp_path / "missing.json")
    assert "missing" in doc and dr.glue_values(doc)["ch09-tflops-final"] == "n/a"
    assert dr.sweep_table(doc).startswith("[record]")
    rows = dr.sass_rows(fake_record())
    assert len(dr.variant_table(doc, rows).rows) == len(VARIANTS)
    assert report.smallest_text_px(plots.plot_sweep(doc)) >= report.MIN_TEXT_PX


def test_sanitizer_verdicts():
    doc = lambda runs: {"results": {"sanitizer": {f"r{i}": {"clean": c} for i, c in enumerate(runs)}}}
    assert dr.sanitizer_verdict(doc([True, True])) == "clean"
    assert dr.sanitizer_verdict(doc([True, False, None])) == "not clean"
    assert dr.sanitizer_verdict(doc([True, None])) == "incomplete"
    assert dr.sanitizer_verdict({"results": {"sanitizer": {"skipped": "no tool"}}}) == "not run"
