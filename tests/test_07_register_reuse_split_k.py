"""Topic 07_register_reuse, rung 10 (split_k): tiles and a K split per shape from the shape table.
Its small cases on the PTX interpreter (CPU tier; every case on a GPU), the split plan, the table
and its nearest entry, rejected arguments, ptxas's registers and spills, the sweep's pipeline."""
import json
import re

import numpy as np
import pytest

from fraglab import register_reuse as rr
from fraglab.register_reuse import bench, kernels, problems, switches

P = rr.PROBLEMS["split_k"]
SMALL = [c for c in P.interpreter_cases]
FULL = [c for c in P.cases if c.slow]
#: The shapes the issue's goal names (#29): the table must hold each.
GOAL_SHAPES = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (6144, 6144, 6144),
               (8192, 8192, 8192), (4096, 4096, 1024), (8192, 1024, 4096)]


@pytest.mark.parametrize("case", SMALL, ids=str)
def test_small_cases_match_float64(case, rng):
    """Ragged M and N, a last slice shorter than the others, a last step that is part of a BK
    step, GUARD on whole tiles, K = 4: on the interpreter without a GPU."""
    P.check(case, rng)


@pytest.mark.gpu
@pytest.mark.parametrize("case", FULL, ids=str)
def test_every_case_matches_float64(case, rng):
    P.check(case, rng)


def test_the_split_cases_really_split():
    """The cases exercise what they are named for (a check that the plan is not all one slice)."""
    plans = {c.name: kernels.split_plan(c.params["k"], kernels.tiles_for(
        c.params["m"], c.params["n"], c.params["k"], **c.params.get("tiles", {}))["BK"],
        kernels.tiles_for(c.params["m"], c.params["n"], c.params["k"],
                          **c.params.get("tiles", {}))["SPLIT"]) for c in P.cases}
    assert plans["small_ragged_split"] == (3, 8)          # K = 20: 8 + 8 + 4
    assert plans["uneven_split"] == (3, 16)               # 5 steps: 2 + 2 + 1
    assert plans["split8"][0] == 8
    assert kernels.tiles_for(33, 36, 20, SPLIT=3)["GUARD"] == 1
    assert kernels.tiles_for(64, 64, 16, GUARD=1)["GUARD"] == 1
    for c in P.cases:                  # the switch cases go round the loop: 2+ steps a slice
        if c.name.startswith("switch_"):
            t = kernels.tiles_for(c.params["m"], c.params["n"], c.params["k"], **c.params["tiles"])
            steps = kernels.split_plan(c.params["k"], t["BK"], t["SPLIT"])[1] // t["BK"]
            assert steps >= 2, c.name


def test_a_missing_slice_fails_the_check(rng, monkeypatch):
    """If the launcher dropped the last slice of K, the float64 check says WRONG."""
    real = kernels.split_plan
    monkeypatch.setattr(kernels, "split_plan", lambda k, bk, s: (max(1, real(k, bk, s)[0] - 1),
                                                                   real(k, bk, s)[1]))
    with pytest.raises(AssertionError, match="WRONG"):
        P.check("small_ragged_split", rng)


def test_results_are_the_same_bits_every_run(rng, xp):
    """No float atomics: two runs of a split product give identical bits."""
    x = problems.inputs(rng, 33, 36, 20)
    a, b = xp.asarray(x["a"]), xp.asarray(x["b"])
    c1, c2 = (rr.sgemm(a, b, SPLIT=3) for _ in range(2))
    assert np.array_equal(np.asarray(kernels.launch.to_host(c1)),
                          np.asarray(kernels.launch.to_host(c2)))


@pytest.mark.gpu
def test_results_are_the_same_bits_every_run_on_the_gpu(rng):
    import cupy
    a = cupy.asarray(rng.standard_normal((1024, 8192), dtype=np.float32))
    b = cupy.asarray(rng.standard_normal((8192, 1024), dtype=np.float32))
    runs = [rr.sgemm(a, b, SPLIT=8) for _ in range(3)]
    assert all(bool((c == runs[0]).all()) for c in runs)


