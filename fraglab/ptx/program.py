"""The public entry points: :class:`Program` (parse once, decode each kernel once) and
:func:`launch` (run a grid on NumPy arrays)."""
from __future__ import annotations

import os
import struct
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from . import decode, opset
from .inline import inline_calls
from .errors import PTXError, UnsupportedInstruction
from .execute import run_block
from .memory import FlatSpace, GlobalMemory
from .parse import parse
from .poison import RegisterPool
from .tensormap import substitutes

MAX_SHARED = 163 * 1024 + 1024       # sm_80: 164 KB per block (opt-in)
MAX_SHARED_SM90 = 227 * 1024         # sm_90: 227 KB per block (opt-in)


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


@dataclass
class KernelInfo:
    name: str
    kernel: object
    code: list
    reg_dtypes: list
    symbols: dict
    param_layout: list                # [(name, type, offset, size)]
    param_size: int
    static_shared_end: int
    dynamic_shared_offset: int
    local_size: int
    unsupported: list = field(default_factory=list)   # [(opcode, ptx line, source)]
    loops: dict = field(default_factory=dict)         # the scheduler's loop analysis (schedule.py)


class Program:
    """A parsed PTX module. ``Program(ptx_text)``; ``.kernels`` lists the entry names."""

    def __init__(self, ptx_text: str):
        self.text = ptx_text
        self.module = parse(ptx_text)
        for k in self.module.kernels.values():
            inline_calls(self.module, k)          # the module's .func device functions
        self.files = self.module.files
        target = self.module.target.split(",")[0].strip()
        self.hopper = target.startswith("sm_9")
        self.max_shared = MAX_SHARED_SM90 if self.hopper else MAX_SHARED
        self._infos: dict[str, KernelInfo] = {}
        # module-scope .global variables: mapped first in every launch, so their addresses are fixed
        self._globals_order = [v for v in self.module.vars.values() if v.space == "global"]
        probe = GlobalMemory()
        self._global_addr = dict(zip((v.name for v in self._globals_order),
                                     probe.map_all([(v.init or bytes(v.size), v.name)
                                                    for v in self._globals_order])))
        const = b""
        self._const_addr = {}
        for v in self.module.vars.values():
            if v.space == "const":
                off = _align(len(const), v.align)
                const = const.ljust(off, b"\0") + (v.init or bytes(v.size))
                self._const_addr[v.name] = off
        self._const_bytes = const

    @property
    def kernels(self) -> list[str]:
        return list(self.module.kernels)

    def constants(self, prefix: str = "") -> dict[str, int]:
        """``{name: value}`` of the module's 4-byte ``.global`` variables whose names start with
        ``prefix`` (``extern "C" __device__ const int``: a kernel file's launch numbers; one of
        value 0 has no initialiser), as a launch finds them in global memory (signed 32-bit)."""
        return {v.name: int.from_bytes((v.init or bytes(4))[:4], "little", signed=True)
                for v in self._globals_order
                if v.name.startswith(prefix) and v.size == 4 and not v.extern}

    def info(self, name: str) -> KernelInfo:
        if name not in self.module.kernels:
            raise KeyError(f"the PTX has no kernel {name!r}; it has {self.kernels}")
        if name not in self._infos:
            self._infos[name] = self._build(name)
        return self._infos[name]

    def function(self, name: str, **options) -> "KernelFunction":
        """A CuPy-style callable ``fn(grid, block, args, shared_mem=0)`` for kernel ``name``;
        ``options`` go to :func:`launch` (max_steps, check_uninit, ...)."""
        return KernelFunction(self, name, **options)

    def unsupported(self, name: str | None = None) -> list:
        """(opcode, PTX line, CUDA source) of every instruction the interpreter cannot run."""
        names = [name] if name else self.kernels
        return [u for n in names for u in self.info(n).unsupported]

    def _build(self, name: str) -> KernelInfo:
        from .frames import source_of
        k = self.module.kernels[name]
        symbols: dict = {}
        off = 0
        layout = []
        for pname, t, size, align in k.params:
            off = _align(off, align)
            symbols[pname] = ("param", off)
            layout.append((pname, t, off, size))
            off += size
        param_size = off
        used = _referenced_symbols(k)
        shared_vars = [v for v in self.module.vars.values() if v.space == "shared" and v.name in used]
        shared_vars += [v for v in k.vars if v.space == "shared"]
        soff = 0
        externs = []
        for v in shared_vars:
            if v.extern or v.size == 0:
                externs.append(v)
                continue
            soff = _align(soff, v.align)
            symbols[v.name] = ("shared", soff)
            soff += v.size
        static_end = soff
        dyn = _align(static_end, max([16] + [v.align for v in externs]))
        for v in externs:
            symbols[v.name] = ("shared", dyn)
        loff = 0
        for v in k.vars:
            if v.space == "local":
                loff = _align(loff, v.align)
                symbols[v.name] = ("local", loff)
                loff += v.size
        for n, a in self._global_addr.items():
            symbols[n] = ("global", a)
        for n, a in self._const_addr.items():
            symbols[n] = ("const", a)
        code = decode.decode_kernel(k, symbols, special_register, opset.table())
        unsup = [(op.instr.opcode, op.instr.ptx_line, source_of(op.instr, self.files))
                 for op in code if getattr(op.fn, "unsupported", None)]
        regs = [np.dtype(decode.DT[t]) for _, t in k.regs]
        return KernelInfo(name, k, code, regs, symbols, layout, param_size, static_end, dyn,
                          loff, unsup)


