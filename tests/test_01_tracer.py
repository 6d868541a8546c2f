"""Topic 01_tracer: encodings and their exactness, decoding with coverage and uniqueness checks,
the tracer kernels' SASS, and (on a GPU) live traces of every kind. The kinds themselves, their
kernels in the cubins and the recordings' format: tests/test_fragments.py."""
import re
import warnings

import numpy as np
import pytest

from fraglab import device, dtypes, sass, toolchain, tracer, warp
from fraglab.toolchain import ARCHES
from fraglab.tracer import cli as tracer_cli

ACC = [k.name for k in tracer.kinds("accumulator")]
DOC16 = warp.accumulator_16x16_sm80()        # the documented m16n8k16 C layout, used twice


# --------------------------------------------------------------------------------------------
# Rounding helpers and the exactness pitfall
# --------------------------------------------------------------------------------------------

def test_round_bf16_is_round_to_nearest_even():
    x = np.array([1.0, 256, 257, 258, 259, 301, 1515, 1212, 1220, -3.0, np.inf], np.float32)
    want = np.array([1.0, 256, 256, 258, 260, 300, 1512, 1216, 1216, -3.0, np.inf], np.float32)
    #  257 is a tie between 256 and 258: even significand (256) wins; 1212 is a tie of 1208
    #  and 1216 (step 8): 1216 has the even significand.
    np.testing.assert_array_equal(tracer.round_bf16(x), want)
    assert np.isnan(tracer.round_bf16(np.float32("nan")))
    # every integer up to 256 survives, 257 is the first that does not
    ints = np.arange(0, 600, dtype=np.float32)
    changed = ints[tracer.round_bf16(ints) != ints]
    assert changed.min() == tracer.TYPES["bf16"].exact_limit + 1


def test_exact_limits_of_the_float_types():
    for t in ("f16", "tf32", "bf16"):
        lim = tracer.TYPES[t].exact_limit
        ints = np.arange(lim + 8, dtype=np.float64)
        r = dtypes.round_to(ints, t)
        assert np.array_equal(r[:lim + 1], ints[:lim + 1]), t
        assert r[lim + 1] != ints[lim + 1], t
    assert dtypes.round_to([127, 128, -129], "s8").tolist() == [127, -128, 127]
    with pytest.raises(ValueError, match="unknown element type"):
        dtypes.round_to([1.0], "f8")


def test_paper_encoding_is_exact_in_half_not_in_bf16():
    assert tracer.exactness_problems("paper", "a_16x16x16_f16_row") == []      # 1515 <= 2048
    assert tracer.exactness_problems("paper", "acc_16x16x16_f32", way="mma") == []
    p = tracer.exactness_problems("paper", "a_16x16x16_bf16_row")
    assert len(p) == 1 and "1515" in p[0] and "256" in p[0]
    p = tracer.exactness_problems("paper", "acc_16x16x16_f32", way="mma", inputs="bf16")
    assert p and "bf16" in p[0]
    # 32 rows: row*100 + col reaches 3107, past f16's 2048
    assert tracer.exactness_problems("paper", "acc_32x8x16_f16", way="mma")
    # s8: even the linear code of a 16x16 tile (255) is out of range
    assert "range" in tracer.exactness_problems("linear", "a_16x16x16_s8_row")[0]
    assert tracer.exactness_problems("two_pass", "a_32x8x16_s8_col") == []


@pytest.mark.parametrize("name", list(tracer.KINDS))
def test_auto_encoding_is_exact_for_every_kind(name):
    k = tracer.get_kind(name)
    enc = tracer.choose_encoding(k)
    assert not tracer.exactness_problems(enc, k)
    for inp in k.mma_inputs:
        assert not tracer.exactness_problems(tracer.choose_encoding(k, "mma", inp), k, "mma", inp)
    if (k.dtype == "s8" and k.elements > 128) or (k.dtype in ("u8", "bf16") and k.elements > 256):
        assert enc == "two_pass"


def test_bf16_paper_tracer_decodes_wrong_and_the_checks_catch_it():
    k = "a_16x16x16_bf16_row"
    true = DOC16                     # any bijective layout of the 16x16 tile would do
    d = tracer.simulate_dump(k, true, "paper")
    t = tracer.decode(k, d, "paper")
    silently_wrong = ((t.layout >= 0).all(-1) & (t.layout != true).any(-1)).sum()
    assert silently_wrong > 0                 # valid-looking coordinates that are wrong
    assert t.holes > 0 and t.duplicated > 0 and t.bad
    assert not t.ok
    with pytest.raises(tracer.TraceError, match="uniqueness fails"):
        t.check()
    # the fix: the linear code (<= 255) is exact in bf16
    good = tracer.decode(k, tracer.simulate_dump(k, true, "linear")).check()
    assert np.array_equal(good.layout, true)


