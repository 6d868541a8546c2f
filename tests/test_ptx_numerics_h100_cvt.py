"""Bit patterns recorded on an H100 (the differential record of 2026-11-27,
``tests/data/ptx_differential.npz``), asserted directly on the interpreter: conversions (NaN
payloads, .ftz), integer division by zero, 64-bit bfe/bfi with position or length past 255,
atom/red.add NaN results, and the report of a read-only load of data the launch wrote. Each
expected value below is the H100's output for those inputs. CPU only."""
from __future__ import annotations

import numpy as np
import pytest

from fraglab import ptx
from ptx_snippets import lane_kernel, run_lanes

HEAD = ".version 8.0\n.target sm_90\n.address_size 64\n"
REG = {1: "b16", 2: "b16", 4: "b32", 8: "b64"}          # 8-bit values live in 16-bit registers
WIDTH = {"8": 1, "16": 2, "32": 4, "64": 8}


def _width(t: str) -> int:
    return WIDTH[t.lstrip("bfsu").replace("tf", "")] if t != "tf32" else 4


def one(op: str, dst: str, srcs: list, *values) -> int:
    """Run ``op d, a, b, ...`` on one warp, every lane with the same operands `values` (bit
    patterns of the types `srcs`); the destination's bits (type `dst`) as an int."""
    dw = _width(dst)
    ops = ", ".join(f"%s{i}" for i in range(len(srcs)))
    regs = f"    .reg .b32 %r<4>;\n    .reg .b64 %rd<8>;\n    .reg .{REG[dw]} %d0;"
    text = lane_kernel(HEAD, regs, f"    {op} %d0, {ops};", "%d0", REG[dw],
                       srcs=[REG[_width(t)] for t in srcs])
    ins = np.zeros((32, len(srcs)), np.uint64)
    for i, v in enumerate(values):
        ins[:, i] = np.uint64(v)
    out = run_lanes(ptx.Program(text), ins)
    assert (out == out[0]).all()
    return int(out[0]) & ((1 << (8 * max(dw, 2))) - 1)


CVT = [  # (opcode, destination, source, input bits, H100 output bits)
    # f32 -> f32 and bf16 -> f32 without .ftz are moves: an sNaN stays signalling
    ("cvt.f32.f32", "f32", "f32", 0x7FA00003, 0x7FA00003),
    ("cvt.f32.bf16", "f32", "bf16", 0x7F81, 0x7F810000),
    # with .ftz the canonical NaN
    ("cvt.ftz.f32.f32", "f32", "f32", 0x7FA00003, 0x7FFFFFFF),
    ("cvt.ftz.f32.bf16", "f32", "bf16", 0x7F81, 0x7FFFFFFF),
    ("cvt.ftz.f64.f32", "f64", "f32", 0x7FC00005, 0x7FFFFFFFE0000000),
    ("cvt.f64.f32", "f64", "f32", 0x7FC00005, 0x7FF80000A0000000),        # payload kept
    ("cvt.f64.f32", "f64", "f32", 0x7F800001, 0x7FF8000020000000),        # quieted
    # f64 -> f16 / bf16: sign and top payload bits, quieted (every rounding mode)
    ("cvt.rn.f16.f64", "f16", "f64", 0xFFF2000000000001, 0xFE80),
    ("cvt.rm.f16.f64", "f16", "f64", 0x7FF8000000000000, 0x7E00),
    ("cvt.rz.bf16.f64", "bf16", "f64", 0x7FF4000000000003, 0x7FE0),
    ("cvt.rm.bf16.f64", "bf16", "f64", 0x7FF8000000000000, 0x7FC0),
    ("cvt.rmi.f16.f16", "f16", "f16", 0x7C01, 0x7FFF),
    ("cvt.rz.tf32.f32", "tf32", "f32", 0x7FA00003, 0x7FFFE000),
    ("cvt.rna.tf32.f32", "tf32", "f32", 0x7FA00003, 0x7FA00000),
    # .ftz on f16.f32 leaves f32 subnormal inputs alone (unlike the ISA's text)
    ("cvt.rm.ftz.f16.f32", "f16", "f32", 0x80000001, 0x8001),
    ("cvt.rp.ftz.f16.f32", "f16", "f32", 0x00000001, 0x0001),
    # f64 -> f32 .ftz: flushed unless 24-bit rounding (unbounded exponent) reaches 2^-126
    ("cvt.rn.ftz.f32.f64", "f32", "f64", 0x380FFFFFE0000000, 0x00000000),
    ("cvt.rn.f32.f64", "f32", "f64", 0x380FFFFFE0000000, 0x00800000),
    ("cvt.rp.ftz.f32.f64", "f32", "f64", 0x380FFFFFE0000001, 0x00800000),
    ("cvt.rp.ftz.f32.f64", "f32", "f64", 0x380FFFFFDFFFFFFF, 0x00000000),
    # float -> integer of a NaN: from f64 1 << (n - 1) at every width; from f32/f16 0 below 64 bits
    ("cvt.rzi.s32.f64", "s32", "f64", 0x7FF8000000000000, 0x80000000),
    ("cvt.rni.u8.f64", "u8", "f64", 0x7FF8000000000000, 0x0080),
    ("cvt.rni.s8.f64", "s8", "f64", 0x7FF8000000000000, 0xFF80),           # sign-extended to 16 bits
    ("cvt.rzi.sat.u16.f64", "u16", "f64", 0x7FF8000000000000, 0x8000),
    ("cvt.rzi.s32.f32", "s32", "f32", 0x7FC00000, 0x00000000),
    ("cvt.rzi.u32.f16", "u32", "f16", 0x7E00, 0x00000000),
    ("cvt.rzi.s64.f32", "s64", "f32", 0x7FC00000, 0x8000000000000000),
]