# --------------------------------------------------------------------------------------------
# The split plan, the table, the nearest entry
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("k, bk, split, plan", [
    (80, 8, 4, (4, 24)),       # 10 steps: 3 + 3 + 3 + 1
    (80, 8, 6, (5, 16)),       # 10 steps in at most 6 equal slices: 5 of 2
    (16, 8, 8, (2, 8)),        # no more slices than steps
    (20, 8, 3, (3, 8)),        # ragged K: the last step is half a step
    (4096, 16, 1, (1, 4096)),
])
def test_split_plan(k, bk, split, plan):
    assert kernels.split_plan(k, bk, split) == plan


@pytest.mark.parametrize("k", [4, 20, 132, 1000, 4096, 8188])
@pytest.mark.parametrize("split", [1, 2, 3, 5, 8, 32])
def test_split_plan_covers_k_once_with_no_empty_slice(k, split):
    splits, k_split = kernels.split_plan(k, 8, split)
    starts = [z * k_split for z in range(splits)]
    assert 1 <= splits <= split and k_split % 8 == 0
    assert all(s < k for s in starts) and splits * k_split >= k > (splits - 1) * k_split


def test_the_record_holds_every_shape_of_the_goal():
    doc = json.loads(kernels.SHAPE_TABLE.read_text())
    table = doc["results"]
    shapes = [tuple(e["shape"]) for e in table["entries"]]
    assert set(GOAL_SHAPES) <= set(shapes) and set(kernels.TABLE_SHAPES) <= set(shapes)
    assert table["measured"] or table["status"].startswith("unmeasured")
    for e in table["entries"]:
        assert kernels.tiles("split_k", **e["tiles"])          # runnable tiles
        assert e["measured"] == table["measured"]


def test_tiles_for_returns_the_entry_of_a_table_shape():
    for e in kernels.shape_table()["entries"]:
        t = kernels.tiles_for(*e["shape"])
        assert {k: t[k] for k in e["tiles"] if k != "SPLIT"} == \
            {k: v for k, v in e["tiles"].items() if k != "SPLIT"}
        assert t["SPLIT"] == kernels.split_plan(e["shape"][2], t["BK"], e["tiles"]["SPLIT"])[0]


def test_nearest_entry_is_by_log_ratio():
    table = {"entries": [{"shape": [1024] * 3, "tiles": {"BM": 64}},
                         {"shape": [4096] * 3, "tiles": {"BM": 128}}]}
    assert kernels.nearest_entry(1500, 1500, 1500, table)["shape"] == [1024] * 3   # log2: 0.55
    assert kernels.nearest_entry(2900, 2900, 2900, table)["shape"] == [4096] * 3
    assert kernels.nearest_entry(1, 4, 4, table)["shape"] == [1024] * 3
    assert kernels.nearest_entry(4096, 4096, 100, table)["shape"] == [4096] * 3


@pytest.mark.parametrize("shape", [(1, 4, 4), (100000, 8, 4), (1000, 1000, 1000), (3, 4, 65532),
                                   (8192, 8192, 8192), (777, 1024, 12)])
