"""Topic 04_microbenchmark, the measurement machinery: the setups, the fresh-process loop (with a
fake child), ncu parsing, power, the command line, the record's tables, findings and plots, and
``all`` end to end with every GPU part replaced by a fake."""
import json
import sys
import textwrap

import numpy as np
import pytest

from fraglab import child, microbenchmark as mb, tools
from fraglab.microbenchmark import (power as mb_power, processes as mb_processes, run as mb_run,
                                    setups as mb_setups)


# ------------------------------------------------------------------------------------------------
# The paper's measurement: configuration, child output, the process loop (with a fake child)
# ------------------------------------------------------------------------------------------------

def test_setups_change_one_factor_each():
    assert mb.one_factor_problems(mb.SETUPS) == []
    for name, ov in mb.SETUPS.items():
        cfg = mb.setup_config(ov)
        assert sum(cfg[k] != mb.PAPER_CONFIG[k] for k in cfg) == (0 if name == "paper" else 1)


def test_a_confounded_plan_is_flagged():
    plan = {"paper": {}, "both": {"order": ("regs", "smem"), "warmup": True},
            "preload": {"preload": True}}
    problems = "\n".join(mb.one_factor_problems(plan))
    assert "both: changes 2 factors" in problems
    assert "'module_loading'" in problems and "'preload'" not in problems
    assert mb.one_factor_problems({"x": {}})[0].startswith("the plan needs a 'paper'")
    assert "unknown factor" in "\n".join(mb.one_factor_problems({"paper": {}, "y": {"clocks": 1}}))


@pytest.mark.parametrize("bad, msg", [({"order": ("smem", "smem")}, "order"),
                                      ({"module_loading": "lazy"}, "LAZY or EAGER"),
                                      ({"tiles": 0}, "tiles"), ({"dtype": "f32"}, "dtype")])
def test_setup_config_rejects_bad_values(bad, msg):
    with pytest.raises(ValueError, match=msg):
        mb.setup_config(bad)


def test_parse_child_output():
    rec = {"first": {"smem": 0.1, "regs": 0.02}}
    out = "noise\n" + mb.CHILD_MARKER + json.dumps({"first": {}}) + "\n" + \
        mb.CHILD_MARKER + json.dumps(rec) + "\n"
    assert mb.parse_child_output(out) == rec                  # the last result line counts
    with pytest.raises(mb.ChildError, match="last output:\nTraceback"):
        mb.parse_child_output("Traceback (most recent call last):\n  boom")
    with pytest.raises(mb.ChildError, match="not JSON"):
        mb.parse_child_output(mb.CHILD_MARKER + "{oops")
    with pytest.raises(mb.ChildError, match="not a JSON object"):
        mb.parse_child_output(mb.CHILD_MARKER + "[1, 2]")
    with pytest.raises(mb.ChildError, match="no 'first'"):
        mb.parse_child_output(mb.CHILD_MARKER + json.dumps({"device": {}}))


def test_child_env_and_command():
    cfg = mb.setup_config({"module_loading": "EAGER"})
    env = child.env(CUDA_MODULE_LOADING=cfg["module_loading"])    # what run_child passes
    assert env["CUDA_MODULE_LOADING"] == "EAGER"
    assert str(tools.REPO_ROOT) in env["PYTHONPATH"].split(":")
    cmd = mb.child_command(cfg, "/tmp/x.cubin", later=2)
    assert cmd[1:4] == ["-m", "fraglab.microbenchmark", "_child"]
    assert json.loads(cmd[cmd.index("--config") + 1])["order"] == ["smem", "regs"]


# A fake child: prints what a real one prints. The first launch of the process costs 100 us,
# a kernel's own first launch 20 us, a warm launch 3 us (+1 us for the baseline); EAGER takes
# 15 us off the first-launch costs, preload all of the loading, warmup everything.
FAKE_CHILD = textwrap.dedent("""
    import json, os, sys
    cfg = json.loads(sys.argv[1])
    if cfg.get("fail"):
        print("Traceback: CUDA_ERROR_NO_DEVICE"); sys.exit(3)
    warm = {"smem": 0.004, "regs": 0.003}
    first = {}
    for i, w in enumerate(cfg["order"]):
        extra = 0.0 if cfg["warmup"] else (0.1 if i == 0 else 0.02)
        if cfg["preload"]:
            extra = min(extra, 0.005)
        if os.environ["CUDA_MODULE_LOADING"] == "EAGER":
            extra = max(0.0, extra - 0.015)
        first[w] = warm[w] + extra
    rec = {"first": first, "host_us": {"load": {w: 30.0 for w in first},
                                       "launch": {w: 5.0 for w in first},
                                       "later_launch": {w: [4.0, 4.0] for w in first}},
           "later": {w: [warm[w] + 0.004] * 2 for w in first}, "loading_mode":
           os.environ["CUDA_MODULE_LOADING"], "order": cfg["order"]}
    print("some output first")
    print("FRAGLAB_CHILD " + json.dumps(rec))
""")


