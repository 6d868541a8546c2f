"""Which PTX instructions the interpreter runs: every base opcode with the modifiers and types it
accepts, in one table. Decoding refuses anything else (:func:`check`), so a modifier the
interpreter does not implement raises ``UnsupportedInstruction`` naming it instead of being
silently ignored.

``FORMS[base]`` is a tuple of :class:`Form`\\ s, written like the syntax lines of the PTX ISA::

    F("rnd? ftz? sat?", "f32")           add{.rnd}{.ftz}{.sat}.f32
    F("wide", "u16 u32 s16 s32")         mul.wide.{u16,u32,s16,s32}
    F("T {f4e,b4e}?", "b32")             prmt.b32{.f4e,.b4e}    (T: where the types go)

A spec word is a modifier group: a name of :data:`GROUPS` (``rnd`` = rn/rz/rm/rp, ...), an inline
set ``{a,b}`` or a single modifier; ``?`` makes it optional and a leading ``~`` marks a pure
performance hint (cache operators, eviction priorities, L2 prefetch sizes, cache policies,
``.uni``): accepted, a no-op here, and a separate axis that :func:`combinations` does not
multiply out (:attr:`Combo.hints` lists them). The type spec lists the accepted type tuples, one
per word, its parts joined by dots; a part may be a set name of :data:`TYPESETS` or ``{a,b}``.
:func:`describe` prints the whole table.

Matching: the modifiers of an instruction may come in any order (ptxas checks the order; NVRTC
writes the PTX ISA's), each fills one group of the form, every required group must be filled,
and the types (the modifiers that are PTX type names) must be one of the form's type tuples, in
order. Spellings that mean the same (``.shared::cta`` for ``.shared``, ``.weak`` for no
qualifier) are accepted but not enumerated (:data:`ALIASES`).
"""
from __future__ import annotations

import itertools
import re
from typing import NamedTuple

# ---- vocabulary ----------------------------------------------------------------------------------

GROUPS = {
    "rnd": "rn rz rm rp", "irnd": "rni rzi rmi rpi", "mode": "hi lo",
    "icmp": "eq ne lt le gt ge", "ucmp": "eq ne lt le gt ge lo ls hi hs", "bcmp": "eq ne",
    "fcmp": "eq ne lt le gt ge equ neu ltu leu gtu geu num nan", "bool": "and or xor",
    "scope": "cta cluster gpu sys", "cscope": "cta cluster",
    "ss": "const global local param shared shared::cta shared::cluster",
    "sts": "global local param shared shared::cta shared::cluster",
    "vsts": "global local shared shared::cta shared::cluster",
    "sync_ss": "global shared shared::cta shared::cluster",
    "cta_ss": "shared shared::cta", "vec": "v2 v4",
    "cop": "ca cg cs lu cv", "st_cop": "wb cg cs wt", "nc_cop": "ca cg cs",
    "l1": "L1::evict_normal L1::evict_unchanged L1::evict_first L1::evict_last L1::no_allocate",
    "l2": "L2::evict_normal L2::evict_first L2::evict_last",
    "hint": "L2::cache_hint", "pf": "L2::64B L2::128B L2::256B",
    "wshape": "m16n16k16 m32n8k16 m8n32k16", "wss": "global shared shared::cta",
    "alayout": "row col", "blayout": "row col", "layout": "row col",
    "wgshape": " ".join(f"m64n{n}k16" for n in range(8, 257, 8)),
    "prio": "L2::evict_last L2::evict_normal L2::evict_first L2::evict_unchanged",
    "prio2": "L2::evict_first L2::evict_unchanged",
}

#: The hint groups (spec words with ``~``): accepted, no effect on the interpreter's results.
HINTS = {
    "cop": "ld cache operators .ca .cg .cs .lu .cv (memory here is coherent: no effect)",
    "st_cop": "st cache operators .wb .cg .cs .wt", "nc_cop": "ld.global.nc cache operators",
    "l1": "L1 eviction priorities", "l2": "L2 eviction priorities",
    "hint": ".L2::cache_hint: a cache-policy operand follows the others (ignored)",
    "pf": "L2 prefetch sizes .L2::64B/128B/256B", "{uni}": ".uni: the branch or call is "
    "not divergent (a promise; the interpreter handles divergence either way)",
}

