"""The accepted-instruction table (``fraglab.ptx.accepted``): it and the handlers agree, every
combination it enumerates is accepted, modifiers the interpreter does not implement are refused at
decode with a message naming them, and the modifiers the handlers now honour (half-precision
.ftz, .relu, .sat, set, slct.ftz, saturating and double-rounding-free cvt, isspacep.const,
atom.add.f32 on global memory, cp.async ignore-src and cache policies) compute what the PTX ISA
says. CPU only."""
from __future__ import annotations

import numpy as np
import pytest

from fraglab import ptx
from fraglab.ptx import accepted
from fraglab.ptx.opset import table
from fraglab.ptx.parse import parse
from ptx_snippets import lane_kernel, run_lanes

HEAD = ".version 8.0\n.target sm_90a\n.address_size 64\n"


def test_table_and_handlers_agree():
    assert set(accepted.FORMS) == set(table())
    for base in table():
        assert accepted.combinations(base), base


def test_every_combination_is_accepted():
    combos = accepted.combinations()
    assert len(combos) > 5000 and len({c.text for c in combos}) == len(combos)
    lines = [c.text + (" f" if c.base == "call" else "") + ";" for c in combos]
    mod = parse(HEAD + ".visible .entry k()\n{\n" + "\n".join(lines) + "\n}\n")
    instrs = mod.kernels["k"].instrs
    assert [i.opcode for i in instrs] == [c.text for c in combos]
    for c, ins in zip(combos, instrs):
        assert accepted.check(ins) is None, (c.text, accepted.check(ins))
        assert accepted.split(c.text) == (c.base, c.mods, c.types)
        assert not any(m in accepted.PTX_TYPES for m in c.mods)


def test_hints_are_accepted_but_not_multiplied_out():
    texts = {c.text for c in accepted.combinations("ld")}
    assert "ld.global.nc.v4.f32" in texts and "ld.acquire.gpu.shared.u32" in texts
    assert not any("L1::" in t or "L2::" in t for t in texts)
    for op in ("ld.global.nc.L1::no_allocate.v4.f32", "ld.global.L1::evict_last.L2::cache_hint.u32",
               "ld.global.cg.L2::128B.v2.u64", "st.global.cs.L2::cache_hint.v4.b32",
               "cp.async.cg.shared.global.L2::cache_hint.L2::256B", "ld.weak.shared::cta.u8",
               "atom.global.add.L2::cache_hint.u32", "bra.uni", "ld.volatile.global.L2::64B.u32"):
        assert accepted.check(op) is None, (op, accepted.check(op))
    hints = {g.name for c in accepted.combinations("ld") for g in c.hints}
    assert {"cop", "l1", "l2", "hint", "pf"} <= hints
    assert {g.name for c in accepted.combinations() for g in c.hints} <= set(accepted.HINTS)


