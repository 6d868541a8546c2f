"""Warp collectives: shfl.sync (idx/up/down/bfly with the c operand's clamp and segment mask),
vote.sync, match.sync, redux.sync, activemask, bar.warp.sync.

Member-mask rules (CUDA's, checked): a lane that executes a *.sync instruction must be named in
its member mask, and every lane the mask names must execute the instruction together with it
(same instruction, same time: with the minimum-PC scheduler, not diverged or exited). A shuffle
that reads from a lane that does not take part is an error too (its value would be undefined).
"""
from __future__ import annotations

import numpy as np

from .decode import DT, lanes_of, last_type, mods, unsupported
from .registry import handler
from .errors import CollectiveError, defer_or_raise, raise_at

LANES = np.arange(32, dtype=np.uint32)
_BITS = (np.uint64(1) << np.arange(32, dtype=np.uint64))


def exec_bits(m) -> int:
    return 0xFFFFFFFF if m is None else int((_BITS * m).sum())


def check_members(w, ins, m, mask_of):
    """mask_of: (32,) uint32 member masks (per lane). Raises CollectiveError on a violation."""
    if m is None and mask_of.min() == 0xFFFFFFFF:
        return 0xFFFFFFFF                         # the whole warp, the full mask: the common case
    ex = exec_bits(m)
    lanes = lanes_of(m)
    masks = mask_of[lanes].astype(np.uint64)
    me = _BITS[lanes]
    if (masks & me != me).any():
        k = int(np.argmax(masks & me != me))
        raise_at(CollectiveError, f"{ins.opcode}: lane {int(lanes[k])} executes it but its member "
                 f"mask {int(masks[k]):#010x} leaves it out", w, ins, lane=int(lanes[k]))
    missing = masks & ~np.uint64(ex)
    if missing.any():
        k = int(np.argmax(missing != 0))
        bad = int(missing[k])
        j = (bad & -bad).bit_length() - 1
        why = "has exited or does not exist" if not w.live[j] else \
            "is at another instruction (the warp has diverged)"
        union = int(np.bitwise_or.reduce(missing))
        waiting_for = ((np.uint64(union) >> LANES.astype(np.uint64)) & np.uint64(1)).astype(bool)
        defer_or_raise(CollectiveError, f"{ins.opcode}: the member mask {int(masks[k]):#010x} "
                       f"names lane {j}, which does not execute this instruction together with "
                       f"lane {int(lanes[k])} (lane {j} {why}); every lane named in the mask "
                       "must reach the same *_sync call", w, ins, int(lanes[k]), waiting_for)
    return ex


@handler("shfl")
def h_shfl(ins, dc):
    md = mods(ins)
    if "sync" not in md:
        unsupported(ins, "shfl without .sync (removed on sm_70+)")
    mode = next(x for x in md if x in ("idx", "up", "down", "bfly"))
    t = last_type(ins)
    dst = ins.operands[0]
    if dst[0] == "pair":
        wd, wp = dc.writer(dst[1], t, ins), dc.writer(dst[2], "pred", ins)
    else:
        wd, wp = dc.writer(dst, t, ins), None
    a = dc.reader(ins.operands[1], t, ins)
    b = dc.reader(ins.operands[2], "u32", ins)
    c = dc.reader(ins.operands[3], "u32", ins)
    mk = dc.reader(ins.operands[4], "u32", ins)

    def route(bv, cv):
        """(source lane, predicate) of every lane, by the PTX ISA's pseudo-code."""
        bv = bv & np.uint32(0x1F)
        clamp = cv & np.uint32(0x1F)
        seg = (cv >> np.uint32(8)) & np.uint32(0x1F)
        max_lane = (LANES & seg) | (clamp & ~seg)
        min_lane = LANES & seg
        if mode == "up":
            j = LANES.astype(np.int64) - bv
            ok = j >= max_lane                      # the PTX ISA's rule (CUDA passes c = 0)
        elif mode == "down":
            j = LANES.astype(np.int64) + bv
            ok = j <= max_lane
        elif mode == "bfly":
            j = (LANES ^ bv).astype(np.int64)
            ok = j <= max_lane
        else:
            j = (min_lane | (bv & ~seg)).astype(np.int64)
            ok = j <= max_lane
        return np.where(ok, j, LANES).astype(np.int64), ok

    static = None
    if ins.operands[2][0] == "imm" and ins.operands[3][0] == "imm":
        static = route(b(None), c(None))          # constant b and c: routed once, at decode

    cache: dict = {}

    def routed(w):
        if static is not None:
            return static
        bv, cv = b(w), c(w)
        b0, c0 = bv[0], cv[0]
        if (bv == b0).all() and (cv == c0).all():     # warp-uniform b and c: route once
            key = (int(b0), int(c0))
            hit = cache.get(key)
            if hit is None:
                hit = cache[key] = route(bv, cv)
            return hit
        return route(bv, cv)

    def fn(w, m):
        ex = check_members(w, ins, m, mk(w))
        src, ok = routed(w)
        if m is None and ex == 0xFFFFFFFF:
            wd(w, a(w)[src], m)
            if wp is not None:
                wp(w, ok, m)
            return
        lanes = lanes_of(m)
        bad = ((np.uint64(ex) >> src[lanes].astype(np.uint64)) & np.uint64(1)) == 0
        if bad.any():
            k = int(np.argmax(bad))
            raise_at(CollectiveError, f"{ins.opcode}: lane {int(lanes[k])} reads lane "
                     f"{int(src[lanes[k]])}, which does not take part in the shuffle (its value "
                     "is undefined)", w, ins, lane=int(lanes[k]))
        wd(w, a(w)[src], m)
        if wp is not None:
            wp(w, ok, m)
    return fn