def test_bf16_through_mma_is_caught_too():
    k = "acc_16x16x16_f32"
    d = tracer.simulate_dump(k, DOC16, "paper", way="mma", inputs="bf16")
    assert not tracer.decode(k, d, "paper", way="mma").ok
    d = tracer.simulate_dump(k, DOC16, "paper", way="mma", inputs="f16")
    assert np.array_equal(tracer.decode(k, d, "paper").check().layout, DOC16)


def test_s8_needs_two_passes():
    k = "a_16x16x16_s8_row"
    d = tracer.simulate_dump(k, DOC16, "linear")      # 128..255 wrap to negative values
    assert not tracer.decode(k, d, "linear").ok
    d = tracer.simulate_dump(k, DOC16, "two_pass")
    assert d.shape == (2, 32, 8) and d.max() <= 15
    assert np.array_equal(tracer.decode(k, d, "two_pass").check().layout, DOC16)


# --------------------------------------------------------------------------------------------
# Decoding: coverage, uniqueness, duplicates
# --------------------------------------------------------------------------------------------

def _dup_layout():
    """A 16x16 input fragment of 16 values a lane where x[i + 8] repeats x[i]."""
    return np.concatenate([DOC16, DOC16], axis=1)


def test_duplicates_are_counted_not_rejected():
    k = "a_16x16x16_f16_row"
    t = tracer.decode(k, tracer.simulate_dump(k, _dup_layout()))
    assert t.ok and t.duplicated == 256 and t.extra_copies == 256
    assert "held 2 times" in t.summary()
    warp.validate_layout(t.layout, (16, 16), allow_duplicates=True)


def test_uneven_duplicates_are_suspicious():
    lay = _dup_layout()
    lay[0, 8] = lay[0, 1]                             # one copy of (0, 0) lost, (0, 1) thrice
    t = tracer.decode("a_16x16x16_f16_row", tracer.simulate_dump("a_16x16x16_f16_row", lay))
    assert not t.ok and "unevenly" in " ".join(t.problems())


def test_holes_and_poison_are_reported():
    k = "acc_16x16x16_f32"
    d = tracer.simulate_dump(k, DOC16)[0]
    d[3, 5] = np.nan                                  # a slot the kernel did not write
    d[7, 0] = 999                                     # a value that is no code
    t = tracer.decode(k, d)
    assert len(t.bad) == 2 and t.holes == 2
    msg = " ".join(t.problems())
    assert "lane 3 reg 5" in msg and "lane 7 reg 0 holds 999" in msg


def test_duplicate_in_an_exact_kind_fails_uniqueness():
    lay = DOC16.copy()
    lay[1, 1] = lay[0, 0]
    t = tracer.decode("acc_16x16x16_f32", tracer.simulate_dump("acc_16x16x16_f32", lay))
    assert not t.ok and any("uniqueness" in p for p in t.problems())


def test_decode_argument_errors():
    with pytest.raises(ValueError, match=r"\(32, 8\)"):
        tracer.decode("acc_16x16x16_f32", np.zeros((32, 16)))
    with pytest.raises(ValueError, match="unknown encoding"):
        tracer.decode("acc_16x16x16_f32", np.zeros((32, 8)), "base100")
    with pytest.raises(ValueError, match="2 dump"):
        tracer.decode("acc_16x16x16_f32", np.zeros((32, 8)), "two_pass")
    with pytest.raises(ValueError, match="shape"):
        tracer.simulate_dump("acc_16x16x16_f32", DOC16[:, :4])


def test_tables_and_inverse():
    t = tracer.element_table(DOC16, (16, 16), "lane")
    assert t[0, 2] == 1 and t[8, 8] == 0 and t[15, 15] == 31      # the paper's Figure 1
    r = tracer.element_table(DOC16, (16, 16), "reg")
    assert r[0, 0] == 0 and r[8, 0] == 2 and r[0, 8] == 4 and r[15, 15] == 7
    assert tracer.format_table(DOC16, (16, 16)).splitlines()[1].startswith("R00    0   0   1   1")
    h = tracer.holders(_dup_layout(), (16, 16))
    assert h[0][0] == [(0, 0), (0, 8)]
    with pytest.raises(ValueError, match="what"):
        tracer.element_table(DOC16, (16, 16), "row")


