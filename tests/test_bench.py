"""Tests for fraglab.bench.

The CPU tests drive the statistics, the scheduling of ``compare`` and the JSON/progress
plumbing through a fake timer (the private ``_timer=`` hook), so they run without a GPU.
The ``gpu`` tests time real CuPy kernels and are skipped where CuPy sees no GPU.
"""
import io
import json
import warnings

import numpy as np
import pytest

from fraglab import bench, device
from fraglab.bench import Comparison, Timing
from fraglab.progress import Progress


def _cupy_sees_gpu() -> bool:
    """Whether CuPy itself sees a GPU (what bench checks, whatever FRAGLAB_MODE says)."""
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


_HAS_GPU = _cupy_sees_gpu()
needs_gpu = pytest.mark.gpu  # skipped, with the reason, by conftest.py where there is no GPU

FAKE_DEVICE = {"name": "Fake GPU", "compute_capability": "0.0"}


class FakeTimer:
    """Stands in for the CUDA-event timer: each callable returns a fixed time in ms.

    ``fn()`` is called once per sample, so each variant's callable can record the order.
    """

    def __init__(self, ms_of=None):
        self.ms_of = ms_of or {}
        self.calls = []  # (fn, n) per timer call

    def __call__(self, fn, n, flush_l2):
        self.calls.append((fn, n))
        out = []
        for _ in range(n):
            fn()
            out.append(self.ms_of.get(fn, 1.0))
        return out


# --------------------------------------------------------------------------- statistics
def test_timing_statistics_match_numpy():
    rng = np.random.default_rng(0)
    x = rng.gamma(4.0, 0.01, size=257)
    t = Timing("x", x)
    assert t.n == 257
    assert t.median_ms == pytest.approx(np.median(x))
    assert t.p10_ms == pytest.approx(np.percentile(x, 10))
    assert t.p90_ms == pytest.approx(np.percentile(x, 90))
    assert t.iqr_ms == pytest.approx(np.percentile(x, 75) - np.percentile(x, 25))
    assert t.min_ms == pytest.approx(x.min())
    assert t.mean_ms == pytest.approx(x.mean())
    assert t.std_ms == pytest.approx(x.std(ddof=1))
    assert t.p10_ms <= t.median_ms <= t.p90_ms


def test_timing_statistics_by_hand():
    t = Timing("h", [5.0, 1.0, 3.0, 2.0, 4.0])  # order must not matter
    assert t.median_ms == 3.0
    assert t.p10_ms == pytest.approx(1.4)  # linear interpolation: 1 + 0.4 * (2 - 1)
    assert t.p90_ms == pytest.approx(4.6)
    assert t.iqr_ms == pytest.approx(2.0)  # 4 - 2
    assert Timing("one", [2.5]).std_ms == 0.0


def test_timing_rejects_empty_and_summary_format():
    with pytest.raises(ValueError):
        Timing("empty", [])
    t = Timing("s", [0.0120, 0.0123, 0.0131])
    assert t.summary() == f"0.0123 ms median (p10 {t.p10_ms:.4f}, p90 {t.p90_ms:.4f}, n=3)"


def test_time_kernel_warmup_then_repeat():
    timer = FakeTimer()
    t = bench.time_kernel(lambda: None, warmup=3, repeat=7, name="k", _timer=timer)
    assert [n for _, n in timer.calls] == [3, 7]
    assert t.n == 7 and t.name == "k" and t.median_ms == 1.0
    with pytest.raises(ValueError):
        bench.time_kernel(lambda: None, repeat=0, _timer=timer)


# --------------------------------------------------------------------------- compare
def test_ratio_direction_is_baseline_over_variant():
    fast, slow = (lambda: None), (lambda: None)
    timer = FakeTimer({fast: 1.0, slow: 4.0})
    c = bench.compare({"slow": slow, "fast": fast}, warmup=0, repeat=20, rounds=4,
                      progress=False, _timer=timer)
    assert c.baseline == "slow"  # first key by default
    r = c.ratios()
    assert r["slow"] == pytest.approx(1.0)
    assert r["fast"] == pytest.approx(4.0)  # faster than the baseline -> > 1
    c2 = Comparison(c.timings, "fast")
    assert c2.ratios()["slow"] == pytest.approx(0.25)
    with pytest.raises(KeyError):
        bench.compare({"a": fast}, baseline="b", _timer=timer, progress=False)


