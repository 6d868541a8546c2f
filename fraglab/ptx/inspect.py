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

from .frames import frames, is_builtin, short_path
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


def _operand_regs(o):
    """The register indices an operand names (through addresses, vectors, pairs and negations)."""
    if o is None:
        return
    if o[0] == "reg":
        yield o[1]
    elif o[0] in ("addr", "not"):
        yield from _operand_regs(o[1])
    elif o[0] == "vec":
        for x in o[1]:
            yield from _operand_regs(x)
    elif o[0] == "pair":
        yield from _operand_regs(o[1])
        yield from _operand_regs(o[2])


def _reg_names(op, kernel):
    out = [kernel.regs[i][0] for o in op.instr.operands for i in _operand_regs(o)]
    if op.instr.guard:
        out.append(kernel.regs[op.instr.guard[0]][0])
    return out


def _matches(instr, line, file, files):
    """Whether ``instr`` comes from source ``line``: its own position or any call site it is
    inlined at (so the line of a call to a helper or a CUDA intrinsic covers the inlined code).
    Without ``file``, frames in CUDA's own headers do not count (``frames.is_builtin``)."""
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


# --- which lane each shuffle reads: the butterfly ---------------------------------------------

class ShuffleStep:
    """One ``shfl.sync`` a warp executed: the lane each lane read (the interpreter's own routing,
    probed), the shuffled register before it, and the instruction that combined the result."""

    def __init__(self, text, src, before, combine, after):
        self.text = text                        # the shfl instruction, as in the PTX
        self.src = src                          # (32,) int: the lane each lane read, -1: none
        self.before = before                    # (32,) the shuffled register (in after's type)
        self.combine = combine                  # the instruction consuming the shuffled value
        self.after = after                      # (32,) its result

    @property
    def mode(self) -> str:
        """``bfly``, ``up``, ``down`` or ``idx``."""
        modes = ("bfly", "up", "down", "idx")
        return next(m for m in self.text.split()[0].split(".") if m in modes)

    @property
    def offset(self) -> int | None:
        """``lane ^ source`` when it is the same for every lane that read (a butterfly step's
        offset), else None."""
        lanes = np.flatnonzero(self.src >= 0)
        x = set((lanes ^ self.src[lanes]).tolist())
        return x.pop() if len(x) == 1 else None

    def __repr__(self):
        return f"ShuffleStep({self.text!r}, offset {self.offset}, then {self.combine!r})"


class ShuffleTrace(list):
    """The :class:`ShuffleStep` s of one warp, in execution order (:func:`shuffle_trace`)."""

    def __init__(self, steps, where):
        super().__init__(steps)
        self.where = where

    def values(self) -> list[np.ndarray]:
        """Every lane's value before the first step and after each step: (steps + 1) arrays."""
        return [self[0].before] + [s.after for s in self] if self else []

    def plot(self, ax=None, labels=None, fontsize: float = 6.6):
        """The butterfly: one row per stage (lanes across), each lane's value in its cell, and a
        line from every lane to the lane it read at each step (see :func:`plot_shuffles`)."""
        return plot_shuffles(self, ax=ax, labels=labels, fontsize=fontsize)


def _reg(operand):
    """Register index of a ``("reg", i)`` operand (or a ``pair``'s first), else None."""
    if operand[0] == "pair":
        operand = operand[1]
    return operand[1] if operand[0] == "reg" else None


def _reads(instr) -> set[int]:
    return {i for o in instr.operands[1:] for i in _operand_regs(o)}


