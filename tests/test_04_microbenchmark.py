"""Topic 04_microbenchmark: the paper's two kernels (SASS anywhere, NumPy references on a GPU), and
the measurement machinery (process loop, ncu parsing, power, the record's tables) with fakes."""
import json
import sys
import textwrap

import numpy as np
import pytest

from fraglab import ARCHES, microbenchmark as mb, sass, toolchain

BF16_ARCHES = [a for a in ARCHES if a != "sm_75"]
KERNEL_CASES = [(a, d) for a in ARCHES for d in mb.DTYPES if not (a == "sm_75" and d == "bf16")]


def opcodes(arch, kernel, base=True):
    return sass.count_opcodes(mb.kernel_sass(arch, kernel), base=base)


def classes(arch, kernel):
    return sass.count_classes(mb.kernel_sass(arch, kernel))


# ------------------------------------------------------------------------------------------------
# The build: SASS and ptxas, on any machine
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("arch, dtype", KERNEL_CASES)
def test_in_register_kernel_never_touches_shared_memory(arch, dtype):
    b = toolchain.compile(mb.KERNELS, arch)
    k = mb.kernel_name("regs", dtype)
    cls, ops, res = classes(arch, k), opcodes(arch, k), b.resources[k]
    assert cls["shared"] == 0 and cls["barrier"] == 0 and cls["local"] == 0
    assert res["smem"] == 0 and res["barriers"] == 0
    assert ops["SHFL"] == 4                       # offsets 1 and 2, for rows g and g + 8


@pytest.mark.parametrize("arch, dtype", KERNEL_CASES)
def test_baseline_goes_through_shared_memory(arch, dtype):
    b = toolchain.compile(mb.KERNELS, arch)
    k = mb.kernel_name("smem", dtype)
    ops, res = opcodes(arch, k), b.resources[k]
    assert ops["STS"] >= 4 and ops["LDS"] == 16 and ops["BAR"] == 1 and ops["SHFL"] == 0
    assert res["smem"] == 1024 and res["barriers"] == 1   # the paper's Table 3 footprint


@pytest.mark.parametrize("arch, dtype", KERNEL_CASES)
def test_the_two_kernels_share_everything_but_the_epilogue(arch, dtype):
    s, r = (opcodes(arch, mb.kernel_name(w, dtype), base=False) for w in ("smem", "regs"))
    for op in {*s, *r}:
        if op.startswith(("HMMA", "LDG", "LD.", "MOVM")) or op == "LD":
            assert s[op] == r[op], f"{op}: {s[op]} vs {r[op]}"
    assert any(op.startswith("HMMA") for op in s)


@pytest.mark.parametrize("arch", ARCHES)
def test_no_kernel_spills_or_uses_a_stack(arch):
    b = toolchain.compile(mb.KERNELS, arch)
    for k in b.kernels:
        r = b.resources[k]
        assert r["stack_frame"] == r["spill_stores"] == r["spill_loads"] == 0, k


def test_bf16_kernels_trap_on_sm75():
    for w in mb.WAYS:
        for clock in (False, True):
            ops = opcodes("sm_75", mb.kernel_name(w, "bf16", clock))
            assert ops["BPT"] == 1 and ops["HMMA"] == 0


@pytest.mark.parametrize("arch, dtype", KERNEL_CASES)
@pytest.mark.parametrize("way", mb.WAYS)
def test_clock_reads_enclose_the_whole_epilogue(arch, dtype, way):
    r = mb.clock_bracket(arch, way, dtype)
    assert r["ok"], "\n".join(f"{i:3} {l}" for i, l in enumerate(r["listing"]))


def test_build_report_is_table_3_from_ptxas():
    r = mb.build_report("sm_90", "bf16")["ways"]
    assert r["smem"]["smem_bytes"] == 1024 and r["regs"]["smem_bytes"] == 0
    assert r["smem"]["barriers"] == 1 and r["regs"]["barriers"] == 0
    assert r["regs"]["registers"] <= r["smem"]["registers"]
    assert r["smem"]["opcodes"]["LDS"] == 16 and r["regs"]["opcodes"]["SHFL"] == 4


# ------------------------------------------------------------------------------------------------
# Inputs, reference, argument checks (no GPU needed)
# ------------------------------------------------------------------------------------------------

def test_kernel_names():
    assert mb.kernel_name("smem", "f16") == "rowmax_smem_f16"
    assert mb.kernel_name("regs", "bf16", clock=True) == "rowmax_regs_bf16_clock"
    names = set(toolchain.compile(mb.KERNELS, "sm_90").kernels)
    assert {mb.kernel_name(w, d, c) for w in mb.WAYS for d in mb.DTYPES for c in (0, 1)} == names
    with pytest.raises(ValueError, match="way"):
        mb.kernel_name("shared", "f16")
    with pytest.raises(ValueError, match="dtype"):
        mb.kernel_name("smem", "fp32")


