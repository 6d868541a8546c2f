"""Asynchronous hazards on the interpreter (sm_90a), each reported with both CUDA lines: the
operation in flight and the access that races it.

* a register of a wgmma still in flight (its accumulator) read before wgmma.wait_group;
* a shared read of bytes a cp.async or a bulk copy is still writing (not waited for by anyone);
* a shared read of bytes a copy wrote and another warp published, by a warp that did not wait on
  the mbarrier phase that publishes them (the copy landed "by luck");
* a shared write to bytes a wgmma in flight reads, and a stage released (mbarrier.arrive) before
  the wgmma reading it completed, then refilled by the producer (plain stores, cp.async, bulk
  copy);
* and the legal pipelines: these kernels with the waits in place, chapter 10's FA-3 step on more
  key tiles than its rings have stages, its mbarrier ring and warp-specialised row sums.

CPU only (NVRTC needs no GPU); about 10-15 s, most of it the FA-3 kernel."""
from __future__ import annotations

import numpy as np
import pytest

from fraglab import ptx
from fraglab.fa3_pipelining import lab, problems
from fraglab.problem import Case
from ptx_snippets import MBARRIER, TYPES

pytestmark = pytest.mark.skipif(not ptx.SUPPORTS_SM90A, reason="no sm_90a interpreter")

HEADER = TYPES + MBARRIER + r"""
__device__ void cp16(u32 dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(src) : "memory"); }
__device__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ void cp_wait0() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }
// buf (128 floats) zeroed, so that a read too early is no uninitialised read but a race with the
// copy, and `full` initialised for `count` arrivals (a bulk copy's: fenced for the async proxy);
// then the block's barrier
__device__ void setup(float* buf, u64* full, u32 count, bool bulk_copy) {
    for (int i = threadIdx.x; i < 128; i += blockDim.x) buf[i] = 0.f;
    if (threadIdx.x == 0) init(smem_u32(full), count);
    if (bulk_copy) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
}
"""

