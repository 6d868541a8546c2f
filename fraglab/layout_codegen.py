"""Topic 06_layout_codegen: from a fragment layout to CUDA register code, automatically.

The in-register WMMA paper (Morales, 2025) ends (section 6) with a wish: a tool that discovers the
data layout of a WMMA fragment on a given GPU and writes the in-register permutation and reduction
code for it. Chapters 1-3 did each step by hand; this module does them mechanically.

    >>> from fraglab import layout_codegen as lc
    >>> p = lc.plan("acc_16x16x16_f32")      # GPU: traced live; no GPU: the H100 recording
    >>> p.rows.offsets, p.rows.groups         # butterfly lane offsets, registers folded per row
    ((1, 2), ((0, 1, 4, 5), (2, 3, 6, 7)))
    >>> print(lc.generate(p))                 # CUDA source: a struct of device functions

How a plan is derived from a (32, n_regs, 2) table ``layout[lane, reg] = (row, col)``, for rows
(columns are the same with the roles swapped):

1. **Register groups.** In each lane, the registers holding elements of the same row form a
   group. Straight-line code needs the same grouping in every lane (checked).
2. **Lanes of a row.** The lanes holding row ``r`` must form a coset ``l0 ^ V`` of a subspace
   ``V`` of the 5-bit lane ids (closed under XOR), the same ``V`` for every row, and a lane and
   its partner ``l ^ v`` must hold the row in the same group. Then a butterfly of
   ``__shfl_xor_sync`` over a basis of ``V`` combines exactly the lanes of each row, and leaves the
   result in all of them. For the WMMA accumulators ``V`` is spanned by single lane bits (the
   lane bits that vary along a row); for a layout whose lanes are XOR-mixed the offsets are not
   powers of two, and the butterfly still works. When the lanes of a row are not such a coset,
   :class:`CodegenError` says which row, which lanes, and why no butterfly can reduce it.
3. **Where results go.** The row index of group ``g`` in lane ``l`` is written as an affine
   function of the lane bits over GF(2) (``c ^ bit0*m0 ^ bit1*m1 ...``, printed as shifts and
   masks); a layout where it is not affine gets bit-sliced 32-bit constants instead.

Generated per kind (a ``struct`` in namespace ``fraglab_gen``, templated on the operator, which
may be any associative ``struct { static T apply(T, T); }``; ``Max``, ``Min`` and ``Sum`` come
with the header): ``reduce_rows`` / ``reduce_cols`` (register fold + butterfly, the result in
every lane holding the line), ``store_rows`` / ``store_cols`` (reduce, then one lane per line
writes ``out[line]``), ``expand_rows`` / ``expand_cols`` (broadcast: every register of line
``r`` gets the line's value, as a softmax needs), ``store`` (the forward-mapped store
``tile[row * ld + col] = x[i]``) and ``row_of`` / ``col_of``.

Pieces: :func:`plan` / :func:`plan_from_layout` (derive), :func:`generate` / :func:`header`
(emit), :func:`emulate_rows` / :func:`emulate_cols` / :func:`emulate_expand_rows` /
:func:`emulate_store` (run a plan on :mod:`fraglab.warp`), and the GPU wrappers
:func:`reduce` and :func:`broadcast_rows` of ``kernels/06_layout_codegen.cu``.

Command line::

    python -m fraglab.layout_codegen show KIND [--arch sm_90]   # the plan and the code
    python -m fraglab.layout_codegen header [--check]           # (re)write the committed header
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import device, launch, tracer, warp
from .toolchain import KERNELS_DIR

KERNELS = "06_layout_codegen"
HEADER_PATH = KERNELS_DIR / "06_layout_codegen_generated.cuh"
#: The recording the committed header is generated from (the course's H100).
HEADER_ARCH = "sm_90"
GUARD = "FRAGLAB_LAYOUT_CODEGEN_GENERATED"
WARPS_PER_BLOCK = 4                       # as in the .cu file: one tile per warp
OPS = ("max", "min", "sum")
MAX_TILES = 2**31 - 1

#: Every accumulator kind of chapter 1, in the order of the committed header.
KINDS = tuple(k.name for k in tracer.kinds("accumulator"))
#: C++ element type of an accumulator of each WMMA type (tf32 accumulates in float).
CTYPES = {"f32": "float", "f16": "__half", "s32": "int", "f64": "double"}
NP_TYPES = {"f32": np.float32, "f16": np.float16, "s32": np.int32, "f64": np.float64}
#: Kinds whose WMMA types exist from sm_80 on (their kernels trap on older targets).
SM80_INPUTS = ("bf16", "tf32", "f64")


class CodegenError(ValueError):
    """The layout is valid, but no straight-line shuffle butterfly reduces it (the message says
    which line and why)."""


# --------------------------------------------------------------------------------------------
# Plans
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LinePlan:
    """How to reduce along rows (``axis='rows'``: one value per row) or along columns."""
    axis: str
    lines: int                             # rows (or columns) of the tile
    groups: tuple[tuple[int, ...], ...]    # registers holding one line, the same in every lane
    offsets: tuple[int, ...]               # __shfl_xor_sync lane offsets (a basis of span)
    span: tuple[int, ...]                  # the subspace V: all XOR differences within a line
    line_of: np.ndarray                    # (32, groups): the line group g of lane l holds
    leaders: int                           # 32-bit mask of the lanes that write (one per line)

    @property
    def lane_bits(self) -> tuple[int, ...]:
        """The lane-id bits that vary within a line (for a bit layout: log2 of the offsets)."""
        m = 0
        for v in self.span:
            m |= v
        return tuple(b for b in range(5) if m >> b & 1)

    @property
    def is_bit_pattern(self) -> bool:
        """True when every offset is a single lane bit (the case of every WMMA accumulator)."""
        return all(o & (o - 1) == 0 for o in self.offsets)

    def describe(self) -> str:
        what = "row" if self.axis == "rows" else "column"
        regs = " ".join("{" + ",".join(map(str, g)) + "}" for g in self.groups)
        offs = ", ".join(map(str, self.offsets)) or "none"
        return (f"{self.axis:4}: fold registers {regs} (each group holds one {what}); "
                f"shuffle offsets {offs} (lane bits {list(self.lane_bits)})")


@dataclass(frozen=True)
class Plan:
    name: str
    shape: tuple[int, int]
    k: int
    ctype: str
    layout: np.ndarray                     # (32, n_regs, 2)
    rows: LinePlan
    cols: LinePlan
    sm80: bool = False                     # the kind needs sm_80 (tf32, f64)
    source: str = ""                       # where the layout came from

    @property
    def n_regs(self) -> int:
        return self.layout.shape[1]

    def line(self, axis: str) -> LinePlan:
        if axis not in ("rows", "cols"):
            raise ValueError(f"axis must be 'rows' or 'cols', got {axis!r}")
        return self.rows if axis == "rows" else self.cols

    def pattern(self) -> dict:
        """The shuffle pattern as plain data: offsets and register groups for rows and cols."""
        return {a: {"offsets": self.line(a).offsets, "groups": self.line(a).groups}
                for a in ("rows", "cols")}

    def describe(self) -> str:
        m, n = self.shape
        return f"{self.name} ({m}x{n}, {self.n_regs} registers a lane)\n  " + \
            self.rows.describe() + "\n  " + self.cols.describe()


def _basis(span: list[int]) -> tuple[int, ...]:
    """A basis of the XOR-closed set ``span``: the smallest elements not in the span of those
    taken before (for a span of single lane bits: those bits, lowest first)."""
    basis, reach = [], {0}
    for v in sorted(span):
        if v not in reach:
            basis.append(v)
            reach |= {r ^ v for r in reach}
    return tuple(basis)


def _line_plan(lay: np.ndarray, axis: str, lines: int) -> LinePlan:
    c = 0 if axis == "rows" else 1
    what = "row" if axis == "rows" else "column"
    coord = lay[..., c]
    n_regs = lay.shape[1]

    def grouping(lane):
        seen: dict[int, list[int]] = {}
        for r in range(n_regs):
            seen.setdefault(int(coord[lane, r]), []).append(r)
        return tuple(tuple(g) for g in seen.values())

    groups = grouping(0)
    for lane in range(1, 32):
        if grouping(lane) != groups:
            raise CodegenError(
                f"the registers that share a {what} differ between lanes: lane 0 groups them "
                f"{list(groups)}, lane {lane} {list(grouping(lane))}; straight-line code folds the "
                "same registers in every lane, so this layout needs per-lane selects")
    line_of = np.array([[coord[lane, g[0]] for g in groups] for lane in range(32)], np.int64)

    span_all = None
    for line in range(lines):
        holders = sorted({int(l) for l in np.flatnonzero((line_of == line).any(axis=1))})
        l0 = holders[0]
        diffs = sorted(l ^ l0 for l in holders)
        dset = set(diffs)
        for a in diffs:
            for b in diffs:
                if a ^ b not in dset:
                    raise CodegenError(
                        f"{what} {line} is held by lanes {holders}, which do not form a coset "
                        f"of a subspace of lane ids (not closed under XOR): a butterfly step "
                        f"with offset {a ^ b} pairs lane {l0 ^ a} with lane {l0 ^ b} (both hold "
                        f"{what} {line}) but also lane {l0} with lane {l0 ^ a ^ b}, which does "
                        f"not, so it would mix another {what} into {what} {line}. No butterfly "
                        f"of __shfl_xor_sync reduces this layout; it needs a different exchange "
                        "(e.g. __shfl_sync with per-lane sources)")
        if span_all is None:
            span_all = tuple(diffs)
        elif tuple(diffs) != span_all:
            raise CodegenError(
                f"{what}s 0 and {line} are spread over different lane patterns (XOR differences "
                f"{list(span_all)} vs {diffs}); one warp-wide butterfly needs the same offsets "
                f"for every {what}")
    assert span_all is not None
    for v in span_all:
        for lane in range(32):
            if not np.array_equal(line_of[lane], line_of[lane ^ v]):
                g = int(np.flatnonzero(line_of[lane] != line_of[lane ^ v])[0])
                raise CodegenError(
                    f"lane {lane} holds {what} {line_of[lane, g]} in registers {groups[g]}, but "
                    f"its butterfly partner lane {lane ^ v} holds {what} {line_of[lane ^ v, g]} "
                    f"there: shuffling registers {groups[g]} with offset {v} would mix {what}s")
    leaders = 0
    for lane in range(32):
        if all(lane <= (lane ^ v) for v in span_all):
            leaders |= 1 << lane
    return LinePlan(axis, lines, groups, _basis(list(span_all)), span_all, line_of, leaders)


def check_layout(layout, shape) -> np.ndarray:
    """``layout`` as a (32, n_regs, 2) int64 array, or ``warp.LayoutError`` saying what is wrong
    (not an array of that shape, entries outside the tile, holes, duplicates)."""
    lay = warp.validate_layout(layout, shape, allow_duplicates=False)
    m, n = (int(s) for s in shape)
    if (m * n) % 32:
        raise warp.LayoutError(f"a {m}x{n} tile cannot be spread evenly over 32 lanes")
    if lay.shape[1] * 32 != m * n:
        raise warp.LayoutError(f"a {m}x{n} tile held once needs {m * n // 32} registers a lane, "
                               f"the table has {lay.shape[1]}")
    return lay


def plan_from_layout(layout, shape, *, name: str = "custom", ctype: str = "float", k: int = 16,
                     sm80: bool = False, source: str = "a table given by the user") -> Plan:
    """The plan for any (32, n_regs, 2) layout table of a ``shape`` tile (e.g. a recording made on
    another GPU). ``name`` must be a C++ identifier; ``ctype`` one of float, __half, int, double.
    Raises ``warp.LayoutError`` for a table that is not a layout and :class:`CodegenError` for a
    layout no butterfly can reduce."""
    if not (isinstance(name, str) and name.isidentifier()):
        raise ValueError(f"name must be a C++ identifier, got {name!r}")
    if ctype not in CTYPES.values():
        raise ValueError(f"ctype must be one of {', '.join(CTYPES.values())}, got {ctype!r}")
    m, n = (int(s) for s in shape)
    lay = check_layout(layout, (m, n))
    return Plan(name, (m, n), int(k), ctype, lay, _line_plan(lay, "rows", m),
                _line_plan(lay, "cols", n), bool(sm80), source)


def plan(kind, layout=None, *, arch: str | None = None) -> Plan:
    """The plan of an accumulator ``kind``: its layout traced live on a GPU (``arch=None``), the
    recording of ``arch`` (default sm_90) without one, or the table ``layout`` given."""
    kd = tracer.get_kind(kind)
    if not kd.is_accumulator:
        raise ValueError(f"{kd.name} is a {kd.use} fragment; the generator reduces accumulators "
                         f"(kinds: {', '.join(KINDS)})")
    if layout is None:
        lay = tracer.layout(kd, arch)
        src = tracer.source_line(arch).split("] ", 1)[1]
        src = src.removeprefix("layouts from ").removeprefix("layouts ")
    else:
        lay, src = layout, "a table given by the user"
    return plan_from_layout(lay, kd.shape, name=kd.name, ctype=CTYPES[kd.dtype], k=kd.k,
                            sm80=kd.input in SM80_INPUTS, source=src)


# --------------------------------------------------------------------------------------------
# C++ expressions
# --------------------------------------------------------------------------------------------

def _affine(values) -> tuple[int, list[int]] | None:
    """(c, m) with values[l] == c ^ XOR of m[b] for the set bits b of l, or None."""
    v = np.asarray(values, dtype=np.int64)
    c = int(v[0])
    m = [int(v[1 << b]) ^ c for b in range(5)]
    for lane in range(32):
        x = c
        for b in range(5):
            if lane >> b & 1:
                x ^= m[b]
        if x != v[lane]:
            return None
    return c, m


def _lane_expr(values, table_name: str, tables: list[str]) -> str:
    """A C++ expression in ``lane`` giving values[lane]: shifts and masks of the lane bits when
    the map is affine over GF(2); else bit-sliced 32-bit constants (bit j of the value for lane l
    is bit l of the j-th constant), which stay in registers, unlike a table in memory."""
    aff = _affine(values)
    if aff is None:
        v = [int(x) for x in values]
        terms = []
        for j in range(max(v).bit_length()):
            mask = sum(1 << lane for lane in range(32) if v[lane] >> j & 1)
            t = f"(({mask:#010x}u >> lane) & 1u)"
            terms.append(t if j == 0 else f"({t} << {j})")
        return "(int)(" + " | ".join(terms or ["0u"]) + ")"
    c, m = aff
    terms, dests, b = [], [], 0
    while b < 5:
        if m[b] == 0:
            b += 1
            continue
        if m[b] & (m[b] - 1) == 0:            # a single destination bit: extend to a run
            d0, e = m[b].bit_length() - 1, b
            while e + 1 < 5 and m[e + 1] == m[b] << (e + 1 - b):
                e += 1
            width = e - b + 1
            field = f"(lane >> {b})" if b else "lane"
            if e < 4:                         # lane < 32: a run up to bit 4 needs no mask
                field = f"({field} & {(1 << width) - 1})"
            terms.append(field if d0 == 0 else f"({field} << {d0})")
            dests.append(((1 << width) - 1) << d0)
            b = e + 1
        else:                                 # a mixed bit: XOR a constant in
            terms.append(f"(((lane >> {b}) & 1) * {m[b]})")
            dests.append(m[b])
            b += 1
    if not terms:
        return str(c)
    used = 0
    disjoint = True
    for d in dests:
        disjoint &= not (used & d)
        used |= d
    if disjoint and not (used & c):
        # Bits that cannot collide: OR the fields and ADD the constant, which the compiler folds
        # into an address offset (rows[g + 8] is rows[g] plus 32 bytes).
        expr = terms[0] if len(terms) == 1 else "(" + " | ".join(terms) + ")"
        return expr if c == 0 else f"({expr} + {c})"
    return "(" + " ^ ".join(([str(c)] if c else []) + terms) + ")"


def _leader_test(lp: LinePlan) -> str:
    if lp.is_bit_pattern:
        bits = 0
        for o in lp.offsets:
            bits |= o
        return "true" if bits == 0 else f"(lane & {bits:#x}) == 0"
    return f"(({lp.leaders:#010x}u >> lane) & 1u)"


# --------------------------------------------------------------------------------------------
# Code generation
# --------------------------------------------------------------------------------------------

_PREAMBLE = """\
// Operators for the generated reductions: any struct with a static apply(a, b) that is
// associative works. f16 max/min compare in float (exact); sums use the type's own addition.
namespace fraglab_gen {
struct Max {
    static __device__ __forceinline__ float apply(float a, float b) { return fmaxf(a, b); }
    static __device__ __forceinline__ double apply(double a, double b) { return fmax(a, b); }
    static __device__ __forceinline__ int apply(int a, int b) { return max(a, b); }
    static __device__ __forceinline__ __half apply(__half a, __half b)
    { return __float2half(fmaxf(__half2float(a), __half2float(b))); }
};
struct Min {
    static __device__ __forceinline__ float apply(float a, float b) { return fminf(a, b); }
    static __device__ __forceinline__ double apply(double a, double b) { return fmin(a, b); }
    static __device__ __forceinline__ int apply(int a, int b) { return min(a, b); }
    static __device__ __forceinline__ __half apply(__half a, __half b)
    { return __float2half(fminf(__half2float(a), __half2float(b))); }
};
struct Sum {
    static __device__ __forceinline__ float apply(float a, float b) { return a + b; }
    static __device__ __forceinline__ double apply(double a, double b) { return a + b; }
    static __device__ __forceinline__ int apply(int a, int b)
    { return (int)((unsigned)a + (unsigned)b); }          // wraps, like the tensor cores' s32
    static __device__ __forceinline__ __half apply(__half a, __half b) { return __hadd(a, b); }
};
}  // namespace fraglab_gen
"""


def _reduce_fn(p: Plan, lp: LinePlan) -> list[str]:
    axis = lp.axis[:-1]
    what = "row" if lp.axis == "rows" else "column"
    G = len(lp.groups)
    out = [f"    // {lp.axis}: fold the registers of each {what} in the lane, then a butterfly over "
           f"lane offsets {', '.join(map(str, lp.offsets)) or '(none)'}.",
           f"    // Every lane holding {what} {axis}_of(lane, g) ends with its reduction in v[g].",
           "    template <class Op>",
           f"    static __device__ __forceinline__ void reduce_{lp.axis}(const T (&x)[NREGS], "
           f"T (&v)[{axis.upper()}_GROUPS])",
           "    {"]
    for g, regs in enumerate(lp.groups):
        expr = f"x[{regs[0]}]"
        for r in regs[1:]:
            expr = f"Op::apply({expr}, x[{r}])"
        out.append(f"        v[{g}] = {expr};")
    for o in lp.offsets:
        for g in range(G):
            out.append(f"        v[{g}] = Op::apply(v[{g}], __shfl_xor_sync(0xffffffffu, v[{g}], {o}));")
    out.append("    }")
    return out


def _coord_fn(lp: LinePlan, tables: list[str], prefix: str) -> list[str]:
    axis = lp.axis[:-1]
    out = [f"    // The {axis} held by register group g of lane `lane`.",
           f"    static __device__ __forceinline__ int {axis}_of(int lane, int g)", "    {"]
    for g in range(len(lp.groups)):
        e = _lane_expr(lp.line_of[:, g], f"{prefix}{axis.upper()}_G{g}", tables)
        out.append(f"        if (g == {g}) return {e};")
    out += ["        return -1;", "    }"]
    return out


def _store_lines_fn(lp: LinePlan) -> list[str]:
    axis = lp.axis[:-1]
    G = len(lp.groups)
    out = [f"    // Reduce, then one lane per {axis} writes out[{axis}] ({axis}s 0..{lp.lines - 1}).",
           "    template <class Op>",
           f"    static __device__ __forceinline__ void store_{lp.axis}(const T (&x)[NREGS], T* out)",
           "    {",
           f"        T v[{axis.upper()}_GROUPS];",
           f"        reduce_{lp.axis}<Op>(x, v);",
           "        const int lane = threadIdx.x & 31;",
           f"        if ({_leader_test(lp)}) {{"]
    for g in range(G):
        out.append(f"            out[{axis}_of(lane, {g})] = v[{g}];")
    out += ["        }", "    }"]
    return out


def _expand_fn(p: Plan, lp: LinePlan) -> list[str]:
    axis = lp.axis[:-1]
    group_of = {}
    for g, regs in enumerate(lp.groups):
        for r in regs:
            group_of[r] = g
    body = " ".join(f"x[{r}] = v[{group_of[r]}];" for r in range(p.n_regs))
    return [f"    // Broadcast: every register holding {axis} r gets that {axis}'s value (v as "
            f"reduce_{lp.axis} leaves it).",
            f"    static __device__ __forceinline__ void expand_{lp.axis}(const T (&v)[{axis.upper()}_GROUPS], "
            "T (&x)[NREGS])",
            "    {", f"        {body}", "    }"]


def _store_fn(p: Plan, tables: list[str], prefix: str) -> list[str]:
    out = ["    // The forward-mapped store: register i of each lane goes straight to its element.",
           "    static __device__ __forceinline__ void store(const T (&x)[NREGS], T* tile, int ld)",
           "    {", "        const int lane = threadIdx.x & 31;"]
    for r in range(p.n_regs):
        row = _lane_expr(p.layout[:, r, 0], f"{prefix}R{r}_ROW", tables)
        col = _lane_expr(p.layout[:, r, 1], f"{prefix}R{r}_COL", tables)
        out.append(f"        tile[{row} * ld + {col}] = x[{r}];")
    out.append("    }")
    return out


def generate(p, layout=None, *, arch: str | None = None) -> str:
    """CUDA source text (a ``struct`` in namespace ``fraglab_gen``) for a :class:`Plan`, or for a
    kind name (planned with :func:`plan`, ``layout`` and ``arch`` passed on)."""
    if not isinstance(p, Plan):
        p = plan(p, layout, arch=arch)
    m, n = p.shape
    tables: list[str] = []
    prefix = ""
    body = []
    body += _reduce_fn(p, p.rows) + [""] + _reduce_fn(p, p.cols) + [""]
    body += _coord_fn(p.rows, tables, prefix) + [""] + _coord_fn(p.cols, tables, prefix) + [""]
    body += _store_lines_fn(p.rows) + [""] + _store_lines_fn(p.cols) + [""]
    body += _expand_fn(p, p.rows) + [""] + _expand_fn(p, p.cols) + [""]
    body += _store_fn(p, tables, prefix)
    head = [f"// {p.name}: {m}x{n} tile, {p.n_regs} registers a lane; layout: {p.source}.",
            f"//   rows: registers {' '.join('{' + ','.join(map(str, g)) + '}' for g in p.rows.groups)},"
            f" lane offsets {', '.join(map(str, p.rows.offsets)) or '(none)'}",
            f"//   cols: registers {' '.join('{' + ','.join(map(str, g)) + '}' for g in p.cols.groups)},"
            f" lane offsets {', '.join(map(str, p.cols.offsets)) or '(none)'}",
            f"struct {p.name} {{",
            f"    using T = {p.ctype};",
            f"    static constexpr int M = {m}, N = {n}, K = {p.k}, NREGS = {p.n_regs};",
            f"    static constexpr int ROW_GROUPS = {len(p.rows.groups)}, "
            f"COL_GROUPS = {len(p.cols.groups)};"]
    head += ["    " + t for t in tables]
    return "\n".join(head + [""] + body + ["};"]) + "\n"


def header(plans=None, *, arch: str = HEADER_ARCH, note: str | None = None) -> str:
    """A self-contained header: the operators, one struct per plan and the X-macros
    ``FRAGLAB_GEN_KINDS(X)`` / ``FRAGLAB_GEN_KINDS_SM80(X)`` listing them as
    ``X(name, M, N, K, T)``. ``plans``: Plans or kind names (default: every accumulator kind,
    from the ``arch`` recording)."""
    plans = [q if isinstance(q, Plan) else plan(q, arch=arch) for q in (plans or KINDS)]
    names = [q.name for q in plans]
    if len(set(names)) != len(names):
        raise ValueError(f"plans must have distinct names, got {names}")
    lines = ["// Generated by `python -m fraglab.layout_codegen header` (fraglab/layout_codegen.py)",
             f"// from {note or f'the recorded layouts fraglab/layouts/{arch}.json'}. "
             "Do not edit: regenerate.",
             f"#ifndef {GUARD}", f"#define {GUARD}", "#include <cuda_fp16.h>", "", _PREAMBLE,
             "namespace fraglab_gen {", ""]
    for q in plans:
        lines.append(generate(q))
    lines.append("}  // namespace fraglab_gen\n")
    for sm80, macro in ((False, "FRAGLAB_GEN_KINDS"), (True, "FRAGLAB_GEN_KINDS_SM80")):
        items = [f"X({q.name}, {q.shape[0]}, {q.shape[1]}, {q.k}, {q.ctype})"
                 for q in plans if q.sm80 == sm80]
        lines.append(f"#define {macro}(X) " + " ".join(items))
    lines += ["", f"#endif  // {GUARD}", ""]
    return "\n".join(lines)


def header_is_current() -> bool:
    return HEADER_PATH.is_file() and HEADER_PATH.read_text() == header()


def harness_source(p: Plan) -> str:
    """The harness ``kernels/06_layout_codegen.cu`` compiled with code generated for ``p`` only
    (what the wrappers use for a layout given by the user)."""
    return header([p], note="a layout given at run time") + \
        (KERNELS_DIR / f"{KERNELS}.cu").read_text()


# --------------------------------------------------------------------------------------------
# Emulator: run a plan on fraglab.warp (fragments (32, n_regs) or (32, n_regs, batch...))
# --------------------------------------------------------------------------------------------

_NP_OPS = {"max": np.fmax, "min": np.fmin, "sum": np.add}


def _op(op):
    if callable(op):
        return op
    if op not in _NP_OPS:
        raise ValueError(f"unknown operator {op!r}; known: {', '.join(OPS)}")
    return _NP_OPS[op]


def _frag(p: Plan, frag) -> np.ndarray:
    f = np.asarray(frag)
    if f.ndim < 2 or f.shape[:2] != (32, p.n_regs):
        raise ValueError(f"a {p.name} fragment has shape (32, {p.n_regs}), optionally with batch "
                         f"axes after them; got {f.shape}")
    return f


def emulate_reduce(p: Plan, frag, op, axis: str = "rows") -> np.ndarray:
    """What ``reduce_<axis>`` leaves in each lane: (32, groups, ...) in the generated order."""
    lp, fn, f = p.line(axis), _op(op), _frag(p, frag)
    vals = []
    for regs in lp.groups:
        v = f[:, regs[0]]
        for r in regs[1:]:
            v = fn(v, f[:, r])
        vals.append(v)
    for o in lp.offsets:
        vals = [fn(v, warp.shfl_xor_sync(warp.FULL_MASK, v, o)) for v in vals]
    return np.stack([np.asarray(v) for v in vals], axis=1)


def _emulate_lines(p: Plan, frag, op, axis: str) -> np.ndarray:
    lp = p.line(axis)
    v = emulate_reduce(p, frag, op, axis)
    out = np.full((lp.lines,) + v.shape[2:], np.nan)
    written = np.zeros(lp.lines, int)
    for lane in range(32):
        if lp.leaders >> lane & 1:
            for g in range(len(lp.groups)):
                out[lp.line_of[lane, g]] = v[lane, g]
                written[lp.line_of[lane, g]] += 1
    assert (written == 1).all(), f"leaders write lines {written.tolist()} times"
    return out


def emulate_rows(p: Plan, frag, op) -> np.ndarray:
    """(rows, ...): what ``store_rows`` writes."""
    return _emulate_lines(p, frag, op, "rows")


def emulate_cols(p: Plan, frag, op) -> np.ndarray:
    """(cols, ...): what ``store_cols`` writes."""
    return _emulate_lines(p, frag, op, "cols")


def emulate_expand_rows(p: Plan, v) -> np.ndarray:
    """``expand_rows``: (32, groups, ...) -> (32, n_regs, ...)."""
    v = np.asarray(v)
    idx = [next(g for g, regs in enumerate(p.rows.groups) if r in regs) for r in range(p.n_regs)]
    return v[:, idx]


def emulate_store(p: Plan, frag) -> np.ndarray:
    """``store``: the (M, N, ...) tile the fragment's registers are written to."""
    f = _frag(p, frag)
    out = np.full(p.shape + f.shape[2:], np.nan)
    out[p.layout[..., 0], p.layout[..., 1]] = f
    return out


