"""Topic 05_flash_attention: the online softmax in NumPy, Alg. 4 and the FA-2 kernel's data paths
in the warp emulator, compile/resource/SASS checks for every target (anywhere); the FA-1 and FA-2
kernels against a float64 NumPy reference, and every rejected argument (GPU).

The emulator tests carry the weight on a machine without a GPU: :func:`emulate_fa2` follows the
FA-2 kernel lane by lane (same swizzle, same ldmatrix addresses, documented mma.m16n8k16
fragment layouts, same masks and tile ranges), so an addressing or layout mistake in those
formulas shows up here; the GPU tests then check that the CUDA code matches them.
"""
from functools import lru_cache

import numpy as np
import pytest

from fraglab import sass, toolchain, warp
from fraglab import flash_attention as fa
from fraglab.device import GPUUnavailable, gpu_available
from fraglab.toolchain import ARCHES

SM80_UP = ("sm_80", "sm_90", "sm_120")
FA2_KERNELS = [fa.fa2_kernel(t, d, w) for t in fa.DTYPES for d in fa.FA2_HEAD_DIMS for w in fa.FA2_WARPS]
FA1_KERNELS = [fa.fa1_kernel(v, d) for v in fa.FA1_VARIANTS for d in fa.FA1_HEAD_DIMS]
TOL = {"f16": 2e-3, "bf16": 1.5e-2}          # ||out - ref|| / ||ref|| for f16 / bf16 in and out


def rel_err(got, ref):
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


# =================================================================================================
# NumPy: the online softmax
# =================================================================================================

