"""Topic 05_flash_attention: compile/resource/SASS checks for every target and the wrappers'
checks that need no GPU (anywhere); the FA-1 and FA-2 kernels through their PROBLEMS (float64
reference, poisoned outputs) and every rejected argument (GPU).
"""
from functools import lru_cache

import numpy as np
import pytest

from fraglab import device, sass, toolchain
from fraglab import flash_attention as fa
from fraglab.attention import checks as attention_checks
from fraglab.device import GPUUnavailable, gpu_available
from fraglab.toolchain import ARCHES

SM80_UP = ("sm_80", "sm_90", "sm_120")
FA2_KERNELS = [fa.fa2_kernel(t, d, w) for t in fa.DTYPES for d in fa.FA2_HEAD_DIMS for w in fa.FA2_WARPS]
FA1_KERNELS = [fa.fa1_kernel(v, d) for v in fa.VARIANTS for d in fa.FA1_HEAD_DIMS]
FA1 = [fa.PROBLEMS[f"fa1_{v}"] for v in fa.VARIANTS]
FA2 = fa.PROBLEMS["fa2"]


def rel_err(got, ref):
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


# =================================================================================================
# Compile, resources, SASS (every target)
# =================================================================================================

@lru_cache(maxsize=None)
def _build(name, arch, unroll=None):
    b = toolchain.compile(name, arch, defines=None if unroll is None else {"FA1_UNROLL": unroll})
    return b, b.sass()


def _classes(name, arch, kernel, unroll=None):
    return sass.count_classes(sass.function_text(_build(name, arch, unroll)[1], kernel))


def _opcodes(name, arch, kernel, base=True, unroll=None):
    return sass.count_opcodes(sass.function_text(_build(name, arch, unroll)[1], kernel), base=base)


@pytest.mark.parametrize("arch", ARCHES)
def test_fa1_kernels_compile_without_local_memory(arch):
    b = toolchain.compile(fa.KERNELS_FA1, arch)          # the build the wrappers launch
    assert sorted(b.kernels) == sorted(FA1_KERNELS)
    for k in FA1_KERNELS:
        r = b.resources[k]
        assert r["stack_frame"] == r["spill_stores"] == r["spill_loads"] == 0, (k, r)


@pytest.mark.parametrize("arch", ARCHES)
def test_fa1_in_register_softmax_moves_less_through_shared_memory(arch):
    # Compared with the shared loops not unrolled (-DFA1_UNROLL=1): unrolled, their static
    # instruction counts vary by a few from one compilation to the next, which would hide the
    # softmax paths' difference. Not unrolled, the kernels' SASS differs only there.
    for d in fa.FA1_HEAD_DIMS:
        paper, fair, inreg = (_classes(fa.KERNELS_FA1, arch, fa.fa1_kernel(v, d), unroll=1)
                              for v in fa.VARIANTS)
        for c in (paper, fair, inreg):
            assert c["tensor"] > 0 and c["local"] == 0, (d, c)
        assert inreg["shared"] < fair["shared"] < paper["shared"], d
        assert inreg["barrier"] <= fair["barrier"] < paper["barrier"], d
        assert inreg["shuffle"] == 8 and fair["shuffle"] == 2 and paper["shuffle"] == 0, d
        # the paper's baseline separates its passes with __syncthreads()
        assert _opcodes(fa.KERNELS_FA1, arch, fa.fa1_kernel("paper_baseline", d), unroll=1)["BAR"] >= 3