def fake_command(config, cubin, later):
    return [sys.executable, "-c", FAKE_CHILD, json.dumps(mb_setups.jsonable_config(config))]


def test_process_loop_with_a_fake_child():
    logs = []
    res = mb.run_processes(mb.SETUPS, 3, cubin="unused", discard_rounds=1, log=logs.append,
                           _command=fake_command)
    assert res["rounds"] == 4 and not res["stopped_by_budget"]
    v = res["variants"]
    for name in mb.SETUPS:
        assert len(v[name]["records"]) == 3 and len(v[name]["discarded"]) == 1
        assert not v[name]["failures"]
    s = v["paper"]["summary"]
    assert s["first_ms"]["smem"]["mean"] == pytest.approx(0.104)
    assert s["first_ms"]["regs"]["mean"] == pytest.approx(0.023)
    assert s["speedup_of_means"] == pytest.approx(0.104 / 0.023)
    assert s["later_speedup_of_medians"] == pytest.approx(0.008 / 0.007)
    assert s["loading_mode_reported"] == ["LAZY"]
    assert s["host_us"]["load"]["smem"]["mean"] == 30.0
    assert s["host_us"]["later_launch"]["regs"]["n"] == 6
    assert v["regs_first"]["summary"]["speedup_of_means"] == pytest.approx(0.024 / 0.103)
    assert v["warmup"]["summary"]["speedup_of_means"] == pytest.approx(4 / 3)
    assert v["eager"]["summary"]["loading_mode_reported"] == ["EAGER"]
    # the order of the setups rotates from round to round
    assert [r["round"] for r in v["paper"]["records"]] == [1, 2, 3]
    assert any("round 4/4" in line for line in logs)


def test_process_loop_records_failures_and_respects_its_budget():
    setups = {"paper": {}, "broken": {"warmup": True}}

    def command(config, cubin, later):
        cfg = mb_setups.jsonable_config(config)
        cfg["fail"] = config["warmup"]
        return [sys.executable, "-c", FAKE_CHILD, json.dumps(cfg)]
    res = mb.run_processes(setups, 50, cubin="unused", discard_rounds=0, budget_s=0.0,
                           min_rounds=2, log=lambda m: None, _command=command)
    assert res["stopped_by_budget"] and res["rounds"] == 2
    assert len(res["variants"]["paper"]["records"]) == 2
    broken = res["variants"]["broken"]
    assert broken["records"] == [] and len(broken["failures"]) == 2
    assert "status 3" in broken["failures"][0]["error"] and "NO_DEVICE" in broken["failures"][0]["error"]
    assert broken["summary"] == {"n": 0}


def test_process_loop_stops_when_every_first_child_fails():
    def command(config, cubin, later):
        return [sys.executable, "-c", "import sys; sys.exit(1)"]
    with pytest.raises(mb.ChildError, match="every child of the first round failed"):
        mb.run_processes({"paper": {}}, 2, cubin="unused", log=lambda m: None, _command=command)
    with pytest.raises(ValueError, match="processes"):
        mb.run_processes({"paper": {}}, 0, cubin="unused", _command=command)


# ------------------------------------------------------------------------------------------------
# ncu, power, the command line
# ------------------------------------------------------------------------------------------------

