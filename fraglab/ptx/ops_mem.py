"""Loads, stores, cp.async, atomics and the memory-ordering no-ops.

``cp.async`` copies at once when issued (commit_group/wait_group/wait_all are then no-ops): a
valid execution of the asynchronous copy, since the PTX memory model lets the copy complete at
any time before the wait. With ``Launch.lazy_copies`` (the default for sm_90 programs) the copies
land as late as allowed instead: when the issuing warp's ``cp.async.wait_group`` / ``wait_all``
covers their group (or at ``cp.async.mbarrier.arrive``), so a read that does not wait for them
sees the shared memory of before.
"""
from __future__ import annotations

import weakref

import numpy as np

from .decode import DT, SPACES, lanes_of, last_type, mods, unsupported
from .registry import handler
from .errors import MemoryAccessError, UnsupportedInstruction, raise_at
from .fences import fence_kind
from .memory import SHARED_WINDOW, WINDOW_SIZE
from .ops_float import ftz


def space_of(ins, default="generic"):
    md = mods(ins)
    for x in md:
        base = x.split("::")[0]
        if base in SPACES:
            return base
    return default


def vec_of(ins) -> int:
    for x in mods(ins):
        if x in ("v2", "v4", "v8"):
            return int(x[1])
    return 1


def _param_reg(op, space, dc):
    """The register holding a call-sequence .param that `op` ([param0+0]) names, or None."""
    if space == "param" and op[0] == "addr" and op[1] is not None and op[1][0] == "reg" \
            and op[1][1] in dc.kernel.param_regs:
        if op[2] != 0:
            raise UnsupportedInstruction("call parameters at an offset")
        return op[1][1]
    return None


def _data_operand(ins, dc, t, n, space, i, access, what):
    """The register accessors (`access`: dc.reader or dc.writer) of a ld/st's data operand
    ``ins.operands[i]``, one per element of its `n`-wide vector, and the register that the other
    (address) operand stands for where it names a call-sequence .param, else None."""
    op = ins.operands[i]
    parts = op[1] if op[0] == "vec" else [op]
    if len(parts) != n:
        unsupported(ins, f"vector width and {what} count differ")
    regs = [access(p, t, ins) for p in parts]
    moved = _param_reg(ins.operands[1 - i], space, dc)
    if moved is not None and n != 1:
        unsupported(ins, "vector access to a call parameter")
    return regs, moved


def _scatter(vals, lanes, dt):
    full = np.zeros(32, dt)
    full[lanes] = vals
    return full


# ---- read-only loads of data the launch wrote ---------------------------------------------------
#
# ld.global.nc and ldu read through the non-coherent (read-only) path: PTX requires the data to
# stay read-only for the kernel's lifetime, and the compiler may move such a load above stores.
# A read of bytes the same launch wrote earlier (by st or an atomic, any thread or block) is
# reported. Bulk copies and wmma.store writes to global memory are not tracked. Tracking only
# runs for kernels that contain a read-only load.

_WRITTEN: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # GlobalMemory -> {alloc: [mask, instr]}
_RO_KERNELS: dict = {}                                                  # id(kernel) -> (weakref, bool)


def _read_only(ins) -> bool:
    return ins.base == "ldu" or (ins.base == "ld" and "nc" in mods(ins))


def _tracks_writes(kernel) -> bool:
    """Whether `kernel` (inlined calls included) has a read-only load."""
    hit = _RO_KERNELS.get(id(kernel))
    if hit is None or hit[0]() is not kernel:
        hit = (weakref.ref(kernel), any(_read_only(i) for i in kernel.instrs))
        _RO_KERNELS[id(kernel)] = hit
    return hit[1]


def _global_parts(w, space, addr):
    """(global addresses, their selector) among `addr` of an access in `space`."""
    if space == "global":
        return addr, slice(None)
    if space != "generic":
        return None, None
    for sp, a, sel in w.mem._split(addr):
        if sp == "global":
            return a, sel
    return None, None


def _by_alloc(glob, addr):
    idx = np.searchsorted(glob._bases, addr, side="right").astype(np.int64) - 1
    for k in np.unique(idx):
        yield int(k), idx == k