def fragments(p: Plan, tiles) -> np.ndarray:
    """(n, M, N) tiles -> (32, n_regs, n) fragments of the plan's layout (load_matrix_sync)."""
    t = np.asarray(tiles)
    if t.ndim != 3 or t.shape[1:] != p.shape:
        raise ValueError(f"tiles must have shape (n, {p.shape[0]}, {p.shape[1]}), got {t.shape}")
    return np.moveaxis(t[:, p.layout[..., 0], p.layout[..., 1]], 0, -1)


def reference(tiles, op) -> tuple[np.ndarray, np.ndarray]:
    """Float64 NumPy row and column reductions of (n, M, N) tiles."""
    t = np.asarray(tiles, dtype=np.float64)
    fn = _op(op)
    return fn.reduce(t, axis=2), fn.reduce(t, axis=1)


# --------------------------------------------------------------------------------------------
# GPU wrappers of kernels/06_layout_codegen.cu
# --------------------------------------------------------------------------------------------

def reduce_kernel(kind, op) -> str:
    kd = tracer.get_kind(kind)
    if op not in OPS:
        raise ValueError(f"unknown operator {op!r}; known: {', '.join(OPS)}")
    return f"reduce_{kd.name}_{op}"


def broadcast_kernel(kind, op) -> str:
    return "bcast" + reduce_kernel(kind, op)[len("reduce"):]


