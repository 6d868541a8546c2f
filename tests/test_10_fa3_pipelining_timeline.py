"""Chapter 10's ping-pong timeline (plots.plot_pingpong) follows the kernel: the order of each
warpgroup's synchronising steps in plots.pingpong_program / producer_program is the order in
which the warps of kernels/10_fa3_pipelining_pingpong.cu execute them on the PTX interpreter
(sm_90a, CPU, one CTA), mbarrier by mbarrier and named barrier by named barrier, and the
consumers' wgmma groups reach the tensor cores in the timeline's order."""
import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from fraglab import ptx, report  # noqa: E402
from fraglab.fa3_pipelining import config, kernels, plots  # noqa: E402

S = plots.ring_depth()
D = 64
#: A CTA's warps: producer warps 0-3, then the first warp of each consumer warpgroup.
WATCHED = (0, 1, 2, 3, *[4 * (wg + 1) for wg in range(plots.consumers())])


def _barrier_names(stages: int):
    """mbarrier index (8-byte words from fullQ) -> name, as laid out by fa3_attention."""
    names = ["fullQ"] + [f"{kind}{s}" for kind in ("fullK", "fullV", "emptyK", "emptyV")
                         for s in range(stages)]
    return dict(enumerate(names))


def run_events(variant: str, tiles: int, stages: int = S) -> dict:
    """{warp: [event, ...]} of one CTA of ``variant`` (f16, d = 64, ``tiles`` key tiles) on the
    interpreter; events are ("wait"|"arrive", mbarrier name), ("bar.sync"|"bar.arrive", id),
    ("qk"|"pv",) for a committed wgmma group (A from shared memory or from registers) and
    ("wait_group", n). Also "order": the (warpgroup, qk|pv) commits of the consumers in the
    order they ran."""
    n = tiles * config.key_tile(variant, D)
    prog = ptx.load(kernels.kernel_file(variant), kernels.ARCH,
                    defines=None if stages == S else {"FA3_STAGES_DEF": stages})
    info = prog.info(kernels.kernel_name(variant, "f16", D))
    names = [n_ for n_, _ in info.kernel.regs]
    raw = {w: [] for w in WATCHED}
    order, last_wgmma = [], {}

    def reg(w, operand, lane):
        kind, *rest = operand
        if kind == "imm":
            return int(rest[0])
        if kind == "addr":
            return int(w.R[rest[0][1]][lane]) + rest[1]
        assert kind == "reg", operand
        return int(w.R[rest[0]][lane])

    def hook(w, op, m):
        if w.block_idx != (0, 0, 0) or w.index not in WATCHED:
            return
        ins = op.instr
        lane = int(np.flatnonzero(w.live if m is None else m)[0])
        code = ins.opcode
        if code.startswith("wgmma.mma_async"):
            last_wgmma[w.index] = "pv" if ins.text.count("{") >= 2 else "qk"
            return
        if code.startswith("wgmma.commit_group"):
            e = (last_wgmma[w.index],)
            if w.index >= 4:
                order.append((w.index // 4 - 1, e[0]))
        elif code.startswith("wgmma.wait_group"):
            e = ("wait_group", reg(w, ins.operands[0], lane))
        elif code.startswith("mbarrier.try_wait"):
            e = ("wait", reg(w, ins.operands[1], lane))
        elif code.startswith("mbarrier.arrive"):
            e = ("arrive", reg(w, ins.operands[1], lane))
        elif code.startswith(("bar.sync", "bar.arrive")):
            e = (code, reg(w, ins.operands[0], lane))
        else:
            return
        raw[w.index].append((id(op), e))

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 1, n, D)).astype(np.float16) for _ in range(3))
    o = np.zeros_like(q)
    threads = config.file_constants(variant)["fa3_threads"]
    ptx.launch(prog, kernels.kernel_name(variant, "f16", D), grid=(1, 1), block=(threads,),
               args=(q, k, v, o, np.int32(n), np.float32(0.18), np.int32(0), *kernels.map_arguments(())),
               shared_mem=config.smem_bytes(variant, D, stages), hook=hook, blocks=[(0, 0, 0)])
    assert names
    base = min(e[1] for evs in raw.values() for _, e in evs if e[0] in ("wait", "arrive"))
    bar = _barrier_names(stages)
    out = {}
    for w, evs in raw.items():
        seq, prev = [], None
        for key, e in evs:
            if key == prev and e[0] in ("wait", "bar.sync"):  # a spin, or a warp resumed at
                continue                                        # its barrier: one wait
            prev = key
            if e[0] in ("wait", "arrive"):
                e = (e[0], bar[(e[1] - base) // 8])
            if e == ("bar.sync", 0):                  # __syncthreads after the mbarrier init
                continue
            seq.append(e)
        out[w] = seq
    out["order"] = order
    return out


def expected_consumer(wg: int, tiles: int, stages: int = S) -> list:
    """plots.pingpong_program in the events' words."""
    out = []
    for step, j in plots.pingpong_program(wg, tiles):
        out += {"wait_q": [("wait", "fullQ")],
                "wait_k": [("wait", f"fullK{(j or 0) % stages}")],
                "wait_v": [("wait", f"fullV{(j or 0) % stages}")],
                "release_k": [("arrive", f"emptyK{(j or 0) % stages}")],
                "release_v": [("arrive", f"emptyV{(j or 0) % stages}")],
                "turn": [("bar.sync", 1 + wg)], "pass": [("bar.arrive", 2 - wg)],
                "qk": [("qk",)], "pv": [("pv",)], "wgmma_wait": [("wait_group", j)],
                "softmax": [], "store": [("bar.sync", 3 + wg)]}[step]
    return out


def expected_producer(warp: int, tiles: int, stages: int = S) -> list:
    kind = "K" if warp < 2 else "V"
    out = []
    for step, j in plots.producer_program(warp, tiles, stages):
        out += {"arrive_q": [("arrive", "fullQ")],
                "wait_empty": [("wait", f"empty{kind}{(j or 0) % stages}")],
                "copy": [], "full": [("arrive", f"full{kind}{(j or 0) % stages}")]}[step]
    return out


@pytest.fixture(scope="module", params=[(S, S + 1), (S, S + 2), (2, 5)],
                ids=lambda p: f"stages{p[0]}-tiles{p[1]}")
def pingpong(request):
    stages, tiles = request.param          # both ends of the unrolled-by-two loop; the 2-deep ring
    return stages, tiles, run_events("pingpong", tiles, stages)


def test_each_consumer_warpgroup_runs_the_program(pingpong):
    stages, tiles, ev = pingpong
    for wg in range(plots.consumers()):
        assert ev[4 * (wg + 1)] == expected_consumer(wg, tiles, stages), f"warpgroup {wg + 1}"


def test_each_producer_warp_runs_the_program(pingpong):
    stages, tiles, ev = pingpong
    for warp in range(4):
        assert ev[warp] == expected_producer(warp, tiles, stages), f"producer warp {warp}"


def test_the_tensor_cores_take_the_groups_in_the_timelines_order(pingpong):
    stages, tiles, ev = pingpong
    tc = [(e["wg"], e["what"]) for e in sorted(plots.pingpong_timeline(tiles, stages),
                                               key=lambda e: e["start"])
          if e["who"] == "tc"]
    assert ev["order"] == tc
    assert [wg for wg, _ in tc[:4]] == [0, 1, 0, 0]       # warpgroup 1 first, then turns


def test_another_kernel_does_not_match():
    # the comparison can fail: twostage's consumers take no turns
    tiles = S + 1
    ev = run_events("twostage", tiles)
    assert ev[4] != expected_consumer(0, tiles)
    assert not any(e[0].startswith("bar.") and e[1] in (1, 2) for e in ev[4])


def test_the_schedule_follows_the_ring_depth():
    for stages in (2, 3):
        ev = plots.pingpong_timeline(tiles=stages + 2, stages=stages)
        copies = {(e["what"], e["tile"]): e for e in ev if e["who"] in ("p0", "p1", "p2", "p3")}
        empty = {(e["what"], e["tile"]): e["start"] for e in ev if e["who"] == "empty"}
        for (kind, j), e in copies.items():       # a copy into a used stage waits for its emptying
            if j >= stages:
                assert e["start"] >= empty[(kind, j - stages)]
            else:                                   # a free stage: right after the warp's last copy
                assert e["start"] == (copies[(kind, j - 2)]["end"] if j >= 2 else 0.0)
        softmax = [e for e in ev if e["who"].startswith("wg")]
        assert len(softmax) == plots.consumers() * (stages + 2)


def test_the_diagram_is_drawn_from_the_constants():
    fig = plots.plot_pingpong()
    texts = [t.get_text() for t in fig.findobj(matplotlib.text.Text) if t.get_text()]
    tiles = S + 1
    assert f"K{tiles - 1}>s{(tiles - 1) % S}" in texts and f"K{tiles}>s{tiles % S}" not in texts
    assert sum(t.startswith("sm") for t in texts) == plots.consumers() * tiles
    assert f"warpgroup {plots.consumers()}: softmax" in texts
    assert f"warpgroup 1 ({plots.pingpong_constants()['fa3_rows'] // plots.consumers()} rows)" in texts
    assert report.smallest_text_px(fig) >= report.MIN_TEXT_PX
    plt.close(fig)
