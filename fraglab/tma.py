"""Tensor maps for the TMA (``cp.async.bulk.tensor``): built in Python, one home for both modes.

    from fraglab import tma
    m = tma.tensor_map(k, box=(1, 128, 64), swizzle=128)   # k: (heads, N, d) f16, CuPy or NumPy
    kernel(..., m.device, ...)                             # a 128-byte map in global memory
    m.box_bytes                                            # what mbar_arrive_expect_tx announces

A tensor map describes a 1- to 5-dimensional tensor in global memory (address, sizes, byte
strides, element size) and the *box* one copy moves into shared memory (its sizes and swizzle).
The kernel side is ``kernels/hopper.cuh``'s TMA section (``tma_load_2d``/``tma_load_3d``); the map
travels as an ordinary device pointer (128 bytes, 64-byte aligned), not as a
``__grid_constant__`` parameter, so CuPy and the interpreter pass it like any array.

Two encodings behind :func:`tensor_map`, chosen by the array it is given:

* a CuPy array (GPU): the CUDA driver's ``cuTensorMapEncodeTiled``, reached through ``ctypes``
  on ``libcuda.so.1`` (CuPy does not expose it): interleave none, L2 promotion 128 B (or 256 B),
  out-of-bound elements filled with zeros, element strides 1. The driver's 128 bytes are opaque.
* a NumPy array (the PTX interpreter, :mod:`fraglab.ptx.tensormap`): the course's own 128
  bytes (:data:`LAYOUT`): a magic, a version, a key into this module's registry, and the
  geometry. The interpreter cannot know the tensor's global address before a launch maps the
  arrays, so the map names the array through the registry (:func:`lookup`) and the interpreter
  finds, at each copy, the launch's argument that shares memory with it.

Both run the same checks first (the driver's rules and one of the course's own, :func:`check`),
so a bad argument raises ``TypeError``/``ValueError`` before anything is encoded: in particular a
swizzled box row must be exactly the swizzle span, the only case the PTX ISA defines. :func:`box_image` is the NumPy
model of what one copy writes to shared memory, written from the PTX ISA's definition of the
swizzle modes; the interpreter computes its addresses on its own and the tests compare the two.

Orders: ``box`` and ``coords`` here are in NumPy order (outermost first); the driver and the
PTX instruction count the other way (coordinate ``c0`` is the innermost, contiguous one).
"""
from __future__ import annotations

import ctypes
import struct
import weakref

import numpy as np

#: Swizzle spans (bytes) and the driver's CUtensorMapSwizzle values.
SWIZZLES = {0: 0, 32: 1, 64: 2, 128: 3}
#: L2 promotion sizes (bytes) and the driver's CUtensorMapL2promotion values.
L2_PROMOTIONS = {128: 2, 256: 3}
MAP_BYTES = 128
MAP_ALIGN = 64
MAX_RANK = 5
MAX_BOX = 256

#: The course's interpreter encoding (little-endian, dimension 0 = the innermost):
#: magic (8 bytes), version (u32), registry key (u32), rank (u8), element size (u8), swizzle
#: span in bytes (u16), 4 zero bytes, sizes (5 x u64), byte strides (5 x u64), box (5 x u16),
#: zeros up to 128 bytes.
MAGIC = b"fraglabT"
VERSION = 1
LAYOUT = struct.Struct("<8sIIBBH4x5Q5Q5H")
assert LAYOUT.size <= MAP_BYTES

# the driver's CUtensorMapDataType by (NumPy kind, itemsize): the TMA moves bits, so signed and
# unsigned integers of one width, and bf16 held as uint16, copy alike
_DRIVER_TYPE = {("u", 1): 0, ("i", 1): 0, ("u", 2): 1, ("i", 2): 1, ("f", 2): 6,
                ("u", 4): 2, ("i", 4): 3, ("f", 4): 7, ("u", 8): 4, ("i", 8): 5, ("f", 8): 8}

_REGISTRY: "weakref.WeakValueDictionary[int, TensorMap]" = weakref.WeakValueDictionary()
_NEXT_KEY = [1]