#: Opcodes the interpreter refuses, and words its refusal names: one a line, the opcode first.
REFUSED = [tuple(line.split(None, 1)) for line in """
add.cc.u32                            .cc (carry chains)
mad.lo.cc.u32                         .cc
max.xorsign.abs.f32                   .xorsign
min.relu.u32                          .relu
fma.rn.oob.f16                        .oob
cvt.rna.satfinite.tf32.f32            .satfinite
cvt.rn.satfinite.e4m3x2.f32           .satfinite
cvt.rn.relu.satfinite.f16x2.f32       .satfinite
cvt.rs.relu.f16x2.f32                 .rs
cvt.rn.tf32.f32                       .rn
cvt.rni.bf16.bf16                     .bf16.bf16
add.rz.f16                            .rz
add.ftz.bf16                          .ftz
add.sat.u32                           .sat
ex2.approx.ftz.f16                    .ftz
tanh.approx.ftz.f32                   .ftz
mul.wide.s64                          .wide
setp.lo.s32                           .lo
lop3.or.b32                           .or
add.u16x2                             .u16x2
setp.lt.f16x2                         .f16x2
add.f32.f16                           .f32.f16
mma.sp.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32  .sp (sparse
mma.sync.aligned.m16n8k32.row.col.kind::f8f6f4.f32.e4m3.e4m3.f32  .kind::f8f6f4
wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32.satfinite  .satfinite
wmma.mma.sync.aligned.row.row.m8n8k4.f64.f64.f64.f64.rz  .rz
wgmma.mma_async.sp.sync.aligned.m64n64k32.f32.f16.f16  .sp
wgmma.mma_async.sync.aligned.m64n64k16.f16.bf16.bf16  .f16.bf16.bf16
ld.global.v8.f32                      .v8
ld.mmio.relaxed.sys.global.u32        .mmio
ld.global.nc.v4.f64                   .v4
st.async.shared::cluster.b32          .async
ld.param::entry.u32                   .param::entry
cvta.param.u64                        .param
cvta.shared.u32                       .u32
isspacep.param                        .param
atom.global.add.noftz.f16             .noftz
red.global.add.noftz.bf16x2           .noftz
atom.global.v2.f32.add                .v2
redux.sync.min.abs.NaN.f32            .abs
cp.async.bulk.tensor.2d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes  .im2col
cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster  .multicast::cluster
cp.async.bulk.global.shared::cta.bulk_group.cp_mask  .cp_mask
cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32  .reduce
mbarrier.arrive.noComplete.shared.b64  .noComplete
mbarrier.pending_count.b64            .pending_count
barrier.cluster.arrive                .cluster
bar.cta.arrive                        .cta.arrive
shfl.up.b32                           needs .sync
vote.all.pred                         needs .sync
fma.f32                               needs one of .rn
brx.idx                               indirect branches
vabsdiff.u32.u32.u32                  video instructions
tex.2d.v4.f32.f32                     textures
prefetch.param.tensormap              .param
# what the H100's JIT rejected in the 2026-11-27 differential record (and ptxas 13.0 too)
cvt.sat.s32.s16                       illegal PTX
cvt.sat.u32.u32                       illegal PTX
cvt.sat.s64.u32                       illegal PTX
cvt.rn.sat.bf16.f32                   Illegal modifier '.sat'
cvt.rz.sat.bf16.u8                    .bf16 operand
cvt.rmi.sat.s32.bf16                  .bf16 operand
cvt.sat.f64.bf16                      .bf16 operand
cvt.ftz.sat.f32.bf16                  .bf16 operand
st.param.v2.b32                       vector store to a call parameter
st.param.v4.f32                       call parameter
""".splitlines()
           if line and not line.startswith("#")]


@pytest.mark.parametrize("opcode,names", REFUSED, ids=[r[0] for r in REFUSED])
def test_unimplemented_modifiers_are_refused_by_name(opcode, names):
    why = accepted.check(opcode)
    assert why is not None and names in why, (opcode, why)
    assert why.startswith(opcode.split(".")[0] + ":")


def test_cvt_sat_only_where_the_hardware_takes_it():
    """Integer -> integer .sat exactly where the destination cannot hold every source value
    (ptxas and the H100's JIT reject the others); no .sat with a .bf16 operand; the rest of the
    .sat forms stay."""
    ints = "u8 u16 u32 u64 s8 s16 s32 s64".split()
    rng = {t: (0, 2 ** int(t[1:]) - 1) if t[0] == "u" else (-2 ** (int(t[1:]) - 1), 2 ** (int(t[1:]) - 1) - 1)
           for t in ints}
    for d in ints:
        for a in ints:
            can_overflow = rng[a][0] < rng[d][0] or rng[a][1] > rng[d][1]
            assert accepted.accepts(f"cvt.sat.{d}.{a}") == can_overflow, (d, a)
            assert accepted.accepts(f"cvt.{d}.{a}")
    texts = {c.text for c in accepted.combinations("cvt")}
    assert not any(".sat." in t and "bf16" in t for t in texts)
    for op in ("cvt.rn.sat.f16.f32", "cvt.rzi.sat.s8.f32", "cvt.rni.sat.u32.f64", "cvt.sat.f32.f16",
               "cvt.rn.sat.f32.s32", "cvt.ftz.sat.f32.f32", "cvt.rn.bf16.f32", "cvt.ftz.f32.bf16",
               "cvt.rzi.s8.bf16", "cvt.rn.bf16.u64", "st.param.b32", "st.global.v4.f32"):
        assert op in texts or accepted.accepts(op), op
    assert not any(t.startswith("st.param.v") for t in {c.text for c in accepted.combinations("st")})


