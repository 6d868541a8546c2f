"""Generators of differential tests for instructions without a data result: fences and memory
barriers, prefetches, cache hints (discard, applypriority), cache policies (createpolicy, used by
a load), nanosleep, pmevent, griddepcontrol, and trap/brkpt (under a predicate that is never
true: on a GPU they abort the kernel and the CUDA context). Each kernel stores the element's
input to global memory, runs the instruction, and loads the element back: both machines must
leave the value unchanged. Also st.param through a call sequence (a ``.func`` that hands its
parameter back) and cvta to/from the const space."""
from __future__ import annotations

import numpy as np

from . import values as V
from .case import Case, memtype, seed_of
from .gen import NoTest, draw, split

QUIET = ("membar", "fence", "prefetch", "prefetchu", "discard", "applypriority", "createpolicy",
         "nanosleep", "pmevent", "griddepcontrol", "trap", "brkpt")


def _operands(text, base, mods):
    """The instruction under test as PTX lines (%x_s: the element's global address, %x_g: a
    generic one, %x_l: 128 bytes of the scratch region nobody reads)."""
    if base in ("membar", "griddepcontrol") or base == "fence" and "tensormap::generic" not in mods:
        return [f"{text};"]
    if base == "fence":                        # fence.proxy.tensormap::generic.{release,acquire}
        return [f"{text} [%x_lg], 128;" if "acquire" in mods else f"{text};"]
    if base in ("prefetch", "prefetchu"):
        if "local" in mods:
            return ["mov.u64 %x_a, {k}_lc;", f"{text} [%x_a];"]
        return [f"{text} [{'%x_s' if 'global' in mods else '%x_g'}];"]
    if base in ("discard", "applypriority"):
        where = "%x_l" if "global" in mods else "%x_lg"
        return [f"{text} [{where}], 128;"]
    if base == "createpolicy":
        if "fractional" in mods:
            make = f"{text} %x_pol, 0.5;"
        elif "range" in mods:
            make = f"{text} %x_pol, [{'%x_s' if 'global' in mods else '%x_g'}], 64, 128;"
        else:                                  # createpolicy.cvt.L2: from an access property
            make = f"{text} %x_pol, %x_pol;"
        pre = ["createpolicy.fractional.L2::evict_last.b64 %x_pol, 1.0;"] if "cvt" in mods else []
        return pre + [make, "ld.global.L2::cache_hint.b32 %x_u, [%x_s], %x_pol;", "st.global.b32 [%x_s], %x_u;"]
    if base == "nanosleep":
        return [f"{text} 100;"]
    if base == "pmevent":
        return [f"{text} {'1' if 'mask' in mods else '3'};"]
    if base in ("trap", "brkpt"):              # never executed: see the module docstring
        return ["setp.ne.u32 %x_nv, %x_t, %x_t;", f"@%x_nv {text};"]
    raise NoTest(f"no generator for `{base}`")


def g_quiet(text, base, mods, types):
    a = draw(seed_of("quiet"), ["b32"], n_rand=32)[0][:64]
    decls = [".reg .b64 %x_a, %x_s, %x_g, %x_l, %x_lg, %x_pol;", ".reg .pred %x_nv;",
             ".local .align 8 .b8 {k}_lc[8];"]
    body = ["add.s64 %x_s, %x_p, {g0};", "cvta.global.u64 %x_g, %x_s;", "add.s64 %x_l, %x_b, {g1};",
            "cvta.global.u64 %x_lg, %x_l;", "st.global.b32 [%x_s], %s0;"]
    body += _operands(text, base, mods) + ["ld.global.b32 %d0, [%x_s];"]
    case = Case(text, [("b32", a)], ["b32"], body, decls=decls, scratch=2)
    return case


def g_st_param(text, base, mods, types):
    """st.param of a call's argument: a .func returns its parameter; the caller stores the
    element with the instruction under test, calls, and loads the returned copy."""
    t = types[-1]
    nv = next((int(m[1:]) for m in mods if m in ("v2", "v4")), 1)
    w = V.WIDTH[t]
    size = nv * w
    a = draw(seed_of("stparam", t, nv), [t] * nv, pools=[V.specials(t)] * nv, n_rand=32, limit=32,
             near_pairs=False)
    mt = memtype(t)
    rt = ".b16" if w == 1 else f".b{8 * w}"
    func = [f".func (.param .align {size} .b8 {{k}}_r[{size}]) {{k}}_f(.param .align {size} .b8 {{k}}_a[{size}])",
            "{{", f"  .reg {rt} %v<{nv + 1}>;"]
    func += [f"  ld.param.{mt} %v{j}, [{{k}}_a+{j * w}];" for j in range(nv)]
    func += [f"  st.param.{mt} [{{k}}_r+{j * w}], %v{j};" for j in range(nv)] + ["  ret;", "}}"]
    vec = "%s0" if nv == 1 else "{{" + ", ".join(f"%s{j}" for j in range(nv)) + "}}"
    body = ["{{", f".param .align {size} .b8 {{k}}_pa[{size}];", f".param .align {size} .b8 {{k}}_pr[{size}];",
            f"{text} [{{k}}_pa], {vec};", "call.uni ({k}_pr), {k}_f, ({k}_pa);"]
    body += [f"ld.param.{mt} %d{j}, [{{k}}_pr+{j * w}];" for j in range(nv)] + ["}}"]
    return Case(text, [(t, x) for x in a], [t] * nv, body, consts=["\n".join(func)])