def _referenced_symbols(k) -> set:
    out = set()

    def walk(op):
        if op is None:
            return
        if op[0] == "sym":
            out.add(op[1])
        elif op[0] == "addr":
            walk(op[1])
        elif op[0] in ("vec",):
            for o in op[1]:
                walk(o)
        elif op[0] in ("pair",):
            walk(op[1])
            walk(op[2])
        elif op[0] == "not":
            walk(op[1])
    for ins in k.instrs:
        for op in ins.operands:
            walk(op)
    return out


#: The SMs the interpreter models: an H100 SXM's 132. %nsmid reads SMS (PTX ISA 10.13: "the SM
#: identifier numbering is not guaranteed to be contiguous, so %nsmid may be larger than the
#: physical number of SMs"; equal here), and a block's %smid is its linear index mod SMS (10.12:
#: "%smid ... ranges from 0 to %nsmid - 1"; every warp of a block reads the same). A kernel that
#: branches on them reads what a GPU could give, not a value only the interpreter gives.
SMS = 132


def _smid(w) -> int:
    gx, gy, _ = w.launch.grid
    bx, by, bz = w.block_idx
    return (bx + gx * (by + gy * bz)) % SMS


def special_register(name: str, instr):
    """fn(w) -> (32,) array for a special register."""
    base, _, comp = name.partition(".")
    axis = {"x": 0, "y": 1, "z": 2}.get(comp)
    u32 = np.uint32
    if base == "%tid" and axis is not None:
        return lambda w: w.tid[axis]
    if base == "%ntid" and axis is not None:
        return lambda w: np.full(32, w.launch.block[axis], u32)
    if base == "%ctaid" and axis is not None:
        return lambda w: np.full(32, w.block_idx[axis], u32)
    if base == "%nctaid" and axis is not None:
        return lambda w: np.full(32, w.launch.grid[axis], u32)
    lanes = np.arange(32, dtype=np.uint32)
    fixed = {"%laneid": lanes,
             "%lanemask_eq": (np.uint32(1) << lanes).astype(u32),
             "%lanemask_lt": ((np.uint64(1) << lanes.astype(np.uint64)) - np.uint64(1)).astype(u32),
             "%lanemask_le": ((np.uint64(2) << lanes.astype(np.uint64)) - np.uint64(1)).astype(u32),
             "%nsmid": np.full(32, SMS, u32), "%gridid": np.zeros(32, np.uint64)}
    fixed["%lanemask_gt"] = (~fixed["%lanemask_le"]).astype(u32)
    fixed["%lanemask_ge"] = (~fixed["%lanemask_lt"]).astype(u32)
    if name in fixed:
        arr = fixed[name]
        return lambda w: arr
    if name == "%smid":
        return lambda w: np.full(32, _smid(w), u32)
    if name == "%warpid":
        return lambda w: np.full(32, w.index, u32)
    if name == "%nwarpid":
        return lambda w: np.full(32, 64, u32)
    if name in ("%clock", "%clock_hi"):
        sh = 32 if name == "%clock_hi" else 0
        return lambda w: np.full(32, (w.steps >> sh) & 0xFFFFFFFF, u32)
    if name == "%clock64":
        return lambda w: np.full(32, w.steps, np.uint64)
    if name in ("%globaltimer", "%globaltimer_lo", "%globaltimer_hi"):
        return lambda w: np.full(32, w.launch.steps, np.uint64)
    if name in ("%dynamic_smem_size",):
        return lambda w: np.full(32, w.launch.shared_mem, u32)
    if name in ("%total_smem_size",):
        return lambda w: np.full(32, w.mem.spaces["shared"].size, u32)
    raise UnsupportedInstruction(f"unsupported special register {name}")


