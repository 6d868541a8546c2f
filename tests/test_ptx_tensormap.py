"""The interpreter's TMA (``cp.async.bulk.tensor``, fraglab/ptx/tensormap.py) on an NVRTC-compiled
kernel that issues one tensor copy of rank 1 to 5, against fraglab.tma.box_image (the NumPy
model, written independently from the ISA's definition): every swizzle, boxes past every edge
(negative coordinates, ragged rows and columns, entirely outside), a 128-aligned destination
off the 1024-byte pattern, transaction counts (the full box counts; announcing fewer or more
bytes deadlocks, named), refused maps (not fraglab's, freed, changed in memory, a rank the
instruction does not have, a tensor that is not an argument, swizzled rows narrower than the span), misaligned maps and destinations,
a read before the wait, seeded schedules, and the instruction table. CPU only."""
from __future__ import annotations

import gc

import numpy as np
import pytest

from fraglab import ptx, tma
from fraglab.ptx import accepted
from fraglab.ptx.tensormap import TensorMapError

pytestmark = pytest.mark.skipif(not ptx.SUPPORTS_SM90A, reason="no sm_90a interpreter")

_OPS = {n: ", ".join(f"%{i + 1}" for i in range(n)) for n in range(1, 6)}
_ASM = "\n".join(
    f'''    case {n}: asm volatile("cp.async.bulk.tensor.{n}d.shared::cluster.global.tile.mbarrier::'''
    f'''complete_tx::bytes [%0], [%{n + 1}, {{{_OPS[n]}}}], [%{n + 2}];" :: "r"(dst), '''
    + ", ".join(f'"r"(c[{i}])' for i in range(n)) + ', "l"(m), "r"(b) : "memory"); break;'
    for n in range(1, 6))

SRC = r'''
#include "hopper.cuh"
// One tensor copy of rank `rank` (12: rank 2 into .shared::cta), then (if `wait`) the wait and a
// byte-wise copy of the box out of shared memory.
extern "C" __global__ void copy_box(const void* map, const void* tensor, unsigned char* out,
                                    const int* c, int rank, unsigned nbytes, unsigned expect,
                                    int dst_off, int map_off, int wait) {
  SM90A_ONLY(
  extern __shared__ unsigned char smem[];
  __shared__ u64 bar;
  const u32 base = (smem_u32(smem) + 1023) & ~1023u;
  const u32 dst = base + dst_off, b = smem_u32(&bar);
  const char* m = (const char*)map + map_off;
  unsigned char* s = smem + (dst - smem_u32(smem));
  if (!wait) {                       // written before: a read without the wait is a race, not
    for (unsigned i = threadIdx.x; i < nbytes; i += blockDim.x) s[i] = 0;   // an uninitialised read
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    tma_prefetch(m);
    mbar_init(b, 1);
    mbar_init_fence();
    tma_fence_acquire(m);
    mbar_arrive_expect_tx(b, expect);
    switch (rank) {
''' + _ASM + r'''
    case 12: asm volatile("cp.async.bulk.tensor.2d.shared::cta.global.tile.mbarrier::complete_tx::bytes"
                          " [%0], [%1, {%2, %3}], [%4];" :: "r"(dst), "l"(m), "r"(c[0]), "r"(c[1]),
                          "r"(b) : "memory"); break;
    }
  }
  __syncthreads();
  if (wait) mbar_wait(b, 0);
  for (unsigned i = threadIdx.x; i < nbytes; i += blockDim.x) out[i] = s[i];
  )
}
'''


def _prog():
    return ptx.load("tensormap_test.cu", "sm_90a", source=SRC)


def copy(m, tensor, coords, *, rank=None, expect=None, dst_off=0, map_dev=None, map_off=0,
         wait=True, **kw):
    """Run one copy of map ``m`` at ``coords`` (NumPy order); returns the box's shared bytes."""
    n = m.box_bytes
    out = np.zeros(n, np.uint8)
    c = np.array(list(reversed(coords)) + [0] * (5 - len(coords)), np.int32)
    args = (m.device if map_dev is None else map_dev, tensor, out, c,
            np.int32(rank or len(coords)), np.uint32(n), np.uint32(n if expect is None else expect),
            np.int32(dst_off), np.int32(map_off), np.int32(wait))
    ptx.launch(_prog(), "copy_box", grid=1, block=128, args=args, shared_mem=2048 + n, **kw)
    return out


def _data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    return rng.integers(1, np.iinfo(dt).max, size=shape, dtype=dt)