def _note_writes(w, ins, space, addr, nbytes):
    """Global bytes [addr, addr + nbytes) were just stored by `ins`."""
    a, _ = _global_parts(w, space, addr)
    if a is None or not len(a):
        return
    glob = w.launch.glob
    book = _WRITTEN.setdefault(glob, {})
    for k, sel in _by_alloc(glob, a):
        al = glob.allocs[k]
        entry = book.get(k)
        if entry is None:
            entry = book[k] = [np.zeros(al.size, bool), ins]
        offs = (a[sel] - np.uint64(al.base)).astype(np.int64)
        entry[0][offs[:, None] + np.arange(nbytes)] = True
        entry[1] = ins


def _check_read_only(w, ins, addr, lanes, nbytes):
    """Report a read-only load (ld.global.nc, ldu) of bytes this launch already wrote."""
    glob = w.launch.glob
    book = _WRITTEN.get(glob)
    if not book:
        return
    for k, sel in _by_alloc(glob, addr):
        entry = book.get(k)
        if entry is None:
            continue
        al = glob.allocs[k]
        offs = (addr[sel] - np.uint64(al.base)).astype(np.int64)
        hit = entry[0][offs[:, None] + np.arange(nbytes)].any(axis=1)
        if hit.any():
            j = int(np.flatnonzero(sel)[np.argmax(hit)])
            writer = entry[1]
            raise_at(MemoryAccessError,
                     f"`{ins.opcode}` reads {nbytes} bytes at {int(addr[j]):#x} of `{al.name}` that this "
                     f"launch already wrote (the latest store there: `{writer.text}`, PTX line "
                     f"{writer.ptx_line}): a read-only load requires data that stays unchanged for the "
                     "whole kernel, so what it returns is undefined (the compiler may even move it above "
                     "the store: on an H100 it returned the old bytes). Load with ld.global (in CUDA: "
                     "drop const __restrict__ or __ldg on this pointer), or write the data in an "
                     "earlier launch", w, ins, lane=int(lanes[j]))


@handler("ld", "ldu")
def h_ld(ins, dc):
    t = last_type(ins)
    space = space_of(ins, "global" if ins.base == "ldu" else "generic")
    n = vec_of(ins)
    es = np.dtype(DT[t]).itemsize
    wrs, moved = _data_operand(ins, dc, t, n, space, 0, dc.writer, "destination")
    if moved is not None:                       # ld.param of a call's return value
        rd = dc.reader(("reg", moved), t, ins)
        return lambda w, m: wrs[0](w, rd(w), m)
    addr = dc.address(ins.operands[1], space, ins)
    dt = np.dtype(DT[t])
    total = es * n
    # volatile / relaxed / acquire loads are how threads poll each other: no race report
    sync = any(x in mods(ins) for x in ("volatile", "relaxed", "acquire"))
    read_only = _read_only(ins)

    acquire = "acquire" in mods(ins)            # a load, then a fence (fences.py)

    def fn(w, m):
        lanes = lanes_of(m)
        at = addr(w)[lanes]
        raw = w.mem.load(w, ins, space, at, lanes, total, total, atomic=sync)
        if acquire:
            _fence(w, m)
        if read_only:
            _check_read_only(w, ins, at, lanes, total)
        for j, wr in enumerate(wrs):
            v = np.ascontiguousarray(raw[:, j * es:(j + 1) * es]).view(dt).ravel()
            wr(w, _scatter(v, lanes, dt), m)
    fn.poll = (addr, space, total)              # what a spin loop polls (crossblock.py)
    return fn


def _value_bytes(readers, w, t):
    vals = np.stack([r(w) for r in readers], axis=1).astype(DT[t], copy=False)
    return np.ascontiguousarray(vals).view(np.uint8).reshape(32, -1)


@handler("st")
def h_st(ins, dc):
    t = last_type(ins)
    space = space_of(ins)
    n = vec_of(ins)
    rds, moved = _data_operand(ins, dc, t, n, space, 1, dc.reader, "source")
    if moved is not None:                       # st.param of a call's argument
        wr = dc.writer(("reg", moved), t, ins)
        return lambda w, m: wr(w, rds[0](w), m)
    addr = dc.address(ins.operands[0], space, ins)
    total = np.dtype(DT[t]).itemsize * n
    sync = any(x in mods(ins) for x in ("volatile", "relaxed", "release"))
    track = space in ("global", "generic") and _tracks_writes(dc.kernel)

    release = "release" in mods(ins)            # a fence, then the store (fences.py)

    def fn(w, m):
        lanes = lanes_of(m)
        data = _value_bytes(rds, w, t)[lanes]
        at = addr(w)[lanes]
        if release:
            _fence(w, m)
        w.mem.store(w, ins, space, at, lanes, data, total, atomic=sync)
        if track:
            _note_writes(w, ins, space, at, total)
    return fn


