"""Topic 10's TMA building block (kernels/10_fa3_pipelining_tma_tile.cu, fraglab.fa3_pipelining.
tma_tile): one cp.async.bulk.tensor box, byte for byte against fraglab.tma.box_image, on the PTX
interpreter (CPU tier) and on a Hopper GPU (the driver's tensor maps, cuTensorMapEncodeTiled),
every case of its Problem; each rejected argument; the kernel's PTX and SASS."""
import numpy as np
import pytest

from fraglab import device, launch, tma, toolchain
from fraglab.fa3_pipelining import tma_tile
from fraglab.fa3_pipelining.tma_tile import TMA_TILE


def _hopper_or_skip():
    ok, why = TMA_TILE.supported(TMA_TILE.cases[0])
    if not ok:
        pytest.skip(why)


@pytest.mark.parametrize("case", TMA_TILE.cases, ids=[c.name for c in TMA_TILE.cases])
def test_cases_here(case, rng):
    """The interpreter without a GPU, the Hopper GPU with one."""
    _hopper_or_skip()
    TMA_TILE.check(case, rng)


@pytest.mark.gpu
def test_tma_tile_on_the_gpu(rng):
    """cp.async.bulk.tensor (2d and 3d, every swizzle, zero fill past every edge), its
    mbarrier::complete_tx::bytes count, prefetch.tensormap and fence.proxy.tensormap::generic on
    the H100, with maps from the driver: every case of TMA_TILE byte for byte."""
    if tuple(device.target_cc()) != (9, 0):
        pytest.skip("needs a Hopper GPU (compute capability 9.0, sm_90a)")
    for case in TMA_TILE.cases:
        TMA_TILE.check(case, rng)
    # the same copy twice: deterministic, and the map can be reused
    import cupy
    src = cupy.asarray(rng.standard_normal((130, 64)).astype(np.float16))
    a = tma_tile(src, (64, 64), (100, 0)).get()
    assert np.array_equal(a, tma_tile(src, (64, 64), (100, 0)).get())
    assert np.array_equal(a, tma.box_image(src.get(), (64, 64), (100, 0), 128))


def test_narrow_box_rows_under_a_wide_swizzle_are_refused_before_launch(xp, monkeypatch):
    """A box row narrower than the swizzle span (64-byte rows under the 128-byte swizzle, box
    (32, 32) f16): the driver accepts the map, but on the H100 the copy wrote past the box-sized
    destination (compute-sanitizer: out-of-range shared address), and the PTX ISA defines the
    swizzled layout only for rows of the full span. The course refuses the map before anything
    is encoded or launched, in both modes; the same rows under their own 64-byte span run."""
    _hopper_or_skip()
    src = xp.zeros((64, 64), np.float16)

    def no_launch(*a, **k):
        raise AssertionError("the kernel must not be launched")

    with monkeypatch.context() as mp:
        mp.setattr(launch, "launch", no_launch)
        with pytest.raises(ValueError, match="less than the 128-byte swizzle span"):
            tma_tile(src, (32, 32), (8, 16), swizzle=128)
    got = launch.to_host(tma_tile(src, (32, 32), (8, 16), swizzle=64))
    assert got.shape == (32 * 32 * 2,) and not got.any()


def _src(xp, shape=(64, 64), dtype=np.float16):
    return xp.zeros(shape, dtype)


BAD = [
    ("1 dimension", lambda xp: _src(xp, (64,)), (64,), (0,), {}, ValueError, "2 or 3 dimensions"),
    ("4 dimensions", lambda xp: _src(xp, (1, 1, 8, 64)), (1, 1, 8, 64), (0, 0, 0, 0), {},
     ValueError, "2 or 3 dimensions"),
    ("coords short", _src, (64, 64), (0,), {}, TypeError, "2 integers"),
    ("coords float", _src, (64, 64), (0, 1.5), {}, TypeError, "2 integers"),
    ("coords not a tuple", _src, (64, 64), 3, {}, TypeError, "tuple of integers"),
    ("coord past int32", _src, (64, 64), (1 << 31, 0), {}, ValueError, "coords[0]"),
    ("box too wide to swizzle", _src, (64, 128), (0, 0), {}, ValueError, "swizzle span"),
    ("swizzle 16", _src, (64, 64), (0, 0), dict(swizzle=16), ValueError, "swizzle must be"),
    ("box 0", _src, (0, 64), (0, 0), {}, ValueError, "box[0] = 0"),
    ("partial 128-byte line", _src, (1, 16), (0, 0), dict(swizzle=32), ValueError,
     "whole 128-byte lines"),
    ("narrow rows under the swizzle", _src, (64, 32), (0, 0), {}, ValueError,
     "less than the 128-byte swizzle span"),
    # the driver's rule (CUDA_ERROR_INVALID_VALUE on the H100): a box over 227 KB
    ("shared memory", lambda xp: _src(xp, (256, 256), np.float32), (256, 256), (0, 0),
     dict(swizzle=0), ValueError, "does not fit in shared memory"),
    # the driver's limit less the kernel's 1024 bytes of alignment
    ("shared memory beside the alignment", lambda xp: _src(xp, (226, 256), np.float32),
     (226, 256), (0, 0), dict(swizzle=0), ValueError, "fit beside the 1024-byte alignment"),
    ("complex", lambda xp: _src(xp, dtype=np.complex64), (8, 8), (0, 0), {}, TypeError,
     "complex64"),
    ("not contiguous", lambda xp: _src(xp, (64, 128))[:, ::2], (64, 64), (0, 0), {}, ValueError,
     "C-contiguous"),
]


@pytest.mark.parametrize("name, make, box, coords, kw, exc, words", BAD, ids=[b[0] for b in BAD])
def test_rejected_arguments(name, make, box, coords, kw, exc, words, xp):
    _hopper_or_skip()
    with pytest.raises(exc, match=words.replace("[", r"\[").replace("]", r"\]")):
        tma_tile(make(xp), box, coords, **kw)


def test_the_other_modes_array_is_refused(foreign):
    _hopper_or_skip()
    make, words = foreign
    with pytest.raises(TypeError, match=words):
        tma_tile(make(np.zeros((64, 64), np.float16)), (64, 64), (0, 0))


def test_output_is_poisoned_before_the_launch(monkeypatch):
    """An image the kernel never writes keeps the sentinel 255 everywhere (so a skipped copy-out
    cannot pass a check against a zero box)."""
    _hopper_or_skip()
    monkeypatch.setattr(launch, "launch", lambda *a, **k: None)
    img = tma_tile(np.zeros((64, 64), np.float16) if launch.interpreted() else
                   __import__("cupy").zeros((64, 64), np.float16), (8, 64), (0, 0))
    assert (launch.to_host(img) == 255).all()


def test_ptx_has_one_tensor_copy_per_kernel():
    b = toolchain.compile("10_fa3_pipelining_tma_tile", "sm_90a")
    for k, n in (("tma_tile_2d", "2d"), ("tma_tile_3d", "3d")):
        body = b.ptx.split(f".entry {k}(")[1].split(".entry")[0]
        assert body.count(f"cp.async.bulk.tensor.{n}.shared::cluster.global.tile."
                          "mbarrier::complete_tx::bytes") == 1
        assert "prefetch.tensormap" in body and "fence.proxy.tensormap::generic.acquire" in body
        assert "mbarrier.arrive.expect_tx" in body
    sass = b.sass("tma_tile_2d")
    assert "UTMALDG" in sass, "the tensor copy should become the TMA's load (UTMALDG)"