NCU_OUT = textwrap.dedent('''\
    ==PROF== Connected to process 4242 (/usr/bin/python3.12)
    ==PROF== Profiling "rowmax_smem_bf16": 0%....50%....100% - 3 passes
    "ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
    "0","4242","python3.12","127.0.0.1","rowmax_smem_bf16","1","7","(32, 1, 1)","(2048, 1, 1)","0","9.0","Command line profiler metrics","sm__warps_active.avg.pct_of_peak_sustained_active","%","21.5"
    "0","4242","python3.12","127.0.0.1","rowmax_smem_bf16","1","7","(32, 1, 1)","(2048, 1, 1)","0","9.0","Command line profiler metrics","launch__grid_size","","2,048"
    "0","4242","python3.12","127.0.0.1","rowmax_smem_bf16","1","7","(32, 1, 1)","(2048, 1, 1)","0","9.0","Command line profiler metrics","launch__occupancy_limit_blocks","block","32"
    "1","4242","python3.12","127.0.0.1","rowmax_regs_bf16","1","7","(32, 1, 1)","(2048, 1, 1)","0","9.0","Command line profiler metrics","sm__warps_active.avg.pct_of_peak_sustained_active","%","22.25"
    "1","4242","python3.12","127.0.0.1","rowmax_regs_bf16","1","7","(32, 1, 1)","(2048, 1, 1)","0","9.0","Command line profiler metrics","launch__grid_size","","2,048"
    ==PROF== Disconnected from process 4242
''')


def test_parse_ncu_csv():
    k = mb.parse_ncu_csv(NCU_OUT)
    assert [x["kernel"] for x in k] == ["rowmax_smem_bf16", "rowmax_regs_bf16"]
    assert k[0]["metrics"][mb.ACHIEVED] == 21.5 and k[0]["metrics"]["launch__grid_size"] == 2048
    rows = mb.occupancy_table({"kernels": k})
    assert rows[1] == {**rows[1], "tiles": 2048, "achieved_pct": 22.25}
    assert rows[0]["limit_blocks"] == 32
    assert mb.parse_ncu_csv("==PROF== nothing here") == []


def test_ncu_permission_problem_is_reported_clearly():
    msg = "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters"
    r = mb.interpret_ncu("", msg, 1)
    assert not r["ok"] and "ERR_NVGPUCTRPERM" in r["error"] and "not measured" in r["error"]
    assert mb.interpret_ncu(NCU_OUT)["ok"]
    assert "no kernel metrics" in mb.interpret_ncu("==ERROR== unknown metric", "", 1)["error"]
    if tools.find_tool("ncu", required=False) is None:
        assert "not found" in mb.run_ncu("x.cubin")["error"]


def test_ncu_command_filters_our_kernels():
    cmd = mb.ncu_command("/usr/local/cuda/bin/ncu", "k.cubin", "bf16", (2048, 4224))
    assert cmd[cmd.index("-k") + 1] == "regex:^rowmax_(smem|regs)_bf16$"
    assert mb.ACHIEVED in cmd[cmd.index("--metrics") + 1].split(",")
    assert cmd[-1] == "2048,4224" and "_ncu_driver" in cmd


def test_power_sampler_without_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(RuntimeError, match="nvidia-ml-py"):
        with mb.PowerSampler():
            pass


@pytest.mark.parametrize("argv", [["bogus"], ["paper", "--processes", "0"],
                                  ["paper", "--processes", "x"], ["all", "--processes", "-1"]])
def test_command_line_rejects_bad_arguments(argv, capsys):
    with pytest.raises(SystemExit) as e:
        mb.main(argv)
    assert e.value.code == 2


def test_unknown_setup_is_rejected_before_anything_runs():
    with pytest.raises(SystemExit, match="unknown setup"):
        mb.main(["paper", "--setups", "paper,nope"])


def test_table3_command_runs_without_gpu(tmp_path, capsys):
    assert mb.main(["table3", "--arch", "sm_90", "--out", str(tmp_path)]) == 0
    assert "1024 B shared" in capsys.readouterr().out
    assert json.loads((tmp_path / "table3.json").read_text())["ways"]["regs"]["barriers"] == 0


# ------------------------------------------------------------------------------------------------
# The record: tables, findings and plots from a synthetic record
# ------------------------------------------------------------------------------------------------