TYPESETS = {
    "INT": "u16 u32 u64 s16 s32 s64", "SINT": "s16 s32 s64", "UINT": "u16 u32 u64",
    "BITS": "b16 b32 b64", "CI": "u8 u16 u32 u64 s8 s16 s32 s64",
    "LD": "b8 b16 b32 b64 u8 u16 u32 u64 s8 s16 s32 s64 f32 f64",
    "LD32": "b8 b16 b32 u8 u16 u32 s8 s16 s32 f32",
    "SEL": "b16 b32 b64 u16 u32 u64 s16 s32 s64 f32 f64",
    "H": "f16 f16x2", "BH": "bf16 bf16x2", "SD": "u32 s32 f32",
}

#: Every PTX type name (a modifier that is one of these is read as a type).
PTX_TYPES = frozenset(
    "pred b8 b16 b32 b64 b128 u8 u16 u32 u64 s8 s16 s32 s64 f16 f16x2 bf16 bf16x2 tf32 f32 f64 "
    "f32x2 u16x2 s16x2 s4 u4 b1 e4m3 e5m2 e2m1 e2m3 e3m2 e4m3x2 e5m2x2 e2m1x2 e2m3x2 e3m2x2 "
    "e4m3x4 e5m2x4 e2m1x4 e2m3x4 e3m2x4 ue8m0 ue8m0x2 ue4m3 b8x16 b6x16_p32 b4x16_p64".split())

#: Spellings accepted but not enumerated: token -> the spelling it equals (None: no modifier).
ALIASES = {"shared::cta": "shared", "weak": None}

#: Why some modifiers and types are refused (for the messages).
REASONS = {
    "cc": "carry chains", "relu": "ReLU clamping", "NaN": "NaN-propagating min/max",
    "xorsign": "xorsign.abs", "abs": "absolute-value min/max", "satfinite": "saturation to "
    "finite values", "noftz": "half-precision atomics", "rs": "stochastic rounding",
    "oob": "out-of-bounds handling", "multicast::cluster": "cluster multicast", "tensor":
    "tensor-map (TMA) copies", "noComplete": "arrivals that cannot complete a phase", "sp":
    "sparse matrices", "mmio": "memory-mapped I/O", "async": "asynchronous stores",
    "cluster": "clusters", "v8": "256-bit vectors", "b128": "128-bit values", "u16x2": "packed "
    "16-bit integers", "s16x2": "packed 16-bit integers", "f32x2": "packed f32 pairs", "s4":
    "sub-byte integers", "u4": "sub-byte integers", "b1": "single-bit matrices", "cp_mask":
    "byte-masked bulk stores", "sync_restrict::shared::cluster": "clusters", "kind::f8f6f4":
    "fp8/fp6/fp4 matrices", "param::entry": "kernel-parameter windows", "param::func":
    "call-parameter windows", "unified": "unified addresses", "reduce": "bulk reductions",
    "pending_count": "pending counts", "mapa": "clusters", "tensormap": "tensor maps",
    **{t: "fp8/fp6/fp4 types" for t in "e4m3 e5m2 e2m1 e2m3 e3m2 e4m3x2 e5m2x2 e2m1x2 e2m3x2 "
       "e3m2x2 e4m3x4 e5m2x4 e2m1x4 e2m3x4 e3m2x4 ue8m0 ue8m0x2 ue4m3".split()},
}