# (name, shape, dtype, box, coords, swizzle)
CASES = [
    ("1d f32 tail", (100,), np.float32, (32,), (80,), 128),
    ("2d f16 sw128", (128, 64), np.float16, (64, 64), (32, 0), 128),
    ("2d f16 sw64", (64, 96), np.float16, (32, 32), (8, 64), 64),
    ("2d u16 sw32", (64, 48), np.uint16, (16, 16), (40, 32), 32),
    ("2d f16 sw0 ragged both ways", (50, 40), np.float16, (16, 32), (40, 24), 0),
    ("2d f16 negative", (64, 64), np.float16, (64, 64), (-7, -8), 128),
    ("2d f16 outside", (64, 64), np.float16, (8, 64), (64, 0), 128),
    ("3d f16 heads", (3, 70, 64), np.float16, (1, 64, 64), (2, 64, 0), 128),
    ("4d f32", (2, 3, 10, 32), np.float32, (2, 2, 8, 32), (1, 2, 5, 0), 128),
    ("5d u8", (2, 2, 3, 4, 64), np.uint8, (1, 2, 2, 4, 64), (1, -1, 2, 1, 16), 64),
]


@pytest.mark.parametrize("name, shape, dtype, box, coords, swizzle", CASES, ids=[c[0] for c in CASES])
def test_copies_match_the_numpy_model(name, shape, dtype, box, coords, swizzle):
    t = _data(shape, dtype)
    m = tma.tensor_map(t, box, swizzle=swizzle)
    got = copy(m, t, coords)
    want = tma.box_image(t, box, coords, swizzle)
    assert np.array_equal(got, want), f"{int((got != want).sum())} bytes differ"


def test_the_comparison_sees_a_wrong_swizzle_or_a_shift():
    t = _data((64, 64), np.float16)
    m = tma.tensor_map(t, (32, 32), swizzle=64)
    got = copy(m, t, (8, 0))
    assert np.array_equal(got, tma.box_image(t, (32, 32), (8, 0), 64))
    as_32_byte_rows = np.ascontiguousarray(t[8:40, :32]).reshape(64, 16)   # the same bytes
    for wrong in (tma.box_image(as_32_byte_rows, (64, 16), (0, 0), 32),
                  tma.box_image(t, (32, 32), (8, 0), 0), tma.box_image(t, (32, 32), (9, 0), 64)):
        assert not np.array_equal(got, wrong)


def test_shared_cta_destination():
    t = _data((64, 64), np.float16)
    m = tma.tensor_map(t, (16, 64), swizzle=128)
    assert np.array_equal(copy(m, t, (3, 0), rank=12), tma.box_image(t, (16, 64), (3, 0), 128))


def test_a_destination_off_the_1024_byte_pattern_swizzles_by_absolute_address():
    t = _data((64, 64), np.float16)
    m = tma.tensor_map(t, (8, 64), swizzle=128)
    got = copy(m, t, (4, 0), dst_off=128)
    # the same rows one 128-byte line further on: the model's image of a box with a row in front
    want = tma.box_image(t, (9, 64), (3, 0), 128)[128:]
    assert np.array_equal(got, want)
    assert not np.array_equal(got, tma.box_image(t, (8, 64), (4, 0), 128))


def test_the_full_box_counts_out_of_bound_elements_included():
    t = _data((50, 64), np.float16)
    m = tma.tensor_map(t, (64, 64), swizzle=128)
    assert not copy(m, t, (100, 0)).any()                        # all zeros, and it completes
    valid = (50 - 32) * 64 * 2                                   # rows 32..49 of a box at row 32
    with pytest.raises(ptx.Deadlock, match="negative: copies completed more bytes than "
                       "expect_tx announced"):
        copy(m, t, (32, 0), expect=valid)


def test_announcing_more_bytes_deadlocks():
    t = _data((64, 64), np.float16)
    m = tma.tensor_map(t, (16, 64), swizzle=128)
    with pytest.raises(ptx.Deadlock, match="16 transaction bytes pending"):
        copy(m, t, (0, 0), expect=m.box_bytes + 16)


def test_maps_not_made_by_fraglab_are_refused():
    t = _data((64, 64), np.float16)
    m = tma.tensor_map(t, (16, 64))
    for raw in (np.zeros(128, np.uint8), np.random.default_rng(1).integers(0, 256, 128, np.uint8)):
        with pytest.raises(TensorMapError, match="driver's format is opaque"):
            copy(m, t, (0, 0), map_dev=raw)


