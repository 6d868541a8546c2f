"""The GPU-side differential scripts on the CPU: the tensor-core test (difftest_tc) and the
whole-program fuzzer (difftest_fuzz) run on the interpreter, with the interpreter standing in
for the GPU (the comparison pipeline), in a few seconds. The hardware run is
``python -m fraglab.ptx.difftest_hw --out DIR`` on a GPU machine."""
from __future__ import annotations

import numpy as np
import pytest

from fraglab.ptx import difftest_fuzz as F
from fraglab.ptx import difftest_tc as T
from fraglab.ptx import tcmodel


@pytest.mark.parametrize("form,cls", [(T.FORMS[0], "cancel"), (T.FORMS[6], "random"),
                                      (T.FORMS[8], "chain"), (T.FORMS[10], "subnormal"),
                                      (T.FORMS[4], "zeros"), (T.FORMS[2], "subnormal_scaled")])
def test_tensor_core_pipeline_agrees_with_the_model(form, cls):
    steps = 3 if cls == "chain" else 1
    r = T.check(form, cls, steps, "fake", quick=True)
    assert r["interp_vs_model_h100"] == 0 and r["interp_vs_gpu"] == 0
    assert r["model_vs_gpu"]["h100"] == 0
    if cls not in ("subnormal", "zeros"):
        assert r["model_vs_gpu"]["exact_rn"] > 0          # these inputs separate the two models


def test_tensor_core_kernels_pack_what_the_model_reads():
    test = T.Test(T.FORMS[9], "random", 1, 1)             # wgmma m64n64k16 bf16
    assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16" in test.ptx
    got = T.unpack(test.form, T.run_interp(test, 1), 1)
    assert (got == test.model(tcmodel.H100)).all()


def test_fuzzed_programs_run_on_the_interpreter():
    r = F._job(list(range(1, 9)), "fake")
    assert r["n"] == 8 and r["rows"] == [], r["rows"][:1]


def test_fuzz_modules_hold_several_kernels_and_signed_zero_immediates():
    text = F.module(range(20, 30))
    assert text.count(".visible .entry") == 10 and text.count(".const .align") == 10
    assert "0f80000000" in text
    assert F.compared_words().sum() == F.BLOCKS * F.THREADS * (34 + 8)
    assert not np.array_equal(F.inputs(1), F.inputs(2))


# ---- the H200 fuzz record (tests/data/fuzz_h200_cases.json) -------------------------------------
# Programs that differed on the H200 (python -m fraglab.ptx.difftest_hw), with the GPU's words at
# the recorded (thread, word): two classes the interpreter now reproduces and one (NaN bits) that
# the comparison treats as results the PTX ISA leaves open.

import json
from pathlib import Path

_FUZZ = json.loads((Path(__file__).parent / "data" / "fuzz_h200_cases.json").read_text())


def _replay(case):
    text = ".version 8.8\n.target sm_80\n.address_size 64\n\n" + case["ptx"]
    out = F.run_interp([case["seed"]], text)[0]
    assert not isinstance(out, str), out
    hw = out.copy()
    for e in case["examples"]:
        hw[e["thread"] * F.OUT_WORDS + e["word"]] = int(e["gpu"], 16)
    return hw, out


@pytest.mark.parametrize("case", [c for c in _FUZZ["cases"] if c["class"] != "nan_bits"],
                         ids=lambda c: f"{c['class']}-{c['seed']}")
def test_the_interpreter_matches_the_h200_on_recorded_programs(case):
    assert F.program(case["seed"], 0) == case["ptx"]           # the generator still makes it
    hw, out = _replay(case)
    assert (hw == out).all()


@pytest.mark.parametrize("case", [c for c in _FUZZ["cases"] if c["class"] == "nan_bits"],
                         ids=lambda c: f"{c['class']}-{c['seed']}")
def test_nan_bits_the_isa_leaves_open_are_not_differences(case):
    hw, out = _replay(case)
    loose = F.undefined_words(hw, out)
    assert (hw != out).any() and ((hw == out) | loose).all()


def _run1(body, regs=".reg .b32 %r<4>;\n\t.reg .f32 %f<2>;\n\t.reg .pred %p<3>;", inp=(0,)):
    from fraglab.ptx.program import Program, launch
    text = (".version 8.8\n.target sm_80\n.address_size 64\n\n.visible .entry k(.param .u64 o, .param .u64 i)\n{\n\t"
            + regs + "\n\t.reg .b64 %a<3>;\n\tld.param.u64 %a0, [o];\n\tld.param.u64 %a1, [i];\n"
            + "".join(f"\tld.global.b32 %r{j}, [%a1+{4 * j}];\n" for j in range(len(inp)))
            + body + "\n\tst.global.b32 [%a0], %r1;\n\tret;\n}\n")
    out = np.zeros(1, np.uint32)
    launch(Program(text), "k", 1, 1, (out, np.array(inp, np.uint32)), echo_printf=False)
    return int(out[0])


def test_bit_field_immediates_as_the_h200_computes_them():
    # bfe.s32 with an immediate position past bit 31: 0xFFFFFFFF even for a = 0 (seed 1930)
    assert _run1("\tbfe.s32 %r1, %r0, 38, 16;", inp=(0,)) == 0xFFFFFFFF
    # the same field from registers: the ISA's a[31] (the H100 per-instruction record)
    assert _run1("\tmov.u32 %r2, 38;\n\tmov.u32 %r3, 16;\n\tbfe.s32 %r1, %r0, %r2, %r3;", inp=(0,)) == 0
    assert _run1("\tbfe.u32 %r1, %r0, 38, 16;", inp=(0xFFFFFFFF,)) == 0
    # bfi.b32 with an immediate length >= 32: mod 32 (seed 2007: a = 0, b = ~0, 22, 35)
    assert _run1("\tbfi.b32 %r1, %r0, %r2, 22, 35;", inp=(0, 0, 0xFFFFFFFF)) == 0xFE3FFFFF
    assert _run1("\tbfi.b32 %r1, %r0, %r2, 20, 32;", inp=(0, 0, 0x8A6EAB5F)) == 0x8A6EAB5F
    assert _run1("\tmov.u32 %r3, 32;\n\tbfi.b32 %r1, %r0, %r2, 20, %r3;", inp=(0, 0, 0x8A6EAB5F)) == 0x000EAB5F


def test_a_guarded_testp_writes_its_predicate_anyway():
    # seed 1934: `@!%p1 testp.subnormal.f32 %p1, %f2` with %p1 true and %f2 normal -> %p1 false
    body = ("\tsetp.eq.u32 %p1, %r0, %r0;\n\tmov.b32 %f0, 0f3F800000;\n"
            "\t@!%p1 testp.subnormal.f32 %p1, %f0;\n\tselp.u32 %r1, 1, 0, %p1;")
    assert _run1(body) == 0
