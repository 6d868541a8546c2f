"""Chapter 07's tile diagram (plots.plot_tiles) is drawn from the tiles and tells the truth: the
thread it marks on each output of C (plots.owners) is the thread whose st.global writes that
output when the rung's own kernel runs on the PTX interpreter (CPU, one block)."""
import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from fraglab import ptx, report  # noqa: E402
from fraglab.register_reuse import kernels, plots  # noqa: E402


def stored_by(variant: str, t: dict) -> np.ndarray:
    """(BM, BN): threadIdx.x of the thread that stored each element of C, for one block of
    ``variant`` with tiles ``t`` (M = BM, N = BN, K = BK), read from the interpreter's st.global
    instructions as they run."""
    bm, bn, bk = kernels.block_tile(variant, t)
    prog = ptx.load(kernels.kernel_file(variant), "sm_80", defines=t)
    info = prog.info(f"sgemm_{variant}")
    names = [n for n, _ in info.kernel.regs]
    c = np.zeros((bm, bn), np.float32)
    seen = []                                         # (threads, addresses) of each store

    def hook(w, op, m):
        ins = op.instr
        if not ins.opcode.startswith("st.global"):
            return
        kind, base, off = ins.operands[0]
        assert kind == "addr" and base[0] == "reg", ins.text
        lanes = np.ones(32, bool) if m is None else m.copy()
        lanes &= w.live
        if op.guard is not None:
            p = w.R[op.guard].astype(bool)
            lanes &= ~p if op.neg else p
        width = 4 * (int(ins.opcode.split(".v")[1][0]) if ".v" in ins.opcode else 1)
        addr = w.R[base[1]].astype(np.int64) + off
        for lane in np.flatnonzero(lanes):
            seen.append((w.index * 32 + lane, int(addr[lane]), width))
        assert names[base[1]]                           # the register is the kernel's

    a = np.ones((bm, bk), np.float32)
    b = np.ones((bk, bn), np.float32)
    ptx.launch(prog, f"sgemm_{variant}", grid=(1, 1), block=(kernels.threads(variant, t),),
               args=(a, b, c, np.int32(bm), np.int32(bn), np.int32(bk)),
               shared_mem=kernels.dynamic_smem(variant, t), hook=hook)
    assert (c == bk).all()                              # the kernel ran: C = A @ B
    base = min(addr for _, addr, _ in seen)
    out = np.full(bm * bn, -1)
    for thread, addr, width in seen:
        first = (addr - base) // 4
        assert (out[first:first + width // 4] == -1).all(), "an output stored twice"
        out[first:first + width // 4] = thread
    return out.reshape(bm, bn)


@pytest.mark.parametrize("variant", ["warptile", "autotuned"])
def test_owners_are_the_threads_that_store(variant):
    t = kernels.tiles(variant)
    got = stored_by(variant, t)
    assert (got >= 0).all(), "some outputs were never stored"
    assert np.array_equal(plots.owners(t), got)


def test_owners_would_see_a_wrong_lane_grid():
    # the check can fail: the same tiles read with lanes as 8 x 4 instead of 4 x 8 put other
    # threads on the outputs than the kernel's stores
    t = kernels.tiles("warptile")
    wrong = dict(t, LM=8)
    assert not np.array_equal(plots.owners(wrong), stored_by("warptile", t))


def test_every_output_has_one_owner_and_each_thread_its_share():
    t = kernels.tiles(kernels.FINAL)
    own = plots.owners(t)
    n = kernels.threads(kernels.FINAL, t)
    counts = np.bincount(own.ravel(), minlength=n)
    assert own.min() == 0 and len(counts) == n
    assert (counts == t["BM"] * t["BN"] // n).all()


def _texts(fig):
    return [x.get_text() for x in fig.findobj(matplotlib.text.Text) if x.get_text()]


@pytest.mark.parametrize("variant, override", [(kernels.FINAL, {}),
                                               ("warptile", {}),
                                               ("autotuned", dict(BM=64, WM=32, BN=128, WN=64))])
def test_the_diagram_is_drawn_from_the_tiles(variant, override):
    t = kernels.tiles(variant, **override)
    bm, bn, bk = kernels.block_tile(variant, t)
    fig = plots.plot_tiles(override, variant)
    texts = " | ".join(_texts(fig))
    warps = kernels.threads(variant, t) // 32
    lm, ln = t["WM"] // (4 * t["LM"]) * 4, t["WN"] // (4 * (32 // t["LM"])) * 4
    assert f"{bm} x {bn} outputs of C, {warps} warps" in texts
    assert f"A: {bm} x {bk}" in texts and f"B: {bk} x {bn}" in texts
    assert f"warp {warps - 1}" in texts and f"warp {warps}\n" not in texts
    assert f"warp 0: {t['WM']} x {t['WN']}" in texts
    assert f"lane 0: {lm} x {ln} outputs" in texts
    assert report.smallest_text_px(fig) >= report.MIN_TEXT_PX
    plt.close(fig)


def test_a_rung_without_warp_tiles_is_refused():
    with pytest.raises(ValueError, match="no warp tiles"):
        plots.plot_tiles(None, "tile2d")
