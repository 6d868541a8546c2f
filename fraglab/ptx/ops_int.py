"""Integer, bit and predicate instructions (and the type-generic ones: add, sub, mul, mad, min,
max, neg, abs, setp, selp, mov, which hand float types to :mod:`.ops_float`)."""
from __future__ import annotations

import numpy as np

from . import nan, ops_float
from .decode import DT, SINT, UINT, last_type, mods, unsupported
from .registry import handler

FLOAT_TYPES = ("f32", "f64", "f16", "f16x2", "bf16", "bf16x2")


def _is_float(t):
    return t in FLOAT_TYPES


def nary(ins, dc, t, fn, n, dst_t=None, src_types=None):
    """d = fn(a, b, ...) with n sources read as type t (or src_types) and written as dst_t."""
    srcs = [dc.reader(op, (src_types or [t] * n)[i], ins) for i, op in enumerate(ins.operands[1:1 + n])]
    wr = dc.writer(ins.operands[0], dst_t or t, ins)
    if n == 1:
        a, = srcs
        return lambda w, m: wr(w, fn(a(w)), m)
    if n == 2:
        a, b = srcs
        return lambda w, m: wr(w, fn(a(w), b(w)), m)
    if n == 3:
        a, b, c = srcs
        return lambda w, m: wr(w, fn(a(w), b(w), c(w)), m)
    a, b, c, d = srcs
    return lambda w, m: wr(w, fn(a(w), b(w), c(w), d(w)), m)


def _sat32(x64):
    return np.clip(x64, -2**31, 2**31 - 1).astype(np.int32)


@handler("add", "sub")
def h_addsub(ins, dc):
    t = last_type(ins)
    if _is_float(t):
        return ops_float.arith(ins, dc, t)
    sub = ins.base == "sub"
    if "sat" in mods(ins):
        if t != "s32":
            unsupported(ins)
        return nary(ins, dc, t, (lambda a, b: _sat32(a.astype(np.int64) - b)) if sub
                    else (lambda a, b: _sat32(a.astype(np.int64) + b)), 2)
    if "cc" in mods(ins) or "c" in mods(ins):
        unsupported(ins, "carry chains are not implemented")
    return nary(ins, dc, t, np.subtract if sub else np.add, 2)


def _mulhi(a, b, t):
    dt = np.dtype(DT[t])
    if dt.itemsize <= 4:
        wide = np.int64 if t[0] == "s" else np.uint64
        return ((a.astype(wide) * b.astype(wide)) >> (8 * dt.itemsize)).astype(dt)
    # 64-bit: split into 32-bit halves
    neg = None
    if t[0] == "s":
        neg = (a < 0) ^ (b < 0)
        a, b = np.abs(a).astype(np.uint64), np.abs(b).astype(np.uint64)
    m32 = np.uint64(0xFFFFFFFF)
    al, ah, bl, bh = a & m32, a >> np.uint64(32), b & m32, b >> np.uint64(32)
    ll, lh, hl, hh = al * bl, al * bh, ah * bl, ah * bh
    mid = (ll >> np.uint64(32)) + (lh & m32) + (hl & m32)
    hi = hh + (lh >> np.uint64(32)) + (hl >> np.uint64(32)) + (mid >> np.uint64(32))
    if neg is not None:
        lo = (mid << np.uint64(32)) | (ll & m32)
        hi = np.where(neg, ~hi + (lo == 0), hi)
        return hi.view(np.int64)
    return hi


def _wide(t):
    size = np.dtype(DT[t]).itemsize * 2
    return ("s" if t[0] == "s" else "u") + str(8 * size)


def _mul24(a, b, t, hi):
    """The 48-bit product of the low 24 bits of a and b (sign-extended for .s32): bits 0-31
    (.lo) or 16-47 (.hi)."""
    x, y = (v.astype(np.int64) & 0xFFFFFF for v in (a, b))
    if t[0] == "s":
        x, y = (np.where(v & 0x800000, v - (1 << 24), v) for v in (x, y))
    p = x * y
    return ((p >> 16) if hi else p).astype(np.int64).astype(np.uint64).astype(np.uint32).view(DT[t])


def _product(ins, t, md):
    """The a * b of mul/mad (.lo, .hi, .wide or the 24-bit forms) as (fn(a, b), result type)."""
    if ins.base in ("mul24", "mad24"):
        hi = "hi" in md
        return (lambda a, b: _mul24(a, b, t, hi)), t
    if "wide" in md:
        wt = _wide(t)
        wd = DT[wt]
        return (lambda a, b: a.astype(wd) * b.astype(wd)), wt
    if "hi" in md:
        return (lambda a, b: _mulhi(a, b, t)), t
    return np.multiply, t