def _prepare(kind, acc, op, layout):
    kd = tracer.get_kind(kind)
    if not kd.is_accumulator:
        raise ValueError(f"{kd.name} is not an accumulator kind; kinds: {', '.join(KINDS)}")
    if op not in OPS:
        raise ValueError(f"unknown operator {op!r}; known: {', '.join(OPS)}")
    p = plan(kd, layout) if layout is not None else None   # layout errors before any GPU work
    launch.check_array("acc", acc, dtype=NP_TYPES[kd.dtype], ndim=3)
    if tuple(acc.shape[1:]) != kd.shape:
        raise ValueError(f"acc must have shape (n_tiles, {kd.shape[0]}, {kd.shape[1]}) for "
                         f"{kd.name}, got {acc.shape}")
    if acc.data.ptr % 32:
        raise ValueError("acc must start on a 32-byte boundary (WMMA loads need it): pass a copy")
    n = int(acc.shape[0])
    if not 1 <= n <= MAX_TILES:
        raise ValueError(f"the number of tiles must be between 1 and {MAX_TILES}, got {n}")
    ok, why = tracer.supported(kd)
    if not ok:
        raise tracer.UnsupportedKind(f"{kd.name}: {why}")
    src = harness_source(p) if p is not None else None
    return kd, n, src


