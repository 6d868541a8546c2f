"""Topic 11_fused_lm_head, the tma rung (``kernels/11_fused_lm_head_tma.cu`` and
``kernels/11_fused_lm_head_bwd_tma.cu``, sm_90a): the wgmma rung with its producers on the Tensor
Memory Accelerator. Its builds (no spill, setmaxnreg honoured, wgmma kept asynchronous, the
copies are UTMALDG and no LDGSTS is left), its Problems on the PTX interpreter (small cases) and
on a Hopper GPU (every case), the same bits as the wgmma rung, and wrong producers that must
fail."""
import re
from functools import lru_cache

import numpy as np
import pytest

from fraglab import toolchain
from fraglab import fused_lm_head as topic
from fraglab.fused_lm_head import backward, problems, wgmma

FORWARD = topic.PROBLEMS["fused_linear_cross_entropy_tma"]
BACKWARD = topic.PROBLEMS["linear_cross_entropy_backward_tma"]
DTYPES = ("f16", "bf16")
KERNELS = {wgmma.TMA_FILE: [wgmma.kernel_name(t, cap, "tma", k) for t in DTYPES
                            for cap in (False, True) for k in ("fwd", "g")],
           wgmma.GEMM_TMA_FILE: [f"lmhead_tma_{k}_{t}" for t in DTYPES for k in ("dw", "dh")]}


@lru_cache(maxsize=None)
def _build(name):
    return toolchain.compile(name, wgmma.ARCH)


@pytest.mark.parametrize("name", list(KERNELS))
def test_builds_without_spills_and_copies_with_the_tma(name):
    b = _build(name)
    assert sorted(b.kernels) == sorted(KERNELS[name])
    for k in KERNELS[name]:
        r = b.resources[k]
        assert r["spill_stores"] == r["spill_loads"] == r["stack_frame"] == 0, (k, r)
        ops = b.opcodes(k)
        assert ops.get("UTMALDG", 0) >= 1 and "LDGSTS" not in ops, (k, ops)
        assert "HGMMA" in ops, k
    assert "C7508" not in b.log, "ptxas ignored setmaxnreg"
    assert not re.search(r"C75(1\d|20)", b.log), b.log



def test_same_bits_as_the_wgmma_rung(rng, monkeypatch):
    """Only the producer changed: the losses and both gradients are the wgmma rung's, bit for bit
    (ragged rows, words and columns; the filter)."""
    monkeypatch.setenv("FRAGLAB_MODE", "cpu")
    inp = problems.backward_inputs(rng, n=37, v=300, d=80, filter_eps=2.0 ** -12, cold=True)
    loss = {v: problems.run_kernel(**inp, name=wgmma.RUNG_FILES[v], variant=v)
            for v in ("wgmma", "tma")}
    assert np.array_equal(loss["wgmma"], loss["tma"])
    grads = {v: problems.run_backward(**inp, variant=v) for v in ("wgmma", "tma")}
    for k in ("dh", "dw"):
        assert np.array_equal(grads["wgmma"][k], grads["tma"][k], equal_nan=True), k


@pytest.mark.gpu
@pytest.mark.parametrize("problem, case", [(p, c) for p in (FORWARD, BACKWARD) for c in p.cases],
                         ids=[f"{p.name.split('/')[-1]}-{c.name}" for p in (FORWARD, BACKWARD)
                              for c in p.cases])
def test_every_case_on_hopper(problem, case, check_supported):
    check_supported(problem, case)


def _mutant(name, old, new):
    source = toolchain.kernel_path(name).read_text()
    assert source.count(old) == 1, old
    return source.replace(old, new)


@pytest.mark.parametrize("case, old, new", [
    # the stage's bytes announced short: its phase completes before the w box has landed
    ("tiles_and_chunks", "mbar_arrive_expect_tx(full + 8 * s, LMW_STAGE_BYTES);",
     "mbar_arrive_expect_tx(full + 8 * s, LMW_H_BYTES);"),
    # a stage refilled without waiting for its readers (the interpreter's phase tracking names
    # the write after the consumers' reads that no wait ordered)
    ("tiles_and_chunks", "if (u > 0) mbar_wait(empty + 8 * s, (u - 1) & 1);   // the stage's",
     "// the stage's"),
])
def test_wrong_forward_producers_fail(rng, monkeypatch, case, old, new):
    """Mutants of the TMA producer (in the mainloop the forward and G share,
    kernels/11_fused_lm_head_wgmma.cu) on the interpreter: wrong losses, or the interpreter stops
    them."""
    monkeypatch.setenv("FRAGLAB_MODE", "cpu")
    src = toolchain.kernel_path(wgmma.TMA_FILE).read_text()
    main = _mutant(wgmma.FILE, old, new)
    mutant = src.replace('#include "11_fused_lm_head_wgmma.cu"', main)
    with pytest.raises(Exception, match="WRONG|race|hazard|Hazard|deadlock|never|transaction|tx"
                                         "|phase"):
        FORWARD.check(case, rng, run=lambda **inp: problems.run_tma(**inp, source=mutant))


@pytest.mark.parametrize("case, old, new", [
    # dw: G's second 64-word panel read from the first
    ("random", "tma_load_2d(a + LMG_BK * 128, amap, m0 + 64, k0, bar);",
     "tma_load_2d(a + LMG_BK * 128, amap, m0, k0, bar);"),
    # the filter's skipped k steps loaded anyway: the ring and the consumers disagree
    ("filter_cold", "if (skip) continue;", ""),
])
def test_wrong_gemm_producers_fail(rng, monkeypatch, case, old, new):
    """Mutants of the GEMMs' TMA producer (kernels/11_fused_lm_head_bwd_wgmma.cu, which the tma
    rung's file includes) on the interpreter."""
    monkeypatch.setenv("FRAGLAB_MODE", "cpu")
    src = toolchain.kernel_path(wgmma.GEMM_TMA_FILE).read_text()
    main = _mutant(wgmma.GEMM_FILE, old, new)
    mutant = src.replace('#include "11_fused_lm_head_bwd_wgmma.cu"', main)
    sources = {wgmma.TMA_FILE: None, wgmma.GEMM_TMA_FILE: mutant}
    with pytest.raises(Exception, match="WRONG|race|hazard|Hazard|deadlock|never|hang"):
        BACKWARD.check(case, rng, run=lambda **inp: problems.run_backward_tma(**inp, source=sources))


def test_the_tma_rung_is_the_default_on_hopper():
    from fraglab import runs_where
    with runs_where.simulated_gpu((9, 0)):
        assert backward.default_variant() == "tma"
    assert backward.VARIANTS[-1] == "tma" and backward.HOPPER == ("wgmma", "tma")