@handler("vote")
def h_vote(ins, dc):
    md = mods(ins)
    mode = next(x for x in md if x in ("all", "any", "uni", "ballot"))
    a = dc.reader(ins.operands[1], "pred", ins)
    mk = dc.reader(ins.operands[2], "u32", ins) if len(ins.operands) > 2 else None
    wr = dc.writer(ins.operands[0], "b32" if mode == "ballot" else "pred", ins)

    def fn(w, m):
        ex = check_members(w, ins, m, mk(w)) if mk is not None else exec_bits(m)
        p = a(w)
        act = np.array([(ex >> i) & 1 for i in range(32)], bool)
        sel = p & act
        if mode == "ballot":
            wr(w, np.full(32, int((_BITS * sel).sum()), np.uint32), m)
        elif mode == "all":
            wr(w, np.full(32, bool(np.all(p[act]))), m)
        elif mode == "any":
            wr(w, np.full(32, bool(np.any(sel))), m)
        else:
            v = p[act]
            wr(w, np.full(32, bool(v.all() or not v.any())), m)
    return fn


@handler("activemask")
def h_activemask(ins, dc):
    wr = dc.writer(ins.operands[0], "b32", ins)
    return lambda w, m: wr(w, np.full(32, exec_bits(m), np.uint32), m)


@handler("match")
def h_match(ins, dc):
    md = mods(ins)
    mode = "any" if "any" in md else "all"
    t = last_type(ins)
    dst = ins.operands[0]
    if dst[0] == "pair":
        wd, wp = dc.writer(dst[1], "b32", ins), dc.writer(dst[2], "pred", ins)
    else:
        wd, wp = dc.writer(dst, "b32", ins), None
    a = dc.reader(ins.operands[1], t, ins)
    mk = dc.reader(ins.operands[2], "u32", ins)

    def fn(w, m):
        ex = check_members(w, ins, m, mk(w))
        v = a(w)
        act = ((np.uint64(ex) >> LANES.astype(np.uint64)) & np.uint64(1)).astype(bool)
        same = (v[:, None] == v[None, :]) & act[None, :]
        bits = (same.astype(np.uint64) * _BITS[None, :]).sum(axis=1).astype(np.uint32)
        if mode == "any":
            wd(w, bits, m)
        else:
            allsame = bool((bits[act] == np.uint32(ex)).all())
            wd(w, np.full(32, ex if allsame else 0, np.uint32), m)
            if wp is not None:
                wp(w, np.full(32, allsame), m)
    return fn


_REDUX = {"add": lambda v: v.sum(dtype=np.uint64), "min": np.min, "max": np.max,
          "and": np.bitwise_and.reduce, "or": np.bitwise_or.reduce, "xor": np.bitwise_xor.reduce}


@handler("redux")
def h_redux(ins, dc):
    md = mods(ins)
    op = next((x for x in md if x in _REDUX), None)
    t = last_type(ins)
    if op is None or t not in ("u32", "s32", "b32"):
        unsupported(ins)
    a = dc.reader(ins.operands[1], t, ins)
    mk = dc.reader(ins.operands[2], "u32", ins)
    wr = dc.writer(ins.operands[0], t, ins)
    f = _REDUX[op]
    dt = DT[t]

    def fn(w, m):
        check_members(w, ins, m, mk(w))
        v = a(w)[lanes_of(m)]
        r = f(v.astype(np.int64) if op == "add" and t == "s32" else v)
        r = np.array(int(r) & 0xFFFFFFFF, np.uint32).view(dt)
        wr(w, np.full(32, r, dt), m)
    return fn


def bar_warp_sync(ins, dc):
    mk = dc.reader(ins.operands[0], "u32", ins)

    def fn(w, m):
        check_members(w, ins, m, mk(w))
        w.sync_epoch += 1
    return fn
