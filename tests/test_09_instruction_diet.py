"""Topic 09_instruction_diet: the SASS class counter on hand-made listings, the direction each
variant moves the main loop's classes (sm_80 and sm_90 SASS), every variant against float64 (the
interpreter's small cases here, every case on a GPU), and every rejected argument."""
import numpy as np
import pytest

from fraglab import ARCHES, ncu, toolchain
from fraglab import instruction_diet as diet
from fraglab.instruction_diet import bench, classes, kernels

# --------------------------------------------------------------------------------------------
# the counter on listings with known answers
# --------------------------------------------------------------------------------------------

LOOP = """\
\t.section\t.text.k,"ax",@progbits
.text.k:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   CS2R R4, SRZ ;
        /*0020*/                   S2R R0, SR_TID.X ;
.L_x_0:
        /*0030*/                   LDSM.16.M88.4 R8, [R2] ;
        /*0040*/                   HMMA.16816.F32 R12, R8, R10, RZ ;
        /*0050*/                   HMMA.16816.F32 R12, R8, R16, R12 ;
        /*0060*/                   F2FP.F16.F32.PACK_AB R20, R13, R12 ;
        /*0070*/                   LOP3.LUT R2, R2, 0x20, RZ, 0x3c, !PT ;
        /*0080*/                   IMAD.MOV.U32 R3, RZ, RZ, R2 ;
        /*0090*/                   FFMA R5, R12, R6, -R7 ;
        /*00a0*/                   MUFU.EX2 R5, R5 ;
        /*00b0*/                   VIADD R0, R0, 0x1 ;
        /*00c0*/                   ISETP.GE.AND P0, PT, R0, R9, PT ;
        /*00d0*/              @!P0 BRA `(.L_x_0) ;
.L_x_1:
        /*00e0*/                   LDGSTS.E.BYPASS.128 [R3], desc[UR6][R4.64] ;
        /*00f0*/                   HMMA.16816.F32 R12, R8, R10, R12 ;
        /*0100*/              @!P0 BRA `(.L_x_1) ;
        /*0110*/                   STG.E.128 desc[UR6][R4.64], R20 ;
        /*0120*/                   EXIT ;
.L_x_2:
        /*0130*/                   BRA `(.L_x_2);
        /*0140*/                   NOP;
"""


def test_classes_of_a_hand_made_listing():
    k = classes.counts(LOOP)["kernel"]
    assert k["tensor"] == 3 and k["shared"] == 1 and k["global"] == 2
    assert k["conversion"] == 1 and k["move"] == 2          # CS2R and IMAD.MOV are moves
    assert k["integer"] == 3                                # LOP3, VIADD, ISETP
    assert k["float"] == 2 and k["control"] == 3 and k["special"] == 2   # LDC, S2R
    assert sum(k.values()) == 19                            # the padding BRA and NOP left out


def test_the_main_loop_is_the_back_edge_with_the_most_hmma():
    c = classes.counts(LOOP)
    assert c["loop_instructions"] == 11                     # .L_x_0 .. its BRA
    assert c["loop"]["tensor"] == 2 and c["loop"]["conversion"] == 1
    assert c["loop"]["move"] == 1 and c["loop"]["global"] == 0
    assert c["loop_hmma_rz"] == 1 and c["hmma_share"] == pytest.approx(2 / 11)
    assert classes.main_loop("no loop here") == []


def test_diff_says_what_was_removed_and_added():
    before = {"tensor": 128, "integer": 140, "float": 208}
    after = {"tensor": 128, "integer": 58, "float": 210, "conversion": 4}
    rows = {r["class"]: r for r in classes.diff(before, after)}
    assert rows["integer"]["change"] == -82 and rows["float"]["change"] == 2
    assert rows["conversion"]["before"] == 0 and rows["conversion"]["change"] == 4
    assert rows["total"]["change"] == -76
    html = classes.diff_table(before, after, caption="Table: x")._repr_html_()
    assert "-82" in html and "+4" in html and "Table: x" in html


