"""The whole-program fuzzer's generator: a seed -> one small PTX kernel (:func:`program`), many
kernels -> one module (:func:`module`), a seed -> its input words (:func:`inputs`). What the
programs hold: :mod:`.fuzz`; the same seed always gives the same text (fields the
interpreter refuses by name are moved into range without changing the draws)."""
from __future__ import annotations

import random
import re

import numpy as np

THREADS, BLOCKS = 64, 2
IN_WORDS = 16
OUT_WORDS = 48                     # 34 register words, then 8 words of per-thread scratch at 40
SCRATCH = 160                      # byte offset of a thread's scratch in its output row
NR, NF, NRD, ND, NP = 12, 6, 4, 2, 4
F32_IMM = [0x00000000, 0x80000000, 0x3F800000, 0xBF800000, 0x7F800000, 0xFF800000, 0x7FC00000,
           0x7FFFFFFF, 0x00000001, 0x807FFFFF, 0x00800000, 0x7F7FFFFF, 0x3EAAAAAB, 0x4B000000,
           0x33800000, 0xC0490FDB, 0x3F000001]
F64_IMM = [0x0000000000000000, 0x8000000000000000, 0x3FF0000000000000, 0xBFF8000000000000,
           0x7FF0000000000000, 0x0000000000000001, 0x4330000000000000, 0x3CB0000000000000]
CMP_I = ["eq", "ne", "lt", "le", "gt", "ge"]
CMP_F = ["eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan"]
RND = ["rn", "rz", "rm", "rp"]


