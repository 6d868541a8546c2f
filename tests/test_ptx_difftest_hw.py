"""The GPU-side differential scripts on the CPU: the tensor-core test (difftest.tc) and the
whole-program fuzzer (difftest.fuzz) run on the interpreter, with the interpreter standing in
for the GPU (the comparison pipeline), in a few seconds. The hardware run is
``python -m fraglab.ptx.difftest.hw --out DIR`` on a GPU machine."""
from __future__ import annotations

import numpy as np
import pytest

from fraglab.ptx.difftest import fuzz as F
from fraglab.ptx.difftest import tc as T
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


# ---- the first H200 fuzz record (tests/data/fuzz_h200_cases.json) -------------------------------
# Programs that differed on the H200 (python -m fraglab.ptx.difftest.hw), with the GPU's words at
# the recorded (thread, word): the guarded testp the interpreter now reproduces, NaN bits the ISA
# leaves open, and bit fields ptxas folds two ways (refused by name since; the generator no longer
# writes them, so those programs are kept whole in the record).

import json
from pathlib import Path

from fraglab.ptx.errors import UnsupportedInstruction

_DATA = Path(__file__).parent / "data"
_FUZZ = json.loads((_DATA / "fuzz_h200_cases.json").read_text())
_HEAD = ".version 8.8\n.target sm_80\n.address_size 64\n\n"


def _replay(case, ptx=None):
    text = _HEAD + (ptx or F.program(case["seed"], 0))
    out = F.run_interp([case["seed"]], text)[0]
    assert not isinstance(out, str), out
    hw = out.copy()
    for e in case["examples"]:
        hw[e["thread"] * F.OUT_WORDS + e["word"]] = int(e["gpu"], 16)
    return hw, out, text


@pytest.mark.parametrize("case", [c for c in _FUZZ["cases"] if c["class"] == "guarded_testp"],
                         ids=lambda c: f"{c['class']}-{c['seed']}")
def test_the_interpreter_matches_the_h200_on_recorded_programs(case):
    assert F.program(case["seed"], 0) == case["ptx"]           # the generator still makes it
    hw, out, _ = _replay(case)
    assert (hw == out).all()


@pytest.mark.parametrize("case", [c for c in _FUZZ["cases"] if c["class"] == "bitfield_immediates"],
                         ids=lambda c: f"{c['class']}-{c['seed']}")
def test_bit_fields_ptxas_folds_two_ways_are_refused_by_name(case):
    out = F.run_interp([case["seed"]], _HEAD + case["ptx"])[0]
    assert isinstance(out, str) and F.refused(out) and "ptxas" in out, out
    assert F.program(case["seed"], 0) != case["ptx"]           # no longer generated


@pytest.mark.parametrize("case", [c for c in _FUZZ["cases"] if c["class"] == "nan_bits"],
                         ids=lambda c: f"{c['class']}-{c['seed']}")
def test_nan_bits_the_isa_leaves_open_are_not_differences(case):
    hw, out, text = _replay(case)
    loose = F.undefined_words(hw, out, F.open_words(case["seed"], text, 0, out))
    assert (hw != out).any() and ((hw == out) | loose).all()


# ---- the second H200 fuzz record: the 74 programs that differed, by cause -------------------------
# tests/data/fuzz_h200_confirm_causes.json (from book/data/appendix_ptx_interpreter/
# fuzz_h200_confirm.json): each program's cause, the GPU's words at the first recorded words.

_CONFIRM = json.loads((_DATA / "fuzz_h200_confirm_causes.json").read_text())


def _by_cause(cause, n=2):
    """The programs of one cause: the first ``n`` in the default tier, the rest marked slow."""
    progs = [c for c in _CONFIRM["programs"] if c["cause"] == cause]
    return [pytest.param(c, id=f"{cause}-{c['seed']}",
                         marks=() if i < n else pytest.mark.slow) for i, c in enumerate(progs)]