@pytest.mark.parametrize("op,dst,src,x,want", CVT, ids=[f"{c[0]}:{c[3]:#x}" for c in CVT])
def test_cvt_bits_as_recorded_on_an_h100(op, dst, src, x, want):
    got = one(op, dst, [src], x)
    assert got == want, f"{op} {x:#x}: got {got:#x}, the H100 gave {want:#x}"


INT = [
    # division by zero: all ones (the ISA leaves it unspecified)
    ("rem.u32", "u32", ["u32", "u32"], (7, 0), 0xFFFFFFFF),
    ("rem.s64", "s64", ["s64", "s64"], (0x123456789ABCDEF0, 0), 0xFFFFFFFFFFFFFFFF),
    ("rem.s16", "s16", ["s16", "s16"], (0x1F, 0), 0xFFFF),
    ("div.s16", "s16", ["s16", "s16"], (0x1F, 0), 0xFFFF),
    # 64-bit bfe/bfi: position and length not reduced mod 256; 32-bit: reduced (the ISA's rule)
    ("bfe.u64", "u64", ["u64", "u32", "u32"], (0xFFFFFFFFFFFFFFFF, 1, 0x100), 0x7FFFFFFFFFFFFFFF),
    ("bfe.s64", "s64", ["s64", "u32", "u32"], (0xFFFFFFFFFFFFFFFF, 0x100, 1), 0xFFFFFFFFFFFFFFFF),
    ("bfe.u32", "u32", ["u32", "u32", "u32"], (0xFFFFFFFF, 0, 0x100), 0),
    ("bfe.u32", "u32", ["u32", "u32", "u32"], (0xFFFFFFFF, 0x100, 8), 0xFF),
    ("bfi.b64", "b64", ["b64", "b64", "u32", "u32"], (0xFFFFFFFFFFFFFFFF, 0, 7, 0x100), 0xFFFFFFFFFFFFFF80),
    ("bfi.b64", "b64", ["b64", "b64", "u32", "u32"], (0xFFFFFFFFFFFFFFFF, 0, 0x100, 7), 0),
    ("bfi.b32", "b32", ["b32", "b32", "u32", "u32"], (0xFFFFFFFF, 0, 7, 0x100), 0),
]


@pytest.mark.parametrize("op,dst,srcs,xs,want", INT, ids=[f"{c[0]}:{','.join(map(hex, c[3]))}" for c in INT])
def test_integer_bits_as_recorded_on_an_h100(op, dst, srcs, xs, want):
    got = one(op, dst, srcs, *xs)
    assert got == want, f"{op} {[hex(x) for x in xs]}: got {got:#x}, the H100 gave {want:#x}"