def shuffle_trace(prog, kernel: str, *, at_block=(0, 0, 0), at_warp: int = 0,
                  **launch_kw) -> ShuffleTrace:
    """Launch ``kernel`` (``launch_kw`` as for :func:`fraglab.ptx.launch`) and record every
    ``shfl.sync`` that warp ``at_warp`` of block ``at_block`` executes: which lane each lane
    reads, found by running the interpreter's own handler of that instruction once more on lane
    ids (the registers are put back before the real execution), the shuffled value, and the
    first instruction that combines the result (through ``mov`` copies), with its result.

        >>> tr = ptx.shuffle_trace(ptx.load("00_hello_warp"), "warp_sum", grid=1, block=32,
        ...                        args=(row, out, np.int32(1)))
        >>> [s.offset for s in tr]            # [16, 8, 4, 2, 1]
        >>> tr.plot()                         # the butterfly, values and reads
    """
    ab = tuple(at_block) if isinstance(at_block, (tuple, list)) else (int(at_block),)
    block = ab + (0,) * (3 - len(ab))
    steps: list[ShuffleStep] = []
    pend = {"derived": None, "capture": None, "step": None}

    def hook(w, op, m):
        if w.block_idx != block or w.index != at_warp:
            return
        ins = op.instr
        if pend["capture"] is not None:                 # the combining instruction has run
            st = pend["step"]
            st.after = w.R[pend["capture"]].copy()
            if st.before.dtype.itemsize == st.after.dtype.itemsize:
                st.before = st.before.view(st.after.dtype)
            pend["capture"] = None
        if pend["derived"] is not None and _reads(ins) & pend["derived"]:
            dst = _reg(ins.operands[0]) if ins.operands else None
            if ins.base == "mov" and dst is not None:   # a copy of the shuffled value
                pend["derived"].add(dst)
            else:
                pend["step"].combine, pend["capture"], pend["derived"] = ins.text, dst, None
        if ins.base != "shfl":
            return
        d, a = _reg(ins.operands[0]), _reg(ins.operands[1])
        pred = _reg(ins.operands[0][2]) if ins.operands[0][0] == "pair" else None
        saved = {i: w.R[i].copy() for i in (d, a, pred) if i is not None}
        probe = np.full(32, -1, np.int64)
        try:
            w.R[a][:] = np.arange(32).astype(w.R[a].dtype)
            w.R[d][:] = np.array(-1).astype(w.R[d].dtype)
            op.fn(w, m)                                 # the interpreter's routing, on lane ids
            got = w.R[d].astype(np.int64)
            probe = np.where((got >= 0) & (got < 32), got, -1)
            if m is not None:
                probe[~m] = -1
        finally:
            for i, v in saved.items():
                w.R[i][:] = v
        st = ShuffleStep(ins.text, probe, saved[a].copy(), "", None)
        steps.append(st)
        pend["derived"], pend["step"], pend["capture"] = {d}, st, None

    launch_kw.setdefault("seeds", ())
    launch(prog, kernel, hook=hook, **launch_kw)
    for st in steps:
        if st.after is None:
            raise ValueError(f"{kernel}: the result of `{st.text}` is not combined by a later "
                             "instruction of the warp (shuffle_trace needs v = op(v, shfl(v)))")
    if not steps:
        raise ValueError(f"warp {at_warp} of block {block} of {kernel} executed no shfl.sync")
    return ShuffleTrace(steps, f"{kernel}: block {block}, warp {at_warp}")


def plot_shuffles(trace: ShuffleTrace, ax=None, labels=None, fontsize: float = 6.6):
    """The butterfly of a :func:`shuffle_trace`: lanes across, one row per stage (the values
    before the first shuffle, then after each step's combining instruction), every cell showing
    the lane's value (coloured within its row, so equal values share a colour), and between two
    rows a line from the lane each lane read to that lane (blue where the reader is the lower
    lane of the pair, orange where it is the upper). ``labels``: one text per row (default: the
    step's offset and combining opcode). Returns the axes."""
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection

    vals = trace.values()
    rows = len(vals)
    if ax is None:
        fig, ax = plt.subplots(figsize=(7.85, 0.8 * rows + 0.5))
        fig.subplots_adjust(left=0.1, right=0.995, bottom=0.01, top=0.9)
    if labels is None:
        labels = ["start"] + [(f"lane ^ {s.offset}" if s.offset is not None else s.mode)
                              + "\n" + (s.combine.split()[0] if s.combine else "") for s in trace]
    if len(labels) != rows:
        raise ValueError(f"labels: {rows} texts needed (one per row), got {len(labels)}")
    gap = 1.5                                     # vertical distance between two rows
    y = [-gap * r for r in range(rows)]
    cmap = plt.get_cmap("viridis")
    for r in range(rows):
        row = np.asarray(vals[r], dtype=np.float64)
        fin = row[np.isfinite(row)]
        lo, hi = (fin.min(), fin.max()) if fin.size else (0.0, 1.0)
        for lane in range(32):
            v = row[lane]
            level = (v - lo) / (hi - lo) if hi > lo else 0.5
            colour = cmap(0.15 + 0.8 * level) if np.isfinite(v) else (0.85, 0.85, 0.85, 1)
            ax.add_patch(plt.Rectangle((lane - 0.48, y[r] - 0.4), 0.96, 0.8, color=colour, lw=0))
            ax.text(lane, y[r], f"{v:g}", ha="center", va="center", fontsize=fontsize,
                    color="white" if level < 0.6 else "black")
    for r, st in enumerate(trace, start=1):
        segs = {"tab:blue": [], "tab:orange": [], "0.5": []}
        for lane in range(32):
            j = int(st.src[lane])
            if j >= 0:
                colour = "tab:blue" if lane < j else "tab:orange" if lane > j else "0.5"
                segs[colour].append([(j, y[r - 1] - 0.42), (lane, y[r] + 0.42)])
        for colour, lines in segs.items():
            ax.add_collection(LineCollection(lines, colors=colour, lw=0.8))
    ax.set_xlim(-0.55, 31.55)
    ax.set_ylim(y[-1] - 0.5, 0.5)
    ax.set_xticks(range(32), [str(i) for i in range(32)], fontsize=fontsize)
    ax.xaxis.tick_top()
    ax.set_xlabel("lane", fontsize=fontsize + 1)
    ax.xaxis.set_label_position("top")
    ax.set_yticks(y, labels, fontsize=fontsize + 1)
    ax.tick_params(length=0)
    for s in ax.spines.values():
        s.set_visible(False)
    return ax
