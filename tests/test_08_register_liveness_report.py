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
    names = set(rl.glue_values(_with_d256(fake))) | set(live)
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


# ---- d = 256 beside SDPA flash and cuDNN, in rounds (step d256, rounds.py) ----------------------

from fraglab.register_liveness import rounds  # noqa: E402

#: Fake medians (ms) alone; with cuDNN in the rounds everything else runs ``SLOW`` times longer
#: (the clock cuDNN's power leaves them), and round r adds r per mille (the spread).
MS = {"qreload_oneloop@bn=64": 1.80, "qreload@bn=64": 1.90, "qreload": 2.10,
      "sdpa_flash": 1.74, "cudnn": 0.81}
SLOW = 1.12


class FakeGPU:
    """Callables that return their names, a timer that times them as :data:`MS` says, and a
    monitor whose clock and power follow whether cuDNN ran in the comparison."""

    def __init__(self, names=MS, slow=SLOW, kernel_slow=None):
        self.names, self.slow, self.kernel_slow = names, slow, kernel_slow or slow
        self.cudnn, self.round = False, 0
        self.runs = {n: (lambda n=n: self._call(n)) for n in names}

    def _call(self, name):
        self.cudnn |= name == "cudnn"
        return name

    def timer(self, fn, n, flush):
        name = fn()
        f = 1.0 if name == "cudnn" or not self.cudnn else (
            self.kernel_slow if name in rounds.KERNELS else self.slow)
        return [MS[name] * f * (1 + self.round / 1000)] * n

    def monitor(self):
        gpu = self

        class M:
            def __enter__(self):
                gpu.cudnn, gpu.round = False, gpu.round + 1
                return self

            def __exit__(self, *exc):
                return False

            def result(self):
                mhz = 1600.0 + gpu.round if gpu.cudnn else 1900.0 + gpu.round
                return {"sm_mhz": {"n": 3, "min": mhz - 5, "median": mhz, "max": mhz + 5},
                        "power_w": 699.0 if gpu.cudnn else 640.0, "reasons": ["sw_power_cap"]}
        return M()


def fake_d256(n=3, **kw):
    gpu = FakeGPU(**kw)
    lines = []
    recs = rounds.run_rounds(gpu.runs, 5.5e11, rounds=n, rep=rounds.QUICK_REP,
                             log=lines.append, monitor=gpu.monitor, _timer=gpu.timer)
    return {"rounds": recs, "spread": rounds.spread(recs), "lines": lines}


def test_the_rounds_interleave_both_conditions_and_take_turns():
    res = fake_d256(4)
    conds = [r["condition"] for r in res["rounds"]]
    assert conds == ["with_cudnn", "without_cudnn", "without_cudnn", "with_cudnn"] * 2
    assert [r["round"] for r in res["rounds"]] == [1, 1, 2, 2, 3, 3, 4, 4]
    for r in res["rounds"]:
        assert ("cudnn" in r["rows"]) == (r["condition"] == "with_cudnn")
        assert set(rounds.KERNELS) | {"sdpa_flash"} <= set(r["rows"])
        assert set(r["orders"][0]) == set(r["rows"])          # one interleaved comparison
    assert len(res["lines"]) == 8 and "SM 1601 MHz, 699 W" in res["lines"][0]


