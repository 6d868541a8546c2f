"""Per-lane member masks in the PTX interpreter's warp collectives (vote, match, redux, shfl,
bar.warp.sync), as cooperative groups' ``tiled_partition<N>`` emits them: all 32 lanes of a warp
execute one ``vote.sync.ballot`` (etc.) with lanes 0-15 passing 0x0000ffff and lanes 16-31
0xffff0000, and each lane's result covers the lanes of its own mask only. Kernels compiled by
NVRTC for sm_80 are checked against a NumPy model of each lane's result, with tiles of 4, 8, 16
and 32 lanes, tiles that take different branches, loop different numbers of times or exit early;
plus the errors: a shuffle reading outside its mask, masks that disagree. The GPU tier (marked
``gpu``) runs the same kernels on the hardware and compares bit for bit."""
from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest

from fraglab import ptx, toolchain

from test_ptx_gpu import both, same_bits

SENTINEL = 0xDEADBEEF
NOUT = 24
BLOCK = 64                      # two warps: tiles never straddle a warp, tile ranks run across both


_GLOBAL = re.compile(r"\.global\b[^=;]*?\s([A-Za-z_$][\w$]*)(\[\d*\])?\s*(=[^;]*)?;\s*")


def drop_unused_globals(text: str) -> str:
    """The PTX without the module-level ``.global`` variables nothing refers to: the libcu++
    headers under ``<cooperative_groups.h>`` leave about 1,100 ``cuda::std`` constants in it,
    which the interpreter would map at every launch (about 0.4 s each). The GPU gets the same
    text."""
    uses = Counter(re.findall(r"[A-Za-z_$][\w$]*", text))
    keep = [ln for ln in text.splitlines(keepends=True)
            if not ((m := _GLOBAL.fullmatch(ln)) and uses[m.group(1)] == 1)]
    return "".join(keep)


def build_text(src: str, name: str = "masks.cu") -> str:
    ptx_text = toolchain.compile(name, "sm_80", source=src).ptx    # CCCL: fraglab.tools finds it
    return drop_unused_globals(ptx_text)


# ---- the tiles kernel: every collective of a thread_block_tile<N>, and the raw intrinsics with
# ---- the tile's mask; plan[tile] picks what each tile does ---------------------------------------

TILES = r'''
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

#define NOUT 24

// plan[tile]: 0 = leave after the first two collectives, 1 = the tile's collectives,
// 2 = the raw intrinsics with the tile's mask. trips[tile]: iterations of a loop of shuffles.
template <int N>
__device__ void tiles(const int* v, const int* plan, const int* trips, unsigned* out)
{
    auto t = cg::tiled_partition<N>(cg::this_thread_block());
    const unsigned lane = threadIdx.x & 31, r = t.thread_rank();
    const unsigned mask = (unsigned)(0xffffffffull >> (32 - N)) << (lane / N * N);
    const int x = v[threadIdx.x];
    const int p = plan[t.meta_group_rank()];
    unsigned* o = out + NOUT * threadIdx.x;
    o[0] = t.ballot(x & 1);
    o[1] = t.shfl(x, (r * 3 + 1) % N);
    if (p == 0) return;                                   // whole tiles leave early
    if (p == 1) {
        o[2] = t.any(x == 3);
        o[3] = t.all(x != 0);
        o[4] = t.shfl_xor(x, N - 1);
        o[5] = t.shfl_down(x, 1);
        o[6] = t.shfl_up(x, 2);
        o[7] = t.match_any(x);
        o[8] = cg::reduce(t, (unsigned)x, cg::plus<unsigned>());
        o[9] = (unsigned)cg::reduce(t, x, cg::greater<int>());
        o[20] = __reduce_or_sync(mask, (unsigned)x);
        o[21] = __reduce_max_sync(mask, (unsigned)x);
    } else {
        __shared__ int s[64];
        o[10] = __reduce_add_sync(mask, (unsigned)x);
        int pred;
        o[11] = __match_all_sync(mask, x, &pred);
        o[12] = pred;
        o[13] = __all_sync(mask, x != 2) | __any_sync(mask, x == 2) << 1
              | __uni_sync(mask, x & 1) << 2;
        o[14] = __ballot_sync(mask, x > 0);
        o[15] = __shfl_sync(mask, x, lane / N * N + (r + 1) % N);
        o[16] = (unsigned)__reduce_min_sync(mask, x);
        s[threadIdx.x] = x;
        __syncwarp(mask);                                 // bar.warp.sync with the tile's mask
        o[17] = s[threadIdx.x ^ (N - 1)];
        o[22] = __reduce_xor_sync(mask, (unsigned)x);
        o[23] = __reduce_and_sync(mask, (unsigned)x);
    }
    int acc = 0;
    for (int i = 0; i < trips[t.meta_group_rank()]; ++i)  // tiles loop different numbers of times
        acc += t.shfl(x + i, (r + i) % N);
    o[18] = acc;
    o[19] = t.ballot(acc & 1);                            // after the tiles reconverge
}

extern "C" __global__ void tiles4(const int* v, const int* p, const int* n, unsigned* o)
{ tiles<4>(v, p, n, o); }
extern "C" __global__ void tiles8(const int* v, const int* p, const int* n, unsigned* o)
{ tiles<8>(v, p, n, o); }
extern "C" __global__ void tiles16(const int* v, const int* p, const int* n, unsigned* o)
{ tiles<16>(v, p, n, o); }
extern "C" __global__ void tiles32(const int* v, const int* p, const int* n, unsigned* o)
{ tiles<32>(v, p, n, o); }
'''


