"""Topic 10_fa3_pipelining without running a kernel: every file compiles for sm_90a (and traps
elsewhere), registers and spills, HGMMA and no HMMA, the SASS evidence of the overlap, the
swizzle model, and the wrapper's errors (no Hopper, bad arguments)."""
import re
from functools import lru_cache

import numpy as np
import pytest

from fraglab import device, launch, runs_where, toolchain, tools
from fraglab import fa3_pipelining as fa3
from fraglab.fa3_pipelining import bench, config, kernels, report, sass_evidence, tuning

BLOCK_FILES = ("10_fa3_pipelining_wgmma", "10_fa3_pipelining_mbarrier", "10_fa3_pipelining_copy",
               "10_fa3_pipelining_warpspec")


@lru_cache(maxsize=None)
def _build(name, arch="sm_90a"):
    return toolchain.compile(name, arch)


@pytest.mark.parametrize("variant", fa3.VARIANTS)
def test_variant_kernels_compile_for_sm90a_without_spills(variant):
    b = _build(kernels.kernel_file(variant))
    want = sorted(kernels.kernel_name(variant, t, d) for t in ("f16", "bf16")
                  for d in kernels.head_dims(variant))
    assert sorted(b.kernels) == want
    for k in want:
        r = b.resources[k]
        assert r["spill_stores"] == r["spill_loads"] == r["stack_frame"] == 0, (k, r)
        assert r["registers"] <= 168, (k, r)          # the cap of __launch_bounds__(384, 1)
    assert "C7508" not in b.log, "ptxas ignored setmaxnreg"


@pytest.mark.parametrize("name", BLOCK_FILES)
def test_building_blocks_compile_for_sm90a(name):
    b = _build(name)
    assert b.kernels and all(b.resources[k]["spill_stores"] == 0 for k in b.kernels)


@pytest.mark.parametrize("arch", ("sm_80", "sm_90"))
def test_bodies_trap_off_sm90a(arch):
    b = _build(kernels.kernel_file("twostage"), arch)
    for k in b.kernels:
        ops = b.opcodes(k)
        assert "HGMMA" not in ops and ops.get("BPT", 0) + ops.get("EXIT", 0) >= 1, (k, ops)


@pytest.mark.parametrize("variant, d", [(v, d) for v in fa3.VARIANTS for d in kernels.head_dims(v)])
def test_multiplies_are_hgmma_not_hmma(variant, d):
    ops = _build(kernels.kernel_file(variant)).opcodes(kernels.kernel_name(variant, "f16", d))
    assert ops.get("HGMMA", 0) >= 2 and ops.get("HMMA", 0) == 0, ops


def test_pipelined_loops_put_exp2_beside_wgmma():
    ev = {(r["variant"], r["d"]): r for r in sass_evidence.all_evidence()}
    for d in (64, 128):
        assert ev[("nooverlap", d)]["sass"]["exp2_beside_wgmma"] == 0
        for v in ("twostage", "pingpong", "tma"):
            s = ev[(v, d)]["sass"]
            assert s["exp2_beside_wgmma"] >= s["exp2"] // 2, (v, d, s)
    s = ev[("tma", 256)]["sass"]          # d = 256: O's 128 registers leave room for the overlap
    assert s["exp2_beside_wgmma"] >= s["exp2"] // 2, s
    # the 3-stage loop at d = 128 (64-key tiles) overlaps; at d = 64 (128-key tiles) its extra
    # S and P do not fit and ptxas serializes the wgmma (C7512): no exp2 beside a multiply
    assert ev[("threestage", 128)]["sass"]["exp2_beside_wgmma"] > 0
    assert "C7512" in ev[("threestage", 64)]["ptxas_notes"]
    assert ev[("threestage", 64)]["sass"]["exp2_beside_wgmma"] == 0


def test_consumers_stay_within_setmaxnreg():
    for r in sass_evidence.all_evidence():
        assert 150 < r["consumer_registers"] <= 240, r       # setmaxnreg.inc 240


def test_ptx_order_is_the_source_order():
    tl = sass_evidence.ptx_timeline("twostage", "f16", 64)
    kinds = [r["kind"] for r in tl]
    assert "commit" in kinds and "wait" in kinds and "exp2" in kinds
    assert sass_evidence.overlap(tl)["exp2_beside_wgmma"] > 0


