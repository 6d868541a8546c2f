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
                                      (T.FORMS[8], "chain"), (T.FORMS[10], "subnormal")])
def test_tensor_core_pipeline_agrees_with_the_model(form, cls):
    steps = 3 if cls == "chain" else 1
    r = T.check(form, cls, steps, "fake", quick=True)
    assert r["interp_vs_model_h100"] == 0 and r["interp_vs_gpu"] == 0
    assert r["model_vs_gpu"]["h100"] == 0
    if cls != "subnormal":
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
