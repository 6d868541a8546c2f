"""Topic 11_fused_lm_head, the backward pass: dh and dw against their float64 reference (every case on
a GPU, the small ones on the PTX interpreter), wrong answers that must fail, the skip of negligible
tiles counted, the kernels' registers, the wrapper's checks, and the autograd Function against
PyTorch (skipped without torch)."""

import numpy as np
import pytest

from fraglab import launch, sass, toolchain
from fraglab import fused_lm_head as topic
from fraglab.fused_lm_head import backward, kernels, problems
from fraglab.problem import Case

PROBLEM = topic.PROBLEMS["linear_cross_entropy_backward"]
ATOMIC = topic.PROBLEMS["linear_cross_entropy_backward_atomic"]
WGMMA = topic.PROBLEMS["linear_cross_entropy_backward_wgmma"]
TMA = topic.PROBLEMS["linear_cross_entropy_backward_tma"]
DTYPES = ("f16", "bf16")
RUNGS = {"atomic": (backward.KERNELS, [backward.kernel_name(t, cap) for t in DTYPES
                                       for cap in (False, True)]),
         "chunked": (backward.CHUNKED, [f"lmhead_bwdc_{k}_{t}" for t in DTYPES
                                        for k in ("g", "dw", "dh")]
                     + [f"lmhead_bwdc_g_{t}_softcap" for t in DTYPES])}
TILE_HEADER = '#include "11_fused_lm_head_tile.cuh"'
GRAD_HEADER = '#include "11_fused_lm_head_grad.cuh"'
#: Four 128-word blocks a chunk, no filter: two of the wgmma G kernel's 256-word tiles a chunk.
FOUR_BLOCKS = Case("four blocks a chunk", n=20, v=600, d=32, chunk_bytes=2 * 20 * 128 * 4)


def test_the_wrapper_reads_the_kernel_files_constants():
    """The chunked rung's GEMM tile and both rungs' shared memory are their files' (lmh_gemm_*,
    lmh_g_smem, lmh_atomic_smem); the tile both rungs recompute is the forward's (its one home is
    kernels/11_fused_lm_head_config.cuh, which test_11_fused_lm_head reads)."""
    c = toolchain.compile(backward.CHUNKED, "sm_80").constants("lmh_")
    a = toolchain.compile(backward.KERNELS, "sm_80").constants("lmh_")
    assert (c["lmh_gemm_bn"], c["lmh_gemm_bk"], c["lmh_gemm_smem"], a["lmh_atomic_smem"]) == \
        (backward.GEMM_BN, backward.GEMM_BK, backward.GEMM_SMEM_BYTES, backward.SMEM_BYTES)
    assert (backward.BM, backward.BN, backward.THREADS) == (kernels.BM, kernels.BN, kernels.THREADS)
    assert c["lmh_g_smem"] == kernels.SMEM_BYTES < a["lmh_atomic_smem"] <= 227 * 1024


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("rung", sorted(RUNGS))
def test_no_spills_and_no_local_memory(arch, rung):
    name, names = RUNGS[rung]
    build = toolchain.compile(name, arch)
    for k in names:
        res = build.resources[k]
        assert res["registers"] <= 255 and res["spill_stores"] == res["spill_loads"] == 0, (k, res)
        assert build.classes(k)["local"] == 0, k


def _atomics(sass_text: str) -> int:
    return sum(n for op, n in sass.count_opcodes(sass_text).items() if op.startswith(("RED", "ATOM")))