def tiles_model(n: int, x: np.ndarray, plan: np.ndarray, trips: np.ndarray) -> np.ndarray:
    """Each thread's NOUT outputs, from the CUDA semantics of each call over its own tile."""
    out = np.full((BLOCK, NOUT), SENTINEL, np.uint32)
    u32 = lambda a: int(np.int64(a)) & 0xFFFFFFFF                        # noqa: E731
    rel = lambda sel: sum(1 << k for k in range(n) if sel[k])  # noqa: E731  (bits from rank 0)
    for tid in range(BLOCK):
        base, r = tid // n * n, tid % n
        xs = x[base:base + n].astype(np.int64)
        mask = ((1 << n) - 1) << (base % 32)
        o = out[tid]
        o[0] = rel(xs & 1)
        o[1] = u32(xs[(r * 3 + 1) % n])
        p = plan[tid // n]
        if p == 0:
            continue
        if p == 1:
            o[2] = int((xs == 3).any())
            o[3] = int((xs != 0).all())
            o[4] = u32(xs[r ^ (n - 1)])
            o[5] = u32(xs[r + 1] if r + 1 < n else xs[r])
            o[6] = u32(xs[r - 2] if r >= 2 else xs[r])
            o[7] = rel(xs == xs[r])
            o[8] = u32(xs.sum())
            o[9] = u32(xs.max())
            xu = xs & 0xFFFFFFFF
            o[20] = int(np.bitwise_or.reduce(xu))
            o[21] = int(xu.max())
        else:
            o[10] = u32(xs.sum())
            same = bool((xs == xs[0]).all())
            o[11] = mask if same else 0
            o[12] = int(same)
            odd = xs & 1
            o[13] = int((xs != 2).all()) | int((xs == 2).any()) << 1 | \
                int(odd.all() or not odd.any()) << 2
            o[14] = rel(xs > 0) << (base % 32)
            o[15] = u32(xs[(r + 1) % n])
            o[16] = u32(xs.min())
            o[17] = u32(xs[r ^ (n - 1)])
            o[22] = int(np.bitwise_xor.reduce(xs & 0xFFFFFFFF))
            o[23] = int(np.bitwise_and.reduce(xs & 0xFFFFFFFF))
        acc = sum(int(xs[(r + i) % n]) + i for i in range(trips[tid // n]))
        o[18] = u32(acc)
        accs = [sum(int(xs[(k + i) % n]) + i for i in range(trips[tid // n])) for k in range(n)]
        o[19] = rel([a & 1 for a in accs])
    return out


def tiles_case(n: int, seed: int):
    """Inputs: values in [-2, 3] (every third tile constant, so that match.all and uni agree
    there), a plan that mixes early exits and both branches inside one warp, loop trips 0-3."""
    rng = np.random.default_rng(seed)
    tiles = BLOCK // n
    x = rng.integers(-2, 4, BLOCK).astype(np.int32)
    for k in range(0, tiles, 3):
        x[k * n:(k + 1) * n] = x[k * n]
    plan = np.array([(1, 2, 0, 2, 1, 1, 2, 0)[(k + seed) % 8] for k in range(tiles)], np.int32)
    if n == 32:
        plan = np.array([1, 2] if seed % 2 else [2, 0], np.int32)
    trips = rng.integers(0, 4, tiles).astype(np.int32)
    return x, plan, trips


_TEXT: dict = {}


def tiles_text() -> str:
    if "tiles" not in _TEXT:
        _TEXT["tiles"] = build_text(TILES)
    return _TEXT["tiles"]


def tiles_prog() -> ptx.Program:
    if "prog" not in _TEXT:
        _TEXT["prog"] = ptx.Program(tiles_text())
    return _TEXT["prog"]


def run_tiles(n, x, plan, trips, **kw):
    out = np.full(BLOCK * NOUT, SENTINEL, np.uint32)
    ptx.launch(tiles_prog(), f"tiles{n}", 1, BLOCK, (x, plan, trips, out), **kw)
    return out.reshape(BLOCK, NOUT)


def _diff(got, want):
    bad = np.argwhere(got != want)
    return [(int(t), int(k), hex(int(got[t, k])), hex(int(want[t, k]))) for t, k in bad[:8]]


@pytest.mark.parametrize("n", [4, 8, 16, 32])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tile_collectives_per_lane_masks(n, seed):
    x, plan, trips = tiles_case(n, seed)
    got = run_tiles(n, x, plan, trips)
    want = tiles_model(n, x, plan, trips)
    assert not _diff(got, want), _diff(got, want)


def test_tiles_of_one_warp_share_each_instruction():
    """With one plan for every tile, the tiles of a warp execute each collective together (one
    instruction, two or more masks): the results must still be per tile."""
    for n in (4, 16):
        rng = np.random.default_rng(n)
        x = rng.integers(-2, 4, BLOCK).astype(np.int32)
        for p in (1, 2):
            plan = np.full(BLOCK // n, p, np.int32)
            trips = np.full(BLOCK // n, 2, np.int32)
            got = run_tiles(n, x, plan, trips)
            assert not _diff(got, tiles_model(n, x, plan, trips)), (n, p)


def test_tiles_in_reversed_warp_order():
    x, plan, trips = tiles_case(8, 5)
    got = run_tiles(8, x, plan, trips, reverse_warps=True)
    assert not _diff(got, tiles_model(8, x, plan, trips))


def test_ballot_of_a_16_lane_tile_is_its_own_half():
    """The issue's example, checked on the raw registers: vote.sync.ballot.b32 with 0x0000ffff in
    lanes 0-15 and 0xffff0000 in lanes 16-31, all 32 lanes executing it at once."""
    text = r'''
.version 7.0
.target sm_80
.address_size 64
.visible .entry b(.param .u64 out)
{
    .reg .pred %p<2>; .reg .b32 %r<8>; .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %laneid;
    and.b32 %r2, %r1, 16;
    mov.u32 %r3, 65535;
    shl.b32 %r4, %r3, %r2;
    and.b32 %r5, %r1, 3;
    setp.ne.u32 %p1, %r5, 0;
    vote.sync.ballot.b32 %r6, %p1, %r4;
    vote.sync.all.pred %p1, %p1, %r4;
    selp.u32 %r7, 1, 0, %p1;
    mul.wide.u32 %rd2, %r1, 8;
    add.s64 %rd3, %rd1, %rd2;
    st.global.v2.u32 [%rd3], {%r6, %r7};
    ret;
}
'''
    out = np.zeros((32, 2), np.uint32)
    ptx.launch(ptx.Program(text), "b", 1, 32, (out,))
    half = sum(1 << i for i in range(16) if i % 4)
    assert (out[:16, 0] == half).all() and (out[16:, 0] == half << 16).all()
    assert (out[:, 1] == 0).all()


# ---- errors --------------------------------------------------------------------------------------

BAD = r'''
#define FULL 0xffffffffu
extern "C" __global__ void outside(const int* v, int* out)
{
    unsigned lane = threadIdx.x & 31, mask = 0xffffu << (lane & 16);
    out[threadIdx.x] = __shfl_sync(mask, v[threadIdx.x], (lane + 4) & 31);   // OUTSIDE
}
extern "C" __global__ void gone(const int* v, int* out)
{
    unsigned lane = threadIdx.x & 31;
    if (lane >= 16) return;
    out[threadIdx.x] = __shfl_sync(0xffffu, v[threadIdx.x], lane ^ 16, 32);   // GONE
}
extern "C" __global__ void disagree(const int* v, int* out)
{
    unsigned lane = threadIdx.x & 31, mask = lane < 16 ? 0xffffu : FULL;
    out[threadIdx.x] = __ballot_sync(mask, v[threadIdx.x] > 0);               // DISAGREE
}
extern "C" __global__ void inside(const int* v, int* out)
{
    unsigned lane = threadIdx.x & 31, mask = 0xffffu << (lane & 16);
    out[threadIdx.x] = __shfl_sync(mask, v[threadIdx.x], (lane + 4) & 15, 16);
}
'''


def _bad_prog():
    if "bad" not in _TEXT:
        _TEXT["bad"] = ptx.Program(build_text(BAD, "bad.cu"))
    return _TEXT["bad"]


def _line(marker: str) -> int:
    return next(i for i, ln in enumerate(BAD.splitlines(), 1) if marker in ln)


def test_shuffle_reading_outside_its_mask_is_an_error():
    v = np.arange(32, dtype=np.int32)
    with pytest.raises(ptx.CollectiveError) as e:
        ptx.launch(_bad_prog(), "outside", 1, 32, (v, np.zeros(32, np.int32)))
    msg = str(e.value)
    assert "lane 12 reads lane 16, which is outside its member mask 0x0000ffff" in msg, msg
    assert f"bad.cu:{_line('OUTSIDE')}" in msg
    out = np.zeros(32, np.int32)                   # the same shuffle inside the tiles is fine
    ptx.launch(_bad_prog(), "inside", 1, 32, (v, out))
    lane = np.arange(32)
    assert (out == (lane & 16) + (lane + 4) % 16).all()


def test_shuffle_reading_an_exited_lane_is_an_error():
    with pytest.raises(ptx.CollectiveError) as e:
        ptx.launch(_bad_prog(), "gone", 1, 32, (np.arange(32, dtype=np.int32),
                                                np.zeros(32, np.int32)))
    msg = str(e.value)
    assert "lane 0 reads lane 16, which does not take part in the shuffle" in msg, msg
    assert f"bad.cu:{_line('GONE')}" in msg


def test_masks_that_disagree_are_an_error():
    with pytest.raises(ptx.CollectiveError) as e:
        ptx.launch(_bad_prog(), "disagree", 1, 32, (np.arange(32, dtype=np.int32),
                                                    np.zeros(32, np.int32)))
    msg = str(e.value)
    assert "lane 16 passes the member mask 0xffffffff, which names lane 0, but lane 0 passes " \
           "0x0000ffff" in msg, msg
    assert f"bad.cu:{_line('DISAGREE')}" in msg


# ---- GPU tier: the same kernels on the hardware, bit for bit -------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("n", [4, 8, 16, 32])
def test_tile_collectives_bit_identical_on_the_gpu(n):
    text = tiles_text()
    for seed in (0, 1, 2):
        x, plan, trips = tiles_case(n, seed)
        out = np.full(BLOCK * NOUT, SENTINEL, np.uint32)
        mine, gpu = both(text, f"tiles{n}", 1, BLOCK, (x, plan, trips, out))
        want = tiles_model(n, x, plan, trips)
        assert same_bits(mine[3], gpu[3]), _diff(mine[3].reshape(BLOCK, NOUT),
                                                 gpu[3].reshape(BLOCK, NOUT))
        assert not _diff(gpu[3].reshape(BLOCK, NOUT), want), (seed, _diff(
            gpu[3].reshape(BLOCK, NOUT), want))


@pytest.mark.gpu
def test_shared_instruction_tiles_bit_identical_on_the_gpu():
    text = tiles_text()
    for n in (4, 16):
        x = np.random.default_rng(n).integers(-2, 4, BLOCK).astype(np.int32)
        for p in (1, 2):
            plan = np.full(BLOCK // n, p, np.int32)
            trips = np.full(BLOCK // n, 2, np.int32)
            out = np.full(BLOCK * NOUT, SENTINEL, np.uint32)
            mine, gpu = both(text, f"tiles{n}", 1, BLOCK, (x, plan, trips, out))
            assert same_bits(mine[3], gpu[3]), (n, p)
