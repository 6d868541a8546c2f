"""Pre-decoding: each PTX instruction becomes an :class:`Op` holding a closure ``fn(w, m)``.

``w`` is the executing :class:`~fraglab.ptx.execute.Warp` (its registers ``w.R`` are one NumPy
array of 32 lanes per PTX register, in the register's declared type) and ``m`` the lanes that
execute (a bool array of 32, or ``None`` for all 32). Closures compute on all 32 lanes at once and
write back only the lanes in ``m``.

Opcode handlers register with :func:`fraglab.ptx.registry.handler`; the ``ops_*`` modules,
:mod:`.collectives`, :mod:`.tensor` and :mod:`.calls` hold them, and :mod:`.opset` loads them all.
"""
from __future__ import annotations

import numpy as np

from . import accepted
from .errors import UnsupportedInstruction, raise_at
from .memory import CONST_WINDOW, LOCAL_WINDOW, SHARED_WINDOW

DT = {"b8": np.uint8, "u8": np.uint8, "s8": np.int8, "b16": np.uint16, "u16": np.uint16,
      "s16": np.int16, "f16": np.float16, "bf16": np.uint16, "b32": np.uint32, "u32": np.uint32,
      "s32": np.int32, "f32": np.float32, "f16x2": np.uint32, "bf16x2": np.uint32,
      "tf32": np.uint32, "b64": np.uint64, "u64": np.uint64, "s64": np.int64, "f64": np.float64,
      "pred": np.bool_, "e4m3x2": np.uint16, "e5m2x2": np.uint16}
DTYPE = {k: np.dtype(v) for k, v in DT.items()}
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
FLOAT = {4: np.float32, 8: np.float64}
SINT = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}
TYPES = set(DT)
SPACES = ("global", "shared", "local", "const", "param")

KIND_NORMAL, KIND_BRANCH, KIND_BARRIER, KIND_EXIT = 0, 1, 2, 3


class Op:
    __slots__ = ("fn", "kind", "guard", "neg", "target", "instr", "barrier_id", "release", "touch",
                 "wg")

    def __init__(self, instr, fn=None, kind=KIND_NORMAL, target=None):
        self.instr, self.fn, self.kind, self.target = instr, fn, kind, target
        self.guard, self.neg = (instr.guard if instr.guard else (None, False))
        self.barrier_id = 0
        self.release = None          # barriers with a result (bar.red): fn(warps) at release
        self.touch = frozenset()     # registers the instruction names (the wgmma in-flight check)
        self.wg = False              # a wgmma instruction (may use registers still in flight)


def unsupported(instr, why: str = ""):
    raise UnsupportedInstruction(f"unsupported PTX instruction `{instr.opcode}`"
                                 + (f": {why}" if why else ""))


def mods(instr) -> list[str]:
    return instr.opcode.split(".")[1:]


def last_type(instr, default=None) -> str:
    for mname in reversed(mods(instr)):
        if mname in TYPES:
            return mname
    if default is None:
        unsupported(instr, "no operand type")
    return default


def types_of(instr) -> list[str]:
    return [x for x in mods(instr) if x in TYPES]


