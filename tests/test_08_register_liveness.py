"""Topic 08_register_liveness: the kernels against float64 (small cases on the PTX interpreter
in the CPU tier, every case on a GPU), what the compiler does with Q's registers (ptxas and
SASS, anywhere), and every rejected argument."""
import numpy as np
import pytest

from fraglab import register_liveness as rl
from fraglab.register_liveness import kernels, resources

SMALL = [(v, c) for v in rl.VARIANTS for c in rl.PROBLEMS[v].interpreter_cases
         if v in ("qreg", "qreload") or c.name == "small f16 d64 causal N=72"]
FULL = [(v, c) for v in rl.VARIANTS for c in rl.PROBLEMS[v].cases if c.slow]


@pytest.mark.parametrize("variant, case", SMALL, ids=[f"{v}-{c}" for v, c in SMALL])
def test_small_cases_match_float64(variant, case, rng):
    """On the interpreter without a GPU (N <= 80, one head: the CPU tier), on the GPU with one."""
    rl.PROBLEMS[variant].check(case, rng)


@pytest.mark.gpu
@pytest.mark.parametrize("variant, case", FULL, ids=[f"{v}-{c}" for v, c in FULL])
def test_every_variant_matches_float64(variant, case, check_supported):
    check_supported(rl.PROBLEMS[variant], case)


@pytest.mark.gpu
@pytest.mark.parametrize("knobs", [dict(bn=64), dict(maxrregcount=168), dict(minb=1)], ids=str)
def test_the_sweep_builds_compute_the_same(knobs, rng):
    p = rl.PROBLEMS["qreload"]
    run = p.run
    p.check("f16 d256 causal", rng, run=lambda **kw: run(**kw, **knobs))


# ---- what the compiler does (sm_90, no GPU needed) ------------------------------------------

@pytest.fixture(scope="module")
def rows():
    return {(r["variant"], r["d"]): r for r in resources.all_rows("sm_90")}


def test_nothing_spills_up_to_d128(rows):
    for (v, d), r in rows.items():
        if d <= 128:
            assert not resources.spills(r), r


def test_at_d256_q_in_registers_spills_and_the_reload_does_not(rows):
    """What NVRTC 12.x/13.x does at d = 256 (O alone is 128 registers a thread): Q's 64
    registers on top push the two-loop kernel past 255, and ptxas spills (STL/LDL in the SASS,
    as its report says); reloading Q from shared memory fits in 255 without a spill; re-reading
    it from global memory needs 64-bit addresses live across the loop and spills the most."""
    qreg, qre, qgl = rows["qreg", 256], rows["qreload", 256], rows["qglobal", 256]
    assert qreg["registers"] == qre["registers"] == 255
    assert qreg["spill_stores"] > 0 and qreg["stl"] > 0 and qreg["ldl"] > 0
    assert not resources.spills(qre)
    assert not resources.spills(rows["qreload_oneloop", 256])
    assert qgl["spill_stores"] > qreg["spill_stores"]


def test_occupancy_follows_registers_and_shared_memory(rows):
    assert rows["qreg", 64]["blocks_per_sm"] == 3          # ~160 registers x 128 threads
    assert rows["qreg", 256]["blocks_per_sm"] == 2
    assert rows["qreg", 256]["smem"] == (64 + 2 * 32) * 2 * 256
    r = resources.resources("qreload", 128, maxrregcount=128)
    assert r["registers"] <= 128 and r["blocks_per_sm"] == 4


def test_a_register_cap_costs_q_in_registers_the_most():
    """At d = 128 a cap of 128 registers (4 blocks a SM instead of 2) makes ptxas spill; far
    more with Q's 32 registers held across the sweep than with Q reloaded."""
    qreg = resources.resources("qreg", 128, maxrregcount=128)
    qre = resources.resources("qreload", 128, maxrregcount=128)
    assert qreg["registers"] <= 128 and qre["registers"] <= 128
    assert qreg["spill_stores"] > 4 * qre["spill_stores"] > 0


def test_resource_table_has_a_row_per_kernel(rows):
    text = resources.table(list(rows.values()))
    assert len(text.splitlines()) == 1 + len(rows)


# ---- arguments --------------------------------------------------------------------------------

def _qkv(xp, shape=(1, 1, 16, 64), dtype=np.float16):
    return [xp.zeros(shape, dtype) for _ in range(3)]


@pytest.mark.parametrize("kw, exc, words", [
    (dict(variant="qfast"), ValueError, "variant"),
    (dict(causal=1), TypeError, "causal must be a bool"),
    (dict(scale=-1.0), ValueError, "scale"),
    (dict(bn=32), ValueError, "varies at d = 256 only"),
    (dict(maxrregcount=20), ValueError, "maxrregcount"),
    (dict(minb=9), ValueError, "minb"),
])
def test_bad_options_are_rejected(kw, exc, words, xp):
    with pytest.raises(exc, match=words):
        rl.attention(*_qkv(xp), **kw)


def test_bad_shapes_and_dtypes_are_rejected(xp, foreign):
    with pytest.raises(ValueError, match="head dimension d = 96"):
        rl.attention(*_qkv(xp, (1, 1, 16, 96)))
    q, k, v = _qkv(xp)
    with pytest.raises((TypeError, ValueError)):
        rl.attention(q, k, v[..., :32])
    with pytest.raises(TypeError):
        rl.attention(*_qkv(xp, dtype=np.float32))
    make, words = foreign
    with pytest.raises(TypeError, match=words):
        rl.attention(make(q), k, v)


def test_build_spec_names_the_kernel_and_its_knobs():
    s = kernels.build_spec("qreg_oneloop", "bf16", 256, bn=64, maxrregcount=200)
    assert s["name"] == "08_register_liveness_qreg" and s["kernel"] == "fa08_qreg_bf16_d256_one"
    assert s["defines"] == {"FA08_BN256": 64, "FA08_ONLY_D": 256, "FA08_NO_BOUNDS": 1}
    assert s["options"] == ("--maxrregcount=200",)
    assert kernels.build_spec("qreload", "f16", 128)["defines"] == {}
    assert kernels.smem_bytes(128) == 48 * 1024 and kernels.smem_bytes(256, 64) == 96 * 1024