def reduce(kind, acc, op: str, *, layout=None):
    """Row and column reductions of accumulator tiles by the generated code: ``acc`` is a CuPy
    array (n_tiles, M, N) of the kind's type; one warp loads a tile with ``load_matrix_sync`` and
    runs ``store_rows``/``store_cols``. ``layout``: generate for this table instead of the
    committed header. Returns ``(rows (n, M), cols (n, N))``, poisoned before the launch."""
    kd, n, src = _prepare(kind, acc, op, layout)
    fn = launch.get_kernel(KERNELS, reduce_kernel(kd, op), source=src)
    dt = NP_TYPES[kd.dtype]
    rows = launch.poisoned((n, kd.shape[0]), dt)
    cols = launch.poisoned((n, kd.shape[1]), dt)
    launch.launch(fn, -(-n // WARPS_PER_BLOCK), 32 * WARPS_PER_BLOCK, (acc, rows, cols, np.int32(n)))
    return rows, cols


def broadcast_rows(kind, acc, op: str, *, layout=None):
    """``(copy, bcast)``, both (n, M, N): ``copy`` is each tile written back by the generated
    forward-mapped ``store``; ``bcast`` has every element replaced by its row's reduction
    (``reduce_rows`` + ``expand_rows`` + ``store``)."""
    kd, n, src = _prepare(kind, acc, op, layout)
    fn = launch.get_kernel(KERNELS, broadcast_kernel(kd, op), source=src)
    dt = NP_TYPES[kd.dtype]
    copy = launch.poisoned(acc.shape, dt)
    bcast = launch.poisoned(acc.shape, dt)
    launch.launch(fn, -(-n // WARPS_PER_BLOCK), 32 * WARPS_PER_BLOCK, (acc, copy, bcast, np.int32(n)))
    return copy, bcast


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------

def _main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m fraglab.layout_codegen",
                                 description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("show", help="print the plan and the generated code of kinds")
    s.add_argument("--arch", default=None)
    s.add_argument("kind", nargs="*")
    h = sub.add_parser("header", help=f"write {HEADER_PATH.name} from the {HEADER_ARCH} recording")
    h.add_argument("--check", action="store_true", help="only check that it is up to date")
    a = ap.parse_args(argv)
    if a.cmd == "header":
        if a.check:
            ok = header_is_current()
            print(f"{HEADER_PATH.name} is {'up to date' if ok else 'stale: run without --check'}")
            return 0 if ok else 1
        HEADER_PATH.write_text(header())
        print(f"wrote {HEADER_PATH}")
        return 0
    print(tracer.source_line(a.arch))
    for name in a.kind or KINDS:
        p = plan(name, arch=a.arch)
        print(p.describe())
        print(generate(p))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