def test_bf16_encoding_rounds_to_nearest_even():
    x = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, -2.5, np.inf, -np.inf, np.nan], np.float32)
    back = mb.from_bf16(mb.to_bf16(x))
    np.testing.assert_array_equal(back[:6], [1.0, 1.0, 1.0 + 2**-6, -2.5, np.inf, -np.inf])
    assert np.isnan(back[6])


def test_reference_is_fmax_of_the_float64_product(rng):
    for dtype in mb.DTYPES:
        a, b = mb.random_inputs(3, dtype, rng)
        af, bf = mb.decode(a, dtype), mb.decode(b, dtype)
        np.testing.assert_array_equal(mb.reference(a, b, dtype), (af @ bf).max(axis=2))


def test_reference_follows_fmaxf_for_inf_and_nan(rng):
    a = rng.standard_normal((1, 16, 16)).astype(np.float32)
    b = rng.standard_normal((1, 16, 16)).astype(np.float32)
    a[0, 3, 0], b[0, 0, :] = -np.inf, 1.0       # row 3 of C is -inf (column 7 aside)
    a[0, 5, :] = np.nan                          # row 5 of C is NaN
    b[0, 2, 7] = np.nan                          # column 7 of C is NaN: fmax ignores it
    ref = mb.reference(mb.encode(a, "f16"), mb.encode(b, "f16"), "f16")[0]
    assert ref[3] == -np.inf and np.isnan(ref[5])
    assert np.isfinite(np.delete(ref, [3, 5])).all()


def test_numpy_arrays_are_rejected_before_any_launch():
    a = np.zeros((1, 16, 16), np.float16)
    with pytest.raises(TypeError, match="cupy.asarray"):
        mb.rowmax(a, a, way="smem", dtype="f16")
    with pytest.raises(ValueError, match="way"):
        mb.launcher(a, a, way="sram", dtype="f16")
    with pytest.raises(ValueError, match="dtype"):
        mb.rowmax(a, a, dtype="tf32")


def test_fill_tiles():
    assert mb.fill_tiles(132) == 132 * 32 and mb.fill_tiles(132, 8) == 132 * 32 * 8


# ------------------------------------------------------------------------------------------------
# The paper's measurement: configuration, child output, the process loop (with a fake child)
# ------------------------------------------------------------------------------------------------

def test_variants_change_one_factor_each():
    assert mb.one_factor_problems(mb.VARIANTS) == []
    for name, ov in mb.VARIANTS.items():
        cfg = mb.variant_config(ov)
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
def test_variant_config_rejects_bad_values(bad, msg):
    with pytest.raises(ValueError, match=msg):
        mb.variant_config(bad)


def test_parse_child_output():
    rec = {"first": {"smem": 0.1, "regs": 0.02}}
    out = "noise\n" + mb.CHILD_MARKER + json.dumps({"first": {}}) + "\n" + \
        mb.CHILD_MARKER + json.dumps(rec) + "\n"
    assert mb.parse_child_output(out) == rec                  # the last result line counts
    with pytest.raises(mb.ChildError, match="last output:\nTraceback"):
        mb.parse_child_output("Traceback (most recent call last):\n  boom")
    with pytest.raises(mb.ChildError, match="not JSON"):
        mb.parse_child_output(mb.CHILD_MARKER + "{oops")
    with pytest.raises(mb.ChildError, match="no 'first'"):
        mb.parse_child_output(mb.CHILD_MARKER + "[1, 2]")


def test_child_env_and_command():
    cfg = mb.variant_config({"module_loading": "EAGER"})
    env = mb.child_env(cfg)
    assert env["CUDA_MODULE_LOADING"] == "EAGER"
    assert str(toolchain.REPO_ROOT) in env["PYTHONPATH"].split(":")
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
    return [sys.executable, "-c", FAKE_CHILD, json.dumps(mb._jsonable_config(config))]


def test_process_loop_with_a_fake_child():
    logs = []
    res = mb.run_processes(mb.VARIANTS, 3, cubin="unused", discard_rounds=1, log=logs.append,
                           _command=fake_command)
    assert res["rounds"] == 4 and not res["stopped_by_budget"]
    v = res["variants"]
    for name in mb.VARIANTS:
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
    # the order of the variants rotates from round to round
    assert [r["round"] for r in v["paper"]["records"]] == [1, 2, 3]
    assert any("round 4/4" in line for line in logs)