@pytest.mark.parametrize("nvar,repeat,rounds", [(2, 200, 5), (3, 10, 4), (4, 7, 3), (5, 3, 8)])
def test_compare_interleaves_rounds(nvar, repeat, rounds):
    order = []  # name of the variant for each timed (or warm-up) call, in sequence

    def make(name):
        return lambda: order.append(name)

    names = [f"v{i}" for i in range(nvar)]
    variants = {n: make(n) for n in names}
    timer = FakeTimer()
    c = bench.compare(variants, warmup=2, repeat=repeat, rounds=rounds, progress=False,
                      _timer=timer)
    # every variant gets exactly `repeat` samples
    assert {k: t.n for k, t in c.timings.items()} == {n: repeat for n in names}
    # warm-up first: each variant once, `warmup` calls each
    fn_to_name = {fn: n for n, fn in variants.items()}
    calls = [(fn_to_name[fn], n) for fn, n in timer.calls]
    assert calls[:nvar] == [(n, 2) for n in names]
    # then the rounds: each round times every variant once, in a rotated order
    timed = calls[nvar:]
    used_rounds = min(rounds, repeat)
    assert len(timed) == used_rounds * nvar
    per_round = [[n for n, _ in timed[i * nvar:(i + 1) * nvar]] for i in range(used_rounds)]
    for r in per_round:
        assert sorted(r) == names
    firsts = [r[0] for r in per_round]
    if used_rounds >= 2:
        assert len(set(firsts)) > 1, f"one variant always ran first: {firsts}"
    assert c.settings["orders"] == per_round


def test_schedule_counts_sum_to_repeat():
    plan = bench._schedule(["a", "b", "c"], 11, 4)
    assert [n for _, n in plan] == [3, 3, 3, 2]
    assert [o[0] for o, _ in plan] == ["a", "b", "c", "a"]


def test_table_lists_every_variant():
    c = Comparison({"base": Timing("base", [2.0] * 4), "new": Timing("new", [1.0] * 4)}, "base")
    text = c.table()
    lines = text.splitlines()
    assert len(lines) == 3 and "median" in lines[0] and "speedup" in lines[0]
    assert "base" in lines[1] and "1.00x" in lines[1] and "(baseline)" in lines[1]
    assert "new" in lines[2] and "2.00x" in lines[2] and "2.0000" in lines[1]


# --------------------------------------------------------------------------- JSON
def test_json_round_trip_comparison(tmp_path):
    a, b = (lambda: None), (lambda: None)
    c = bench.compare({"a": a, "b": b}, warmup=1, repeat=10, rounds=2, progress=False,
                      _timer=FakeTimer({a: 2.0, b: 0.5}))
    path = tmp_path / "sub" / "cmp.json"
    c.save(path, extra={"note": "test", "arr": np.arange(3)}, device=FAKE_DEVICE)
    doc = bench.load_results(path)
    assert set(doc) >= {"device", "created_utc", "results"}
    assert doc["device"] == FAKE_DEVICE
    assert doc["extra"] == {"note": "test", "arr": [0, 1, 2]}
    back = Comparison.from_dict(doc["results"])
    assert back.baseline == "a"
    assert back.ratios() == pytest.approx(c.ratios())
    assert back.ratios()["b"] == pytest.approx(4.0)
    np.testing.assert_array_equal(back.timings["b"].times_ms, c.timings["b"].times_ms)
    assert all(isinstance(v, float) for v in doc["results"]["timings"]["a"]["times_ms"])


def test_json_round_trip_records_and_numpy_types(tmp_path):
    recs = [{"param": np.int64(4096), "median_ms": np.float32(0.5),
             "times_ms": np.array([0.5, 0.6]), "ok": np.bool_(True)},
            Timing("t", [1.0, 2.0])]
    path = tmp_path / "recs.json"
    bench.save_results(path, recs, device=FAKE_DEVICE)
    text = path.read_text()
    json.loads(text)  # plain JSON
    doc = bench.load_results(path)
    r0, r1 = doc["results"]
    assert r0 == {"param": 4096, "median_ms": 0.5, "times_ms": [0.5, 0.6], "ok": True}
    assert r1["median_ms"] == 1.5 and r1["times_ms"] == [1.0, 2.0]
    assert Timing.from_dict(r1).median_ms == 1.5