def test_swizzle_model_permutes_chunks_within_each_atom():
    for rows in (64, 128):
        offs = sorted(kernels.sw128_offset(r, c, rows) for r in range(rows) for c in range(16))
        assert offs == list(range(0, rows * 256, 16))       # a bijection onto the tile
    assert kernels.sw128_offset(3, 0, 128) == 3 * 128 + (3 << 4)
    assert kernels.sw128_offset(0, 8, 128) == 128 * 128     # second 64-column panel
    img = kernels.sw128_image(np.arange(128 * 64, dtype=np.uint16).reshape(128, 64), 100)
    assert (img[100:] == 0).all()


def test_smem_fits_hopper():
    for v in fa3.VARIANTS:
        for d in kernels.head_dims(v):
            assert config.smem_bytes(v, d) <= 227 * 1024


def test_d256_variants_and_refusals():
    """d = 256 exists where the variant's file has FA3_KERNELS_D256; elsewhere the name is
    refused with the reason (before any compile)."""
    have = [v for v in fa3.VARIANTS if 256 in kernels.head_dims(v)]
    assert have == ["tma"]
    tma = config.file_constants("tma")
    assert tma["fa3_d256_stages"] == 2 and tma["fa3_d128_stages"] == 3
    with pytest.raises(ValueError, match="pingpong.*no d = 256.*spill.*variant='tma'"):
        kernels.kernel_name("pingpong", "f16", 256)
    assert kernels.kernel_name("tma", "bf16", 256) == "fa3_tma_bf16_d256"


@pytest.mark.parametrize("stages", [None, 2])
@pytest.mark.parametrize("variant", fa3.VARIANTS)
def test_launch_constants_are_the_kernels(variant, stages):
    """The launch numbers the file declares (fa3_*) are what its kernels are built with: the
    plan's build (FA3_CONSTANTS_ONLY) and the kernels' build give the same values, and the key
    tile, shared memory and block are those of the kernels' own instantiation (the
    ``__launch_bounds__`` in the ptxas report, Fa3Config's shared memory from its layout). The
    kernels' build is read from its PTX, as the interpreter's launch reads it (no ptxas for a
    build no other test assembles: the ring depth 2); that a cubin holds its PTX's values is
    test_launch_constants_on_the_interpreter_are_the_builds (tests/test_toolchain.py)."""
    from fraglab import ptx
    defines = None if stages is None else {"FA3_STAGES_DEF": stages}
    plan = config.file_constants(variant, defines)
    full = ptx.load(kernels.kernel_file(variant), "sm_90a", defines=defines)
    assert full.constants("fa3_") == plan
    rows, nc = plan["fa3_rows"], plan["fa3_consumers"]
    assert plan["fa3_threads"] == 128 * (1 + nc) and rows == 64 * nc
    for d in config.head_dims(variant):
        bc, st = plan[f"fa3_d{d}_key_tile"], plan[f"fa3_d{d}_stages"]
        assert st == (min(stages or 3, 2) if d == 256 else stages or 3)
        assert plan[f"fa3_d{d}_smem"] == 1024 + rows * d * 2 + 2 * st * bc * d * 2 + 8 * (1 + 4 * st)
        assert plan[f"fa3_d{d}_smem"] <= config.SMEM_LIMIT


#: A tile changed in one .cu file only (the source a test compiles instead of the file).
def _mutant(variant: str, old: str, new: str) -> str:
    text = (tools.KERNELS_DIR / f"{kernels.kernel_file(variant)}.cu").read_text()
    assert text.count(old) == 1, old
    return text.replace(old, new)