def synthetic_record():
    from fraglab.bench import Comparison, Timing
    rng = np.random.default_rng(0)
    res = mb.run_processes(mb.SETUPS, 2, cubin="unused", discard_rounds=0, log=lambda m: None,
                           _command=fake_command)
    warm = []
    for label, tiles, base in (("one block", 1, 0.0030), ("8 full waves", 33792, 0.025)):
        for first in mb.VARIANTS:
            t = {"smem": Timing("smem", base * (1.30 + 0.01 * rng.random(50))),
                 "regs": Timing("regs", base * (1.0 + 0.01 * rng.random(50)))}
            warm.append({"label": label, "tiles": tiles, "dtype": "bf16", "first": first,
                         "comparison": Comparison(t, "smem").to_dict()})
    power = {"t_s": [0.0, 0.05], "power_w": [70.0, 72.0], "mean_w_energy": 71.0}
    doc = {"paper_way": res, "warm": warm, "build": {"sm_90": mb.build_report("sm_90")},
           "device_before": {"compute_capability": "9.0", "clocks": {"sm_max_mhz": 1980}},
           "cycles": {"one block": {"tiles": 1, "smem": {"cycles": [180, 190, 200], "first": [900]},
                                    "regs": {"cycles": [70, 72, 75], "first": [400]}}},
           "ncu": {"ok": True, "kernels": mb.parse_ncu_csv(NCU_OUT)},
           "power_relaunch": {w: dict(power) for w in mb.VARIANTS},
           "power_sustained": {f"{w}, {g}": dict(power) for w in mb.VARIANTS
                               for g in ("one block", "8 full waves")},
           "clocks_after": {"sm_mhz": 1980}}
    return json.loads(json.dumps(mb.record.compact(doc)))


def test_reproduce_table_and_findings_from_a_record():
    doc = synthetic_record()
    rows = {r["claim"]: r for r in mb.reproduce_table(doc)}
    sp = rows["Table 2: speedup (x)"]
    assert sp["paper_way"] == pytest.approx(0.104 / 0.023)
    assert sp["verdict_paper_way"] == "not reproduced"          # 4.5x is not within 25 % of 6.1x
    assert sp["sound"] == pytest.approx(1.30, abs=0.02) and sp["verdict_sound"] == "not reproduced"
    assert rows["Table 3: shared memory (bytes), in-register"]["verdict_sound"] == "same"
    assert rows["Table 3: achieved occupancy (%), baseline (shared memory)"]["sound"] == 21.5
    assert rows["Table 3: achieved occupancy (%), baseline (shared memory)"]["verdict_sound"] == \
        "reproduced"
    e = rows["Table 5: energy per operation (mJ), baseline (shared memory)"]
    assert e["paper_way"] == pytest.approx(71.0 * 0.104)
    text = mb.format_table(mb.reproduce_table(doc))
    assert text.splitlines()[0].startswith("claim") and "Table 4: power (W)" in text
    found = "\n".join(mb.findings(doc))
    assert "4.52x" in found and "in-register kernel launched first" in found
    assert "cycles saved per warp" in found and "1.29" in found


def test_plots_draw_from_a_record():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    doc = synthetic_record()
    for f in (mb.plot_time_distributions, mb.plot_speedups, mb.plot_cycles, mb.plot_power):
        f(doc)
    plt.close("all")


@pytest.mark.gpu
def test_a_real_fresh_process_measures_both_kernels(tmp_path):
    from fraglab import device
    cubin = mb.write_cubin(device.arch(), tmp_path)
    cfg = {"dtype": "f16"} if not device.supports("bf16")[0] else {}
    res = mb.run_processes({"paper": cfg}, 1, cubin=cubin, discard_rounds=0, later=1,
                           log=lambda m: None)
    rec = res["variants"]["paper"]["records"][0]
    assert set(rec["first"]) == {"smem", "regs"} and all(v > 0 for v in rec["first"].values())
    assert rec["loading_mode"] in ("LAZY", "EAGER", None)


@pytest.mark.gpu
def test_power_sampler_reads_nvml_when_present():
    pytest.importorskip("pynvml")
    import time
    with mb.PowerSampler(period_s=0.01) as s:
        time.sleep(0.15)
    r = s.result()
    assert r["power_w"] and all(p > 0 for p in r["power_w"])


def test_conclusion_follows_the_record():
    text = "\n".join(mb.conclusion(synthetic_record()))
    assert "4.52x faster" in text and "is not reproduced" in text
    assert "one untimed launch of each kernel first" in text      # the fake child's warm-up fixes it
    assert "turns to 0.23x" in text and "fewer cycles" in text
    assert mb.conclusion({}) == ["The record lacks the fresh-process or the warm measurements: "
                                 "no conclusion."]