# --------------------------------------------------------------------------- progress
def test_sweep_progress_one_line_per_item_when_not_a_tty(capsys):
    timer = FakeTimer()
    recs = bench.sweep(lambda n: (lambda: None), [1024, 4096], label="N", warmup=0,
                       repeat=3, _timer=timer)
    out = capsys.readouterr().out
    assert out.splitlines() == ["[1/2] N=1024 ... 1 ms", "[2/2] N=4096 ... 1 ms"]
    assert "\r" not in out
    assert [r["param"] for r in recs] == [1024, 4096]
    assert recs[0]["label"] == "N" and recs[0]["n"] == 3 and recs[0]["median_ms"] == 1.0


class _TTY(io.StringIO):
    def isatty(self):
        return True


def test_progress_updates_in_place_on_a_tty():
    s = _TTY()
    bar = Progress(3, stream=s)
    bar.show(1, "N=4096 ...", final=False)
    bar.show(1, "N=4096 ... 0.123 ms")
    bar.show(2, "N=8 ... 2 ms")
    bar.close()
    out = s.getvalue()
    assert out.count("\n") == 1 and out.endswith("\n")
    assert "\r[1/3] N=4096 ... 0.123 ms" in out
    last = out.rstrip("\n").split("\r")[-1]
    assert last.startswith("[2/3] N=8 ... 2 ms") and last.strip() == "[2/3] N=8 ... 2 ms"
    assert len(last) == len("[1/3] N=4096 ... 0.123 ms")  # padded over the longer line


def test_progress_disabled_prints_nothing(capsys):
    bench.compare({"a": lambda: None}, warmup=0, repeat=4, rounds=2, progress=False,
                  _timer=FakeTimer())
    assert capsys.readouterr().out == ""
    bench.compare({"a": lambda: None}, warmup=0, repeat=4, rounds=2, _timer=FakeTimer())
    assert capsys.readouterr().out.splitlines()[0].startswith("[1/2] round: a 1 ms")


# --------------------------------------------------------------------------- no GPU
@pytest.mark.skipif(_HAS_GPU, reason="a GPU is visible; this checks the no-GPU error")
def test_device_info_raises_clear_error_without_gpu():
    with pytest.raises(device.GPUUnavailable, match="needs a CUDA GPU.*none is usable here"):
        bench.device_info()
    with pytest.raises(device.GPUUnavailable, match="timing on the GPU needs a CUDA GPU"):
        bench.time_kernel(lambda: None, repeat=1)


def test_device_info_zero_devices(monkeypatch):
    import cupy
    monkeypatch.setattr(device, "_driver_present", lambda: True)
    monkeypatch.setattr(cupy.cuda.runtime, "getDeviceCount", lambda: 0)
    device._probe.cache_clear()
    try:
        with pytest.raises(device.GPUUnavailable, match="CUDA driver found, but no GPU"):
            bench.device_info()
    finally:
        device._probe.cache_clear()


def test_no_driver_is_said_plainly(monkeypatch):
    monkeypatch.setattr(device, "_driver_present", lambda: False)
    monkeypatch.delenv("FRAGLAB_MODE", raising=False)
    device._probe.cache_clear()
    try:
        assert device.why_no_gpu() == "no NVIDIA driver/GPU found"
        assert "driver version is insufficient" not in device.status_line()
    finally:
        device._probe.cache_clear()


# --------------------------------------------------------------------------- GPU
@pytest.fixture
def cp():
    import cupy
    return cupy


def _scale_fn(cp, n):
    x = cp.ones(n, dtype=cp.float32)
    y = cp.empty_like(x)
    return lambda: cp.multiply(x, 2.0, out=y)


