"""Generators of differential tests for memory instructions (ld/ldu/st of every state space a
one-block kernel has, vector widths, atom/red with one lane per address, cvta, isspacep) and the
warp collectives with the full mask (shfl.sync, vote.sync, match.sync, redux.sync, activemask,
elect.sync).

A load is tested on data that plain scalar stores put in its space (const memory: an
initialised ``.const`` array); a store is read back by plain scalar loads; an atomic starts
from a stored value and both its returned value and the memory after it are outputs."""
from __future__ import annotations

import numpy as np

from . import values as V
from .case import Case, memtype, seed_of
from .gen import NoTest, draw, split, thin

SPACES = ("global", "shared", "local", "const", "param")
#: modifiers that do not change the values a single thread sees (memory ordering, scopes, the
#: cluster/CTA spellings of shared memory, the non-coherent path): such variants of an access get
#: a thinner input set than the plain access
VARIANT = {"relaxed", "acquire", "release", "acq_rel", "cta", "cluster", "gpu", "sys", "volatile",
           "weak", "shared::cluster", "shared::cta", "nc"}


def space_of(mods) -> str:
    for m in mods:
        if m.split("::")[0] in SPACES:
            return m.split("::")[0]
    return "generic"


def vec_of(mods) -> int:
    return next((int(m[1:]) for m in mods if m in ("v2", "v4", "v8")), 1)


def _slot(nbytes):
    s = 8
    while s < nbytes:
        s *= 2
    return s


def _address(space, decls):
    """PTX lines putting this element's address in ``%x_a`` (the staging scratch region for
    global and generic accesses, the thread's slot of a shared array, a local array, its slot of
    the const array) and the address plain accesses of the space use in ``%x_s``."""
    decls.append(".reg .b64 %x_a, %x_s, %x_g;")
    if space in ("global", "generic"):
        lines = ["add.s64 %x_s, %x_p, {g0};"]
        return lines + (["cvta.global.u64 %x_a, %x_s;"] if space == "generic" else ["mov.u64 %x_a, %x_s;"])
    if space == "shared":
        decls.append(".shared .align 32 .b8 {k}_sm[%SIZE%];")
        return ["mov.u64 %x_a, {k}_sm;", "add.s64 %x_a, %x_a, %x_o;", "mov.u64 %x_s, %x_a;"]
    if space == "local":
        decls.append(".local .align 32 .b8 {k}_lc[%SLOT%];")
        return ["mov.u64 %x_a, {k}_lc;", "mov.u64 %x_s, %x_a;"]
    if space == "const":
        return ["mov.u64 %x_a, {k}_cs;", "sub.s64 %x_g, %x_p, %x_b;", "add.s64 %x_a, %x_a, %x_g;"]
    raise NoTest(f"no test for the .{space} space")


def _plain(space):
    """The space the staging stores / read-back loads use."""
    return "global" if space == "generic" else space


def _hint(mods, decls, pre):
    """The cache-policy operand of a .L2::cache_hint access (created by createpolicy)."""
    if "L2::cache_hint" not in mods:
        return ""
    decls.append(".reg .b64 %x_pol;")
    pre.append("createpolicy.fractional.L2::evict_last.b64 %x_pol, 1.0;")
    return ", %x_pol"


def _finish(case, space, slot):
    case.decls = [d.replace("%SIZE%", str(32 * slot)).replace("%SLOT%", str(slot)) for d in case.decls]
    case.scratch = 1 if space in ("global", "generic") else 0
    return case


def _vec(regs):
    return regs[0] if len(regs) == 1 else "{{" + ", ".join(regs) + "}}"