@handler("cp")
def h_cp(ins, dc):
    md = mods(ins)
    if md[0] != "async":
        unsupported(ins)
    if md[1] == "bulk":
        from .mbarrier import bulk_copy
        return bulk_copy(ins, dc)
    if md[1] == "mbarrier":
        return _cp_async_arrive(ins, dc)
    if md[1] in ("commit_group", "wait_group", "wait_all"):
        return _cp_group(ins, md[1])
    ops = ins.operands
    if "L2::cache_hint" in md:                      # the last operand: a cache policy (a hint)
        ops = ops[:-1]
    if len(ops) not in (3, 4) or ops[2][0] != "imm":
        unsupported(ins, "cp.async operands")
    size = int(ops[2][1])
    dst = dc.address(ops[0], "shared", ins)
    src = dc.address(ops[1], "global", ins)
    src_size = None
    if len(ops) > 3:
        o = ops[3]
        if o[0] in ("reg", "not") and dc.reg_types[(o[1] if o[0] == "reg" else o[1][1])] == "pred":
            ignore = dc.reader(o, "pred", ins)      # ignore-src: a true predicate copies nothing
            src_size = lambda w: np.where(ignore(w), 0, size).astype(np.uint32)  # noqa: E731
        elif o[0] in ("reg", "imm"):
            src_size = dc.reader(o, "u32", ins)
        else:
            unsupported(ins, f"cp.async src-size operand {o!r}")

    def fn(w, m):
        lanes = lanes_of(m)
        d = dst(w)[lanes]
        s = src(w)[lanes]
        data = np.zeros((len(lanes), size), np.uint8)
        sizes = np.full(len(lanes), size) if src_size is None else \
            np.minimum(src_size(w)[lanes].astype(np.int64), size)
        for k in np.unique(sizes):
            if k <= 0:
                continue
            sel = sizes == k
            data[sel, :k] = w.mem.load(w, ins, "global", s[sel], lanes[sel], int(k),
                                       min(int(k), size))
        if w.launch.lazy_copies:
            w.cp_open.append((ins, d, lanes, data, size))
            return
        w.mem.store(w, ins, "shared", d, lanes, data, size)
    return fn


def land_copies(w, keep: int = -1) -> None:
    """The warp's cp.async copies land: those of all but its ``keep`` most recent committed
    groups (``keep`` < 0: every copy, the uncommitted ones too)."""
    if keep < 0:
        w.cp_groups.append(w.cp_open)
        w.cp_open, keep = [], 0
    while len(w.cp_groups) > keep:
        for ins, d, lanes, data, size in w.cp_groups.pop(0):
            w.mem.store(w, ins, "shared", d, lanes, data, size)


def _cp_group(ins, what):
    if what == "commit_group":
        def commit(w, m):
            w.cp_groups.append(w.cp_open)
            w.cp_open = []
        return commit
    keep = -1 if what == "wait_all" else int(ins.operands[0][1])
    return lambda w, m: land_copies(w, keep)


def _cp_async_arrive(ins, dc):
    """cp.async.mbarrier.arrive{.noinc}: the warp's copies land now, then the arrival happens;
    without .noinc the pending count was raised by one first (no net change)."""
    if "noinc" not in mods(ins):
        return lambda w, m: land_copies(w)
    from .mbarrier import h_mbarrier
    from .parse import Instr
    space = next((x for x in mods(ins) if x.startswith("shared")), None)
    fake = Instr("mbarrier.arrive" + (f".{space}" if space else "") + ".b64",
                 [("sink",), ins.operands[0]], None, ins.text, ins.ptx_line, ins.loc)
    arrive = h_mbarrier(fake, dc)

    def fn(w, m):
        land_copies(w)
        arrive(w, m)
    return fn


_ATOM = {
    "add": lambda old, b, c: old + b,
    "min": lambda old, b, c: np.minimum(old, b),
    "max": lambda old, b, c: np.maximum(old, b),
    "and": lambda old, b, c: old & b,
    "or": lambda old, b, c: old | b,
    "xor": lambda old, b, c: old ^ b,
    "exch": lambda old, b, c: b,
    "cas": lambda old, b, c: np.where(old == b, c, old),
    "inc": lambda old, b, c: np.where(old >= b, 0, old + 1).astype(old.dtype),
    "dec": lambda old, b, c: np.where((old == 0) | (old > b), b, old - 1).astype(old.dtype),
}