@pytest.mark.parametrize("normalize", ["end", "each_step"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("block", [1, 7, 16, 64, 500])
@pytest.mark.parametrize("q_scale", [1.0, 30.0], ids=["flat", "peaky"])
def test_online_softmax_equals_plain_softmax(normalize, causal, block, q_scale, rng):
    q = rng.standard_normal((45, 32)) * q_scale
    k, v = rng.standard_normal((2, 45, 32))
    got = fa.online_softmax_attention(q, k, v, block=block, causal=causal, normalize=normalize)
    ref = fa.attention_reference(q, k, v, causal=causal)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


def test_online_softmax_stats_are_the_row_max_and_sum(rng):
    q, k, v = rng.standard_normal((3, 20, 16))
    _, m, l = fa.online_softmax_attention(q, k, v, block=6, return_stats=True)
    s = q @ k.T / 4.0
    np.testing.assert_allclose(m, s.max(axis=1), rtol=1e-14)
    np.testing.assert_allclose(l, np.exp(s - s.max(axis=1, keepdims=True)).sum(axis=1), rtol=1e-12)


@pytest.mark.parametrize("bad, msg", [({"normalize": "never"}, "normalize"), ({"block": 0}, "block")])
def test_online_softmax_rejects_bad_options(bad, msg):
    with pytest.raises(ValueError, match=msg):
        fa.online_softmax_attention(np.ones((2, 4)), np.ones((2, 4)), np.ones((2, 4)), **bad)


def test_reference_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="shapes"):
        fa.attention_reference(np.ones((4, 8)), np.ones((4, 7)), np.ones((4, 8)))


# =================================================================================================
# Alg. 4 on an accumulator fragment (warp emulator)
# =================================================================================================

def _stats_per_lane(rows_vals):
    """(16,) per-row values -> (32, 2): lane 4g + c holds rows g and g + 8."""
    g = warp.LANES // 4
    return np.stack([rows_vals[g], rows_vals[g + 8]], axis=1).astype(np.float32)


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("first", [True, False], ids=["first_tile", "later_tile"])
def test_alg4_step_matches_numpy(normalize, first, rng):
    lay = warp.accumulator_16x16_sm80()
    s = (rng.standard_normal((16, 16)) * 5).astype(np.float32)
    sl = np.float32(0.25 * fa.LOG2E)
    if first:
        m_rows, l_rows = np.full(16, -np.inf), np.zeros(16)
    else:
        m_rows, l_rows = rng.standard_normal(16) * 2, rng.uniform(1, 20, 16)
    p, m_new, l_new, alpha = fa.alg4_step(warp.to_fragment(s, lay), _stats_per_lane(m_rows),
                                          _stats_per_lane(l_rows), sl, normalize=normalize)
    x = s.astype(np.float64) * float(sl)
    want_m = np.maximum(m_rows, x.max(axis=1))
    e = np.exp2(x - want_m[:, None])
    want_l = l_rows * np.exp2(m_rows - want_m) + e.sum(axis=1)
    np.testing.assert_allclose(m_new, _stats_per_lane(want_m), rtol=1e-6)
    np.testing.assert_allclose(l_new, _stats_per_lane(want_l), rtol=1e-5)
    want_p = e / want_l[:, None] if normalize else e
    np.testing.assert_allclose(warp.from_fragment(p, lay, (16, 16)), want_p, rtol=1e-5, atol=1e-7)
    want_alpha = np.exp2(m_rows - want_m) * (l_rows / want_l if normalize else 1.0)
    np.testing.assert_allclose(alpha, _stats_per_lane(want_alpha), rtol=1e-5, atol=1e-30)


def test_alg4_step_on_a_fully_masked_tile_gives_zeros_not_nan():
    frag = np.full((32, 8), -np.inf, dtype=np.float32)
    p, m, l, alpha = fa.alg4_step(frag, np.full((32, 2), -np.inf), np.zeros((32, 2)), 1.0,
                                  normalize=False)
    assert (p == 0).all() and (l == 0).all() and np.isneginf(m).all() and not np.isnan(alpha).any()
    p, m, l, alpha = fa.alg4_step(frag, np.full((32, 2), -np.inf), np.zeros((32, 2)), 1.0)
    assert (p == 0).all() and not np.isnan(alpha).any()


def test_alg4_step_rejects_a_wrong_fragment_shape():
    with pytest.raises(ValueError, match="shape"):
        fa.alg4_step(np.zeros((32, 4)), np.zeros((32, 2)), np.zeros((32, 2)), 1.0)


@pytest.mark.parametrize("q_scale", [1.0, 20.0], ids=["flat", "peaky"])
def test_fa1_emulation_matches_reference(q_scale, rng):
    q = fa.round_to(rng.standard_normal((16, 64)) * q_scale, "f16")
    k, v = (fa.round_to(rng.standard_normal((80, 64)), "f16") for _ in range(2))
    got = fa.emulate_fa1_rows(q, k, v)
    assert rel_err(got, fa.attention_reference(q, k, v)) < 1e-3


# =================================================================================================
# mma.m16n8k16 fragments, P reuse, ldmatrix on swizzled tiles (warp emulator)
# =================================================================================================

def test_mma_fragment_layouts_cover_their_matrices():
    warp.validate_layout(fa.mma_layout("a"), (16, 16))
    warp.validate_layout(fa.mma_layout("b"), (16, 8))
    warp.validate_layout(fa.mma_layout("c"), (16, 8))
    with pytest.raises(ValueError, match="operand"):
        fa.mma_layout("d")


def test_a_fragment_has_the_element_order_of_the_16x16_accumulator():
    # The 8 16-bit elements of the A fragment (register e // 2, half e % 2) sit exactly where
    # the 8 f32 registers of the 16x16 accumulator sit: converting and packing pairs is enough.
    np.testing.assert_array_equal(fa.mma_layout("a"), warp.accumulator_16x16_sm80())
    lc = fa.mma_layout("c")
    two_halves = np.concatenate([lc, lc + np.array([0, 8])], axis=1)
    np.testing.assert_array_equal(two_halves, warp.accumulator_16x16_sm80())


def test_p_accumulators_are_the_a_operand_of_pv(rng):
    p = rng.standard_normal((16, 16)).astype(np.float32)
    lc = fa.mma_layout("c")
    c_lo, c_hi = warp.to_fragment(p[:, :8], lc), warp.to_fragment(p[:, 8:], lc)
    np.testing.assert_array_equal(fa.p_as_a_operand(c_lo, c_hi), warp.to_fragment(p, fa.mma_layout("a")))


def test_mma_emulation_is_a_matrix_product(rng):
    a, b, c = rng.standard_normal((16, 16)), rng.standard_normal((16, 8)), rng.standard_normal((16, 8))
    d = fa.mma_m16n8k16(warp.to_fragment(a, fa.mma_layout("a")), warp.to_fragment(b, fa.mma_layout("b")),
                        warp.to_fragment(c, fa.mma_layout("c")))
    np.testing.assert_allclose(warp.from_fragment(d, fa.mma_layout("c"), (16, 8)), a @ b + c, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("d", fa.FA2_HEAD_DIMS)
def test_swizzled_tile_round_trip_and_no_bank_conflicts(d, rng):
    t = fa.SwizzledTile(64, d)
    x = fa.round_to(rng.standard_normal((64, d)), "f16")
    t.store(x)
    np.testing.assert_array_equal(t.logical(), x)
    lane = warp.LANES
    sites = [fa.q_fragment_address(lane, w, kk, d) for w in range(4) for kk in range(d // 16)]
    sites += [fa.k_fragment_address(lane, n, kk, d) for n in range(4) for kk in range(d // 16)]
    sites += [fa.v_fragment_address(lane, kk, dp, d) for kk in range(4) for dp in range(d // 16)]
    for addr in sites:   # each 8x8 matrix: its 8 rows must use 8 different 16-byte bank groups
        groups = (np.asarray(addr).reshape(4, 8) // 16) % 8
        assert all(len(set(g)) == 8 for g in groups)
    # cp.async writes: 8 consecutive threads write 8 chunks of 16 bytes, also in 8 bank groups
    i = np.arange(64 * d // 8)
    offs = fa.swizzle_offset(i // (d // 8), i % (d // 8), d).reshape(-1, 8)
    assert all(len(set((o // 16) % 8)) == 8 for o in offs)


@pytest.mark.parametrize("d", fa.FA2_HEAD_DIMS)
def test_ldmatrix_addresses_load_the_documented_fragments(d, rng):
    la, lb = fa.mma_layout("a"), fa.mma_layout("b")
    lane = warp.LANES
    tile = fa.round_to(rng.standard_normal((64, d)), "f16")
    t = fa.SwizzledTile(64, d)
    t.store(tile)
    for kk in range(d // 16):
        for w in range(4):              # Q: A fragment of rows 16w.., columns 16kk..
            got = t.ldmatrix_x4(fa.q_fragment_address(lane, w, kk, d))
            np.testing.assert_array_equal(got, warp.to_fragment(tile[16 * w:16 * w + 16, 16 * kk:16 * kk + 16], la))
        for n in range(4):              # K: B = K^T for keys 16n.., 8 at a time
            got = t.ldmatrix_x4(fa.k_fragment_address(lane, n, kk, d))
            for half in range(2):
                keys = tile[16 * n + 8 * half:16 * n + 8 * half + 8, 16 * kk:16 * kk + 16]
                np.testing.assert_array_equal(got[:, 4 * half:4 * half + 4], warp.to_fragment(keys.T, lb))
    for kk in range(4):
        for dp in range(d // 16):       # V: B = V (keys x columns), ldmatrix .trans
            got = t.ldmatrix_x4(fa.v_fragment_address(lane, kk, dp, d), trans=True)
            for half in range(2):
                blk = tile[16 * kk:16 * kk + 16, 16 * dp + 8 * half:16 * dp + 8 * half + 8]
                np.testing.assert_array_equal(got[:, 4 * half:4 * half + 4], warp.to_fragment(blk, lb))


@pytest.mark.parametrize("bm", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_tile_ranges_split_masked_from_unmasked_tiles(bm, causal):
    for n in (1, 63, 64, 65, 127, 128, 200, 513):
        for q0 in range(0, n, bm):
            n_full, n_tiles = fa.fa2_tile_ranges(q0, bm, n, causal)
            rows = np.arange(q0, q0 + bm)[:, None]
            for j in range(-(-n // fa.FA2_BN)):
                keys = np.arange(j * fa.FA2_BN, (j + 1) * fa.FA2_BN)[None, :]
                visible = (keys < n) & ((keys <= rows) | (not causal))
                if j < n_full:
                    assert visible.all(), (n, q0, j)
                elif j >= n_tiles:
                    assert not visible[rows[:, 0] < n].any(), (n, q0, j)
            assert n_tiles >= 1 and 0 <= n_full <= n_tiles


@pytest.mark.parametrize("dtype, d, warps, causal, n, q_scale", [
    ("f16", 64, 4, False, 130, 1.0),
    ("f16", 64, 8, True, 150, 1.0),
    ("f16", 128, 4, True, 77, 1.0),
    ("f16", 128, 8, False, 64, 8.0),
    ("bf16", 64, 4, True, 100, 8.0),
    ("f16", 64, 4, True, 1, 1.0),
])
def test_fa2_emulation_matches_reference(dtype, d, warps, causal, n, q_scale, rng):
    q = rng.standard_normal((n, d)) * q_scale
    k, v = rng.standard_normal((2, n, d))
    got = fa.emulate_fa2(q, k, v, causal=causal, warps=warps, dtype=dtype)
    ref = fa.attention_reference(*(fa.round_to(a, dtype) for a in (q, k, v)), causal=causal)
    assert np.isfinite(got).all()
    assert rel_err(got, ref) < TOL[dtype]


def test_bf16_round_trip():
    # 8 significant bits, ties to even: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7 (goes to 1),
    # 1 + 3 * 2^-8 halfway between 1 + 2^-7 and 1 + 2^-6 (goes to 1 + 2^-6).
    x = np.array([1.0, -2.5, 1 + 2**-8, 1 + 3 * 2**-8, 1e-3, np.inf, -np.inf, np.nan], dtype=np.float32)
    back = fa.from_bf16(fa.to_bf16(x))
    np.testing.assert_array_equal(back[:4], np.array([1.0, -2.5, 1.0, 1 + 2**-6], dtype=np.float32))
    assert abs(back[4] - 1e-3) <= 2**-9 * 1e-3
    assert np.isposinf(back[5]) and np.isneginf(back[6]) and np.isnan(back[7])
    with pytest.raises(ValueError, match="dtype"):
        fa.round_to(x, "f32")


# =================================================================================================
# Compile, resources, SASS (every target)
# =================================================================================================

@lru_cache(maxsize=None)
def _build(name, arch, unroll=None):
    b = toolchain.compile(name, arch, defines=None if unroll is None else {"FA1_UNROLL": unroll})
    return b, b.sass()


def _classes(name, arch, kernel, unroll=None):
    return sass.count_classes(sass.function_text(_build(name, arch, unroll)[1], kernel))


def _opcodes(name, arch, kernel, base=True, unroll=None):
    return sass.count_opcodes(sass.function_text(_build(name, arch, unroll)[1], kernel), base=base)


@pytest.mark.parametrize("arch", ARCHES)
def test_fa1_kernels_compile_without_local_memory(arch):
    b = toolchain.compile(fa.KERNELS_FA1, arch)          # the build the wrappers launch
    assert sorted(b.kernels) == sorted(FA1_KERNELS)
    for k in FA1_KERNELS:
        r = b.resources[k]
        assert r["stack_frame"] == r["spill_stores"] == r["spill_loads"] == 0, (k, r)


@pytest.mark.parametrize("arch", ARCHES)
def test_fa1_in_register_softmax_moves_less_through_shared_memory(arch):
    # Compared with the shared loops not unrolled (-DFA1_UNROLL=1): unrolled, their static
    # instruction counts vary by a few from one compilation to the next, which would hide the
    # softmax paths' difference. Not unrolled, the kernels' SASS differs only there.
    for d in fa.FA1_HEAD_DIMS:
        paper, fair, inreg = (_classes(fa.KERNELS_FA1, arch, fa.fa1_kernel(v, d), unroll=1)
                              for v in fa.FA1_VARIANTS)
        for c in (paper, fair, inreg):
            assert c["tensor"] > 0 and c["local"] == 0, (d, c)
        assert inreg["shared"] < fair["shared"] < paper["shared"], d
        assert inreg["barrier"] <= fair["barrier"] < paper["barrier"], d
        assert inreg["shuffle"] == 8 and fair["shuffle"] == 2 and paper["shuffle"] == 0, d
        # the paper's baseline separates its passes with __syncthreads()
        assert _opcodes(fa.KERNELS_FA1, arch, fa.fa1_kernel("paper_baseline", d), unroll=1)["BAR"] >= 3


@pytest.mark.parametrize("arch", SM80_UP)
def test_fa2_kernels_keep_everything_in_registers(arch):
    b, _ = _build(fa.KERNELS_FA2, arch)
    assert sorted(b.kernels) == sorted(FA2_KERNELS)
    for k in FA2_KERNELS:
        r = b.resources[k]
        assert r["stack_frame"] == r["spill_stores"] == r["spill_loads"] == 0, (k, r)
        assert r["registers"] <= 255
        cls = _classes(fa.KERNELS_FA2, arch, k)
        assert cls["local"] == 0, (k, cls)
        ops = _opcodes(fa.KERNELS_FA2, arch, k, base=False)
        assert any(o.startswith("LDSM.16.M88.4") for o in ops), k       # ldmatrix (Q, K)
        assert any(o.startswith("LDSM.16.MT88.4") for o in ops), k      # ldmatrix .trans (V)
        assert any(o.startswith("LDGSTS") for o in ops), k              # cp.async
        hmma = sum(n for o, n in ops.items() if o.startswith("HMMA.16816.F32"))
        d = int(k.split("_d")[1].split("_")[0])
        # per key tile: (d/16) * 4 * 2 mma for S and 4 * (d/16) * 2 for P V; the tile code
        # appears twice (unmasked and masked loop)
        assert hmma >= 2 * 2 * (d // 16) * 8, (k, hmma)
        if "bf16" in k:
            assert any(o.startswith("HMMA.16816.F32.BF16") for o in ops), k


def test_fa2_kernels_trap_on_sm75():
    b, _ = _build(fa.KERNELS_FA2, "sm_75")
    for k in FA2_KERNELS:
        ops = _opcodes(fa.KERNELS_FA2, "sm_75", k)
        assert ops["HMMA"] == 0 and ops["BPT"] >= 1, (k, ops)


def test_fa2_p_never_goes_through_shared_memory_between_the_two_products():
    # From the first to the last HMMA (both tile loops) the only shared-memory instructions that
    # can execute are ldmatrix (operands); cp.async writes count as global. P is never stored.
    # ("@!PT" instructions are never executed: padding the compiler puts after LDGSTS.)
    text = sass.function_text(_build(fa.KERNELS_FA2, "sm_90")[1], "fa2_f16_d128_w4")
    lines = [l for l in sass.listing(text) if not l.startswith("@!PT")]
    ops = [l.split()[1] if l.startswith("@") else l.split()[0] for l in lines]
    hmma = [i for i, o in enumerate(ops) if o.startswith("HMMA")]
    inner = [o for o in ops[hmma[0]:hmma[-1]] if sass.classify(o) == "shared"]
    assert inner and all(o.startswith("LDSM") for o in inner), sorted(set(inner))


def test_smem_sizes():
    src = (toolchain.KERNELS_DIR / (fa.KERNELS_FA1 + ".cu")).read_text()
    assert f"({fa.fa1_smem_bytes(512)} bytes" in src          # the number the .cu file gives
    assert fa.fa2_smem_bytes(128, 4) == 48 * 1024 and fa.fa2_smem_bytes(128, 8) == 64 * 1024
    with pytest.raises(ValueError, match="d must be"):
        fa.fa1_smem_bytes(96)


@pytest.mark.parametrize("call, exc, msg", [
    (lambda: fa.fa1_kernel("fast", 64), ValueError, "variant"),
    (lambda: fa.fa1_kernel("inregister", 96), ValueError, "head dimension"),
    (lambda: fa.fa2_kernel("f32", 64, 4), ValueError, "dtype"),
    (lambda: fa.fa2_kernel("f16", 256, 4), ValueError, "head dimension"),
    (lambda: fa.fa2_kernel("f16", 64, 2), ValueError, "warps"),
    (lambda: fa.emulate_fa2(np.ones((4, 64)), np.ones((4, 64)), np.ones((4, 64)), warps=3), ValueError, "warps"),
    (lambda: fa.emulate_fa1_rows(np.ones((8, 64)), np.ones((16, 64)), np.ones((16, 64))), ValueError, "16"),
])
def test_bad_names_and_options_are_rejected(call, exc, msg):
    with pytest.raises(exc, match=msg):
        call()


# =================================================================================================
# Wrapper checks that need no GPU
# =================================================================================================

def test_numpy_inputs_are_rejected_before_any_launch():
    x = np.zeros((1, 1, 16, 64), np.float16)
    with pytest.raises(TypeError, match="cupy.asarray"):
        fa.fa1(x, x, x)
    with pytest.raises(TypeError, match="cupy.asarray"):
        fa.fa2(x, x, x)


@pytest.mark.parametrize("kw, exc, msg", [
    ({"warps": 2}, ValueError, "warps"), ({"warps": True}, ValueError, "warps"),
    ({"causal": 1}, TypeError, "causal"),
])
def test_fa2_options_are_checked_first(kw, exc, msg):
    x = np.zeros((1, 1, 16, 64), np.float16)
    with pytest.raises(exc, match=msg):
        fa.fa2(x, x, x, **kw)


def test_fa1_variant_is_checked_first():
    x = np.zeros((1, 1, 16, 64), np.float16)
    with pytest.raises(ValueError, match="variant"):
        fa.fa1(x, x, x, "fastest")


def test_flops():
    assert fa.attention_flops(4, 8, 4096, 128) == 4.0 * 32 * 4096 ** 2 * 128
    assert fa.attention_flops(1, 1, 1024, 512, causal=True) == 2.0 * 1024 ** 2 * 512


@pytest.mark.skipif(gpu_available(), reason="checks the GPU-less behaviour")
def test_without_gpu_the_benchmark_says_so():
    with pytest.raises(GPUUnavailable, match="needs a CUDA GPU"):
        fa.main(["bench", "--out", "/nonexistent"])


# =================================================================================================
# GPU: kernels against the float64 reference
# =================================================================================================

def _on_gpu(raw):
    import cupy as cp
    return [cp.asarray(a) for a in raw]


@pytest.mark.gpu
@pytest.mark.parametrize("variant", fa.FA1_VARIANTS)
@pytest.mark.parametrize("d, shape, q_scale", [
    (64, (2, 2, 96), 1.0), (128, (1, 3, 64), 6.0), (512, (1, 1, 128), 1.0), (512, (1, 2, 48), 4.0)])
def test_fa1_matches_reference(variant, d, shape, q_scale, rng):
    raw, exact = fa.random_qkv(rng, shape + (d,), "f16", q_scale=q_scale)
    out = fa.fa1(*_on_gpu(raw), variant)
    got = fa.as_float(out, "f16")
    assert not np.isnan(got).any(), "some outputs were not written"
    assert rel_err(got, fa.attention_reference(*exact)) < TOL["f16"]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", fa.DTYPES)
@pytest.mark.parametrize("d", fa.FA2_HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("warps", fa.FA2_WARPS)
def test_fa2_matches_reference(dtype, d, causal, warps, rng):
    raw, exact = fa.random_qkv(rng, (2, 3, 200, d), dtype)       # 200: a ragged last tile
    out = fa.fa2(*_on_gpu(raw), causal=causal, warps=warps)
    got = fa.as_float(out, dtype)
    assert not np.isnan(got).any(), "some outputs were not written (or NaN from masked rows)"
    assert rel_err(got, fa.attention_reference(*exact, causal=causal)) < TOL[dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("n, causal, q_scale, warps", [
    (1, False, 1.0, 4), (1, True, 1.0, 8), (17, True, 1.0, 4), (64, False, 1.0, 4),
    (128, True, 1.0, 8), (1000, True, 1.0, 4), (513, False, 12.0, 4), (300, True, 12.0, 8)])
def test_fa2_edge_sizes_and_peaky_softmax(n, causal, q_scale, warps, rng):
    raw, exact = fa.random_qkv(rng, (1, 2, n, 64), "f16", q_scale=q_scale)
    got = fa.as_float(fa.fa2(*_on_gpu(raw), causal=causal, warps=warps), "f16")
    assert not np.isnan(got).any()
    assert rel_err(got, fa.attention_reference(*exact, causal=causal)) < TOL["f16"]


@pytest.mark.gpu
def test_fa2_causal_first_row_is_the_first_value(rng):
    raw, exact = fa.random_qkv(rng, (1, 1, 70, 128), "f16")
    got = fa.as_float(fa.fa2(*_on_gpu(raw), causal=True), "f16")
    np.testing.assert_array_equal(got[0, 0, 0], exact[2][0, 0, 0])   # row 0 sees key 0 only


@pytest.mark.gpu
def test_fa2_scale_argument(rng):
    raw, exact = fa.random_qkv(rng, (1, 2, 90, 64), "f16")
    got = fa.as_float(fa.fa2(*_on_gpu(raw), scale=0.5), "f16")
    assert rel_err(got, fa.attention_reference(*exact, scale=0.5)) < TOL["f16"]


@pytest.mark.gpu
def test_fa1_variants_agree_with_each_other(rng):
    raw, _ = fa.random_qkv(rng, (1, 2, 64, 128), "f16")
    gpu = _on_gpu(raw)
    outs = [fa.as_float(fa.fa1(*gpu, v), "f16") for v in fa.FA1_VARIANTS]
    for o in outs[1:]:
        assert rel_err(o, outs[0]) < 2e-3


# =================================================================================================
# GPU: every rejected argument
# =================================================================================================

def _bad_inputs(cp):
    good = cp.zeros((1, 2, 64, 64), cp.float16)
    flat = cp.zeros(2 * 64 * 64 + 8, cp.float16)
    return {
        "float32": (cp.zeros((1, 2, 64, 64), cp.float32), TypeError, "float16 or uint16"),
        "3-d": (cp.zeros((2, 64, 64), cp.float16), ValueError, "4 dimensions"),
        "d=96": (cp.zeros((1, 2, 64, 96), cp.float16), ValueError, "head dimension"),
        "empty": (cp.zeros((1, 0, 64, 64), cp.float16), ValueError, ">= 1"),
        "strided": (cp.zeros((1, 2, 64, 128), cp.float16)[..., ::2], ValueError, "contiguous"),
        "misaligned": (flat[1:1 + 2 * 64 * 64].reshape(1, 2, 64, 64), ValueError, "aligned"),
        "many heads": (cp.zeros((1, 65536, 1, 64), cp.float16), ValueError, "B \\* H"),
        "numpy": (np.zeros((1, 2, 64, 64), np.float16), TypeError, "cupy.asarray"),
    }, good


@pytest.mark.gpu
@pytest.mark.parametrize("which", ["float32", "3-d", "d=96", "empty", "strided", "misaligned",
                                   "many heads", "numpy"])
@pytest.mark.parametrize("kernel", ["fa1", "fa2"])
def test_bad_q_is_rejected(which, kernel):
    import cupy as cp
    bad, good = _bad_inputs(cp)
    arr, exc, msg = bad[which]
    with pytest.raises(exc, match=msg):
        getattr(fa, kernel)(arr, arr, arr)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["fa1", "fa2"])
def test_k_and_v_must_match_q(kernel):
    import cupy as cp
    q = cp.zeros((1, 2, 64, 64), cp.float16)
    f = getattr(fa, kernel)
    with pytest.raises(ValueError, match="shape"):
        f(q, cp.zeros((1, 2, 48, 64), cp.float16), q)
    with pytest.raises(ValueError, match="shape"):
        f(q, q, cp.zeros((1, 1, 64, 64), cp.float16))
    with pytest.raises(TypeError, match="float16"):
        f(q, q.view(cp.uint16), q)


@pytest.mark.gpu
@pytest.mark.parametrize("scale, exc", [(0.0, ValueError), (-1.0, ValueError), (float("inf"), ValueError),
                                        (float("nan"), ValueError), ("1", TypeError), (True, TypeError)])
@pytest.mark.parametrize("kernel", ["fa1", "fa2"])
def test_bad_scale_is_rejected(scale, exc, kernel):
    import cupy as cp
    q = cp.zeros((1, 1, 64, 64), cp.float16)
    with pytest.raises(exc, match="scale"):
        getattr(fa, kernel)(q, q, q, scale=scale)


@pytest.mark.gpu
def test_fa1_rejects_ragged_n_and_bf16():
    import cupy as cp
    q = cp.zeros((1, 1, 40, 64), cp.float16)
    with pytest.raises(ValueError, match="multiple of 16"):
        fa.fa1(q, q, q)
    b = cp.zeros((1, 1, 64, 64), cp.uint16)
    with pytest.raises(TypeError, match="float16 inputs only"):
        fa.fa1(b, b, b)
    with pytest.raises(ValueError, match="d = 256"):
        x = cp.zeros((1, 1, 16, 256), cp.float16)
        fa.fa1(x, x, x)


@pytest.mark.gpu
def test_n_limit(monkeypatch):
    import cupy as cp
    monkeypatch.setattr(fa, "MAX_N", 32)
    q = cp.zeros((1, 1, 48, 64), cp.float16)
    for f in (fa.fa1, fa.fa2):
        with pytest.raises(ValueError, match="at most 32"):
            f(q, q, q)


@pytest.mark.gpu
def test_fa2_refuses_gpus_older_than_sm80(monkeypatch):
    import cupy as cp
    monkeypatch.setattr(fa.device, "compute_capability", lambda: (7, 5))
    q = cp.zeros((1, 1, 64, 64), cp.float16)
    with pytest.raises(RuntimeError, match="compute capability 8.0"):
        fa.fa2(q, q, q)


@pytest.mark.gpu
def test_out_argument_is_checked():
    import cupy as cp
    q = cp.zeros((1, 1, 64, 64), cp.float16)
    with pytest.raises(ValueError, match="shape"):
        fa.fa2_launcher(q, q, q, out=cp.zeros((1, 1, 64, 128), cp.float16))
    with pytest.raises(TypeError, match="float16"):
        fa.fa1_launcher(q, q, q, out=cp.zeros((1, 1, 64, 64), cp.float32))