@handler("mul", "mul24")
def h_mul(ins, dc):
    t = last_type(ins)
    if _is_float(t):
        return ops_float.arith(ins, dc, t)
    fn, dt = _product(ins, t, mods(ins))
    return nary(ins, dc, t, fn, 2, dst_t=dt)


@handler("mad", "mad24")
def h_mad(ins, dc):
    t = last_type(ins)
    if _is_float(t):
        return ops_float.fma(ins, dc, t)
    md = mods(ins)
    fn, dt = _product(ins, t, md)
    if "sat" in md:                  # mad{24}.hi.sat.s32: the high half plus c, saturated
        if not ("hi" in md and t == "s32"):
            unsupported(ins, ".sat other than mad.hi.sat.s32")
        return nary(ins, dc, t, lambda a, b, c: _sat32(fn(a, b).astype(np.int64) + c), 3)
    return nary(ins, dc, t, lambda a, b, c: fn(a, b) + c, 3, src_types=[t, t, dt], dst_t=dt)


def _divrem(a, b, rem):
    """Truncating div/rem. By zero the ISA leaves the result "unspecified, machine-specific":
    an H100 gives all ones for both, every width, signed or not (rem.u32 7 % 0 = 0xffffffff;
    H100, 2026-11-27 differential record)."""
    bs = np.where(b == 0, 1, b).astype(b.dtype)
    if a.dtype.kind == "u":
        r = a % bs if rem else a // bs
    else:
        rr = np.fmod(a, bs)
        r = rr if rem else ((a - rr) // bs).astype(a.dtype)
    return np.where(b == 0, np.array(-1).astype(a.dtype), r).astype(a.dtype)


@handler("div", "rem")
def h_div(ins, dc):
    t = last_type(ins)
    if _is_float(t):
        if ins.base == "rem":
            unsupported(ins)
        return ops_float.div(ins, dc, t)
    rem = ins.base == "rem"
    return nary(ins, dc, t, lambda a, b: _divrem(a, b, rem), 2)


@handler("min", "max")
def h_minmax(ins, dc):
    t = last_type(ins)
    if _is_float(t):
        return ops_float.minmax(ins, dc, t)
    fn = np.minimum if ins.base == "min" else np.maximum
    if "relu" in mods(ins):          # min/max.relu.s32: negative results become 0
        return nary(ins, dc, t, lambda a, b: np.maximum(fn(a, b), 0).astype(a.dtype), 2)
    return nary(ins, dc, t, fn, 2)


@handler("neg", "abs")
def h_negabs(ins, dc):
    t = last_type(ins)
    if _is_float(t):
        return ops_float.unary_sign(ins, dc, t)
    if ins.base == "neg":
        return nary(ins, dc, t, np.negative, 1)
    low = np.iinfo(np.dtype(DT[t])).min
    return nary(ins, dc, t, lambda a: nan.open_int(np.abs(a), a == low), 1)   # nan.open_int


@handler("and", "or", "xor")
def h_logic(ins, dc):
    t = last_type(ins)
    fn = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[ins.base]
    return nary(ins, dc, t, fn, 2)


@handler("not", "cnot")
def h_not(ins, dc):
    t = last_type(ins)
    if ins.base == "cnot":
        dt = DT[t]
        return nary(ins, dc, t, lambda a: (a == 0).astype(dt), 1)
    return nary(ins, dc, t, np.invert, 1)


@handler("shl", "shr")
def h_shift(ins, dc):
    t = last_type(ins)
    dt = np.dtype(DT[t])
    bits = 8 * dt.itemsize
    a = dc.reader(ins.operands[1], t, ins)
    b = dc.reader(ins.operands[2], "u32", ins)
    wr = dc.writer(ins.operands[0], t, ins)
    if ins.base == "shl":
        def fn(w, m):
            s = b(w)
            x = a(w).view(UINT[dt.itemsize])
            r = np.where(s >= bits, 0, x << np.minimum(s, bits - 1).astype(x.dtype))
            wr(w, r.astype(x.dtype).view(dt), m)
    elif t[0] == "s":
        def fn(w, m):
            s = np.minimum(b(w), bits - 1).astype(dt)
            wr(w, (a(w) >> s).astype(dt), m)
    else:
        def fn(w, m):
            s = b(w)
            x = a(w).view(UINT[dt.itemsize])
            r = np.where(s >= bits, 0, x >> np.minimum(s, bits - 1).astype(x.dtype))
            wr(w, r.astype(x.dtype).view(dt), m)
    return fn


@handler("shf")
def h_shf(ins, dc):
    md = mods(ins)
    left, clamp = "l" in md, "clamp" in md
    a, b, c = (dc.reader(o, "u32", ins) for o in ins.operands[1:4])
    wr = dc.writer(ins.operands[0], "b32", ins)

    def fn(w, m):
        n = c(w).astype(np.uint64)
        n = np.minimum(n, np.uint64(32)) if clamp else n & np.uint64(31)
        both = (b(w).astype(np.uint64) << np.uint64(32)) | a(w).astype(np.uint64)
        if left:
            r = ((both << n) >> np.uint64(32)) & np.uint64(0xFFFFFFFF)
        else:
            r = (both >> n) & np.uint64(0xFFFFFFFF)
        wr(w, r.astype(np.uint32), m)
    return fn


@handler("lop3")
def h_lop3(ins, dc):
    lut_op = ins.operands[4]
    if lut_op[0] != "imm":
        unsupported(ins, "non-constant lookup table")
    lut = int(lut_op[1]) & 0xFF
    terms = [i for i in range(8) if lut >> i & 1]

    def f(a, b, c):
        r = np.zeros_like(a)
        for i in terms:
            r |= (a if i & 4 else ~a) & (b if i & 2 else ~b) & (c if i & 1 else ~c)
        return r
    return nary(ins, dc, "b32", f, 3)


# prmt's special modes: for c[1:0] = 0..3, the source bytes of d.b0, d.b1, d.b2, d.b3
_PRMT_MODES = {
    "f4e": [(0, 1, 2, 3), (1, 2, 3, 4), (2, 3, 4, 5), (3, 4, 5, 6)],
    "b4e": [(0, 7, 6, 5), (1, 0, 7, 6), (2, 1, 0, 7), (3, 2, 1, 0)],
    "rc8": [(0, 0, 0, 0), (1, 1, 1, 1), (2, 2, 2, 2), (3, 3, 3, 3)],
    "ecl": [(0, 1, 2, 3), (1, 1, 2, 3), (2, 2, 2, 3), (3, 3, 3, 3)],
    "ecr": [(0, 0, 0, 0), (0, 1, 1, 1), (0, 1, 2, 2), (0, 1, 2, 3)],
    "rc16": [(0, 1, 0, 1), (2, 3, 2, 3), (0, 1, 0, 1), (2, 3, 2, 3)],
}


@handler("prmt")
def h_prmt(ins, dc):
    md = mods(ins)
    mode = next((x for x in md if x in _PRMT_MODES), None)
    shifts = np.array([0, 4, 8, 12], np.uint32)
    table = None if mode is None else np.array(_PRMT_MODES[mode], np.int64)

    def f(a, b, c):
        both = (b.astype(np.uint64) << np.uint64(32)) | a.astype(np.uint64)
        by = both.view(np.uint8).reshape(32, 8)
        if table is not None:
            vals = np.take_along_axis(by, table[(c & np.uint32(3)).astype(np.int64)], axis=1)
        else:
            sel = (c[:, None] >> shifts) & np.uint32(0xF)
            vals = np.take_along_axis(by, (sel & 7).astype(np.int64), axis=1)
            vals = np.where(sel & 8, np.where(vals & 0x80, 0xFF, 0), vals).astype(np.uint8)
        return np.ascontiguousarray(vals.astype(np.uint8)).view(np.uint32).ravel()
    return nary(ins, dc, "b32", f, 3)


_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
        "gt": np.greater, "ge": np.greater_equal, "lo": np.less, "ls": np.less_equal,
        "hi": np.greater, "hs": np.greater_equal}