@pytest.mark.parametrize("arch", SM80_UP)
def test_fa2_kernels_keep_everything_in_registers(arch):
    b, _ = _build(fa.KERNELS_FA2, arch)
    assert sorted(b.kernels) == sorted(FA2_KERNELS)
    for k in FA2_KERNELS:
        r = b.resources[k]
        assert r["stack_frame"] == r["spill_stores"] == r["spill_loads"] == 0, (k, r)
        assert r["registers"] <= 255
        cls = _classes(fa.KERNELS_FA2, arch, k)
        assert cls["local"] == 0, (k, cls)
        ops = _opcodes(fa.KERNELS_FA2, arch, k, base=False)
        assert any(o.startswith("LDSM.16.M88.4") for o in ops), k       # ldmatrix (Q, K)
        assert any(o.startswith("LDSM.16.MT88.4") for o in ops), k      # ldmatrix .trans (V)
        assert any(o.startswith("LDGSTS") for o in ops), k              # cp.async
        hmma = sum(n for o, n in ops.items() if o.startswith("HMMA.16816.F32"))
        d = int(k.split("_d")[1].split("_")[0])
        # per key tile: (d/16) * 4 * 2 mma for S and 4 * (d/16) * 2 for P V; the tile code
        # appears twice (unmasked and masked loop)
        assert hmma >= 2 * 2 * (d // 16) * 8, (k, hmma)
        if "bf16" in k:
            assert any(o.startswith("HMMA.16816.F32.BF16") for o in ops), k


def test_fa2_kernels_trap_on_sm75():
    b, _ = _build(fa.KERNELS_FA2, "sm_75")
    for k in FA2_KERNELS:
        ops = _opcodes(fa.KERNELS_FA2, "sm_75", k)
        assert ops["HMMA"] == 0 and ops["BPT"] >= 1, (k, ops)


def test_fa2_p_never_goes_through_shared_memory_between_the_two_products():
    # From the first to the last HMMA (both tile loops) the only shared-memory instructions that
    # can execute are ldmatrix (operands); cp.async writes count as global. P is never stored.
    # ("@!PT" instructions are never executed: padding the compiler puts after LDGSTS.)
    text = sass.function_text(_build(fa.KERNELS_FA2, "sm_90")[1], "fa2_f16_d128_w4")
    lines = [l for l in sass.listing(text) if not l.startswith("@!PT")]
    ops = [l.split()[1] if l.startswith("@") else l.split()[0] for l in lines]
    hmma = [i for i, o in enumerate(ops) if o.startswith("HMMA")]
    inner = [o for o in ops[hmma[0]:hmma[-1]] if sass.classify(o) == "shared"]
    assert inner and all(o.startswith("LDSM") for o in inner), sorted(set(inner))


def test_smem_sizes():
    src = (toolchain.KERNELS_DIR / (fa.KERNELS_FA1 + ".cu")).read_text()
    assert f"({fa.fa1_smem_bytes(512)} bytes" in src          # the number the .cu file gives
    assert fa.fa2_smem_bytes(128, 4) == 48 * 1024 and fa.fa2_smem_bytes(128, 8) == 64 * 1024
    with pytest.raises(ValueError, match="d must be"):
        fa.fa1_smem_bytes(96)


_COPY_STEP = fa.FA1_LAB_STEP + """
{   // not the softmax: P = S, statistics untouched (enough to build the lab kernels)
    alpha[0] = alpha[1] = 1.0f + 0.0f * (m[0] + l[0] + scale_log2);
}
"""


def test_lab_source_builds_one_lab_kernel_per_head_dimension():
    src = fa.fa1_lab_source(_COPY_STEP, unroll=1)
    assert src.startswith("#define FA1_UNROLL 1\n") and "struct SoftmaxLab" in src
    assert src.index(_COPY_STEP) < src.index("struct SoftmaxLab") < src.index("FA1_KERNEL(fa1_lab, 64")
    b = toolchain.compile(fa.FA1_LAB_NAME, "sm_90", source=src)
    assert sorted(b.kernels) == sorted(f"fa1_lab_d{d}" for d in fa.FA1_HEAD_DIMS)
    with pytest.raises(TypeError, match="str"):
        fa.fa1_lab_source(None)


@pytest.mark.parametrize("call, exc, msg", [
    (lambda: fa.fa1_kernel("fast", 64), ValueError, "variant"),
    (lambda: fa.fa1_kernel("inregister", 96), ValueError, "head dimension"),
    (lambda: fa.fa2_kernel("f32", 64, 4), ValueError, "dtype"),
    (lambda: fa.fa2_kernel("f16", 256, 4), ValueError, "head dimension"),
    (lambda: fa.fa2_kernel("f16", 64, 2), ValueError, "warps"),
    (lambda: fa.emulate_fa2(np.ones((4, 64)), np.ones((4, 64)), np.ones((4, 64)), warps=3), ValueError, "warps"),
    (lambda: fa.emulate_fa1_rows(np.ones((8, 64)), np.ones((16, 64)), np.ones((16, 64))), ValueError, "16"),
])
def test_bad_names_and_options_are_rejected(call, exc, msg):
    with pytest.raises(exc, match=msg):
        call()


# =================================================================================================
# Wrapper checks that need no GPU
# =================================================================================================

def test_the_wrong_kind_of_array_is_rejected_before_any_launch(foreign):
    make, words = foreign
    x = make(np.zeros((1, 1, 16, 64), np.float16))
    with pytest.raises(TypeError, match=words):
        fa.fa1(x, x, x)
    with pytest.raises(TypeError, match=words):
        fa.fa2(x, x, x)


@pytest.mark.parametrize("kw, exc, msg", [
    ({"warps": 2}, ValueError, "warps"), ({"warps": True}, ValueError, "warps"),
    ({"causal": 1}, TypeError, "causal"),
])
def test_fa2_options_are_checked_first(kw, exc, msg):
    x = np.zeros((1, 1, 16, 64), np.float16)
    with pytest.raises(exc, match=msg):
        fa.fa2(x, x, x, **kw)


def test_fa1_variant_is_checked_first():
    x = np.zeros((1, 1, 16, 64), np.float16)
    with pytest.raises(ValueError, match="variant"):
        fa.fa1(x, x, x, "fastest")


def test_flops():
    assert fa.attention_flops(4, 8, 4096, 128) == 4.0 * 32 * 4096 ** 2 * 128
    assert fa.attention_flops(1, 1, 1024, 512, causal=True) == 2.0 * 1024 ** 2 * 512


@pytest.mark.skipif(gpu_available(), reason="checks the GPU-less behaviour")
def test_without_gpu_the_benchmark_says_so():
    with pytest.raises(GPUUnavailable, match="needs a CUDA GPU"):
        fa.main(["bench", "--out", "/nonexistent"])


# =================================================================================================
# GPU: kernels against the float64 reference (fraglab.flash_attention.PROBLEMS)
# =================================================================================================

def _on_gpu(raw):
    import cupy as cp
    return [cp.asarray(a) for a in raw]


@pytest.mark.gpu
@pytest.mark.parametrize("case", FA1[0].cases, ids=str)
@pytest.mark.parametrize("problem", FA1, ids=lambda p: p.name.split("/")[1])
def test_fa1_matches_reference(problem, case, rng):
    problem.check(case, rng)


@pytest.mark.gpu
@pytest.mark.parametrize("case", FA2.cases, ids=str)
def test_fa2_matches_reference(case, rng):
    ok, why = FA2.supported(case)
    if not ok:
        pytest.skip(why)
    FA2.check(case, rng)


@pytest.mark.gpu
def test_fa2_causal_first_row_is_the_first_value(rng):
    raw, exact = fa.random_qkv(rng, (1, 1, 70, 128), "f16")
    got = fa.as_float(fa.fa2(*_on_gpu(raw), causal=True), "f16")
    np.testing.assert_array_equal(got[0, 0, 0], exact[2][0, 0, 0])   # row 0 sees key 0 only


@pytest.mark.gpu
def test_fa1_variants_agree_with_each_other(rng):
    raw, _ = fa.random_qkv(rng, (1, 2, 64, 128), "f16")
    gpu = _on_gpu(raw)
    outs = [fa.as_float(fa.fa1(*gpu, v), "f16") for v in fa.VARIANTS]
    for o in outs[1:]:
        assert rel_err(o, outs[0]) < 2e-3


# =================================================================================================
# GPU: every rejected argument
# =================================================================================================

def _bad_inputs(cp):
    good = cp.zeros((1, 2, 64, 64), cp.float16)
    flat = cp.zeros(2 * 64 * 64 + 8, cp.float16)
    return {
        "float32": (cp.zeros((1, 2, 64, 64), cp.float32), TypeError, "float16 or uint16"),
        "3-d": (cp.zeros((2, 64, 64), cp.float16), ValueError, "4 dimensions"),
        "d=96": (cp.zeros((1, 2, 64, 96), cp.float16), ValueError, "head dimension"),
        "empty": (cp.zeros((1, 0, 64, 64), cp.float16), ValueError, ">= 1"),
        "strided": (cp.zeros((1, 2, 64, 128), cp.float16)[..., ::2], ValueError, "contiguous"),
        "misaligned": (flat[1:1 + 2 * 64 * 64].reshape(1, 2, 64, 64), ValueError, "aligned"),
        "many heads": (cp.zeros((1, 65536, 1, 64), cp.float16), ValueError, "B \\* H"),
        "numpy": (np.zeros((1, 2, 64, 64), np.float16), TypeError, "cupy.asarray"),
    }, good


@pytest.mark.gpu
@pytest.mark.parametrize("which", ["float32", "3-d", "d=96", "empty", "strided", "misaligned",
                                   "many heads", "numpy"])
@pytest.mark.parametrize("kernel", ["fa1", "fa2"])
def test_bad_q_is_rejected(which, kernel):
    import cupy as cp
    bad, good = _bad_inputs(cp)
    arr, exc, msg = bad[which]
    with pytest.raises(exc, match=msg):
        getattr(fa, kernel)(arr, arr, arr)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["fa1", "fa2"])