def test_a_freed_map_is_refused():
    t = _data((64, 64), np.float16)
    m = tma.tensor_map(t, (16, 64))
    raw, box_bytes = m.device.copy(), m.box_bytes
    del m
    gc.collect()
    stub = type("M", (), {"device": raw, "box_bytes": box_bytes})
    with pytest.raises(TensorMapError, match="keep the TensorMap object"):
        copy(stub, t, (0, 0))


def test_a_map_changed_in_memory_is_refused():
    t = _data((64, 64), np.float16)
    m = tma.tensor_map(t, (16, 64))
    for at in (24, 104, 18):                                     # innermost size, box, swizzle
        raw = m.device.copy()
        raw[at] ^= 0x20
        with pytest.raises(TensorMapError, match="disagree"):
            copy(m, t, (0, 0), map_dev=raw)


def test_swizzled_rows_narrower_than_the_span_stop_the_launch():
    """tensor_map refuses such a box; a map whose TensorMap was changed behind its back (box and
    bytes alike, so that they agree) reaches the copy, which stops and names the rule instead of
    guessing the layout the H100 writes (past the box's bytes)."""
    t = _data((64, 64), np.float16)
    with pytest.raises(ValueError, match="less than the 128-byte swizzle span"):
        tma.tensor_map(t, (16, 32), swizzle=128)
    m = tma.tensor_map(t, (16, 64), swizzle=128)
    m.box = (16, 32)                                             # 64-byte rows, 128-byte swizzle
    m.device = np.frombuffer(tma.encode(m), np.uint8).copy()
    with pytest.raises(TensorMapError, match="only for rows of exactly 128 bytes"):
        copy(m, t, (0, 0))
    m.box, m.swizzle = (16, 32), 64                              # the same rows, their own span
    m.device = np.frombuffer(tma.encode(m), np.uint8).copy()
    assert np.array_equal(copy(m, t, (8, 16)), tma.box_image(t, (16, 32), (8, 16), 64))


def test_a_rank_the_map_does_not_have_is_refused():
    t = _data((2, 64, 64), np.float16)
    m = tma.tensor_map(t, (1, 16, 64))
    with pytest.raises(TensorMapError, match=r"\.2d tensor copy with a map of a 3-dimensional"):
        copy(m, t, (0, 0, 0), rank=2)


def test_the_tensor_must_be_an_argument():
    t = _data((64, 64), np.float16)
    m = tma.tensor_map(t, (16, 64))
    with pytest.raises(TensorMapError, match="not an argument of this launch"):
        copy(m, t.copy(), (0, 0))


def test_a_view_finds_the_array_it_belongs_to():
    full = _data((32, 128), np.float16)
    view = full[:, 32:96]
    m = tma.tensor_map(view, (16, 64), swizzle=128)
    assert np.array_equal(copy(m, full, (8, 0)), tma.box_image(view, (16, 64), (8, 0), 128))


def test_misaligned_map_and_destination():
    t = _data((64, 64), np.float16)
    m = tma.tensor_map(t, (16, 64))
    shifted = np.zeros(256, np.uint8)
    shifted[16:144] = m.device
    with pytest.raises(ptx.MemoryAccessError, match="not a multiple of 64 bytes"):
        copy(m, t, (0, 0), map_dev=shifted, map_off=16)
    shifted[:128] = m.device                                     # the same bytes at offset 0: fine
    assert np.array_equal(copy(m, t, (0, 0), map_dev=shifted), tma.box_image(t, (16, 64), (0, 0)))
    with pytest.raises(ptx.MemoryAccessError, match="must be 128-byte aligned"):
        copy(m, t, (0, 0), dst_off=16)


def test_reading_the_box_before_the_wait_is_a_race():
    t = _data((64, 64), np.float16)
    m = tma.tensor_map(t, (16, 64))
    with pytest.raises(ptx.SharedRace, match="still writing"):
        copy(m, t, (0, 0), wait=False)


def test_seeded_schedules_find_the_tensor_among_the_copies():
    t = _data((64, 64), np.float16)
    m = tma.tensor_map(t, (32, 64))
    got = copy(m, t, (20, 0), seeds=(1, 2))
    assert np.array_equal(got, tma.box_image(t, (32, 64), (20, 0), 128))


def test_the_instruction_table():
    for op in ("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
               "cp.async.bulk.tensor.5d.shared::cta.global.mbarrier::complete_tx::bytes",
               "prefetch.tensormap", "fence.proxy.tensormap::generic.acquire.gpu"):
        assert accepted.check(op) is None, op
    why = accepted.check("cp.async.bulk.tensor.2d.shared::cluster.global.im2col."
                         "mbarrier::complete_tx::bytes")
    assert why and ".im2col" in why
    why = accepted.check("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group")
    assert why is not None