class TensorMap:
    """One tensor map: the spec (NumPy order: ``dims``, byte ``strides``, ``box``; ``swizzle``
    span in bytes, ``elem_size``), the ``array`` it describes (kept alive with the map) and
    ``device``: the 128 bytes in global memory (a CuPy uint8 array on a GPU, a NumPy uint8 array
    for the interpreter). Pass ``device`` to kernels. ``box_bytes``: the bytes one copy lands
    and completes on its mbarrier (out-of-bound elements included)."""

    def __init__(self, array, box, swizzle, elem_size, gpu: bool):
        self.array = array
        self.dims = tuple(int(d) for d in array.shape)
        self.strides = tuple(int(s) for s in array.strides)
        self.box = tuple(box)
        self.swizzle = int(swizzle)
        self.elem_size = int(elem_size)
        self.dtype = np.dtype(array.dtype)
        self.gpu = gpu
        self.key = 0
        self.device = None

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def box_bytes(self) -> int:
        return int(np.prod(self.box)) * self.elem_size

    def __repr__(self) -> str:
        where = "driver" if self.gpu else f"interpreter, key {self.key}"
        return (f"TensorMap({self.dtype} {self.dims}, box {self.box}, swizzle {self.swizzle}, "
                f"{where})")


def _is_cupy(a) -> bool:
    return type(a).__module__.startswith("cupy")


def _address(array) -> int:
    return int(array.data.ptr) if _is_cupy(array) else int(array.__array_interface__["data"][0])


def check(array, box, swizzle=128) -> tuple:
    """The checks of :func:`tensor_map`, in both modes alike. Returns ``(box, elem_size)``.

    The driver's documented rules for ``cuTensorMapEncodeTiled`` with interleave none and
    element strides 1 (CUDA Driver API, "Tensor Map Object Management"): 1 to 5 dimensions,
    sizes 1 to 2^32, a 16-byte aligned address, strides multiples of 16 bytes below 2^40, box
    sizes 1 to 256, a box row a multiple of 16 bytes and, swizzled, at most the swizzle span.
    One more driver rule, measured on the H100 (driver 580) and written down by libcu++'s
    ``cuda::make_tma_descriptor`` ("the full size of box_sizes must fit in shared memory"): a
    box of more bytes than a block may opt in to is refused. And one rule of the course's own:
    a swizzled box row must be exactly the swizzle span. The driver accepts narrower rows, but
    the PTX ISA ("Tensors" > "Swizzling Modes") shows the swizzled layout only for rows of the
    full span, and on the H100 a 64-byte row under the 128-byte swizzle wrote past the box's
    bytes in shared memory (compute-sanitizer); the course refuses what it cannot model."""
    if not (isinstance(array, np.ndarray) or _is_cupy(array)):
        raise TypeError(f"tensor_map: array must be a numpy.ndarray (interpreter) or a "
                        f"cupy.ndarray (GPU), got {type(array).__name__}")
    dt = np.dtype(array.dtype)
    if (dt.kind, dt.itemsize) not in _DRIVER_TYPE:
        raise TypeError(f"tensor_map: dtype {dt} has no tensor-map element type (use float16, "
                        "float32, float64, uint16 for bf16 bits, or 8- to 64-bit integers)")
    if isinstance(swizzle, bool) or swizzle not in SWIZZLES:
        raise ValueError(f"tensor_map: swizzle must be one of 0, 32, 64, 128 (bytes), got "
                         f"{swizzle!r}")
    rank = array.ndim
    if not 1 <= rank <= MAX_RANK:
        raise ValueError(f"tensor_map: the tensor must have 1 to {MAX_RANK} dimensions, got "
                         f"shape {array.shape}")
    box = _ints("tensor_map: box", box)
    if len(box) != rank:
        raise ValueError(f"tensor_map: box {box} has {len(box)} dimensions, the tensor {rank} "
                         f"(shape {array.shape}); give a box size for every dimension, NumPy "
                         "order (outermost first)")
    for i, b in enumerate(box):
        if not 1 <= b <= MAX_BOX:
            raise ValueError(f"tensor_map: box[{i}] = {b}: every box size must be 1 to {MAX_BOX}")
    if any(d < 1 or d > (1 << 32) for d in array.shape):
        raise ValueError(f"tensor_map: every size must be 1 to 2^32, got shape {array.shape}")
    es = dt.itemsize
    if array.strides[-1] != es:
        raise ValueError(f"tensor_map: the innermost dimension must be contiguous (stride "
                         f"{es} bytes), got strides {array.strides}")
    addr = _address(array)
    if addr % 16:
        raise ValueError(f"tensor_map: the tensor's address {addr:#x} must be 16-byte aligned")
    for i, s in enumerate(array.strides[:-1]):
        if s <= 0 or s % 16 or s >= (1 << 40):
            raise ValueError(f"tensor_map: stride {i} is {s} bytes: every stride but the "
                             "innermost must be a positive multiple of 16 bytes below 2^40 (pad "
                             "rows to 16 bytes)")
    inner = box[-1] * es
    if inner % 16:
        raise ValueError(f"tensor_map: the box's innermost size is {box[-1]} x {es} = {inner} "
                         "bytes: it must be a multiple of 16 bytes")
    if swizzle and inner > swizzle:
        raise ValueError(f"tensor_map: the box's innermost size is {inner} bytes, more than the "
                         f"{swizzle}-byte swizzle span: with swizzle {swizzle} a box row holds "
                         f"at most {swizzle // es} elements (split the box, or swizzle 0)")
    if swizzle and inner < swizzle:
        fits = inner if inner in SWIZZLES else 0
        raise ValueError(f"tensor_map: the box's innermost size is {inner} bytes, less than the "
                         f"{swizzle}-byte swizzle span: the driver accepts such a map, but the PTX "
                         "ISA defines the swizzled shared-memory layout only for box rows of the "
                         "full span (\"Swizzling Modes\"), and on the H100 such a copy writes past "
                         "the box's bytes in shared memory; the course refuses it: make a box row "
                         f"{swizzle // es} elements, or use swizzle {fits}")
    nbytes = int(np.prod(box)) * es
    limit = _shared_optin(array)
    if nbytes > limit:
        raise ValueError(f"tensor_map: the box {box} x {es} bytes takes {nbytes} bytes, which "
                         f"does not fit in shared memory: a block may opt in to {limit} bytes, so "
                         "no kernel can receive such a box (the course's rule, stricter than the "
                         "driver, which on the H100 encodes boxes of up to at least 228 KB and "
                         "refused one of 256 KB); split the box")
    return box, es