@pytest.mark.gpu
@needs_gpu
def test_gpu_time_kernel(cp):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the first call compiles: warm-up must not hit the gate
        t = bench.time_kernel(_scale_fn(cp, 1 << 20), warmup=10, repeat=100, name="scale1M")
    assert t.n == 100
    assert 0 < t.min_ms <= t.median_ms < 50
    assert t.p10_ms <= t.median_ms <= t.p90_ms
    assert t.p90_ms < 10 * t.median_ms  # spread sane on an otherwise idle GPU
    assert "ms median" in t.summary()


@pytest.mark.gpu
@needs_gpu
def test_gpu_device_info_fields():
    info = bench.device_info()
    for key in ("name", "compute_capability", "sm_count", "l2_cache_bytes", "clocks",
                "cuda_driver_api_version", "cuda_runtime_version", "nvrtc_version",
                "cupy_version", "timestamp_utc", "hostname"):
        assert key in info, key
    assert info["sm_count"] > 0 and info["l2_cache_bytes"] > 0
    assert info["clocks"]["sm_max_mhz"] and info["clocks"]["sm_max_mhz"] > 100
    json.dumps(info)  # plain JSON types only
    cc = bench.clock_check()
    assert cc["sm_max_mhz"] > 100 and "throttled" in cc


@pytest.mark.gpu
@needs_gpu
def test_gpu_compare_bigger_array_is_slower(cp, tmp_path):
    n = 1 << 22
    c = bench.compare({"small": _scale_fn(cp, n), "big4x": _scale_fn(cp, 4 * n)},
                      warmup=10, repeat=100, rounds=5, progress=False)
    assert c.timings["small"].n == c.timings["big4x"].n == 100
    assert c.ratios()["big4x"] < 1.0
    c.save(tmp_path / "cmp.json")
    doc = bench.load_results(tmp_path / "cmp.json")
    assert doc["device"]["name"] and doc["results"]["baseline"] == "small"


def _timed_twice(cp, n, **option):
    """The scale kernel on `n` elements timed 100 times with time_kernel's defaults, then 100
    times with `option`: the two Timings."""
    fn = _scale_fn(cp, n)
    return bench.time_kernel(fn, repeat=100), bench.time_kernel(fn, repeat=100, **option)


@pytest.mark.gpu
@needs_gpu
def test_gpu_flush_l2(cp):
    # an 8 MiB input fits in the L2 of current GPUs; flushing should not make it faster
    hot, cold = _timed_twice(cp, 1 << 21, flush_l2=True)
    buf = bench._l2_flush_buffer()
    dev = cp.cuda.Device().id
    assert buf.nbytes >= 2 * cp.cuda.runtime.getDeviceProperties(dev)["l2CacheSize"]
    assert bench._l2_flush_buffer() is buf  # allocated once
    assert cold.n == 100 and cold.median_ms > 0
    assert cold.median_ms > 0.9 * hot.median_ms


@pytest.mark.gpu
@needs_gpu
def test_gpu_gate_hides_launch_overhead(cp):
    # A tiny kernel launched from Python: the host is slower than the GPU. Without the gate
    # the launch gap lands inside the events; with it, only GPU time is measured.
    held, loose = _timed_twice(cp, 1 << 12, hold=False)
    assert held.median_ms <= 1.05 * loose.median_ms


@pytest.mark.gpu
@needs_gpu
def test_gpu_same_kernel_twice_ratio_near_one(cp):
    fn = _scale_fn(cp, 1 << 22)
    c = bench.compare({"A": fn, "A_again": fn}, repeat=100, progress=False)
    assert 0.8 < c.ratios()["A_again"] < 1.25


@pytest.mark.gpu
@needs_gpu
def test_gpu_gate_times_out_instead_of_deadlocking(cp, monkeypatch):
    monkeypatch.setattr(bench._Gate, "timeout_s", 0.05)
    work = _scale_fn(cp, 1 << 12)

    def syncs():  # a callable that synchronizes inside cannot run behind the gate
        work()
        cp.cuda.get_current_stream().synchronize()

    with pytest.warns(RuntimeWarning, match="hold=False"):
        t = bench.time_kernel(syncs, warmup=0, repeat=3)
    assert t.n == 3
    assert bench.time_kernel(syncs, warmup=1, repeat=3, hold=False).n == 3
