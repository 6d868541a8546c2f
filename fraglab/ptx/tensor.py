"""Tensor-core instructions: wmma.load/mma/store, mma.sync, ldmatrix.

* WMMA fragments follow the course's traced layouts (``fraglab/layouts/sm_90.json``: for every
  fragment kind, the (row, col) of each (lane, element)); element e of a fragment sits in
  register e // per_reg at bits (e % per_reg) * width, as the PTX packs them.
* mma.sync fragments follow the PTX ISA's documented figures ("Matrix fragments for mma.m16n8k16"
  and friends); see :func:`mma_layout`.
* Floating-point products follow the H100's tensor-core arithmetic (:mod:`.tcmodel`: blocks of
  products aligned to the largest exponent and truncated, the sum truncated to f32 or rounded to
  f16); integer products are exact (int64), f64 ones rounded once.
"""
from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..dtypes import from_bf16
from .decode import mods, types_of, unsupported
from .registry import handler
from .errors import CollectiveError, defer_or_raise
from .ops_mem import space_of
from . import tcmodel

RECORDING = Path(__file__).resolve().parent.parent / "layouts" / "sm_90.json"
LANES = np.arange(32)
ESIZE = {"f16": 2, "bf16": 2, "s8": 1, "u8": 1, "tf32": 4, "f32": 4, "s32": 4, "f64": 8}


@lru_cache(maxsize=None)
def _recording() -> dict:
    return json.loads(RECORDING.read_text())["kinds"]


@lru_cache(maxsize=None)
def wmma_layout(kind: str) -> np.ndarray:
    """(32, num_elements, 2) (row, col) of each fragment element, from the traced recording."""
    rec = _recording()
    if kind not in rec:
        raise KeyError(kind)
    e = rec[kind]
    return np.stack([np.asarray(e["row"]), np.asarray(e["col"])], axis=-1).astype(np.int64)


def _require_full(w, ins, m):
    if m is not None:
        lane = int(np.argmin(m))
        defer_or_raise(CollectiveError, f"{ins.opcode} is a warp-wide (.sync.aligned) instruction: "
                       f"all 32 lanes must execute it together, but lane {lane} does not "
                       "(diverged or exited)", w, ins, int(np.argmax(m)), ~m)