def test_every_recorded_difference_has_a_cause():
    causes = [c["cause"] for c in _CONFIRM["programs"]]
    assert len(causes) == 74 and set(causes) <= set(_CONFIRM["causes"])


@pytest.mark.parametrize("case", _by_cause("bfi_byte_aligned"))
def test_byte_aligned_bit_fields_match_the_h200(case):
    hw, out, _ = _replay(case)
    assert (hw == out).all()


@pytest.mark.parametrize("case", _by_cause("ptxas_folded_field"))
def test_fields_ptxas_folds_two_ways_are_refused_and_no_longer_generated(case):
    prog = F.program(case["seed"], 0)
    for line in case["refused_instr"]:
        assert line not in prog
        body = ("\t.reg .b32 %r<12>;\n\t.reg .pred %p<4>;\n\tmov.u32 %r1, 5;\n\tmov.u32 %r2, 6;\n"
                "\tmov.u32 %r3, 7;\n\tsetp.eq.u32 %p2, %r1, 5;\n\t" + line + "\n\tret;")
        text = _HEAD + ".visible .entry k()\n{\n" + body + "\n}\n"
        from fraglab.ptx.program import Program, launch
        with pytest.raises(UnsupportedInstruction, match="ptxas"):
            launch(Program(text), "k", 1, 32)


@pytest.mark.parametrize("case", _by_cause("open_nan_bits", 3) + _by_cause("abs_int_min"))
def test_words_that_differ_carry_bits_the_isa_leaves_open(case):
    hw, out, text = _replay(case)
    open_ = F.open_words(case["seed"], text, 0, out)
    assert (hw != out).any()
    assert ((hw == out) | open_).all()                           # each difference is open


def test_what_ptxas_departs_from_is_the_isas_value():
    # ptxas_signed_zero (seeds 2132, 4139): abs of a selected -0.0 is +0.0, a selected -0.0 stays
    # -0.0 (the H200 gave -0.0 and +0.0 there). The interpreter follows the ISA; the replay
    # checks at -O0.
    body = ("\tsetp.eq.u32 %p1, %r0, %r0;\n\tmov.f32 %f0, 0f80000000;\n"
            "\tselp.f32 %f1, %f0, 0fBF800000, %p1;\n\tmov.b32 %r1, %f1;")
    assert _run1(body) == 0x80000000
    body = ("\tsetp.ne.u32 %p1, %r0, %r0;\n\tmov.f32 %f0, 0f3F800000;\n"
            "\tselp.f32 %f1, %f0, 0f80000000, %p1;\n\tabs.f32 %f1, %f1;\n\tmov.b32 %r1, %f1;")
    assert _run1(body) == 0


def test_open_words_find_bits_carried_into_integer_registers():
    # neg.f32 of a NaN (open bits) moved to an integer register: the word is open; the same word
    # from a NaN loaded from memory (defined bits) is not
    from fraglab.ptx import nan
    def words(src):
        text = (_HEAD + ".visible .entry fz0(.param .u64 p_in, .param .u64 p_out)\n{\n"
                "\t.reg .b32 %r<2>;\n\t.reg .f32 %f<2>;\n\t.reg .b64 %a<3>;\n"
                "\tld.param.u64 %a0, [p_out];\n\tcvta.to.global.u64 %a0, %a0;\n"
                "\tmov.b32 %f0, 0fFFFFFFF8;\n" + src + "\tmov.b32 %r1, %f1;\n"
                "\tst.global.b32 [%a0], %r1;\n\tret;\n}\n")
        return F.open_words(3, text)
    assert words("\tneg.f32 %f1, %f0;\n")[0]
    assert words("\tmin.f32 %f1, %f0, %f0;\n")[0]
    assert not words("\tmov.f32 %f1, %f0;\n")[0]
    assert not words("\tmin.NaN.f32 %f1, %f0, %f0;\n")[0]     # the ISA: canonical NaN
    with nan.open_bits(1):
        assert nan.canon32(np.array([np.nan], np.float32)).view(np.uint32)[0] >> 31 == 1
    with nan.open_bits(1, flip=True):
        assert nan.canon32(np.array([np.nan], np.float32)).view(np.uint32)[0] >> 31 == 0