def test_plot_layout_draws_both_panels(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    fig = tracer.plot_layout(_dup_layout(), kind="a_16x16x16_f16_row")
    assert len(fig.axes) == 2
    texts = [t.get_text() for t in fig.axes[1].texts]
    assert "0+1" in texts                           # element held twice: first holder, +1
    fig.savefig(tmp_path / "layout.png")
    assert (tmp_path / "layout.png").stat().st_size > 1000
    bad = DOC16.copy()
    bad[[0, 1]] = bad[[1, 0]]
    fig = tracer.plot_mismatch(bad, DOC16, "acc_16x16x16_f32")
    assert sum(len(ax.patches) for ax in fig.axes) == 2 * 16       # 16 elements framed, 2 panels
    with pytest.raises(ValueError, match="shape"):
        tracer.plot_layout(DOC16)
    import matplotlib.pyplot as plt
    plt.close("all")


# --------------------------------------------------------------------------------------------
# Recordings (files made on a GPU; tests that need the committed one skip without it). Reading
# and checking them: tests/test_fragments.py.
# --------------------------------------------------------------------------------------------

def test_cpu_layout_reads_the_default_recording(monkeypatch):
    monkeypatch.setenv("FRAGLAB_MODE", "cpu")
    if not tracer.recording_path(tracer.DEFAULT_ARCH).is_file():
        with pytest.raises(tracer.RecordingMissing, match="python -m fraglab.tracer record"):
            tracer.layout("acc_16x16x16_f32")
        pytest.skip(f"no recording {tracer.recording_path()} yet: it is made on the H100 with "
                    "`python -m fraglab.tracer record` and committed")
    lay = tracer.layout("acc_16x16x16_f32")
    assert lay.shape == (32, 8, 2)
    assert tracer.source_line().startswith("[cpu] layouts from the recording")


def test_committed_recordings_are_valid():
    files = sorted(tracer.LAYOUTS_DIR.glob("sm_*.json"))
    if not files:
        pytest.skip("no recording committed yet (the lead records it on the H100 with "
                    "`python -m fraglab.tracer record`)")
    for f in files:
        tracer.load_recording.cache_clear()
        rec = tracer.load_recording(f.stem)
        assert rec["traced"] and rec["device"].get("name")
        assert rec["device"].get("compute_capability")
        assert set(rec["kinds"]) | set(rec["unsupported"]) == set(tracer.KINDS)
        for name in rec["kinds"]:
            k = tracer.get_kind(name)
            t = tracer.Trace(k, tracer.recorded_layout(k, f.stem))
            assert t.ok, t.summary()


# --------------------------------------------------------------------------------------------
# Argument checks that need no GPU
# --------------------------------------------------------------------------------------------

def test_dump_argument_errors(foreign):
    with pytest.raises(ValueError, match="unknown fragment kind"):
        tracer.dump("acc_16x16_f32", None)
    with pytest.raises(ValueError, match="accumulators only"):
        tracer.dump("a_16x16x16_f16_row", None, way="mma")
    with pytest.raises(ValueError, match="way must be"):
        tracer.dump("acc_16x16x16_f32", None, way="store")
    with pytest.raises(ValueError, match="f16 or bf16"):
        tracer.dump("acc_16x16x16_f32", None, way="mma", inputs="tf32")
    with pytest.raises(ValueError, match="only applies"):
        tracer.dump("acc_16x16x16_f32", None, inputs="f16")
    make, words = foreign
    with pytest.raises(TypeError, match=words):
        tracer.dump("acc_16x16x16_f32", make(np.zeros((16, 16), np.float32)))


def test_unsupported_kinds_are_refused_with_the_reason(monkeypatch):
    from fraglab import device as dev
    monkeypatch.setattr(dev, "target_cc", lambda: (7, 5))             # a Turing GPU (T4)
    with pytest.raises(tracer.UnsupportedKind, match="bf16 WMMA needs compute capability 8.0"):
        tracer.require_supported("a_16x16x16_bf16_row")
    with pytest.raises(tracer.UnsupportedKind, match="tf32"):
        tracer.require_supported("acc_16x16x8_f32")
    with pytest.raises(tracer.UnsupportedKind, match="bf16"):
        tracer.require_supported("acc_16x16x16_f32", inputs="bf16")
    tracer.require_supported("acc_16x16x16_s32")                      # s8 WMMA exists on sm_75


def test_trace_refuses_an_inexact_encoding_before_running():
    with pytest.raises(ValueError, match="allow_inexact"):
        tracer.trace("a_16x16x16_bf16_row", encoding="paper")
    with pytest.raises(ValueError, match="unknown encoding"):
        tracer.trace("a_16x16x16_bf16_row", encoding="base100")


def test_cli_kinds(capsys):
    assert tracer_cli.main(["kinds"]) == 0
    assert "acc_16x16x8_f32" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------
# Compile and SASS
# --------------------------------------------------------------------------------------------

def _build(arch):
    return toolchain.compile("01_tracer", arch)


_listings: dict = {}


def _ops(arch, kernel):
    """Full opcode counter of one kernel; each cubin is disassembled once (nvdisasm is slow)."""
    if arch not in _listings:
        _listings[arch] = _build(arch).sass()
    return sass.count_opcodes(sass.function_text(_listings[arch], kernel), base=False)


# Tensor instructions per mma_sync. sm_80 and later: m16n8k16 (HMMA.16816 / IMMA.16816), two per
# 16x16x16 tile (the two n8 halves); tf32 16x16x8 is four m16n8k4; f64 8x8x4 is one DMMA.
# sm_75 (Turing) has no m16n8k16: four HMMA.1688 (m16n8k8) or IMMA.8816 (m8n8k16) per tile.
_PER_MMA = {
    "sm_80": {"f16": ("HMMA.16816.F32", 2), "f16acc": ("HMMA.16816.F16", 2),
              "bf16": ("HMMA.16816.F32.BF16", 2), "s8": ("IMMA.16816.S8.S8", 2),
              "tf32": ("HMMA.1684.F32.TF32", 4), "f64": ("DMMA.884", 1)},
    "sm_75": {"f16": ("HMMA.1688.F32", 4), "f16acc": ("HMMA.1688.F16", 4),
              "s8": ("IMMA.8816.S8.S8", 4)},
}
_PER_MMA["sm_90"] = {**_PER_MMA["sm_80"], "f64": ("DMMA.8", 1)}
_PER_MMA["sm_120"] = _PER_MMA["sm_90"]


@pytest.mark.parametrize("arch", ARCHES)
def test_tensor_instructions_per_mma_sync(arch):
    for k in tracer.kinds("accumulator"):
        steps = -(-k.n // k.k)              # the tracer multiplies by I_n in k-steps
        for inp in k.mma_inputs:
            ops = _ops(arch, k.kernel("mma", inp))
            tensor = {o: n for o, n in ops.items() if sass.classify(o) == "tensor"}
            key = "f16acc" if (k.dtype == "f16") else inp
            if key not in _PER_MMA[arch]:
                assert not tensor and ops.get("BPT.TRAP", 0) == 1, (arch, k.name, tensor)
                continue
            op, per = _PER_MMA[arch][key]
            assert tensor == {op: per * steps}, (arch, k.name, inp, tensor)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_one_16x16x16_mma_sync_is_two_hmma_16816(arch):
    ops = _ops(arch, "trace_mma_acc_16x16x16_f32")
    assert ops["HMMA.16816.F32"] == 2 and sum(
        n for o, n in ops.items() if o.startswith("HMMA")) == 2


def test_load_tracers_use_no_tensor_instruction_and_no_local_memory():
    for arch in ARCHES:
        b = _build(arch)
        for name in b.kernels:
            if name.startswith("trace_load_"):
                assert not any(sass.classify(o) == "tensor" for o in _ops(arch, name)), (arch, name)
            assert b.resources[name]["spill_stores"] == 0 and b.resources[name]["stack_frame"] == 0


def _stg_sources(text):
    """(byte offset, source register) of each STG in a listing, in order."""
    out = []
    for m in re.finditer(r"STG\.E[.\w]*\s+(?:desc\[\w+\])?\[R\d+\.64(?:\+(0x[0-9a-f]+))?\],\s*(R\d+)",
                         text):
        out.append((int(m.group(1) or "0", 16), m.group(2)))
    return out


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_sass_predicts_the_f16_duplicates(arch):
    """On sm_80/sm_90 an f16 16x16x16 matrix_a fragment has 16 elements, but one LDSM.x4 fills
    only 4 registers (8 halves): the dump stores each of them twice, x[i + 8] = x[i]."""
    _ops(arch, "trace_load_a_16x16x16_f16_row")
    text = sass.function_text(_listings[arch], "trace_load_a_16x16x16_f16_row")
    assert re.search(r"LDSM\.16\.M88\.4", text)
    stg = _stg_sources(text)
    assert len(stg) == 16
    src = dict(stg)
    assert all(src[4 * i] == src[4 * (i + 8)] for i in range(8)), stg


# --------------------------------------------------------------------------------------------
# On the GPU
# --------------------------------------------------------------------------------------------

def _require(kind):
    ok, why = tracer.supported(kind)
    if not ok:
        pytest.skip(why)
    return tracer.get_kind(kind)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(tracer.KINDS))
def test_live_trace_is_valid_and_matches_its_fitted_formula(name):
    from fraglab import forward_mapping as fm
    k = _require(name)
    t = tracer.trace(k)                                  # raises TraceError if invalid
    assert t.ok, t.summary()
    if k.copies == 1:
        assert t.duplicated == 0
    else:                                                # replicated: every element alike
        assert t.holes == 0 and t.counts.min() == t.counts.max()
    try:
        m = fm.fit(t.layout, kind=k)
    except fm.NotAffine as e:
        pytest.xfail(f"{name} on {device.arch()} is not affine in the bits: {e}")
    assert np.array_equal(m.table(), t.layout), m.text()
    print(f"{name}: {t.summary()}\n{m.text()}")


@pytest.mark.gpu
@pytest.mark.parametrize("name", ACC)
def test_the_two_tracer_ways_agree(name):
    k = _require(name)
    res = tracer.trace_kind(k)            # load, and mma with every input type; raises if not
    assert set(res["ways"]) == {"load"} | {f"mma_{i}" for i in k.mma_inputs}


@pytest.mark.gpu
def test_the_papers_tracer_as_written():
    """Algorithm 1 itself: row*100 + col in half, times the identity, f32 accumulator."""
    t = tracer.trace("acc_16x16x16_f32", way="mma", inputs="f16", encoding="paper")
    assert np.array_equal(t.layout, tracer.trace("acc_16x16x16_f32").layout)


@pytest.mark.gpu
@pytest.mark.parametrize("name,way,inputs", [("a_16x16x16_bf16_row", "load", None),
                                             ("acc_16x16x16_f32", "mma", "bf16")])
def test_bf16_paper_tracer_fails_visibly_and_as_emulated(name, way, inputs):
    import cupy
    k = _require(name)
    truth = tracer.trace(k).layout
    bad = tracer.trace(k, way=way, inputs=inputs, encoding="paper", allow_inexact=True,
                       check=False)
    assert not bad.ok and bad.holes > 0
    raw = tracer.dump(k, cupy.asarray(tracer.ENCODINGS["paper"].passes(k.shape)[0]), way=way,
                      inputs=inputs)
    # the GPU rounds exactly as the NumPy emulation says
    sim = tracer.simulate_dump(k, truth, "paper", way=way, inputs=inputs)[0]
    np.testing.assert_array_equal(raw, sim)


@pytest.mark.gpu
def test_unwritten_slots_stay_poisoned():
    """A tracer kernel that forgets lane 3 leaves NaN there, and decoding reports it."""
    import cupy
    src = (toolchain.KERNELS_DIR / "01_tracer.cu").read_text().replace(
        "out[lane * F::num_elements + i] = to_float(f.x[i]);",
        "if (lane != 3) out[lane * F::num_elements + i] = to_float(f.x[i]);")
    assert "lane != 3" in src
    k = tracer.get_kind("acc_16x16x16_f32")
    d = tracer.dump(k, cupy.asarray(tracer.ENCODINGS["linear"].passes(k.shape)[0]), source=src)
    assert np.isnan(d[3]).all() and not np.isnan(np.delete(d, 3, axis=0)).any()
    t = tracer.decode(k, d)
    assert len(t.bad) == 8 and t.holes == 8


@pytest.mark.gpu
def test_gpu_argument_errors():
    import cupy
    with pytest.raises(TypeError, match="float32"):
        tracer.dump("acc_16x16x16_f32", cupy.zeros((16, 16), cupy.float64))
    with pytest.raises(ValueError, match="shape"):
        tracer.dump("acc_32x8x16_f32", cupy.zeros((8, 32), cupy.float32))
    with pytest.raises(ValueError, match="shape"):
        tracer.dump("a_32x8x16_f16_row", cupy.zeros((32, 8), cupy.float32))


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(tracer.KINDS))
def test_live_layout_matches_the_recording(name):
    k = _require(name)
    arch = device.arch()
    if not tracer.recording_path(arch).is_file():
        pytest.skip(f"no recording for {arch}: run `python -m fraglab.tracer record`")
    want = tracer.recorded_layout(k, arch)
    got = tracer.trace_kind(k)["layout"]
    diff = tracer.compare_layouts(got, want, k)
    assert not diff, f"this GPU ({device.name()}) lays out {name} differently:\n{diff}"
    with warnings.catch_warnings():
        warnings.simplefilter("error", tracer.LayoutMismatchWarning)
        assert np.array_equal(tracer.layout(k), want)
