"""The lab's checks (``solutions/10_fa3_pipelining.ipynb``).

Exercise 1 (Python): the mbarrier parities of a ring of stages. Exercise 2 (CUDA): the body of
the two-stage main loop (``TwoStage::step`` between ``// BEGIN MAINLOOP`` and ``// END
MAINLOOP`` in ``kernels/10_fa3_pipelining_twostage.cu``): what to wait on, and when.
:func:`step_source` puts a learner's body into that file; :func:`check_step` compiles it for
sm_90a, reads ptxas's notes and the SASS overlap, and runs the attention Problem's cases.
"""
from __future__ import annotations

from .. import grade, tools
from . import kernels, problems, sass_evidence

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


def check_parities(exercise: str, fn) -> None:
    for stages in (1, 2, 3, 4):
        for tiles in (1, 5, 12):
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
        b = toolchain.compile(f"{LAB_FILE}_lab", kernels.ARCH, source=src)
    except toolchain.CompileError as e:
        grade.fail(exercise, f"the kernel does not compile for sm_90a:\n{e.log[-1500:]}")
    for dtype in ("f16", "bf16"):
        for d in kernels.head_dims("twostage"):
            name = kernels.kernel_name("twostage", dtype, d)
            notes = sass_evidence.ptxas_notes(b, name)
            if notes:
                grade.fail(exercise, f"{name}: ptxas serialized the wgmma ({', '.join(notes)}): "
                           "an instruction touches a wgmma's registers while it may still run")
    ov = sass_evidence.overlap(sass_evidence.timeline_of(b, kernels.kernel_name("twostage", "f16", 128)))
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
