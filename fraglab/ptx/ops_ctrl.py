"""Control flow: bra, ret/exit, bar.sync/barrier.sync, trap, nanosleep. Divergence and
reconvergence are the executor's job (:mod:`.execute`); these only say where lanes go."""
from __future__ import annotations

import numpy as np

from .decode import KIND_BARRIER, KIND_BRANCH, KIND_EXIT, Op, mods, unsupported
from .registry import handler
from .errors import TrapError, raise_at


@handler("bra")
def h_bra(ins, dc):
    tgt = ins.operands[0]
    if tgt[0] != "sym" or tgt[1] not in dc.kernel.labels:
        unsupported(ins, f"branch target {tgt!r} is not a label of this kernel")
    return Op(ins, None, KIND_BRANCH, dc.kernel.labels[tgt[1]])


@handler("ret", "exit")
def h_ret(ins, dc):
    return Op(ins, None, KIND_EXIT)


@handler("bar", "barrier")
def h_bar(ins, dc):
    md = [x for x in mods(ins) if x not in ("cta", "aligned")]     # bar.cta.sync == bar.sync
    if "warp" in md:
        from .collectives import bar_warp_sync
        return bar_warp_sync(ins, dc)
    if md and md[0] == "red":
        return _bar_red(ins, dc)
    op = ins.operands[0] if ins.operands else ("imm", 0, "int")
    if (md and md[0] == "arrive") or len(ins.operands) > 1 or op[0] != "imm":
        from .mbarrier import named_barrier      # counted / named barriers (producer-consumer)
        return named_barrier(ins, dc)
    o = Op(ins, None, KIND_BARRIER)
    o.barrier_id = int(op[1])
    return o


def _bar_red(ins, dc):
    """bar.red.{popc.u32, and.pred, or.pred} d, id, {!}p (__syncthreads_count/and/or): the
    block-wide reduction of p over the threads that wait, delivered at the barrier's release."""
    md = mods(ins)
    op = next((x for x in md if x in ("popc", "and", "or")), None)
    ops = ins.operands
    if op is None or len(ops) != 3 or ops[1][0] != "imm":
        unsupported(ins, "bar.red with a thread count or register barrier id")
    pred = dc.reader(ops[2], "pred", ins)
    t = "u32" if op == "popc" else "pred"
    wr = dc.writer(ops[0], t, ins)

    def arrive(w, m):
        v = pred(w)
        if m is None:
            w.bar_vals[:] = v
        else:
            np.copyto(w.bar_vals, v, where=m)

    def release(warps):
        vals = np.concatenate([w.bar_vals[w.waiting] for w in warps])
        value = {"popc": int(vals.sum()), "and": bool(vals.all()), "or": bool(vals.any())}[op]
        for w in warps:
            if w.waiting.any():
                wr(w, np.full(32, value, np.uint32 if t == "u32" else bool), w.waiting.copy())
    o = Op(ins, arrive, KIND_BARRIER)
    o.release = release
    return o


@handler("trap", "brkpt")
def h_trap(ins, dc):
    def fn(w, m):
        raise_at(TrapError, f"the kernel executed `{ins.base}` (a failed assert, or code that is "
                 "compiled out on this target)", w, ins, lane=int(m.argmax()) if m is not None else 0)
    return fn


@handler("nanosleep", "pmevent")
def h_sleep(ins, dc):
    return lambda w, m: None