def test_the_chunked_rung_has_no_float_atomics_and_no_vocabulary_buffer():
    """The chunked rung adds nothing with atomics (its only atomic counts skipped tiles) and
    allocates no (V, d) buffer: at Llama 3's head and N = 4096 its scratch is G's chunk, the
    flags and dh's FP32 sums, against the atomic rung's (V, d) and (n, d) FP32 sums."""
    build = toolchain.compile(backward.CHUNKED, "sm_90")
    atomic = toolchain.compile(backward.KERNELS, "sm_90")
    assert _atomics(atomic.sass("lmhead_bwd_bf16")) > 0          # the check can fail
    for k in ("lmhead_bwdc_dw_bf16", "lmhead_bwdc_dh_bf16"):
        assert _atomics(build.sass(k)) == 0, k
    n, v, d = 4096, 128256, 4096
    chunked = backward.scratch_bytes(n, v, d, "chunked")
    atomic = backward.scratch_bytes(n, v, d, "atomic")
    assert atomic == {"dh32": 4 * n * d, "dw32": 4 * v * d}
    tiles = backward.chunk_tiles(n, v)
    assert tiles == backward.CHUNK_BYTES // (2 * n * backward.BN) == 64
    assert chunked == {"G": 2 * n * tiles * 128, "flags": 32 * tiles, "dh32": 4 * n * d}
    assert sum(chunked.values()) < sum(atomic.values()) / 15
    assert backward.chunk_tiles(8, 300) == 3 and "dh32" not in backward.scratch_bytes(8, 300, 32)


def test_the_wgmma_rung_has_every_case_of_the_chunked_one():
    assert len(WGMMA.cases) == len(PROBLEM.cases) == len(TMA.cases)


#: The rungs the filter test runs (for chunked, atomic and wgmma it is also their Problem's small
#: "filter" case: tests/test_11_fused_lm_head.py's FILTER_ELSEWHERE leaves it to this test).
FILTER_VARIANTS = ["chunked", "atomic", "wgmma", "tma"]


@pytest.mark.parametrize("variant", FILTER_VARIANTS)
def test_the_filter_skips_tiles_within_tolerance(rng, monkeypatch, variant):
    """Peaky rows over 9 vocabulary tiles (the chunked rung: 3 chunks): the tiles with neither a
    target nor a peak are skipped (counted) and the gradients stay within tolerance; without the
    filter none is skipped."""
    monkeypatch.setenv("FRAGLAB_MODE", "cpu")
    case = PROBLEM.case("filter")
    for eps, skipped in ((case.params["filter_eps"], lambda s: s > 0), (None, lambda s: s == 0)):
        stats = {}
        PROBLEM.check("filter", rng,
                      run=lambda **inp: problems.run_backward(**{**inp, "filter_eps": eps},
                                                              stats=stats, variant=variant))
        assert stats["tiles"] == 9 and skipped(stats["skipped"]), (eps, stats)


def _with_header(source: str, old: str, new: str) -> str:
    """``source`` with G's step (11_fused_lm_head_grad.cuh, which the tile header includes) pasted
    in place of its include, ``old`` replaced by ``new`` in it (a mutant of the step every rung
    shares)."""
    grad = (toolchain.KERNELS_DIR / "11_fused_lm_head_grad.cuh").read_text()
    assert grad.count(old) == 1
    grad = grad.replace("#pragma once", "").replace(old, new)
    if source.count(TILE_HEADER) == 1:
        tile = (toolchain.KERNELS_DIR / "11_fused_lm_head_tile.cuh").read_text()
        assert tile.count(GRAD_HEADER) == 1
        source = source.replace(TILE_HEADER, tile.replace("#pragma once", ""))
    assert source.count(GRAD_HEADER) == 1
    return source.replace(GRAD_HEADER, grad)


@pytest.mark.parametrize("variant", ["chunked", "atomic"])
def test_wrong_answers_fail_the_problem(rng, monkeypatch, variant):
    """The check can fail: kernel mutants on the interpreter (the target's 1 not subtracted; the
    soft-cap's derivative left out; for the chunked rung, dh's earlier chunks dropped and a
    filtered tile's G read anyway), and the reference's gradients off by 1 %."""
    monkeypatch.setenv("FRAGLAB_MODE", "cpu")
    p = PROBLEM if variant == "chunked" else ATOMIC
    source = toolchain.kernel_path(RUNGS[variant][0]).read_text()
    mutants = [(_with_header(source, " - (col == tgt[mi][r] ? 1.0f : 0.0f)", ""), "random"),
               (_with_header(source, "dz = 1.0f - th * th;", "dz = 1.0f;"), "softcap_f16")]
    if variant == "chunked":
        for old, new, case in [("(mode & 1) ? dh32 : nullptr", "nullptr", "chunks"),
                               ("return flags[", "return 1 || flags[", "filter_cold")]:
            assert source.count(old) == 1
            mutants.append((source.replace(old, new), case))
    for mutant, case in mutants:
        with pytest.raises(AssertionError, match="WRONG"):
            p.check(case, rng, run=lambda **inp: problems.run_backward(**inp, source=mutant,
                                                                      variant=variant))

    def off(**inp):
        return {k: v * 1.01 for k, v in problems.backward_reference(**inp).items()}
    with pytest.raises(AssertionError, match="WRONG"):
        PROBLEM.check("random", rng, run=off)


