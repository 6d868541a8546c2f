"""Warp scheduling of the PTX interpreter: spinning warps yield (flag hand-offs between warps
finish in every order), spins that nothing can end are reported as deadlocks, loops that make
progress are left alone, and seeded random interleavings (``schedule=seed``, ``seeds=``) expose
races the fixed order misses. CPU tier; the GPU tests run the same PTX on the hardware."""
from __future__ import annotations

import time

import numpy as np
import pytest

from fraglab import ptx
from fraglab.ptx.program import ScheduleDependent

from test_ptx_semantics import build, line_of

ORDERS = ["fixed", "reverse", 0, 1, 2, 3]

# ---- hand-offs between warps through a flag in shared memory ------------------------------------

# The producer warp writes its data (global memory, which the shared-memory race checker does not
# track: see the note on RING), fences, then raises the flag; the consumer spins on the flag,
# fences, then reads. `producer` picks which of the two warps produces: warp 1 spinning while
# warp 0 produces, and warp 0 spinning (it runs first in the fixed order) while warp 1 produces.
HANDOFF = r'''
extern "C" __global__ void handoff(int* buf, int* out, int producer)
{
    __shared__ volatile int flag;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (threadIdx.x == 0) flag = 0;
    __syncthreads();
    if (warp == producer) {
        buf[lane] = lane * 3 + 1;
        __threadfence_block();
        if (lane == 0) flag = 1;
    } else {
        while (flag == 0) { }                    // SPIN
        __threadfence_block();
        out[lane] = buf[lane] + 100;
    }
}
'''


def run_handoff(producer, schedule, **kw):
    buf, out = np.zeros(32, np.int32), np.zeros(32, np.int32)
    res = ptx.launch(build(HANDOFF), "handoff", 1, 64, (buf, out, np.int32(producer)),
                     schedule=schedule, **kw)
    return out, res


@pytest.mark.parametrize("producer", [0, 1])
@pytest.mark.parametrize("schedule", ORDERS)
def test_flag_handoff_finishes_in_every_order(producer, schedule):
    out, res = run_handoff(producer, schedule, max_steps=5000)
    assert (out == np.arange(32) * 3 + 101).all()
    assert res.steps < 500                       # the spinner yielded instead of burning steps
    assert res.schedule == schedule and res.reverse_warps == (schedule == "reverse")


def test_reverse_warps_and_options_are_aliases():
    assert run_handoff(1, None, reverse_warps=True)[1].schedule == "reverse"
    with ptx.options(reverse_warps=True):
        assert run_handoff(1, None)[1].schedule == "reverse"
    with ptx.options(schedule=5):
        assert run_handoff(1, None)[1].schedule == 5
        assert run_handoff(1, "fixed")[1].schedule == "fixed"     # an argument beats options
    with ptx.options(schedule=5):
        with ptx.options(reverse_warps=True):            # the inner one wins
            assert run_handoff(1, None)[1].schedule == "reverse"
    assert run_handoff(1, None)[1].schedule == "fixed"
    with pytest.raises(ValueError, match="contradicts"):
        run_handoff(1, 3, reverse_warps=True)
    with pytest.raises(ValueError, match="schedule must be"):
        run_handoff(1, "random")
    with pytest.raises(TypeError, match="ptx.options takes"):
        with ptx.options(interleave=3):
            pass


# ---- the same hand-off with the data in shared memory: ordered by fences and the flag -----------

# Warp `producer` writes shared data, fences, raises a flag (volatile, or an atomic); the other
# warp spins on the flag, fences, reads the data. The race checker orders the data by the fences
# and the flag (release / acquire); without either fence the read is a race.
FENCED = r'''
template <bool PRODUCER_FENCE, bool CONSUMER_FENCE, bool ATOMIC>
__device__ void handoff(int* out, int producer)
{
    __shared__ int data[32];
    __shared__ int flag;
    volatile int* vflag = &flag;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (threadIdx.x == 0) flag = 0;
    __syncthreads();
    if (warp == producer) {
        data[lane] = lane * 3 + 1;                                   // DATA
        if (PRODUCER_FENCE) { if (ATOMIC) __threadfence(); else __threadfence_block(); }
        if (lane == 0) { if (ATOMIC) atomicExch(&flag, 1); else *vflag = 1; }
    } else {
        if (ATOMIC) { while (atomicAdd(&flag, 0) == 0) { } }
        else { while (*vflag == 0) { } }
        if (CONSUMER_FENCE) { if (ATOMIC) __threadfence(); else __threadfence_block(); }
        out[lane] = data[lane] + 100;                                // READ
    }
}
extern "C" __global__ void fenced(int* out, int p) { handoff<true, true, false>(out, p); }
extern "C" __global__ void fenced_atomic(int* out, int p) { handoff<true, true, true>(out, p); }
extern "C" __global__ void no_producer_fence(int* out, int p) { handoff<false, true, false>(out, p); }
extern "C" __global__ void no_consumer_fence(int* out, int p) { handoff<true, false, false>(out, p); }
'''


