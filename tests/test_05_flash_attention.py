"""Topic 05_flash_attention, anywhere: the online softmax in NumPy, Alg. 4 and the FA-2 kernel's
data paths in the warp emulator, and the PROBLEMS run on the emulator. (Compile/SASS checks,
wrapper checks and the kernels on the GPU: test_05_flash_attention_kernels.py.)

The emulator tests carry the weight on a machine without a GPU: :func:`emulate_fa2` follows the
FA-2 kernel lane by lane (same swizzle, same ldmatrix addresses, documented mma.m16n8k16
fragment layouts, same masks and tile ranges), so an addressing or layout mistake in those
formulas shows up here; the GPU tests then check that the CUDA code matches them.
"""
from dataclasses import replace

import numpy as np
import pytest

from fraglab import fragments, warp
from fraglab import flash_attention as fa
from fraglab.flash_attention.problems import TOL   # ||out - ref|| / ||ref||, f16 / bf16 in and out


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
    lay = fragments.wmma_16x16_accumulator()
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
    warp.validate_layout(fragments.mma_m16n8k16("a"), (16, 16))
    warp.validate_layout(fragments.mma_m16n8k16("b"), (16, 8))
    warp.validate_layout(fragments.mma_m16n8k16("c"), (16, 8))
    with pytest.raises(ValueError, match="operand"):
        fragments.mma_m16n8k16("d")


def test_a_fragment_has_the_element_order_of_the_16x16_accumulator():
    # The 8 16-bit elements of the A fragment (register e // 2, half e % 2) sit exactly where
    # the 8 f32 registers of the 16x16 accumulator sit: converting and packing pairs is enough.
    np.testing.assert_array_equal(fragments.mma_m16n8k16("a"), fragments.wmma_16x16_accumulator())
    lc = fragments.mma_m16n8k16("c")
    two_halves = np.concatenate([lc, lc + np.array([0, 8])], axis=1)
    np.testing.assert_array_equal(two_halves, fragments.wmma_16x16_accumulator())


def test_p_accumulators_are_the_a_operand_of_pv(rng):
    p = rng.standard_normal((16, 16)).astype(np.float32)
    lc = fragments.mma_m16n8k16("c")
    c_lo, c_hi = warp.to_fragment(p[:, :8], lc), warp.to_fragment(p[:, 8:], lc)
    np.testing.assert_array_equal(fa.p_as_a_operand(c_lo, c_hi), warp.to_fragment(p, fragments.mma_m16n8k16("a")))


def test_mma_emulation_is_a_matrix_product(rng):
    a, b, c = rng.standard_normal((16, 16)), rng.standard_normal((16, 8)), rng.standard_normal((16, 8))
    d = fa.mma_m16n8k16(warp.to_fragment(a, fragments.mma_m16n8k16("a")), warp.to_fragment(b, fragments.mma_m16n8k16("b")),
                        warp.to_fragment(c, fragments.mma_m16n8k16("c")))
    np.testing.assert_allclose(warp.from_fragment(d, fragments.mma_m16n8k16("c"), (16, 8)), a @ b + c, rtol=1e-5, atol=1e-5)


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
    la, lb = fragments.mma_m16n8k16("a"), fragments.mma_m16n8k16("b")
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
    # round_to is fraglab.dtypes.round_to, which knows f32 too: an unknown type is refused
    with pytest.raises(ValueError, match="unknown element type"):
        fa.round_to(x, "f8")




# =================================================================================================
# The PROBLEMS, on the emulator
# =================================================================================================

def test_problems_cover_every_kernel_and_edge():
    fa2 = fa.PROBLEMS["fa2"]
    seen = {(c.params["dtype"], c.params["shape"][3], c.params.get("warps", 4), c.params.get("causal", False))
            for c in fa2.cases}
    assert seen >= {(t, d, w, c) for t in fa.DTYPES for d in fa.FA2_HEAD_DIMS for w in fa.FA2_WARPS
                    for c in (False, True)}
    sizes = {c.params["shape"][2] for c in fa2.cases}
    assert 1 in sizes and any(n % fa.FA2_BN for n in sizes)            # N = 1, ragged tiles
    assert any(c.params.get("q_scale", 1) > 1 for c in fa2.edge_cases)  # peaky
    assert any(c.params.get("scale") is not None for c in fa2.cases)
    assert fa.FINAL == fa.VARIANTS[-1] == "inregister"     # the ladder: the FA-1 softmax paths
    for v in fa.VARIANTS:
        p = fa.PROBLEMS[f"fa1_{v}"]
        assert {c.params["shape"][3] for c in p.cases} == set(fa.FA1_HEAD_DIMS)
        assert all(c.params["shape"][2] % fa.FA1_TILE == 0 for c in p.cases)


def _fa2_on_the_emulator(q, k, v, dtype, causal, scale, warps):
    """What fa2 returns, computed head by head with emulate_fa2 from the same inputs."""
    exact = [fa.as_float(a, dtype) for a in (q, k, v)]
    out = np.empty(exact[0].shape)
    for b, h in np.ndindex(*out.shape[:2]):
        out[b, h] = fa.emulate_fa2(*(a[b, h] for a in exact), causal=causal, scale=scale,
                                   warps=warps, dtype=dtype)
    return out


# the GPU requirement is the kernel's, not the emulator's
FA2_EMULATED = replace(fa.PROBLEMS["fa2"], requires=None)


@pytest.mark.parametrize("case", ["N=1 w4", "N=1 causal w8", "N=17 causal w4"])
def test_fa2_problem_edge_cases_pass_on_the_emulator(case, rng):
    FA2_EMULATED.check(case, rng, run=_fa2_on_the_emulator)


def test_a_problem_reports_unwritten_outputs(rng):
    def forgets_the_last_row(**inp):
        out = _fa2_on_the_emulator(**inp)
        out[..., -1, :] = np.nan
        return out
    res = FA2_EMULATED.evaluate("N=17 causal w4", rng, run=forgets_the_last_row)
    assert not res.ok and res.error == float("inf")