SRC = r"""
// warp 0 copies 512 bytes with cp.async and publishes them on `full` (32 arrivals); warps 1, 2
// wait on `full` and read them.
extern "C" __global__ void handoff(const float* in, float* out) {
    __shared__ __align__(16) float buf[128];
    __shared__ __align__(8) u64 full;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    setup(buf, &full, 32, false);
    if (warp == 0) {
#ifdef TWO_SITES
        // two cp.async sites, one wait, one arrival: the arrival publishes both sites' copies
        if (lane < 16) cp16(smem_u32(&buf[4 * lane]), in + 4 * lane);    // SITE_A
        else cp16(smem_u32(&buf[4 * lane]), in + 4 * lane);              // SITE_B
#else
        cp16(smem_u32(&buf[4 * lane]), in + 4 * lane);                   // CP_COPY
#endif
        cp_commit();
#ifndef ARRIVE_FIRST
        cp_wait0();
#endif
        arrive(smem_u32(&full));
#ifdef ARRIVE_FIRST
        cp_wait0();                      // a bug: the arrival published bytes not there yet
#endif
    } else {
#ifndef NO_WAIT
        wait(smem_u32(&full), 0);
#endif
        out[32 * (warp - 1) + lane] = buf[(4 * lane + 5) % 128];           // CP_READ
    }
}

// warp 0 lane 0 bulk-copies 512 bytes completing on `full` (issued before the __syncthreads);
// warp 1 waits, warp 2 waits unless SKIP2 (then it reads what warp 1's wait landed, unordered),
// neither waits with NO_WAIT
extern "C" __global__ void bulk_handoff(const float* in, float* out) {
    __shared__ __align__(128) float buf[128];
    __shared__ __align__(8) u64 full;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    setup(buf, &full, 1, true);
    if (threadIdx.x == 0) {
        arrive_tx(smem_u32(&full), 512);
        bulk(smem_u32(buf), in, 512, smem_u32(&full));                     // BULK_COPY
    }
    __syncthreads();                     // issued, not complete: only the mbarrier says that
    if (warp > 0) {
#ifndef NO_WAIT
#ifdef SKIP2
        if (warp == 1)
#endif
        wait(smem_u32(&full), 0);
#endif
        out[32 * (warp - 1) + lane] = buf[(4 * lane + 5) % 128];           // BULK_READ
    }
}

// warps 4-7 (a warpgroup) multiply sa (64 x 16) by sb (8 x 16) with one wgmma, then release sb
// on `empty` (4 arrivals); warp 0 refills sb once released: plain stores (REFILL 0), cp.async
// (1) or a bulk copy (2)
extern "C" __global__ void refill(const u16* a, float* out) {
    __shared__ __align__(1024) u16 sa[64 * 16];
    __shared__ __align__(1024) u16 sb[8 * 16];
    __shared__ __align__(8) u64 empty, full;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    for (int i = tid; i < 64 * 16; i += blockDim.x) { sa[i] = a[i]; if (i < 128) sb[i] = a[i]; }
    if (tid == 0) { init(smem_u32(&empty), 4); init(smem_u32(&full), 1); }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (warp == 0) {
        if (lane == 0) wait(smem_u32(&empty), 0);
        __syncwarp();
#if REFILL == 0
        for (int i = lane; i < 128; i += 32) sb[i] = 0x3c00;                // REFILL_0
#elif REFILL == 1
        if (lane < 16) cp16(smem_u32(sb) + 16 * lane, a + 8 * lane);      // REFILL_1
        cp_commit(); cp_wait0();
#else
        if (lane == 0) { arrive_tx(smem_u32(&full), 256); bulk(smem_u32(sb), a, 256, smem_u32(&full)); }  // REFILL_2
        if (lane == 0) wait(smem_u32(&full), 0);
#endif
    }
    if (warp < 4) return;
    const u64 lay = ((u64)(128 >> 4) << 16) | ((u64)(256 >> 4) << 32);
    u64 da = lay | (smem_u32(sa) >> 4), db = lay | (smem_u32(sb) >> 4);
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    asm volatile("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0, %1, %2, %3}, %4, %5, 0, 1, 1, 0, 0;"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "l"(da), "l"(db));  // WGMMA
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#ifdef EARLY_RELEASE
    if (lane == 0) arrive(smem_u32(&empty));         // EARLY_ARRIVE
#endif
#ifdef EARLY_READ
    out[tid] = d[0];                                  // ACC_READ
#endif
#ifdef OVERWRITE
    if (lane == 0) sb[warp] = 0;                      // OVERWRITE_LINE
#endif
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#ifndef EARLY_RELEASE
    __syncwarp();
    if (lane == 0) arrive(smem_u32(&empty));
#endif
    for (int i = 0; i < 4; ++i) out[(tid - 128) * 4 + i] = d[i];
}
"""


def _line(marker: str) -> str:
    for i, ln in enumerate((HEADER + SRC).splitlines(), 1):
        if marker in ln:
            return f"hazards.cu:{i}"
    raise AssertionError(marker)


def _launch(kernel, block, args, **defines):
    prog = ptx.load("hazards.cu", "sm_90a", source=HEADER + SRC, defines=defines or None)
    return ptx.launch(prog, kernel, grid=1, block=block, args=args)


def _floats(rng, n=128):
    return rng.standard_normal(n).astype(np.float32)


def _both_lines(msg: str, first: str, second: str) -> None:
    assert _line(first) in msg and _line(second) in msg, msg


# ---- reads before the copy is waited for ---------------------------------------------------------

def test_copies_waited_for_are_read_without_a_report(rng):
    x = _floats(rng)
    want = np.tile(x[(4 * np.arange(32) + 5) % 128], 2)
    for kernel, defines in (("handoff", {}), ("bulk_handoff", {}), ("handoff", {"TWO_SITES": 1})):
        out = np.full(64, np.nan, np.float32)
        _launch(kernel, 96, (x, out), **defines)
        np.testing.assert_array_equal(out, want)


def test_an_arrival_publishes_every_cp_async_site_of_its_warp(rng):
    """Copies from two cp.async sites of one warp, landed by one wait_group and published by one
    arrival, are all visible to a reader that waited for that arrival (the interpreter once
    published the latest site only, and reported the other's bytes as a race); a reader that did
    not wait is still reported."""
    x = _floats(rng)
    out = np.full(64, np.nan, np.float32)
    _launch("handoff", 96, (x, out), TWO_SITES=1)
    assert np.isfinite(out).all()
    with pytest.raises(ptx.SharedRace, match="before a wait that covers"):
        _launch("handoff", 96, (x, np.zeros(64, np.float32)), TWO_SITES=1, NO_WAIT=1)