#: The shared memory one block may opt in to on sm_90 (227 KB), the largest box the course
#: encodes (the driver's own limit is looser: tests/test_tma.py records it); the interpreter's limit (``fraglab.ptx.program.MAX_SHARED_SM90``, a test keeps them
#: equal). On a GPU the device's own attribute is asked.
SM90_SHARED_OPTIN = 227 * 1024


def _shared_optin(array) -> int:
    if not _is_cupy(array):
        return SM90_SHARED_OPTIN
    import cupy
    rt = cupy.cuda.runtime
    attr = getattr(rt, "cudaDevAttrMaxSharedMemoryPerBlockOptin", 97)
    return int(rt.deviceGetAttribute(attr, array.device.id))


def _ints(what, values) -> tuple:
    try:
        vals = tuple(values)
    except TypeError:
        vals = None
    if vals is None or not all(isinstance(v, (int, np.integer))
                               and not isinstance(v, (bool, np.bool_)) for v in vals):
        raise TypeError(f"{what} must be a tuple of integers, got {values!r}")
    return tuple(int(v) for v in vals)


def tensor_map(array, box, *, swizzle: int = 128, l2_promotion: int = 128) -> TensorMap:
    """A tensor map of ``array`` (a CuPy array on a GPU, a NumPy array for the interpreter;
    1-5 dimensions, innermost contiguous) whose copies move boxes of ``box`` elements (NumPy
    order) with the ``swizzle`` (0, 32, 64 or 128 bytes). Raises ``TypeError``/``ValueError``
    before encoding anything. See the module doc for the two encodings."""
    box, es = check(array, box, swizzle)
    if l2_promotion not in L2_PROMOTIONS:
        raise ValueError(f"tensor_map: l2_promotion must be 128 or 256 (bytes), got "
                         f"{l2_promotion!r}")
    gpu = _is_cupy(array)
    m = TensorMap(array, box, swizzle, es, gpu)
    if gpu:
        import cupy
        m.device = cupy.asarray(np.frombuffer(_driver_encode(m, l2_promotion), np.uint8))
    else:
        m.key = _NEXT_KEY[0]
        _NEXT_KEY[0] += 1
        _REGISTRY[m.key] = m
        m.device = np.frombuffer(encode(m), np.uint8).copy()
    return m