class Gen:
    """One program's text from a seed."""

    def __init__(self, seed: int, k: int):
        self.rng = random.Random(seed)
        self.k, self.labels, self.lines = k, 0, []

    # operands
    def r(self):
        return f"%r{self.rng.randrange(NR)}"

    def f(self):
        return f"%f{self.rng.randrange(NF)}"

    def rd(self):
        return f"%rd{self.rng.randrange(NRD)}"

    def d(self):
        return f"%d{self.rng.randrange(ND)}"

    def p(self):
        return f"%p{self.rng.randrange(NP)}"

    def ri(self):
        """A u32 register or an immediate."""
        c = self.rng.random()
        if c < 0.75:
            return self.r()
        return str(self.rng.choice([0, 1, 2, 7, 31, 32, 33, 255, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF,
                                    self.rng.getrandbits(32)]))

    def fi(self):
        if self.rng.random() < 0.8:
            return self.f()
        return f"0f{self.rng.choice(F32_IMM):08X}"

    def label(self):
        self.labels += 1
        return f"L{self.k}_{self.labels}"

    def emit(self, s):
        self.lines.append("\t" + s + ";")

    # instruction menus
    def menu(self, n: int, forms) -> tuple[int, str]:
        """One of ``n`` instruction forms: the choice is drawn first, then ``forms()`` writes every
        form (each drawing its operands, in order) and the chosen one is kept, so that the stream
        of draws after it, and so a seed's text, is the same whichever form is taken."""
        c = self.rng.randrange(n)
        every = forms()
        assert len(every) == n
        return c, every[c]

    def alu(self):
        """One instruction that needs no whole warp (safe in divergent code)."""
        g, R = self.rng, self.rng.random()
        r, ri, f, fi = self.r, self.ri, self.f, self.fi
        if R < 0.40:
            op = g.choice(["add.u32", "sub.u32", "mul.lo.u32", "mul.hi.u32", "mul.hi.s32", "and.b32",
                           "or.b32", "xor.b32", "shl.b32", "shr.u32", "shr.s32", "min.s32", "max.u32",
                           "min.u32", "max.s32", "mul24.lo.u32", "mul24.hi.s32", "mul.lo.s32"])
            s = f"{op} {r()}, {r()}, {ri()}"
        elif R < 0.52:
            _, s = self.menu(9, lambda: [
                f"mad.lo.u32 {r()}, {r()}, {ri()}, {r()}", f"not.b32 {r()}, {r()}",
                f"popc.b32 {r()}, {r()}", f"clz.b32 {r()}, {r()}", f"brev.b32 {r()}, {r()}",
                f"bfe.{g.choice(['u32', 's32'])} {r()}, {r()}, {g.randrange(40)}, {g.randrange(40)}",
                f"bfi.b32 {r()}, {r()}, {r()}, {g.randrange(36)}, {g.randrange(36)}",
                f"prmt.b32 {r()}, {r()}, {r()}, {g.getrandbits(16)}",
                f"lop3.b32 {r()}, {r()}, {r()}, {r()}, {g.getrandbits(8)}"])
        elif R < 0.58:
            _, s = self.menu(6, lambda: [
                f"shf.{g.choice('lr')}.{g.choice(['wrap', 'clamp'])}.b32 {r()}, {r()}, {r()}, {ri()}",
                f"dp4a.{g.choice(['u32', 's32'])}.{g.choice(['u32', 's32'])} {r()}, {r()}, {r()}, {r()}",
                f"sad.u32 {r()}, {r()}, {r()}, {r()}", f"neg.s32 {r()}, {r()}", f"abs.s32 {r()}, {r()}",
                f"selp.b32 {r()}, {r()}, {ri()}, {self.p()}"])
        elif R < 0.66:
            t = g.choice(["u32", "s32"])
            comb = g.choice(["", f".and", f".or", f".xor"])
            s = f"setp.{g.choice(CMP_I)}.{t}{comb} {self.p()}, {r()}, {ri()}" + (f", {self.p()}" if comb else "")
        elif R < 0.82:
            def f32_forms():             # the rounding mode is drawn after the choice
                rnd = g.choice(RND)
                return [f"add.{rnd}.f32 {f()}, {f()}, {fi()}", f"sub.{rnd}.f32 {f()}, {f()}, {fi()}",
                        f"mul.{rnd}{g.choice(['', '.ftz', '.sat'])}.f32 {f()}, {f()}, {fi()}",
                        f"fma.{rnd}.f32 {f()}, {f()}, {fi()}, {f()}",
                        f"{g.choice(['min', 'max'])}.f32 {f()}, {f()}, {fi()}",
                        f"{g.choice(['abs', 'neg'])}.f32 {f()}, {f()}",
                        f"setp.{g.choice(CMP_F)}.f32 {self.p()}, {f()}, {fi()}",
                        f"mov.f32 {f()}, {fi()}", f"copysign.f32 {f()}, {f()}, {f()}",
                        f"testp.{g.choice(['finite', 'infinite', 'number', 'notanumber', 'normal', 'subnormal'])}.f32 {self.p()}, {f()}",
                        f"selp.f32 {f()}, {f()}, {fi()}, {self.p()}",
                        g.choice([f"div.rn.f32 {f()}, {f()}, {fi()}", f"sqrt.rn.f32 {f()}, {f()}",
                                  f"rcp.rn.f32 {f()}, {f()}"])]
            _, s = self.menu(12, f32_forms)
        elif R < 0.90:
            _, s = self.menu(9, lambda: [
                f"cvt.rzi.s32.f32 {r()}, {f()}", f"cvt.{g.choice(['rni', 'rmi', 'rpi'])}.f32.f32 {f()}, {f()}",
                f"cvt.{g.choice(RND)}.f32.s32 {f()}, {r()}", f"cvt.{g.choice(RND)}.f32.u32 {f()}, {r()}",
                f"mov.b32 {f()}, {r()}", f"mov.b32 {r()}, {f()}",
                f"cvt.rn.f16x2.f32 {r()}, {f()}, {f()}",
                f"{g.choice(['add', 'mul', 'sub'])}.rn.f16x2 {r()}, {r()}, {r()}",
                f"fma.rn.f16x2 {r()}, {r()}, {r()}, {r()}"])
        else:
            c, s = self.menu(10, lambda: [
                f"add.u64 {self.rd()}, {self.rd()}, {self.rd()}", f"mul.lo.u64 {self.rd()}, {self.rd()}, {self.rd()}",
                f"xor.b64 {self.rd()}, {self.rd()}, {self.rd()}", f"shl.b64 {self.rd()}, {self.rd()}, {r()}",
                f"mul.wide.s32 {self.rd()}, {r()}, {r()}", f"mov.b64 {{{r()}, {r()}}}, {self.rd()}",
                f"{g.choice(['add', 'mul'])}.{g.choice(RND)}.f64 {self.d()}, {self.d()}, {self.d()}",
                f"fma.rn.f64 {self.d()}, {self.d()}, {self.d()}, {self.d()}",
                f"cvt.rn.f32.f64 {f()}, {self.d()}",
                f"mov.f64 {self.d()}, 0d{g.choice(F64_IMM):016X}"])
            if c == 5:                                  # two different destination registers
                a, b = g.sample(range(NR), 2)
                s = f"mov.b64 {{%r{a}, %r{b}}}, {self.rd()}"
        s = _foldable_fields(s)
        if g.random() < 0.15 and not s.startswith("setp"):
            s = f"@{'!' if g.random() < 0.5 else ''}{self.p()} " + s
        self.emit(s)

    def warp_op(self):
        """A collective or a shared-memory / table access: top level only (all threads)."""
        g, r = self.rng, self.r
        c = g.randrange(7)
        if c == 0:
            mode = g.choice(["up", "down", "bfly", "idx"])
            lane = g.choice([str(g.randrange(32)), r()])
            cl = g.choice(["31", "0", "0x1f", str(0x1f | (g.choice([16, 24, 28]) << 8))])
            self.emit(f"shfl.sync.{mode}.b32 {r()}, {r()}, {lane}, {cl}, -1")
        elif c == 1:
            self.emit(g.choice([f"vote.sync.ballot.b32 {r()}, {self.p()}, -1",
                                f"vote.sync.{g.choice(['any', 'all', 'uni'])}.pred {self.p()}, {self.p()}, -1",
                                f"redux.sync.{g.choice(['add.u32', 'min.s32', 'max.u32', 'and.b32', 'or.b32', 'xor.b32'])} {r()}, {r()}, -1"]))
        elif c in (2, 3):
            self.exchange()
        elif c == 4:
            self.emit(f"red.shared.add.u32 [%ts+{THREADS * 16}], {r()}")
            self.reduce_read()
        else:
            self.table()

    def exchange(self):
        """Each thread stores into its own 16-byte shared slot; after a barrier, reads another
        thread's (tid ^ x), possibly with another width."""
        g = self.rng
        w, dst_src = g.choice([("u8", 1), ("s8", 1), ("u16", 1), ("s16", 1), ("b32", 1), ("f32", 2),
                               ("b64", 3), ("v2.b32", 4), ("v4.b32", 5)])
        size = {"u8": 1, "s8": 1, "u16": 2, "s16": 2, "b32": 4, "f32": 4, "b64": 8, "v2.b32": 8, "v4.b32": 16}[w]
        off = g.randrange(0, 16, size)
        val = {1: self.r, 2: self.f, 3: self.rd}.get(dst_src, None)
        if dst_src == 4:
            v = f"{{{self.r()}, {self.r()}}}"
        elif dst_src == 5:
            v = "{" + ", ".join(self.r() for _ in range(4)) + "}"
        else:
            v = val()
        self.emit(f"st.shared.{w} [%tm+{off}], {v}")
        self.emit("bar.sync 0")
        x = g.choice([1, 5, 31, 32, 33, 63, 17])
        self.emit(f"xor.b32 %tx, %me, {x}")
        self.emit(f"and.b32 %tx, %tx, {THREADS - 1}")
        self.emit("shl.b32 %tx, %tx, 4")
        self.emit("add.u32 %tx, %tx, %ts")
        w2, size2 = (w, size) if g.random() < 0.6 else g.choice(
            [("u8", 1), ("s8", 1), ("u16", 2), ("s16", 2), ("b32", 4)])
        off2 = g.randrange(0, 16, size2) if w2 != w else off
        if w2 in ("v2.b32", "v4.b32"):
            n = 2 if w2 == "v2.b32" else 4
            regs = g.sample(range(NR), n)
            dst = "{" + ", ".join(f"%r{i}" for i in regs) + "}"
        else:
            dst = {"f32": self.f, "b64": self.rd}.get(w2, self.r)()
        self.emit(f"ld.shared.{w2} {dst}, [%tx+{off2}]")
        self.emit("bar.sync 0")

    def reduce_read(self):
        self.emit("bar.sync 0")
        self.emit(f"ld.shared.u32 {self.r()}, [%ts+{THREADS * 16}]")
        self.emit("bar.sync 0")

    def table(self):
        """A read of the kernel's .const or .global table at a register-chosen aligned offset, or a
        store/load pair through the thread's global scratch with two widths."""
        g = self.rng
        c = g.random()
        if c < 0.2:
            self.atomic()
            return
        if c < 0.3:                           # the input row: read-only (.nc) or volatile loads
            w, size = g.choice([("b32", 4), ("u16", 2), ("s8", 1), ("b64", 8), ("v2.b32", 8), ("v4.b32", 16)])
            self.emit(f"ld.{g.choice(['global.nc', 'volatile.global', 'global'])}.{w} "
                      f"{self._val(w, dst=True)}, [%ti+{g.randrange(0, 64, size)}]")
            return
        if c < 0.65:
            w, size = g.choice([("u8", 1), ("s16", 2), ("b32", 4), ("b64", 8), ("f32", 4), ("v4.b32", 16)])
            self.emit(f"and.b32 %tx, {self.r()}, {64 - size}")
            self.emit(f"and.b32 %tx, %tx, {~(size - 1) & 0xFFFFFFFF}")
            self.emit("cvt.u64.u32 %tq, %tx")
            space, base = g.choice([("const", f"c{self.k}"), ("global", f"g{self.k}")])
            self.emit(f"mov.u64 %tb, {base}")
            if space == "global":
                self.emit("cvta.global.u64 %tb, %tb")
                space = ""
            self.emit("add.u64 %tq, %tq, %tb")
            dst = ("{" + ", ".join(f"%r{i}" for i in g.sample(range(NR), 4)) + "}" if w == "v4.b32"
                   else {"b64": self.rd, "f32": self.f}.get(w, self.r)())
            self.emit(f"ld{'.' + space if space else ''}.{w} {dst}, [%tq]")
        else:                                 # the thread's own global or local scratch
            space, base = g.choice([("global", "%tg"), ("local", "%tl")])
            w, size = g.choice([("b32", 4), ("b64", 8), ("u16", 2), ("u8", 1), ("f64", 8), ("f32", 4),
                                ("v2.b32", 8), ("v4.b32", 16), ("s16", 2)])
            self.emit(f"st.{space}.{w} [{base}+{g.randrange(0, 32, size)}], {self._val(w)}")
            w2, s2 = g.choice([("u8", 1), ("s8", 1), ("u16", 2), ("s16", 2), ("b32", 4), ("b64", 8),
                               ("v2.b32", 8), ("v4.b32", 16), ("f64", 8)])
            self.emit(f"ld.{space}.{w2} {self._val(w2, dst=True)}, [{base}+{g.randrange(0, 32, s2)}]")

    def atomic(self):
        """An atomic on the thread's own global scratch or shared slot: the value it returns is
        defined (no other thread touches the address)."""
        g = self.rng
        space, base = g.choice([("global", "%tg"), ("shared", "%tm")])
        top = 32 if space == "global" else 16
        op = g.choice(["add.u32", "exch.b32", "and.b32", "or.b32", "xor.b32", "min.s32", "max.u32",
                       "inc.u32", "dec.u32", "cas.b32", "add.f32", "add.u64", "max.s64", "exch.b64"])
        size = 8 if op.endswith("64") else 4
        off = g.randrange(0, top, size)
        dst, src = ((self.f(), self.f()) if op == "add.f32" else
                    (self.rd(), self.rd()) if size == 8 else (self.r(), self.r()))
        extra = f", {self.r()}" if op == "cas.b32" else ""
        self.emit(f"atom.{space}.{op} {dst}, [{base}+{off}], {src}{extra}")

    def _val(self, w, dst=False):
        """A register (or vector of distinct registers) of width ``w``."""
        if w.startswith("v"):
            n = int(w[1])
            return "{" + ", ".join(f"%r{i}" for i in self.rng.sample(range(NR), n)) + "}"
        return {"b64": self.rd, "f64": self.d, "f32": self.f}.get(w, self.r)()

    def branch(self):
        lab = self.label()
        self.emit(f"@{'!' if self.rng.random() < 0.5 else ''}{self.p()} bra {lab}")
        for _ in range(self.rng.randint(1, 4)):
            self.alu()
        self.lines.append(f"{lab}:")

    def loop(self):
        top, end = self.label(), self.label()
        self.emit("mov.u32 %lc, 0")
        self.emit(f"and.b32 %ln, {self.r()}, 3")
        self.lines.append(f"{top}:")
        self.emit("setp.ge.u32 %pl, %lc, %ln")
        self.emit(f"@%pl bra {end}")
        for _ in range(self.rng.randint(1, 5)):
            self.alu() if self.rng.random() < 0.85 else self.branch()
        self.emit("add.u32 %lc, %lc, 1")
        self.emit(f"bra {top}")
        self.lines.append(f"{end}:")