def test_process_loop_records_failures_and_respects_its_budget():
    variants = {"paper": {}, "broken": {"warmup": True}}

    def command(config, cubin, later):
        cfg = mb._jsonable_config(config)
        cfg["fail"] = config["warmup"]
        return [sys.executable, "-c", FAKE_CHILD, json.dumps(cfg)]
    res = mb.run_processes(variants, 50, cubin="unused", discard_rounds=0, budget_s=0.0,
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
    assert "not found" in mb.run_ncu("x.cubin", ncu="") ["error"] or mb.find_ncu()


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


def test_unknown_variant_is_rejected_before_anything_runs():
    with pytest.raises(SystemExit, match="unknown variant"):
        mb.main(["paper", "--variants", "paper,nope"])


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
    res = mb.run_processes(mb.VARIANTS, 2, cubin="unused", discard_rounds=0, log=lambda m: None,
                           _command=fake_command)
    warm = []
    for label, tiles, base in (("one block", 1, 0.0030), ("8 full waves", 33792, 0.025)):
        for first in mb.WAYS:
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
           "power_relaunch": {w: dict(power) for w in mb.WAYS},
           "power_sustained": {f"{w}, {g}": dict(power) for w in mb.WAYS
                               for g in ("one block", "8 full waves")},
           "clocks_after": {"sm_mhz": 1980}}
    return json.loads(json.dumps(mb._compact(doc)))


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


# ------------------------------------------------------------------------------------------------
# On a GPU
# ------------------------------------------------------------------------------------------------

def _run(dtype, n, rng, way, clock=False):
    import cupy as cp
    a, b = mb.random_inputs(n, dtype, rng)
    if clock:
        rows, cycles = mb.rowmax_cycles(cp.asarray(a), cp.asarray(b), way=way, dtype=dtype)
        return a, b, rows.get(), cycles.get()
    return a, b, mb.rowmax(cp.asarray(a), cp.asarray(b), way=way, dtype=dtype).get(), None


def _skip_without(dtype):
    if dtype == "bf16":
        from fraglab import device
        ok, why = device.supports("bf16")
        if not ok:
            pytest.skip(why)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", mb.DTYPES)
@pytest.mark.parametrize("n", [1, 7, 1009])
@pytest.mark.parametrize("way", mb.WAYS)
@pytest.mark.parametrize("clock", [False, True], ids=["plain", "clock"])
def test_kernels_match_numpy(dtype, n, way, clock, rng):
    _skip_without(dtype)
    a, b, got, cycles = _run(dtype, n, rng, way, clock)
    assert not np.isnan(got).any(), "rows left unwritten (still NaN)"
    err = np.abs(got.astype(np.float64) - mb.reference(a, b, dtype))
    assert (err <= mb.tolerance(a, b, dtype)).all(), err.max()
    if clock:
        assert (cycles > 0).all() and (cycles < 10**7).all()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", mb.DTYPES)
@pytest.mark.parametrize("way", mb.WAYS)
def test_minus_inf_and_nan_rows_follow_fmaxf(way, dtype, rng):
    """A row holding -inf gives -inf; a row of NaN gives NaN; a NaN column is ignored (fmaxf)."""
    import cupy as cp
    _skip_without(dtype)
    a = rng.standard_normal((2, 16, 16)).astype(np.float32)
    b = rng.standard_normal((2, 16, 16)).astype(np.float32)
    a[0, 3, 0], b[0, 0, :] = -np.inf, 1.0
    a[0, 5, :] = np.nan
    b[1, 2, 7] = np.nan
    ah, bh = mb.encode(a, dtype), mb.encode(b, dtype)
    got = mb.rowmax(cp.asarray(ah), cp.asarray(bh), way=way, dtype=dtype).get()
    ref = mb.reference(ah, bh, dtype)
    assert got[0, 3] == -np.inf and np.isnan(got[0, 5])
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4, equal_nan=True)


@pytest.mark.gpu
@pytest.mark.parametrize("way", mb.WAYS)
def test_extra_blocks_write_nothing(way, rng):
    """The kernels guard blockIdx.x < n_tiles: a grid larger than n_tiles leaves the rest alone."""
    import cupy as cp
    from fraglab import launch
    a, b = mb.random_inputs(5, "f16", rng)
    rows = launch.poisoned((5, 16), np.float32)
    fn = launch.get_kernel(mb.KERNELS, mb.kernel_name(way, "f16"))
    launch.launch(fn, 5, 32, (cp.asarray(a), cp.asarray(b), rows, np.int32(3)), sync=True)
    got = rows.get()
    assert np.isnan(got[3:]).all() and not np.isnan(got[:3]).any()