def test_refined_classes_and_opcode_parsing():
    assert classes.classify("F2FP.BF16.F32.PACK_AB") == "conversion"
    assert classes.classify("CS2R") == "move" and classes.classify("HMMA.16816.F32") == "tensor"
    assert classes.classify("LDGSTS.E.BYPASS.128") == "global"
    assert classes.opcode_of("@!P0 LDSM.16.MT88.4 R4, [R9+UR4+0x1000]") == "LDSM.16.MT88.4"
    assert classes.hmma_rz(["HMMA.16816.F32 R4, R8, R12, RZ", "HMMA.16816.F32 R4, R8, R12, R4",
                            "@P0 HMMA.16816.F32 R4, R8, R2, RZ"]) == 2


# --------------------------------------------------------------------------------------------
# the ladder's SASS moves the way the chapter says
# --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module", params=["sm_80", "sm_90"])
def ladder(request):
    return {r["step"]: r for r in classes.ladder("f16", 128, request.param)}


def test_the_first_variant_is_chapter_05s_kernel(ladder):
    """Same main-loop HMMAs, shared loads and conversions as kernels/05_flash_attention_fa2.cu."""
    arch = ladder["fa2"]["arch"]
    text = toolchain.compile("05_flash_attention_fa2", arch).sass("fa2_f16_d128_w4")
    ch05 = classes.counts(text)["loop"]
    ours = ladder["fa2"]["loop"]
    for k in ("tensor", "shared", "global", "conversion", "shuffle", "barrier"):
        assert ours[k] == ch05[k], k
    assert abs(ours["integer"] - ch05["integer"]) <= 0.1 * ch05["integer"]


def test_each_variant_moves_its_classes(ladder):
    loop = {s: r["loop"] for s, r in ladder.items()}
    # strided swizzle: fewer integer (LOP3 + IMAD per ldmatrix address), the rest equal
    assert loop["strided_swizzle"]["integer"] < loop["fa2"]["integer"]
    assert loop["strided_swizzle"]["tensor"] == loop["fa2"]["tensor"]
    # strided store: the epilogue only, so the loop is unchanged and the kernel loses integers
    assert loop["strided_store"] == loop["strided_swizzle"]
    assert ladder["strided_store"]["kernel"]["integer"] < ladder["strided_swizzle"]["kernel"]["integer"]
    # pointer loads: the copies' address arithmetic and SELs go
    assert loop["pointer_loads"]["integer"] < 0.6 * loop["strided_store"]["integer"]
    assert loop["pointer_loads"]["move"] < loop["strided_store"]["move"]
    assert loop["pointer_loads"]["global"] == loop["strided_store"]["global"]
    # 32 rows a warp: fewer shared loads per HMMA
    per = lambda s: loop[s]["shared"] / loop[s]["tensor"]
    assert per("rows32") < 0.85 * per("pointer_loads")
    # two stages: one barrier a tile instead of two
    assert loop["two_stage"]["barrier"] < loop["rows32"]["barrier"]
    # wide keys: twice the HMMAs a tile, a larger HMMA share
    assert loop["wide_keys"]["tensor"] == 2 * loop["two_stage"]["tensor"]
    assert ladder["wide_keys"]["hmma_share"] > ladder["two_stage"]["hmma_share"]
    assert ladder["wide_keys"]["hmma_share"] > ladder["fa2"]["hmma_share"] + 0.05
    # skip rescale: the rescale's FMULs go behind a vote and a branch
    assert loop["skip_rescale"]["control"] > loop["wide_keys"]["control"]
    # row sums by HMMA: 8 more HMMAs a tile (2 m-tiles x 4 k-steps of 16 keys), 64 FADDs fewer
    assert loop["rowsum_mma"]["tensor"] == loop["skip_rescale"]["tensor"] + 8
    assert loop["rowsum_mma"]["float"] <= loop["skip_rescale"]["float"] - 48
    # short causal: a second kernel; the 32-row one is rung 8's
    assert loop["short_causal"] == loop["rowsum_mma"]
    # lazy rescale: the same HMMAs and a threshold test per row more; the rescale it skips stays
    # in the listing behind the vote (only the timing shows the saving)
    assert loop["lazy_rescale"]["tensor"] == loop["short_causal"]["tensor"]
    assert 0 < loop["lazy_rescale"]["float"] - loop["short_causal"]["float"] <= 16