def atomic(op: str, t: str, old: int, b: int) -> tuple[int, int]:
    """``op`` on a word holding `old` with operand `b` (lane 0 only): (returned value, the
    word afterwards); `op` names its space (.global or .shared) or none (generic: global)."""
    w = _width(t)
    r = REG[w]
    space = "shared" if ".shared" in op else "global"
    red = op.startswith("red")
    call = f"{op} [%rd4], %v1;" if red else f"{op} %v2, [%rd4], %v1;"
    text = HEAD + f""".visible .entry k(.param .u64 out_p, .param .u64 in_p)
{{
    .shared .align 8 .b8 sm[8];
    .reg .pred %p;
    .reg .b32 %r<4>;
    .reg .b64 %rd<8>;
    .reg .{r} %v<4>;
    ld.param.u64 %rd1, [out_p];
    ld.param.u64 %rd2, [in_p];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    mov.u32 %r1, %laneid;
    setp.ne.u32 %p, %r1, 0;
    @%p bra DONE;
    ld.global.{r} %v0, [%rd2];
    ld.global.{r} %v1, [%rd2+8];
    mov.{r} %v2, 0;
    {"mov.u64 %rd4, sm;" if space == "shared" else "add.s64 %rd4, %rd1, 16;"}
    st.{space}.{r} [%rd4], %v0;
    {call}
    ld.{space}.{r} %v3, [%rd4];
    st.global.{r} [%rd1], %v2;
    st.global.{r} [%rd1+8], %v3;
DONE:
    ret;
}}"""
    out = np.zeros(3, np.uint64)
    ptx.launch(ptx.Program(text), "k", 1, 32, (out, np.array([old, b], np.uint64)))
    mask = (1 << (8 * w)) - 1
    return int(out[0]) & mask, int(out[1]) & mask


ATOM = [  # (opcode, type, old, operand, the word afterwards on the H100)
    ("atom.global.add.f32", "f32", 0x7FA00003, 0x40200000, 0x7FFFFFFF),
    ("atom.shared.add.f32", "f32", 0x7FA00003, 0x40200000, 0x7FFFFFFF),
    ("atom.global.add.f32", "f32", 0x00000000, 0xFFC00000, 0x7FFFFFFF),
    ("red.shared.add.f32", "f32", 0x00000000, 0x7F800001, 0x7FFFFFFF),
    # f64 on global memory: the NaN operand's bits (the added one's if both are NaN), unquieted
    ("atom.global.add.f64", "f64", 0x7FF4000000000003, 0x4340000000000001, 0x7FF4000000000003),
    ("atom.global.add.f64", "f64", 0x3FEFFFFFFFFFFFFF, 0x7FF0000000000001, 0x7FF0000000000001),
    ("atom.global.add.f64", "f64", 0x7FF4000000000003, 0x7FF8000000000005, 0x7FF8000000000005),
    ("red.global.add.f64", "f64", 0xFFF2000000000001, 0x7FF4000000000003, 0x7FF4000000000003),
    ("atom.add.f64", "f64", 0x0000000000000000, 0x7FF4000000000003, 0x7FF4000000000003),
    # f64 on shared memory: quieted, the old value's first
    ("atom.shared.add.f64", "f64", 0x0000000000000000, 0x7FF0000000000001, 0x7FF8000000000001),
    ("atom.shared.add.f64", "f64", 0x7FF4000000000003, 0x7FF8000000000005, 0x7FFC000000000003),
]


@pytest.mark.parametrize("op,t,old,b,want", ATOM, ids=[f"{c[0]}:{c[2]:#x}+{c[3]:#x}" for c in ATOM])
def test_atomic_add_nan_bits_as_recorded_on_an_h100(op, t, old, b, want):
    returned, after = atomic(op, t, old, b)
    assert after == want, f"{op} {old:#x} + {b:#x}: got {after:#x}, the H100 gave {want:#x}"
    if not op.startswith("red"):
        assert returned == old


def _nc_kernel(store_first: bool) -> str:
    return HEAD + f""".visible .entry k(.param .u64 a_p, .param .u64 b_p)
{{
    .reg .b32 %r<4>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [a_p];
    ld.param.u64 %rd2, [b_p];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd1, %rd3;
    add.s64 %rd5, %rd2, %rd3;
    {"st.global.u32 [%rd4], %r1;" if store_first else ""}
    ld.global.nc.u32 %r2, [%rd4];
    add.u32 %r2, %r2, 1;
    st.global.u32 [%rd5], %r2;
    ret;
}}"""


def test_read_only_load_of_data_the_launch_wrote_is_reported():
    """ld.global.nc of bytes the kernel stored is undefined (the data must stay read-only for
    the kernel's lifetime): the first H100 record, whose kernels staged their inputs with
    st.global and read them back with ld.global.nc, got zeros (the old bytes) for them."""
    a, b = np.arange(32, dtype=np.uint32) * 10, np.zeros(32, np.uint32)
    ptx.launch(ptx.Program(_nc_kernel(False)), "k", 1, 32, (a, b))
    assert (b == a + 1).all()                       # reading never-written data is fine
    with pytest.raises(ptx.MemoryAccessError) as e:
        ptx.launch(ptx.Program(_nc_kernel(True)), "k", 1, 32, (a.copy(), b))
    msg = str(e.value)
    assert "ld.global.nc.u32" in msg and "already wrote" in msg and "st.global.u32" in msg
    assert "argument 0" in msg