class Launch:
    """State of one launch: grid, block, memories, counters; returned as the result."""

    def __init__(self, prog, info, grid, block, shared_mem, max_steps, checks, hook):
        self.prog, self.info = prog, info
        self.files = prog.files
        self.grid, self.block = grid, block
        self.shared_mem = shared_mem
        self.max_steps = max_steps
        self.stop = max_steps                # where run_warp stops: max_steps or a turn's end
        self.checks = checks
        self.hook = hook
        self.steps = 0
        self.glob = GlobalMemory()
        self.current_warps = []
        self.printf: list[str] = []          # device printf output, in execution order
        self.echo_printf = True
        self.schedule = "fixed"              # "fixed", "reverse" or a seed (see launch)
        self.reverse_warps = False
        self.seeds = ()                      # the extra schedules a `seeds=` launch ran
        self.lazy_copies = prog.hopper       # cp.async lands at its wait_group (ops_mem)
        self.counts = [0] * (len(info.code) + 1)   # warp-instructions executed, per PTX instruction
        self.later = []                      # blocks not run yet, and their runner (crossblock.py)
        self.run_block = run_block
        self.reg_pool = RegisterPool(info.reg_dtypes)   # register files of finished blocks

    def opcode_counts(self, base: bool = True):
        """Counter of warp-instructions executed, by opcode (``base``: 'mma' not 'mma.sync...')."""
        from collections import Counter
        c = Counter()
        for op, n in zip(self.info.code, self.counts):
            if n:
                c[op.instr.base if base else op.instr.opcode] += n
        return c

    def line_counts(self):
        """Counter of warp-instructions executed, by CUDA source 'file:line'."""
        from collections import Counter
        from .frames import source_of
        c = Counter()
        for op, n in zip(self.info.code, self.counts):
            if n:
                c[source_of(op.instr, self.files) or f"PTX line {op.instr.ptx_line}"] += n
        return c

    def __repr__(self):
        return (f"<ptx launch {self.info.name} grid={self.grid} block={self.block}: "
                f"{self.steps} warp-instructions>")


def _dim3(v, what):
    t = tuple(int(x) for x in (v if isinstance(v, (tuple, list)) else (v,)))
    t = t + (1,) * (3 - len(t))
    if len(t) != 3 or any(x < 1 for x in t):
        raise ValueError(f"{what} must be 1 to 3 positive integers, got {v!r}")
    return t


_PACK = {"u8": "<B", "s8": "<b", "b8": "<B", "u16": "<H", "s16": "<h", "b16": "<H", "u32": "<I",
         "s32": "<i", "b32": "<I", "u64": "<Q", "s64": "<q", "b64": "<Q", "f32": "<f", "f64": "<d"}


