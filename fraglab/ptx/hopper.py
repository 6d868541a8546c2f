"""Small sm_90 instructions: ``elect.sync``, ``setmaxnreg`` (a checked no-op) and
``griddepcontrol`` (no-ops: the interpreter runs one grid at a time). The larger Hopper pieces
live in :mod:`.wgmma` (warpgroup MMA) and :mod:`.mbarrier` (mbarriers, named barriers, bulk
copies); ``stmatrix`` is in :mod:`.tensor` beside ``ldmatrix``."""
from __future__ import annotations

import numpy as np

from .collectives import member_groups
from .decode import mods, unsupported
from .errors import BarrierError, raise_at
from .registry import handler
from .tensor import _require_full

_LANE_IDS = np.arange(32, dtype=np.uint32)


@handler("elect")
def h_elect(ins, dc):
    """elect.sync d|p, membermask: the lowest lane of each lane's own member mask is elected
    (per-lane masks, as the other collectives: tiles of a warp elect one leader each); every lane
    gets its leader's id in d, and p is true in the leaders only."""
    op = ins.operands[0]
    d, p = (op[1], op[2]) if op[0] == "pair" else (op, None)
    wr_d = dc.writer(d, "u32", ins)
    wr_p = dc.writer(p, "pred", ins) if p is not None else None
    mask = dc.reader(ins.operands[1], "u32", ins)

    def fn(w, m):
        groups = member_groups(w, ins, m, mask(w)).astype(np.int64)
        low = groups & -groups                           # each group's lowest bit
        leader = np.where(groups != 0, np.log2(np.maximum(low, 1)).astype(np.uint32), 0)
        wr_d(w, leader.astype(np.uint32), m)
        if wr_p is not None:
            wr_p(w, (_LANE_IDS == leader) & (groups != 0), m)
    return fn


@handler("setmaxnreg")
def h_setmaxnreg(ins, dc):
    """setmaxnreg.{inc,dec}.sync.aligned.u32 N: register reallocation between warpgroups. No
    effect here; N must be 24 to 256 in steps of 8, the whole warp must execute it, and all warps
    of a warpgroup must execute the same sequence (checked when the block ends)."""
    op = ins.operands[0]
    if op[0] != "imm":
        unsupported(ins, "setmaxnreg needs an immediate count")
    n = int(op[1])
    if mods(ins)[0] not in ("inc", "dec"):
        unsupported(ins)

    def fn(w, m):
        if not (24 <= n <= 256 and n % 8 == 0):
            raise_at(BarrierError, f"setmaxnreg {n}: the register count must be a multiple of 8 "
                     "from 24 to 256", w, ins, lane=0)
        _require_full(w, ins, m)
        w.maxnreg.append((n, ins))
    return fn


@handler("griddepcontrol")
def h_griddepcontrol(ins, dc):
    return lambda w, m: None