#: Combinations refused although each modifier and type is known, with why: (regular expression
#: over the full opcode, reason). Consulted only for an opcode that no form accepts.
ILLEGAL = [
    (r"cvt(\.\w+)*\.sat(\.\w+)*\.[su]\d+\.[su]\d+",
     "is illegal PTX: the destination type holds every value of the source type (PTX ISA, cvt: "
     "integer .sat only where the destination range is not a superset of the source's; ptxas: "
     "\"Illegal modifier '.sat'\")"),
    (r"cvt(\.\w+)*\.sat(\.\w+)*\.(bf16\.\w+|\w+\.bf16)",
     "is rejected by ptxas 13.0 and by the driver's JIT on an H100 (\"Illegal modifier '.sat'\": "
     "no .sat with a .bf16 operand, although the ISA's syntax lists it)"),
    (r"st(\.\w+)*\.param(\.[\w:]+)*\.v[248]\.\w+",
     "is not implemented: a vector store to a call parameter (call parameters are held as whole "
     "registers)"),
]

#: Opcodes the interpreter has no handler for, with why (for the messages).
REFUSED_OPCODES = {
    "brx": "indirect branches", "addc": "carry chains", "subc": "carry chains",
    "madc": "carry chains", "tex": "textures", "tld4": "textures", "txq": "textures",
    "suld": "surfaces", "sust": "surfaces", "sured": "surfaces", "suq": "surfaces",
    "mapa": "clusters", "getctarank": "clusters", "multimem": "multimem", "movmatrix":
    "movmatrix", "alloca": "dynamic stack allocation", "stacksave": "stack", "stackrestore":
    "stack", "istypep": "textures", "tcgen05": "tcgen05 (sm_100)", "tensormap": "tensor maps",
    "clusterlaunchcontrol": "clusters", "bmsk": "bmsk", "szext": "szext", "fns": "fns",
    **{v: "video instructions" for v in "vabsdiff vabsdiff2 vabsdiff4 vadd vadd2 vadd4 vavrg2 "
       "vavrg4 vmad vmax vmax2 vmax4 vmin vmin2 vmin4 vset vset2 vset4 vshl vshr vsub vsub2 "
       "vsub4".split()},
}


class Group(NamedTuple):
    name: str                  # GROUPS key, the modifier, or "{a,b}"
    alts: tuple                # the modifiers it accepts
    optional: bool
    hint: bool = False         # a pure performance hint: accepted, a no-op, not enumerated


class Form(NamedTuple):
    groups: tuple              # Group, in PTX order
    types: frozenset           # accepted type tuples
    tpos: int                  # the types go before groups[tpos]
    note: str = ""

    def text(self) -> str:
        words = [("~" if g.hint else "") + g.name + ("?" if g.optional else "") for g in self.groups]
        words.insert(self.tpos, "T")
        return " ".join(words)


class Combo(NamedTuple):
    base: str
    mods: tuple                # the modifiers, in PTX order (without the types)
    types: tuple
    text: str                  # the full opcode: 'add.rn.ftz.sat.f32'
    hints: tuple = ()          # hint Groups this combination may also carry (no-ops)


def _types(spec: str) -> frozenset:
    out = set()
    for word in spec.split():
        parts = []
        for p in word.split("."):
            if p in TYPESETS:
                parts.append(TYPESETS[p].split())
            elif p.startswith("{"):
                parts.append(p[1:-1].split(","))
            else:
                parts.append([p])
        out.update(itertools.product(*parts))
    return frozenset(out) if out else frozenset({()})


def F(spec: str, types: str = "", note: str = "") -> Form:
    groups, tpos = [], None
    for w in spec.split():
        if w == "T":
            tpos = len(groups)
            continue
        hint, w = w.startswith("~"), w.lstrip("~")
        opt, w = w.endswith("?"), w.rstrip("?")
        if w in GROUPS:
            alts = tuple(GROUPS[w].split())
        elif w.startswith("{"):
            alts = tuple(w[1:-1].split(","))
        else:
            alts = (w,)
        groups.append(Group(w, alts, opt, hint))
    return Form(tuple(groups), _types(types), len(groups) if tpos is None else tpos, note)


def _fl(**forms):
    return {k.rstrip("_"): v for k, v in forms.items()}


