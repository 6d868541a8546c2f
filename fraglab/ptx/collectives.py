"""Warp collectives: shfl.sync (idx/up/down/bfly with the c operand's clamp and segment mask),
vote.sync, match.sync, redux.sync, activemask, bar.warp.sync.

Member masks are per lane, as in the PTX ISA: each executing lane passes its own ``membermask``
and its result is computed over the lanes *of its own mask* (which, by the checks below, are
exactly the lanes executing the instruction with that mask). So lanes 0-15 passing 0x0000ffff and
lanes 16-31 passing 0xffff0000 in one ``vote.sync.ballot`` (what ``cg::tiled_partition<16>``
emits) are two independent ballots: each lane gets the bits of its own half only; the same for
all/any/uni, match.any/all (``d`` and ``p`` of match.all say whether the lane's own group agrees)
and redux. A shuffle lane may only read a lane of its own mask.

Member-mask rules (CUDA's, checked): a lane that executes a *.sync instruction must be named in
its member mask; every lane the mask names must execute the instruction together with it (same
instruction, same time: with the minimum-PC scheduler, not diverged or exited), and with the same
mask (the masks split the executing lanes into disjoint groups). A shuffle that reads from a lane
outside the reader's mask, or one that does not take part, is an error too (its value would be
undefined). bar.warp.sync makes each lane wait for the lanes of its own mask.
"""
from __future__ import annotations

import numpy as np

from .decode import DT, lanes_of, last_type, mods, unsupported
from .registry import handler
from .errors import CollectiveError, defer_or_raise, raise_at

FULL = 0xFFFFFFFF
LANES = np.arange(32, dtype=np.uint32)
_BITS = (np.uint64(1) << np.arange(32, dtype=np.uint64))
_FULL_GROUPS = np.full(32, FULL, np.uint32)          # every lane's group: the whole warp
_FULL_GROUPS.flags.writeable = False


def exec_bits(m) -> int:
    return FULL if m is None else int((_BITS * m).sum())


def bits_of(sel) -> int:
    """The 32 booleans `sel` as one 32-bit mask (lane i -> bit i)."""
    return int(np.packbits(sel.astype(bool, copy=False), bitorder="little").view("<u4")[0])


def _hex(v) -> str:
    return f"{int(v):#010x}"


def member_groups(w, ins, m, mask_of):
    """Check the member-mask rules (module docstring) and return each lane's group: a (32,)
    uint32 array holding, for every executing lane, its member mask (all of whose lanes execute
    with the same mask), 0 for the other lanes. The common case, the whole warp with the full
    mask, returns a shared read-only array of 0xffffffff without further work."""
    if m is None and mask_of.min() == FULL:
        return _FULL_GROUPS                       # the whole warp, the full mask: the common case
    ex = exec_bits(m)
    lanes = lanes_of(m)
    masks = mask_of[lanes].astype(np.uint32)
    me = (np.uint32(1) << lanes.astype(np.uint32))
    out = (masks & me) != me
    if out.any():
        k = int(np.argmax(out))
        raise_at(CollectiveError, f"{ins.opcode}: lane {int(lanes[k])} executes it but its member "
                 f"mask {_hex(masks[k])} leaves it out", w, ins, lane=int(lanes[k]))
    missing = masks & ~np.uint32(ex)
    if missing.any():
        k = int(np.argmax(missing != 0))
        bad = int(missing[k])
        j = (bad & -bad).bit_length() - 1
        why = "has exited or does not exist" if not w.live[j] else \
            "is at another instruction (the warp has diverged)"
        union = int(np.bitwise_or.reduce(missing))
        waiting_for = ((np.uint32(union) >> LANES) & np.uint32(1)).astype(bool)
        defer_or_raise(CollectiveError, f"{ins.opcode}: the member mask {_hex(masks[k])} "
                       f"names lane {j}, which does not execute this instruction together with "
                       f"lane {int(lanes[k])} (lane {j} {why}); every lane named in the mask "
                       "must reach the same *_sync call", w, ins, int(lanes[k]), waiting_for)
    groups = np.zeros(32, np.uint32)
    groups[lanes] = masks
    if (masks != masks[0]).any():                 # per-lane masks: each must name its own group
        names = ((masks[:, None] >> LANES[None, :]) & np.uint32(1)).astype(bool)
        differ = names & (groups[None, :] != masks[:, None])
        if differ.any():
            k, j = (int(x) for x in np.argwhere(differ)[0])
            i = int(lanes[k])
            raise_at(CollectiveError, f"{ins.opcode}: lane {i} passes the member mask "
                     f"{_hex(masks[k])}, which names lane {j}, but lane {j} passes "
                     f"{_hex(groups[j])}; every lane named in a mask must execute the "
                     "instruction with the same mask (the masks must split the lanes into "
                     "disjoint groups, like 0xffff << (lane & 16))", w, ins, lane=i)
    return groups


