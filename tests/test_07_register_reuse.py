"""Topic 07_register_reuse: the SGEMM ladder against float64 (GPU), its SASS and resources
(anywhere), and every rejected argument."""
import re
from fractions import Fraction

import numpy as np
import pytest

from fraglab import ARCHES, launch, ncu, sass, toolchain, tools
from fraglab import register_reuse as rr
from fraglab.device import gpu_available
from fraglab.register_reuse import bench, kernels, problems, sass_counts

_CASES = [(k, c) for k, p in rr.PROBLEMS.items() for c in p.cases]


@pytest.mark.gpu
@pytest.mark.parametrize("variant, case", _CASES, ids=[f"{k}-{c}" for k, c in _CASES])
def test_every_rung_matches_float64(variant, case, rng):
    """Each rung x case against NumPy float64 (outputs poisoned with NaN first)."""
    rr.PROBLEMS[variant].check(case, rng)


@pytest.mark.gpu
def test_cublas_is_fp32_not_tf32(rng):
    """The yardstick: cupy.matmul float32 with TF32 off is as accurate as FP32 (TF32 would be
    ~1e-3 off at K = 1024)."""
    assert rr.cublas_settings().get("tf32") is False
    p = rr.PROBLEMS["naive"]
    p.check(problems.Case("k1024", m=256, n=256, k=1024), rng,
            run=lambda a, b, **_: rr.cublas(*map(rr.kernels.launch.to_device, (a, b))))


