"""Inspection: every lane's registers when a warp reaches a chosen CUDA source line.

    >>> snap = ptx.registers_at(prog, "warp_sum", 31, grid=4, block=32, args=(x, out, np.int32(4)),
    ...                         at_block=(2, 0, 0), at_warp=0)
    >>> print(snap.table())              # lanes x the registers that line's instructions use
    >>> snap["%f1"]                      # one register, (32,) in its declared type
    >>> snap.plot(["%f1", "%r3"])         # matplotlib heatmap, lanes x registers

Registers are named by their PTX names (%r5, %f12, %rd3, %p1); which CUDA variable each one holds
is not recovered (NVRTC's -lineinfo has no variable locations).
"""
from __future__ import annotations

import fnmatch

import numpy as np

from .errors import frames, is_builtin, short_path
from .program import launch


class _Stop(Exception):
    pass


class RegisterSnapshot:
    """Registers of one warp just before it executed the first instruction of a source line."""

    def __init__(self, names, values, active, line_regs, where):
        self.names = names                      # PTX register names, declaration order
        self.values = values                    # name -> (32,) array (declared type)
        self.active = active                    # (32,) bool: lanes that reached the line
        self.line_regs = line_regs              # registers the line's instructions use
        self.where = where                      # text: kernel, line, block, warp, PTX

    def __getitem__(self, name):
        return self.values[name]

    def select(self, regs=None) -> list[str]:
        if regs is None:
            return list(self.line_regs)
        if isinstance(regs, str):
            regs = [regs]
        out = []
        for pat in regs:
            out += [n for n in self.names if fnmatch.fnmatchcase(n, pat) and n not in out]
        return out

    def table(self, regs=None, lanes=range(32)) -> str:
        """Text table: one row per lane, one column per register (default: the line's)."""
        cols = self.select(regs)
        head = ["lane"] + cols
        rows = []
        for ln in lanes:
            cells = [str(ln) + ("" if self.active[ln] else "*")]
            for c in cols:
                v = self.values[c][ln]
                if isinstance(v, (np.floating, float)):
                    cells.append(f"{float(v):.6g}")
                elif isinstance(v, (np.bool_, bool)):
                    cells.append("1" if v else "0")
                else:
                    cells.append(str(int(v)))
            rows.append(cells)
        width = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
        fmt = lambda r: "  ".join(c.rjust(wd) for c, wd in zip(r, width))  # noqa: E731
        lines = [self.where, fmt(head)] + [fmt(r) for r in rows]
        if not self.active.all():
            lines.append("(* = lane not at this line: diverged, exited or absent)")
        return "\n".join(lines)

    def plot(self, regs=None, ax=None):
        """Heatmap of the chosen registers (lanes down, registers across) as floats."""
        import matplotlib.pyplot as plt
        cols = self.select(regs)
        data = np.stack([self.values[c].astype(np.float64) for c in cols], axis=1)
        if ax is None:
            _, ax = plt.subplots(figsize=(1 + 0.6 * len(cols), 8))
        im = ax.imshow(data, aspect="auto", cmap="viridis")
        ax.set_xticks(range(len(cols)), cols, rotation=90)
        ax.set_yticks(range(32))
        ax.set_ylabel("lane")
        ax.set_title(self.where.splitlines()[0], fontsize=8)
        ax.figure.colorbar(im, ax=ax)
        return ax

    def __repr__(self):
        return self.table()


def _reg_names(op, kernel):
    out = []

    def walk(o):
        if o is None:
            return
        if o[0] == "reg":
            out.append(kernel.regs[o[1]][0])
        elif o[0] == "addr":
            walk(o[1])
        elif o[0] == "vec":
            for x in o[1]:
                walk(x)
        elif o[0] == "pair":
            walk(o[1])
            walk(o[2])
        elif o[0] == "not":
            walk(o[1])
    for o in op.instr.operands:
        walk(o)
    if op.instr.guard:
        out.append(kernel.regs[op.instr.guard[0]][0])
    return out


def _matches(instr, line, file, files):
    """Whether ``instr`` comes from source ``line``: its own position or any call site it is
    inlined at (so the line of a call to a helper or a CUDA intrinsic covers the inlined code).
    Without ``file``, frames in CUDA's own headers do not count (``errors.is_builtin``)."""
    for path, ln, _ in frames(instr, files):
        if ln != line:
            continue
        if file is None:
            if not is_builtin(path):
                return True
        elif short_path(path).endswith(file) or path.endswith(file):
            return True
    return False


def registers_at(prog, kernel: str, line: int, *, file: str | None = None, at_block=(0, 0, 0),
                 at_warp: int = 0, occurrence: int = 0, **launch_kw) -> RegisterSnapshot:
    """Launch ``kernel`` (``launch_kw`` as for :func:`fraglab.ptx.launch`: grid, block, args,
    ...) and return the registers of warp ``at_warp`` of block ``at_block`` when it first (or,
    ``occurrence`` = n, the n-th time) reaches CUDA source ``line`` (of ``file``, default any
    file). The launch stops there; arrays are only partly written."""
    info = prog.info(kernel)
    ab = tuple(at_block) if isinstance(at_block, (tuple, list)) else (int(at_block),)
    block = ab + (0,) * (3 - len(ab))
    warp = at_warp
    targets = {id(op): pc for pc, op in enumerate(info.code)
               if _matches(op.instr, line, file, prog.files)}
    if not targets:
        raise ValueError(f"no instruction of {kernel} comes from source line {line}"
                         + (f" of {file}" if file else ""))
    line_regs = []
    for op in info.code:
        if id(op) in targets:
            line_regs += [r for r in _reg_names(op, info.kernel) if r not in line_regs]
    seen = [0]
    out = {}
    last = [None]

    def hook(w, op, m):
        if id(op) not in targets or w.block_idx != block or w.index != warp:
            last[0] = None
            return
        pc = targets[id(op)]
        if last[0] is not None and last[0][0] + 1 == w.steps and pc > last[0][1]:
            last[0] = (w.steps, pc)         # still inside the same visit of the line
            return
        last[0] = (w.steps, pc)             # a new visit (after other code, or a loop back edge)
        if seen[0] < occurrence:
            seen[0] += 1
            return
        names = [n for n, _ in info.kernel.regs]
        out["snap"] = RegisterSnapshot(
            names, {n: w.R[i].copy() for i, n in enumerate(names)},
            np.ones(32, bool) & w.live if m is None else m.copy(), line_regs,
            f"{kernel}: line {line}, block {block}, warp {warp} (before `{op.instr.text}`)")
        raise _Stop

    try:
        launch(prog, kernel, hook=hook, **launch_kw)
    except _Stop:
        return out["snap"]
    raise ValueError(f"warp {warp} of block {block} never reached line {line}"
                     + (f" {occurrence + 1} times" if occurrence else ""))


def register_table(prog, kernel, line, regs=None, **kw) -> str:
    """The text table of :func:`registers_at` (registers of that line by default)."""
    return registers_at(prog, kernel, line, **kw).table(regs)


def plot_registers(prog, kernel, line, regs=None, ax=None, **kw):
    """Matplotlib heatmap of :func:`registers_at` (lanes x registers)."""
    return registers_at(prog, kernel, line, **kw).plot(regs, ax=ax)
