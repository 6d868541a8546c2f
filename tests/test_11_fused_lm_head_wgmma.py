"""Topic 11_fused_lm_head, the forward's wgmma rung (``kernels/11_fused_lm_head_wgmma.cu``,
sm_90a): its constants, its build (no spill, no local memory, setmaxnreg honoured, no serialized
wgmma), the SASS of its main loop (4 HGMMA a step, the row reduction's SHFL, no store), its traps
off sm_90a, its Problem on the PTX interpreter (small cases) and on a Hopper GPU (every case),
wrong kernels that must fail, and the wrapper's choice of rung."""
import re
from functools import lru_cache

import numpy as np
import pytest

from fraglab import device, runs_where, sass, toolchain
from fraglab import fused_lm_head as topic
from fraglab.fused_lm_head import kernels, problems, wgmma

PROBLEM = topic.PROBLEMS["fused_linear_cross_entropy_wgmma"]
FORWARD = [wgmma.kernel_name(t, cap) for t in ("f16", "bf16") for cap in (False, True)]
#: The backward's G kernels (the "wgmma" rung of fraglab.fused_lm_head.backward): the same
#: mainloop, G's epilogue; their Problem and mutants are in test_11_fused_lm_head_backward.py.
GRAD = [f"lmhead_wgmma_g_{t}" + ("_softcap" if cap else "") for t in ("f16", "bf16")
        for cap in (False, True)]


@lru_cache(maxsize=None)
def _build(arch="sm_90a"):
    return toolchain.compile(wgmma.FILE, arch)


def test_the_launch_numbers_are_read_back_from_the_kernel_files():
    """The Hopper rungs' numbers (lmh_wgmma_*, lmh_wgmma_gemm_*) are their files', the same on
    every target and in the tma rung's files, which include them; the module's names read them."""
    c, g = wgmma.constants(), wgmma.constants(gemm=True)
    for name, want in ((wgmma.FILE, c), (wgmma.TMA_FILE, c), (wgmma.GEMM_FILE, g),
                       (wgmma.GEMM_TMA_FILE, g)):
        for arch in ("sm_80", "sm_90a"):
            assert toolchain.compile(name, arch).constants("lmh_") == want, (name, arch)
    assert (wgmma.BM, wgmma.BN, wgmma.BK, wgmma.STAGES, wgmma.THREADS, wgmma.SMEM_BYTES,
            wgmma.G_SMEM_BYTES) == tuple(c[f"lmh_wgmma_{k}"] for k in
                                         ("bm", "bn", "bk", "stages", "threads", "smem", "g_smem"))
    assert (wgmma.GEMM_BM, wgmma.GEMM_BN, wgmma.GEMM_BK, wgmma.GEMM_STAGES, wgmma.GEMM_THREADS,
            wgmma.GEMM_SMEM_BYTES) == tuple(g[f"lmh_wgmma_gemm_{k}"] for k in
                                            ("bm", "bn", "bk", "stages", "threads", "smem"))
    # the ring holds every stage's tiles and fits an sm_90 block; the G kernel's votes fit after it
    for x, ring in ((c, "lmh_wgmma_"), (g, "lmh_wgmma_gemm_")):
        tiles = x[ring + "stages"] * (x[ring + "bm"] + x[ring + "bn"]) * x[ring + "bk"] * 2
        assert tiles < x[ring + "smem"] <= 227 * 1024
        # the registers setmaxnreg hands out fit the register file
        assert 128 * x[ring + "producer_regs"] + 256 * x[ring + "consumer_regs"] <= 65536
    assert c["lmh_wgmma_smem"] < c["lmh_wgmma_g_smem"] <= 227 * 1024
    assert kernels.VARIANTS == ("mma", "wgmma", "tma") and kernels.FINAL == "tma"


def test_builds_for_sm90a_without_spills_or_serialized_wgmma():
    """No spill, no local memory, 168 registers at entry (the cap of __launch_bounds__(384, 1));
    ptxas honours setmaxnreg (no C7508) and keeps the wgmma asynchronous (no C7510-C7520
    'wgmma serialized' note: a lane-0-only mbarrier arrival while a wgmma is in flight gives
    C7518)."""
    b = _build()
    assert sorted(b.kernels) == sorted(FORWARD + GRAD)
    for k in FORWARD + GRAD:
        r = b.resources[k]
        assert r["spill_stores"] == r["spill_loads"] == r["stack_frame"] == 0, (k, r)
        assert r["registers"] <= 168, (k, r)
        assert b.classes(k)["local"] == 0, k
    assert "C7508" not in b.log, "ptxas ignored setmaxnreg"
    assert not re.search(r"C75(1\d|20)", b.log), b.log