@pytest.mark.parametrize("schedule", ["fixed", "reverse", 0])
def test_a_fenced_flag_hands_over_shared_data(schedule):
    """Both fences: the hand-off is ordered (no race), with a volatile flag and
    __threadfence_block(), or an atomic flag and __threadfence(), whichever warp produces."""
    prog = build(FENCED)
    for kernel in ("fenced", "fenced_atomic"):
        for producer in (0, 1):
            out = np.zeros(32, np.int32)
            ptx.launch(prog, kernel, 1, 64, (out, np.int32(producer)), schedule=schedule)
            assert (out == np.arange(32) * 3 + 101).all(), (kernel, producer)


@pytest.mark.parametrize("kernel", ["no_producer_fence", "no_consumer_fence"])
def test_a_flag_without_its_fence_is_still_a_race_naming_both_lines(kernel):
    """Without the producer's fence (or the consumer's) the flag orders nothing: the read is
    reported, naming the reading line and the line that wrote the data."""
    with pytest.raises(ptx.SharedRace) as e:
        ptx.launch(build(FENCED), kernel, 1, 64, (np.zeros(32, np.int32), np.int32(0)))
    msg = str(e.value)
    line = line_of(FENCED, "DATA")
    assert f"thread 32 reads shared address 0, which thread 0 wrote at sem.cu:{line} " in msg
    assert "(`st.shared" in msg
    assert e.value.source.startswith(f"sem.cu:{line_of(FENCED, 'READ')}")


# ---- a ring of slots between a producer and a consumer warp --------------------------------------

# Slots, head and tail are volatile: the race checker exempts volatile accesses. (It orders
# shared memory by barriers only, so plain slot accesses ordered by the fence + flag protocol
# would be reported as a race; see the README.)
RING = r'''
#define SLOTS 3
extern "C" __global__ void ring(const int* in, int* out, int n)
{
    __shared__ volatile int slot[SLOTS][32];
    __shared__ volatile int head, tail;          // items produced, items consumed
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (threadIdx.x == 0) { head = 0; tail = 0; }
    __syncthreads();
    if (warp == 0) {                             // producer
        for (int i = 0; i < n; i++) {
            while (head - tail == SLOTS) { }     // FULL
            slot[i % SLOTS][lane] = in[i * 32 + lane] * 2;
            __threadfence_block();
            __syncwarp();
            if (lane == 0) head = i + 1;
        }
    } else if (warp == 2) {                      // consumer (warp 1 only watches)
        for (int i = 0; i < n; i++) {
            while (head == i) { }                // EMPTY
            __threadfence_block();
            out[i * 32 + lane] = slot[i % SLOTS][lane] + 1;
            __syncwarp();
            if (lane == 0) tail = i + 1;
        }
    }
}'''


def run_ring(schedule, n=10):
    x = np.arange(n * 32, dtype=np.int32) * 7 - 50
    out = np.zeros(n * 32, np.int32)
    res = ptx.launch(build(RING), "ring", 1, 96, (x, out, np.int32(n)), schedule=schedule)
    return x, out, res


@pytest.mark.parametrize("schedule", ORDERS)
def test_producer_consumer_ring(schedule):
    x, out, res = run_ring(schedule)
    assert (out == 2 * x + 1).all()


# ---- spins within one warp ----------------------------------------------------------------------