def check_members(w, ins, m, mask_of) -> int:
    """The member-mask checks of :func:`member_groups`; returns the executing lanes' bits."""
    member_groups(w, ins, m, mask_of)
    return exec_bits(m)


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
        g = member_groups(w, ins, m, mk(w))
        src, ok = routed(w)
        if g is not _FULL_GROUPS:                 # each lane reads within its own mask
            lanes = lanes_of(m)
            s = src[lanes]
            bad = ((g[lanes] >> s.astype(np.uint32)) & np.uint32(1)) == 0
            if bad.any():
                k = int(np.argmax(bad))
                i, j = int(lanes[k]), int(s[k])
                why = "does not take part in the shuffle" if g[j] == 0 else \
                    f"is outside its member mask {_hex(g[i])}"
                raise_at(CollectiveError, f"{ins.opcode}: lane {i} reads lane {j}, which {why} "
                         "(the value it would get is undefined)", w, ins, lane=i)
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
        if mk is not None:
            g = member_groups(w, ins, m, mk(w))
        else:                                     # vote without .sync: the executing lanes
            g = _FULL_GROUPS if m is None else np.where(m, np.uint32(exec_bits(m)), np.uint32(0))
        yes = np.uint32(bits_of(a(w)))
        if mode == "ballot":                      # the lanes of its group whose predicate holds
            wr(w, g & yes, m)
        elif mode == "all":
            wr(w, (g & ~yes) == 0, m)
        elif mode == "any":
            wr(w, (g & yes) != 0, m)
        else:
            wr(w, ((g & ~yes) == 0) | ((g & yes) == 0), m)
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
        g = member_groups(w, ins, m, mk(w))
        v = a(w)
        same = np.packbits(v[:, None] == v[None, :], axis=1, bitorder="little")
        d = same.view("<u4").ravel() & g          # the lanes of its group holding its value
        if mode == "any":
            wd(w, d, m)
        else:                                     # its whole group agrees: d = the group, p
            agree = d == g
            wd(w, np.where(agree, g, np.uint32(0)), m)
            if wp is not None:
                wp(w, agree, m)
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

    def reduce(v):
        r = f(v.astype(np.int64) if op == "add" and t == "s32" else v)
        return np.array(int(r) & 0xFFFFFFFF, np.uint32).view(dt)

    def fn(w, m):
        g = member_groups(w, ins, m, mk(w))
        v = a(w)
        if g is _FULL_GROUPS:
            wr(w, np.full(32, reduce(v), dt), m)
            return
        out = np.zeros(32, dt)
        for grp in np.unique(g[lanes_of(m)]):     # each group reduces over its own lanes
            mine = ((grp >> LANES) & np.uint32(1)).astype(bool)
            out[mine] = reduce(v[mine])
        wr(w, out, m)
    return fn


def bar_warp_sync(ins, dc):
    mk = dc.reader(ins.operands[0], "u32", ins)

    def fn(w, m):
        member_groups(w, ins, m, mk(w))           # each lane waits for the lanes of its mask
        w.sync_epoch += 1
    return fn
