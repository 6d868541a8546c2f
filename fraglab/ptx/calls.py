"""Calls that remain after inlining (:mod:`.inline` expands calls of the module's own .func
definitions). ``vprintf`` (CUDA's device printf) is interpreted: every lane that calls it prints
its line, lanes in order (the order between warps and blocks is the interpreter's schedule); the
lines also collect in ``Launch.printf``. Anything else (recursion, external functions) raises
UnsupportedInstruction."""
from __future__ import annotations

import re

import numpy as np

from .decode import unsupported
from .registry import handler
from .errors import DeviceAssertion, MemoryAccessError, raise_at
from .frames import short_path

_SPEC = re.compile(r"%([-+ #0]*)(\d+|\*)?(?:\.(\d+|\*))?(hh|h|ll|l|z|j|t|L)?([diouxXcsfFeEgGaAp%])")
MAX_STRING = 4096


def read_cstring(w, ins, addr: int, lane: int) -> bytes:
    out = bytearray()
    lanes = np.array([lane])
    while len(out) < MAX_STRING:
        b = w.mem.load(w, ins, "generic", np.array([addr + len(out)], np.uint64), lanes, 1, 1)
        if b[0, 0] == 0:
            return bytes(out)
        out.append(int(b[0, 0]))
    raise_at(MemoryAccessError, f"printf: string at {addr:#x} has no terminating NUL within "
             f"{MAX_STRING} bytes", w, ins, lane=lane)


def format_printf(fmt: str, fetch) -> tuple[str, int]:
    """C printf formatting; fetch(size, kind) returns the next argument ('i', 'u', 'f', 'p')."""
    out, pos, nargs = [], 0, 0
    for m in _SPEC.finditer(fmt):
        out.append(fmt[pos:m.start()])
        pos = m.end()
        flags, width, prec, length, conv = m.groups()
        if conv == "%":
            out.append("%")
            continue
        if width == "*":
            width = str(fetch(4, "i"))
            nargs += 1
        if prec == "*":
            prec = str(fetch(4, "i"))
            nargs += 1
        spec = "%" + flags + (width or "") + (f".{prec}" if prec is not None else "")
        nargs += 1
        wide = length in ("l", "ll", "z", "j", "t")
        if conv in "di":
            out.append((spec + "d") % fetch(8 if wide else 4, "i"))
        elif conv in "ouxX":
            v = fetch(8 if wide else 4, "u")
            out.append((spec + ("d" if conv == "u" else conv)) % v)
        elif conv == "c":
            out.append((spec + "c") % chr(fetch(4, "u") & 0xFF))
        elif conv in "fFeEgGaA":
            v = fetch(8, "f")
            out.append((spec + ("e" if conv in "aA" else conv)) % v)
        elif conv == "s":
            out.append((spec + "s") % fetch(8, "s"))
        elif conv == "p":
            out.append((spec + "s") % hex(fetch(8, "u")))
    out.append(fmt[pos:])
    return "".join(out), nargs


def _assertfail(ins, dc, args):
    rd = [dc.reader(a, "u64", ins) for a in args[:4]]

    def fn(w, m):
        lane = 0 if m is None else int(np.argmax(m))
        msg, file_, line, func = (int(r(w)[lane]) for r in rd)
        text = read_cstring(w, ins, msg, lane).decode("utf-8", "replace")
        where = read_cstring(w, ins, file_, lane).decode("utf-8", "replace")
        fname = read_cstring(w, ins, func, lane).decode("utf-8", "replace")
        raise_at(DeviceAssertion, f"device-side assert failed: `{text}` in {fname} "
                 f"({short_path(where)}:{line & 0xFFFFFFFF})", w, ins, lane=lane)
    return fn


@handler("call")
def h_call(ins, dc):
    _, name, rets, args = ins.operands[0]
    if name == "__assertfail" and len(args) >= 4:
        return _assertfail(ins, dc, args)
    if name != "vprintf":
        unsupported(ins, f"call of `{name}`: only functions defined in the module are run (they "
                         "are inlined at their call sites); recursion, guarded calls and external "
                         "functions are not")
    if len(args) != 2:
        unsupported(ins, "vprintf with other than 2 arguments")
    fmt_r = dc.reader(args[0], "u64", ins)
    buf_r = dc.reader(args[1], "u64", ins)
    ret_w = dc.writer(rets[0], "s32", ins) if rets else None

    def fn(w, m):
        fmts, bufs = fmt_r(w), buf_r(w)
        result = np.zeros(32, np.int32)
        for lane in (range(32) if m is None else np.flatnonzero(m)):
            lane = int(lane)
            fmt = read_cstring(w, ins, int(fmts[lane]), lane).decode("utf-8", "replace")
            cursor = [int(bufs[lane])]

            def fetch(size, kind):
                a = (cursor[0] + size - 1) // size * size
                cursor[0] = a + size
                raw = w.mem.load(w, ins, "generic", np.array([a], np.uint64), np.array([lane]),
                                 size, size)[0]
                if kind == "f":
                    return float(raw.view(np.float64)[0])
                if kind == "s":
                    return read_cstring(w, ins, int(raw.view(np.uint64)[0]), lane).decode(
                        "utf-8", "replace")
                v = int(raw.view(np.uint64 if size == 8 else np.uint32)[0])
                if kind == "i" and v >> (8 * size - 1):
                    v -= 1 << (8 * size)
                return v
            text, nargs = format_printf(fmt, fetch)
            result[lane] = nargs
            w.launch.printf.append(text)
            if w.launch.echo_printf:
                print(text, end="", flush=True)
        if ret_w is not None:
            ret_w(w, result, m)
    return fn