def _narrowing(pairs: str) -> str:
    """The integer ``dst.src`` pairs of `pairs` (a type spec) whose destination range is not a
    superset of the source's: the only ones where cvt takes ``.sat`` (PTX ISA, cvt: for integer
    destinations ".sat" is "allowed only in cases where the destination type's value range is
    not a superset of the source type's value range"; ptxas rejects the others, "Illegal
    modifier '.sat'")."""
    def holds(d, a):                # every value of type a fits in type d
        wd, wa = int(d[1:]), int(a[1:])
        return wa <= wd if d[0] == a[0] else (d[0] == "s" and wa < wd)
    return " ".join(sorted(f"{d}.{a}" for d, a in _types(pairs) if not holds(d, a)))


# ---- the table -----------------------------------------------------------------------------------

_ADD = (F("", "INT"), F("sat", "s32"), F("rnd? ftz? sat?", "f32"), F("rnd?", "f64"),
        F("{rn}? ftz? sat?", "H"), F("{rn}?", "BH"))
_MUL = (F("{hi,lo}", "INT"), F("wide", "u16 u32 s16 s32"), *_ADD[2:])
_MINMAX = (F("", "INT"), F("relu", "s32"), F("ftz? NaN?", "f32"), F("", "f64"),
           F("ftz? NaN?", "H"), F("NaN?", "BH"))
_NEGABS = (F("", "SINT"), F("ftz?", "f32"), F("", "f64"), F("ftz?", "H"), F("", "BH"))
_SETP = (F("ucmp bool?", "UINT"), F("icmp bool?", "SINT"), F("bcmp bool?", "BITS"),
         F("fcmp bool? ftz?", "f32 f16"), F("fcmp bool?", "f64 bf16"))
_LDSYNC = "~l1? ~l2? ~hint? ~pf?"
_LD = (F("weak? ss? ~cop? " + _LDSYNC + " v2?", "LD"), F("weak? ss? ~cop? " + _LDSYNC + " v4", "LD32"),
       F("volatile sync_ss? ~pf? v2?", "LD"), F("volatile sync_ss? ~pf? v4", "LD32"),
       F("{relaxed,acquire} scope sync_ss? " + _LDSYNC + " v2?", "LD"),
       F("{relaxed,acquire} scope sync_ss? " + _LDSYNC + " v4", "LD32"),
       F("global ~nc_cop? nc " + _LDSYNC + " v2?", "LD"),
       F("global ~nc_cop? nc " + _LDSYNC + " v4", "LD32"))
_STHINTS = "~l1? ~l2? ~hint?"
# st.param (a call's argument) is scalar: call parameters are held as whole registers
_ST = (F("weak? sts? ~st_cop? " + _STHINTS, "LD"), F("weak? vsts? ~st_cop? " + _STHINTS + " v2", "LD"),
       F("weak? vsts? ~st_cop? " + _STHINTS + " v4", "LD32"),
       F("volatile sync_ss? v2?", "LD"), F("volatile sync_ss? v4", "LD32"),
       F("{relaxed,release} scope sync_ss? " + _STHINTS + " v2?", "LD"),
       F("{relaxed,release} scope sync_ss? " + _STHINTS + " v4", "LD32"))
_ATOMS = "{relaxed,acquire,release,acq_rel}? scope? sync_ss?"
_REDS = "{relaxed,release}? scope? sync_ss?"
_ATOM = (F(_ATOMS + " {and,or,xor} ~hint?", "b32 b64"), F(_ATOMS + " cas", "b16 b32 b64"),
         F(_ATOMS + " exch ~hint?", "b32 b64"),
         F(_ATOMS + " add ~hint?", "u32 s32 u64 f32 f64",
           "add.f32 flushes subnormals on global memory, not on shared"),
         F(_ATOMS + " {inc,dec} ~hint?", "u32"), F(_ATOMS + " {min,max} ~hint?", "u32 s32 u64 s64"))
_RED = (F(_REDS + " {and,or,xor} ~hint?", "b32 b64"),
        F(_REDS + " add ~hint?", "u32 s32 u64 f32 f64",
          "add.f32 flushes subnormals on global memory, not on shared"),
        F(_REDS + " {inc,dec} ~hint?", "u32"), F(_REDS + " {min,max} ~hint?", "u32 s32 u64 s64"))