def test_the_spread_is_min_median_max_over_the_rounds():
    sp = fake_d256(3)["spread"]
    assert sp["with_cudnn"]["rounds"] == sp["without_cudnn"]["rounds"] == 3
    # cuDNN's speed over flash: flash is slowed, cuDNN is not; each round scales both alike
    # except cuDNN, so the ratio moves with r: 1.74*1.12*(1+r/1000) / (0.81*(1+r/1000))
    x = sp["with_cudnn"]["ratios"]["cudnn/sdpa_flash"]
    assert x["n"] == 3 and x["min"] == pytest.approx(1.74 * SLOW / 0.81)
    tf = sp["without_cudnn"]["tflops"]["sdpa_flash"]
    want = [5.5e11 / (1.74e-3 * (1 + r / 1000)) / 1e12 for r in (2, 3, 6)]  # monitor rounds
    assert (tf["min"], tf["median"], tf["max"]) == pytest.approx((min(want), sorted(want)[1],
                                                                  max(want)))
    assert sp["with_cudnn"]["sm_mhz"]["median"] < sp["without_cudnn"]["sm_mhz"]["min"]
    assert sp["with_cudnn"]["power_w"]["median"] == 699.0
    assert "cudnn/sdpa_flash" not in sp["without_cudnn"]["ratios"]


def test_without_cudnn_only_one_condition_runs():
    gpu = FakeGPU({k: v for k, v in MS.items() if k != "cudnn"})
    lines = []
    recs = rounds.run_rounds(gpu.runs, 1e12, rounds=2, rep=rounds.QUICK_REP, log=lines.append,
                             _timer=gpu.timer)
    assert {r["condition"] for r in recs} == {"without_cudnn"} and "left out" in lines[0]
    with pytest.raises(RuntimeError, match="SDPA flash"):
        rounds.run_rounds({"qreload": gpu.runs["qreload"]}, 1e12, rounds=1, log=lines.append,
                          _timer=gpu.timer)


def _with_d256(fake, **kw):
    return {**fake, "results": {**fake["results"], "cudnn": "torch 2.9, cuDNN",
                                "d256": {k: v for k, v in fake_d256(**kw).items()
                                         if k != "lines"}}}


def test_d256_values_follow_the_rounds(fake):
    doc = _with_d256(fake)
    g = rl.glue_values(doc)
    assert g["ch08-d256-rounds"] == "3" and g["ch08-d256-kernel"] == "qreload_oneloop@bn=64"
    med = 1.74 / 1.80
    assert g["ch08-d256-vs-flash-without"].startswith(f"{med:.2f}x (")
    # kernels and flash slowed alike: the ratio to flash is the same with cuDNN or without
    assert g["ch08-d256-flash-verdict"].startswith("the same")
    assert g["ch08-d256-slowdown"] == f"{1 / SLOW:.2f}x"
    assert g["ch08-d256-vs-cudnn"].startswith(f"{0.81 / (1.80 * SLOW):.2f}x")
    assert g["ch08-d256-clock-with"].startswith("1604 MHz (1601-1605)")  # monitor rounds 1, 4, 5
    assert g["ch08-d256-first-kernel"] == "qreload_oneloop@bn=64"   # earlier.json
    # the default tiles (2.10 ms): 1.74*1.12/(2.10*1.12) = 0.829x flash, 0.81/2.35 = 0.34x cuDNN
    # -> below the chapter 10 run's 0.83-0.88x flash (0.829x) and its 0.38-0.42x cuDNN
    assert g["ch08-d256-ch10-match"] == "none of them"


def test_d256_verdicts_can_say_otherwise(fake):
    # our kernels slowed by cuDNN more than flash is: the ratio drops beyond the spread
    g = rl.glue_values(_with_d256(fake, kernel_slow=1.25))
    assert g["ch08-d256-flash-verdict"].startswith("lower with cuDNN")
    earlier = {"chapter10_run": {"of_sdpa_flash": [0.70, 0.75], "of_cudnn": [0.30, 0.32]}}
    g = rl_report.d256_glue_values(_with_d256(fake, kernel_slow=1.25), earlier)
    assert g["ch08-d256-ch10-match"] == "qreload"      # 0.74x flash, 0.31x cuDNN
    assert g["ch08-d256-first-kernel"] == "n/a"


def test_a_record_without_the_rounds_glues_no_d256_value(fake):
    # the chapter's stored outputs stay valid until the lead's H100 run adds the step
    assert not [k for k in rl.glue_values(fake) if k.startswith("ch08-d256")]


