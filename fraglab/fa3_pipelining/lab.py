"""The lab's checks (``solutions/10_fa3_pipelining.ipynb``).

Exercise 1 (Python): the mbarrier parities of a ring of stages. Exercise 2 (CUDA): the body of
the two-stage main loop (``TwoStage::step`` between ``// BEGIN MAINLOOP`` and ``// END
MAINLOOP`` in ``kernels/10_fa3_pipelining_twostage.cu``): what to wait on, and when.
:func:`step_source` puts a learner's body into that file; :func:`check_step` compiles it for
sm_90a, reads ptxas's notes and the SASS overlap, and runs the attention Problem's cases.
Exercise 3 (CUDA): the TMA producer's tile loop (the body of ``TmaProducer::run``'s loop over
key tiles, between ``// BEGIN PRODUCER`` and ``// END PRODUCER`` in
``kernels/10_fa3_pipelining_tma.cu``): the free stage, the transaction bytes, one tensor copy
per 64-column panel. :func:`producer_source` and :func:`check_producer` grade it.
"""
from __future__ import annotations

import re

from .. import device, grade, launch, tools
from ..attention import as_float
from ..problem import Case
from . import config, kernels, problems, sass_evidence

BEGIN, END = "// BEGIN MAINLOOP", "// END MAINLOOP"
LAB_FILE = "10_fa3_pipelining_twostage"


def course_step() -> str:
    """The course's body of the two-stage step (between the markers)."""
    text = (tools.KERNELS_DIR / f"{LAB_FILE}.cu").read_text()
    return text[text.index(BEGIN) + len(BEGIN):text.index(END)]


def step_source(body: str) -> str:
    """``kernels/10_fa3_pipelining_twostage.cu`` with ``body`` as the step."""
    if not isinstance(body, str):
        raise TypeError(f"the step must be a str of CUDA code, got {type(body).__name__}")
    text = (tools.KERNELS_DIR / f"{LAB_FILE}.cu").read_text()
    return text[:text.index(BEGIN) + len(BEGIN)] + "\n" + body + "\n" + text[text.index(END):]