# Lanes of one warp wait for a flag that another lane of the same warp sets later (Volta's
# independent thread scheduling makes this legal). `first` decides which group of lanes comes
# first in the PTX: the spinning lanes at the lower PC (the minimum-PC rule would run them
# forever) or at the higher one.
INTRA = r'''
extern "C" __global__ void intra(int* out, int first)
{
    __shared__ volatile int flag;
    int lane = threadIdx.x;
    if (lane == 0) flag = 0;
    __syncwarp();
    if ((lane < 4) == (first != 0)) {
        if (lane < 4) { while (flag == 0) { } out[lane] = flag; }      // SPIN
        else { out[lane] = lane; if (lane == 9) flag = 77; }
    } else {
        if (lane < 4) { while (flag == 0) { } out[lane] = flag; }
        else { out[lane] = lane; if (lane == 9) flag = 77; }
    }
}'''


@pytest.mark.parametrize("first", [0, 1])
@pytest.mark.parametrize("schedule", ["fixed", 0, 1])
def test_spin_on_another_lane_of_the_warp(first, schedule):
    out = np.zeros(32, np.int32)
    ptx.launch(build(INTRA), "intra", 1, 32, (out, np.int32(first)), schedule=schedule,
               max_steps=5000)
    assert (out[:4] == 77).all() and (out[4:] == np.arange(4, 32)).all()


# A lock taken with atomicCAS, by every thread of two warps in turn (the losing lanes of a warp
# retry while the winner, at a higher PC, must get to run: a store-spin, since the CAS writes).
LOCK = r'''
extern "C" __global__ void lock(int* out, int* mutex)
{
    __shared__ int total;
    if (threadIdx.x == 0) total = 0;
    __syncthreads();
    bool done = false;
    while (!done) {
        if (atomicCAS(mutex, 0, 1) == 0) {
            __threadfence();
            atomicExch(&total, atomicAdd(&total, 0) + (int)threadIdx.x);
            __threadfence();
            atomicExch(mutex, 0);
            done = true;
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) out[0] = total;
}'''


@pytest.mark.parametrize("schedule", ["fixed", 4])
def test_atomic_lock_within_and_across_warps(schedule):
    out, mutex = np.zeros(1, np.int32), np.zeros(1, np.int32)
    ptx.launch(build(LOCK), "lock", 1, 40, (out, mutex), schedule=schedule, max_steps=100_000)
    assert out[0] == sum(range(40)) and mutex[0] == 0


# ---- true deadlocks -----------------------------------------------------------------------------

STUCK = r'''
extern "C" __global__ void stuck(int* out)
{
    __shared__ volatile int flag[4];
    int warp = threadIdx.x / 32;
    if (threadIdx.x < 4) flag[threadIdx.x] = 0;
    __syncthreads();
    if (warp == 2) { while (flag[2] == 0) { } }          // NOBODY
    else if (warp == 1) { __syncthreads(); }             // BARRIER
    out[threadIdx.x] = 1;
}'''


def _counting():
    seen = [0]

    def hook(w, op, m):
        seen[0] += 1
    return seen, hook


@pytest.mark.parametrize("schedule", ["fixed", "reverse", 7])
def test_spin_nobody_ends_is_a_deadlock_naming_the_line(schedule):
    seen, hook = _counting()
    t = time.perf_counter()
    with pytest.raises(ptx.Deadlock) as e:
        ptx.launch(build(STUCK), "stuck", 1, 128, (np.zeros(128, np.int32),), schedule=schedule,
                   hook=hook)
    assert time.perf_counter() - t < 5 and seen[0] < 1000      # long before max_steps (20 M)
    msg = str(e.value)
    assert f"warp 2 spins at sem.cu:{line_of(STUCK, 'NOBODY')}" in msg
    assert "waiting for a change that no warp makes" in msg
    assert f"warp 1 waits at bar.sync (__syncthreads) at sem.cu:{line_of(STUCK, 'BARRIER')}" in msg
    assert "warps 0, 3 have exited" in msg
    assert e.value.warp == 2 and e.value.source == f"sem.cu:{line_of(STUCK, 'NOBODY')}"


def test_lanes_that_spin_for_an_exited_lane_deadlock():
    src = r'''
extern "C" __global__ void k(int* out)
{
    __shared__ volatile int flag;
    if (threadIdx.x == 0) flag = 0;
    __syncwarp();
    if (threadIdx.x >= 8) { while (flag == 0) { } }       // WAIT
    out[threadIdx.x] = 1;
}'''
    with pytest.raises(ptx.Deadlock, match=f"lanes 8-31 of warp 0 spin at "
                                           f"sem.cu:{line_of(src, 'WAIT')}"):
        ptx.launch(build(src), "k", 1, 32, (np.zeros(32, np.int32),))