_SPECIAL = F("approx ftz?", "f32")
_WMMA = "sync aligned"
_WLOAD = tuple(F(f"{op} {_WMMA} layout {shape} wss?", ts) for op, shape, ts in (
    ("load {a,b}", "wshape", "f16 bf16 s8 u8"), ("load {a,b}", "m16n16k8", "tf32"),
    ("load {a,b}", "m8n8k4", "f64"), ("load c", "wshape", "f16 f32 s32"),
    ("load c", "m16n16k8", "f32"), ("load c", "m8n8k4", "f64"),
    ("store d", "wshape", "f16 f32 s32"), ("store d", "m16n16k8", "f32"),
    ("store d", "m8n8k4", "f64")))
_WMMA_MMA = (F(f"mma {_WMMA} alayout blayout wshape", "f16.f16 f32.f32 f16.f32 f32.f16"),
             F(f"mma {_WMMA} alayout blayout wshape", "f32.bf16.bf16.f32"),
             F(f"mma {_WMMA} alayout blayout wshape T satfinite?", "s32.s8.s8.s32 s32.u8.u8.s32"),
             F(f"mma {_WMMA} alayout blayout m16n16k8", "f32.tf32.tf32.f32"),
             F(f"mma {_WMMA} alayout blayout m8n8k4 T {{rn}}", "f64.f64.f64.f64"))
_MATRIX = (F("sync aligned m8n8 {x1,x2,x4} trans? cta_ss?", "b16"),)
_BAR_RED = (F("cta? red popc", "u32"), F("cta? red {and,or}", "pred"))