def test_launch_follows_a_tile_changed_in_the_kernel_file_only(rng):
    """twostage's d = 64 key tile changed from 128 to 64 in its .cu text, nothing else: the
    launch reads the new tile's shared memory back from the module, and the kernel, run with
    it (on the interpreter without a GPU, on the H100 with one), still matches float64."""
    from fraglab.attention import as_float, attention_reference
    src = _mutant("twostage", "FA3_KERNELS(twostage, TwoStage, 128, 128)",
                  "FA3_KERNELS(twostage, TwoStage, 64, 128)")
    own = config.file_constants("twostage")
    if not launch.interpreted() and tuple(device.target_cc()) != (9, 0):
        pytest.skip("sm_90a kernels: the interpreter or a Hopper GPU")
    q, k, v = (rng.standard_normal((1, 1, 70, 64)).astype(np.float16) for _ in range(3))
    run, out = kernels.attention_launcher(*map(launch.to_device, (q, k, v)), causal=True,
                                          variant="twostage", source=src)
    got = run.constants
    assert own["fa3_d64_key_tile"] == 128 and got["fa3_d64_key_tile"] == 64
    assert got["fa3_d64_smem"] == own["fa3_d64_smem"] - 2 * 3 * 64 * 64 * 2
    assert got["fa3_d128_smem"] == own["fa3_d128_smem"]
    seen = []
    real = launch.launch
    with pytest.MonkeyPatch.context() as mp:
        def spy(fn, grid, block, args, shared_mem=0, **kw):
            seen.append(shared_mem)
            return real(fn, grid, block, args, shared_mem=shared_mem, **kw)
        mp.setattr(launch, "launch", spy)
        run()
    assert seen == [got["fa3_d64_smem"]]
    ref = attention_reference(*(x.astype(np.float64) for x in (q, k, v)), causal=True)
    err = np.linalg.norm(as_float(out, "f16") - ref) / np.linalg.norm(ref)
    assert err < 2e-2


def test_building_blocks_read_their_numbers_back():
    """The building blocks' launch numbers are their files': the block of __launch_bounds__,
    the shared memory their layout needs (read from the compiled files on every target)."""
    blocks = (("mbarrier", "ring_"), ("copy", "swizzle_tile_"), ("warpspec", "warpspec_"),
              ("wgmma", "wgmma_gemm_"), ("tma_tile", "tma_tile_"))
    for name, prefix in ((f"10_fa3_pipelining_{f}", p) for f, p in blocks):
        c90, c80 = _build(name).constants(prefix), _build(name, "sm_80").constants(prefix)
        assert c90 == c80 and c90, name
        assert launch.constants(name, prefix, arch="sm_90a") == c90
    ring = _build("10_fa3_pipelining_mbarrier").constants("ring_")
    assert ring["ring_smem"] >= 128 + ring["ring_stages"] * (ring["ring_chunk"] * 4 + 16)
    sw = _build("10_fa3_pipelining_copy").constants("swizzle_tile_")
    assert sw["swizzle_tile_smem_d128"] == 1024 + sw["swizzle_tile_rows"] * 128 * 2


@pytest.mark.parametrize("cc", [(8, 0), (8, 9), (10, 0), (12, 0)])
def test_wrapper_refuses_everything_but_hopper(cc):
    q = np.zeros((1, 1, 64, 64), np.float16)
    with runs_where.simulated_gpu(cc):
        with pytest.raises(RuntimeError, match=r"sm_90a code \(the FA-3 kernel 'twostage'\) needs "
                           r"a Hopper GPU, compute capability 9.0 .*flash_attention.fa2"):
            fa3.attention(q, q, q)
        with pytest.raises(RuntimeError, match="sm_90a"):
            fa3.wgmma_gemm(np.zeros((64, 64), np.float16), np.zeros((64, 64), np.float16))


def _arrays(shape=(1, 1, 64, 64), dtype=np.float16):
    return [launch.to_device(np.zeros(shape, dtype)) for _ in range(3)]


needs_hopper = pytest.mark.skipif(not device.can_run(config.ARCH)[0],
                                  reason="no sm_90a here (GPU or interpreter)")


@needs_hopper
@pytest.mark.parametrize("kw, exc, match", [
    (dict(variant="fourstage"), ValueError, "variant"),
    (dict(causal=1), TypeError, "causal"),
    (dict(scale=-1.0), ValueError, "scale"),
    (dict(scale="x"), TypeError, "scale"),
])
def test_attention_rejects_bad_options(kw, exc, match):
    with pytest.raises(exc, match=match):
        fa3.attention(*_arrays(), **kw)