def test_rowsum_mma_leaves_d64_as_it_was():
    a, b = (classes.variant_counts(s, "f16", 64, "sm_90") for s in ("skip_rescale", "rowsum_mma"))
    assert a["loop"] == b["loop"] and a["registers"] == b["registers"]


def test_short_causal_picks_its_16_row_kernel():
    assert kernels.uses_m16("short_causal", 1024, True, 32)
    assert kernels.uses_m16("short_causal", 2048, True, 32)
    assert not kernels.uses_m16("short_causal", 4096, True, 32)
    assert not kernels.uses_m16("short_causal", 1024, False, 32)
    assert not kernels.uses_m16("rowsum_mma", 1024, True, 32)
    assert kernels.uses_m16("lazy_rescale", 1024, True, 32)        # and every rung after it
    assert kernels.block_rows("short_causal", m16=True) == 64
    assert kernels.smem_bytes("short_causal", 128, m16=True) == (64 + 256) * 256
    names = set(kernels.build("short_causal", "sm_90").resources)
    assert {kernels.kernel_name("short_causal", t, d, m16=True)
            for t in ("f16", "bf16") for d in (64, 128)} <= names
    r = kernels.build("short_causal", "sm_90").resources
    assert all(r[kernels.kernel_name("short_causal", "f16", d, m16=True)]["spill_stores"] == 0
               for d in (64, 128))


def test_final_32_row_causal_path_matches_float64(monkeypatch, rng):
    """The interpreter's causal cases are short, so from short_causal on they run the 16-row
    kernel; this one forces the final rung's 32-row kernel (short_causal's is rowsum_mma's)."""
    monkeypatch.setattr(kernels, "M16_MAX_BLOCKS", 0)
    assert not kernels.uses_m16(kernels.FINAL, 33, True, 1)
    diet.PROBLEMS[kernels.FINAL].check("small f16 d128 causal N=33", rng)


def test_the_seeds_kernels_9_and_10_do_not_apply():
    ev = {r["seed step"]: r for r in classes.seed_evidence()}
    assert ev["10: no CS2R"]["count"] == 0
    assert ev["10: RZ as the C operand"]["count"] == 8          # every S accumulator
    assert ev["9: P to the A operand"]["count"] == 16           # one F2FP per pair of P
    assert ev["9: redundant fragment copies"]["count"] <= 20


@pytest.mark.parametrize("variant", kernels.VARIANTS)
def test_no_local_memory_in_the_main_loop(variant):
    for d in (64, 128):
        r = classes.variant_counts(variant, "f16", d, "sm_90")
        if kernels.block_rows(variant) == 64 or d == 64:
            assert r["spill_bytes"] == 0 and r["loop"]["local"] == 0, (variant, d)
        else:     # 32 rows at d = 128: a few spills, almost all outside the main loop
            assert r["loop"]["local"] <= 4, (variant, d, r["loop"]["local"])


@pytest.mark.parametrize("arch", ARCHES)
def test_every_variant_compiles(arch):
    for variant in kernels.VARIANTS:
        names = set(toolchain.compile_check(kernels.kernel_file(variant), arch).kernels)
        assert {kernels.kernel_name(variant, t, d) for t in ("f16", "bf16") for d in (64, 128)} <= names


# --------------------------------------------------------------------------------------------
# correctness
# --------------------------------------------------------------------------------------------

_SMALL = [c.name for c in diet.PROBLEMS["fa2"].interpreter_cases]
# The interpreter's budget: every variant runs the cheap causal case and one more, in turn.
_CPU = [(s, _SMALL[i % len(_SMALL)]) for i, s in enumerate(kernels.VARIANTS)]
_CPU += [(s, "small f16 d128 causal N=33") for s in kernels.VARIANTS
         if (s, "small f16 d128 causal N=33") not in _CPU]