@pytest.mark.gpu
@pytest.mark.parametrize("bad, exc, msg", [
    (lambda cp: (cp.zeros((2, 16, 16), cp.float32),) * 2, TypeError, "float16"),
    (lambda cp: (cp.zeros((2, 16, 8), cp.float16),) * 2, ValueError, "shape"),
    (lambda cp: (cp.zeros((2, 16, 16), cp.float16), cp.zeros((3, 16, 16), cp.float16)),
     ValueError, "same number of tiles"),
    (lambda cp: (cp.zeros((0, 16, 16), cp.float16),) * 2, ValueError, "number of tiles"),
    (lambda cp: (cp.zeros((2, 16, 32), cp.float16)[:, :, ::2],) * 2, ValueError, "contiguous"),
])
def test_rowmax_rejects_bad_arguments(bad, exc, msg):
    import cupy as cp
    a, b = bad(cp)
    with pytest.raises(exc, match=msg):
        mb.rowmax(a, b, way="regs", dtype="f16")


@pytest.mark.gpu
def test_bf16_tiles_travel_as_uint16():
    import cupy as cp
    x = cp.zeros((1, 16, 16), cp.float16)
    with pytest.raises(TypeError, match="uint16 bit patterns"):
        mb.rowmax(x, x, dtype="bf16")


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


# ------------------------------------------------------------------------------------------------
# The lab's checks
# ------------------------------------------------------------------------------------------------

def _sound_warm(go):
    from fraglab import bench
    out = {}
    for first in ("smem", "regs"):
        order = [first] + [w for w in ("smem", "regs") if w != first]
        cmp = bench.compare({w: go[w] for w in order}, baseline="smem", warmup=20, repeat=1000)
        out[f"{first} first"] = {w: {"median_us": cmp.timings[w].median_ms * 1e3,
                                     "p10_us": cmp.timings[w].p10_ms * 1e3,
                                     "p90_us": cmp.timings[w].p90_ms * 1e3} for w in mb.WAYS}
        out[f"{first} first"]["speedup"] = cmp.ratios()["regs"]
    return out


def test_a_sound_warm_plan_passes_with_the_stand_in_timer():
    go = {w: (lambda: None) for w in mb.WAYS}
    with mb.recorded_compares(stand_in=True) as rec:
        summary = _sound_warm(go)
    assert [c["order"][0] for c in rec.calls] == ["smem", "regs"]
    assert mb.warm_plan_problems(rec.calls, summary) == []
    assert 1.0 < summary["smem first"]["speedup"] < 1.15          # the stand-in's made-up gap


def test_unsound_warm_plans_are_named():
    from fraglab import bench
    go = {w: (lambda: None) for w in mb.WAYS}
    with mb.recorded_compares(stand_in=True) as rec:
        cmp = bench.compare(go, warmup=0, repeat=100)
    problems = "\n".join(mb.warm_plan_problems(rec.calls, {}))
    assert "two calls" in problems
    with mb.recorded_compares(stand_in=True) as rec:
        a = bench.compare(go, warmup=0, repeat=100)
        b = bench.compare(go, warmup=5, repeat=2000)
    problems = "\n".join(mb.warm_plan_problems(rec.calls, {"smem first": {}}))
    assert "'regs' first" in problems and "no warm-up" in problems and "at least 1000" in problems
    assert "no 'regs first' entry" in problems and "median and spread" in problems
    summary = {"smem first": {w: {"median_us": b.timings[w].median_ms * 1e3,
                                  "p10_us": b.timings[w].p10_ms * 1e3} for w in mb.WAYS}}
    problems = "\n".join(mb.warm_plan_problems(rec.calls, summary))
    assert "lacks 'p90_us'" in problems and "'speedup'" in problems
    assert bench.compare is not None and rec.calls[0]["result"] is a and cmp.baseline == "smem"


def test_bracket_on_listings():
    ok = ["HMMA.16816.F32 R4, R8, R12, RZ", "@P0 CS2R R2, SR_CLOCKLO", "SHFL.BFLY PT, R3, R4, 0x1, 0x1f",
          "FMNMX R4, R4, R3, !PT", "@P0 CS2R R6, SR_CLOCKLO"]
    assert mb.bracket(ok)["ok"]
    early = [ok[0], ok[2], ok[1], ok[3], ok[4]]
    assert "comes before the first clock read" in mb.bracket(early)["problems"][0]
    assert "3 reads of the clock" in mb.bracket(ok + [ok[1]])["problems"][0]
    assert "before the last HMMA" in mb.bracket([ok[1], ok[0], *ok[2:]])["problems"][0]


