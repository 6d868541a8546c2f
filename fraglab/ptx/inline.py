"""Inlining of .func device functions at their call sites, after parsing.

A ``call`` of a function defined in the module is replaced by: moves of the arguments into the
callee's parameter registers, a renamed copy of the callee's body (its registers appended to the
caller's, its labels made unique, each ``ret`` a branch to the end), and moves of its return
values. The executor then sees one flat kernel, so divergence, reconvergence and the warp
collectives inside the function behave as in inlined code. Recursion is left as a ``call`` (it
raises UnsupportedInstruction when executed)."""
from __future__ import annotations

from dataclasses import replace

from .parse import Instr, type_size

MAX_DEPTH = 16


def _remap(op, off, labels):
    kind = op[0]
    if kind == "reg":
        return ("reg", op[1] + off)
    if kind == "sym":
        return ("sym", labels.get(op[1], op[1]))
    if kind == "addr":
        return ("addr", None if op[1] is None else _remap(op[1], off, labels), op[2])
    if kind == "vec":
        return ("vec", [_remap(o, off, labels) for o in op[1]])
    if kind == "pair":
        return ("pair", _remap(op[1], off, labels), _remap(op[2], off, labels))
    if kind == "not":
        return ("not", _remap(op[1], off, labels))
    if kind == "call":
        return ("call", op[1], [_remap(o, off, labels) for o in op[2]],
                [_remap(o, off, labels) for o in op[3]])
    return op


def _mov(dst_reg, src_op, t, site):
    bits = 8 * max(type_size(t), 2) if t != "pred" else 0
    opcode = "mov.pred" if t == "pred" else f"mov.b{bits}"
    return Instr(opcode, [("reg", dst_reg), src_op], None,
                 f"{opcode} (argument of the call at PTX line {site.ptx_line})", site.ptx_line,
                 site.loc)


def inline_calls(mod, k) -> None:
    """Expand, in place, every call in kernel ``k`` to a function defined in ``mod``."""
    if not any(i.opcode.split(".")[0] == "call" and i.operands[0][1] in mod.funcs
               for i in k.instrs):
        return
    counter = [0]
    new_instrs, new_labels = [], {}
    at_index = {}
    for name, idx in k.labels.items():
        at_index.setdefault(idx, []).append(name)
    _expand(mod, k, k.instrs, at_index, 0, {}, new_instrs, new_labels, counter, 0, ())
    for name in at_index.get(len(k.instrs), []):
        new_labels[name] = len(new_instrs)
    k.instrs, k.labels = new_instrs, new_labels


def _expand(mod, k, instrs, at_index, off, lmap, out, labels, counter, depth, stack):
    for idx, ins in enumerate(instrs):
        for name in at_index.get(idx, []):
            labels[lmap.get(name, name)] = len(out)
        ins2 = ins if (off == 0 and not lmap) else Instr(
            ins.opcode, [_remap(o, off, lmap) for o in ins.operands],
            None if ins.guard is None else (ins.guard[0] + off, ins.guard[1]),
            ins.text, ins.ptx_line, ins.loc)
        is_call = ins2.opcode.split(".")[0] == "call"
        callee = mod.funcs.get(ins2.operands[0][1]) if is_call else None
        if callee is None or callee.name in stack or depth >= MAX_DEPTH or ins2.guard is not None:
            out.append(ins2)
            continue
        _, _, rets, args = ins2.operands[0]
        counter[0] += 1
        site = counter[0]
        base = len(k.regs)
        for rname, t in callee.regs:
            k.regs.append((f"{rname}@{callee.name}#{site}", t))
        k.param_regs.update(r + base for r in callee.param_regs)
        for preg, arg in zip(callee.arg_regs, args):
            out.append(_mov(preg + base, arg, callee.regs[preg][1], ins2))
        end_label = f"$ret@{callee.name}#{site}"
        cl = {name: f"{name}@{callee.name}#{site}" for name in callee.labels}
        for v in callee.vars:                     # local frames per call site; shared once
            if v.space == "local":
                cl[v.name] = f"{v.name}@{callee.name}#{site}"
                k.vars.append(replace(v, name=cl[v.name]))
            elif all(x.name != v.name for x in k.vars):
                k.vars.append(v)
        body = [Instr("bra.uni", [("sym", end_label)], c.guard, f"{c.text}  (return)",
                      c.ptx_line, c.loc) if c.opcode.split(".")[0] == "ret" else c
                for c in callee.instrs]
        c_at = {}
        for name, i in callee.labels.items():
            c_at.setdefault(i, []).append(name)
        _expand(mod, k, body, c_at, base, {**cl, end_label: end_label}, out, labels, counter,
                depth + 1, stack + (callee.name,))
        for name in c_at.get(len(callee.instrs), []):
            labels[cl[name]] = len(out)
        labels[end_label] = len(out)
        for rreg, ret in zip(callee.ret_regs, rets):
            out.append(_mov(ret[1], ("reg", rreg + base), callee.regs[rreg][1], ins2))