@pytest.mark.parametrize("variant, case", _CPU, ids=[f"{s}-{c}" for s, c in _CPU])
def test_every_variant_matches_float64_small(variant, case, rng):
    diet.PROBLEMS[variant].check(case, rng)


_GPU = [(s, c.name) for s in kernels.VARIANTS for c in diet.PROBLEMS[s].cases]


@pytest.mark.gpu
@pytest.mark.parametrize("variant, case", _GPU, ids=[f"{s}-{c}" for s, c in _GPU])
def test_every_variant_matches_float64(variant, case, rng):
    diet.PROBLEMS[variant].check(case, rng)


def test_cases_cover_ragged_causal_bf16_peaky():
    cases = diet.PROBLEMS["fa2"].cases
    assert any(c.params["shape"][2] % 64 for c in cases)
    assert any(c.params.get("causal") for c in cases if not c.slow)
    assert any(c.params.get("dtype") == "bf16" for c in cases if not c.slow)
    assert any(c.params.get("q_scale", 1) > 1 for c in cases if not c.slow)
    assert all(c.params["shape"][0] * c.params["shape"][1] == 1 and c.params["shape"][2] <= 144
               for c in cases if not c.slow)


# --------------------------------------------------------------------------------------------
# arguments
# --------------------------------------------------------------------------------------------

def _qkv(shape=(1, 1, 16, 64), dtype=np.float16):
    return [np.zeros(shape, dtype) for _ in range(3)]


# NumPy inputs, moved to this mode's arrays (CuPy on a GPU) inside the test: the argument checks,
# not the array type, must be what fails
@pytest.mark.parametrize("kwargs, args, exc, msg", [
    (dict(variant="nope"), _qkv(), ValueError, "variant"),
    (dict(causal=1), _qkv(), TypeError, "causal"),
    (dict(scale=-1.0), _qkv(), ValueError, "scale"),
    ({}, _qkv(dtype=np.float32), TypeError, "q"),
    ({}, _qkv((1, 1, 16, 32)), ValueError, "head dimension"),
    ({}, _qkv((1, 1, 0, 64)), ValueError, "N"),
    ({}, [np.zeros((1, 1, 16, 64), np.float16), np.zeros((1, 1, 8, 64), np.float16),
          np.zeros((1, 1, 16, 64), np.float16)], ValueError, "k"),
])
def test_bad_arguments_are_rejected(kwargs, args, exc, msg, xp):
    with pytest.raises(exc, match=msg):
        diet.attention(*[xp.asarray(a) for a in args], **kwargs)


def test_tiles_and_shared_memory():
    assert kernels.block_rows("fa2") == 64 and kernels.block_rows("rows32") == 128
    assert kernels.keys_per_tile("rows32", 128) == 32 and kernels.keys_per_tile("wide_keys", 128) == 64
    assert kernels.smem_bytes("fa2", 128) == (64 + 128) * 256
    assert kernels.smem_bytes("wide_keys", 128) == (128 + 256) * 256 <= 227 * 1024 // 2
    assert set(kernels.CHANGES) == set(kernels.VARIANTS)
    assert [v for v in kernels.VARIANTS if kernels.has_m16(v)] == ["short_causal", "lazy_rescale"]
    assert kernels.FINAL == kernels.VARIANTS[-1] == "lazy_rescale"


def test_bench_plumbing_without_a_gpu():
    assert len(bench.sweep_configs()) == 20 and len(bench.sweep_configs(quick=True)) == 8
    assert all(c in {x.name for x in diet.PROBLEMS["fa2"].cases} for c in bench.CHECK_CASES)
    cmd = bench.stall_command("/usr/bin/ncu", "rows32")
    assert "diet_rows32_f16_d128" in cmd
    assert cmd[-7:] == ["profile", "--variant", "rows32", "--n", "4096", "--d", "128"]
    assert ncu.top_stalls({"f": {"a": 1.0, "b": 3.0, "c": "x"}}, 1) == [("b", 3.0)]