def _consumer_and_producer_registers(listing: str) -> tuple[int, int]:
    """Registers named in the consumers' part (after setmaxnreg.inc) and the producer's (after
    setmaxnreg.dec) of a listing: the highest R index + 1 of each."""
    lines = listing.splitlines()
    inc = next(i for i, x in enumerate(lines) if "USETMAXREG.TRY_ALLOC" in x)
    dec = next(i for i, x in enumerate(lines) if "USETMAXREG.DEALLOC" in x)
    top = [max((int(r) for x in part for r in re.findall(r"\bR(\d+)\b", x)), default=-1) + 1
           for part in ((lines[inc:dec], lines[dec:]) if inc < dec else (lines[inc:], lines[dec:inc]))]
    return top[0], top[1]


def test_each_role_stays_within_its_setmaxnreg():
    c = wgmma.constants()
    for k in FORWARD + GRAD:
        consumer, producer = _consumer_and_producer_registers(_build().sass(k))
        assert 128 + 16 < consumer <= c["lmh_wgmma_consumer_regs"], (k, consumer)   # 128 accumulators
        assert producer <= c["lmh_wgmma_producer_regs"], (k, producer)


def _loops(listing: str) -> list[list[str]]:
    """The opcodes of every loop of a listing (a backward branch closes one; ptxas puts the
    mbarrier waits' retries out of line after the exit, so some spans reach past the loops)."""
    lines = sass.listing(listing, padding=True)
    return [[sass.base_opcode(t) for t in lines[a:b + 1]] for a, b in sass.loop_spans(listing)]


@pytest.mark.parametrize("kernel", FORWARD)
def test_main_loops_are_hgmma_and_the_row_reduction_stays_in_registers(kernel):
    """The chunk loop (the tightest loop with an HGMMA) holds whole steps of 4 HGMMA (k = 64 =
    4 x 16; ptxas unrolls it) and nothing of the epilogue; the tile loop (the tightest holding
    every HGMMA) adds the tile's epilogue: the 2 x 2 SHFL of the quad reductions (max of rows g
    and g + 8), an ex2 (MUFU) per logit, and no store to shared, global or local memory and no
    shared load: no logit leaves the registers. What may leave is one maximum a warp and
    128-word block (the backward filter's block maxima, when asked): 5 xor-SHFL and two
    reductions into global memory (REDG: the float maximum as an integer max or min) a block."""
    b = _build()
    total = b.opcodes(kernel)["HGMMA"]
    loops = _loops(b.sass(kernel))
    chunk = min((x for x in loops if "HGMMA" in x), key=len)
    tile = min((x for x in loops if x.count("HGMMA") == total), key=len)
    assert chunk.count("HGMMA") % 4 == 0 and chunk.count("HGMMA") >= 4, kernel
    assert not {"SHFL", "MUFU"} & set(chunk), kernel
    blocks = wgmma.BN // 128
    assert tile.count("SHFL") == 4 + 5 * blocks and tile.count("MUFU") >= wgmma.BN // 2, kernel
    assert tile.count("REDG") == 2 * blocks and "REDG" not in chunk, kernel
    memory = {"STS", "STG", "STL", "ST", "LDS", "LDL", "RED", "ATOM", "ATOMG"}
    assert not (memory | {"HMMA"}) & (set(tile) | set(chunk)), kernel


def test_the_backward_gemms_build_without_spills_on_hgmma():
    """The wgmma rung's dw and dh GEMMs: no spill or local memory, setmaxnreg honoured, wgmma
    left asynchronous, and their k loop whole steps of 4 HGMMA with no HMMA and no store."""
    b = toolchain.compile(wgmma.GEMM_FILE, "sm_90a")
    names = [f"lmhead_wgmma_{k}_{t}" for k in ("dw", "dh") for t in ("f16", "bf16")]
    assert sorted(b.kernels) == sorted(names)
    assert "C7508" not in b.log and not re.search(r"C75(1\d|20)", b.log), b.log
    c = b.constants("lmh_")
    for k in names:
        r = b.resources[k]
        assert r["spill_stores"] == r["spill_loads"] == r["stack_frame"] == 0, (k, r)
        assert b.classes(k)["local"] == 0, k
        consumer, producer = _consumer_and_producer_registers(b.sass(k))
        assert consumer <= c["lmh_wgmma_gemm_consumer_regs"], k
        assert producer <= c["lmh_wgmma_gemm_producer_regs"], k
        loop = min((x for x in _loops(b.sass(k)) if "HGMMA" in x), key=len)
        assert loop.count("HGMMA") % 4 == 0 and not {"HMMA", "STG", "STS"} & set(loop), k
    for arch in ("sm_80", "sm_90"):
        other = toolchain.compile(wgmma.GEMM_FILE, arch)
        assert all("HGMMA" not in other.opcodes(k) for k in names), arch