def compare(ins, cmp, t, ftz=False):
    """fn(a, b) -> bool array for PTX comparison `cmp` on type t."""
    if _is_float(t):
        return ops_float.fcompare(ins, cmp, t, ftz)
    if cmp not in _CMP:
        unsupported(ins, f"comparison .{cmp} on .{t}")
    return _CMP[cmp]


_BOOL = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}


@handler("setp", "set")
def h_setp(ins, dc):
    """setp.CmpOp{.BoolOp}{.ftz}.type p[|q], a, b{, c}; set.CmpOp{.BoolOp}{.ftz}.dtype.stype
    d, a, b{, c}: d is 1.0 (.f32) or all ones (.u32/.s32) where the test holds, else 0."""
    md = mods(ins)
    t = last_type(ins)
    cmp = md[0]
    bop = next((b for b in md[1:] if b in _BOOL), None)
    f = compare(ins, cmp, t, "ftz" in md)
    a = dc.reader(ins.operands[1], t, ins)
    b = dc.reader(ins.operands[2], t, ins)
    c = dc.reader(ins.operands[3], "pred", ins) if bop else None
    dst = ins.operands[0]
    if ins.base == "set":
        dt_t = next(x for x in md if x in DT)
        one = np.full(32, 1.0, np.float32) if dt_t == "f32" else \
            np.full(32, 0xFFFFFFFF, np.uint32).view(DT[dt_t])
        wd = dc.writer(dst, dt_t, ins)
        bf_ = _BOOL.get(bop)
        return lambda w, m: wd(w, np.where(bf_(f(a(w), b(w)), c(w)) if bf_ else f(a(w), b(w)),
                                           one, one * 0), m)
    if dst[0] == "pair":
        wp, wq = dc.writer(dst[1], "pred", ins), dc.writer(dst[2], "pred", ins)
    else:
        wp, wq = dc.writer(dst, "pred", ins), None
    bf = _BOOL.get(bop)

    def fn(w, m):
        r = f(a(w), b(w))
        if bf is not None:
            cc = c(w)
            wp(w, bf(r, cc), m)
            if wq is not None:
                wq(w, bf(~r, cc), m)
        else:
            wp(w, r, m)
            if wq is not None:
                wq(w, ~r, m)
    return fn