def g_ld(text, base, mods, types):
    t = types[-1]
    if t == "b128":
        raise NoTest(".b128 registers")
    space = space_of(mods)
    nv = vec_of(mods)
    w = V.WIDTH[t]
    slot = _slot(nv * w)
    if space == "param":
        return _ld_param(text, t, nv)
    srcs = draw(seed_of("ld", t, nv), [t] * nv, pools=[V.specials(t)] * nv, n_rand=64, limit=64,
                near_pairs=False)
    if space == "const":
        srcs = [a[:128] for a in srcs]
    if VARIANT & set(mods):
        srcs = thin(srcs, 32)
    decls, pre = [], []
    if "nc" in mods or base == "ldu":         # read-only for the kernel's lifetime: in memory before it
        body = [] if space == "global" else ["cvta.global.u64 %x_a, %x_p;"]
        decls.append(".reg .b64 %x_a;")
        hint = _hint(mods, decls, pre)
        where = "%x_p" if space == "global" else "%x_a"
        body += pre + [f"{text} {_vec([f'%d{i}' for i in range(nv)])}, [{where}]{hint};"]
        return Case(text, [(t, a) for a in srcs], [t] * nv, body, decls=decls, slot=slot, interleave=True)
    body = _address(space, decls)
    hint = _hint(mods, decls, pre)
    if space != "const":
        pl = _plain(space)
        for i in range(nv):
            body.append(f"st.{pl}.{memtype(t)} [%x_s+{i * w}], %s{i};")
    body += pre + [f"{text} {_vec([f'%d{i}' for i in range(nv)])}, [%x_a]{hint};"]
    case = Case(text, [(t, a) for a in srcs], [t] * nv, body, decls=decls, slot=slot)
    if space == "const":
        case.loads = False
        raw = np.zeros((case.n, slot), np.uint8)
        for i, a in enumerate(srcs):
            raw[:, i * w:(i + 1) * w] = a.view(np.uint8).reshape(case.n, w)
        case.consts = [".const .align 32 .b8 {k}_cs[%d] = {{%s}};" % (raw.size, ", ".join(map(str, raw.ravel())))]
    return _finish(case, space, slot)


def _ld_param(text, t, nv):
    """ld.param of by-value kernel parameters: eight scalars, or four vectors (declared as
    aligned byte arrays), holding special values; every thread reads the same."""
    w = V.WIDTH[t]
    sp = V.specials(t)
    count = 8 if nv == 1 else 4
    vals = [[sp[(i * nv + j) % len(sp)] for j in range(nv)] for i in range(count)]
    params, body, srcs = [], [], []
    for i, v in enumerate(vals):
        raw = V.as_bits(t, v).tobytes()
        params.append((f".align {max(nv * w, 1)} .b8 {{k}}_p{{i}}[{nv * w}]", raw))
        regs = [f"%d{i * nv + j}" for j in range(nv)]
        body.append(f"{text} {_vec(regs)}, [{{k}}_p{i}];")
        srcs += [(t, np.full(32, x, V.udt(t))) for x in v]
    return Case(text, srcs, [t] * (count * nv), body, loads=False, params=params)


def g_st(text, base, mods, types):
    t = types[-1]
    if t == "b128":
        raise NoTest(".b128 registers")
    space = space_of(mods)
    if space in ("const", "param"):
        raise NoTest(f"st.{space}: not writable in a kernel (param: call sequences only)")
    nv = vec_of(mods)
    w = V.WIDTH[t]
    slot = _slot(nv * w)
    srcs = draw(seed_of("st", t, nv), [t] * nv, pools=[V.specials(t)] * nv, n_rand=64, limit=64,
                near_pairs=False)
    if VARIANT & set(mods):
        srcs = thin(srcs, 32)
    decls, pre = [], []
    body = _address(space, decls)
    hint = _hint(mods, decls, pre)
    body += pre + [f"{text} [%x_a], {_vec([f'%s{i}' for i in range(nv)])}{hint};"]
    pl = _plain(space)
    for i in range(nv):
        body.append(f"ld.{pl}.{memtype(t)} %d{i}, [%x_s+{i * w}];")
    case = Case(text, [(t, a) for a in srcs], [t] * nv, body, decls=decls, slot=slot)
    return _finish(case, space, slot)


ATOM_OPS = ("add", "min", "max", "and", "or", "xor", "exch", "cas", "inc", "dec")