def test_refused_instruction_raises_at_execution_naming_modifier_and_line():
    text = HEAD + '''.visible .entry k(.param .u64 out_p)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out_p];
    mov.u32 %r1, 7;
    add.cc.u32 %r2, %r1, %r1;
    st.global.u32 [%rd1], %r2;
    ret;
}'''
    prog = ptx.Program(text)
    assert list(ptx.unsupported_opcodes(prog)) == ["add.cc.u32"]
    assert ".cc (carry chains)" in ptx.unsupported_opcodes(prog)["add.cc.u32"]
    with pytest.raises(ptx.UnsupportedInstruction) as e:
        ptx.launch(prog, "k", 1, 32, (np.zeros(32, np.uint32),))
    assert "add.cc.u32" in str(e.value) and ".cc" in str(e.value) and "PTX line 10" in str(e.value)


def test_check_is_cached_and_cheap():
    accepted.check("add.rn.f32")
    assert accepted._CACHE["add.rn.f32"] is None
    assert accepted.check("add.cc.u32") is accepted.check("add.cc.u32")


# ---- the modifiers the handlers now honour -------------------------------------------------------

def run(body: str, *cols, decl: str = "") -> np.ndarray:
    """One warp runs ``body``; lane i has a, b, c = cols[k][i] as 64-bit words in %rd10..12, their
    low 32 bits in %r10..12 (and as %f10..12), low 16 in %h10..12, the f64 view in %fd10..12;
    the body leaves its result in %rd20 (64 bits), which comes back per lane."""
    ins = np.zeros((32, 3), np.uint64)
    for k, col in enumerate(cols):
        ins[:, k] = np.broadcast_to(np.asarray(col).astype(np.uint64), 32)
    views = "\n".join(f"    ld.global.u64 %rd1{k}, [%rd4+{8 * k}];\n    cvt.u32.u64 %r1{k}, %rd1{k};\n"
                      f"    cvt.u16.u32 %h1{k}, %r1{k};\n    mov.b32 %f1{k}, %r1{k};\n"
                      f"    mov.b64 %fd1{k}, %rd1{k};" for k in range(3))
    regs = ("    .reg .b16 %h<30>;\n    .reg .b32 %r<30>;\n    .reg .b64 %rd<30>;\n"
            "    .reg .f32 %f<30>;\n    .reg .f64 %fd<30>;\n    .reg .pred %p<8>;")
    prog = ptx.Program(lane_kernel(HEAD + decl + "\n", regs,
                                   f"{views}\n    mov.u64 %rd20, 0;\n{body}", "%rd20", "u64", n_in=3))
    assert not ptx.unsupported_opcodes(prog), ptx.unsupported_opcodes(prog)
    return run_lanes(prog, ins)


def f16(*v):
    return np.array(v, np.float16).view(np.uint16).astype(np.uint64)


def u16(out):
    return (out & np.uint64(0xFFFF)).astype(np.uint16)


SUB16 = 2.0 ** -20                     # an f16 subnormal (smallest normal: 2^-14)


def test_half_ftz_flushes_inputs_and_results():
    a = f16(SUB16, -SUB16, 1.0, 2.0 ** -13)
    b = f16(0.0, 0.0, 0.0, -2.0 ** -13 + 2.0 ** -20)
    for op, want_ftz, want in (
            ("add", [0.0, 0.0, 1.0, 0.0], [SUB16, -SUB16, 1.0, 2.0 ** -20]),
            ("mul", [0.0, -0.0, 0.0, -0.0], None)):
        a4, b4 = np.resize(a, 32), np.resize(b, 32)
        r = u16(run(f"    {op}.ftz.f16 %h20, %h10, %h11;\n    cvt.u64.u16 %rd20, %h20;", a4, b4))
        got = r.view(np.float16)[:4].astype(np.float64)
        assert np.array_equal(got, want_ftz) and \
            np.array_equal(np.signbit(got), np.signbit(want_ftz)), (op, got)
        if want is not None:
            r = u16(run(f"    {op}.f16 %h20, %h10, %h11;\n    cvt.u64.u16 %rd20, %h20;", a4, b4))
            assert np.array_equal(r.view(np.float16)[:4].astype(np.float64), want)
    x = np.resize(f16(SUB16, -SUB16, 3.0, -0.0), 32)
    r = u16(run("    neg.ftz.f16 %h20, %h10;\n    cvt.u64.u16 %rd20, %h20;", x))
    assert list(r[:4]) == [0x8000, 0x0000, int(f16(-3.0)[0]), 0x0000]
    r = run("    setp.lt.ftz.f16 %p1, %h10, %h11;\n    selp.u64 %rd20, 1, 0, %p1;", x, f16(0.0))
    assert list(r[:2]) == [0, 0]
    r = run("    setp.lt.f16 %p1, %h10, %h11;\n    selp.u64 %rd20, 1, 0, %p1;", x, f16(0.0))
    assert list(r[:2]) == [0, 1]