@pytest.mark.parametrize("case, old, new", [
    ("random", " - (col == tgt[mi][r] ? 1.0f : 0.0f)", ""),      # in G's step: the target's 1 kept
    # G's columns from the block's place in its tile, not in the chunk (wrong past the first tile)
    (FOUR_BLOCKS, "128 * blk + 2 * c4", "128 * b + 2 * c4"),
    # a tile's half past the chunk written anyway (over the next row's columns)
    ("chunks", "if (blk >= a.nt) continue;", ""),
    # a kept block's G left unwritten (the GEMMs read the poison)
    ("blocks_and_chunks", "if (!keep[b]) continue;", "if (keep[b]) continue;"),
    # every block's vote cast for the tile's first block: second blocks that count skipped
    # (cold inputs: every tile's first block never counts and its second always does)
    ("filter_cold", "atomicOr(&vote[b], 1u)", "atomicOr(&vote[0], 1u)"),
])
def test_wrong_g_kernels_of_the_wgmma_rung_fail(rng, monkeypatch, case, old, new):
    """Mutants of the wgmma rung's G kernel (kernels/11_fused_lm_head_wgmma.cu) on the
    interpreter: each gives wrong gradients, or the interpreter stops it."""
    from fraglab.fused_lm_head import wgmma
    _mutant_fails(rng, monkeypatch, wgmma.FILE, case, old, new)


@pytest.mark.parametrize("case, old, new", [
    # dw's A read K-major: G^T's layout taken for G's
    ("random", "lmw::wgmma_mn<BF16, TRANS_A>(", "lmw::wgmma_mn<BF16, false>("),
    # both consumer warpgroups of dw on the first 64 words
    ("ragged", "desc_mnmajor(a + wg * LMG_BK * 128, LMG_BK, ks)", "desc_mnmajor(a, LMG_BK, ks)"),
    # the filter's skipped steps copied anyway: the ring's count and the consumers' differ
    # (cold inputs: half the k steps are skipped on every draw)
    ("filter_cold", "if (!counts(s)) continue;", ""),
    # dh's earlier chunks dropped
    ("chunks", "(mode & 1) ? dh32 : nullptr", "nullptr"),
    # a block with nothing to add leaving at once in the last chunk too: dh never rounded
    # (cold inputs, one block a chunk: the last block never counts)
    ("filter_cold_chunks", "live == 0 && prev != nullptr && out16 == nullptr",
     "live == 0 && prev != nullptr"),
    # rows of C past the chunk's words (dw) or past n (dh) written
    ("ragged", "if (row >= rows) continue;", ""),
    # B's rows past its end read instead of zeros
    ("ragged", "const bool ok = col_ok && b_row0 + k0 + r < b_rows;", "const bool ok = col_ok;"),
])
def test_wrong_gemms_of_the_wgmma_rung_fail(rng, monkeypatch, case, old, new):
    """Mutants of the wgmma rung's GEMMs (kernels/11_fused_lm_head_bwd_wgmma.cu) on the
    interpreter: wrong gradients, or the interpreter stops them (a hang, a read or write out of
    bounds)."""
    from fraglab.fused_lm_head import wgmma
    _mutant_fails(rng, monkeypatch, wgmma.GEMM_FILE, case, old, new)


