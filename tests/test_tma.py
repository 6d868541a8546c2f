"""fraglab.tma: every argument tensor_map refuses (before anything is encoded, in both modes), the
interpreter's 128-byte encoding and its registry, and box_image (the NumPy model of one TMA
copy) against hand-written expectations. The driver's encoding is exercised on the GPU (here in
``test_driver_*``, and by tests/test_10_fa3_pipelining_tma_tile.py's kernels)."""
import gc

import numpy as np
import pytest

from fraglab import tma


def _good():
    return np.zeros((4, 128, 64), np.float16)


# (make the array, box, keywords, exception, words of the message)
BAD = [
    ("a list", lambda: [[0.0] * 64] * 64, (64, 64), {}, TypeError, "numpy.ndarray"),
    ("complex", lambda: np.zeros((8, 64), np.complex64), (8, 8), {}, TypeError, "complex64"),
    ("bool", lambda: np.zeros((8, 64), bool), (8, 16), {}, TypeError, "bool"),
    ("swizzle 16", _good, (1, 64, 64), dict(swizzle=16), ValueError, "swizzle must be"),
    ("swizzle True", _good, (1, 64, 64), dict(swizzle=True), ValueError, "swizzle must be"),
    ("rank 0", lambda: np.zeros((), np.float32), (), {}, ValueError, "1 to 5 dimensions"),
    ("rank 6", lambda: np.zeros((1,) * 5 + (8,), np.float32), (1,) * 5 + (8,), {}, ValueError,
     "1 to 5 dimensions"),
    ("box not ints", _good, (1, 64.0, 64), {}, TypeError, "tuple of integers"),
    ("box short", _good, (64, 64), {}, ValueError, "has 2 dimensions, the tensor 3"),
    ("box 0", _good, (0, 64, 64), {}, ValueError, "box[0] = 0"),
    ("box 257", lambda: np.zeros((300, 8), np.float32), (257, 8), {}, ValueError, "box[0] = 257"),
    ("inner 20 bytes", _good, (1, 64, 10), {}, ValueError, "multiple of 16 bytes"),
    ("inner over the span", _good, (1, 64, 64), dict(swizzle=64), ValueError,
     "more than the 64-byte swizzle span"),
    # the driver accepts these, the H100 then writes past the box (course's rule: rows of the span)
    ("inner under the span", _good, (1, 64, 32), dict(swizzle=128), ValueError,
     "less than the 128-byte swizzle span"),
    ("inner under the 64-byte span", lambda: np.zeros((8, 64), np.float32), (8, 8),
     dict(swizzle=64), ValueError, "less than the 64-byte swizzle span"),
    ("box over shared memory", lambda: np.zeros((256, 256), np.float32), (256, 256),
     dict(swizzle=0), ValueError, "does not fit in shared memory"),
    ("strided inner", lambda: np.zeros((8, 128), np.float16)[:, ::2], (8, 16), {}, ValueError,
     "innermost dimension must be contiguous"),
    ("misaligned base", lambda: np.zeros((8, 72), np.float16)[:, 1:65], (8, 16), {}, ValueError,
     "16-byte aligned"),
    ("row stride 14 bytes", lambda: np.zeros((8, 7), np.float16), (8, 8), dict(swizzle=0),
     ValueError, "multiple of 16 bytes below 2^40"),
    ("l2 promotion 64", _good, (1, 64, 64), dict(l2_promotion=64), ValueError, "l2_promotion"),
]


def _pattern(words):
    import re
    return re.escape(words)


@pytest.mark.parametrize("name, make, box, kw, exc, words", BAD, ids=[b[0] for b in BAD])
def test_tensor_map_refuses_before_encoding(name, make, box, kw, exc, words):
    before = tma._NEXT_KEY[0]
    with pytest.raises(exc, match=_pattern(words)):
        tma.tensor_map(make(), box, **kw)
    assert tma._NEXT_KEY[0] == before, "a refused map must not be encoded or registered"


def test_good_maps_of_every_rank_type_and_view():
    for arr, box in [(np.zeros(64, np.float32), (32,)), (np.zeros((8, 64), np.uint16), (8, 64)),
                     (np.zeros((2, 3, 8, 16), np.float64), (1, 2, 8, 16)),
                     (np.zeros((2, 2, 2, 4, 16), np.int8), (1, 1, 2, 4, 16)),
                     (np.zeros((16, 128), np.float16)[:, 32:96], (16, 64))]:
        inner = box[-1] * arr.itemsize
        m = tma.tensor_map(arr, box, swizzle=inner if inner in tma.SWIZZLES else 0)
        assert m.device.dtype == np.uint8 and m.device.shape == (128,)
        assert m.box_bytes == int(np.prod(box)) * arr.itemsize
        d = tma.decode(m.device)
        assert (d.rank, d.elem_size) == (arr.ndim, arr.itemsize)
        assert d.dims == tuple(reversed(arr.shape)) and d.strides == tuple(reversed(arr.strides))
        assert d.box == tuple(reversed(box)) and tma.lookup(d.key) is m