@handler("atom", "red")
def h_atom(ins, dc):
    md = mods(ins)
    t = last_type(ins)
    if t in ("f16", "bf16", "f16x2", "bf16x2") or vec_of(ins) > 1:
        unsupported(ins)
    op = next((x for x in md if x in _ATOM), None)
    if op is None:
        unsupported(ins)
    f = _ATOM[op]
    space = space_of(ins)
    dt = np.dtype(DT[t])
    es = dt.itemsize
    red = ins.base == "red"
    ops = ins.operands if not red else [("sink",)] + ins.operands
    wr = dc.writer(ops[0], t, ins)
    addr = dc.address(ops[1], space, ins)
    b = dc.reader(ops[2], t, ins)
    c = dc.reader(ops[3], t, ins) if len(ops) > 3 and op == "cas" else None
    if op == "add" and t == "f32":      # on global memory: subnormal inputs and results flush
        f = _f32_add(space)
    elif op == "add" and t == "f64":
        f = _f64_add(space)
    track = space in ("global", "generic") and _tracks_writes(dc.kernel)

    release = any(x in md for x in ("release", "acq_rel"))
    acquire = any(x in md for x in ("acquire", "acq_rel"))

    def fn(w, m):
        lanes = lanes_of(m)
        a = addr(w)
        bv = b(w)
        cv = c(w) if c is not None else a
        out = np.zeros(32, dt)
        if release:
            _fence(w, m)
        for ln in lanes:                            # lanes in order: a valid serialisation
            one = np.array([ln])
            old = w.mem.load(w, ins, space, a[one], one, es, es, atomic=True).view(dt).ravel()
            new = np.asarray(f(old, bv[one], cv[one])).astype(dt)
            w.mem.store(w, ins, space, a[one], one,
                        np.ascontiguousarray(new).view(np.uint8).reshape(1, es), es, atomic=True)
            out[ln] = old[0]
        if track:
            _note_writes(w, ins, space, a[lanes], es)
        if acquire:
            _fence(w, m)
        wr(w, out, m)
    fn.poll = (addr, space, es)
    return fn


def _is_global(space, addr) -> bool:
    """Whether an atomic's address is in global memory (generic ones by their window)."""
    return space == "global" or (space == "generic" and not (
        SHARED_WINDOW <= int(addr[0]) < SHARED_WINDOW + WINDOW_SIZE))


def _f32_add(space):
    """atom/red.add.f32: on global memory subnormal inputs and results flush to signed zero,
    on shared memory they do not (PTX ISA, atom); generic addresses decide by their window.
    A NaN result is 0x7FFFFFFF in both spaces, whatever the NaN operands (H100, 2026-11-27
    differential record: 0x7fa00003 + 2.5 gives 0x7fffffff)."""
    def add(old, b, addr):
        r = ftz(ftz(old) + ftz(b)) if _is_global(space, addr) else old + b
        return np.where(np.isnan(r), _CANON32, r)
    return add


_CANON32 = np.uint32(0x7FFFFFFF).view(np.float32)


def _f64_add(space):
    """atom/red.add.f64. On global memory a NaN operand comes back with its bits unchanged (an
    sNaN stays signalling), the added value's if both are NaN: 0x7ff4000000000003 + 1.0 gives
    0x7ff4000000000003; on shared memory the ALU's rule, as NumPy's: quieted, the old value's
    first (H100, 2026-11-27 differential record)."""
    def add(old, b, addr):
        r = old + b
        if not _is_global(space, addr):
            return r
        return np.where(np.isnan(b), b, np.where(np.isnan(old), old, r))
    return add


@handler("membar", "fence", "prefetch", "prefetchu", "discard", "applypriority")
def h_noop(ins, dc):
    if fence_kind(ins):                         # orders a flag hand-off (fences.py)
        return _fence
    return lambda w, m: None


def _fence(w, m):
    w.mem.spaces["shared"].fence(w, lanes_of(m))


@handler("createpolicy")
def h_createpolicy(ins, dc):
    wr = dc.writer(ins.operands[0], "b64", ins)
    zero = np.zeros(32, np.uint64)
    return lambda w, m: wr(w, zero, m)