def test_relu_and_saturating_integer_forms():
    a = np.array([5, -5, -7, 2**31 - 1] * 8, np.int64).astype(np.uint32)
    b = np.array([-3, -9, 4, 2**31 - 1] * 8, np.int64).astype(np.uint32)
    c = np.array([0, 0, 0, 2**31 - 1] * 8, np.int64).astype(np.uint32)
    i32 = lambda out: (out & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.int32)[:4]  # noqa: E731
    r = run("    min.relu.s32 %r20, %r10, %r11;\n    cvt.u64.u32 %rd20, %r20;", a, b)
    assert list(i32(r)) == [0, 0, 0, 2**31 - 1]
    r = run("    max.relu.s32 %r20, %r10, %r11;\n    cvt.u64.u32 %rd20, %r20;", a, b)
    assert list(i32(r)) == [5, 0, 4, 2**31 - 1]
    r = run("    mad.hi.sat.s32 %r20, %r10, %r11, %r12;\n    cvt.u64.u32 %rd20, %r20;", a, b, c)
    assert list(i32(r)) == [-1, 0, -1, 2**31 - 1]         # 0x3FFFFFFF + 2^31 - 1 saturates
    big = np.array([0x7FFFFF, -0x800000, 3, 0x7FFFFF] * 8, np.int64).astype(np.uint32)
    r = run("    mad24.hi.sat.s32 %r20, %r10, %r11, %r12;\n    cvt.u64.u32 %rd20, %r20;",
            big, big, c)
    want = [(0x7FFFFF * 0x7FFFFF) >> 16, (0x800000 * 0x800000) >> 16, 0, 2**31 - 1]
    assert list(i32(r)) == want


def test_set_and_slct_ftz():
    a = np.array([1, 5, 0xFFFFFFFF, 7] * 8, np.uint32)
    b = np.array([2, 5, 1, 9] * 8, np.uint32)
    r = run("    set.lt.u32.u32 %r20, %r10, %r11;\n    cvt.u64.u32 %rd20, %r20;", a, b)
    assert list(r[:4]) == [0xFFFFFFFF, 0, 0, 0xFFFFFFFF]
    r = run("    set.lt.u32.s32 %r20, %r10, %r11;\n    cvt.u64.u32 %rd20, %r20;", a, b)
    assert list(r[:4]) == [0xFFFFFFFF, 0, 0xFFFFFFFF, 0xFFFFFFFF]
    r = run("    set.le.f32.u32 %f20, %r10, %r11;\n    mov.b32 %r20, %f20;\n"
            "    cvt.u64.u32 %rd20, %r20;", a, b)
    assert list(np.asarray(r[:4], np.uint32).view(np.float32)) == [1.0, 1.0, 0.0, 1.0]
    r = run("    setp.ne.u32 %p2, %r12, 0;\n    set.eq.and.s32.u32 %r20, %r10, %r11, %p2;\n"
            "    cvt.u64.u32 %rd20, %r20;", a, a, np.array([1, 0, 1, 1] * 8))
    assert list(r[:4]) == [0xFFFFFFFF, 0, 0xFFFFFFFF, 0xFFFFFFFF]
    neg_sub = np.array([-1e-40, 1e-40, -1.0, -0.0] * 8, np.float32).view(np.uint32)
    for mod, want in (("ftz.", [1, 1, 2, 1]), ("", [2, 1, 2, 1])):
        r = run(f"    slct.{mod}u32.f32 %r20, 1, 2, %f12;\n    cvt.u64.u32 %rd20, %r20;", 0, 0, neg_sub)
        assert list(r[:4]) == want, mod