def _mutant_fails(rng, monkeypatch, name, case, old, new):
    from fraglab.fused_lm_head import wgmma
    monkeypatch.setenv("FRAGLAB_MODE", "cpu")
    source = toolchain.kernel_path(name).read_text()
    if "tgt[mi]" in old:
        mutant = _with_header(source, old, new)
    else:
        assert source.count(old) == 1, old
        mutant = source.replace(old, new)
    sources = {wgmma.FILE: None, wgmma.GEMM_FILE: None, name: mutant}
    with pytest.raises(Exception, match="WRONG|race|hazard|out-of-bounds|deadlock|never|hang"):
        WGMMA.check(case, rng, run=lambda **inp: problems.run_backward_wgmma(**inp, source=sources))


def test_the_backward_picks_its_rung(rng, monkeypatch):
    """Without ``variant=`` the backward runs "tma" where the forward runs its tma rung
    (Hopper), "chunked" elsewhere (the interpreter too, which runs "wgmma" when asked); a GPU
    other than Hopper is refused "wgmma" before any launch, with the reason."""
    from fraglab import runs_where
    monkeypatch.setenv("FRAGLAB_MODE", "cpu")
    assert backward.default_variant() == "chunked"
    monkeypatch.delenv("FRAGLAB_MODE")
    for cc, want in (((8, 0), "chunked"), ((9, 0), "tma"), ((12, 0), "chunked")):
        with runs_where.simulated_gpu(cc):
            assert backward.default_variant() == want, cc
    with runs_where.simulated_gpu((8, 0)):
        ok, why = WGMMA.supported(WGMMA.case("random"))
        assert not ok and "Hopper" in why


def _inputs(xp, n=8, v=20, d=32):
    h = xp.zeros((n, d), xp.float16)
    return (h, xp.zeros((v, d), xp.float16), xp.zeros(n, xp.int64), xp.zeros(n, xp.float32))


@pytest.mark.parametrize("kw, exc, words", [
    (dict(grad=np.zeros(3, np.float32), reduction="none"), ValueError, r"shape \(8,\)"),
    (dict(grad=np.zeros(8, np.float32), reduction="mean"), ValueError, r"shape \(\)"),
    (dict(grad="1"), TypeError, "number or an array"),
    (dict(grad=np.zeros(8, np.int32), reduction="none"), TypeError, "floating-point"),
    (dict(lse=np.zeros(7, np.float32)), ValueError, "lse"),
    (dict(lse=np.zeros(8, np.float64)), TypeError, "lse"),
    (dict(filter_eps=0.0), ValueError, "filter_eps"),
    (dict(filter_eps="auto"), TypeError, "filter_eps"),
    (dict(reduction="avg"), ValueError, "reduction"),
])
def test_bad_arguments_are_rejected_before_any_launch(xp, kw, exc, words):
    h, w, t, lse = _inputs(xp)
    args = dict(lse=lse, grad=1.0)
    args.update({k: (xp.asarray(v) if isinstance(v, np.ndarray) else v) for k, v in kw.items()})
    opts = {k: args.pop(k) for k in ("reduction", "filter_eps") if k in args}
    with pytest.raises(exc, match=words):
        backward.linear_cross_entropy_backward(h, w, t, args["lse"], args["grad"], **opts)


def test_lse_from_partials_merges_the_splits(monkeypatch):
    monkeypatch.setenv("FRAGLAB_MODE", "cpu")
    rng = np.random.default_rng(1)
    m = rng.standard_normal((3, 5)).astype(np.float32) * 4
    l = rng.random((3, 5)).astype(np.float32) + 0.5
    part = np.stack([m, l, np.zeros_like(m)])
    want = np.log((l.astype(np.float64) * 2.0 ** m.astype(np.float64)).sum(axis=0))
    assert np.allclose(backward.lse_from_partials(part), want, rtol=1e-6)


# --- the autograd Function -------------------------------------------------------------------

def _torch_on_this_mode():
    torch = pytest.importorskip("torch")
    dev = "cpu" if launch.interpreted() else "cuda"
    return torch, dev