FORMS: dict = _fl(
    add=_ADD, sub=_ADD, mul=_MUL, mul24=(F("mode", "u32 s32"),),
    mad=(F("{hi,lo}", "INT"), F("wide", "u16 u32 s16 s32"), F("hi sat", "s32"),
         F("rnd ftz? sat?", "f32"), F("rnd", "f64")),
    mad24=(F("mode", "u32 s32"), F("hi sat", "s32")),
    fma=(F("rnd ftz? sat?", "f32"), F("rnd", "f64"), F("{rn} ftz? sat?", "H"),
         F("{rn} ftz? relu", "H"), F("{rn} relu?", "BH")),
    div=(F("", "INT"), F("{approx,full} ftz?", "f32"), F("rnd ftz?", "f32"), F("rnd", "f64")),
    rem=(F("", "INT"),), min=_MINMAX, max=_MINMAX, neg=_NEGABS, abs=_NEGABS,
    and_=(F("", "pred BITS"),), or_=(F("", "pred BITS"),), xor=(F("", "pred BITS"),),
    not_=(F("", "pred BITS"),), cnot=(F("", "BITS"),), shl=(F("", "BITS"),),
    shr=(F("", "BITS INT"),), shf=(F("{l,r} {clamp,wrap}", "b32"),), lop3=(F("", "b32"),),
    prmt=(F("T {f4e,b4e,rc8,ecl,ecr,rc16}?", "b32"),), bfe=(F("", "u32 u64 s32 s64"),),
    bfi=(F("", "b32 b64"),), popc=(F("", "b32 b64"),), clz=(F("", "b32 b64"),),
    brev=(F("", "b32 b64"),), bfind=(F("shiftamt?", "u32 u64 s32 s64"),),
    setp=_SETP,
    set=(F("ucmp bool?", "SD.UINT"), F("icmp bool?", "SD.SINT"), F("bcmp bool?", "SD.BITS"),
         F("fcmp bool? ftz?", "SD.f32"), F("fcmp bool?", "SD.f64")),
    selp=(F("", "SEL"),), slct=(F("", "SEL.s32"), F("ftz?", "SEL.f32")),
    mov=(F("", "pred SEL"),), sad=(F("", "INT"),),
    dp4a=(F("", "{u32,s32}.{u32,s32}"),), dp2a=(F("{lo,hi}", "{u32,s32}.{u32,s32}"),),
    copysign=(F("", "f32 f64"),),
    testp=(F("{finite,infinite,number,notanumber,normal,subnormal}", "f32 f64"),),
    rcp=(F("approx ftz?", "f32"), F("rnd ftz?", "f32"), F("rnd", "f64"), F("approx ftz", "f64")),
    sqrt=(F("approx ftz?", "f32"), F("rnd ftz?", "f32"), F("rnd", "f64")),
    rsqrt=(F("approx ftz?", "f32 f64"),),
    ex2=(F("approx ftz?", "f32"), F("approx", "H"), F("approx ftz", "BH")),
    lg2=(_SPECIAL,), sin=(_SPECIAL,), cos=(_SPECIAL,), tanh=(F("approx", "f32 H BH"),),
    # .sat: on integer -> integer only where the value can overflow (_narrowing); never with a
    # .bf16 source or destination (the ISA's syntax allows it, ptxas 13.0 and the H100's JIT
    # refuse it: "Illegal modifier '.sat' for instruction 'cvt'", 2026-11-27 differential record)
    cvt=(F("", "CI.CI"), F("sat", _narrowing("CI.CI")),          # integer <-> integer
         F("irnd ftz? sat?", "CI.f32"), F("irnd sat?", "CI.f16 CI.f64"), F("irnd", "CI.bf16"),
         F("rnd sat?", "f16.CI f32.CI f64.CI"), F("rnd", "bf16.CI"),
         F("irnd ftz? sat?", "f32.f32"), F("irnd sat?", "f16.f16 f64.f64"),   # to integral value
         F("ftz? sat?", "f32.f32 f64.f32 f32.f16"), F("ftz?", "f32.bf16"),
         F("sat?", "f64.f64 f64.f16"), F("", "f64.bf16"),
         F("rnd ftz? sat?", "f16.f32 f32.f64"), F("rnd sat?", "f16.f64"),
         F("rnd", "bf16.f32 bf16.f64 bf16.f16"),
         F("{rn,rz} relu", "f16.f32 bf16.f32"), F("{rn,rz} relu?", "f16x2.f32 bf16x2.f32"),
         F("{rna,rz}", "tf32.f32")),
    cvta=(F("to? {global,shared,shared::cta,local,const}", "u64"),),
    isspacep=(F("{global,shared,shared::cta,local,const}"),),
    ld=_LD, ldu=(F("global? v2?", "LD"), F("global? v4", "LD32")), st=_ST,
    cp=(F("async {ca,cg} cta_ss global ~hint? ~pf?"), F("async {commit_group,wait_group,wait_all}"),
        F("async mbarrier arrive noinc? cta_ss?", "b64"),
        F("async bulk {shared::cluster,shared::cta} global mbarrier::complete_tx::bytes ~hint?"),
        F("async bulk global shared::cta bulk_group ~hint?"),
        F("async bulk {commit_group,wait_group}"), F("async bulk wait_group read"),
        F("async bulk prefetch L2 global ~hint?"),
        F("async bulk tensor {1d,2d,3d,4d,5d} {shared::cluster,shared::cta} global tile? "
          "mbarrier::complete_tx::bytes")),
    atom=_ATOM, red=_RED,
    membar=(F("{cta,gl,sys}"),),
    fence=(F("{sc,acq_rel}? scope"), F("proxy {alias,async}"),
           F("proxy async {global,shared::cta,shared::cluster}"),
           F("mbarrier_init release cluster"),
           F("proxy tensormap::generic {release,acquire} scope")),
    prefetch=(F("{global,local}? {L1,L2}"), F("global {L2::evict_last,L2::evict_normal}"),
              F("tensormap")),
    prefetchu=(F("L1"),), discard=(F("global? L2"),), applypriority=(F("global? L2::evict_normal"),),
    createpolicy=(F("fractional prio prio2?", "b64"), F("range global? prio prio2?", "b64"),
                  F("cvt L2", "b64")),
    bra=(F("~{uni}?"),), ret=(F("~{uni}?"),), exit=(F(""),), trap=(F(""),), brkpt=(F(""),),
    call=(F("~{uni}?"),), nanosleep=(F("", "u32"),), pmevent=(F("mask?"),),
    bar=(F("cta? sync"), F("arrive"), *_BAR_RED, F("warp sync")),
    barrier=(F("cta? sync aligned?"), F("arrive aligned?"), F("cta? red popc aligned?", "u32"),
             F("cta? red {and,or} aligned?", "pred")),
    shfl=(F("sync {up,down,bfly,idx}", "b32"),),
    vote=(F("sync {all,any,uni}", "pred"), F("sync ballot", "b32")),
    activemask=(F("", "b32"),), match=(F("{any,all} sync", "b32 b64"),),
    redux=(F("sync {add,min,max}", "u32 s32"), F("sync {and,or,xor}", "b32")),
    elect=(F("sync"),), setmaxnreg=(F("{inc,dec} sync aligned", "u32"),),
    griddepcontrol=(F("{launch_dependents,wait}"),),
    mbarrier=(F("{init,inval} cta_ss?", "b64"),
              F("{arrive,arrive_drop} expect_tx? {release,relaxed}? cscope? sync_ss?", "b64"),
              F("{expect_tx,complete_tx} relaxed? cscope? sync_ss?", "b64"),
              F("{test_wait,try_wait} parity? {acquire,relaxed}? cscope? cta_ss?", "b64")),
    wgmma=(F("{fence,commit_group,wait_group} sync aligned"),
           F("mma_async sync aligned wgshape", "f32.f16.f16 f16.f16.f16 f32.bf16.bf16")),
    wmma=_WLOAD + _WMMA_MMA,
    mma=(F("sync aligned {m16n8k8,m16n8k16} row col", "f16.f16.f16.f16 f32.f16.f16.f32 "
                                                      "f16.f16.f16.f32 f32.f16.f16.f16 f32.bf16.bf16.f32"),
         F("sync aligned {m16n8k4,m16n8k8} row col", "f32.tf32.tf32.f32"),
         F("sync aligned m16n8k32 row col satfinite?", "s32.{s8,u8}.{s8,u8}.s32"),
         F("sync aligned m8n8k4 row col", "f64.f64.f64.f64")),
    ldmatrix=_MATRIX, stmatrix=_MATRIX,
)