CLOCKED_SRC = textwrap.dedent(r'''
    #include <mma.h>
    #include <cuda_fp16.h>
    #include "common.cuh"
    using namespace nvcuda;
    __device__ __forceinline__ long long clock_after(unsigned dep)
    { long long t = -1; if (dep != 0xFFFFFFFFu) t = clock64(); return t; }
    extern "C" __global__ void k(const __half* a, const __half* b, float* rows, long long* cycles,
                                 int n_tiles, unsigned zero)
    {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fb;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
        wmma::load_matrix_sync(fa, a, 16); wmma::load_matrix_sync(fb, b, 16);
        wmma::fill_fragment(c, 0.0f); wmma::mma_sync(c, fa, fb, c);
        TIMED
        if (lane_id() == 0) cycles[0] = t1 - t0;
    }''')
REDUCE = ("float v = fmaxf(fmaxf(c.x[0], c.x[1]), fmaxf(c.x[4], c.x[5])); "
          "v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, 1)); if (lane_id() == 0) rows[0] = v;")


def test_clock_source_problems_wants_waiting_clock_reads():
    good = CLOCKED_SRC.replace("TIMED", "unsigned d = __float_as_uint(c.x[0]) & zero; "
                               "long long t0 = clock_after(d); c.x[0] = __uint_as_float("
                               "__float_as_uint(c.x[0]) ^ ((unsigned)t0 & zero)); " + REDUCE +
                               " long long t1 = clock_after(__float_as_uint(v) & zero);")
    assert mb.clock_source_problems(good, "k", arches=("sm_90",)) == {"sm_90": []}
    naive = CLOCKED_SRC.replace("TIMED", "long long t0 = clock64(); " + REDUCE +
                                " long long t1 = clock64();")
    probs = mb.clock_source_problems(naive, "k", arches=("sm_90",))["sm_90"]
    assert probs and all("does not wait" in p for p in probs)
    assert "no kernel named" in mb.clock_source_problems(good, "kk", arches=("sm_90",))["sm_90"][0]


def test_conclusion_follows_the_record():
    text = "\n".join(mb.conclusion(synthetic_record()))
    assert "4.52x faster" in text and "is not reproduced" in text
    assert "one untimed launch of each kernel first" in text      # the fake child's warm-up fixes it
    assert "turns to 0.23x" in text and "fewer cycles" in text
    assert mb.conclusion({}) == ["The record lacks the fresh-process or the warm measurements: "
                                 "no conclusion."]


@pytest.mark.gpu
def test_lab_clock_kernel_runs(rng):
    src = CLOCKED_SRC.replace("TIMED", "unsigned d = __float_as_uint(c.x[0]) & zero; "
                              "long long t0 = clock_after(d); " + REDUCE +
                              " long long t1 = clock_after(__float_as_uint(v) & zero);")
    r = mb.cycles_of_source(src, "k", launches=3, rng=rng)
    assert len(r["cycles"]) == 3 and all(c > 0 for c in r["cycles"])


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
    monkeypatch.setattr(mb, "device_info_in_child", lambda: info)
    monkeypatch.setattr(mb, "child_command", fake_command)
    monkeypatch.setattr(mb, "PowerSampler", FakeSampler)
    monkeypatch.setattr(mb, "POWER_S", {"quick": (0.3, 0.05, 0.0), "full": (0.3, 0.05, 0.0)})
    monkeypatch.setattr(mb, "run_ncu", lambda cubin, dtype, tiles: mb.interpret_ncu(NCU_OUT))
    monkeypatch.setattr(mb, "check_correctness", lambda d, tiles, rng: [
        {"dtype": d, "tiles": n, "way": w, "clock": False, "ok": True} for n in tiles for w in mb.WAYS])

    def warm(n, dtype, *, first, repeat, flush_l2, rng, rounds):
        go = {w: (lambda: None) for w in ([first] + [x for x in mb.WAYS if x != first])}
        with mb.recorded_compares(stand_in=True):
            return bench.compare(go, baseline="smem", repeat=repeat, rounds=rounds)
    monkeypatch.setattr(mb, "warm_compare", warm)
    monkeypatch.setattr(mb, "epilogue_cycles", lambda n, dtype, launches, warmup, rng: {
        w: {"cycles": list(range(100 + 50 * (w == "smem"), 100 + 50 * (w == "smem") + 10 * n)),
            "first": [500]} for w in mb.WAYS})
    monkeypatch.setattr(mb, "launcher", lambda a, b, way, dtype: ((lambda: None), None, None))
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