def g_atom(text, base, mods, types):
    t = types[-1]
    if t == "b128" or vec_of(mods) > 1:
        raise NoTest("b128 / vector atomics")
    op = next((m for m in mods if m in ATOM_OPS), None)
    if op is None:
        raise NoTest("no atomic operation in the opcode")
    space = space_of(mods)
    w = V.WIDTH[t]
    slot = 8 if w <= 8 else 16
    sp = V.specials(t)
    if op in ("inc", "dec"):
        pools = [[0, 1, 2, 3, 5, 6, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF],
                 [0, 1, 2, 5, 0x7FFFFFFF, 0xFFFFFFFF]]
    else:
        pools = [sp, sp]
    tys = [t, t] + ([t] if op == "cas" else [])
    if op == "cas":
        pools = [sp, sp, sp[::-1]]
    fl = t in ("f32", "f64", "f16", "bf16", "f16x2", "bf16x2")
    a = draw(seed_of("atom", op, t), tys, pools=pools, n_rand=32 if fl else 32, limit=608 if fl else 224)
    if op == "cas":                                   # half the rows compare equal: they swap
        a[1] = np.where(np.arange(len(a[1])) % 2 == 0, a[0], a[1]).astype(a[1].dtype)
    variant = bool(VARIANT & set(mods))
    if variant:                    # the interpreter's atomics cost ~0.1 ms per lane: 8 threads
        a = thin(a, 8)
    decls, pre = [], []
    body = _address(space, decls)
    hint = _hint(mods, decls, pre)
    pl = _plain(space)
    where = "[%x_s]"
    body.append(f"st.{pl}.{memtype(t)} {where}, %s0;")
    ops = ", ".join(f"%s{i}" for i in range(1, len(tys)))
    if base == "red":
        body += pre + [f"{text} [%x_a], {ops}{hint};", f"ld.{pl}.{memtype(t)} %d0, {where};"]
        dsts = [t]
    else:
        body += pre + [f"{text} %d0, [%x_a], {ops}{hint};", f"ld.{pl}.{memtype(t)} %d1, {where};"]
        dsts = [t, t]
    case = Case(text, [(tt, x) for tt, x in zip(tys, a)], dsts, body, decls=decls, slot=slot,
                threads=8 if variant else 32)
    return _finish(case, space, slot)


def g_cvta(text, base, mods, types):
    """cvta to / from a space, checked by what a load through the converted address reads."""
    t = types[-1]
    if t != "u64":
        raise NoTest("32-bit cvta in a 64-bit module")
    space = next(m for m in mods if m.split("::")[0] in SPACES)
    sp = space.split("::")[0]
    if sp in ("param", "const"):
        raise NoTest(f"cvta of .{sp}")
    srcs = draw(seed_of("cvta"), ["b32"], n_rand=32)
    decls = []
    body = _address(sp, decls)
    pl = _plain(sp)
    body.append(f"st.{pl}.b32 [%x_s], %s0;")
    if "to" in mods:
        body += [f"cvta.{space}.u64 %x_g, %x_s;", f"{text} %x_g, %x_g;", f"ld.{space}.b32 %d0, [%x_g];"]
    else:
        body += [f"{text} %x_g, %x_a;", "ld.b32 %d0, [%x_g];"]
    return _finish(Case(text, [("b32", srcs[0])], ["b32"], body, decls=decls), sp, 8)


def g_isspacep(text, base, mods, types):
    decls = [".reg .b64 %x_a, %x_s, %x_g;", ".shared .align 8 .b8 {k}_sm[8];", ".local .align 8 .b8 {k}_lc[8];"]
    body = ["cvta.global.u64 %x_a, %x_p;", f"{text} %d0, %x_a;",
            "mov.u64 %x_g, {k}_sm;", "cvta.shared.u64 %x_a, %x_g;", f"{text} %d1, %x_a;",
            "mov.u64 %x_g, {k}_lc;", "cvta.local.u64 %x_a, %x_g;", f"{text} %d2, %x_a;"]
    srcs = [("b32", np.zeros(32, np.uint32))]
    return Case(text, srcs, ["pred"] * 3, body, decls=decls)


# ---- warp collectives ------------------------------------------------------------------------