def _foldable_fields(s: str) -> str:
    """Bit fields the interpreter refuses (ptxas folds them two ways: fraglab.ptx.ops_int) moved
    into range, the random draws unchanged (so every other program stays as it was): bfi.b32 at a
    position that is not a multiple of 8 with a length >= 32 gets the ISA's clamped length
    32 - pos; bfe.s32 at a position >= 32 gets position - 32."""
    m = re.fullmatch(r"(bfi\.b32 [^,]+, [^,]+, [^,]+, )(\d+), (\d+)", s)
    if m and int(m[2]) < 32 and int(m[2]) % 8 and int(m[3]) >= 32:
        return f"{m[1]}{m[2]}, {32 - int(m[2])}"
    m = re.fullmatch(r"(bfe\.s32 [^,]+, [^,]+, )(\d+), (\d+)", s)
    if m and int(m[2]) >= 32 and int(m[3]):
        return f"{m[1]}{int(m[2]) - 32}, {m[3]}"
    return s


# ---- programs and modules ----------------------------------------------------------------------

def _prologue(k: int, g: Gen) -> list:
    L = [f"\tld.param.u64 %tin, [p_in];", "\tcvta.to.global.u64 %tin, %tin;",
         "\tld.param.u64 %tout, [p_out];", "\tcvta.to.global.u64 %tout, %tout;",
         "\tmov.u32 %me, %tid.x;", "\tmov.u32 %tc, %ctaid.x;", "\tmov.u32 %tz, 0;",
         f"\tmad.lo.u32 %gt, %tc, {THREADS}, %me;",
         f"\tmul.wide.u32 %tq, %gt, {4 * IN_WORDS};", "\tadd.u64 %tq, %tin, %tq;", "\tmov.u64 %ti, %tq;"]
    L += [f"\tld.global.b32 %r{i}, [%tq+{4 * i}];" for i in range(NR)]
    L += [f"\tld.global.f32 %f{i}, [%tq+{48 + 4 * i}];" for i in range(4)]
    L += [f"\tmov.f32 %f4, 0f{g.rng.choice(F32_IMM):08X};", "\tcvt.rn.f32.s32 %f5, %r0;",
          "\tmov.b64 %rd0, {%r0, %r1};", "\tmov.b64 %rd1, {%r2, %r3};", "\tcvt.u64.u32 %rd2, %r4;",
          "\tmul.wide.s32 %rd3, %r5, %r6;", "\tcvt.rn.f64.s32 %d0, %r7;", "\tcvt.rn.f64.u32 %d1, %r8;",
          "\tsetp.ne.u32 %p0, %r9, 0;", "\tsetp.lt.s32 %p1, %r10, 0;", "\tsetp.gt.u32 %p2, %me, 31;",
          "\tand.b32 %tx, %me, 1;", "\tsetp.eq.u32 %p3, %tx, 1;",
          f"\tmul.wide.u32 %tq, %gt, {4 * OUT_WORDS};", "\tadd.u64 %tg, %tout, %tq;",
          f"\tadd.u64 %tg, %tg, {SCRATCH};",
          "\tst.global.v4.b32 [%tg], {%tz, %tz, %tz, %tz};", "\tst.global.v4.b32 [%tg+16], {%tz, %tz, %tz, %tz};",
          f"\tmov.u64 %tl, lc{k};", "\tst.local.v4.b32 [%tl], {%tz, %tz, %tz, %tz};",
          "\tst.local.v4.b32 [%tl+16], {%tz, %tz, %tz, %tz};",
          f"\tmov.u32 %ts, sm{k};", "\tshl.b32 %tm, %me, 4;", "\tadd.u32 %tm, %tm, %ts;",
          "\tst.shared.v4.b32 [%tm], {%tz, %tz, %tz, %tz};", "\tsetp.eq.u32 %pl, %me, 0;",
          f"\t@%pl st.shared.b32 [%ts+{THREADS * 16}], %tz;", "\tbar.sync 0;"]
    return L


