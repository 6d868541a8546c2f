"""Tests for fraglab.warp, the NumPy warp emulator.

The shuffle references below are written lane by lane from the wording of the
CUDA C++ Programming Guide ("Warp Shuffle Functions"), independently of the
vectorised code under test.
"""

import numpy as np
import pytest

from fraglab import fragments, warp
from fraglab.warp import LayoutError, WarpError

WIDTHS = [1, 2, 4, 8, 16, 32]
FULL = 0xFFFFFFFF
rng = np.random.default_rng(16)         # seeded: the module's draws are the same on every run


def random_lanes(dtype=np.float64):
    return rng.integers(-1000, 1000, size=32).astype(dtype)


# ---------------------------------------------------------------- references

def ref_shfl(var, src, width):
    out = var.copy()
    for lane in range(32):
        start = (lane // width) * width
        out[lane] = var[start + src[lane] % width]
    return out


def ref_shfl_up(var, delta, width):
    out = var.copy()
    for lane in range(32):
        start = (lane // width) * width
        if lane - delta[lane] >= start:
            out[lane] = var[lane - delta[lane]]
    return out


def ref_shfl_down(var, delta, width):
    out = var.copy()
    for lane in range(32):
        end = (lane // width) * width + width      # one past the segment
        if lane + delta[lane] < end:
            out[lane] = var[lane + delta[lane]]
    return out


def ref_shfl_xor(var, lane_mask, width):
    # "each group of width consecutive threads are able to access elements from earlier
    # groups ... if they attempt to access elements from later groups ... their own value"
    out = var.copy()
    for lane in range(32):
        end = (lane // width) * width + width
        src = lane ^ lane_mask[lane]
        if src < end:
            out[lane] = var[src]
    return out


def per_lane(x):
    return np.full(32, x) if np.ndim(x) == 0 else np.asarray(x)


# ---------------------------------------------------------------- shuffles vs references

# Each shuffle with every width: first the same argument in every lane (a whole range of them),
# then a different random argument per lane. shfl_sync's source lane wraps (negative and >= 32
# values included); the deltas and lane masks of the others must lie in [0, 31].
SHUFFLES = {
    "shfl_sync": (warp.shfl_sync, ref_shfl, [0, 1, 5, 31, 37, -1, -6], (-64, 64)),
    "shfl_up_sync": (warp.shfl_up_sync, ref_shfl_up, range(32), (0, 32)),
    "shfl_down_sync": (warp.shfl_down_sync, ref_shfl_down, range(32), (0, 32)),
    "shfl_xor_sync": (warp.shfl_xor_sync, ref_shfl_xor, range(32), (0, 32)),
}


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", SHUFFLES)
def test_shuffle_matches_reference(name, width):
    shuffle, ref, uniform_args, per_lane_range = SHUFFLES[name]
    var = random_lanes()
    for arg in uniform_args:
        got = shuffle(FULL, var, arg, width)
        np.testing.assert_array_equal(got, ref(var, per_lane(arg), width))
    arg = rng.integers(*per_lane_range, size=32)
    np.testing.assert_array_equal(shuffle(FULL, var, arg, width), ref(var, arg, width))


def test_shfl_xor_reads_earlier_segments_but_not_later_ones():
    v = np.arange(32) * 10
    got = warp.shfl_xor_sync(FULL, v, 8, width=8)
    # Segments 0..7, 8..15, ...: lane ^ 8 of a lane in segment 0 lies in segment 1 (later:
    # own value); of a lane in segment 1 it lies in segment 0 (earlier: read it).
    expected = np.concatenate([v[0:8], v[0:8], v[16:24], v[16:24]])
    np.testing.assert_array_equal(got, expected)


def test_known_small_cases():
    v = np.arange(32)
    np.testing.assert_array_equal(warp.shfl_up_sync(FULL, v, 1, 4)[:8], [0, 0, 1, 2, 4, 4, 5, 6])
    np.testing.assert_array_equal(warp.shfl_down_sync(FULL, v, 1, 4)[:8], [1, 2, 3, 3, 5, 6, 7, 7])
    np.testing.assert_array_equal(warp.shfl_sync(FULL, v, 2, 16), [2] * 16 + [18] * 16)


@pytest.mark.parametrize("dtype", [np.int8, np.uint32, np.float16, np.float32, np.complex64, bool])
def test_dtype_is_preserved(dtype):
    var = (np.arange(32) % 7).astype(dtype)
    out = warp.shfl_xor_sync(FULL, var, 3)
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, var[np.arange(32) ^ 3])


def test_whole_register_file_is_shuffled_per_register():
    regs = rng.standard_normal((32, 4)).astype(np.float32)
    out = warp.shfl_down_sync(FULL, regs, 2, width=8)
    for r in range(4):
        np.testing.assert_array_equal(out[:, r], ref_shfl_down(regs[:, r], per_lane(2), 8))
    assert out.dtype == np.float32


def test_shuffle_does_not_modify_its_input():
    var = random_lanes()
    before = var.copy()
    warp.shfl_xor_sync(FULL, var, 1)
    np.testing.assert_array_equal(var, before)


# ---------------------------------------------------------------- argument checking

@pytest.mark.parametrize("width", [0, 3, 6, 12, 64, -4])
def test_width_must_be_power_of_two_up_to_32(width):
    with pytest.raises(ValueError, match="power of two"):
        warp.shfl_sync(FULL, np.arange(32), 0, width)


def test_argument_types_and_ranges():
    v = np.arange(32)
    with pytest.raises(TypeError):
        warp.shfl_sync(FULL, v, 0, 8.0)
    with pytest.raises(ValueError, match="2\\*\\*32"):
        warp.shfl_sync(-1, v, 0)
    with pytest.raises(ValueError):
        warp.shfl_sync(2**32, v, 0)
    with pytest.raises(TypeError):
        warp.shfl_sync(float(FULL), v, 0)
    with pytest.raises(TypeError):
        warp.shfl_sync(True, v, 0)
    with pytest.raises(TypeError):
        warp.shfl_sync(FULL, v, 1.0)
    with pytest.raises(ValueError, match="delta must be in \\[0, 31\\]"):
        warp.shfl_up_sync(FULL, v, 33)
    with pytest.raises(ValueError, match="lane_mask"):
        warp.shfl_xor_sync(FULL, v, -1)
    with pytest.raises(ValueError, match="one value per lane"):
        warp.shfl_sync(FULL, np.arange(16), 0)
    with pytest.raises(TypeError):
        warp.shfl_sync(FULL, v, 0, active=np.ones(32, dtype=int))
    # NumPy integer scalars are accepted as masks.
    for m in (np.uint32(FULL), np.int64(FULL), np.uint64(FULL)):
        np.testing.assert_array_equal(warp.shfl_sync(m, v, 3), np.full(32, 3))


# ---------------------------------------------------------------- member-mask rules

def test_executing_lane_not_in_mask():
    with pytest.raises(WarpError, match="lane 16 executes the call but is not in the mask 0x0000ffff"):
        warp.shfl_xor_sync(0x0000FFFF, np.arange(32), 1)      # all 32 lanes execute


def test_masked_lane_not_executing():
    with pytest.raises(WarpError, match="names lane 7, which does not execute") as info:
        warp.shfl_down_sync(0x000000FF, np.arange(32), 1, active=0x0000007F)
    assert "0x000000ff" in str(info.value)


def test_reading_a_lane_outside_the_mask():
    src = np.arange(32)
    src[2] = 9
    with pytest.raises(WarpError, match="lane 2 reads lane 9, which is not in the mask 0x0000000f"):
        warp.shfl_sync(0x0000000F, np.arange(32), src, active=0x0000000F)
    # width 16, lane_mask 16: lanes 16..31 read lanes 0..15 (an earlier segment).
    with pytest.raises(WarpError, match="lane 16 reads lane 0"):
        warp.shfl_xor_sync(0xFFFF0000, np.arange(32), 16, width=16, active=0xFFFF0000)


def test_partial_warp_with_matching_mask_and_clamped_sources():
    v = random_lanes()
    # Lanes 0..7 execute with mask 0xff. For lanes 4..7, lane + 4 falls past the segment
    # end, so they keep their own value and never read the (unnamed) lanes 8..11.
    out = warp.shfl_down_sync(0xFF, v, 4, width=8, active=0xFF)
    np.testing.assert_array_equal(out[:8], np.concatenate([v[4:8], v[4:8]]))
    np.testing.assert_array_equal(out[8:], v[8:])          # non-executing lanes unchanged
    active = np.zeros(32, bool)
    active[8:16] = True
    out = warp.shfl_up_sync(0xFF00, v, 1, width=8, active=active)
    np.testing.assert_array_equal(out[8:16], np.concatenate([v[8:9], v[8:15]]))


def test_exited_lanes_may_be_named_but_not_read():
    v = random_lanes()
    # A partial last warp of 20 threads: lanes 20..31 do not exist, the mask is still full.
    out = warp.shfl_xor_sync(FULL, v, 1, active=0x000FFFFF, exited=0xFFF00000)
    np.testing.assert_array_equal(out[:20], v[np.arange(20) ^ 1])
    with pytest.raises(WarpError, match="lane 19 reads lane 20, which has exited"):
        warp.shfl_down_sync(FULL, v, 1, active=0x000FFFFF, exited=0xFFF00000)


QUADS = 0xF << ((warp.LANES // 4) * 4)      # each lane passes its own quad's mask


def test_per_lane_quad_masks_valid():
    v = random_lanes()
    for offset in (1, 2, 3):
        np.testing.assert_array_equal(warp.shfl_xor_sync(QUADS, v, offset),
                                      warp.shfl_xor_sync(FULL, v, offset))
    np.testing.assert_array_equal(warp.shfl_sync(QUADS, v, 0, width=4), np.repeat(v[::4], 4))
    # Only quads 0 and 2 execute: fine, their masks name only executing lanes.
    active = (warp.LANES // 4) % 2 == 0
    out = warp.shfl_down_sync(QUADS, v, 1, width=4, active=active)
    np.testing.assert_array_equal(out[active], ref_shfl_down(v, per_lane(1), 4)[active])
    np.testing.assert_array_equal(out[~active], v[~active])


def test_per_lane_quad_masks_invalid():
    v = random_lanes()
    with pytest.raises(WarpError, match="lane 0 reads lane 4, which is not in its own mask 0x0000000f"):
        warp.shfl_xor_sync(QUADS, v, 4)                     # crosses quads
    overlapping = QUADS.copy()
    overlapping[1] = 0x3                                    # lane 1's mask differs from lane 0's
    with pytest.raises(WarpError, match="lane 0 passes mask 0x0000000f, which names lane 1, "
                                        "but lane 1 passes mask 0x00000003"):
        warp.shfl_xor_sync(overlapping, v, 1)
    own_bit_missing = QUADS.copy()
    own_bit_missing[5] = 0xD0                               # lanes 4, 6, 7: lane 5 left out
    with pytest.raises(WarpError, match="lane 5 executes the call but is not in its own mask 0x000000d0"):
        warp.shfl_xor_sync(own_bit_missing, v, 1)
    with pytest.raises(WarpError, match="lane 4 passes mask 0x000000f0, which names lane 7, "
                                        "but lane 7 does not execute"):
        warp.shfl_xor_sync(QUADS, v, 1, active=warp.LANES != 7)


# ---------------------------------------------------------------- helpers

@pytest.mark.parametrize("op, reduce", [(np.maximum, np.max), (np.minimum, np.min), (np.add, np.sum)])
def test_reduce_xor_matches_numpy(op, reduce):
    v = rng.integers(-10**6, 10**6, size=32)
    out = warp.reduce_xor(v, op)
    np.testing.assert_array_equal(out, np.full(32, reduce(v)))


def test_reduce_xor_quads_and_half_warps():
    v = random_lanes()
    quad_max = np.repeat(v.reshape(8, 4).max(axis=1), 4)
    np.testing.assert_array_equal(warp.reduce_xor(v, np.maximum, offsets=(1, 2)), quad_max)
    np.testing.assert_array_equal(warp.reduce_xor(v, np.maximum, offsets=(2, 1), mask=QUADS), quad_max)
    # Only lanes 0..15 run the reduction (mask 0xffff); the others keep their values.
    out = warp.reduce_xor(v, np.add, offsets=(8, 4, 2, 1), mask=0x0000FFFF)
    np.testing.assert_array_equal(out[:16], np.full(16, v[:16].sum()))
    np.testing.assert_array_equal(out[16:], v[16:])
    # A plain Python callable works too.
    out = warp.reduce_xor(v, lambda a, b: np.where(a > b, a, b))
    np.testing.assert_array_equal(out, np.full(32, v.max()))


def test_broadcast():
    v = random_lanes()
    np.testing.assert_array_equal(warp.broadcast(v, 7), np.full(32, v[7]))
    np.testing.assert_array_equal(warp.broadcast(v, 3, width=8), np.repeat(v[3::8], 8))
    out = warp.broadcast(v, 2, mask=0x0000000F)
    np.testing.assert_array_equal(out, np.concatenate([np.full(4, v[2]), v[4:]]))


def test_lane_helpers():
    np.testing.assert_array_equal(warp.lane_id(), np.arange(32))
    np.testing.assert_array_equal(warp.lanes(), warp.LANES)
    assert warp.mask_of([0, 1, 2, 3]) == 0xF
    assert warp.mask_of(np.ones(32, bool)) == FULL
    assert warp.mask_of([31]) == 0x80000000
    sel = rng.random(32) < 0.5
    np.testing.assert_array_equal(warp.lanes_in_mask(warp.mask_of(sel)), sel)


# ---------------------------------------------------------------- layouts

def permutation_layout(rows, cols, n_regs):
    """A random layout holding each element of a rows x cols matrix exactly once."""
    flat = rng.permutation(rows * cols).reshape(32, n_regs)
    return np.stack([flat // cols, flat % cols], axis=-1)


def test_validate_layout_accepts_permutations():
    lay = permutation_layout(16, 8, 4)
    out = warp.validate_layout(lay, (16, 8))
    np.testing.assert_array_equal(out, lay)


def test_validate_layout_out_of_range():
    lay = permutation_layout(16, 16, 8)
    lay[3, 5] = (16, 2)
    with pytest.raises(LayoutError, match=r"lane 3 reg 5 -> \(16, 2\)"):
        warp.validate_layout(lay, (16, 16))
    lay[3, 5] = (0, -1)
    with pytest.raises(LayoutError, match="outside the 16x16 matrix"):
        warp.to_fragment(np.zeros((16, 16)), lay)


def test_validate_layout_hole_and_duplicate():
    lay = permutation_layout(16, 16, 8)
    # Make lane 9 reg 1 hold the element lane 2 reg 6 holds: a duplicate plus a hole.
    lost = tuple(int(x) for x in lay[9, 1])
    lay[9, 1] = lay[2, 6]
    dup = tuple(int(x) for x in lay[2, 6])
    with pytest.raises(LayoutError) as info:
        warp.validate_layout(lay, (16, 16))
    msg = str(info.value)
    assert f"held by no (lane, reg): {lost}" in msg
    assert f"{dup} by lane 2 reg 6, lane 9 reg 1" in msg
    # With duplicates allowed, the hole is still an error ...
    with pytest.raises(LayoutError, match="held by no"):
        warp.validate_layout(lay, (16, 16), allow_duplicates=True)
    # ... and a layout that only duplicates is fine.
    doubled = np.concatenate([permutation_layout(16, 8, 4)] * 2, axis=1)
    warp.validate_layout(doubled, (16, 8), allow_duplicates=True)
    with pytest.raises(LayoutError, match="allow_duplicates=True"):
        warp.validate_layout(doubled, (16, 8))


def test_validate_layout_bad_shape():
    with pytest.raises(LayoutError, match=r"\(32, n_regs, 2\)"):
        warp.validate_layout(np.zeros((16, 8, 2), int), (16, 16))
    with pytest.raises(LayoutError, match="integers"):
        warp.validate_layout(np.zeros((32, 8, 2)), (16, 16))


def test_fragment_round_trip():
    for lay, shape in [(permutation_layout(16, 16, 8), (16, 16)),
                       (permutation_layout(8, 16, 4), (8, 16)),
                       (warp.accumulator_16x16_sm80(), (16, 16))]:
        m = rng.standard_normal(shape).astype(np.float32)
        frag = warp.to_fragment(m, lay)
        assert frag.shape == (32, lay.shape[1]) and frag.dtype == np.float32
        for lane in (0, 13, 31):
            for r in range(lay.shape[1]):
                assert frag[lane, r] == m[lay[lane, r, 0], lay[lane, r, 1]]
        np.testing.assert_array_equal(warp.from_fragment(frag, lay, shape), m)


def test_from_fragment_fill_and_duplicates():
    m = np.arange(16 * 8).reshape(16, 8)
    half = permutation_layout(16, 4, 2)                       # only columns 0..3
    back = warp.from_fragment(warp.to_fragment(m, half), half, (16, 8))
    np.testing.assert_array_equal(back[:, :4], m[:, :4])
    assert np.isnan(back[:, 4:]).all()
    assert warp.from_fragment(warp.to_fragment(m, half), half, (16, 8), fill=-1).dtype.kind == "i"

    doubled = np.concatenate([permutation_layout(16, 8, 4)] * 2, axis=1)
    frag = warp.to_fragment(m, doubled)
    np.testing.assert_array_equal(warp.from_fragment(frag, doubled, (16, 8)), m)
    frag[5, 6] += 1                                           # one copy now disagrees
    r, c = doubled[5, 6]
    with pytest.raises(LayoutError, match=rf"copies of element \({r}, {c}\) disagree"):
        warp.from_fragment(frag, doubled, (16, 8))


def test_inverse_layout():
    lay = warp.accumulator_16x16_sm80()
    inv = warp.inverse_layout(lay, (16, 16))
    for row in range(16):
        for col in range(16):
            assert len(inv[row][col]) == 1
            lane, reg = inv[row][col][0]
            assert tuple(lay[lane, reg]) == (row, col)
    doubled = np.concatenate([lay, lay], axis=1)
    assert warp.inverse_layout(doubled, (16, 16))[9][3] == [(5, 3), (5, 11)]


def test_accumulator_16x16_sm80_covers_each_element_once():
    lay = warp.accumulator_16x16_sm80()
    assert lay.shape == (32, 8, 2)
    np.testing.assert_array_equal(lay, fragments.wmma_16x16_accumulator())   # the one home
    warp.validate_layout(lay, (16, 16))
    seen = np.zeros((16, 16), int)
    for lane in range(32):
        for r in range(8):
            seen[lay[lane, r, 0], lay[lane, r, 1]] += 1
    assert (seen == 1).all()
    # The PTX mma.m16n8k16 accumulator table, per n8 half: c0, c1 in row groupID,
    # c2, c3 in row groupID + 8; column threadID_in_group * 2 + (i & 1).
    for lane in range(32):
        group, t = lane // 4, lane % 4
        for half in range(2):
            for i in range(4):
                expected = (group + (8 if i >= 2 else 0), half * 8 + t * 2 + (i & 1))
                assert tuple(lay[lane, half * 4 + i]) == expected


# ---------------------------------------------------------------- grading messages

def test_format_diff_names_the_wrong_lane():
    want = rng.standard_normal((32, 8))
    assert warp.format_diff(want.copy(), want) == ""
    got = want.copy()
    got[4, 2] = 7.0
    got[30, 0] = 9.5
    msg = warp.format_diff(got, want)
    assert msg.startswith("2 of 256 values wrong")
    assert f"lane 4 reg 2: got 7.0, expected {want[4, 2]}" in msg
    assert "lane 30 reg 0" in msg
    assert msg.index("lane 4 reg 2") < msg.index("lane 30 reg 0")
    msg = warp.format_diff(np.arange(32) + (np.arange(32) == 17), np.arange(32))
    assert "lane 17: got 18, expected 17" in msg
    assert "row 3 col 3" in warp.format_diff(np.eye(4), np.zeros((4, 4)), index_names=("row", "col"))
    assert "element (2, 2): got 1.0" in warp.format_diff(np.eye(4), np.zeros((4, 4)))
    assert "shape mismatch" in warp.format_diff(np.zeros((32, 4)), np.zeros((32, 8)))


def test_format_diff_takes_a_bound_per_element():
    """A per-element ``atol`` array (lab 03 grades row sums with one bound per row)."""
    want = np.zeros((3, 4))
    atol = np.full((3, 4), 0.5)
    atol[1, 2] = 0.01
    got = want + 0.1
    msg = warp.format_diff(got, want, atol=atol, index_names=("tile", "row"))
    assert msg.startswith("1 of 12 values wrong") and "tile 1 row 2" in msg
    assert warp.format_diff(want + 0.001, want, atol=atol) == ""


def test_format_diff_nan_tolerance_and_truncation():
    want = np.zeros((32, 8))
    want[1, 1] = np.nan
    got = want.copy()
    msg = warp.format_diff(got, want)
    assert "1 of 256 values wrong" in msg and "equal_nan=True" in msg
    assert warp.format_diff(got, want, equal_nan=True) == ""
    got[0, 0] = 1e-9
    assert warp.format_diff(got, want, equal_nan=True) != ""
    assert warp.format_diff(got, want, equal_nan=True, atol=1e-6) == ""
    msg = warp.format_diff(np.ones((32, 8)), np.zeros((32, 8)), max_items=3)
    assert msg.count("got 1.0") == 3 and "... and 253 more" in msg