def _run1(body, regs=".reg .b32 %r<4>;\n\t.reg .f32 %f<2>;\n\t.reg .pred %p<3>;", inp=(0,)):
    from fraglab.ptx.program import Program, launch
    text = (_HEAD + ".visible .entry k(.param .u64 o, .param .u64 i)\n{\n\t"
            + regs + "\n\t.reg .b64 %a<3>;\n\tld.param.u64 %a0, [o];\n\tld.param.u64 %a1, [i];\n"
            + "".join(f"\tld.global.b32 %r{j}, [%a1+{4 * j}];\n" for j in range(len(inp)))
            + body + "\n\tst.global.b32 [%a0], %r1;\n\tret;\n}\n")
    out = np.zeros(1, np.uint32)
    launch(Program(text), "k", 1, 1, (out, np.array(inp, np.uint32)), echo_printf=False)
    return int(out[0])


def test_bit_field_immediates_as_the_h200_computes_them():
    # bfe.s32 with an immediate position past bit 31: ~0 when a is a register, 0 (the ISA) when
    # ptxas knows a: refused by name (seed 1930)
    with pytest.raises(UnsupportedInstruction, match="position 38"):
        _run1("\tbfe.s32 %r1, %r0, 38, 16;", inp=(0,))
    # the same field from registers loaded from memory: the ISA's a[31] (the H100 record)
    assert _run1("\tbfe.s32 %r1, %r0, %r2, %r3;", inp=(0, 0, 38, 16)) == 0
    assert _run1("\tbfe.s32 %r1, %r0, %r2, %r3;", inp=(0x80000000, 0, 38, 16)) == 0xFFFFFFFF
    assert _run1("\tbfe.u32 %r1, %r0, 38, 16;", inp=(0xFFFFFFFF,)) == 0
    # bfi.b32 with immediate fields and a length >= 32 at a position that is a multiple of 8: the
    # ISA's clamped field (seed 76 on the H200: a = 0x36430000, b = 0xd00abd66 -> 0xbd66)
    assert _run1("\tbfi.b32 %r1, %r0, %r2, 16, 33;", inp=(0x36430000, 0, 0xD00ABD66)) == 0xBD66
    assert _run1("\tbfi.b32 %r1, %r0, %r2, 0, 32;", inp=(0x12345678, 0, 7)) == 0x12345678
    # ... at other positions ptxas takes the length mod 32 or clamps it: refused (seed 2007)
    with pytest.raises(UnsupportedInstruction, match="position 22"):
        _run1("\tbfi.b32 %r1, %r0, %r2, 22, 35;", inp=(0, 0, 0xFFFFFFFF))
    # fields from registers loaded from memory: the ISA (clamped)
    assert _run1("\tbfi.b32 %r1, %r0, %r2, %r3, 40;", inp=(0, 0, 0xFFFFFFFF, 20)) == 0x000FFFFF
    with pytest.raises(UnsupportedInstruction, match="0..255"):
        _run1("\tbfi.b32 %r1, %r0, %r2, 3, 256;", inp=(0, 0, 0))


def test_a_guarded_testp_writes_its_predicate_anyway():
    # seed 1934: `@!%p1 testp.subnormal.f32 %p1, %f2` with %p1 true and %f2 normal -> %p1 false
    body = ("\tsetp.eq.u32 %p1, %r0, %r0;\n\tmov.b32 %f0, 0f3F800000;\n"
            "\t@!%p1 testp.subnormal.f32 %p1, %f0;\n\tselp.u32 %r1, 1, 0, %p1;")
    assert _run1(body) == 0


# ---- the replay of a record (python -m fraglab.ptx.difftest.hw --replay RECORD) -----------------