def test_cvt_saturates_64_bit_integers_exactly():
    big = np.array([2**63 + 5, 2**64 - 1, 2**63 - 1, 12345] * 8, np.uint64)
    r = run("    cvt.sat.s64.u64 %rd20, %rd10;", big)
    assert list(r[:4]) == [2**63 - 1, 2**63 - 1, 2**63 - 1, 12345]
    r = run("    cvt.sat.u64.s64 %rd20, %rd10;", big)
    assert list(r[:4]) == [0, 0, 2**63 - 1, 12345]
    r = run("    cvt.sat.u32.s64 %r20, %rd10;\n    cvt.u64.u32 %rd20, %r20;", big)
    assert list(r[:4]) == [0, 0, 2**32 - 1, 12345]
    r = run("    cvt.sat.s8.s32 %r20, %r10;\n    cvt.u64.u32 %rd20, %r20;",
            np.array([300, -300 & 0xFFFFFFFF, 5, 0xFFFFFFFF] * 8, np.uint64))
    assert list((r[:4] & np.uint64(0xFF)).astype(np.uint8).view(np.int8)) == [127, -128, 5, -1]


def test_cvt_float_to_int_ftz_and_bf16_without_double_rounding():
    x = np.array([-1e-40, 1e-40, -1.5, 2.5] * 8, np.float32).view(np.uint32)
    i32 = lambda out: list((out[:4] & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.int32))  # noqa: E731
    assert i32(run("    cvt.rmi.ftz.s32.f32 %r20, %f10;\n    cvt.u64.u32 %rd20, %r20;", x)) == [0, 0, -2, 2]
    assert i32(run("    cvt.rmi.s32.f32 %r20, %f10;\n    cvt.u64.u32 %rd20, %r20;", x)) == [-1, 0, -2, 2]
    assert i32(run("    cvt.rpi.ftz.s32.f32 %r20, %f10;\n    cvt.u64.u32 %rd20, %r20;", x)) == [0, 0, -1, 3]
    mid = 1.0 + 2.0 ** -8                      # halfway between the bf16 values 1 and 1 + 2^-7
    d = np.array([mid + 2.0 ** -40, mid - 2.0 ** -40, 1.0 + 2.0 ** -7 - 2.0 ** -40, -mid] * 8)
    for mode, want in (("rn", [0x3F81, 0x3F80, 0x3F81, 0xBF80]),
                       ("rz", [0x3F80, 0x3F80, 0x3F80, 0xBF80]),
                       ("rp", [0x3F81, 0x3F81, 0x3F81, 0xBF80])):
        r = u16(run(f"    cvt.{mode}.bf16.f64 %h20, %fd10;\n    cvt.u64.u16 %rd20, %h20;", d.view(np.uint64)))
        assert list(r[:4]) == want, mode
    n = np.array([2**24 + 2**16 + 1, 2**24 + 2**16, -(2**24 + 2**16 + 1), 7] * 8, np.int64)
    r = u16(run("    cvt.rn.bf16.s32 %h20, %r10;\n    cvt.u64.u16 %rd20, %h20;", n.astype(np.uint32)))
    assert list(r[:4]) == [0x4B81, 0x4B80, 0xCB81, 0x40E0]
    r = u16(run("    cvt.rn.bf16.s64 %h20, %rd10;\n    cvt.u64.u16 %rd20, %h20;", n.view(np.uint64)))
    assert list(r[:4]) == [0x4B81, 0x4B80, 0xCB81, 0x40E0]


def test_rcp_and_rsqrt_ftz_on_f64():
    x = np.array([1e308, 4.0, 1e-310, 2.0] * 8).view(np.uint64)
    r = run("    rcp.approx.ftz.f64 %fd20, %fd10;\n    mov.b64 %rd20, %fd20;", x).view(np.float64)
    assert list(r[:2]) == [0.0, 0.25] and np.isinf(r[2])
    r = run("    rcp.rn.f64 %fd20, %fd10;\n    mov.b64 %rd20, %fd20;", x).view(np.float64)
    assert r[0] == np.float64(1.0) / np.float64(1e308)