def launch(prog: Program, kernel: str, grid=(1, 1, 1), block=(32, 1, 1), args=(), shared_mem=0,
           max_steps: int = 20_000_000, check_uninit: bool = True, check_race: bool = True,
           hook=None, echo_printf: bool = True, blocks=None, reverse_warps: bool | None = None,
           lazy_copies: bool | None = None, schedule=None, seeds=None) -> Launch:
    """Run ``kernel`` of ``prog`` over a grid. Pointer params take NumPy arrays (written in
    place); value params take NumPy scalars or Python numbers. ``blocks`` (a list of block
    indices, e.g. ``[(3, 0, 0)]``) runs only those blocks of the grid: quicker when looking at
    one block of a large launch.

    ``schedule`` orders the warps of a block: ``"fixed"`` (the default: warps 0, 1, ... in turn,
    each until it waits at a barrier, exits, blocks or spins), ``"reverse"`` (the same, last to
    first; ``reverse_warps=True`` is an alias) or an ``int`` seed (a random interleaving: random
    warps run random numbers of instructions; the same seed gives the same run). ``seeds``
    (e.g. ``(0, 1, 2)``) runs the launch in ``schedule`` (in place, as usual), then once per
    seed on copies of the arrays: the first error raised names its seed, and so does an array
    that ends up different from the first run's (a result that depends on the warp order).
    Without ``seeds`` here or in :func:`options`, ``FRAGLAB_PTX_SEEDS=1,2`` in the environment
    sets them (for a whole test run).
    ``lazy_copies`` lands ``cp.async`` copies at their wait_group instead of at issue (default:
    on for sm_90 programs, off for sm_80 ones). ``schedule``, ``seeds``, ``reverse_warps`` and
    ``lazy_copies`` default to :func:`options`. Returns the :class:`Launch` (``.steps`` =
    warp-instructions)."""
    if isinstance(prog, str):
        prog = Program(prog)
    schedule = _schedule(schedule, reverse_warps)
    if seeds is None:
        seeds = _OPTIONS.get("seeds")
        if seeds is None:
            env = os.environ.get("FRAGLAB_PTX_SEEDS", "").replace(",", " ").split()
            seeds = tuple(int(x) for x in env)
    if seeds:
        return _explore(prog, kernel, dict(
            grid=grid, block=block, args=args, shared_mem=shared_mem, max_steps=max_steps,
            check_uninit=check_uninit, check_race=check_race, hook=hook,
            echo_printf=echo_printf, blocks=blocks, lazy_copies=lazy_copies), schedule, seeds)
    info = prog.info(kernel)
    grid, block = _dim3(grid, "grid"), _dim3(block, "block")
    nthreads = block[0] * block[1] * block[2]
    if nthreads > 1024:
        raise ValueError(f"block {block} has {nthreads} threads; at most 1024 are allowed")
    if info.dynamic_shared_offset + shared_mem > prog.max_shared:
        raise ValueError(f"{info.static_shared_end} bytes of static and {shared_mem} of dynamic "
                         f"shared memory exceed the {prog.max_shared} per block of "
                         f"{prog.module.target or 'sm_80'}")
    if len(args) != len(info.param_layout):
        raise TypeError(f"{kernel} takes {len(info.param_layout)} arguments "
                        f"({', '.join(p[0] for p in info.param_layout)}), got {len(args)}")
    L = Launch(prog, info, grid, block, int(shared_mem), int(max_steps),
               dict(uninit=check_uninit, race=check_race), hook)
    L.echo_printf = echo_printf
    L.schedule = schedule
    L.reverse_warps = schedule == "reverse"
    lazy_copies = _OPTIONS.get("lazy_copies") if lazy_copies is None else lazy_copies
    if lazy_copies is not None:
        L.lazy_copies = bool(lazy_copies)
    L.glob.map_all([(v.init or bytes(v.size), v.name) for v in prog._globals_order])
    pbuf = bytearray(info.param_size)
    for i, ((pname, t, off, size), a) in enumerate(zip(info.param_layout, args)):
        if isinstance(a, np.ndarray):
            if size != 8:
                raise TypeError(f"argument {i} ({pname}) is a .{t} value, not a pointer; got an array")
            addr = L.glob.map_array(a, f"argument {i} ({pname})")
            struct.pack_into("<Q", pbuf, off, addr)
        elif isinstance(a, (bytes, bytearray)):
            pbuf[off:off + size] = bytes(a).ljust(size, b"\0")[:size]
        elif isinstance(a, np.generic) and a.dtype.itemsize == size and a.dtype.kind in "fiub":
            pbuf[off:off + size] = a.tobytes()          # a NumPy scalar of the param's width: its bits
        else:
            if t not in _PACK:
                raise TypeError(f"argument {i} ({pname}) of type .{t} cannot take {a!r}")
            val = a.item() if isinstance(a, np.generic) else a
            if t.startswith("f"):
                struct.pack_into(_PACK[t], pbuf, off, float(val))
            else:
                bits = 8 * size
                struct.pack_into(_PACK[t.replace("s", "u").replace("b", "u")], pbuf, off,
                                 int(val) & ((1 << bits) - 1))
    L.param = FlatSpace(bytes(pbuf), "param")
    L.const = FlatSpace(prog._const_bytes, "const")
    if blocks is None:
        order = [(bx, by, bz) for bz in range(grid[2]) for by in range(grid[1])
                 for bx in range(grid[0])]
    else:
        order = [tuple(int(v) for v in (b if isinstance(b, (tuple, list)) else (b,))) for b in blocks]
        order = [b + (0,) * (3 - len(b)) for b in order]
        for b in order:
            if not all(0 <= v < g for v, g in zip(b, grid)):
                raise ValueError(f"block {b} is outside the grid {grid}")
    with np.errstate(all="ignore"):
        for i, b in enumerate(order):
            L.later = order[i + 1:]              # the blocks a cross-block wait may wait for
            L.reg_pool.give_back(run_block(L, b, info.code, info))
    return L