def test_tiles_for_never_fails_on_a_shape(shape):
    t = kernels.tiles_for(*shape)
    assert kernels.tiles("split_k", **t) == t
    assert t["GUARD"] == (0 if kernels.whole_tiles(*shape, t) else 1)
    assert t["SPLIT"] <= -(-shape[2] // t["BK"])


def test_a_missing_table_falls_back_to_the_wave_model(tmp_path):
    table = kernels.shape_table(tmp_path / "absent.json")
    assert table["measured"] is False and "unmeasured" in table["status"]
    assert [tuple(e["shape"]) for e in table["entries"]] == list(kernels.TABLE_SHAPES)
    assert kernels.shape_table() is not table                    # the record again after


def test_the_wave_model_splits_a_grid_that_leaves_sms_idle():
    """1024^3 in rung 9's 128x256 tiles is 32 blocks for 132 SMs; split in 4, 128 blocks take
    one wave that is 4 times shorter, plus the reduction."""
    t = kernels.SHAPE_CONFIGS[0]
    one, four = (kernels.wave_model(1024, 1024, 1024, t, s, 50.0) for s in (1, 4))
    assert four < one / 2
    e = kernels.seed_entry(1024, 1024, 1024)
    blocks = (1024 // e["tiles"]["BM"]) * (1024 // e["tiles"]["BN"]) * e["tiles"]["SPLIT"]
    assert blocks >= 100                                       # most of the 132 SMs busy


# --------------------------------------------------------------------------------------------
# Rejected arguments (before any launch)
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("m, n, k, over, msg", [
    (8, 6, 8, {}, "N to be a multiple of 4"),
    (8, 8, 6, {}, "K to be a multiple of 4"),
    (33, 36, 20, {"GUARD": 0}, "multiple of BM"),
    (64, 64, 16, {"SPLIT": 0}, "SPLIT"),
    (64, 64, 16, {"SPLIT": 33}, "at most 32"),
    (64, 64, 16, {"GUARD": 2}, "GUARD is 0"),
    (64, 64, 16, {"TM": 8}, "no tile parameter TM"),
])
def test_bad_shapes_and_tiles_are_rejected(m, n, k, over, msg, xp):
    a, b = xp.zeros((m, k), xp.float32), xp.zeros((k, n), xp.float32)
    with pytest.raises(ValueError, match=msg):
        rr.sgemm(a, b, **over)


def test_misaligned_views_are_rejected(xp):
    buf = xp.zeros(64 * 8 + 1, xp.float32)
    a = buf[1:].reshape(64, 8)
    with pytest.raises(ValueError, match="16-byte aligned"):
        rr.sgemm(a, xp.zeros((8, 64), xp.float32))


# --------------------------------------------------------------------------------------------
# ptxas: every table entry's build, whole tiles and guarded, without local memory (sm_90)
# --------------------------------------------------------------------------------------------

_BUILDS = sorted({json.dumps({**kernels.defines(kernels.tiles("split_k", **e["tiles"])),
                              "GUARD": g}, sort_keys=True)
                  for e in kernels.shape_table()["entries"] for g in (0, 1)})


@pytest.mark.parametrize("defines", _BUILDS)
def test_table_builds_do_not_spill(defines):
    d = json.loads(defines)
    res = kernels.build("split_k", "sm_90", **d).resources
    assert res["sgemm_split_k"]["spill_stores"] == res["sgemm_split_k"]["spill_loads"] == 0
    assert res["sgemm_split_k"]["stack_frame"] == 0
    assert res["sgemm_split_k_reduce"]["spill_stores"] == 0


# --------------------------------------------------------------------------------------------
# The sweep's pipeline (a smoke run: the interpreter or a fake timer, nothing measured)
# --------------------------------------------------------------------------------------------

def test_candidates_are_few_valid_and_keep_rung_9():
    for shape in kernels.TABLE_SHAPES:
        cands = bench.shape_candidates(*shape)
        assert 1 <= len(cands) <= bench.SHAPE_TOP + 1 + bench.SWITCH_BASES * len(switches.TRIALS)
        assert all(kernels.tiles("split_k", **t) == t for t in cands)
        assert any(t["BM"] == 128 and t["BN"] == 256 and t["SPLIT"] == 1 for t in cands)


def test_sweep_shape_writes_an_entry(rng, tmp_path):
    """The quick sweep's one shape with a fake timer (every call 1 ms), a switch trial too."""
    def fake(fn, n, flush):
        fn()
        return [1.0] * n
    res = bench.sweep_shapes(tmp_path, quick=True, _timer=fake)
    doc = json.loads((tmp_path / "shape_table.json").read_text())
    assert doc["results"]["measured"] is False and len(doc["results"]["entries"]) == 1
    e = res["entries"][0]
    assert e["shape"] == list(bench.QUICK_SHAPES[0]) and kernels.tiles("split_k", **e["tiles"])
    assert all("scaled_diff" in c or "skipped" in c for c in res["sweep"][0]["candidates"])
    assert "36x40x20" in (tmp_path / "shape_log.txt").read_text()
    assert any(c["tiles"].get("REGDB") for c in res["sweep"][0]["candidates"])


# --------------------------------------------------------------------------------------------
# The tuning switches (REGDB, SWIZZLE, ORDER): banks from the layout, SASS evidence, rejections
# --------------------------------------------------------------------------------------------

BIG = dict(BM=128, BN=256, BK=16, WM=64, WN=64, LM=4, MINB=1, GROUP=8)    # rung 9's tiles
MID = dict(BM=128, BN=128, BK=8, WM=64, WN=64, LM=4, MINB=2, GROUP=8)     # the table's pick


def test_the_padded_a_tile_conflicts_at_bk16_and_the_swizzle_does_not():
    """The A tile's transposed store: 2-way conflicts with BK = 16 padded (rows k and k + 8 in
    one bank), none swizzled; BK = 8 padded is already conflict-free; loads stay ideal."""
    padded, swz = switches.bank_report(BIG), switches.bank_report({**BIG, "SWIZZLE": 1})
    a = "A store (STS.32)"
    assert padded[a]["wavefronts"] == 2 * padded[a]["ideal"] and padded[a]["worst"] == 2
    assert swz[a]["wavefronts"] == swz[a]["ideal"]
    for rep in (swz, switches.bank_report(MID), switches.bank_report({**MID, "SWIZZLE": 1})):
        assert all(r["wavefronts"] == r["ideal"] for r in rep.values()), rep
    assert switches.padded_conflicts(BIG) and not switches.padded_conflicts(MID)


def test_the_bank_model_fails_a_swizzle_without_its_xor(monkeypatch):
    """Unpadded and unswizzled (the XOR dropped), the same store has 4-way conflicts: the
    model sees them."""
    monkeypatch.setattr(switches, "xor_of", lambda t, k: 0)
    rep = switches.bank_report({**BIG, "SWIZZLE": 1})
    assert rep["A store (STS.32)"]["worst"] == 4
    assert switches.wavefronts([[0], [32], [64], [1]]) == (3, 1)      # 3 words in bank 0
    assert switches.wavefronts([[0]] * 32) == (1, 1)                  # one word, broadcast


@pytest.mark.parametrize("over", [{"REGDB": 1}, {"SWIZZLE": 1}, {"ORDER": 1}, {"ORDER": 2},
                                  {"REGDB": 1, "SWIZZLE": 1, "ORDER": 1}, {"LM": 8}])
@pytest.mark.parametrize("base", [MID, BIG], ids=["128x128x8", "128x256x16"])
def test_switch_builds_do_not_spill_and_keep_lds128(base, over):
    e = switches.sass_evidence({**base, **over})
    assert e["spill_bytes"] == 0 and e["stack_frame"] == 0
    assert set(e["lds"]) == {"LDS.128"} and e["words_per_ffma"] == 0.1875     # (16+8)/128
    assert e["ffma"] == 128 * base["BK"] and e["registers"] <= 255


def test_regdb_puts_the_last_ffmas_after_the_barrier():
    """Without REGDB the step's FFMAs all come before the barrier (the next step's first LDS
    waits with nothing to hide it); with it, the last k's FFMAs follow the barrier."""
    for base in (MID, BIG):
        assert switches.sass_evidence(base)["ffma_after_barrier"] == 0
        assert switches.sass_evidence({**base, "REGDB": 1})["ffma_after_barrier"] >= 32


def test_the_row_snake_order_reads_fewer_operands_from_the_register_file():
    for base in (MID, BIG):
        rows, snake = (switches.sass_evidence({**base, "ORDER": o}) for o in (0, 1))
        assert snake["reuse_flags"] > rows["reuse_flags"]
        assert snake["from_file"] < rows["from_file"]


def test_register_reads_follow_the_reuse_cache():
    body = ["FFMA R10, R2.reuse, R4, R10 ;", "FFMA R11, R2, R5, R11 ;", "FFMA R12, R2, R8, R12 ;"]
    c = switches.register_reads(body)
    assert c["reuse_flags"] == 1 and c["from_cache"] == 1 and c["from_file"] == 8
    # 1st: R2, R4, R10 from the file (R2 and R10 in bank 2 of 4; all three even);
    # 2nd: R2 from the cache, R5 and R11 (banks 1, 3); 3rd: R2 again from the file (flag gone)
    assert c["conflicts_mod4"] == 2 and c["conflicts_mod2"] == 2


@pytest.mark.parametrize("over, msg", [
    ({"ORDER": 4}, "ORDER is one of 0, 1, 2, 3"),
    ({"REGDB": 2}, "REGDB is one of 0, 1"),
    ({"SWIZZLE": 1, "BM": 128, "BN": 128, "BK": 12, "WM": 64, "WN": 64}, "BK dividing 32"),
    ({"SWIZZLE": 1, "BM": 64, "BN": 64, "WM": 16, "WN": 64, "LM": 2, "MINB": 4},
     "WM >= 32"),
    ({"REGDB": -1}, "REGDB"),
])
def test_bad_switches_are_rejected(over, msg, xp):
    a, b = xp.zeros((64, 16), xp.float32), xp.zeros((16, 64), xp.float32)
    with pytest.raises(ValueError, match=msg):
        rr.sgemm(a, b, **over)


def test_only_rung_10_takes_the_switches():
    with pytest.raises(ValueError, match="no tile parameter REGDB"):
        kernels.tiles("autotuned", REGDB=1)


def test_the_sweep_tries_the_switches_on_two_tiles_and_labels_them():
    cands = bench.shape_candidates(4096, 4096, 4096)
    labels = [kernels.config_label(t) for t in cands]
    assert len(labels) == len(set(labels))                # every build and timing has its name
    on = [t for t in cands if any(t.get(k) for k in kernels.SWITCHES) or t["LM"] != 4]
    assert {bench._tile_shape(t) for t in on} == {(128, 128, 8, 64, 64, 4), (128, 256, 16, 64, 64, 4),
                                                  (128, 128, 8, 64, 64, 8), (128, 256, 16, 64, 64, 8)}
    assert not any(t["SWIZZLE"] for t in on if t["BK"] == 8)    # no conflicts there to remove
    assert len(cands) <= bench.SHAPE_TOP + 1 + bench.SWITCH_BASES * len(switches.TRIALS)
    assert kernels.config_label({**MID, "SPLIT": 1, "REGDB": 1, "ORDER": 1}) == \
        "128x128x8/64x64 M2 G8 S1 RDB O1"
    assert kernels.config_label({**MID, "SPLIT": 1, "REGDB": 0}) == "128x128x8/64x64 M2 G8 S1"


def test_switches_off_leave_rung_10_as_it_was():
    """All switches at 0 run sgemm_double_buffer_tile (rung 9's loop): the main loop of
    rung 10 with rung 9's tiles has rung 9's instructions (up to register numbers, offsets and
    the .reuse flags that follow them; ptxas orders them a little differently, rung 10 having
    more kernel arguments)."""
    from collections import Counter
    from fraglab import sass
    r9 = sass.main_loop(kernels.build("autotuned", "sm_90").sass("sgemm_autotuned"))
    r10 = sass.main_loop(kernels.build("split_k", "sm_90", **kernels.TILES["autotuned"])
                         .sass("sgemm_split_k"))
    names = r"R\d+|UR\d+|0x[0-9a-f]+|L_x_\d+"     # registers, offsets, labels
    strip = lambda body: [re.sub(names, "_", x.replace(".reuse", "")) for x in body]
    assert Counter(strip(r10)) == Counter(strip(r9))