def test_narrow_rows_name_the_swizzle_that_fits():
    a = np.zeros((8, 64), np.float16)
    with pytest.raises(ValueError, match="box row 64 elements, or use swizzle 32"):
        tma.tensor_map(a, (8, 16), swizzle=128)                 # 32-byte rows
    with pytest.raises(ValueError, match="box row 32 elements, or use swizzle 0"):
        tma.tensor_map(a, (8, 24), swizzle=64)                  # 48-byte rows: no span fits
    for sw in (32, 64, 128):                                    # rows of exactly the span: fine
        assert tma.tensor_map(a, (8, sw // 2), swizzle=sw).box == (8, sw // 2)
    assert tma.tensor_map(a, (8, 8), swizzle=0).box_bytes == 128


def test_the_largest_box_is_the_opt_in_shared_memory():
    """227 KB (sm_90's opt-in shared memory per block, the interpreter's limit too) is accepted,
    1 KB more is refused; the limit is the interpreter's own number."""
    from fraglab.ptx import program
    assert tma.SM90_SHARED_OPTIN == program.MAX_SHARED_SM90
    a = np.zeros((228, 256), np.float32)
    assert tma.tensor_map(a[:227], (227, 256), swizzle=0).box_bytes == tma.SM90_SHARED_OPTIN
    with pytest.raises(ValueError, match=r"takes 233472 bytes, which does not fit in shared "
                       r"memory.* 232448 bytes"):
        tma.tensor_map(a, (228, 256), swizzle=0)


def test_the_interpreter_encoding_field_by_field():
    a = np.zeros((4, 128, 64), np.float16)
    m = tma.tensor_map(a, (1, 64, 64), swizzle=64 * 2)
    raw = bytes(m.device)
    assert raw[:8] == b"fraglabT" and int.from_bytes(raw[8:12], "little") == tma.VERSION
    assert int.from_bytes(raw[12:16], "little") == m.key
    assert raw[16] == 3 and raw[17] == 2 and int.from_bytes(raw[18:20], "little") == 128
    dims = np.frombuffer(raw[24:64], np.uint64)
    assert list(dims) == [64, 128, 4, 0, 0]
    assert list(np.frombuffer(raw[64:104], np.uint64)) == [2, 128, 128 * 128, 0, 0]
    assert list(np.frombuffer(raw[104:114], np.uint16)) == [64, 64, 1, 0, 0]
    assert not any(raw[114:])


def test_decode_refuses_foreign_and_newer_maps():
    with pytest.raises(ValueError, match="driver's format is opaque"):
        tma.decode(np.random.default_rng(0).integers(0, 256, 128, dtype=np.uint8))
    m = tma.tensor_map(np.zeros((8, 64), np.float16), (8, 64))
    raw = bytearray(m.device)
    raw[8] = 2
    with pytest.raises(ValueError, match="version 2"):
        tma.decode(raw)
    assert tma.decode(m.device).key == m.key


def test_lookup_fails_once_the_map_is_freed():
    m = tma.tensor_map(np.zeros((8, 64), np.float16), (8, 64))
    key, dev = m.key, m.device
    assert tma.lookup(key) is m
    del m
    gc.collect()
    with pytest.raises(LookupError, match="keep the TensorMap object"):
        tma.lookup(key)
    assert tma.decode(dev).key == key


# ---- box_image against hand-written expectations ----------------------------------------------

def _rows_of_chunks(rows, chunks):
    """A uint8 array (rows, chunks * 16) whose 16-byte chunk (r, c) is filled with r * 16 + c."""
    a = np.zeros((rows, chunks, 16), np.uint8)
    for r in range(rows):
        for c in range(chunks):
            a[r, c] = r * 16 + c
    return a.reshape(rows, chunks * 16)


@pytest.mark.parametrize("swizzle, perm", [
    # row r's logical chunk c lands at physical chunk perm(r, c): the ISA's address-bit XORs
    (128, lambda r, c: c ^ (r % 8)),               # bits [4:6] ^= [7:9]; 128-byte rows
    (64, lambda r, c: c ^ ((r // 2) % 4)),         # bits [4:5] ^= [7:8]; 64-byte rows
    (32, lambda r, c: c ^ ((r // 4) % 2)),         # bit 4 ^= bit 7; 32-byte rows
    (0, lambda r, c: c)])
def test_box_image_swizzles_by_hand(swizzle, perm):
    chunks = swizzle // 16 if swizzle else 8
    rows = 16
    t = _rows_of_chunks(rows, chunks)
    img = tma.box_image(t, (rows, chunks * 16), (0, 0), swizzle).reshape(rows, chunks, 16)
    for r in range(rows):
        for c in range(chunks):
            assert (img[r, perm(r, c)] == r * 16 + c).all(), (r, c)


def test_box_image_zero_fills_outside_and_rejects_partial_lines():
    t = np.arange(1, 8 * 16 + 1, dtype=np.uint8).reshape(8, 16)
    img = tma.box_image(t, (4, 16), (-2, 0), 0).reshape(4, 16)
    assert (img[:2] == 0).all() and (img[2:] == t[:2]).all()
    img = tma.box_image(t, (2, 32), (6, -8), 0).reshape(2, 32)
    assert (img[:, :8] == 0).all() and (img[:, 8:24] == t[6:8]).all() and (img[:, 24:] == 0).all()
    assert not tma.box_image(t, (4, 16), (100, 0), 0).any()
    with pytest.raises(ValueError, match="whole 128-byte lines"):
        tma.box_image(np.zeros((8, 32), np.uint8), (1, 32), (0, 0), 32)


@pytest.mark.parametrize("box, swizzle", [((8, 16), 32), ((8, 32), 64), ((8, 64), 128),
                                          ((8, 32), 128), ((4, 64), 32)])
def test_box_image_refuses_rows_other_than_the_span(box, swizzle):
    """The ISA's swizzled layout is defined for box rows of exactly the span; narrower (what the
    H100 lays out past the box) and wider (what the driver refuses) rows are not modelled."""
    t = np.zeros((16, 128), np.uint8)
    with pytest.raises(ValueError, match=f"innermost size must be {swizzle} bytes, got {box[1]}"):
        tma.box_image(t, box, (0, 0), swizzle)
    assert len(tma.box_image(t, (8, swizzle), (0, 0), swizzle)) == 8 * swizzle


def test_box_image_detects_a_wrong_swizzle():
    t = _rows_of_chunks(8, 8)
    assert not np.array_equal(tma.box_image(t, (8, 128), (0, 0), 128),
                              tma.box_image(t, (8, 128), (0, 0), 0))
    # the same bytes as 64-byte rows under the 64-byte swizzle land elsewhere than as 128-byte
    # rows under the 128-byte one
    assert not np.array_equal(tma.box_image(t.reshape(16, 64), (16, 64), (0, 0), 64),
                              tma.box_image(t, (8, 128), (0, 0), 128))


# ---- the driver's encoding (GPU) ---------------------------------------------------------------

def _hopper() -> pytest.MarkDecorator:
    """The driver's tensor maps as the course uses them (227 KB of shared memory a block may opt
    in to, cp.async.bulk.tensor) are Hopper's: on any other GPU these tests skip, saying so."""
    from fraglab import device
    here = device.gpu_available() and tuple(device.target_cc()) == (9, 0)
    return pytest.mark.skipif(device.gpu_available() and not here,
                              reason="needs a Hopper GPU (compute capability 9.0): the course's "
                                     "tensor maps and their 227 KB shared-memory rule are sm_90's")


hopper = _hopper()


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("name, make, box, kw, exc, words", BAD, ids=[b[0] for b in BAD])
def test_driver_path_refuses_alike(name, make, box, kw, exc, words):
    import cupy
    a = make()
    if name == "strided inner":
        a = cupy.zeros((8, 128), cupy.float16)[:, ::2]
    elif name == "misaligned base":
        a = cupy.zeros((8, 72), cupy.float16)[:, 1:65]
    elif isinstance(a, np.ndarray):
        a = cupy.asarray(a)
    with pytest.raises(exc, match=_pattern(words)):
        tma.tensor_map(a, box, **kw)


@pytest.mark.gpu
@hopper
def test_the_driver_is_looser_than_the_courses_shared_memory_rule():
    """The course refuses a box over the 227 KB a block may opt in to (no kernel can receive it);
    the driver, asked directly (check bypassed), is looser. Measured on the H100 (driver
    580.159.04): it encodes a (228, 256) float32 box (233,472 bytes) and refuses (256, 256)
    (262,144 bytes). So the course's rule is its own, and it must refuse first."""
    import cupy
    limit = tma._shared_optin(cupy.zeros(1, cupy.float32))
    assert limit == tma.SM90_SHARED_OPTIN, "an sm_90 GPU opts in to 227 KB per block"
    a = cupy.zeros((256, 256), cupy.float32)
    over_ours = tma.TensorMap(a[:228], (228, 256), 0, 4, gpu=True)
    assert len(tma._driver_encode(over_ours, 128)) == tma.MAP_BYTES
    with pytest.raises(ValueError, match="does not fit in shared memory"):
        tma.tensor_map(a[:228], (228, 256), swizzle=0)
    refused = tma.TensorMap(a, (256, 256), 0, 4, gpu=True)
    with pytest.raises(ValueError, match="cuTensorMapEncodeTiled refused the map"):
        tma._driver_encode(refused, 128)


@pytest.mark.gpu
@hopper
def test_driver_encodes_a_map():
    import cupy
    k = cupy.zeros((4, 256, 128), cupy.float16)
    m = tma.tensor_map(k, (1, 128, 64), swizzle=128)
    assert isinstance(m.device, cupy.ndarray) and m.device.shape == (128,)
    assert m.device.data.ptr % 64 == 0 and m.box_bytes == 128 * 64 * 2
    assert bytes(m.device.get()[:8]) != tma.MAGIC        # the driver's own bytes