def test_k_and_v_must_match_q(kernel):
    import cupy as cp
    q = cp.zeros((1, 2, 64, 64), cp.float16)
    f = getattr(fa, kernel)
    with pytest.raises(ValueError, match="shape"):
        f(q, cp.zeros((1, 2, 48, 64), cp.float16), q)
    with pytest.raises(ValueError, match="shape"):
        f(q, q, cp.zeros((1, 1, 64, 64), cp.float16))
    with pytest.raises(TypeError, match="float16"):
        f(q, q.view(cp.uint16), q)


@pytest.mark.gpu
@pytest.mark.parametrize("scale, exc", [(0.0, ValueError), (-1.0, ValueError), (float("inf"), ValueError),
                                        (float("nan"), ValueError), ("1", TypeError), (True, TypeError)])
@pytest.mark.parametrize("kernel", ["fa1", "fa2"])
def test_bad_scale_is_rejected(scale, exc, kernel):
    import cupy as cp
    q = cp.zeros((1, 1, 64, 64), cp.float16)
    with pytest.raises(exc, match="scale"):
        getattr(fa, kernel)(q, q, q, scale=scale)


@pytest.mark.gpu
def test_fa1_rejects_ragged_n_and_bf16():
    import cupy as cp
    q = cp.zeros((1, 1, 40, 64), cp.float16)
    with pytest.raises(ValueError, match="multiple of 16"):
        fa.fa1(q, q, q)
    b = cp.zeros((1, 1, 64, 64), cp.uint16)
    with pytest.raises(TypeError, match="float16 inputs only"):
        fa.fa1(b, b, b)
    with pytest.raises(ValueError, match="d = 256"):
        x = cp.zeros((1, 1, 16, 256), cp.float16)
        fa.fa1(x, x, x)


@pytest.mark.gpu
def test_n_limit(monkeypatch):
    import cupy as cp
    monkeypatch.setattr(attention_checks, "MAX_N", 32)
    q = cp.zeros((1, 1, 48, 64), cp.float16)
    for f in (fa.fa1, fa.fa2):
        with pytest.raises(ValueError, match="at most 32"):
            f(q, q, q)


def test_fa2_refuses_gpus_older_than_sm80(monkeypatch, xp):
    monkeypatch.setattr(device, "target_cc", lambda: (7, 5))
    q = xp.zeros((1, 1, 64, 64), xp.float16)
    with pytest.raises(RuntimeError, match="compute capability 8.0"):
        fa.fa2(q, q, q)


@pytest.mark.gpu
def test_out_argument_is_checked():
    import cupy as cp
    q = cp.zeros((1, 1, 64, 64), cp.float16)
    with pytest.raises(ValueError, match="shape"):
        fa.fa2_launcher(q, q, q, out=cp.zeros((1, 1, 64, 128), cp.float16))
    with pytest.raises(TypeError, match="float16"):
        fa.fa1_launcher(q, q, q, out=cp.zeros((1, 1, 64, 64), cp.float32))