def _epilogue() -> list:
    L = [f"\tmul.wide.u32 %tq, %gt, {4 * OUT_WORDS};", "\tadd.u64 %tq, %tout, %tq;"]
    L += [f"\tst.global.b32 [%tq+{4 * i}], %r{i};" for i in range(NR)]
    L += [f"\tst.global.f32 [%tq+{48 + 4 * i}], %f{i};" for i in range(NF)]
    L += [f"\tst.global.b64 [%tq+{72 + 8 * i}], %rd{i};" for i in range(NRD)]
    L += [f"\tst.global.f64 [%tq+{104 + 8 * i}], %d{i};" for i in range(ND)]
    for i in range(NP):
        L += [f"\tselp.u32 %tx, 1, 0, %p{i};", f"\tst.global.b32 [%tq+{120 + 4 * i}], %tx;"]
    return L + ["\tret;"]


def _table(rng: random.Random) -> str:
    return ", ".join(str(rng.getrandbits(8)) for _ in range(64))


def program(seed: int, k: int) -> str:
    """Kernel ``fz{k}`` of seed ``seed``, with its module-scope tables ``c{k}`` and ``g{k}``."""
    g = Gen(seed, k)
    body = []
    n = g.rng.randint(8, 40)
    for _ in range(n):
        c = g.rng.random()
        if c < 0.6:
            g.alu()
        elif c < 0.8:
            g.warp_op()
        elif c < 0.9:
            g.branch()
        else:
            g.loop()
    body = g.lines
    decl = (f"\t.reg .b32 %r<{NR}>;\n\t.reg .f32 %f<{NF}>;\n\t.reg .b64 %rd<{NRD}>;\n"
            f"\t.reg .f64 %d<{ND}>;\n\t.reg .pred %p<{NP}>;\n"
            "\t.reg .b32 %me, %ts, %tm, %tx, %lc, %ln, %tc, %tz, %gt;\n"
            "\t.reg .b64 %tin, %tout, %tg, %tq, %tb, %tl, %ti;\n\t.reg .pred %pl;\n"
            f"\t.shared .align 16 .b8 sm{k}[{THREADS * 16 + 16}];\n\t.local .align 16 .b8 lc{k}[32];\n")
    return (f".const .align 16 .b8 c{k}[64] = {{{_table(g.rng)}}};\n"
            f".global .align 16 .b8 g{k}[64] = {{{_table(g.rng)}}};\n"
            f".visible .entry fz{k}(.param .u64 p_in, .param .u64 p_out)\n{{\n{decl}"
            + "\n".join(_prologue(k, g) + body + _epilogue()) + "\n}\n")


def module(seeds) -> str:
    return ".version 8.8\n.target sm_80\n.address_size 64\n\n" + "\n".join(
        program(s, k) for k, s in enumerate(seeds))


def inputs(seed: int) -> np.ndarray:
    """The program's input words: random bits, small integers and float patterns."""
    rng = np.random.default_rng(seed)
    n = BLOCKS * THREADS * IN_WORDS
    bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    small = (rng.integers(-8, 9, n).astype(np.int64) & 0xFFFFFFFF).astype(np.uint32)
    floats = np.where(rng.random(n) < 0.5, np.array(F32_IMM, np.uint32)[rng.integers(0, len(F32_IMM), n)],
                      rng.standard_normal(n).astype(np.float32).view(np.uint32))
    pick = rng.random(n)
    return np.where(pick < 0.35, bits, np.where(pick < 0.65, small, floats)).astype(np.uint32)