# ---- the interpreter's encoding ----------------------------------------------------------------

def encode(m: TensorMap) -> bytes:
    """The course's 128 bytes for ``m`` (:data:`LAYOUT`)."""
    r = m.rank
    dims = list(reversed(m.dims)) + [0] * (MAX_RANK - r)
    strides = list(reversed(m.strides)) + [0] * (MAX_RANK - r)
    box = list(reversed(m.box)) + [0] * (MAX_RANK - r)
    raw = LAYOUT.pack(MAGIC, VERSION, m.key, r, m.elem_size, m.swizzle, *dims, *strides, *box)
    return raw.ljust(MAP_BYTES, b"\0")


class Decoded:
    """A map's fields as the interpreter reads them (dimension 0 = the innermost)."""
    __slots__ = ("key", "rank", "elem_size", "swizzle", "dims", "strides", "box")

    def __init__(self, raw: bytes):
        f = LAYOUT.unpack(raw[:LAYOUT.size])
        _, _, self.key, self.rank, self.elem_size, self.swizzle = f[:6]
        r = self.rank
        self.dims, self.strides, self.box = f[6:6 + r], f[11:11 + r], f[16:16 + r]

    @property
    def box_bytes(self) -> int:
        return int(np.prod(self.box)) * self.elem_size


def decode(raw) -> Decoded:
    """Read 128 map bytes. Raises ``ValueError`` for bytes the course did not write (the driver's
    format is opaque: never guessed) and for a version this module does not read."""
    raw = bytes(raw)
    if len(raw) < MAP_BYTES or raw[:8] != MAGIC:
        raise ValueError("a tensor map not encoded by fraglab.tma (no fraglab magic in its first "
                         "bytes): the driver's format is opaque, so the interpreter runs only maps "
                         "made by fraglab.tma.tensor_map from a NumPy array")
    version = struct.unpack_from("<I", raw, 8)[0]
    if version != VERSION:
        raise ValueError(f"a fraglab tensor map of version {version}; this fraglab.tma reads "
                         f"version {VERSION}")
    d = Decoded(raw)
    if not 1 <= d.rank <= MAX_RANK:
        raise ValueError(f"a fraglab tensor map with rank {d.rank}: corrupted")
    return d


def lookup(key: int) -> TensorMap:
    """The :class:`TensorMap` registered under ``key`` (the interpreter's way back to the array);
    ``LookupError`` when it has been freed (keep the TensorMap alive while kernels use it)."""
    m = _REGISTRY.get(int(key))
    if m is None:
        raise LookupError(f"tensor map key {key} names no live fraglab.tma.TensorMap: keep the "
                          "TensorMap object (not only its .device bytes) alive while kernels "
                          "use it")
    return m


# ---- the driver's encoding ---------------------------------------------------------------------

_DRIVER: dict = {}


def _driver():
    if "encode" not in _DRIVER:
        lib = ctypes.CDLL("libcuda.so.1")
        fn = lib.cuTensorMapEncodeTiled
        fn.restype = ctypes.c_int
        u64p, u32p = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
        fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p, u64p,
                       u32p, u32p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        _DRIVER["encode"], _DRIVER["lib"] = fn, lib
    return _DRIVER["encode"], _DRIVER["lib"]


def _error_name(lib, code: int) -> str:
    s = ctypes.c_char_p()
    try:
        lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        if lib.cuGetErrorName(code, ctypes.byref(s)) == 0 and s.value:
            return s.value.decode()
    except AttributeError:
        pass
    return f"CUresult {code}"