def _schedule(schedule, reverse_warps):
    """The warp order of a launch: its ``schedule`` argument, else its ``reverse_warps``, else
    :func:`options`' ``schedule``, else its ``reverse_warps``, else "fixed"."""
    if schedule is None:
        if reverse_warps is not None:
            return "reverse" if reverse_warps else "fixed"
        schedule = _OPTIONS.get("schedule")
        if schedule is None:
            return "reverse" if _OPTIONS.get("reverse_warps") else "fixed"
    elif reverse_warps is not None and bool(reverse_warps) != (schedule == "reverse"):
        raise ValueError(f"reverse_warps={reverse_warps!r} contradicts schedule={schedule!r}")
    return _check_schedule(schedule)


def _check_schedule(s):
    if s in ("fixed", "reverse"):
        return s
    if isinstance(s, (int, np.integer)) and not isinstance(s, (bool, np.bool_)):
        return int(s)
    raise ValueError(f'schedule must be "fixed", "reverse" or an int seed, got {s!r}')


class ScheduleDependent(PTXError):
    """A launch whose result differs between two warp schedules (``launch(..., seeds=...)``):
    a race the shared-memory checker does not see (global memory, a missing fence or wait)."""


def _explore(prog, kernel, kw, schedule, seeds) -> Launch:
    """launch(..., seeds=...): run in ``schedule`` on the caller's arrays, then once per seed on
    copies of the original arrays; raise the first error (naming the seed) or difference."""
    seeds = [_check_schedule(s) for s in (seeds if isinstance(seeds, (list, tuple)) else (seeds,))]
    args = tuple(kw.pop("args"))
    before = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    first = launch(prog, kernel, args=args, schedule=schedule, seeds=(), **kw)
    kw["echo_printf"] = False
    for seed in seeds:
        mine = tuple(a.copy() if isinstance(a, np.ndarray) else a for a in before)
        how = (f"under schedule={seed!r} (ptx.launch(..., schedule={seed!r}) repeats this run; "
               f"the {schedule!r} order ran without error)")
        try:
            with substitutes(args, mine):         # tensor maps of args find their copies
                launch(prog, kernel, args=mine, schedule=seed, seeds=(), **kw)
        except Exception as e:
            try:
                again = type(e)(f"{how}:\n{e}", block=e.block, warp=e.warp, lane=e.lane,
                                instr=e.instr, source=e.source)
            except Exception:                     # not a PTXError (or its own signature)
                e.add_note(how)
                raise e from None
            raise again from e
        for i, (a, b) in enumerate(zip(args, mine)):
            if isinstance(a, np.ndarray) and not np.array_equal(
                    a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)):
                pname = prog.info(kernel).param_layout[i][0]
                diff = a.reshape(-1).view(np.uint8) != b.reshape(-1).view(np.uint8)
                k = int(np.argmax(diff)) // a.itemsize
                raise ScheduleDependent(
                    f"argument {i} ({pname}) differs between the {schedule!r} order and "
                    f"schedule={seed!r}: {int(diff.reshape(-1, a.itemsize).any(1).sum())} of "
                    f"{a.size} elements, the first at flat index {k} ({a.reshape(-1)[k].item()!r} "
                    f"vs {b.reshape(-1)[k].item()!r}). The result depends on the order the "
                    "warps run in: a race through global memory, or a missing __syncthreads / "
                    "fence / wait")
    first.seeds = tuple(seeds)
    return first