def test_isspacep_knows_const_and_shared_cta():
    decl = ".const .align 4 .b32 cst[4];\n"
    body = '''    .shared .align 4 .b32 sm[4];
    mov.u64 %rd21, cst;
    cvta.const.u64 %rd22, %rd21;
    mov.u64 %rd23, sm;
    cvta.shared::cta.u64 %rd24, %rd23;
    isspacep.const %p1, %rd22;
    isspacep.global %p2, %rd22;
    isspacep.shared::cta %p3, %rd24;
    isspacep.global %p4, %rd24;
    selp.u64 %rd25, 1, 0, %p1;
    selp.u64 %rd26, 2, 0, %p2;
    selp.u64 %rd27, 4, 0, %p3;
    selp.u64 %rd28, 8, 0, %p4;
    add.s64 %rd20, %rd25, %rd26;
    add.s64 %rd20, %rd20, %rd27;
    add.s64 %rd20, %rd20, %rd28;'''
    r = run(body, decl=decl)
    assert (r == 1 + 4).all()


def test_atom_add_f32_flushes_on_global_but_not_on_shared():
    sub = np.float32(1e-39)
    tiny = np.zeros(32, np.uint64)
    tiny[0] = np.array([sub], np.float32).view(np.uint32)[0]
    body = '''    .shared .align 4 .f32 acc;
    setp.eq.u32 %p1, %r1, 0;
    @%p1 st.shared.f32 [acc], 0f00000000;
    bar.warp.sync -1;
    @%p1 atom.shared.add.f32 %f20, [acc], %f10;
    bar.warp.sync -1;
    ld.shared.f32 %f21, [acc];
    @%p1 st.global.f32 [%rd4], 0f00000000;
    @%p1 atom.global.add.f32 %f22, [%rd4], %f10;
    ld.global.f32 %f23, [%rd4];
    mov.b32 %r20, %f21;
    mov.b32 %r21, %f23;
    cvt.u64.u32 %rd20, %r20;
    cvt.u64.u32 %rd21, %r21;
    shl.b64 %rd21, %rd21, 32;
    or.b64 %rd20, %rd20, %rd21;'''
    r = run(body, tiny)[0]
    shared, glob = (np.array([r & np.uint64(0xFFFFFFFF), r >> np.uint64(32)], np.uint64)
                    .astype(np.uint32).view(np.float32))
    assert shared == sub and glob == 0.0


def test_cp_async_ignore_src_and_cache_policy_operands():
    body = '''    .shared .align 16 .b8 buf[1024];
    mov.u32 %r20, buf;
    mul.lo.u32 %r21, %r1, 16;
    add.u32 %r22, %r20, %r21;
    setp.eq.u32 %p1, %r12, 1;
    createpolicy.fractional.L2::evict_last.b64 %rd21;
    mov.u64 %rd22, 3;
    cp.async.ca.shared.global [%r22], [%rd4], 8, %p1;
    cp.async.wait_all;
    ld.shared.u64 %rd23, [%r22];
    cp.async.ca.shared.global.L2::cache_hint [%r22], [%rd4], 8, %rd22;
    cp.async.wait_all;
    ld.shared.u64 %rd24, [%r22];
    cp.async.ca.shared.global.L2::cache_hint [%r22], [%rd4], 8, 4, %rd21;
    cp.async.wait_all;
    ld.shared.u64 %rd25, [%r22];
    xor.b64 %rd20, %rd23, %rd24;
    add.s64 %rd20, %rd20, %rd25;'''
    a = (np.arange(1, 33, dtype=np.uint64) << np.uint64(36)) + np.uint64(1000)
    ignore = np.array([1, 0] * 16)
    r = run(body, a, a, ignore)
    # ignore-src copies zeros: (0 ^ a) + the 4 low bytes of a; else (a ^ a) + the same: a policy
    # operand taken for a src-size (3) would have copied 3 bytes
    low = a & np.uint64(0xFFFFFFFF)
    assert list(r[:4]) == [a[0] + low[0], low[1], a[2] + low[2], low[3]]