def _driver_encode(m: TensorMap, l2_promotion: int) -> bytes:
    fn, lib = _driver()
    r = m.rank
    dims = (ctypes.c_uint64 * r)(*reversed(m.dims))
    strides = (ctypes.c_uint64 * max(r - 1, 1))(*list(reversed(m.strides))[1:])
    box = (ctypes.c_uint32 * r)(*reversed(m.box))
    estr = (ctypes.c_uint32 * r)(*([1] * r))
    buf = ctypes.create_string_buffer(MAP_BYTES + MAP_ALIGN)
    at = (ctypes.addressof(buf) + MAP_ALIGN - 1) // MAP_ALIGN * MAP_ALIGN
    dtype = _DRIVER_TYPE[(m.dtype.kind, m.dtype.itemsize)]
    rc = fn(at, dtype, r, _address(m.array), dims, strides, box, estr, 0, SWIZZLES[m.swizzle],
            L2_PROMOTIONS[l2_promotion], 0)
    if rc != 0:
        raise ValueError(
            f"cuTensorMapEncodeTiled refused the map ({_error_name(lib, rc)}): data type {dtype}, "
            f"rank {r}, address {_address(m.array):#x}, sizes {tuple(reversed(m.dims))}, byte "
            f"strides {tuple(reversed(m.strides))[1:]}, box {tuple(reversed(m.box))} (innermost "
            f"first), swizzle {m.swizzle} B, L2 promotion {l2_promotion} B, zero fill; "
            "fraglab.tma.check passed them, so this driver has a rule the course does not know")
    return ctypes.string_at(at, MAP_BYTES)


# ---- the NumPy model of one copy ---------------------------------------------------------------

def box_image(array, box, coords, swizzle: int = 128) -> np.ndarray:
    """The shared-memory bytes (uint8, ``prod(box) * itemsize`` of them) that one tensor copy of
    the box at ``coords`` (NumPy order, outermost first; any may be negative or past the end)
    writes at a 1024-byte-aligned destination.

    Unswizzled, the box is dense in shared memory, C order: box rows of ``box[-1]`` elements back
    to back. Elements outside the tensor are 0. With a swizzle of span S bytes the 16-byte chunk
    at shared-memory byte offset o goes to ``o ^ (((o >> 7) & (S/16 - 1)) << 4)``: address bits
    [4:6] are XORed with bits [7:9] for 128 B, bits [4:5] with [7:8] for 64 B, bit 4 with bit 7
    for 32 B (PTX ISA, "Tensors" > "Swizzling Modes"; the same 128-byte pattern as the wgmma
    matrix descriptors' swizzle). The ISA defines it for box rows of exactly S bytes, the only
    swizzled boxes modelled here (and the only ones :func:`tensor_map` makes): it XORs the
    chunk index with (row // (128 / S)) modulo S/16."""
    a = np.asarray(array)
    box, coords = _ints("box_image: box", box), _ints("box_image: coords", coords)
    if len(box) != a.ndim or len(coords) != a.ndim:
        raise ValueError(f"box_image: box {box} and coords {coords} need {a.ndim} entries each")
    if swizzle not in SWIZZLES:
        raise ValueError(f"box_image: swizzle must be 0, 32, 64 or 128, got {swizzle!r}")
    if swizzle and box[-1] * a.itemsize != swizzle:
        raise ValueError(f"box_image: with swizzle {swizzle} the box's innermost size must be "
                         f"{swizzle} bytes, got {box[-1] * a.itemsize}: the PTX ISA defines the "
                         "swizzled layout only for box rows of the full span (tensor_map refuses "
                         "other boxes)")
    nbytes = int(np.prod(box)) * a.itemsize
    if swizzle and nbytes % 128:
        raise ValueError(f"box_image: a swizzled box of {nbytes} bytes ends inside a 128-byte "
                         "line, where the swizzle moves chunks past its end: the course models "
                         "swizzled boxes of whole 128-byte lines only")
    vals = np.zeros(box, a.dtype)
    src, dst = [], []
    for c, b, n in zip(coords, box, a.shape):
        idx = np.arange(c, c + b)
        ok = (idx >= 0) & (idx < n)
        src.append(idx[ok])
        dst.append(np.nonzero(ok)[0])
    if all(len(s) for s in src):
        vals[np.ix_(*dst)] = a[np.ix_(*src)]
    logical = np.frombuffer(vals.tobytes(), np.uint8)
    if swizzle == 0:
        return logical.copy()
    chunks = logical.reshape(-1, 16)
    q = np.arange(len(chunks))
    mask = swizzle // 16 - 1
    out = np.empty_like(chunks)
    out[q ^ ((q >> 3) & mask)] = chunks
    return out.reshape(-1)
