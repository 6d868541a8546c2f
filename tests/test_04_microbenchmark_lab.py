"""Topic 04_microbenchmark, the lab's checks: a warm measurement's plan (with the stand-in timer,
anywhere), the clock bracket of a learner's kernel (SASS, anywhere; its cycles on a GPU)."""
import textwrap

import pytest

from fraglab import microbenchmark as mb


# ------------------------------------------------------------------------------------------------
# The lab's checks
# ------------------------------------------------------------------------------------------------

def _sound_warm(go):
    from fraglab import bench
    out = {}
    for first in ("smem", "regs"):
        order = [first] + [w for w in ("smem", "regs") if w != first]
        cmp = bench.compare({w: go[w] for w in order}, baseline="smem", warmup=20, repeat=1000)
        out[f"{first} first"] = {w: {"median_us": cmp.timings[w].median_ms * 1e3,
                                     "p10_us": cmp.timings[w].p10_ms * 1e3,
                                     "p90_us": cmp.timings[w].p90_ms * 1e3} for w in mb.VARIANTS}
        out[f"{first} first"]["speedup"] = cmp.ratios()["regs"]
    return out


def test_a_sound_warm_plan_passes_with_the_stand_in_timer():
    go = {w: (lambda: None) for w in mb.VARIANTS}
    with mb.recorded_compares(stand_in=True) as rec:
        summary = _sound_warm(go)
    assert [c["order"][0] for c in rec.calls] == ["smem", "regs"]
    assert mb.warm_plan_problems(rec.calls, summary) == []
    assert 1.0 < summary["smem first"]["speedup"] < 1.15          # the stand-in's made-up gap


def test_unsound_warm_plans_are_named():
    from fraglab import bench
    go = {w: (lambda: None) for w in mb.VARIANTS}
    with mb.recorded_compares(stand_in=True) as rec:
        cmp = bench.compare(go, warmup=0, repeat=100)
    problems = "\n".join(mb.warm_plan_problems(rec.calls, {}))
    assert "two calls" in problems
    with mb.recorded_compares(stand_in=True) as rec:
        a = bench.compare(go, warmup=0, repeat=100)
        b = bench.compare(go, warmup=5, repeat=2000)
    problems = "\n".join(mb.warm_plan_problems(rec.calls, {"smem first": {}}))
    assert "'regs' first" in problems and "no warm-up" in problems and "at least 1000" in problems
    assert "no 'regs first' entry" in problems and "median and spread" in problems
    summary = {"smem first": {w: {"median_us": b.timings[w].median_ms * 1e3,
                                  "p10_us": b.timings[w].p10_ms * 1e3} for w in mb.VARIANTS}}
    problems = "\n".join(mb.warm_plan_problems(rec.calls, summary))
    assert "lacks 'p90_us'" in problems and "'speedup'" in problems
    assert bench.compare is not None and rec.calls[0]["result"] is a and cmp.baseline == "smem"


def test_bracket_on_listings():
    ok = ["HMMA.16816.F32 R4, R8, R12, RZ", "@P0 CS2R R2, SR_CLOCKLO", "SHFL.BFLY PT, R3, R4, 0x1, 0x1f",
          "FMNMX R4, R4, R3, !PT", "@P0 CS2R R6, SR_CLOCKLO"]
    assert mb.bracket(ok)["ok"]
    early = [ok[0], ok[2], ok[1], ok[3], ok[4]]
    assert "comes before the first clock read" in mb.bracket(early)["problems"][0]
    assert "3 reads of the clock" in mb.bracket(ok + [ok[1]])["problems"][0]
    assert "before the last HMMA" in mb.bracket([ok[1], ok[0], *ok[2:]])["problems"][0]


CLOCKED_SRC = textwrap.dedent(r'''
    #include <mma.h>
    #include <cuda_fp16.h>
    #include "common.cuh"
    using namespace nvcuda;
    __device__ __forceinline__ long long clock_after(unsigned dep)
    { long long t = -1; if (dep != 0xFFFFFFFFu) t = clock64(); return t; }
    extern "C" __global__ void k(const __half* a, const __half* b, float* rows, long long* cycles,
                                 int n_tiles, unsigned zero)
    {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fb;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
        wmma::load_matrix_sync(fa, a, 16); wmma::load_matrix_sync(fb, b, 16);
        wmma::fill_fragment(c, 0.0f); wmma::mma_sync(c, fa, fb, c);
        TIMED
        if (lane_id() == 0) cycles[0] = t1 - t0;
    }''')
REDUCE = ("float v = fmaxf(fmaxf(c.x[0], c.x[1]), fmaxf(c.x[4], c.x[5])); "
          "v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, 1)); if (lane_id() == 0) rows[0] = v;")


def test_clock_source_problems_wants_waiting_clock_reads():
    good = CLOCKED_SRC.replace("TIMED", "unsigned d = __float_as_uint(c.x[0]) & zero; "
                               "long long t0 = clock_after(d); c.x[0] = __uint_as_float("
                               "__float_as_uint(c.x[0]) ^ ((unsigned)t0 & zero)); " + REDUCE +
                               " long long t1 = clock_after(__float_as_uint(v) & zero);")
    assert mb.clock_source_problems(good, "k", arches=("sm_90",)) == {"sm_90": []}
    naive = CLOCKED_SRC.replace("TIMED", "long long t0 = clock64(); " + REDUCE +
                                " long long t1 = clock64();")
    probs = mb.clock_source_problems(naive, "k", arches=("sm_90",))["sm_90"]
    assert probs and all("does not wait" in p for p in probs)
    assert "no kernel named" in mb.clock_source_problems(good, "kk", arches=("sm_90",))["sm_90"][0]


@pytest.mark.gpu
def test_lab_clock_kernel_runs(rng):
    src = CLOCKED_SRC.replace("TIMED", "unsigned d = __float_as_uint(c.x[0]) & zero; "
                              "long long t0 = clock_after(d); " + REDUCE +
                              " long long t1 = clock_after(__float_as_uint(v) & zero);")
    r = mb.cycles_of_source(src, "k", launches=3, rng=rng)
    assert len(r["cycles"]) == 3 and all(c > 0 for c in r["cycles"])