SHFL_C = [0x1F, 0x0, 0x181F, 0x1C1F, 0x1E1F, 0x101F, 0x1F00, 0x3, 0x10, 0x1F1F, 0x0F, 0x1800,
          0x1C00, 0x1E00, 0x1007, 0x0807]


def _groups(rng, count, fn):
    return np.concatenate([fn(g, rng) for g in range(count)])


def g_shfl(text, base, mods, types):
    mode = next((m for m in mods if m in ("up", "down", "bfly", "idx")), None)
    if "sync" not in mods or mode is None:
        raise NoTest("shfl without .sync")
    rng = np.random.default_rng(seed_of("shfl", mode))
    ng = 2 * len(SHFL_C)
    a = V.rand_uint("b32", rng, 32 * ng)
    top = 32 if mode == "idx" else 34

    def lanes(g, r):
        return np.full(32, r.integers(0, top)) if g % 2 == 0 else r.integers(0, top, 32)
    b = _groups(rng, ng, lanes).astype(np.uint32)
    c = np.repeat(np.array(SHFL_C * 2, np.uint32), 32)
    body = [f"{text} %d0|%d1, %s0, %s1, %s2, 0xffffffff;"]
    return Case(text, [("b32", a), ("u32", b), ("u32", c)], ["b32", "pred"], body)


def _lane_preds(rng, ng):
    pats = [np.zeros(32), np.ones(32), np.eye(32)[5], 1 - np.eye(32)[31], np.arange(32) % 2]
    return _groups(rng, ng, lambda g, r: pats[g] if g < len(pats) else r.integers(0, 2, 32)).astype(np.uint32)


def g_vote(text, base, mods, types):
    rng = np.random.default_rng(seed_of("vote"))
    p = _lane_preds(rng, 12)
    ballot = "ballot" in mods
    return Case(text, [("pred", p)], ["b32" if ballot else "pred"], [f"{text} %d0, %s0, 0xffffffff;"])


def g_match(text, base, mods, types):
    t = types[-1]
    rng = np.random.default_rng(seed_of("match", t))

    def vals(g, r):
        if g == 0:
            return np.full(32, 7)
        if g == 1:
            return np.where(np.arange(32) == 9, 8, 7)
        return r.integers(0, 1 + g % 6, 32) * 0x100000001
    v = _groups(rng, 12, vals).astype(V.udt(t))
    if "all" in mods:
        return Case(text, [(t, v)], ["b32", "pred"], [f"{text} %d0|%d1, %s0, 0xffffffff;"])
    return Case(text, [(t, v)], ["b32"], [f"{text} %d0, %s0, 0xffffffff;"])


def g_redux(text, base, mods, types):
    t = types[-1]
    rng = np.random.default_rng(seed_of("redux", t))
    sp = V.specials(t)

    def vals(g, r):
        if g < 4:
            return np.full(32, sp[[0, 5, 7, 3][g]])
        return r.choice(sp, 32) if g % 2 else V.rand_uint(t, r, 32)
    v = _groups(rng, 12, vals).astype(V.udt(t))
    return Case(text, [(t, v)], [t], [f"{text} %d0, %s0, 0xffffffff;"])


def g_activemask(text, base, mods, types):
    return Case(text, [("b32", np.zeros(32, np.uint32))], ["b32"], [f"{text} %d0;"])


def g_elect(text, base, mods, types):
    return Case(text, [("b32", np.zeros(32, np.uint32))], ["b32", "pred"],
                [f"{text} %d0|%d1, 0xffffffff;"], arch="sm_90")


GENERATORS = {"ld": g_ld, "ldu": g_ld, "st": g_st, "atom": g_atom, "red": g_atom, "cvta": g_cvta,
              "isspacep": g_isspacep, "shfl": g_shfl, "vote": g_vote, "match": g_match,
              "redux": g_redux, "activemask": g_activemask, "elect": g_elect}


def build(text: str) -> Case:
    base, mods, types = split(text)
    if base not in GENERATORS:
        raise NoTest(f"no generator for `{base}`")
    if not types and base not in ("isspacep", "cvta"):
        types = ("b32",)
    return GENERATORS[base](text, base, mods, types)