def decode_elems(raw: np.ndarray, t: str) -> np.ndarray:
    """Raw element bytes (..., es) -> values (float64 or int64)."""
    raw = np.ascontiguousarray(raw)
    if t == "f16":
        return raw.view(np.float16)[..., 0].astype(np.float64)
    if t == "bf16":
        return from_bf16(raw.view(np.uint16)[..., 0]).astype(np.float64)
    if t == "tf32":                      # the tensor core ignores the 13 low significand bits
        return (raw.view(np.uint32)[..., 0] & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    if t == "f32":
        return raw.view(np.float32)[..., 0].astype(np.float64)
    if t == "f64":
        return raw.view(np.float64)[..., 0]
    if t == "s8":
        return raw.view(np.int8)[..., 0].astype(np.int64)
    if t == "u8":
        return raw.view(np.uint8)[..., 0].astype(np.int64)
    if t == "s32":
        return raw.view(np.int32)[..., 0].astype(np.int64)
    raise KeyError(t)


EUINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def word_values(u: np.ndarray, t: str) -> np.ndarray:
    """Element bit patterns (unsigned, of the element's width) -> values, as :func:`decode_elems`."""
    if t == "f16":
        return u.view(np.float16).astype(np.float64)
    if t == "bf16":
        return from_bf16(u).astype(np.float64)
    if t == "tf32":
        return (u & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    if t in ("f32", "f64"):
        return u.view(np.float32 if t == "f32" else np.float64).astype(np.float64)
    if t in ("s8", "u8", "s32"):
        return u.view({"s8": np.int8, "u8": np.uint8, "s32": np.int32}[t]).astype(np.int64)
    raise KeyError(t)


def encode_elems(vals: np.ndarray, t: str, satfinite=False) -> np.ndarray:
    """Values -> raw element bytes (..., es)."""
    if t == "f32":
        v = vals.astype(np.float32)
    elif t == "f16":
        v = vals.astype(np.float16)
    elif t == "f64":
        v = vals.astype(np.float64)
    elif t == "s32":
        v = (np.clip(vals, -2**31, 2**31 - 1) if satfinite else vals).astype(np.int64).astype(np.int32)
    else:
        raise KeyError(t)
    return np.ascontiguousarray(v).view(np.uint8).reshape(vals.shape + (ESIZE[t],))


class Fragment:
    """Registers <-> element values of one fragment, for a given layout (32, ne, 2)."""

    def __init__(self, dc, ins, regs_op, t, layout, writable=False):
        if regs_op[0] != "vec":
            unsupported(ins, "fragment operand must be a {...} register list")
        self.t, self.layout = t, layout
        self.ne = layout.shape[1]
        self.nregs = len(regs_op[1])
        self.es = ESIZE[t]
        self.regbytes = self.ne * self.es // self.nregs
        if self.regbytes not in (4, 8) or self.ne * self.es % self.nregs:
            unsupported(ins, f"fragment of {self.nregs} registers cannot hold {self.ne} .{t}")
        rt = "b32" if self.regbytes == 4 else "b64"
        self.readers = [dc.reader(o, rt, ins) for o in regs_op[1]]
        self.writers = [dc.writer(o, rt, ins) for o in regs_op[1]] if writable else None
        self.rdt = np.uint32 if self.regbytes == 4 else np.uint64
        # element e of lane l, registers stacked (register, lane): word e // per of row l; an
        # element wider than a register (f64 in two b32) in (lane, element) order instead
        per = self.regbytes // self.es
        e, lane = np.arange(self.ne), LANES[:, None]
        self.src = (e // per) * (32 * per) + lane * per + e % per if per else lane * self.ne + e
        self.maps = {}

    def raw(self, w) -> np.ndarray:
        regs = np.stack([r(w) for r in self.readers], axis=1).astype(self.rdt, copy=False)
        return np.ascontiguousarray(regs).view(np.uint8).reshape(32, self.ne, self.es)

    def write_raw(self, w, raw, m):
        regs = np.ascontiguousarray(raw).reshape(32, -1).view(self.rdt)
        for j, wr in enumerate(self.writers):
            wr(w, np.ascontiguousarray(regs[:, j]), m)

    def _map(self, shape):
        """(gather, scatter) for a matrix of ``shape``: the element words, in register-stacked
        order, of each matrix position (None where the layout does not cover every position
        exactly once), and the matrix position of each element word (None where the layout
        leaves the matrix: indexing it then fails as it always did)."""
        if shape not in self.maps:
            r, c = self.layout[..., 0], self.layout[..., 1]
            flat = r * shape[1] + c
            gather = scatter = None
            if (r >= 0).all() and (c >= 0).all() and (r < shape[0]).all() and (c < shape[1]).all():
                scatter = np.empty(flat.size, np.int64)
                scatter[self.src.ravel()] = flat.ravel()
            if scatter is not None and flat.size == shape[0] * shape[1] and \
                    (np.sort(flat.ravel()) == np.arange(flat.size)).all():
                gather = np.empty(flat.size, np.int64)
                gather[flat.ravel()] = self.src.ravel()
            self.maps[shape] = gather, scatter
        return self.maps[shape]

    def words(self, w) -> np.ndarray:
        """The fragment's element bit patterns, flat in (register, lane, element) order."""
        if self.regbytes < self.es:
            return self.raw(w).view(EUINT[self.es]).ravel()
        regs = np.concatenate([r(w) for r in self.readers]).astype(self.rdt, copy=False)
        return regs.view(EUINT[self.es])

    def matrix(self, w, shape) -> np.ndarray:
        gather, _ = self._map(shape)
        words = self.words(w)
        if gather is not None:
            return word_values(words[gather], self.t).reshape(shape)
        vals = word_values(words[self.src], self.t)
        out = np.zeros(shape, vals.dtype)
        out[self.layout[..., 0], self.layout[..., 1]] = vals
        return out

    def write_matrix(self, w, mat, m, satfinite=False):
        scatter = self._map(mat.shape)[1]
        if scatter is None:
            vals = mat[self.layout[..., 0], self.layout[..., 1]].ravel()[np.argsort(self.src, None)]
        else:
            vals = np.ascontiguousarray(mat).ravel()[scatter]
        raw = encode_elems(vals, self.t, satfinite)
        if self.regbytes < self.es:
            return self.write_raw(w, raw, m)
        regs = raw.reshape(-1).view(self.rdt)
        for wr, v in zip(self.writers, regs.reshape(self.nregs, 32)):
            wr(w, v, m)


_SHAPE = re.compile(r"m(\d+)n(\d+)k(\d+)")


def _shape(ins):
    for x in mods(ins):
        mm = _SHAPE.fullmatch(x)
        if mm:
            return tuple(int(g) for g in mm.groups())
    unsupported(ins, "no shape")


def _wmma_kind(frag, shape, t, layout):
    m, n, k = shape
    s = f"{m}x{n}x{k}"
    if frag == "c":
        return f"acc_{s}_{t}"
    return f"{frag}_{s}_{t}_{layout}"


def _tile(frag, shape):
    m, n, k = shape
    return {"a": (m, k), "b": (k, n), "c": (m, n), "d": (m, n)}[frag]


def _kind_layout(ins, kind):
    try:
        return wmma_layout(kind)
    except KeyError:
        unsupported(ins, f"no traced layout for fragment kind {kind} in {RECORDING.name}")


@handler("wmma")
def h_wmma(ins, dc):
    md = mods(ins)
    shape = _shape(ins)
    if md[0] in ("load", "store"):
        frag = md[1]
        layout = next(x for x in md if x in ("row", "col"))
        t = types_of(ins)[-1]
        kind = _wmma_kind("c" if frag in ("c", "d") else frag, shape, t, layout)
        lay = _kind_layout(ins, kind)
        rows, cols = _tile(frag, shape)
        space = space_of(ins)
        es = ESIZE[t]
        store = md[0] == "store"
        regs_op = ins.operands[1] if store else ins.operands[0]
        addr_op = ins.operands[0] if store else ins.operands[1]
        fr = Fragment(dc, ins, regs_op, t, lay, writable=not store)
        addr = dc.address(addr_op, space, ins)
        ldm = dc.reader(ins.operands[2], "u32", ins) if len(ins.operands) > 2 else None
        r, c = lay[..., 0], lay[..., 1]
        default_ld = cols if layout == "row" else rows
        lanes_rep = np.repeat(LANES, fr.ne)

        def offsets(w):
            ld = ldm(w).astype(np.int64)[:, None] if ldm is not None else default_ld
            off = (r * ld + c) if layout == "row" else (c * ld + r)
            return (addr(w)[:, None] + (off * es).astype(np.uint64)).ravel()

        if store:
            def fn(w, m):
                _require_full(w, ins, m)
                w.mem.store(w, ins, space, offsets(w), lanes_rep,
                            fr.raw(w).reshape(32 * fr.ne, es), es)
        else:
            def fn(w, m):
                _require_full(w, ins, m)
                raw = w.mem.load(w, ins, space, offsets(w), lanes_rep, es, es)
                fr.write_raw(w, raw.reshape(32, fr.ne, es), m)
        return fn
    if md[0] == "mma":
        ts = types_of(ins)
        if len(ts) == 2:
            dt_t, ct = ts
            at = bt = "f16"
        elif len(ts) == 4:
            dt_t, at, bt, ct = ts
        else:
            unsupported(ins)
        al, bl = [x for x in md if x in ("row", "col")][:2]
        fa = Fragment(dc, ins, ins.operands[1], at, _kind_layout(ins, _wmma_kind("a", shape, at, al)))
        fb = Fragment(dc, ins, ins.operands[2], bt, _kind_layout(ins, _wmma_kind("b", shape, bt, bl)))
        fc = Fragment(dc, ins, ins.operands[3], ct, _kind_layout(ins, _wmma_kind("c", shape, ct, None)))
        fd = Fragment(dc, ins, ins.operands[0], dt_t, _kind_layout(ins, _wmma_kind("c", shape, dt_t, None)),
                      writable=True)
        # tf32 (m16n16k8): ptxas 13 makes each 16 x 8 half of it two HMMA.1684 along K (sm_80,
        # sm_90), two blocks of 4 products where mma.m16n8k8 is one of 8 (HMMA.1688): the H200
        # differed from a single block in 249 of 1,024 elements (tests/test_ptx_gpu.py)
        return _product(ins, (fa, fb, fc, fd), shape, "satfinite" in md,
                        kstep=4 if at == "tf32" else None)
    unsupported(ins)


def _product(ins, frags, shape, sat, kstep=None):
    """The warp-wide D = A @ B + C of wmma.mma and mma.sync, on fragments (A, B, C, D).
    ``kstep``: K as the GPU runs it, in instructions of ``kstep`` products, each rounded to D's
    type and fed to the next as its C (a wmma that ptxas lowers to several along K)."""
    fa, fb, fc, fd = frags
    m_, n_, k_ = shape
    step = kstep or k_

    def fn(w, m):
        _require_full(w, ins, m)
        A = fa.matrix(w, (m_, k_))
        B = fb.matrix(w, (k_, n_))
        D = fc.matrix(w, (m_, n_))
        for k0 in range(0, k_, step):
            D = tcmodel.matmul(A[:, k0:k0 + step], B[k0:k0 + step], D, fa.t, fd.t)
        fd.write_matrix(w, D, m, sat)
    return fn


# ---- mma.sync ------------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def mma_layout(shape, operand: str, t: str) -> np.ndarray:
    """(32, elements, 2) (row, col) of an mma.sync fragment, from the PTX ISA's figures."""
    g, c = LANES // 4, LANES % 4
    m, n, k = shape
    if operand in ("c", "d"):
        if shape == (8, 8, 4):
            els = [(g, 2 * c + i) for i in range(2)]
        else:
            els = [(g + 8 * (i // 2), 2 * c + i % 2) for i in range(4)]
    elif t in ("f16", "bf16"):
        if operand == "a":
            els = [(g + 8 * ((i // 2) % 2), 2 * c + i % 2 + 8 * (i // 4)) for i in range(k // 2)]
        else:
            els = [(2 * c + i % 2 + 8 * (i // 2), g) for i in range(k // 4)]
    elif t == "tf32":
        if operand == "a":
            els = [(g + 8 * (i % 2), c + 4 * (i // 2)) for i in range(k // 2)]
        else:
            els = [(c + 4 * i, g) for i in range(k // 4)]
    elif t in ("s8", "u8") and k == 32:
        if operand == "a":
            els = [(g + 8 * ((i // 4) % 2), 4 * c + i % 4 + 16 * (i // 8)) for i in range(16)]
        else:
            els = [(4 * c + i % 4 + 16 * (i // 4), g) for i in range(8)]
    elif t == "f64" and shape == (8, 8, 4):
        els = [(g, c)] if operand == "a" else [(c, g)]
    else:
        raise KeyError((shape, operand, t))
    return np.stack([np.stack([np.asarray(r), np.asarray(cc)], -1) for r, cc in els], axis=1)


@handler("mma")
def h_mma(ins, dc):
    md = mods(ins)
    shape = _shape(ins)
    ts = types_of(ins)
    if len(ts) != 4 or "sp" in md:
        unsupported(ins)
    dt_t, at, bt, ct = ts
    if (md.count("row") != 1 or md.count("col") != 1) and shape != (8, 8, 4):
        unsupported(ins, "only .row.col operand layouts")
    try:
        la, lb = mma_layout(shape, "a", at), mma_layout(shape, "b", bt)
        lc, ld = mma_layout(shape, "c", ct), mma_layout(shape, "d", dt_t)
    except KeyError:
        unsupported(ins, f"shape m{shape[0]}n{shape[1]}k{shape[2]} with .{at} inputs")
    fa = Fragment(dc, ins, ins.operands[1], at, la)
    fb = Fragment(dc, ins, ins.operands[2], bt, lb)
    fc = Fragment(dc, ins, ins.operands[3], ct, lc)
    fd = Fragment(dc, ins, ins.operands[0], dt_t, ld, writable=True)
    return _product(ins, (fa, fb, fc, fd), shape, "satfinite" in md)


def _matrix_op(ins, dc, regs_i: int, access):
    """What ldmatrix / stmatrix .m8n8.x{1,2,4}{.trans}.b16 share: the count x, the register
    accessors of operand ``regs_i``, the space, the address (lanes 8i..8i+7 give the rows of
    matrix i) and where each lane's low and high halves sit in an 8 x 8 matrix."""
    md = mods(ins)
    if "m8n8" not in md or "b16" not in md:
        unsupported(ins, f"only {ins.base} .m8n8 .b16")
    x = next(int(v[1:]) for v in md if v in ("x1", "x2", "x4"))
    op = ins.operands[regs_i]
    parts = op[1] if op[0] == "vec" else [op]
    if len(parts) != x:
        unsupported(ins)
    space = space_of(ins, "generic")
    addr = dc.address(ins.operands[1 - regs_i], space, ins)
    g, c = LANES // 4, LANES % 4
    halves = ((2 * c, g), (2 * c + 1, g)) if "trans" in md else ((g, 2 * c), (g, 2 * c + 1))
    return x, [access(p, "b32", ins) for p in parts], space, addr, np.arange(8 * x), halves


@handler("stmatrix")
def h_stmatrix(ins, dc):
    """stmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared.b16 [p], {r...}: ldmatrix reversed."""
    x, rds, space, addr, src_lanes, (lo_at, hi_at) = _matrix_op(ins, dc, 1, dc.reader)

    def fn(w, m):
        _require_full(w, ins, m)
        mats = np.zeros((x, 8, 8), np.uint16)
        for i, rd in enumerate(rds):
            v = rd(w)
            mats[i][lo_at] = (v & np.uint32(0xFFFF)).astype(np.uint16)
            mats[i][hi_at] = (v >> np.uint32(16)).astype(np.uint16)
        data = np.ascontiguousarray(mats.reshape(8 * x, 8)).view(np.uint8)
        w.mem.store(w, ins, space, addr(w)[src_lanes], src_lanes, data, 16)
    return fn


@handler("ldmatrix")
def h_ldmatrix(ins, dc):
    x, wrs, space, addr, src_lanes, (lo_at, hi_at) = _matrix_op(ins, dc, 0, dc.writer)

    # the flat uint16 index of each lane's low and high halves in the x matrices
    lo_i, hi_i = ((64 * np.arange(x)[:, None] + 8 * r + c) for r, c in (lo_at, hi_at))

    def fn(w, m):
        _require_full(w, ins, m)
        raw = w.mem.load(w, ins, space, addr(w)[src_lanes], src_lanes, 16, 16)
        halves = np.ascontiguousarray(raw).view(np.uint16).ravel()
        words = halves[lo_i].astype(np.uint32) | (halves[hi_i].astype(np.uint32) << np.uint32(16))
        for wr, v in zip(wrs, words):
            wr(w, v, m)
    return fn