class DecodeContext:
    """What decoding needs to know about a kernel: register types and symbol addresses."""

    def __init__(self, kernel, symbols: dict, sreg_fn):
        self.kernel = kernel
        self.reg_types = [t for _, t in kernel.regs]
        self.reg_dtypes = [np.dtype(DT[t]) for t in self.reg_types]
        self.symbols = symbols          # name -> (space, address in that space)
        self.sreg_fn = sreg_fn          # (name, instr) -> fn(w) -> array

    # -- values -------------------------------------------------------------------------------
    def reader(self, op, t: str, instr):
        """fn(w) -> (32,) array of numpy type DT[t] for operand ``op`` read as PTX type ``t``."""
        dt = DTYPE[t]
        kind = op[0]
        if kind == "reg":
            i = op[1]
            rdt = self.reg_dtypes[i]
            if rdt == dt:
                return lambda w: w.R[i]
            if rdt.itemsize == dt.itemsize:
                return lambda w: w.R[i].view(dt)
            if rdt == np.bool_:
                return lambda w: w.R[i].astype(dt)
            if dt.itemsize < rdt.itemsize:
                u = UINT[dt.itemsize]
                return lambda w: w.R[i].view(UINT[rdt.itemsize]).astype(u).view(dt)
            src = SINT[rdt.itemsize] if t.startswith("s") else UINT[rdt.itemsize]
            wide = SINT[dt.itemsize] if t.startswith("s") else UINT[dt.itemsize]
            return lambda w: w.R[i].view(src).astype(wide).view(dt)
        if kind == "imm":
            arr = imm_array(op[1], op[2], t)
            return lambda w: arr
        if kind == "sreg":
            f = self.sreg_fn(op[1], instr)
            return lambda w: f(w).astype(dt, copy=False)
        if kind == "sym":
            sym = self.symbols.get(op[1])
            if sym is None:
                unsupported(instr, f"unknown symbol {op[1]!r}")
            arr = np.full(32, sym[1], np.uint64).astype(UINT[dt.itemsize]).view(dt)
            return lambda w: arr
        if kind == "not":
            f = self.reader(op[1], t, instr)
            return lambda w: ~f(w)
        unsupported(instr, f"operand {op!r} cannot be read as .{t}")

    def writer(self, op, t: str, instr):
        """fn(w, value, m) storing a (32,) value of type DT[t] into operand ``op``."""
        if op[0] == "sink":
            return lambda w, v, m: None
        if op[0] != "reg":
            unsupported(instr, f"destination {op!r} is not a register")
        i = op[1]
        rdt = self.reg_dtypes[i]
        dt = DTYPE[t]
        if rdt == np.bool_ or dt == np.bool_:
            conv = (lambda v: v.astype(rdt)) if rdt != dt else None
        elif rdt.itemsize == dt.itemsize:
            conv = (lambda v: v.view(rdt)) if rdt != dt else None
        else:
            wide = (SINT if t.startswith("s") else UINT)[rdt.itemsize]
            srcu = (SINT if t.startswith("s") else UINT)[dt.itemsize]
            conv = lambda v: v.view(srcu).astype(wide).view(rdt)  # noqa: E731

        if conv is None:
            def wr(w, v, m):
                if m is None:
                    w.R[i][:] = v
                else:
                    np.copyto(w.R[i], v, where=m)
        else:
            def wr(w, v, m):
                if m is None:
                    w.R[i][:] = conv(v)
                else:
                    np.copyto(w.R[i], conv(v), where=m)
        return wr

    def reg_width(self, op) -> int:
        return self.reg_dtypes[op[1]].itemsize if op[0] == "reg" else 8

    # -- addresses ------------------------------------------------------------------------------
    def address(self, op, space: str, instr):
        """fn(w) -> (32,) uint64 addresses in ``space`` ('generic' for generic addressing)."""
        if op[0] != "addr":
            unsupported(instr, f"expected an address operand, got {op!r}")
        base, off = op[1], op[2]
        off64 = np.uint64(off & 0xFFFFFFFFFFFFFFFF)
        if base is None:
            arr = np.full(32, off64, np.uint64)
            return lambda w: arr
        if base[0] == "sym":
            sym = self.symbols.get(base[1])
            if sym is None:
                unsupported(instr, f"unknown symbol {base[1]!r}")
            sp, a = sym
            if space == "generic":
                a += {"shared": SHARED_WINDOW, "local": LOCAL_WINDOW, "const": CONST_WINDOW}.get(sp, 0)
            arr = np.full(32, np.uint64((a + off) & 0xFFFFFFFFFFFFFFFF), np.uint64)
            return lambda w: arr
        width = self.reg_width(base)
        f = self.reader(base, "u64" if width == 8 else "u32", instr)
        if width == 8:
            return (lambda w: f(w) + off64) if off else f
        return lambda w: (f(w).astype(np.uint64) + off64) & np.uint64(0xFFFFFFFF) \
            if off else f(w).astype(np.uint64)


_IMM_CACHE: dict = {}