def test_replay_runs_the_recorded_programs_three_ways(tmp_path):
    from fraglab.ptx.difftest import fuzz_replay as R
    seeds = R.seeds_of(_DATA / "fuzz_h200_confirm_causes.json")
    assert len(seeds) == 74
    pick = [76, 1771, 4139]                         # bfi_byte_aligned, open_nan_bits, ptxas_signed_zero
    res = R.replay(pick, "fake", tmp_path, R.causes(_DATA / "fuzz_h200_confirm_causes.json"),
                   log=lambda *a: None)
    assert [r["cause"] for r in res["rows"]] == ["bfi_byte_aligned", "open_nan_bits", "ptxas_signed_zero"]
    assert all(res["summary"][w]["agree"] == 3 for w in R.WAYS)
    words = np.load(tmp_path / "replay_gpu_words.npz")
    assert sorted(words.files) == sorted(f"{s}-{w}" for s in pick for w in R.WAYS)
    assert json.loads((tmp_path / "replay.json").read_text())["seeds"] == 3


def test_replay_assembles_with_ptxas_at_each_level():
    from fraglab.ptx.difftest import fuzz_replay as R
    if R.ptxas() is None:
        pytest.skip("no ptxas")
    text = F.module([76])                           # .target sm_80, assembled for the H200's sm_90
    assert R._cubin(text, 0, "sm_90")[:4] == b"\x7fELF" == R._cubin(text, 3, "sm_90")[:4]


@pytest.mark.parametrize("case", _by_cause("ptxas_moved_past_loop", 3))
def test_what_the_gpu_computed_with_a_later_loops_values(case):
    """The GPU's words of these programs are what one instruction gives with the value its
    predicate or source register gets only in a later loop; the interpreter gives the ISA's (the
    value where the instruction stands). Seed 11963, thread 1: `@%p1 mul.lo.s32 %r4, %r1, 2`
    then `@%p0 max.s32 %r5, %r10, %r4`, %p1 false there and true after the loop
    (testp.infinite of +inf): the ISA gives max(5, %r4) = 5, the H200 0x00FFFFFE = 2 x %r1."""
    hw, out, _ = _replay(case)
    assert (hw != out).any()
    if case["seed"] == 11963:
        i = 1 * F.OUT_WORDS + 5
        r1 = int(F.inputs(11963).reshape(-1, F.IN_WORDS)[1, 1])
        assert int(out[i]) == 5 and int(hw[i]) == (2 * r1) & 0xFFFFFFFF == 0x00FFFFFE


def test_seed_775_summed_with_the_value_a_later_loop_gives():
    """Seed 775, the last difference traced: its `sad.u32 %r0, %r4, %r7, %r5` stands before a
    loop whose body ends with `mov.b32 %r4, %f3`. The interpreter sums with the %r4 it reads there
    (the ISA); each recorded GPU word is the same sad of %r4's value after that loop (the
    program's final word 4), with the %r7 and %r5 the sad read (stored here by a probe)."""
    case = next(c for c in _CONFIRM["programs"] if c["seed"] == 775)
    assert case["cause"] == "ptxas_moved_past_loop"
    sad = "\tsad.u32 %r0, %r4, %r7, %r5;\n"
    probe = sad + ("\tmul.wide.u32 %tq, %gt, 192;\n\tadd.u64 %tq, %tout, %tq;\n"
                   "\tst.global.b32 [%tq+136], %r4;\n\tst.global.b32 [%tq+140], %r7;\n"
                   "\tst.global.b32 [%tq+144], %r5;\n")
    ptx = F.program(775, 0)
    assert ptx.count(sad) == 1
    hw, out, _ = _replay(case, ptx.replace(sad, probe))
    words = out.reshape(-1, F.OUT_WORDS)
    for e in case["examples"]:
        t = e["thread"]
        r4_then, r7, r5 = (int(x) for x in words[t, 34:37])
        r4_later = int(words[t, 4])
        def sad_of(a):
            return (r5 + abs(a - r7)) & 0xFFFFFFFF
        assert int(words[t, e["word"]]) == sad_of(r4_then) != int(e["gpu"], 16)
        assert sad_of(r4_later) == int(e["gpu"], 16)
