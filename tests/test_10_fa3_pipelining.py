"""Topic 10_fa3_pipelining without running a kernel: every file compiles for sm_90a (and traps
elsewhere), registers and spills, HGMMA and no HMMA, the SASS evidence of the overlap, the
swizzle model, and the wrapper's errors (no Hopper, bad arguments)."""
import re
from functools import lru_cache

import numpy as np
import pytest

from fraglab import device, launch, toolchain
from fraglab import fa3_pipelining as fa3
from fraglab.fa3_pipelining import bench, kernels, report, sass_evidence

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
            assert kernels.smem_bytes(v, d) <= 227 * 1024


def test_d256_variants_and_refusals():
    """d = 256 exists where the variant's file has FA3_KERNELS_D256; elsewhere the name is
    refused with the reason (before any compile)."""
    have = [v for v in fa3.VARIANTS if 256 in kernels.head_dims(v)]
    assert have == ["tma"]
    assert kernels.stages_for(256) == 2 and kernels.stages_for(128) == kernels.STAGES
    with pytest.raises(ValueError, match="pingpong.*no d = 256.*spill.*variant='tma'"):
        kernels.kernel_name("pingpong", "f16", 256)
    assert kernels.kernel_name("tma", "bf16", 256) == "fa3_tma_bf16_d256"


#: A variant's file compiled with its FA3_KERNELS line turned into globals: the key tiles the
#: compiler instantiates, Fa3Config's shared memory for them, and the launch constants.
PROBE = r"""
#include "10_fa3_pipelining_attention.cuh"
#undef FA3_KERNELS
#define FA3_KERNELS(VARIANT, MAINLOOP, BC64, BC128)                              \
    extern "C" __device__ const int probe_bc64 = BC64;                            \
    extern "C" __device__ const int probe_bc128 = BC128;                          \
    extern "C" __device__ const int probe_smem64 = Fa3Config<64, BC64>::SMEM;     \
    extern "C" __device__ const int probe_smem128 = Fa3Config<128, BC128>::SMEM;  \
    extern "C" __device__ const int probe_br = FA3_BR;                            \
    extern "C" __device__ const int probe_threads = FA3_THREADS;                  \
    extern "C" __device__ const int probe_stages = FA3_STAGES;
#undef FA3_KERNELS_D256
#define FA3_KERNELS_D256(VARIANT, MAINLOOP, BC256)                                \
    extern "C" __device__ const int probe_bc256 = BC256;                          \
    extern "C" __device__ const int probe_smem256 = Fa3Config<256, BC256>::SMEM;  \
    extern "C" __device__ const int probe_stages256 = Fa3Config<256, BC256>::STAGES;
#include "10_fa3_pipelining_VARIANT.cu"
"""


@pytest.mark.parametrize("stages", [None, 2])
@pytest.mark.parametrize("variant", fa3.VARIANTS)
def test_python_constants_are_the_kernels(variant, stages):
    """KEY_TILE, smem_bytes, BR, THREADS and STAGES, as the compiler sees the kernel files: each
    value read back from the PTX of the probe (the header's default ring depth, and 2)."""
    b = toolchain.compile(f"fa3_probe_{variant}", "sm_90a",
                          source=PROBE.replace("VARIANT", variant),
                          defines=None if stages is None else {"FA3_STAGES_DEF": stages})
    got = {m[0]: int(m[1]) for m in re.findall(r"\.u32 probe_(\w+) = (\d+);", b.ptx)}
    depth = kernels.STAGES if stages is None else stages
    want = {"bc64": kernels.KEY_TILE[variant][64], "bc128": kernels.KEY_TILE[variant][128],
            "smem64": kernels.smem_bytes(variant, 64, depth),
            "smem128": kernels.smem_bytes(variant, 128, depth),
            "br": kernels.BR, "threads": kernels.THREADS, "stages": depth}
    if 256 in kernels.head_dims(variant):
        want.update(bc256=kernels.KEY_TILE[variant][256], smem256=kernels.smem_bytes(variant, 256, depth),
                    stages256=kernels.stages_for(256, depth))
    assert got == want


@pytest.mark.parametrize("cc", [(8, 0), (8, 9), (10, 0), (12, 0)])
def test_wrapper_refuses_everything_but_hopper(monkeypatch, cc):
    monkeypatch.setattr(device, "target_cc", lambda *a, **k: cc)
    q = np.zeros((1, 1, 64, 64), np.float16)
    with pytest.raises(RuntimeError, match="needs a Hopper GPU, compute capability 9.0, sm_90a"):
        fa3.attention(q, q, q)
    with pytest.raises(RuntimeError, match="sm_90a"):
        fa3.wgmma_gemm(np.zeros((64, 64), np.float16), np.zeros((64, 64), np.float16))


def _arrays(shape=(1, 1, 64, 64), dtype=np.float16):
    return [launch.to_device(np.zeros(shape, dtype)) for _ in range(3)]


def _hopper_here():
    try:
        kernels.require_hopper()
        return True
    except RuntimeError:
        return False


needs_hopper = pytest.mark.skipif(not _hopper_here(), reason="no sm_90a here (GPU or interpreter)")


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
    assert kernels.tma_config_for(64, 3000, True, tab) == kernels.tma_default_config(64)


def test_three_consumers_only_where_their_registers_hold():
    """-DFA3_CONSUMERS=3: 64-key tiles at d 64 and 128; refused elsewhere, and for other rungs."""
    assert kernels.build_config("tma", 64, 1000, False, 2, 64, 3)[2:] == (
        3, {"FA3_STAGES_DEF": 2, "FA3_TMA_BC64": 64, "FA3_CONSUMERS": 3})
    with pytest.raises(ValueError, match="64-key tiles"):
        kernels.build_config("tma", 64, 1000, False, 2, 128, 3)
    with pytest.raises(ValueError, match="64-key tiles"):
        kernels.build_config("tma", 256, 1000, False, 2, 64, 3)
    with pytest.raises(ValueError, match="only the tma rung"):
        kernels.build_config("pingpong", 64, 1000, False, 3, None, 3)
    assert kernels.smem_bytes("tma", 128, 4, 64, 3) == 1024 + 192 * 128 * 2 + 8 * 64 * 128 * 2 + 8 * 17
    from fraglab.fa3_pipelining import tuning
    assert {"key_tile": 64, "stages": 4, "consumers": 3} in tuning.candidates(128)
    assert all(c["consumers"] == 2 for c in tuning.candidates(256))