@pytest.mark.parametrize("kernel", GRAD)
def test_the_g_kernels_main_loop_is_the_forwards(kernel):
    """The G kernel's chunk loop is the forward's (whole steps of 4 HGMMA, nothing else of
    note), and G leaves the registers only after it: its stores (STG) and the votes' shared
    atomic follow the last HGMMA."""
    b = _build()
    loops = _loops(b.sass(kernel))
    chunk = min((x for x in loops if "HGMMA" in x), key=len)
    assert chunk.count("HGMMA") % 4 == 0 and chunk.count("HGMMA") >= 4, kernel
    assert not {"SHFL", "MUFU", "STG", "STS", "ATOMS", "HMMA"} & set(chunk), kernel
    ops = [sass.base_opcode(t) for t in sass.listing(b.sass(kernel), padding=True)]
    last = max(i for i, o in enumerate(ops) if o == "HGMMA")
    assert "STG" in ops[last:] and "STG" not in ops[:last], kernel


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_bodies_trap_off_sm90a(arch):
    b = toolchain.compile(wgmma.FILE, arch)
    for k in FORWARD + GRAD:
        ops = b.opcodes(k)
        assert "HGMMA" not in ops and ops.get("BPT", 0) + ops.get("EXIT", 0) >= 1, (k, ops)



@pytest.mark.gpu
@pytest.mark.parametrize("case", PROBLEM.cases, ids=[c.name for c in PROBLEM.cases])
def test_every_case_on_hopper(case, check_supported):
    check_supported(PROBLEM, case)


def _mutant(old: str, new: str) -> str:
    source = toolchain.kernel_path(wgmma.FILE).read_text()
    mutant = source.replace(old, new)
    assert mutant != source, old
    return mutant


@pytest.mark.parametrize("case, old, new, error", [
    # each split's last tile left out
    ("tiles_and_chunks", "min(t0 + a.tiles_per_split, n_tiles)",
     "min(t0 + a.tiles_per_split, n_tiles - 1)", "WRONG"),
    # the last k-step of every chunk left out
    ("random", "for (int ks = 0; ks < LMW_BK / 16; ++ks)", "for (int ks = 0; ks < LMW_BK / 16 - 1; ++ks)",
     "WRONG"),
    # the target's logit looked for one column off
    ("random", "if (t == 8 * j) zt[0][r]", "if (t == 8 * j + 1) zt[0][r]", "WRONG"),
    # a stage released while the wgmma that reads it is still in flight (the producer refills it)
    ("tiles_and_chunks", "wgmma_wait<1>();                // chunk kc - 1 has landed\n"
     "                release(prev);", "release(prev);\n                wgmma_wait<1>();",
     "wgmma|race|in flight|WgmmaHazard"),
])
def test_wrong_kernels_fail(rng, monkeypatch, case, old, new, error):
    monkeypatch.setenv("FRAGLAB_MODE", "cpu")
    mutant = _mutant(old, new)
    with pytest.raises(Exception, match=error):
        PROBLEM.check(case, rng, run=lambda **inp: problems.run_wgmma(**inp, source=mutant))


def test_the_wrapper_picks_the_rung(rng, monkeypatch):
    """The interpreter runs the mma rung unless told; variant= is checked; a GPU other than
    Hopper is refused the wgmma rung with the reason, and gets the mma rung by default."""
    monkeypatch.setenv("FRAGLAB_MODE", "cpu")
    assert kernels.default_variant() == "mma"
    inp = problems.lm_head_inputs(rng, n=9, v=40, d=32)
    h, w, t = inp["h"], inp["w"], inp["targets"]
    with pytest.raises(ValueError, match="variant"):
        topic.fused_linear_cross_entropy(h, w, t, variant="hopper")
    ref = problems.lm_head_reference(**inp)
    for variant in (None, "mma", "wgmma"):
        got = topic.fused_linear_cross_entropy(h, w, t, reduction="none", variant=variant)
        assert np.allclose(got, ref, rtol=2e-5, atol=0), variant
    monkeypatch.delenv("FRAGLAB_MODE")
    for cc, want in (((8, 0), "mma"), ((9, 0), "tma"), ((12, 0), "mma")):
        with runs_where.simulated_gpu(cc):
            assert kernels.default_variant() == want, cc
            ok, why = device.can_run(wgmma.ARCH, wgmma.NEEDS, wgmma.INSTEAD.format("mma"))
            assert ok == (cc == (9, 0)) and (ok or "sm_90a" in why and "variant='mma'" in why), cc


def test_the_rung_is_refused_before_a_launch_off_hopper(monkeypatch):
    with runs_where.simulated_gpu((8, 0)):
        assert not device.can_run(wgmma.ARCH)[0]
        ok, why = PROBLEM.supported(PROBLEM.case("random"))
        assert not ok and "Hopper" in why