@pytest.mark.parametrize("kernel,defines,copy,what", [
    ("handoff", {"ARRIVE_FIRST": 1}, "CP_COPY", "still writing"),        # published before landing
    ("handoff", {"NO_WAIT": 1}, "CP_COPY", "before a wait that covers"),  # landed, not waited for
    ("bulk_handoff", {"NO_WAIT": 1}, "BULK_COPY", "still writing"),      # bulk copy in flight
    ("bulk_handoff", {"SKIP2": 1}, "BULK_COPY", "before a wait that covers"),  # landed for warp 1
], ids=["cp.async-arrive-before-wait", "cp.async-read-without-wait", "bulk-in-flight",
        "bulk-landed-for-another-warp"])
def test_a_read_before_the_wait_covering_its_copy_is_a_race(rng, kernel, defines, copy, what):
    with pytest.raises(ptx.SharedRace, match=what) as e:
        _launch(kernel, 96, (_floats(rng), np.zeros(64, np.float32)), **defines)
    read = "CP_READ" if kernel == "handoff" else "BULK_READ"
    _both_lines(str(e.value), copy, read)
    assert _line(read) in e.value.source                  # reported at the read


# ---- wgmma operands in flight -----------------------------------------------------------------

def _refill(rng, refill=0, **defines):
    a = rng.integers(-3, 4, (64, 16)).astype(np.float16).view(np.uint16)
    out = np.full(128 * 4, np.nan, np.float32)
    _launch("refill", 256, (a, out), REFILL=refill, **defines)
    return out


@pytest.mark.parametrize("refill", [0, 1, 2], ids=["stores", "cp.async", "bulk"])
def test_a_stage_refilled_after_the_wgmma_completed_is_fine(rng, refill):
    assert np.isfinite(_refill(rng, refill)).all()


@pytest.mark.parametrize("refill", [0, 1, 2], ids=["stores", "cp.async", "bulk"])
def test_a_stage_released_before_its_wgmma_completed_and_refilled_is_reported(rng, refill):
    with pytest.raises(ptx.WgmmaHazard, match="changed before the wgmma.wait_group") as e:
        _refill(rng, refill, EARLY_RELEASE=1)
    msg = str(e.value)
    _both_lines(msg, "WGMMA", f"REFILL_{refill}")
    assert "released the stage" in msg and _line("EARLY_ARRIVE") in msg
    assert _line(f"REFILL_{refill}") in e.value.source and e.value.warp == 0


def test_a_write_to_an_operand_in_flight_is_reported_at_the_write(rng):
    with pytest.raises(ptx.WgmmaHazard, match="changed before the wgmma.wait_group") as e:
        _refill(rng, 0, OVERWRITE=1)
    _both_lines(str(e.value), "WGMMA", "OVERWRITE_LINE")
    assert _line("OVERWRITE_LINE") in e.value.source


def test_an_accumulator_read_in_flight_names_the_wgmma(rng):
    with pytest.raises(ptx.WgmmaHazard, match="still in flight") as e:
        _refill(rng, 0, EARLY_READ=1)
    _both_lines(str(e.value), "WGMMA", "ACC_READ")
    assert _line("ACC_READ") in e.value.source


# ---- chapter 10's legal pipelines are not flagged ----------------------------------------------

def test_chapter_10_pipelines_on_wrapping_rings_are_not_flagged(rng):
    """The lab's two-stage step over five key tiles (three stages: every K and V stage is
    released and refilled); the mbarrier ring and the warp-specialised row sums (bulk copies and
    plain loads through mbarriers). (The other variants: tests/test_10_fa3_pipelining_kernels.py
    runs the same case.)"""
    case = next(c for c in problems.ATTENTION["twostage"].interpreter_cases
                if c.params.get("first_cta"))
    assert -(-case.params["shape"][2] // 128) > 3                     # more tiles than stages
    src = lab.step_source(lab.course_step())

    def run(q, k, v, dtype, causal, scale, first_cta, **_):
        return problems.run_attention(q, k, v, dtype, causal, scale, variant="twostage",
                                      first_cta=first_cta, source=src)
    problems.ATTENTION["twostage"].check(case, rng, run=run)
    problems.MBARRIER_RING.check(Case("7 chunks", chunks=7), rng)
    problems.WARPSPEC_ROWSUM.check(Case("5 tiles", tiles=5), rng)
