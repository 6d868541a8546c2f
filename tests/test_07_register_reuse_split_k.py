"""Topic 07_register_reuse, rung 10 (split_k): tiles and a K split per shape from the shape table.
Its small cases on the PTX interpreter (CPU tier; every case on a GPU), the split plan, the table
and its nearest entry, rejected arguments, ptxas's registers and spills, the sweep's pipeline."""
import json

import numpy as np
import pytest

from fraglab import register_reuse as rr
from fraglab.register_reuse import bench, kernels, problems

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
        assert 1 <= len(cands) <= bench.SHAPE_TOP + 1
        assert all(kernels.tiles("split_k", **t) == t for t in cands)
        assert any(t["BM"] == 128 and t["BN"] == 256 and t["SPLIT"] == 1 for t in cands)


def test_sweep_shape_writes_an_entry(rng, tmp_path):
    """The quick sweep's one shape with a fake timer (every call 1 ms)."""
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