@pytest.mark.gpu
def test_tile_overrides_and_the_sweep_space_run(rng):
    """A few non-default tiles give the right answer too (what the sweep relies on)."""
    space = bench.sweep_space()
    for t in (space[0], space[len(space) // 2], space[-1]):
        rr.PROBLEMS["autotuned"].check("square512", rng,
                                       run=lambda a, b, **_: rr.sgemm(
                                           *map(rr.kernels.launch.to_device, (a, b)),
                                           variant="autotuned", **t))


def test_a_wrong_product_fails_its_problem(rng):
    p = rr.PROBLEMS["smem"]
    with pytest.raises(AssertionError, match="WRONG"):       # drops the last k
        p.check("square256", rng, run=lambda a, b, **_: a[:, :-1].astype(np.float64) @ b[:-1])
    def unwritten(a, b, **_):
        c = a.astype(np.float64) @ b
        c[5, 7] = np.nan
        return c
    with pytest.raises(AssertionError, match="WRONG"):
        p.check("ragged", rng, run=unwritten)


def test_problems_cover_the_edge_cases():
    names = {c.name for c in rr.PROBLEMS["naive"].cases}
    assert {"square256", "wide", "tall_skinny", "ragged", "k1", "odd", "large_magnitude"} <= names
    for k in kernels.VARIANTS:
        bm, bn, bk = kernels.block_tile(k)
        for c in rr.PROBLEMS[k].cases:
            if k not in (*kernels.RAGGED_OK, "split_k"):   # the float4 rungs 6-9: whole tiles
                assert c.params["m"] % bm == c.params["n"] % bn == c.params["k"] % bk == 0, c


def test_tolerance_grows_with_k():
    assert problems.tolerance(problems.Case("a", m=1, n=1, k=256)) == 4 * 256 * 2.0 ** -24
    assert problems.tolerance(problems.Case("b", m=1, n=1, k=16384)) == pytest.approx(3.9e-3, rel=1e-2)


def test_error_is_scaled_by_the_terms_and_catches_a_missing_term(rng):
    """A dot product that cancels to nearly zero passes; one that drops a term fails."""
    a = np.array([[1.0, -1.0, 1e-3]], np.float32)
    b = np.array([[1.0], [1.0], [1.0]], np.float32)
    ref = problems.reference(a, b)
    inp = {"a": a, "b": b}
    assert problems.scaled_error((a @ b).astype(np.float32), ref, inp) < 1e-7
    case = problems.Case("c", m=64, n=64, k=64)
    x = problems.inputs(rng, 64, 64, 64)
    short = x["a"][:, 1:] @ x["b"][1:, :]                  # term k = 0 missing
    assert problems.scaled_error(short, problems.reference(**x), x) > problems.tolerance(case)


# --------------------------------------------------------------------------------------------
# Compile, SASS, resources (any machine)
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("variant", kernels.VARIANTS)
def test_every_rung_compiles_with_its_tiles(variant, arch):
    b = toolchain.compile_check(kernels.kernel_file(variant), arch, defines=kernels.tiles(variant))
    assert f"sgemm_{variant}" in b.kernels


@pytest.mark.parametrize("variant", kernels.VARIANTS[:8])
def test_tiles_table_matches_the_cu_defaults(variant):
    """TILES is the one home of the tile sizes: the #ifndef defaults of rungs 1-8 give the same
    cubin as the defines the wrapper passes."""
    plain = toolchain.compile(kernels.kernel_file(variant), "sm_90")
    assert plain.sass(f"sgemm_{variant}").split(".text.", 1)[1] == \
        kernels.build(variant, "sm_90").sass(f"sgemm_{variant}").split(".text.", 1)[1]


@pytest.mark.parametrize("variant", kernels.VARIANTS)
def test_launch_numbers_are_read_back_from_the_build(variant):
    """The launch takes threads, the block's tile of C and the dynamic shared memory from the
    build of the tiles it passes (SGEMM_LAUNCH in the rung file); the chooser's checks before a
    build (threads, shared_bytes, block_tile) give the same numbers, for the rung's tiles and
    for every configuration rung 10's table chooses from."""
    configs = [kernels.TILES[variant]]
    if variant in ("autotuned", "split_k"):
        configs += [{**kernels.TILES[variant], **c} for c in kernels.SHAPE_CONFIGS]
    if variant == "split_k":
        configs.append({**kernels.TILES["split_k"], "SWIZZLE": 1, "REGDB": 1})
    for t in configs:
        t = kernels.tiles(variant, **t)
        got = toolchain.compile(kernels.kernel_file(variant), "sm_80",
                                defines=kernels.defines(t)).constants("sgemm_launch_")
        bm, bn, _ = kernels.block_tile(variant, t)
        want = {"threads": kernels.threads(variant, t), "tile_m": bm, "tile_n": bn,
                "smem": kernels.dynamic_smem(variant, t)}
        assert got == {f"sgemm_launch_{k}": v for k, v in want.items()}, t


def test_the_launch_follows_a_tile_changed_in_the_rung_file_only():
    """tile1d's threads expression changed in its .cu text alone (one output a thread down a
    column of 4: twice the threads): the launch reads the new block from the module."""
    src = (tools.KERNELS_DIR / "07_register_reuse_tile1d.cu").read_text()
    assert src.count("#define THREADS (BM * BN / TM)") == 1
    mutant = src.replace("#define THREADS (BM * BN / TM)", "#define THREADS (2 * BM * BN / TM)")
    t = kernels.tiles("tile1d")
    own = launch.constants(kernels.kernel_file("tile1d"), "sgemm_launch_", defines=t)
    got = launch.constants("07_register_reuse_tile1d_mutant", "sgemm_launch_", source=mutant,
                           defines=t)
    assert got["sgemm_launch_threads"] == 2 * own["sgemm_launch_threads"] \
        == 2 * kernels.threads("tile1d", t)


REPORTS = {}


def _report(variant):
    if variant not in REPORTS:
        REPORTS[variant] = sass_counts.report(variant, "sm_90")
    return REPORTS[variant]


@pytest.mark.parametrize("variant", kernels.VARIANTS)
def test_no_local_memory_at_default_tiles(variant):
    r = _report(variant)
    assert r["spill_bytes"] == 0 and r["stack_frame"] == 0
    assert r["loop"]["local"] == 0
    assert kernels.build(variant, "sm_90").classes(f"sgemm_{variant}")["local"] == 0


def test_naive_and_coalesced_issue_two_global_loads_per_ffma_and_no_shared():
    for k in ("naive", "coalesced"):
        r = _report(k)
        assert r["loop"]["lds"] == 0 and r["ldg_per_ffma"] == 2.0 and r["loop"]["ffma"] >= 4


def test_smem_moves_two_shared_words_per_ffma():
    """The napkin's 2:1: one As and one Bs value per FFMA (ptxas fetches As[row][k..k+3] with
    LDS.128, so fewer instructions, but the words per FFMA are exactly 2)."""
    r = _report("smem")
    assert r["words_per_ffma"] == pytest.approx(2.0)
    assert r["napkin_words_per_ffma"] == 2.0
    assert 1.0 <= r["lds_per_ffma"] <= 2.0
    assert r["loop"]["bar"] == 2


def test_tile1d_moves_nine_words_per_eight_ffma():
    """Rung 4 (the seed's kernel 4): one Bs value and TM = 8 As values feed 8 FFMAs: 9/8."""
    r = _report("tile1d")
    assert Fraction(r["loop"]["lds_words"], r["loop"]["ffma"]) == Fraction(9, 8)
    assert sass_counts.napkin("tile1d") == Fraction(9, 8)
    assert r["lds_per_ffma"] < _report("smem")["lds_per_ffma"] / 2


@pytest.mark.parametrize("variant", ["tile2d", "vectorized", "warptile", "double_buffer",
                                    "autotuned", "split_k"])
def test_thread_tiles_move_their_napkin_words_per_ffma(variant):
    r = _report(variant)
    assert r["words_per_ffma"] == pytest.approx(r["napkin_words_per_ffma"])
    assert r["words_per_ffma"] <= 0.32 and r["lds_per_ffma"] <= 0.08


def test_vectorized_rungs_use_128_bit_loads():
    for k in ("vectorized", "warptile", "double_buffer", "autotuned", "split_k"):
        ops = kernels.build(k, "sm_90").opcodes(f"sgemm_{k}", base=False)
        assert any(o.startswith("LDG.E.128") for o in ops), k
        assert ops["LDS.128"] > 0 and ops.get("LDS", 0) == 0, k
        assert any(o.startswith("STG.E.128") for o in ops), k
    scalar = kernels.build("tile2d", "sm_90").opcodes("sgemm_tile2d", base=False)
    assert not any(o.startswith("LDG.E.128") for o in scalar)


def test_double_buffer_needs_one_barrier_per_step():
    assert _report("warptile")["loop"]["bar"] == 2
    assert _report("double_buffer")["loop"]["bar"] == 1
    assert _report("split_k")["loop"]["bar"] == 1


def test_main_loop_is_found_from_the_back_edge():
    text = kernels.build("smem", "sm_90").sass("sgemm_smem")
    spans = sass.loop_spans(text)
    assert spans and all(first < last for first, last in spans)
    body = sass.main_loop(text)
    assert re.match(r"(@!?U?P\d\s+)?BRA", body[-1]) and "BAR.SYNC" in " ".join(body)


def test_occupancy_arithmetic_on_sm90():
    # 1024 threads x 32 registers: two blocks fill the 2048 threads
    assert sass.occupancy(32, 8192, 1024)["occupancy"] == 1.0
    # 256 threads x 128 registers: 32768 registers a block -> 2 blocks, 16 of 64 warps
    o = sass.occupancy(128, 16 * 1024, 256)
    assert o["blocks_per_sm"] == 2 and o["occupancy"] == 0.25 and o["limited_by"] == "registers"
    # shared memory binds: 100 KB a block (+1 KB reserved) -> 2 blocks in 228 KB
    assert sass.occupancy(32, 100 * 1024, 128)["limited_by"] == "shared"
    # the seed's kernel 4 at its 37 registers: 512 threads, 40 registers a thread -> 3 blocks
    assert sass.occupancy(37, 4096, 512)["blocks_per_sm"] == 3


def test_seed_figures_are_kept_with_their_citation():
    assert rr.SEED["of_cublas"] == {"smem": 0.128, "tile1d": 0.365, "tile2d": 0.687}
    assert rr.SEED["speedup_tile1d_over_smem"] == 2.8 and "seeds/002" in rr.SEED["citation"]


def test_ncu_raw_csv_is_parsed():
    out = ('==PROF== Connected\n"ID","Kernel Name","gpu__time_duration.sum",'
           '"smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio",'
           '"smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio"\n'
           '"","","ns","ratio","ratio"\n"0","sgemm_smem","1,234.5","3.25","0.5"\n')
    r = ncu.parse_raw_csv(out)
    fam = r["stalls"]["smsp__average_warps"]
    assert fam == {"mio_throttle": 3.25, "barrier": 0.5}
    assert r["metrics"]["gpu__time_duration.sum"] == 1234.5
    with pytest.raises(ValueError, match="no kernel row"):
        ncu.parse_raw_csv("==PROF== nothing\n")


def test_sweep_space_is_valid_and_small():
    space = bench.sweep_space()
    assert 20 <= len(space) <= 40
    assert all(kernels.tiles("autotuned", **t) == t for t in space)


def test_autotuned_tiles_are_a_sweep_configuration():
    assert kernels.TILES["autotuned"] in bench.sweep_space()


def test_bench_summary_reads_results():
    res = {"ladder": [{"shape": [64, 64, 64], "rows": {"cublas": {"tflops": 2.0, "of_cublas": 1.0},
                                                      "smem": {"tflops": 0.5, "of_cublas": 0.25}}}]}
    text = bench.summary(res)
    assert "64x64x64" in text and "0.5 (25%)" in text and "tile1d" in text


# --------------------------------------------------------------------------------------------
# Rejected arguments (checked before any launch)
# --------------------------------------------------------------------------------------------

def _cupy():
    if not gpu_available():
        pytest.skip("building CuPy arrays needs a GPU")
    import cupy
    return cupy


def test_the_wrong_kind_of_array_is_rejected(foreign):
    make, words = foreign
    a = make(np.zeros((64, 64), np.float32))
    with pytest.raises(TypeError, match=words):
        rr.sgemm(a, a, variant="smem")


def test_unknown_variant_is_rejected():
    with pytest.raises(ValueError, match="variant must be one of"):
        rr.sgemm(None, None, variant="cutlass")


@pytest.mark.parametrize("variant, over, msg", [
    ("smem", {"BM": 64}, "no tile parameter BM"),
    ("tile1d", {"TN": 8}, "no tile parameter TN"),
    ("tile1d", {"BM": 60}, "multiple of TM"),
    ("tile2d", {"BM": 512, "BN": 256}, "threads per block"),
    ("vectorized", {"TM": 6, "BM": 96}, "multiples of 4"),
    ("warptile", {"WM": 48}, "warp tile"),
    ("warptile", {"LM": 3}, "LM"),
    ("double_buffer", {"BK": 6}, "multiple of 4"),
    ("autotuned", {"BK": 256, "BM": 256, "BN": 256}, "shared memory"),
    ("autotuned", {"GROUP": 0}, "between 1 and"),
    ("autotuned", {"BM": 128.0}, "must be an int"),
])
def test_bad_tiles_are_rejected(variant, over, msg):
    with pytest.raises((ValueError, TypeError), match=msg):
        kernels.tiles(variant, **over)


#: Bad arrays: (name, how to make a and b from cupy, exception, message).
BAD_ARRAYS = [
    ("dtype", lambda cp: (cp.zeros((64, 64), cp.float64), cp.zeros((64, 64), cp.float32)),
     TypeError, "float32"),
    ("inner_dims", lambda cp: (cp.zeros((64, 32), cp.float32), cp.zeros((64, 32), cp.float32)),
     ValueError, "columns"),
    ("one_dim", lambda cp: (cp.zeros(64, cp.float32), cp.zeros((64, 8), cp.float32)),
     ValueError, "2 dimensions"),
    ("transposed", lambda cp: (cp.zeros((64, 64), cp.float32).T, cp.zeros((64, 64), cp.float32)),
     ValueError, "C-contiguous"),
    ("empty", lambda cp: (cp.zeros((0, 8), cp.float32), cp.zeros((8, 8), cp.float32)),
     ValueError, "at least 1"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("what, make, exc, msg", BAD_ARRAYS, ids=[b[0] for b in BAD_ARRAYS])
def test_bad_arrays_are_rejected(what, make, exc, msg):
    a, b = make(_cupy())
    with pytest.raises(exc, match=msg):
        rr.sgemm(a, b, variant="naive")


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["vectorized", "warptile", "double_buffer", "autotuned"])
def test_float4_rungs_reject_ragged_sizes_naming_the_multiple(variant):
    cp = _cupy()
    bm, bn, bk = kernels.block_tile(variant)
    a, b = cp.zeros((bm + 1, bk), cp.float32), cp.zeros((bk, bn), cp.float32)
    with pytest.raises(ValueError, match=f"M to be a multiple of BM = {bm}"):
        rr.sgemm(a, b, variant=variant)
    a, b = cp.zeros((bm, bk + 4), cp.float32), cp.zeros((bk + 4, bn), cp.float32)
    with pytest.raises(ValueError, match=f"K to be a multiple of BK = {bk}"):
        rr.sgemm(a, b, variant=variant)


@pytest.mark.gpu
def test_float4_rungs_reject_misaligned_views():
    cp = _cupy()
    buf = cp.zeros(128 * 8 + 1, cp.float32)
    a = buf[1:].reshape(128, 8)          # C-contiguous, but 4 bytes past a 16-byte boundary
    with pytest.raises(ValueError, match="16-byte aligned"):
        rr.sgemm(a, cp.zeros((8, 128), cp.float32), variant="vectorized")