@pytest.mark.parametrize("reduction, softcap, variant", [("mean", None, None), ("sum", 5.0, "atomic"),
                                                         ("none", None, "chunked")])
def test_autograd_matches_pytorch(reduction, softcap, variant):
    """Loss and gradients of FusedLinearCrossEntropy (each backward rung) against F.linear +
    F.cross_entropy in FP32 on the same bf16 inputs (small sizes; on the interpreter without a
    GPU)."""
    torch, dev = _torch_on_this_mode()
    from fraglab.fused_lm_head import autograd
    F = torch.nn.functional
    g = torch.Generator().manual_seed(0)
    n, v, d = 40, 300, 64
    h0 = (torch.randn(n, d, generator=g) * 0.7).to(torch.bfloat16).to(dev)
    w0 = (torch.randn(v, d, generator=g) * 0.7).to(torch.bfloat16).to(dev)
    t = torch.randint(0, v, (n,), generator=g).to(dev)
    t[::7] = -100
    up = torch.randn(n, generator=g).to(dev) if reduction == "none" else torch.tensor(0.6).to(dev)
    h, w = h0.clone().requires_grad_(), w0.clone().requires_grad_()
    loss = autograd.FusedLinearCrossEntropy.apply(h, w, t, -100, reduction, softcap, None, variant)
    (loss * up).sum().backward()
    hr, wr = h0.float().requires_grad_(), w0.float().requires_grad_()
    z = F.linear(hr, wr)
    if softcap is not None:
        z = softcap * torch.tanh(z / softcap)
    ref = F.cross_entropy(z, t, ignore_index=-100, reduction=reduction)
    (ref * up).sum().backward()
    assert torch.allclose(loss.double(), ref.double(), rtol=1e-4, atol=1e-5)
    for got, want in ((h.grad, hr.grad), (w.grad, wr.grad)):
        assert got.dtype == torch.bfloat16 and got.shape == want.shape
        err = float((got.double() - want.double()).norm() / want.double().norm())
        assert err < problems.BWD_TOL["bf16"], err


def test_autograd_module_and_checks():
    """The module form gives the same loss; gradients are consistent with a finite difference of
    the loss along a random direction (float64 on the bf16-rounded values), and wrong arguments are
    refused as the wrapper refuses them."""
    torch, dev = _torch_on_this_mode()
    from fraglab.fused_lm_head import autograd
    g = torch.Generator().manual_seed(1)
    n, v, d = 24, 200, 32
    h = (torch.randn(n, d, generator=g)).to(torch.bfloat16).to(dev).requires_grad_()
    w = (torch.randn(v, d, generator=g) * 0.3).to(torch.bfloat16).to(dev).requires_grad_()
    t = torch.randint(0, v, (n,), generator=g).to(dev)
    mod = autograd.LinearCrossEntropyLoss(reduction="sum")
    loss = mod(h, w, t)
    loss.backward()
    # directional derivative of the float64 loss along a random direction of h
    dirn = torch.randn(n, d, generator=g).double().to(dev)

    def f64(eps):
        z = (h.detach().double() + eps * dirn) @ w.detach().double().T
        return torch.nn.functional.cross_entropy(z, t, reduction="sum")
    fd = float((f64(1e-4) - f64(-1e-4)) / 2e-4)
    an = float((h.grad.double() * dirn).sum())
    assert abs(fd - an) <= 1e-2 * abs(fd) + 1e-3, (fd, an)
    with pytest.raises(ValueError, match="reduction"):
        autograd.FusedLinearCrossEntropy.apply(h, w, t, -100, "avg", None)
    with pytest.raises(TypeError, match="float16 or uint16|bfloat16|dtype"):
        autograd.FusedLinearCrossEntropy.apply(h.float(), w, t, -100, "mean", None)


# --- the forward's block maxima and the G kernel's skip of tiles no token reaches -------------

