"""Hopper's warpgroup MMA (sm_90a): ``wgmma.mma_async``, ``wgmma.fence/commit_group/wait_group``,
and the shared-memory matrix descriptors with their swizzled layouts.

A warpgroup is 4 consecutive warps (warp rank ``index % 4``). The interpreter runs warps one at a
time, so each warp computes *its own* 16 rows of the 64 x N result (rows ``16 * rank`` on): exact,
since rows of a product are independent. The product is computed when the instruction issues
(shared memory read then; the arithmetic is the tensor cores' own, :mod:`.tcmodel`), but it only becomes
*available* at the ``wgmma.wait_group`` that covers its commit group: until then every register
it writes (the accumulators) or reads (an A fragment) is "in flight", and any other instruction
touching one raises :class:`WgmmaHazard` (a plain ``mov`` copy, which NVRTC emits for loop-carried
accumulators, makes its destination in flight too instead). Shared memory a wgmma read is checked
again at that wait: if it changed in between (a stage refilled too early), that is reported too.

Descriptors (PTX ISA, "Matrix Descriptor Format"): bits 0-13 start address >> 4, 16-29 leading
byte offset (LBO) >> 4, 32-45 stride byte offset (SBO) >> 4, 49-51 base offset, 62-63 swizzle
(0 none, 1 128B, 2 64B, 3 32B). Layouts follow the canonical forms of the PTX ISA's "Shared
memory matrix layout" (the same as CUTLASS's GMMA atoms); see :func:`operand_offsets`.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from .decode import Op, mods, types_of, unsupported
from .errors import WgmmaHazard, raise_at
from .frames import source_of
from .inflight import pending_copy
from .registry import handler
from . import tcmodel
from .tensor import Fragment, _require_full, _shape, decode_elems, mma_layout

#: descriptor swizzle field -> swizzle width in bytes (0: none, the "interleaved" core matrices)
SWIZZLE_BYTES = {0: 0, 1: 128, 2: 64, 3: 32}
LANES = np.arange(32)


def decode_descriptor(desc: int) -> dict:
    """The fields of a 64-bit wgmma matrix descriptor, addresses and offsets in bytes."""
    desc = int(desc)
    return dict(start=(desc & 0x3FFF) << 4, lbo=((desc >> 16) & 0x3FFF) << 4,
                sbo=((desc >> 32) & 0x3FFF) << 4, base_offset=(desc >> 49) & 0x7,
                swizzle=SWIZZLE_BYTES[(desc >> 62) & 0x3])


def encode_descriptor(start: int, lbo: int = 0, sbo: int = 0, swizzle: int = 0,
                      base_offset: int = 0) -> int:
    """Inverse of :func:`decode_descriptor` (swizzle in bytes: 0, 32, 64 or 128)."""
    mode = {v: k for k, v in SWIZZLE_BYTES.items()}[swizzle]
    return (((start & 0x3FFFF) >> 4) | (((lbo >> 4) & 0x3FFF) << 16)
            | (((sbo >> 4) & 0x3FFF) << 32) | ((base_offset & 7) << 49) | (mode << 62))


def swizzle(addr, width: int):
    """Physical shared address of a logical one under a ``width``-byte swizzle: the 16-byte chunk
    bits [4, 4+b) are XORed with the row bits [7, 7+b) (b = 1, 2, 3 for 32B, 64B, 128B), i.e.
    the pattern repeats every 256/512/1024 bytes of the absolute address (TMA writes the same)."""
    if not width:
        return addr
    b = {32: 1, 64: 2, 128: 3}[width]
    return addr ^ (((addr >> 7) & ((1 << b) - 1)) << 4)


def operand_offsets(rows: int, k: int, es: int, mn_major: bool, d: dict) -> np.ndarray:
    """(rows, k) physical byte addresses of a wgmma shared-memory operand: ``rows`` is M (A) or
    N (B), ``k`` the K extent (16 for 16-bit types), ``es`` the element size, ``mn_major`` the
    transposed layout (imm-trans = 1). With T = 16 // es elements per 16-byte chunk and W the
    swizzle width (bytes), element (r, c) of the canonical layouts sits at:

    * K-major, no swizzle: 8 x 16-byte core matrices; ``(r%8)*16 + (r//8)*SBO + (c%T)*es + (c//T)*LBO``
    * K-major, W-byte swizzle: rows of W bytes; ``(r%8)*W + (r//8)*SBO + c*es`` (LBO unused)
    * MN-major, no swizzle: ``(r%T)*es + (r//T)*SBO + (c%8)*16 + (c//8)*LBO``
    * MN-major, W-byte swizzle: ``(r % (W/es))*es + (r // (W/es))*LBO + (c%8)*W + (c//8)*SBO``

    then the swizzle (:func:`swizzle`) of the start address plus that offset."""
    r = np.arange(rows)[:, None]
    c = np.arange(k)[None, :]
    t = 16 // es
    w = d["swizzle"]
    if not mn_major:
        if w == 0:
            off = (r % 8) * 16 + (r // 8) * d["sbo"] + (c % t) * es + (c // t) * d["lbo"]
        else:
            off = (r % 8) * w + (r // 8) * d["sbo"] + c * es
    else:
        if w == 0:
            off = (r % t) * es + (r // t) * d["sbo"] + (c % 8) * 16 + (c // 8) * d["lbo"]
        else:
            per = w // es
            off = (r % per) * es + (r // per) * d["lbo"] + (c % 8) * w + (c // 8) * d["sbo"]
    return swizzle(d["start"] + off.astype(np.int64), w)


@lru_cache(maxsize=None)
def d_layout(n: int) -> np.ndarray:
    """(32, n // 2, 2) (row within the warp's 16, column) of each f32 accumulator element: the
    m16n8 C fragment repeated over the N / 8 column blocks (PTX ISA, wgmma "Register Fragments")."""
    g, c = LANES // 4, LANES % 4
    els = [(g + 8 * ((i % 4) // 2), 8 * (i // 4) + 2 * c + i % 2) for i in range(n // 2)]
    return np.stack([np.stack([np.asarray(a), np.asarray(b)], -1) for a, b in els], axis=1)


class WgState:
    """One warp's wgmma bookkeeping: open group number, completed count, in-flight registers
    (register -> group) and the shared bytes each group read (checked at its wait)."""

    def __init__(self):
        self.open = 0            # the group that uncommitted wgmmas belong to
        self.done = 0            # groups [0, done) are complete
        self.reads = []          # [group, addresses, bytes, instr, early release or None]
        self.trace = []          # PTX lines of the wgmma.mma_async it executed, in order
        self.by_reg = {}         # in-flight register -> the wgmma.mma_async that holds it


def _state(w) -> WgState:
    st = w.wg
    if st is None:
        st = w.wg = WgState()
    return st


def check_inflight(w, op) -> None:
    """Called by the executor before a non-wgmma instruction while registers are in flight."""
    hit = op.touch & w.inflight.keys()
    if not hit:
        return
    ins = op.instr
    ops = ins.operands
    if ins.base == "mov" and len(ops) == 2 and ops[0][0] == "reg" and ops[1][0] == "reg" \
            and ops[1][1] in w.inflight:
        w.inflight[ops[0][1]] = w.inflight[ops[1][1]]      # the copy is in flight as well
        st = _state(w)
        st.by_reg[ops[0][1]] = st.by_reg.get(ops[1][1])
        return
    reg = min(hit)
    name = w.launch.info.kernel.regs[reg][0]
    group = w.inflight[reg]
    st = _state(w)
    why = " (not committed yet: wgmma.wait_group waits only for committed groups)" \
        if group == st.open else ""
    wg = st.by_reg.get(reg)
    at = "" if wg is None else f" at {source_of(wg, w.files) or f'PTX line {wg.ptx_line}'}"
    raise_at(WgmmaHazard, f"register {name} belongs to the wgmma.mma_async{at}, still in "
             f"flight (commit group {group}{why}): its accumulators (and A fragment) may be "
             f"used only after a wgmma.wait_group that covers its group (wgmma.commit_group, "
             f"then wgmma.wait_group N); this {ins.opcode} uses it before", w, ins, lane=0)


def check_warpgroups(warps) -> None:
    """End of a block: ``wgmma.mma_async`` is ``.aligned`` over the warpgroup, so its 4 warps
    must have executed the same wgmma instructions in the same order."""
    for g in range(0, len(warps), 4):
        group = warps[g:g + 4]
        traces = [w.wg.trace if w.wg is not None else [] for w in group]
        if any(traces) and (len(group) < 4 or any(t != traces[0] for t in traces)):
            w = next(w for w, t in zip(group, traces) if t)
            raise_at(WgmmaHazard, "wgmma.mma_async is .aligned: all 4 warps of a warpgroup must "
                     "execute the same wgmma instructions; warps "
                     f"{[x.index for x in group]} executed {[len(t) for t in traces]} of them"
                     + ("" if len(group) == 4 else " (the block ends inside this warpgroup)"),
                     w, None)


def _release(w, st, upto: int, ins) -> None:
    """Groups [st.done, upto) complete: their registers become available; the shared memory they
    read must not have changed since they issued, nor be the target of a copy in flight."""
    if upto <= st.done:
        return
    keep = []
    sh = w.mem.spaces["shared"]
    for entry in st.reads:
        g, addr, data, where, _ = entry
        if g < upto:
            now = w.mem.spaces["shared"].buf[addr]
            copy = pending_copy(w, addr)
            if not np.array_equal(now, data) or copy:
                src = source_of(where, w.files) or f"PTX line {where.ptx_line}"
                what = f"is the target of {copy}, still in flight," if copy else "changed"
                raise_at(WgmmaHazard, f"shared memory read by the wgmma.mma_async at {src} "
                         f"{what} before the wgmma.wait_group that completes it: the "
                         "asynchronous tensor core may read its operands until then (refill a "
                         "stage only after waiting for the wgmmas that read it)", w, ins, lane=0)
            sh.wg_busy[addr] -= 1
            sh.wg_n -= 1
        else:
            keep.append(entry)
    st.reads = keep
    st.done = upto
    w.inflight = {r: g for r, g in w.inflight.items() if g >= upto}
    st.by_reg = {r: st.by_reg.get(r) for r in w.inflight}


def _wg_op(ins, fn):
    op = Op(ins, fn)
    op.wg = True
    return op


@handler("wgmma")
def h_wgmma(ins, dc):
    md = mods(ins)
    if md[0] == "fence":
        return _wg_op(ins, lambda w, m: _require_full(w, ins, m))
    if md[0] == "commit_group":
        def commit(w, m):
            _require_full(w, ins, m)
            _state(w).open += 1
        return _wg_op(ins, commit)
    if md[0] == "wait_group":
        nop = ins.operands[0]
        if nop[0] != "imm":
            unsupported(ins, "wait_group needs an immediate count")
        n = int(nop[1])

        def wait(w, m):
            _require_full(w, ins, m)
            st = _state(w)
            _release(w, st, st.open - n, ins)
        return _wg_op(ins, wait)
    if md[0] == "mma_async":
        return _wg_op(ins, _mma_async(ins, dc, md))
    unsupported(ins)


def _imm(ins, op, what):
    if op[0] != "imm":
        unsupported(ins, f"{what} must be an immediate")
    return int(op[1])


def _mma_async(ins, dc, md):
    shape = _shape(ins)
    ts = types_of(ins)
    if len(ts) != 3 or ts[1] != ts[2] or ts[1] not in ("f16", "bf16") or ts[0] not in ("f32", "f16"):
        unsupported(ins, "the interpreter implements wgmma with .f16/.bf16 inputs and .f32/.f16 "
                    "accumulators")
    dtype, itype = ts[0], ts[1]
    m_, n_, k_ = shape
    if m_ != 64 or k_ != 16 or n_ % 8 or not 8 <= n_ <= 256:
        unsupported(ins, f"shape m{m_}n{n_}k{k_}")
    ops = ins.operands
    a_regs = ops[1][0] == "vec"
    if len(ops) != (7 if a_regs else 8):
        unsupported(ins, "operand count")
    # f32 accumulators: one per register; f16: two per register, in the same element order
    fd = Fragment(dc, ins, ops[0], dtype, d_layout(n_), writable=True)
    fa = Fragment(dc, ins, ops[1], itype, mma_layout((16, 8, 16), "a", itype)) if a_regs else None
    rd_a = None if a_regs else dc.reader(ops[1], "u64", ins)
    rd_b = dc.reader(ops[2], "u64", ins)
    sd = ops[3]
    rd_scale = dc.reader(sd, "pred", ins) if sd[0] != "imm" else None
    scale_d_imm = bool(int(sd[1])) if sd[0] == "imm" else True
    sa, sb = _imm(ins, ops[4], "imm-scale-a"), _imm(ins, ops[5], "imm-scale-b")
    ta = 0 if a_regs else _imm(ins, ops[6], "imm-trans-a")
    tb = _imm(ins, ops[-1], "imm-trans-b")
    if sa not in (1, -1) or sb not in (1, -1) or ta not in (0, 1) or tb not in (0, 1):
        unsupported(ins, "imm-scale must be 1 or -1 and imm-trans 0 or 1")
    touched = [o[1] for o in ops[0][1] if o[0] == "reg"]
    if a_regs:
        touched += [o[1] for o in ops[1][1] if o[0] == "reg"]
    es = 2

    def uniform(w, rd, what):
        v = rd(w)
        if not (v == v[0]).all():
            raise_at(WgmmaHazard, f"the {what} of a wgmma must be the same in every lane", w, ins,
                     lane=int(np.argmax(v != v[0])))
        return int(v[0])

    def operand(w, desc, rows, sel, mn_major):
        d = decode_descriptor(desc)
        if d["base_offset"]:
            raise_at(WgmmaHazard, "matrix descriptor with a non-zero base offset: the interpreter "
                     "implements the canonical layouts (base offset 0; align each operand to "
                     "its swizzle pattern)", w, ins, lane=0)
        addr = operand_offsets(rows, k_, es, bool(mn_major), d)[sel]
        flat = addr.ravel()
        copy = pending_copy(w, (flat[:, None] + np.arange(es)).ravel())
        if copy:
            raise_at(WgmmaHazard, f"this wgmma.mma_async reads shared memory that {copy} has not "
                     "finished writing: wait for the copy (its mbarrier, or cp.async.wait_group "
                     "and a barrier) before issuing the wgmma", w, ins, lane=0)
        raw = w.mem.load(w, ins, "shared", flat.astype(np.uint64), np.zeros(len(flat), np.int64),
                         es, es)
        return decode_elems(raw.reshape(addr.shape + (es,)), itype), flat

    def fn(w, m):
        _require_full(w, ins, m)
        st = _state(w)
        rank = w.index % 4
        if fa is None:
            a, a_addr = operand(w, uniform(w, rd_a, "A descriptor"), 64,
                               slice(16 * rank, 16 * rank + 16), ta)
        else:
            a, a_addr = fa.matrix(w, (16, 16)), None
        b, b_addr = operand(w, uniform(w, rd_b, "B descriptor"), n_, slice(None), tb)     # (N, K)
        keep = scale_d_imm if rd_scale is None else bool(rd_scale(w)[0])
        c = fd.matrix(w, (16, n_)) if keep else np.zeros((16, n_))
        fd.write_matrix(w, tcmodel.matmul(sa * a, sb * b.T, c, itype, dtype), m)
        for r in touched:
            w.inflight[r] = st.open
            st.by_reg[r] = ins
        st.trace.append(ins.ptx_line)
        addrs = b_addr if a_addr is None else np.concatenate([a_addr, b_addr])
        byte_addr = (addrs[:, None] + np.arange(es)).ravel()
        sh = w.mem.spaces["shared"]
        st.reads.append([st.open, byte_addr, sh.buf[byte_addr].copy(), ins, None])
        if sh.wg_busy is None:
            sh.wg_busy = np.zeros(sh.size, np.int32)
        sh.wg_busy[byte_addr] += 1            # (a repeated byte counts once, here and at the wait)
        sh.wg_n += 1
    return fn