def g_cvta_const(text, base, mods, types):
    a = draw(seed_of("cvta_const"), ["b32"], n_rand=0)[0][:32]
    raw = np.zeros((32, 8), np.uint8)
    raw[:, :4] = a.view(np.uint8).reshape(32, 4)
    consts = [".const .align 8 .b8 {k}_cs[256] = {{%s}};" % ", ".join(map(str, raw.ravel()))]
    body = ["mov.u64 %x_a, {k}_cs;", "sub.s64 %x_g, %x_p, %x_b;", "add.s64 %x_a, %x_a, %x_g;"]
    if "to" in mods:
        body += ["cvta.const.u64 %x_g, %x_a;", f"{text} %x_g, %x_g;", "ld.const.b32 %d0, [%x_g];"]
    else:
        body += [f"{text} %x_g, %x_a;", "ld.b32 %d0, [%x_g];"]
    return Case(text, [("b32", a)], ["b32"], body, decls=[".reg .b64 %x_a, %x_g;"], consts=consts,
                loads=False)


# ---- control flow, barriers, cp.async -------------------------------------------------------

def _odd(reg="%x_c"):
    return ["and.b32 %x_u, %s0, 1;", f"setp.ne.u32 {reg}, %x_u, 0;"]


def g_control(text, base, mods, types):
    """bra: a divergent branch around an instruction; exit/ret: lanes with an odd input leave
    the kernel (their later elements keep the zeros); call: a .func hands back its argument."""
    a = draw(seed_of("control"), ["b32"], n_rand=96)[0]
    decls = [".reg .pred %x_c;"]
    if base == "bra":
        body = _odd() + ["mov.b32 %d0, %s0;", f"@%x_c {text} $Lx_skip;", "xor.b32 %d0, %d0, 0xFFFFFFFF;",
                         "$Lx_skip:"]
    elif base in ("exit", "ret"):
        body = _odd() + [f"@%x_c {text};", "mov.b32 %d0, %s0;"]
    else:
        case = g_st_param("st.param.b32", "st", ("param",), ("b32",))
        case.combo = text
        case.body = [b.replace("call.uni", text) for b in case.body]
        return case
    return Case(text, [("b32", a)], ["b32"], body, decls=decls)


def g_barrier(text, base, mods, types):
    """bar/barrier .sync (each thread then reads its neighbour's shared-memory slot, which only
    the barrier makes safe), bar.warp.sync (the same within the warp), .red.popc/.and/.or (of the
    input's low bit)."""
    a = draw(seed_of("barrier"), ["b32"], n_rand=96)[0]
    decls = [".reg .pred %x_c;", ".reg .b64 %x_a, %x_g;", ".shared .align 8 .b8 {k}_sm[256];"]
    if "red" in mods:
        if "popc" in mods:
            return Case(text, [("b32", a)], ["b32"], _odd() + [f"{text} %d0, 0, %x_c;"], decls=decls)
        return Case(text, [("b32", a)], ["pred"], _odd() + [f"{text} %d0, 0, %x_c;"], decls=decls)
    if "arrive" in mods:
        raise NoTest("arrive needs another warp to wait")
    op = f"{text} 0xffffffff;" if "warp" in mods else f"{text} 0;"
    body = ["mov.u64 %x_a, {k}_sm;", "add.s64 %x_g, %x_a, %x_o;", "st.shared.b32 [%x_g], %s0;", op,
            "xor.b64 %x_g, %x_o, 8;", "add.s64 %x_g, %x_a, %x_g;", "ld.shared.b32 %d0, [%x_g];", op]
    return Case(text, [("b32", a)], ["b32"], body, decls=decls)