def ring_parities(stages: int, tiles: int) -> list[tuple[int, int, int | None]]:
    """For tile j = 0 .. tiles-1: (stage, parity the consumer waits for on "full", parity the
    producer waits for on "empty" before refilling the stage, None on the stage's first use)."""
    return [(j % stages, (j // stages) & 1, None if j < stages else (j // stages - 1) & 1)
            for j in range(tiles)]


#: Exercise 1's claim: the (stage, full parity, empty parity) of every tile, for any ring depth and
#: any number of key tiles. The cases: depths 1 to 5; one tile; odd and prime counts (7, 13, 31);
#: and, for each depth, every count from 3 wraps of the ring to 4 (each ring wraps at least three
#: times, so a parity is used in both phases twice over, and the last tile lands on every slot).
def parity_cases() -> list[tuple[int, int]]:
    out = []
    for stages in (1, 2, 3, 4, 5):
        tiles = {1, 7, 13, 31} | set(range(3 * stages + 1, 4 * stages + 1))
        out += [(stages, t) for t in sorted(tiles)]
    return out


def check_parities(exercise: str, fn) -> None:
    for stages, tiles in parity_cases():
        want = ring_parities(stages, tiles)
        got = [tuple(x) for x in fn(stages, tiles)]
        if got != want:
            bad = next(i for i, (g, w) in enumerate(zip(got, want)) if g != w) \
                if len(got) == len(want) else None
            grade.fail(exercise, f"{stages} stages, {tiles} tiles: " + (
                f"{len(got)} entries, expected {tiles}" if bad is None else
                f"tile {bad} gives {got[bad]}, expected (stage, full parity, empty parity) "
                f"= {want[bad]}"))


def check_step(exercise: str, body: str, rng, *, cases=None) -> str:
    """Grade a two-stage step: it compiles for sm_90a; ptxas keeps the wgmma asynchronous (no
    C75xx note); at least half of the exp2 instructions run beside a wgmma in flight (SASS); and
    the kernel matches float64 attention on the Problem's cases (both modes). The small cases
    run on the PTX interpreter in both modes (on a GPU before the GPU's cases:
    :func:`fraglab.grading.checks.check_cases`), whose asynchronous-hazard checks fail a step that
    reads a stage before waiting for its copy, or releases a stage before the wgmma reading it
    completed (caught when the producer refills it: the case "first CTA (rings wrap)" sweeps more
    key tiles than the rings have stages); on a GPU such a race may happen to go right. Returns
    the cases line (for :func:`fraglab.grade.mode_line`)."""
    from ..grading import checks
    from .. import toolchain
    src = step_source(body)
    try:
        b = toolchain.compile(f"{LAB_FILE}_lab", config.ARCH, source=src)
    except toolchain.CompileError as e:
        grade.fail(exercise, f"the kernel does not compile for sm_90a:\n{e.log[-1500:]}")
    for dtype in ("f16", "bf16"):
        for d in config.head_dims("twostage"):
            name = config.kernel_name("twostage", dtype, d)
            notes = sass_evidence.ptxas_notes(b, name)
            if notes:
                grade.fail(exercise, f"{name}: ptxas serialized the wgmma ({', '.join(notes)}): "
                           "an instruction touches a wgmma's registers while it may still run")
    ov = sass_evidence.overlap(sass_evidence.timeline_of(b, config.kernel_name("twostage", "f16", 128)))
    if ov["exp2_beside_wgmma"] * 2 < ov["exp2"]:
        grade.fail(exercise, f"only {ov['exp2_beside_wgmma']} of {ov['exp2']} exp2 instructions "
                   "run while a wgmma of the warpgroup is in flight: the softmax does not overlap "
                   "the P V multiply")
    p = problems.ATTENTION["twostage"]

    def run_mine(q, k, v, dtype, causal, scale, first_cta=False, **_):
        return problems.run_attention(q, k, v, dtype, causal, scale, variant="twostage",
                                      first_cta=first_cta, source=src)
    return checks.check_cases(exercise, p, run_mine, rng, repeats=1,
                              cases=cases)


# --------------------------------------------------------------------------------------------
# Exercise 3: the TMA producer's tile loop
# --------------------------------------------------------------------------------------------

P_BEGIN, P_END = "// BEGIN PRODUCER", "// END PRODUCER"
TMA_FILE = "10_fa3_pipelining_tma"


def _producer_span(text: str) -> tuple[int, int]:
    """Where the loop body lies in the tma file: from the line after ``// BEGIN PRODUCER`` (a
    comment at the end of the loop's ``for`` line) to ``// END PRODUCER`` (at the end of its
    last line). The markers share lines with code, so the course's PTX, line numbers included,
    is the same with and without them."""
    begin = text.index("\n", text.index(P_BEGIN)) + 1
    return begin, text.index(P_END)


def producer_source(body: str) -> str:
    """``kernels/10_fa3_pipelining_tma.cu`` with ``body`` as the producer's tile loop body."""
    if not isinstance(body, str):
        raise TypeError(f"the loop body must be a str of CUDA code, got {type(body).__name__}")
    text = (tools.KERNELS_DIR / f"{TMA_FILE}.cu").read_text()
    begin, end = _producer_span(text)
    return text[:begin] + body.rstrip() + "\n" + " " * 12 + text[end:]


#: One more small case for the interpreter: two panels (d = 128) and a ragged key tile, which
#: the Problem's small cases (d 64 and 256) leave out. A GPU runs every d, so the interpreter
#: vets every d before the GPU runs: a wrong byte count hangs a GPU (the phase never completes).
D128_CASE = Case("small f16 d128 N=160 (two panels, ragged)", shape=(1, 1, 160, 128),
                 dtype="f16", edge=True)


#: And a ring that wraps more than once: seven key tiles of 128 through the first CTA's three
#: stages, so every stage is waited for as free (the last one too) and stage 0 twice: a parity
#: that is right for a stage's second use only (a constant one, or one wrong on the last slot)
#: waits on a phase the readers have not completed, and the interpreter reports the refill as a
#: write after their reads, naming the mbarrier and the phase (or, in another order, the wait
#: that can never end as a deadlock).
WRAP_CASE = Case("f16 d64 N=896 peaky, first CTA (every stage refilled, the first twice)",
                 shape=(1, 1, 896, 64), dtype="f16", q_scale=4.0, first_cta=True, edge=True)


def producer_cases() -> tuple:
    """The tma Problem's small cases with :data:`D128_CASE` and :data:`WRAP_CASE`, in the order
    that fails a wrong answer soonest and most clearly: one key tile of one panel first (d = 64,
    N <= 128: a wrong byte count can only deadlock there, with the mbarrier's count in the
    message), then most panels first (d = 256's four catch a wrong panel coordinate or offset),
    the rings' wrap-around, the rest."""
    small = [c for c in problems.ATTENTION["tma"].cases if not c.slow] + [D128_CASE, WRAP_CASE]
    rows = config.file_constants("tma")["fa3_rows"]

    def order(c):
        _, _, n, d = c.params["shape"]
        wrap = c.params.get("first_cta", False)
        return (d > 64 or n > rows or wrap, -d, not wrap)
    return tuple(sorted(small, key=order))


def _code(body: str) -> str:
    """CUDA text without its comments."""
    return re.sub(r"//[^\n]*|/\*.*?\*/", " ", body, flags=re.S)


#: Exercise 3's claim about the ring: before refilling a stage the producer waits for the phase of
#: the stage's "empty" barrier that its readers completed last, at every use of every stage, for
#: any ring depth. The attention cases cannot show a wait on a phase already completed (the
#: interpreter's consumers happen to be done by then: a producer that always waits on parity 0
#: passes them), so the loop body also runs in a harness of its own (:data:`RING_HARNESS`): the
#: barrier and copy calls are recorded, not made, over :data:`RING_RUNS` (depths 2-4, each ring
#: wrapping three times and ending on each of its slots), and every wait is compared with the
#: ring's parities.
RING_RUNS = tuple((stages, tiles) for stages in (2, 3, 4)
                  for tiles in range(3 * stages + 1, 4 * stages + 1))
#: The producer's loop with the calls recorded (kind, barrier or destination, parity / bytes /
#: row): 0 mbar_wait, 1 mbar_arrive_expect_tx, 2 tma_load_3d, 3 the start of tile j. The names a
#: body may use are those of TmaProducer::run (a, t, C, D, BC, map, full, empty, ring, warp, is_k).
RING_HARNESS = r"""
typedef unsigned int u32;
struct RingArgs { const void* qmap; const void* kmap; const void* vmap; };
struct RingTile { u32 fullQ, fullK, fullV, emptyK, emptyV, base; int q0, bh, tiles; };
struct RingCfg { enum { STAGES = RING_STAGES, KV_BYTES = 8192, Q_BYTES = 8192, K_OFF = 0,
                        V_OFF = 65536 }; };
extern "C" __global__ void ring_log(int* log, int tiles, int room)
{
    if (threadIdx.x != 0) return;
    int n = 0;
    auto put = [&](int kind, long long x, long long y) {
        if (n < room) { log[3 * n] = kind; log[3 * n + 1] = (int)x; log[3 * n + 2] = (int)y; }
        ++n;
    };
#define mbar_wait(bar, parity) put(0, (bar), (parity))
#define mbar_arrive_expect_tx(bar, bytes) put(1, (bar), (bytes))
#define tma_load_3d(dst, map_, c0, c1, c2, bar) put(2, (dst), (c1))
    typedef RingCfg C;
    constexpr int D = 64, BC = 64;
    const RingArgs a = {nullptr, nullptr, nullptr};
    const RingTile t = {0x100, 0x200, 0x300, 0x400, 0x500, 0x1000, 0, 0, tiles};
    const int warp = 0;
    const bool is_k = true;
    const void* map = a.kmap;
    const u32 full = t.fullK, empty = t.emptyK;
    const u32 ring = t.base;
    (void)warp; (void)is_k; (void)map; (void)full; (void)ring;
    for (int j = 0; j < t.tiles; ++j) {
        put(3, j, 0);
BODY
    }
    log[3 * room] = n;
}
"""


def ring_waits(body: str, stages: int, tiles: int) -> list[list[tuple[int, int]]] | None:
    """Per tile j, the (stage, parity) of each wait the body makes on the "empty" barriers before
    its first copy of the tile (a wait elsewhere: stage -1), from :data:`RING_HARNESS` on the PTX
    interpreter; None where the harness does not build (a body that uses more of the kernel than
    the harness has: the attention cases grade it alone)."""
    import numpy as np
    from .. import toolchain
    from ..device import forced_mode
    src = RING_HARNESS.replace("RING_STAGES", str(stages)).replace("BODY", body)
    room = 64 * tiles
    with forced_mode("cpu"):
        try:
            fn = launch.get_kernel(f"{TMA_FILE}_ring", "ring_log", source=src)
        except toolchain.CompileError:
            return None
        log = np.zeros(3 * room + 1, np.int32)
        launch.launch(fn, 1, 32, (log, np.int32(tiles), np.int32(room)))
    n = min(int(log[3 * room]), room)
    out: list[list[tuple[int, int]]] = []
    copied = True
    for kind, x, y in log[:3 * n].reshape(-1, 3).tolist():
        if kind == 3:
            out.append([])
            copied = False
        elif kind == 2:
            copied = True
        elif kind == 0 and out and not copied:
            k = x - 0x400
            out[-1].append((k // 8 if 0 <= k < 8 * stages and k % 8 == 0 else -1, y & 1))
    return out


def ring_problems(body: str) -> list[str]:
    """Where the body's waits on the "empty" barriers differ from the ring's, over
    :data:`RING_RUNS`: before the u-th refill (u >= 1) of stage s, exactly the parity of phase
    u - 1 ((u - 1) & 1); before the first fill, no wait or one on parity 1 (which a fresh barrier
    passes at once)."""
    for stages, tiles in RING_RUNS:
        got = ring_waits(body, stages, tiles)
        if got is None:
            return []
        if len(got) != tiles:
            return [f"a ring of {stages} stages and {tiles} tiles: the loop body ran {len(got)} "
                    "times"]
        for j, waits in enumerate(got):
            s, u = j % stages, j // stages
            ok = {(s, 1)} if u == 0 else {(s, (u - 1) & 1)}
            if any(w not in ok for w in waits) or (u > 0 and not waits):
                want = ("no wait (or one on parity 1)" if u == 0 else
                        f"a wait on stage {s}'s empty barrier, parity {(u - 1) & 1} (its readers' "
                        f"release number {u}, phase {u - 1})")
                said = ", ".join(f"stage {w[0]} parity {w[1]}" if w[0] >= 0 else
                                 f"another barrier, parity {w[1]}" for w in waits) or "no wait"
                return [f"a ring of {stages} stages, tile {j} (stage {s}, its use {u}): your "
                        f"producer makes {said} before copying; the ring needs {want}. Too early a "
                        "phase lets the copy overwrite a stage still being read; too late a one "
                        "never completes"]
    return []


def check_producer(exercise: str, body: str, rng) -> str:
    """Grade the tma producer's tile loop: it calls ``mbar_arrive_expect_tx`` and ``tma_load_3d``
    and copies nothing else (the build has no ``cp.async`` but ``cp.async.bulk.tensor``); the
    kernel compiles for sm_90a; and it matches float64 attention (outputs poisoned) on the tma
    Problem's cases. Without a GPU the small cases (:func:`producer_cases`) run on the PTX
    interpreter, with the kernel file's own key tile and ring depth (one build of the learner's
    source): a byte count that differs from the box's bytes leaves the stage's phase
    incomplete, which the interpreter reports as a deadlock naming the mbarrier (on a GPU the
    kernel would hang); a wrong coordinate or destination gives a wrong O or a read of a stage
    before its copy landed. On a GPU the same small cases run on the interpreter first, and only
    then the GPU's cases (the tuned tiles and depths). Returns the cases line."""
    from ..grading import checks
    from .. import toolchain
    code = _code(body)
    for call in ("mbar_arrive_expect_tx", "tma_load_3d"):
        if not re.search(rf"\b{call}\s*\(", code):
            grade.fail(exercise, f"the loop body never calls {call}(...): the producer announces "
                       "each stage's bytes with mbar_arrive_expect_tx and copies each panel "
                       "with tma_load_3d")
    src = producer_source(body)
    ring = ring_problems(body)
    if ring:
        grade.fail(exercise, ring[0])
    try:
        b = toolchain.compile(f"{TMA_FILE}_lab", config.ARCH, source=src)
    except toolchain.CompileError as e:
        grade.fail(exercise, f"the kernel does not compile for sm_90a:\n{e.log[-1500:]}")
    other = sorted(set(re.findall(r"\bcp\.async(?!\.bulk\.tensor)[\w.:]*", b.ptx)))
    if other:
        grade.fail(exercise, f"the kernel copies with {', '.join(other)}: the tma producer "
                   "moves K and V with tensor copies only (tma_load_3d)")
    p = problems.ATTENTION["tma"]

    def run_mine(q, k, v, dtype, causal, scale, first_cta=False, **_):
        if first_cta or not launch.interpreted():
            return problems.run_attention(q, k, v, dtype, causal, scale, variant="tma",
                                          first_cta=first_cta, source=src)
        d = q.shape[3]          # the interpreter: the file's own tile and depth (one build)
        go, out = kernels.attention_launcher(*map(launch.to_device, (q, k, v)), causal=causal,
                                             variant="tma", scale=scale, source=src,
                                             **config.default_config("tma", d))
        go()
        return as_float(out, dtype)
    small = producer_cases()
    return checks.check_cases(exercise, p, run_mine, rng, repeats=1,
                              cases=None if device.gpu_available() else small,
                              interpreter_cases=small)
