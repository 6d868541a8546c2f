"""TMA tensor copies: ``cp.async.bulk.tensor.{1..5}d.{shared::cluster,shared::cta}.global.tile.
mbarrier::complete_tx::bytes [dst], [map, {c0, ...}], [mbar]``.

The 128 bytes at ``map`` (global memory, 64-byte aligned) must be a map the course encoded
(:mod:`fraglab.tma`: a magic, a version, a registry key and the geometry); a map of any other
origin (the driver's format is opaque) stops the launch with :class:`TensorMapError`, never a
guess. The geometry (sizes, byte strides, box, element size, swizzle) is read from the map's
bytes; the registry key only names the NumPy array, which the launch must have mapped: at each
copy the interpreter looks for the launch argument that shares memory with it (its global
address exists only once the launch has mapped the arrays) and refuses a tensor that is not an
argument.

A copy reads global memory when issued, element by element, with the usual bounds checks;
elements at coordinates outside the tensor (negative, or past a size) are zeros and read
nothing. The box lands in shared memory densely (box rows of ``box0`` elements back to back),
each byte at its swizzled address: with a span of S bytes, address bits [4, 4 + log2(S/16))
XOR bits [7, ...) of the *absolute* shared address. Like a non-tensor bulk copy
(:func:`.mbarrier.bulk_copy`) it lands lazily, when a warp waits on its mbarrier, and completes
the FULL box's bytes as transactions, out-of-bound elements included. The destination must be
128-byte aligned; a swizzled box must have rows of exactly the swizzle span (the only layout the
PTX ISA's "Swizzling Modes" defines: the H100 writes past the box's bytes for narrower rows) and
fill whole 128-byte lines (the course does not model the chunks the swizzle would move past a
box's end); other boxes stop the launch, named. ``prefetch.tensormap`` and
``fence.proxy.tensormap::generic`` are no-ops here (:mod:`.ops_mem`).

Seeded runs (``launch(..., seeds=...)``) run on copies of the arguments: :func:`substitutes`
tells this module which copy stands for which array.
"""
from __future__ import annotations

import contextlib

import numpy as np

from .decode import lanes_of, mods, unsupported
from .errors import MemoryAccessError, raise_at
from .inflight import write_hazard
from .phases import clocks

MAP_BYTES = 128
DST_ALIGN = 128
_SUBSTITUTES: list = []           # [(originals, copies)] while seeded re-runs are under way


class TensorMapError(MemoryAccessError):
    """A tensor copy whose map the interpreter cannot use: not encoded by fraglab.tma, freed, or
    naming an array that is not an argument of the launch."""


@contextlib.contextmanager
def substitutes(originals, copies):
    """While the block runs, arrays in ``copies`` stand for those in ``originals`` (same
    positions): a map of an original finds the copy the launch mapped."""
    _SUBSTITUTES.append((tuple(originals), tuple(copies)))
    try:
        yield
    finally:
        _SUBSTITUTES.pop()


def tensor_copy(ins, dc, dst, bar):
    """The copy's closure; ``dst`` and ``bar``: the shared-address readers of its destination
    and mbarrier operands (:func:`.mbarrier.shared_address`, which decodes them for bulk copies
    of both kinds)."""
    md = mods(ins)
    ops = ins.operands
    dims = [m for m in md if len(m) == 2 and m[1] == "d" and m[0] in "12345"]
    if not dims or len(ops) != 3 or ops[1][0] != "pair" or ops[1][2][0] != "vec":
        unsupported(ins, "cp.async.bulk.tensor needs [dst], [map, {coordinates}], [mbar]")
    rank = int(dims[0][0])
    coords_op = ops[1][2][1]
    if len(coords_op) != rank:
        unsupported(ins, f".{rank}d with {len(coords_op)} coordinates")
    mapaddr = dc.address(ops[1][1], "generic", ins)
    coords = [dc.reader(c, "s32", ins) for c in coords_op]

    def fn(w, m):
        lanes = lanes_of(m)
        d, b, a = dst(w, lanes), bar(w, lanes), mapaddr(w)[lanes]
        cs = np.stack([c(w)[lanes] for c in coords]).astype(np.int64)
        for j, ln in enumerate(lanes):
            one = lanes[j:j + 1]
            raw = w.mem.load(w, ins, "generic", a[j:j + 1], one, MAP_BYTES, 64)[0]
            spec, origin = _resolve(w, ins, int(ln), raw, rank)
            data = _gather(w, ins, one, spec, origin, cs[:, j], int(d[j]))
            sh = w.mem.spaces["shared"]
            lo = int(d[j])
            if sh.wg_n or sh.early:              # wgmma operands in flight / released early
                write_hazard(w, ins, np.arange(lo, lo + len(data))[None, :], one)
            clocks(w).copy_issued(w, ins, lo, len(data), int(ln))   # after its readers? (phases.py)
            w.mem.sync.copies.append((lo, data, int(b[j]), w, ins))
    return fn