def g_cp_async(text, base, mods, types):
    """cp.async.{ca,cg} (4, 8, 16 bytes: one output per size), commit_group, wait_group,
    wait_all: the element's 16 bytes copied to shared memory and read back after the wait."""
    if mods[:1] != ("async",) or len(mods) > 1 and mods[1] in ("bulk", "mbarrier"):
        raise NoTest("bulk / mbarrier copies: see COVERED_BY")
    a = draw(seed_of("cp.async"), ["b32"] * 4, n_rand=64, limit=64)
    sizes = (16,) if "cg" in mods else (4, 8, 16)
    copy = text if any(m in mods for m in ("ca", "cg")) else "cp.async.ca.shared.global"
    wait = text if any(m in mods for m in ("wait_group", "wait_all")) else "cp.async.wait_group"
    decls = [".reg .b64 %x_a, %x_s, %x_g;", ".shared .align 16 .b8 {k}_sm[%d];" % (32 * 16 * len(sizes))]
    body = ["add.s64 %x_s, %x_p, {g0};"] + [f"st.global.b32 [%x_s+{4 * j}], %s{j};" for j in range(4)]
    body += ["mov.u64 %x_a, {k}_sm;", "mul.wide.u32 %x_g, %x_t, 16;", "add.s64 %x_a, %x_a, %x_g;"]
    outs = []
    for i, size in enumerate(sizes):
        off = 32 * 16 * i
        body.append(f"{copy if 'cg' not in copy or size == 16 else copy} [%x_a+{off}], [%x_s], {size};")
    body.append("cp.async.commit_group;")
    body.append(f"{wait} 0;" if "wait_group" in wait else f"{wait};")
    for i, size in enumerate(sizes):
        for j in range(size // 4):
            body.append(f"ld.shared.b32 %d{len(outs)}, [%x_a+{32 * 16 * i + 4 * j}];")
            outs.append("b32")
    case = Case(text, [("b32", x) for x in a], outs, body, decls=decls, scratch=1, slot=16)
    return case


def g_matrix(text, base, mods, types):
    """ldmatrix / stmatrix .m8n8 (.x1/.x2/.x4, .trans, shared or generic address): lane i's
    four input words are row i (8 b16) of a shared tile, and lane i passes row i's address."""
    nx = next(int(m[1:]) for m in mods if m in ("x1", "x2", "x4"))
    a = draw(seed_of(base, nx), ["b32"] * 4, n_rand=96, limit=32)
    a = [x[:96] for x in a]
    decls = [".reg .b64 %x_a, %x_g;", ".shared .align 16 .b8 {k}_sm[512];"]
    addr = "%x_g"
    body = ["mov.u64 %x_a, {k}_sm;", "add.s64 %x_g, %x_a, %x_o;"]
    generic = "shared" not in mods
    if base == "ldmatrix":
        body += ["st.shared.v4.b32 [%x_g], {{%s0, %s1, %s2, %s3}};", "bar.warp.sync 0xffffffff;"]
        if generic:
            body.append("cvta.shared.u64 %x_a, %x_g;")
            addr = "%x_a"
        regs = ", ".join(f"%d{j}" for j in range(nx))
        body += [f"{text} {{{{{regs}}}}}, [{addr}];", "bar.warp.sync 0xffffffff;"]
        return Case(text, [("b32", x) for x in a], ["b32"] * nx, body, decls=decls, slot=16)
    body += ["st.shared.v4.b32 [%x_g], {{0, 0, 0, 0}};", "bar.warp.sync 0xffffffff;"]
    if generic:
        body.append("cvta.shared.u64 %x_a, %x_g;")
        addr = "%x_a"
    regs = ", ".join(f"%s{j}" for j in range(nx))
    body += [f"{text} [{addr}], {{{{{regs}}}}};", "bar.warp.sync 0xffffffff;",
             "ld.shared.v4.b32 {{%d0, %d1, %d2, %d3}}, [%x_g];", "bar.warp.sync 0xffffffff;"]
    return Case(text, [("b32", x) for x in a], ["b32"] * 4, body, decls=decls, slot=16, arch="sm_90")


def build(text: str) -> Case:
    base, mods, types = split(text)
    if base in ("ldmatrix", "stmatrix"):
        return g_matrix(text, base, mods, types)
    if base in ("bra", "exit", "ret", "call"):
        return g_control(text, base, mods, types)
    if base in ("bar", "barrier"):
        return g_barrier(text, base, mods, types)
    if base == "cp":
        return g_cp_async(text, base, mods, types)
    if base in QUIET:
        return g_quiet(text, base, mods, types)
    if base == "st" and "param" in mods:
        return g_st_param(text, base, mods, types)
    if base == "cvta" and any(m.startswith("const") for m in mods):
        return g_cvta_const(text, base, mods, types)
    raise NoTest(f"no generator for `{text}`")


def handles(text: str) -> bool:
    base, mods, _ = split(text)
    return (base in QUIET or base in ("bra", "exit", "ret", "call", "bar", "barrier", "cp", "ldmatrix",
                                      "stmatrix")
            or base == "st" and "param" in mods or base == "cvta" and "const" in mods)