@needs_hopper
@pytest.mark.parametrize("arrays, exc, match", [
    (lambda: _arrays((1, 1, 64, 96)), ValueError, "head dimension"),
    (lambda: _arrays(dtype=np.float32), TypeError, "dtype"),
    (lambda: _arrays((1, 64, 64)), ValueError, "dimensions"),
    (lambda: _arrays()[:2] + [launch.to_device(np.zeros((1, 1, 32, 64), np.float16))],
     ValueError, "shape"),
])
def test_attention_rejects_bad_arrays(arrays, exc, match):
    with pytest.raises(exc, match=match):
        fa3.attention(*arrays())


def test_bench_summary_and_glue_on_a_fake_record():
    tf = {"fa3_nooverlap": 300.0, "fa3_twostage": 520.0, "fa3_threestage": 480.0,
          "fa3_pingpong": 510.0, "cudnn": 630.0, "sdpa_flash": 340.0, "fa2": 316.0}
    row = {"N": 4096, "d": 128, "causal": False, "tflops": tf}
    res = {"headline": row, "sweep": [row, {**row, "N": 1024, "causal": True}],
           "check": [{"problem": "a", "case": "b", "ok": True, "error": 1e-4}],
           "variants": sass_evidence.all_evidence()}
    text = bench.summary_table(res)
    assert "twostage" in text and "0.83" in text
    g = report.glue_values({"results": res})
    assert g["ch10-best-variant"] == "twostage" and g["ch10-ratio-cudnn"] == "0.83x"
    assert g["ch10-goal-met"] == "met" and g["ch10-checks"] == "1 of 1"
    assert g["ch10-threestage-d64-note"] == "C7512"


def test_cli_parses():
    from fraglab.fa3_pipelining.__main__ import main
    with pytest.raises(SystemExit):
        main(["bench"])                      # --out is required


def test_bench_timed_records_every_callable_on_fakes(monkeypatch):
    """bench.timed's bookkeeping without a GPU: fake launchers, baselines and timer."""
    import sys
    import types
    from fraglab import bench as timing

    calls = []
    monkeypatch.setattr(kernels, "attention_launcher",
                        lambda *a, variant, stages=3, one_softmax=False, **k: ((lambda: calls.append(variant)), None))
    fake_cp = types.SimpleNamespace(cuda=types.SimpleNamespace(
        get_current_stream=lambda: types.SimpleNamespace(synchronize=lambda: None)))
    monkeypatch.setitem(sys.modules, "cupy", fake_cp)
    real = timing.compare
    monkeypatch.setattr(timing, "compare", lambda runs, **kw: real(
        runs, baseline=kw.get("baseline"), warmup=0, repeat=4, rounds=2, progress=False,
        _timer=lambda fn, n, flush: [1.0 + 0.1 * len(fn.__name__ if hasattr(fn, "__name__") else "")] * n))

    class Base:
        flash = None

        def inputs(self, rng, shape, dtype="f16"):
            return None, [None, None, None]

        def callables(self, ts, qkv, causal, refused):
            refused["ch09"] = "not here"
            return {"cudnn": lambda: None, "fa2": lambda: None}
    rec = bench.timed(Base(), None, 1024, 128, False, True, lambda *a: None,
                      two_stage_rings=("twostage",))
    assert set(rec["tflops"]) == {f"fa3_{v}" for v in fa3.VARIANTS} | {"fa3_twostage_ring2", "fa3_twostage_onesoftmax", "cudnn", "fa2"}
    assert rec["refused"] == {"ch09": "not here"} and rec["comparison"].baseline == "cudnn"


def test_chapter_cites_only_names_glue_values_always_gives():
    import json
    import re
    from fraglab.tools import REPO_ROOT
    nb = json.loads((REPO_ROOT / "book" / "10_fa3_pipelining.ipynb").read_text())
    md = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    cited = set(re.findall(r"\{glue:text\}`([\w-]+)`", md))
    assert cited == set(report.CITED)
    assert cited <= set(report.glue_values({"results": {}}))      # even without a record


