"""ptxas's ``-v`` report read into numbers: per kernel its registers, barriers, shared and
constant memory, stack frame and spills (what :class:`fraglab.toolchain.Build`'s ``resources``
hold)."""
from __future__ import annotations

import re

_PTXAS_FUNC = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"Used (\d+) registers")


def parse_ptxas_log(log: str) -> dict[str, dict]:
    """Per kernel: registers, barriers, smem, cmem0, stack_frame, spill_stores, spill_loads (bytes)."""
    res: dict[str, dict] = {}
    cur = None
    for line in log.splitlines():
        m = _PTXAS_FUNC.search(line)
        if m:
            cur = res.setdefault(m.group(1), dict(registers=0, barriers=0, smem=0, cmem0=0,
                                                  stack_frame=0, spill_stores=0, spill_loads=0))
            continue
        if cur is None:
            continue
        m = _PTXAS_FRAME.search(line)
        if m:
            cur.update(stack_frame=int(m.group(1)), spill_stores=int(m.group(2)),
                       spill_loads=int(m.group(3)))
        if _PTXAS_USED.search(line):
            cur["registers"] = int(_PTXAS_USED.search(line).group(1))
            for key, pat in (("barriers", r"used (\d+) barriers"), ("smem", r"(\d+) bytes smem"),
                             ("cmem0", r"(\d+) bytes cmem\[0\]")):
                mm = re.search(pat, line)
                cur[key] = int(mm.group(1)) if mm else 0
    return res