def test_the_d256_table_figure_and_summary(fake):
    import matplotlib
    matplotlib.use("Agg")
    doc = _with_d256(fake)
    html = rl_report.d256_table(doc)._repr_html_()
    assert "cudnn" in html and "with cuDNN" in html and "3 rounds" in html
    assert "not in the record" in rl_report.d256_table(fake)._repr_html_()
    for d in (doc, fake):
        fig = plots.plot_d256_rounds(d)
        assert report.smallest_text_px(fig) >= report.MIN_TEXT_PX
    text = bench.summary(doc["results"])
    assert "d=256, 3 rounds with_cudnn" in text and "qreload/cudnn" in text


def test_earlier_json_is_the_first_record():
    import json
    import subprocess
    earlier = rl_report.load_earlier()
    first = earlier["first_record"]
    assert first["commit"] == rl_report.FIRST_RECORD_COMMIT
    try:
        old = subprocess.run(["git", "show", f"{first['commit']}:book/data/08_register_liveness/"
                              "results.json"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("the first record's commit is not in this clone's history")
    assert rl_report.earlier_from_record(json.loads(old)) == first
    assert earlier["chapter10_run"]["of_sdpa_flash"][0] < earlier["chapter10_run"]["of_sdpa_flash"][1]


def test_the_d256_step_on_fakes(monkeypatch):
    """The bench's step d256 without a GPU: the knobs of :data:`rounds.KERNELS` reach the
    launcher, a kernel that refuses is recorded as skipped, SDPA's backends come from
    ``Baselines.callables``, and the record carries the rounds and their spread."""
    gpu = FakeGPU()
    seen = []

    def launcher(q, k, v, *, causal, variant, **kw):
        seen.append((variant, kw, causal))
        if variant == "qreload" and not kw:
            raise ValueError("refused here")
        name = f"{variant}@bn={kw['bn']}" if kw else variant
        return gpu.runs[name], None

    class Base:
        def inputs(self, rng, shape, dtype):
            assert shape == (bench.B, bench.H, bench.N, 256) and dtype == "f16"
            return None, (0, 0, 0)

        def callables(self, ts, qkv, causal, refused):
            return {n: gpu.runs[n] for n in (rounds.FLASH, rounds.CUDNN)}

    class Stream:
        def synchronize(self):
            pass

    real = rounds.run_rounds
    monkeypatch.setattr(rounds, "run_rounds", lambda *a, **kw: real(
        *a, **{**kw, "monitor": gpu.monitor, "_timer": gpu.timer}))
    monkeypatch.setattr(bench.kernels, "attention_launcher", launcher)
    monkeypatch.setattr(bench, "rel_err", lambda got, want: 0.0)
    monkeypatch.setattr(bench, "cupy_to_torch", lambda out, dtype: out)
    lines = []
    res = bench.d256_step({"base": Base(), "stream": Stream()}, lines.append, quick=True)
    assert seen == [("qreload_oneloop", {"bn": 64}, False), ("qreload", {"bn": 64}, False),
                    ("qreload", {}, False)]
    assert list(res["skipped"]) == ["qreload"] and "refused here" in res["skipped"]["qreload"]
    assert len(res["rounds"]) == 2 * rounds.QUICK_ROUNDS and res["rep"] == rounds.QUICK_REP
    assert set(res["spread"]) == set(rounds.CONDITIONS)
    assert "qreload@bn=64/cudnn" in res["spread"]["with_cudnn"]["ratios"]
    assert set(res["rel_err_vs_sdpa"]) == {"qreload_oneloop@bn=64", "qreload@bn=64", "cudnn"}
    assert "skipped" in lines[0] and len(lines) == 1 + 2 * rounds.QUICK_ROUNDS
    g = rl.glue_values({"results": {"d256": res}})
    assert g["ch08-d256-default-vs-flash-with"] == "n/a"       # the default tile did not run