def test_glue_counts_power_capped_comparisons():
    def row(mhz, capped):
        return {"N": 4096, "d": 128, "causal": False,
                "tflops": {"fa3_nooverlap": 500.0, "fa3_pingpong": 600.0, "cudnn": 640.0},
                "comparison": {"clocks": {"sm_mhz": mhz, "sm_max_mhz": 1980, "throttled": capped,
                                          "reasons": ["sw_power_cap"] if capped else []}}}
    res = {"headline": row(1845, True), "sweep": [row(1980, False), row(1755, True)]}
    g = report.glue_values({"results": res})
    assert (g["ch10-throttled"], g["ch10-comparisons"]) == ("2", "3")
    assert (g["ch10-sm-mhz-min"], g["ch10-sm-mhz-max"], g["ch10-headline-sm-mhz"]) == ("1755", "1980", "1845")
    assert g["ch10-pingpong-gain"] == "1.20x"
    assert report.glue_values({"results": {}})["ch10-throttled"] == "n/a"


def test_tune_sweep_picks_and_table(monkeypatch):
    """The tuning sweep's bookkeeping with a fake timer: every candidate launched, the fastest
    picked, x cuDNN from the same comparison, and the table config_for reads back."""
    from fraglab.fa3_pipelining import tuning

    launched = []

    def fake_launcher(q, k, v, *, causal, variant, key_tile, stages, consumers):
        launched.append((key_tile, stages, consumers))
        return (lambda: None), None
    monkeypatch.setattr(kernels, "attention_launcher", fake_launcher)

    class Base:
        def inputs(self, rng, shape, dtype="f16"):
            return None, [None, None, None]

        def callables(self, ts, qkv, causal, refused):
            return {"cudnn": lambda: None, "sdpa_flash": lambda: None}

    class T:
        def __init__(self, ms):
            self.median_ms = ms

    class Cmp:
        def __init__(self, runs):
            # the (64, 2) build is the fastest, cuDNN half as fast
            self.timings = {k: T(1.0 if k == "tma bc64 s2" else 2.0 if k == "cudnn" else 1.5)
                            for k in runs}
    monkeypatch.setattr(bench.timing, "compare", lambda runs, **kw: Cmp(runs))
    rows = bench.tune_sweep(Base(), None, lambda *a: None, sizes=(1024,), dims=(128,), quick=True)
    assert launched == [(c["key_tile"], c["stages"], c["consumers"])
                        for c in tuning.candidates(128)] * 2
    assert [r["pick"] for r in rows] == [{"key_tile": 64, "stages": 2, "consumers": 2}] * 2
    assert rows[0]["x_cudnn"] == pytest.approx(2.0)
    tab = tuning.table_of(rows)
    assert kernels.tma_config_for(128, 3000, True, tab) == {"key_tile": 64, "stages": 2,
                                                             "consumers": 2}
    assert kernels.tma_config_for(64, 3000, True, tab) == config.default_config("tma", 64)


def test_three_consumers_only_where_their_registers_hold():
    """-DFA3_CONSUMERS=3: 64-key tiles at d 64 and 128; refused elsewhere, and for other rungs."""
    cfg = tuning.build_config("tma", 64, 1000, False, 2, 64, 3)
    assert (cfg.consumers, cfg.defines) == (3, {"FA3_STAGES_DEF": 2, "FA3_TMA_BC64": 64,
                                                "FA3_CONSUMERS": 3})
    assert (cfg.rows, cfg.threads) == (192, 512)
    with pytest.raises(ValueError, match="64-key tiles"):
        tuning.build_config("tma", 64, 1000, False, 2, 128, 3)
    with pytest.raises(ValueError, match="64-key tiles"):
        tuning.build_config("tma", 256, 1000, False, 2, 64, 3)
    with pytest.raises(ValueError, match="only the tma rung"):
        tuning.build_config("pingpong", 64, 1000, False, 3, None, 3)
    assert config.smem_bytes("tma", 128, 4, 64, 3) == 1024 + 192 * 128 * 2 + 8 * 64 * 128 * 2 + 8 * 17
    assert {"key_tile": 64, "stages": 4, "consumers": 3} in tuning.candidates(128)
    assert all(c["consumers"] == 2 for c in tuning.candidates(256))