__all__ = ["Program", "launch", "load", "Launch", "KernelFunction", "options",
           "ScheduleDependent"]

_OPTIONS: dict = {}


@contextmanager
def options(**kw):
    """Defaults for :func:`launch` inside a ``with`` block, for launches made through a topic's
    wrapper: ``with ptx.options(reverse_warps=True): fa3.attention(...)``; the keywords are
    ``schedule`` ("fixed", "reverse" or a seed), ``seeds`` (extra seeded runs of every launch),
    ``reverse_warps`` (``schedule="reverse"``) and ``lazy_copies``."""
    bad = set(kw) - {"reverse_warps", "lazy_copies", "schedule", "seeds"}
    if bad:
        raise TypeError(f"ptx.options takes schedule, seeds, reverse_warps and lazy_copies, not "
                        f"{sorted(bad)}")
    if kw.get("schedule") is not None:
        _check_schedule(kw["schedule"])
    if kw.get("reverse_warps") is not None:       # an inner reverse_warps beats an outer schedule
        want = "reverse" if kw["reverse_warps"] else "fixed"
        if kw.get("schedule") not in (None, want):
            raise ValueError(f"reverse_warps={kw['reverse_warps']!r} contradicts "
                             f"schedule={kw['schedule']!r}")
        kw["schedule"] = want
    saved = dict(_OPTIONS)
    _OPTIONS.update(kw)
    try:
        yield
    finally:
        _OPTIONS.clear()
        _OPTIONS.update(saved)


_CACHE: dict[str, Program] = {}


def load(name, arch: str = "sm_80", *, source: str | None = None, defines: dict | None = None,
         options=()) -> Program:
    """Compile ``kernels/<name>.cu`` (or ``source``) with the course's toolchain and return its
    :class:`Program`, parsed once and cached by the build's key."""
    from .. import toolchain
    b = toolchain.compile(name, arch, source=source, defines=defines, options=tuple(options))
    prog = _CACHE.get(b.key)
    if prog is None:
        prog = _CACHE[b.key] = Program(b.ptx)
    return prog


class KernelFunction:
    """A CuPy-style callable for one kernel: ``fn(grid, block, args, shared_mem=0)``, so a launch
    path written for ``cupy.cuda.Function`` can run on the interpreter. ``last`` holds the
    :class:`Launch` of the latest call; ``options`` go to :func:`launch` (max_steps, checks)."""

    def __init__(self, prog: Program, name: str, **options):
        prog.info(name)
        self.prog, self.name, self.options = prog, name, options
        self.last: Launch | None = None
        self.max_dynamic_shared_size_bytes = prog.max_shared

    def __call__(self, grid, block, args, shared_mem: int = 0, stream=None):
        self.last = launch(self.prog, self.name, grid, block, tuple(args),
                           shared_mem=shared_mem, **self.options)
        return self.last

    def __repr__(self):
        return f"<ptx.KernelFunction {self.name}>"