def test_spin_on_global_memory_hints_at_other_blocks():
    src = r'''
extern "C" __global__ void k(volatile int* flag)
{
    while (flag[0] == 0) { }                // SPIN
}'''
    with pytest.raises(ptx.Deadlock, match="blocks run one after another") as e:
        ptx.launch(build(src), "k", 1, 32, (np.zeros(1, np.int32),))
    assert f"sem.cu:{line_of(src, 'SPIN')}" in str(e.value)


# ---- blocks that wait for other blocks -----------------------------------------------------------

CROSS = r'''
extern "C" __global__ void volatile_flag(volatile int* flag, int* out)
{
    if (blockIdx.x == 0) {
        while (flag[0] == 0) { }                                     // WAITS
        out[threadIdx.x] = 1;
    } else if (blockIdx.x == gridDim.x - 1 && threadIdx.x == 0) {
        flag[0] = 1;                                                 // SETS
    }
}
extern "C" __global__ void counting_flag(volatile int* flag, int* out)
{
    int polls = 0;
    if (blockIdx.x == 0) {
        while (flag[0] == 0) { polls++; }                            // COUNTS
        out[threadIdx.x] = polls;
    } else if (blockIdx.x == gridDim.x - 1 && threadIdx.x == 0) {
        flag[0] = 1;                                                 // ENDS
    }
}
extern "C" __global__ void atomic_flag(int* flag, int* out)
{
    if (blockIdx.x == 0) {
        if (threadIdx.x == 0) while (atomicAdd(flag, 0) == 0) { }    // POLLS
        __syncthreads();
        out[threadIdx.x] = 1;
    } else if (blockIdx.x == gridDim.x - 1 && threadIdx.x == 0) {
        atomicExch(flag, 1);                                         // RAISES
    }
}'''


@pytest.mark.parametrize("kernel,wait,write", [("volatile_flag", "WAITS", "SETS"),
                                               ("counting_flag", "COUNTS", "ENDS"),
                                               ("atomic_flag", "POLLS", "RAISES")])
def test_a_block_that_waits_for_another_block_is_named_with_both_lines(kernel, wait, write):
    """Block 0 spins on a global flag that the last block sets (a volatile load; the same while
    counting its polls; an atomicAdd of 0, which stores each pass): reported at once as a cross-block wait naming the spin's line and
    the writer's (block and line), not run to the step budget."""
    t0 = time.process_time()
    with pytest.raises(ptx.CrossBlockWait) as e:
        ptx.launch(build(CROSS), kernel, 3, 64, (np.zeros(1, np.int32), np.zeros(64, np.int32)))
    msg = str(e.value)
    assert msg.startswith("cross-block wait: block (0, 0, 0) spins on global memory")
    assert f"sem.cu:{line_of(CROSS, wait)}" in msg and f"sem.cu:{line_of(CROSS, write)}" in msg
    assert "which block (2, 0, 0) writes at" in msg and "no forward progress" in msg
    assert isinstance(e.value, ptx.Deadlock) and e.value.block == (0, 0, 0)
    assert time.process_time() - t0 < 5


# ---- loops that are not spins -------------------------------------------------------------------

LOOPS = r'''
extern "C" __global__ void loops(const int* in, int* out, int n, int rounds)
{
    int lane = threadIdx.x % 32;
    unsigned acc = lane, x;
    for (int r = 0; r < rounds; r++)                     // registers only, long
        acc = acc * 1664525u + 1013904223u;
    int s = 0;
    for (int i = 0; i < n; i++)                          // reads only (a K loop)
        s += in[i];
    int trips = 0;
    x = lane + 1;
    while (x != 1) { x = (x & 1) ? 3 * x + 1 : x / 2; trips++; }   // divergent trip counts
    long long t0 = clock64();
    while (clock64() - t0 < 200) { }                     // a delay loop: the clock moves
    out[threadIdx.x] = acc + s + trips;
}'''