# ---- checking ------------------------------------------------------------------------------------

def _index(form: Form) -> dict:
    idx: dict = {}
    for gi, g in enumerate(form.groups):
        for a in g.alts:
            idx.setdefault(a, []).append(gi)
    return idx


_INDEX = {b: tuple(_index(f) for f in fs) for b, fs in FORMS.items()}
_KNOWN = {b: frozenset(t for ix in ixs for t in ix) for b, ixs in _INDEX.items()}


def _fits(form: Form, index: dict, mods, types) -> bool:
    """Whether the modifiers (any order) fill the form's groups, each at most once, all the
    required ones, and the types are one of its tuples."""
    if types not in form.types:
        return False
    used = [False] * len(form.groups)

    def place(i):                            # backtracking: groups may share modifiers
        if i == len(mods):
            return all(used[g] or grp.optional for g, grp in enumerate(form.groups))
        for g in index.get(mods[i], ()):
            if not used[g]:
                used[g] = True
                if place(i + 1):
                    return True
                used[g] = False
        return False
    return place(0)


def split(opcode: str):
    """'add.rn.f32' -> ('add', ('rn',), ('f32',)): base, modifiers, types."""
    base, *rest = opcode.split(".")
    return (base, tuple(x for x in rest if x not in PTX_TYPES),
            tuple(x for x in rest if x in PTX_TYPES))


def _why(tok: str) -> str:
    r = REASONS.get(tok)
    return f" ({r})" if r else ""