def test_the_forward_keeps_each_blocks_largest_logit(rng, monkeypatch):
    """With ``keep`` the Hopper forward writes each (128-token, 128-word) block's largest logit
    over the tokens below n (ragged n and V, the soft-cap applied; -inf where no word is): the
    float64 logits' maxima, to the FP32 sums' rounding."""
    monkeypatch.setenv("FRAGLAB_MODE", "cpu")
    inp = problems.lm_head_inputs(rng, n=37, v=301, d=48, softcap=10.0)
    keep: dict = {}
    backward.forward_with_lse(inp["h"], inp["w"], inp["targets"], softcap=10.0,
                              variant="wgmma", keep=keep)
    z = problems.as_float64(inp["h"], "bf16") @ problems.as_float64(inp["w"], "bf16").T
    z = 10.0 * np.tanh(z / 10.0)
    want = np.full((1, 3), -np.inf)
    for b in range(3):
        want[0, b] = z[:, 128 * b:128 * (b + 1)].max()
    assert keep["bmax"].shape == (1, 3)
    np.testing.assert_allclose(keep["bmax"], want, rtol=1e-5, atol=1e-5)
    keep = {}
    backward.forward_with_lse(inp["h"], inp["w"], inp["targets"], keep=keep)   # the mma rung
    assert keep["bmax"] is None


#: filter_cold_tiles' 128-word blocks the filter skips: 0 and 1 (cold tile 0), 4 (tile 2's
#: half without token 0's target) and 8 (cold tile 4, ragged).
COLD_TILES_SKIPPED = 4


def test_the_skip_leaves_flags_and_gradients_as_they_were(rng, monkeypatch):
    """The G kernel's skip only leaves out work: with and without the forward's block maxima
    the gradients are the same bits and the same tiles are counted as skipped (cold inputs:
    tiles 0 and 4 of 256 words have nothing a filter keeps, tile 2 holds token 0's target)."""
    monkeypatch.setenv("FRAGLAB_MODE", "cpu")
    inp = problems.backward_inputs(rng, **WGMMA.case("filter_cold_tiles").params)
    out, stats = {}, {}
    for block_max in (True, False):
        stats[block_max] = {}
        out[block_max] = problems.run_backward(**inp, stats=stats[block_max], variant="wgmma",
                                               block_max=block_max)
    for k in ("dh", "dw"):
        assert np.array_equal(out[True][k], out[False][k], equal_nan=True), k
    assert stats[True] == stats[False] and stats[True]["skipped"] == COLD_TILES_SKIPPED


@pytest.mark.parametrize("case, old, new", [
    # a tile holding a target but no big softmax skipped: token 0's -1 lost (tile 2)
    ("filter_cold_tiles", "if (t >= w0 && t < w1) return true;", ""),
    # the bound the wrong way round: warm tiles skipped, cold ones computed
    ("filter_cold_tiles", "LMH_LOG2E, -lse2) >= lim;", "LMH_LOG2E, -lse2) < lim;"),
    # a skipped CTA not counted: the filter's count of skipped tiles differs
    ("filter_cold_tiles", "atomicAdd(a.skipped, (unsigned)(left < BLOCKS ? left : BLOCKS));", ""),
])
def test_wrong_skips_of_the_g_kernel_fail(rng, monkeypatch, case, old, new):
    """Mutants of the G kernel's skip (GradEpi::needed and skip, kernels/11_fused_lm_head_wgmma.cu)
    on the interpreter: wrong gradients, or a count of skipped tiles that the run without the
    forward's block maxima does not give."""
    from fraglab.fused_lm_head import wgmma
    monkeypatch.setenv("FRAGLAB_MODE", "cpu")
    source = toolchain.kernel_path(wgmma.FILE).read_text()
    assert source.count(old) == 1, old
    mutant = {wgmma.FILE: source.replace(old, new), wgmma.GEMM_FILE: None}
    inp = problems.backward_inputs(rng, **WGMMA.case(case).params)
    want = problems.backward_reference(**inp)
    stats: dict = {}
    got = problems.run_backward(**inp, stats=stats, variant="wgmma", source=mutant)
    close = all(np.allclose(got[k], want[k], rtol=0, atol=1e-2 * np.abs(want[k]).max())
                for k in ("dh", "dw"))
    assert not close or stats["skipped"] != COLD_TILES_SKIPPED