@pytest.mark.parametrize("schedule", ["fixed", 2])
def test_loops_that_progress_are_not_spins(schedule):
    n, rounds = 64, 300
    inp = np.arange(n, dtype=np.int32)
    out = np.zeros(64, np.int32)
    ptx.launch(build(LOOPS), "loops", 1, 64, (inp, out, np.int32(n), np.int32(rounds)),
               schedule=schedule)
    lane = np.arange(64) % 32
    acc = lane.astype(np.uint64)
    for _ in range(rounds):
        acc = (acc * 1664525 + 1013904223) % 2 ** 32
    trips = []
    for ln in lane:
        x, t = ln + 1, 0
        while x != 1:
            x, t = (3 * x + 1 if x & 1 else x // 2), t + 1
        trips.append(t)
    want = (acc + inp.sum() + np.array(trips)).astype(np.uint32).view(np.int32)
    assert (out == want).all()


def test_a_loop_with_barriers_is_not_a_spin():
    """Warp 0 goes round a loop with __syncthreads, its registers and memory unchanged, while
    warp 1 counts to n and then raises the flag: each opened barrier is progress."""
    src = r'''
extern "C" __global__ void k(int* out, int n)
{
    __shared__ volatile int flag;
    if (threadIdx.x == 0) flag = 0;
    int warp = threadIdx.x / 32, count = 0;
    for (;;) {
        __syncthreads();
        if (flag) break;
        __syncthreads();
        if (warp == 1 && ++count == n && threadIdx.x == 32) flag = 1;
    }
    out[threadIdx.x] = count;
}'''
    for schedule in ("fixed", "reverse", 1):
        out = np.zeros(64, np.int32)
        ptx.launch(build(src), "k", 1, 64, (out, np.int32(6)), schedule=schedule)
        assert (out[:32] == 0).all() and (out[32:] == 6).all()


def test_an_inner_loop_that_repeats_itself_in_an_outer_loop_is_not_a_spin():
    """The inner loop's state at its branch is the same in every outer iteration and nothing is
    written, but the outer counter moves: the loop analysis includes the way round the outer
    loop."""
    src = r'''
extern "C" __global__ void k(const volatile int* vin, int* out, int n)
{
    int t = 0, j = 0;
    for (; j < n; j++) {
        #pragma unroll 1
        for (int i = 0; i < 2; i++) t = vin[i];
    }
    out[threadIdx.x] = t + j;
}'''
    out = np.zeros(32, np.int32)
    ptx.launch(build(src), "k", 1, 32, (np.array([5, 9], np.int32), out, np.int32(40)))
    assert (out == 49).all()


# ---- seeded interleavings expose races ----------------------------------------------------------

# Each warp reads the next warp's slot, then overwrites its own, with no barrier in between. In
# the fixed order every read comes before the write it races with (write-after-read, which the
# checker does not track); any order that runs warp i+1's write before warp i's read shows it.
RACE = r'''
extern "C" __global__ void race(int* out)
{
    __shared__ int s[128];
    int warp = threadIdx.x / 32;
    s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    int v = warp < 3 ? s[threadIdx.x + 32] : 0;          // READ
    s[threadIdx.x] = v + 1000;                           // WRITE
    out[threadIdx.x] = v;
}'''


def test_race_the_fixed_order_misses_is_found_by_seeds():
    prog = build(RACE)
    out = np.zeros(128, np.int32)
    ptx.launch(prog, "race", 1, 128, (out,))                          # fixed: no report
    assert (out[:96] == np.arange(32, 128)).all()
    with pytest.raises(ptx.SharedRace) as e:
        ptx.launch(prog, "race", 1, 128, (np.zeros(128, np.int32),), seeds=(0, 1, 2, 3))
    msg = str(e.value)
    assert "under schedule=" in msg and "schedule=" in msg.split("\n")[0]
    assert f"sem.cu:{line_of(RACE, 'READ')}" in msg
    seed = int(msg.split("schedule=")[1].split(" ")[0])
    with pytest.raises(ptx.SharedRace):                               # the seed repeats it
        ptx.launch(prog, "race", 1, 128, (np.zeros(128, np.int32),), schedule=seed)


def test_seeds_find_a_race_through_global_memory():
    src = r'''
extern "C" __global__ void k(int* buf, int* out)
{
    buf[threadIdx.x] = threadIdx.x + 1;
    out[threadIdx.x] = buf[(threadIdx.x + 32) % 128];    // no fence, no barrier
}'''
    prog = build(src)
    buf, out = np.zeros(128, np.int32), np.zeros(128, np.int32)
    with pytest.raises(ScheduleDependent, match=r"argument 1 \(k_param_1\) differs between "
                                                r"the 'fixed' order and schedule="):
        ptx.launch(prog, "k", 1, 128, (buf, out), seeds=(0, 1, 2))
    with ptx.options(seeds=(0, 1)):                      # through options, as topic wrappers
        with pytest.raises(ScheduleDependent):
            ptx.launch(prog, "k", 1, 128, (np.zeros(128, np.int32), np.zeros(128, np.int32)))


def test_seeds_keep_the_first_run_and_pass_a_correct_kernel():
    x, out, _ = run_ring("fixed", n=4)
    got = np.zeros_like(out)
    res = ptx.launch(build(RING), "ring", 1, 96, (x, got, np.int32(4)), seeds=(0, 1))
    assert res.schedule == "fixed" and res.seeds == (0, 1)
    assert (got == out).all()


def test_seeds_from_the_environment(monkeypatch):
    monkeypatch.setenv("FRAGLAB_PTX_SEEDS", "5, 6")
    x, out, res = run_ring("fixed", n=2)
    assert res.seeds == (5, 6) and (out == 2 * x + 1).all()
    with ptx.options(seeds=()):                           # options win over the environment
        assert run_ring("fixed", n=2)[2].seeds == ()


def _trace(prog, kernel, args, schedule):
    order = []

    def hook(w, op, m):
        if not order or order[-1][0] != w.index:
            order.append([w.index, 0])
        order[-1][1] += 1
    ptx.launch(prog, kernel, 1, 96, args, schedule=schedule, hook=hook)
    return [tuple(t) for t in order]


def test_seeds_are_reproducible_and_differ():
    prog = build(RING)
    x = np.arange(4 * 32, dtype=np.int32)
    args = lambda: (x, np.zeros(4 * 32, np.int32), np.int32(4))   # noqa: E731
    a, b, c = (_trace(prog, "ring", args(), s) for s in (11, 11, 12))
    assert a == b and a != c
    assert len(a) > 10                                   # many switches, not warp after warp
    fixed = _trace(prog, "ring", args(), "fixed")
    assert [w for w, _ in fixed[:3]] == [0, 1, 2]


# ---- the hardware (GPU tier) --------------------------------------------------------------------

def _gpu_vs_interpreter(src, kernel, block, make_args, check):
    from test_ptx_gpu import gpu_run
    text = build(src).text
    theirs = gpu_run(text, kernel, 1, block, make_args())
    check(theirs)
    for schedule in ORDERS:
        mine = make_args()
        ptx.launch(ptx.Program(text), kernel, 1, block, mine, schedule=schedule)
        for a, b in zip(mine, theirs):
            if isinstance(a, np.ndarray):
                assert np.array_equal(a, b), schedule


@pytest.mark.gpu
@pytest.mark.parametrize("producer", [0, 1])
def test_gpu_flag_handoff(producer):
    _gpu_vs_interpreter(HANDOFF, "handoff", 64,
                        lambda: (np.zeros(32, np.int32), np.zeros(32, np.int32),
                                 np.int32(producer)),
                        lambda r: np.testing.assert_array_equal(r[1], np.arange(32) * 3 + 101))


@pytest.mark.gpu
def test_gpu_ring():
    n = 10
    x = np.arange(n * 32, dtype=np.int32) * 7 - 50
    _gpu_vs_interpreter(RING, "ring", 96, lambda: (x, np.zeros(n * 32, np.int32), np.int32(n)),
                        lambda r: np.testing.assert_array_equal(r[1], 2 * x + 1))


@pytest.mark.gpu
@pytest.mark.parametrize("first", [0, 1])
def test_gpu_spin_on_another_lane(first):
    want = np.concatenate([np.full(4, 77), np.arange(4, 32)])
    _gpu_vs_interpreter(INTRA, "intra", 32, lambda: (np.zeros(32, np.int32), np.int32(first)),
                        lambda r: np.testing.assert_array_equal(r[0], want))


@pytest.mark.gpu
def test_gpu_atomic_lock():
    _gpu_vs_interpreter(LOCK, "lock", 40, lambda: (np.zeros(1, np.int32), np.zeros(1, np.int32)),
                        lambda r: np.testing.assert_array_equal(r[0], [sum(range(40))]))