def _check(opcode: str):
    base, mods, types = split(opcode)
    forms = FORMS.get(base)
    if forms is None:
        return f"{base}: opcode not implemented{_why_op(base)}"
    if any(_fits(f, ix, mods, types) for f, ix in zip(forms, _INDEX[base])):
        return None
    known = _KNOWN[base]
    for m in mods:
        if m not in known:
            return f"{base}: modifier .{m}{_why(m)} is not implemented"
    tt = "." + ".".join(types) if types else "no type"
    with_t = [(f, ix) for f, ix in zip(forms, _INDEX[base]) if types in f.types]
    for pat, why in ILLEGAL:
        if with_t and re.fullmatch(pat, opcode):
            return f"{base}: {opcode[len(base):]} {why}"
    if not with_t:
        bad = next((t for t in types if t in REASONS), None)
        if bad:
            return f"{base}: type .{bad}{_why(bad)} is not implemented"
        return (f"{base}: type{'s' if len(types) > 1 else ''} {tt} not implemented"
                + (f" with .{'.'.join(mods)}" if mods else ""))
    for m in mods:
        if not any(m in ix for _, ix in with_t):
            return f"{base}: modifier .{m}{_why(m)} is not implemented with {tt}"
    for f, ix in with_t:                     # all there but a required modifier: name it
        loose = f._replace(groups=tuple(g._replace(optional=True) for g in f.groups))
        if _fits(loose, ix, mods, types):
            g = next(g for g in f.groups if not g.optional and not set(g.alts) & set(mods))
            return f"{base}: {tt} needs " + (f".{g.alts[0]}" if len(g.alts) == 1 else
                                              "one of ." + " .".join(g.alts[:8])) + \
                (" ..." if len(g.alts) > 8 else "")
    return (f"{base}: the combination {('.' + '.'.join(mods)) if mods else 'without modifiers'}"
            f" with {tt} is not implemented")


def _why_op(base):
    r = REFUSED_OPCODES.get(base)
    return f" ({r})" if r else ""


_CACHE: dict = {}


def check(instr):
    """None when the interpreter implements ``instr`` (an Instr or a full opcode string) with
    all its modifiers and types, else the reason, naming the first modifier or type it lacks:
    ``'add: modifier .cc (carry chains) is not implemented'``. Cached per opcode."""
    op = instr if isinstance(instr, str) else instr.opcode
    try:
        return _CACHE[op]
    except KeyError:
        r = _CACHE[op] = _check(op)
        return r


def accepts(opcode: str) -> bool:
    return check(opcode) is None


# ---- enumeration ---------------------------------------------------------------------------------

def _choices(g: Group):
    alts = [a for a in g.alts
            if not (a in ALIASES and (ALIASES[a] in g.alts or (ALIASES[a] is None and g.optional)))]
    return ([None] if g.optional else []) + alts


def form_combinations(base: str, form: Form):
    """The combinations of one form: every choice of its non-hint groups x every type tuple."""
    real = [(i, g) for i, g in enumerate(form.groups) if not g.hint]
    hints = tuple(g for g in form.groups if g.hint)
    for choice in itertools.product(*(_choices(g) for _, g in real)):
        picked = {i: c for (i, _), c in zip(real, choice) if c is not None}
        before = tuple(picked[i] for i in sorted(picked) if i < form.tpos)
        after = tuple(picked[i] for i in sorted(picked) if i >= form.tpos)
        for types in sorted(form.types):
            text = ".".join((base,) + before + types + after)
            yield Combo(base, before + after, types, text, hints)


def combinations(opcode: str | None = None) -> list:
    """Every accepted (opcode, modifiers, types) combination, as :class:`Combo`\\ s with the full
    opcode text, for one base opcode or all. Pure hints are not multiplied out (``Combo.hints``);
    alias spellings are left out (:data:`ALIASES`)."""
    out, seen = [], set()
    for base in ([opcode] if opcode else sorted(FORMS)):
        for form in FORMS.get(base, ()):
            for c in form_combinations(base, form):
                if c.text not in seen:
                    seen.add(c.text)
                    out.append(c)
    return out


def describe(opcode: str | None = None) -> str:
    """The table as text: one line per form, ``base  spec  : types``."""
    lines = []
    for base in ([opcode] if opcode else sorted(FORMS)):
        for f in FORMS[base]:
            ts = " ".join(".".join(t) for t in sorted(f.types)) or "-"
            lines.append(f"{base:14} {f.text():60} : {ts}" + (f"  ({f.note})" if f.note else ""))
    return "\n".join(lines)