def imm_array(value, kind: str, t: str) -> np.ndarray:
    """The (32,) read-only array of an immediate as type `t`, cached by the immediate's bits
    (never by its float value: -0.0 == +0.0 and NaN != NaN as floats)."""
    key = (_imm_bits(value, kind), kind, t)
    arr = _IMM_CACHE.get(key)
    if arr is None:
        arr = _IMM_CACHE[key] = _imm_array(value, kind, t)
        arr.flags.writeable = False
    return arr


def _imm_bits(value, kind: str):
    """An immediate's identity: a float literal's bits (as written, NaN payloads included), an
    integer's value."""
    if kind in ("f32", "f64"):
        bits = getattr(value, "bits", None)
        if bits is None:
            bits = int(np.array([value], np.float32 if kind == "f32" else np.float64)
                       .view(UINT[4 if kind == "f32" else 8])[0])
        return bits
    return int(value)


def _imm_array(value, kind: str, t: str) -> np.ndarray:
    dt = DTYPE[t]
    if dt == np.bool_:
        return np.full(32, bool(value))
    if kind in ("f32", "f64"):
        w = 4 if kind == "f32" else 8
        lit = np.full(32, _imm_bits(value, kind), UINT[w]).view(FLOAT[w])   # the literal's bits
        if dt.kind == "f":                              # the same width: the bits as written
            return lit if dt.itemsize == w else lit.astype(dt)
        return lit.view(UINT[w]).astype(UINT[dt.itemsize]).view(dt)     # a float literal as bits
    if dt.kind == "f":
        return np.full(32, value, dt)
    mask = (1 << (8 * dt.itemsize)) - 1
    return np.full(32, int(value) & mask, UINT[dt.itemsize]).view(dt)


def decode_kernel(kernel, symbols, sreg_fn, table: dict) -> list[Op]:
    """Decode every instruction once. Instructions the interpreter lacks (not in
    :data:`fraglab.ptx.accepted.FORMS`, or refused by their handler) become ops that raise
    :class:`UnsupportedInstruction` (naming opcode, modifier and source line) when executed."""
    import gc
    dc = DecodeContext(kernel, symbols, sreg_fn)
    code = []
    was = gc.isenabled()
    gc.disable()                 # decoding allocates many small objects: no collection passes
    try:
        _decode_all(kernel, dc, table, code)
    finally:
        if was:
            gc.enable()
    return code


def _decode_all(kernel, dc, table, code):
    check = accepted.check
    for ins in kernel.instrs:
        h = table.get(ins.base)
        try:
            why = check(ins.opcode)              # the accepted-instruction table, first
            if why is not None:
                unsupported(ins, why)
            if h is None:
                unsupported(ins)
            op = h(ins, dc)
            if not isinstance(op, Op):
                op = Op(ins, op)
        except UnsupportedInstruction as e:
            op = Op(ins, _raiser(ins, e.detail))
            op.kind = KIND_NORMAL
            op.guard, op.neg = None, False
        op.touch = frozenset(_regs_named(ins.operands))
        if ins.base == "testp" and op.guard is not None:
            # A guarded testp writes its predicate in every lane that reaches it, the guard
            # false or not: ptxas drops the guard (H200, driver 13.0, difftest.hw fuzz record:
            # 47 programs, e.g. `@!%p1 testp.subnormal.f32 %p1, %f2` with %p1 true and %f2
            # normal leaves %p1 false; tests/data/fuzz_h200_cases.json). The PTX ISA says a
            # guarded instruction does nothing where its guard is false.
            op.guard, op.neg = None, False
        code.append(op)


def _regs_named(operands):
    for o in operands:
        if o[0] == "reg":
            yield o[1]
        elif o[0] in ("vec",):
            yield from _regs_named(o[1])
        elif o[0] in ("addr", "not"):
            if o[1] is not None:
                yield from _regs_named([o[1]])
        elif o[0] == "pair":
            yield from _regs_named([o[1], o[2]])


def _raiser(ins, msg):
    def fn(w, m):
        raise_at(UnsupportedInstruction, msg, w, ins)
    fn.unsupported = msg
    return fn


def lanes_of(m) -> np.ndarray:
    return ALL_LANES if m is None else np.flatnonzero(m)


ALL_LANES = np.arange(32)