# ------------------------------------------------------------------------------------------------
# `all`, end to end, with every GPU part replaced by a fake (catches plumbing errors on any machine)
# ------------------------------------------------------------------------------------------------

class FakeSampler:
    def __init__(self, *a, **k):
        self.t0 = 0.0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def result(self):
        return {"seconds": 0.1, "t_s": [0.0, 0.05], "power_w": [80.0, 82.0], "source": "fake",
                "period_s": 0.05, "mean_w_samples": 81.0, "mean_w_energy": 81.5, "energy_j": 8.15}


def test_run_all_end_to_end_with_fakes(tmp_path, monkeypatch, capsys):
    import types
    from fraglab import bench
    info = {"name": "Fake H100", "compute_capability": "9.0", "sm_count": 4, "driver_version": "0",
            "cuda_runtime": "13.0", "nvrtc_version": "13.0", "cupy_version": "0",
            "pci_bus_id": "0", "clocks": {"sm_max_mhz": 1980}}
    fake_cp = types.SimpleNamespace(asarray=lambda x: x, cuda=types.SimpleNamespace(
        runtime=types.SimpleNamespace(deviceSynchronize=lambda: None),
        get_current_stream=lambda: types.SimpleNamespace(synchronize=lambda: None)))
    for arch in ("sm_90", "sm_120"):       # compile (NVRTC, through CuPy) before CuPy is faked
        mb.build_report(arch)
    monkeypatch.setitem(sys.modules, "cupy", fake_cp)
    monkeypatch.setattr(mb_run, "device_info_in_child", lambda: info)
    monkeypatch.setattr(mb_processes, "child_command", fake_command)
    monkeypatch.setattr(mb_power, "PowerSampler", FakeSampler)
    monkeypatch.setattr(mb_run, "POWER_S", {"quick": (0.3, 0.05, 0.0), "full": (0.3, 0.05, 0.0)})
    monkeypatch.setattr(mb_run, "run_ncu", lambda cubin, dtype, tiles: mb.interpret_ncu(NCU_OUT))
    monkeypatch.setattr(mb_run, "check_correctness", lambda d, tiles, rng: [
        {"dtype": d, "tiles": n, "way": w, "clock": False, "ok": True} for n in tiles for w in mb.VARIANTS])

    def warm(n, dtype, *, first, repeat, flush_l2, rng, rounds):
        go = {w: (lambda: None) for w in ([first] + [x for x in mb.VARIANTS if x != first])}
        with mb.recorded_compares(stand_in=True):
            return bench.compare(go, baseline="smem", repeat=repeat, rounds=rounds)
    monkeypatch.setattr(mb_run, "warm_compare", warm)
    monkeypatch.setattr(mb_run, "epilogue_cycles", lambda n, dtype, launches, warmup, rng: {
        w: {"cycles": list(range(100 + 50 * (w == "smem"), 100 + 50 * (w == "smem") + 10 * n)),
            "first": [500]} for w in mb.VARIANTS})
    monkeypatch.setattr(mb_run, "launcher", lambda a, b, variant, dtype: ((lambda: None), None, None))
    monkeypatch.setattr(bench, "clock_check", lambda: {"sm_mhz": 1980})
    monkeypatch.setattr(bench, "device_info", lambda: info)
    doc = mb.run_all(tmp_path, quick=True)
    out = capsys.readouterr().out
    assert "Table 2: speedup (x)" in out and "done in" in out
    saved = mb.load(tmp_path / "results.json")
    assert saved["device"]["name"] == "Fake H100" and (tmp_path / "run.log").read_text() == out
    assert saved["paper_way"]["variants"]["paper"]["summary"]["n"] == 3
    assert saved["power_relaunch"]["smem"]["processes"] >= 1
    assert set(saved["power_sustained"]) == {"idle", "smem, one block", "regs, one block",
                                             "smem, 8 full waves", "regs, 8 full waves"}
    assert saved["cycles"]["8 full waves"]["smem"]["stats"]["n"] == 10 * 4 * 32 * 8
    assert len(saved["warm"]) == (5 + 2) * 2 and doc["reproduce"] == saved["reproduce"]
    assert any("cycles saved per warp" in f for f in saved["findings"])
