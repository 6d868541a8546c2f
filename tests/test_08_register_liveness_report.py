"""Topic 08_register_liveness, the chapter's report on a fake record (CPU only): every name the
prose cites is glued, values follow the record, tables and figures fit the column, and the
bench's summary reads the record; the real record's checks skip until the lead's H100 run."""
import pytest

from fraglab import report
from fraglab import register_liveness as rl
from fraglab.register_liveness import bench, kernels, plots, report as rl_report, resources
from nbval_run import ROOT

BOOK = ROOT / "book" / "08_register_liveness.ipynb"


def _rows(names, base=100.0):
    rows = {n: {"tflops": base + 10 * i, "median_ms": 1.0, "p10_ms": 0.9, "p90_ms": 1.1}
            for i, n in enumerate(names)}
    sd = rows.get("sdpa_flash", {"tflops": base})["tflops"]
    for r in rows.values():
        r["of_baseline"] = r["tflops"] / sd
    return rows


@pytest.fixture(scope="module")
def fake():
    tp = [{"d": d, "causal": False, "rows": _rows(bench.throughput_names(d)), "skipped": {}}
          for d in rl.HEAD_DIMS]
    causal = [{"d": d, "causal": True, "skipped": {},
               "rows": _rows(["qreg", "qreg_oneloop", "qreload", "qreload_oneloop", "sdpa_flash"])}
              for d in rl.HEAD_DIMS]
    sweep = [{"d": d, "causal": False, "skipped": {},
              "rows": _rows(["qreg", "qreg@maxrregcount=168", "qreload@maxrregcount=128", "sdpa_flash"])}
             for d in (128, 256)]
    tri = {"version": "3.4.0", "rows": [{"d": 128, "causal": True, "registers": {
        "q_before_loop": {"n_regs": 168, "n_spills": 0}, "q_in_loop": {"n_regs": 160, "n_spills": 0}},
        "rows": _rows(["q_before_loop", "q_in_loop", "sdpa_flash"])}]}
    return {"device": {"name": "NVIDIA H100 80GB HBM3", "clocks": {"sm_mhz": 1980}},
            "results": {"sdpa": "torch 2.9", "throughput": tp, "causal": causal,
                        "sweep": {"timed": sweep, "resources": []}, "triton": tri,
                        "check": [{"variant": "qreg", "case": "x", "ok": True},
                                  {"variant": "qreload", "case": "y", "ok": False}]}}


def test_glue_values_follow_the_record(fake):
    g = rl.glue_values(fake)
    assert all(k.startswith("ch08-") and isinstance(v, str) and v for k, v in g.items())
    rows256 = fake["results"]["throughput"][2]["rows"]
    best = max((k for k in rows256 if k not in ("sdpa_flash", "fa2")), key=lambda k: rows256[k]["tflops"])
    assert g["ch08-best-d256"] == best
    assert g["ch08-best-tflops-d256"] == f"{rows256[best]['tflops']:.0f}"
    assert g["ch08-goal-verdict"] in ("met", "not met")
    assert g["ch08-checks-passed"] == "1 of 2"
    assert g["ch08-triton-q_in_loop-regs"] == "160"
    assert g["ch08-sweep-best-d128"] == "qreload, cap 128"
    assert g["ch08-two-vs-one-qreg-d128"].endswith("x")


def test_an_empty_record_reads_na():
    g = rl.glue_values({"results": {}})
    assert g["ch08-best-d256"] == "n/a" and g["ch08-goal-verdict"] == "n/a"


def test_every_name_the_chapter_cites_is_glued(fake):
    # the live values' names come from the variants, head dimensions and caps, not from the
    # numbers: rows of zeros stand in for the compiles (the chapter compiles them for real)
    zero = dict(registers=0, spill_stores=0, spill_loads=0, ldl=0, stl=0, blocks_per_sm=0)
    rows = [dict(zero, variant=v, d=d, knobs={}) for d in kernels.HEAD_DIMS for v in kernels.VARIANTS]
    sweep = [dict(zero, variant=v, d=d, knobs={"maxrregcount": cap}) for d in resources.SWEEP_DIMS
             for v in resources.SWEEP_VARIANTS for cap in resources.SWEEP_CAPS]
    live = rl_report.live_glue_values(rows, sweep)
    names = set(rl.glue_values(fake)) | set(live)
    missing = report.glue_names_cited(BOOK) - names
    assert not missing, f"cited but never glued: {sorted(missing)}"


def test_tables_render_on_the_fake_record(fake):
    for key in ("throughput", "causal", "sweep"):
        html = rl_report.throughput_table(fake, key)._repr_html_()
        assert "sdpa_flash" in html
    assert "q_in_loop".replace("q_", "").replace("_", " ") in rl_report.triton_table(fake)._repr_html_()
    assert "no H100 record" in rl_report.throughput_table({"results": {}})._repr_html_()


def test_the_figures_are_legible(fake):
    import matplotlib
    matplotlib.use("Agg")
    prof = rl_report.profiles(128)
    for fig in (plots.plot_liveness(prof, 128), plots.plot_throughput(fake)):
        assert report.smallest_text_px(fig) >= report.MIN_TEXT_PX


def test_the_bench_summary_reads_the_record(fake):
    text = bench.summary(fake["results"])
    assert "d=256" in text and "check: 1 of 2 pass" in text


def test_the_bench_command_line_parses(monkeypatch):
    from fraglab.register_liveness import __main__ as cli
    seen = {}
    monkeypatch.setattr(bench, "run", lambda out, quick, seed: seen.update(out=out, quick=quick))
    assert cli.main(["bench", "--out", "/tmp/x", "--quick"]) == 0
    assert seen == {"out": "/tmp/x", "quick": True}


def test_the_record_when_there_is_one():
    if not rl_report.RESULTS.is_file():
        pytest.skip("book/data/08_register_liveness/results.json is written by the lead's H100 run")
    doc = rl_report.load()
    assert doc["results"]["throughput"] and doc["results"]["check"]