def _resolve(w, ins, lane, raw, rank):
    """The map's decoded fields and the global address of the tensor's element 0."""
    from .. import tma
    try:
        spec = tma.decode(raw)
        m = tma.lookup(spec.key)
    except (ValueError, LookupError) as e:
        raise_at(TensorMapError, f"{e}", w, ins, lane=lane)
    if spec.rank != rank:
        raise_at(TensorMapError, f"a .{rank}d tensor copy with a map of a {spec.rank}-dimensional "
                 f"tensor ({m!r}): the instruction's dimension must be the map's rank", w, ins,
                 lane=lane)
    if ((tuple(spec.dims), tuple(spec.strides), tuple(spec.box), spec.elem_size, spec.swizzle)
            != (tuple(reversed(m.dims)), tuple(reversed(m.strides)), tuple(reversed(m.box)),
                m.elem_size, m.swizzle)):
        raise_at(TensorMapError, f"the tensor map's bytes disagree with {m!r} (sizes "
                 f"{spec.dims}, strides {spec.strides}, box {spec.box}, swizzle {spec.swizzle}, "
                 "innermost first): its 128 bytes were changed in memory", w, ins, lane=lane)
    return spec, _origin(w, ins, lane, m)


def _origin(w, ins, lane, m) -> int:
    arr = m.array
    for originals, copies in reversed(_SUBSTITUTES):     # a seeded re-run: the copy stands in
        for o, c in zip(originals, copies):
            if isinstance(o, np.ndarray) and isinstance(c, np.ndarray) and \
                    0 <= _ptr(arr) - _ptr(o) < o.nbytes:
                arr = np.ndarray(arr.shape, arr.dtype, buffer=c.reshape(-1).view(np.uint8),
                                 offset=_ptr(arr) - _ptr(o), strides=arr.strides)
                break
    start = _ptr(arr)
    extent = sum((n - 1) * s for n, s in zip(arr.shape, arr.strides)) + arr.itemsize
    for al in w.mem.spaces["global"].allocs:
        lo = _ptr(al.bytes)
        if lo <= start and start + extent <= lo + al.size:
            return al.base + (start - lo)
    raise_at(TensorMapError, f"the tensor of {m!r} is not an argument of this launch: pass "
             "the array the map was made from (or an array it is a view of) to the kernel too, "
             "so that the interpreter knows its global address", w, ins, lane=lane)


def _ptr(a) -> int:
    return int(a.__array_interface__["data"][0])


def _gather(w, ins, one, spec, origin: int, coords, dst: int) -> np.ndarray:
    """The box's bytes in shared-memory order from ``dst`` (swizzled), read from global memory."""
    lane = int(one[0])
    if dst % DST_ALIGN:
        raise_at(MemoryAccessError, f"cp.async.bulk.tensor to shared address {dst:#x}: the "
                 f"destination of a tensor copy must be {DST_ALIGN}-byte aligned (1024 for the "
                 "128-byte swizzle pattern to start at its first row)", w, ins, lane=lane)
    es, box, nbytes = spec.elem_size, spec.box, spec.box_bytes
    sh = w.mem.spaces["shared"]
    if dst + nbytes > sh.size:
        raise_at(MemoryAccessError, f"a tensor copy of {nbytes} bytes (box {tuple(box)}, "
                 f"innermost first) to shared address {dst} runs past the block's {sh.size} "
                 "bytes of shared memory", w, ins, lane=lane)
    if spec.swizzle and box[0] * es != spec.swizzle:
        raise_at(TensorMapError, f"a tensor copy with swizzle {spec.swizzle} and box rows of "
                 f"{box[0] * es} bytes (box {tuple(box)}, innermost first): the PTX ISA defines the "
                 f"swizzled layout only for rows of exactly {spec.swizzle} bytes, so the "
                 "interpreter does not model it (fraglab.tma.tensor_map refuses such a map)",
                 w, ins, lane=lane)
    if spec.swizzle and nbytes % 128:
        raise_at(MemoryAccessError, f"a swizzled tensor copy of {nbytes} bytes ends inside a "
                 "128-byte line: the course models swizzled boxes of whole 128-byte lines only",
                 w, ins, lane=lane)
    # per dimension (innermost first): the tensor index of each box position, and whether valid
    gaddr = np.zeros(1, np.int64)
    soff = np.zeros(1, np.int64)
    valid = np.ones(1, bool)
    pitch = es
    for d in range(spec.rank):
        k = np.arange(box[d], dtype=np.int64)
        i = int(coords[d]) + k
        gaddr = (gaddr[None, :] + (i * spec.strides[d])[:, None]).ravel()
        soff = (soff[None, :] + (k * pitch)[:, None]).ravel()
        valid = (valid[None, :] & ((i >= 0) & (i < spec.dims[d]))[:, None]).ravel()
        pitch *= box[d]
    phys = dst + soff
    if spec.swizzle:
        mask = spec.swizzle // 16 - 1
        phys = phys ^ (((phys >> 7) & mask) << 4)
    data = np.zeros(nbytes, np.uint8)
    if valid.any():
        addrs = (origin + gaddr[valid]).astype(np.uint64)
        vals = w.mem.load(w, ins, "global", addrs, np.full(len(addrs), lane), es, es)
        rel = (phys[valid] - dst)[:, None] + np.arange(es)
        data[rel] = vals
    return data