@handler("selp")
def h_selp(ins, dc):
    t = last_type(ins)
    return nary(ins, dc, t, lambda a, b, c: np.where(c, a, b), 3, src_types=[t, t, "pred"])


@handler("slct")
def h_slct(ins, dc):
    ts = [x for x in mods(ins) if x in DT]
    t, ct = ts[0], ts[1]
    fz = "ftz" in mods(ins)          # a subnormal c counts as zero (-0 >= 0: a)
    return nary(ins, dc, t, lambda a, b, c: np.where((ops_float.ftz(c) if fz else c) >= 0, a, b),
                3, src_types=[t, t, ct])


@handler("mov")
def h_mov(ins, dc):
    t = last_type(ins)
    d, s = ins.operands[0], ins.operands[1]
    size = np.dtype(DT[t]).itemsize
    if d[0] == "vec":                                # unpack {lo, hi}, %r
        parts = d[1]
        ps = size // len(parts)
        src = dc.reader(s, t, ins)
        wrs = [dc.writer(p, "b%d" % (8 * ps), ins) for p in parts]

        def fn(w, m):
            v = np.ascontiguousarray(src(w)).view(UINT[ps]).reshape(32, len(parts))
            for j, wr in enumerate(wrs):
                wr(w, np.ascontiguousarray(v[:, j]), m)
        return fn
    if s[0] == "vec":                                # pack %r, {lo, hi}
        parts = s[1]
        ps = size // len(parts)
        rds = [dc.reader(p, "b%d" % (8 * ps), ins) for p in parts]
        wr = dc.writer(d, t, ins)

        def fn(w, m):
            v = np.stack([r(w) for r in rds], axis=1).astype(UINT[ps])
            wr(w, np.ascontiguousarray(v).view(UINT[size]).ravel().view(DT[t]), m)
        return fn
    if s[0] == "sym" and s[1] in dc.kernel.labels:
        unsupported(ins, "taking the address of a label")
    src = dc.reader(s, t, ins)
    wr = dc.writer(d, t, ins)
    return lambda w, m: wr(w, src(w), m)


@handler("sad")
def h_sad(ins, dc):
    t = last_type(ins)
    dt = DT[t]
    if np.dtype(dt).itemsize == 8:
        def f(a, b, c):
            return (np.where(a > b, a - b, b - a) + c).astype(dt)
    else:
        def f(a, b, c):
            return (np.abs(a.astype(np.int64) - b.astype(np.int64)) + c).astype(UINT[4]).astype(
                SINT[np.dtype(dt).itemsize] if t[0] == "s" else dt).astype(dt)
    return nary(ins, dc, t, f, 3)


@handler("dp4a", "dp2a")
def h_dp(ins, dc):
    """dp4a.atype.btype d, a, b, c: c + the dot product of the 4 bytes of a and b; dp2a.lo/.hi:
    of the 2 half-words of a with 2 bytes of b (low or high pair)."""
    md = mods(ins)
    ts = [x for x in md if x in ("u32", "s32")]
    at, bt = ts[0], ts[1]
    hi = "hi" in md
    dst = "s32" if "s32" in (at, bt) else "u32"

    def parts(v, n, signed):
        w = 32 // n
        u = v.view(np.uint32).astype(np.int64)
        out = [(u >> (w * i)) & ((1 << w) - 1) for i in range(n)]
        return [np.where(x >> (w - 1), x - (1 << w), x) if signed else x for x in out]

    def f(a, b, c):
        if ins.base == "dp4a":
            pa, pb = parts(a, 4, at == "s32"), parts(b, 4, bt == "s32")
        else:
            pa = parts(a, 2, at == "s32")
            pb = parts(b, 4, bt == "s32")[2:] if hi else parts(b, 4, bt == "s32")[:2]
        acc = c.view(np.int32 if dst == "s32" else np.uint32).astype(np.int64)
        for x, y in zip(pa, pb):
            acc = acc + x * y
        return acc.astype(np.uint64).astype(np.uint32).view(DT[dst])
    return nary(ins, dc, dst, f, 3, src_types=[at, bt, dst])
