"""CUDA text from plans: one ``struct`` of device functions per plan (:func:`generate`), the
committed header of every accumulator kind (:func:`header`) and the harness for a layout given at
run time (:func:`harness_source`)."""
from __future__ import annotations

from ..tools import KERNELS_DIR
from .lane_expr import lane_expr, leader_test
from .plan import KINDS, LinePlan, Plan, plan

KERNELS = "06_layout_codegen"
HEADER_PATH = KERNELS_DIR / "06_layout_codegen_generated.cuh"
#: The recording the committed header is generated from (the course's H100).
HEADER_ARCH = "sm_90"
GUARD = "FRAGLAB_LAYOUT_CODEGEN_GENERATED"
_FN = "static __device__ __forceinline__"


def _min_max(struct: str, fn: str) -> list[str]:
    """``Max`` or ``Min``: fmaxf/fmax/max per type; f16 compares in float, which is exact."""
    return [f"struct {struct} {{",
            f"    {_FN} float apply(float a, float b) {{ return {fn}f(a, b); }}",
            f"    {_FN} double apply(double a, double b) {{ return {fn}(a, b); }}",
            f"    {_FN} int apply(int a, int b) {{ return {fn[1:]}(a, b); }}",
            f"    {_FN} __half apply(__half a, __half b)",
            f"    {{ return __float2half({fn}f(__half2float(a), __half2float(b))); }}",
            "};"]


def _preamble() -> str:
    """The operators the generated reductions are instantiated with (namespace fraglab_gen)."""
    lines = ["// Operators for the generated reductions: any struct with a static apply(a, b) "
             "that is",
             "// associative works. f16 max/min compare in float (exact); sums use the type's own "
             "addition.",
             "namespace fraglab_gen {",
             *_min_max("Max", "fmax"), *_min_max("Min", "fmin"),
             "struct Sum {",
             f"    {_FN} float apply(float a, float b) {{ return a + b; }}",
             f"    {_FN} double apply(double a, double b) {{ return a + b; }}",
             f"    {_FN} int apply(int a, int b)",
             "    { return (int)((unsigned)a + (unsigned)b); }          // wraps, like the tensor "
             "cores' s32",
             f"    {_FN} __half apply(__half a, __half b) {{ return __hadd(a, b); }}",
             "};",
             "}  // namespace fraglab_gen"]
    return "\n".join(lines) + "\n"


def _reduce_fn(lp: LinePlan) -> list[str]:
    axis = lp.axis[:-1]
    out = [f"    // {lp.axis}: fold the registers of each {lp.what} in the lane, then a butterfly "
           f"over lane offsets {lp.offsets_text()}.",
           f"    // Every lane holding {lp.what} {axis}_of(lane, g) ends with its reduction in "
           "v[g].",
           "    template <class Op>",
           f"    {_FN} void reduce_{lp.axis}(const T (&x)[NREGS], T (&v)[{axis.upper()}_GROUPS])",
           "    {"]
    for g, regs in enumerate(lp.groups):
        expr = f"x[{regs[0]}]"
        for r in regs[1:]:
            expr = f"Op::apply({expr}, x[{r}])"
        out.append(f"        v[{g}] = {expr};")
    for o in lp.offsets:
        for g in range(len(lp.groups)):
            out.append(f"        v[{g}] = Op::apply(v[{g}], "
                       f"__shfl_xor_sync(0xffffffffu, v[{g}], {o}));")
    return out + ["    }"]


def _coord_fn(lp: LinePlan) -> list[str]:
    axis = lp.axis[:-1]
    out = [f"    // The {axis} held by register group g of lane `lane`.",
           f"    {_FN} int {axis}_of(int lane, int g)", "    {"]
    for g in range(len(lp.groups)):
        out.append(f"        if (g == {g}) return {lane_expr(lp.line_of[:, g])};")
    return out + ["        return -1;", "    }"]


def _store_lines_fn(lp: LinePlan) -> list[str]:
    axis = lp.axis[:-1]
    out = [f"    // Reduce, then one lane per {axis} writes out[{axis}] "
           f"({axis}s 0..{lp.lines - 1}).",
           "    template <class Op>",
           f"    {_FN} void store_{lp.axis}(const T (&x)[NREGS], T* out)",
           "    {",
           f"        T v[{axis.upper()}_GROUPS];",
           f"        reduce_{lp.axis}<Op>(x, v);",
           "        const int lane = threadIdx.x & 31;",
           f"        if ({leader_test(lp)}) {{"]
    for g in range(len(lp.groups)):
        out.append(f"            out[{axis}_of(lane, {g})] = v[{g}];")
    return out + ["        }", "    }"]


def _expand_fn(lp: LinePlan) -> list[str]:
    axis = lp.axis[:-1]
    body = " ".join(f"x[{r}] = v[{g}];" for r, g in enumerate(lp.group_of()))
    return [f"    // Broadcast: every register holding {axis} r gets that {axis}'s value (v as "
            f"reduce_{lp.axis} leaves it).",
            f"    {_FN} void expand_{lp.axis}(const T (&v)[{axis.upper()}_GROUPS], T (&x)[NREGS])",
            "    {", f"        {body}", "    }"]


def _store_fn(p: Plan) -> list[str]:
    out = ["    // The forward-mapped store: register i of each lane goes straight to its element.",
           f"    {_FN} void store(const T (&x)[NREGS], T* tile, int ld)",
           "    {", "        const int lane = threadIdx.x & 31;"]
    for r in range(p.n_regs):
        row, col = lane_expr(p.layout[:, r, 0]), lane_expr(p.layout[:, r, 1])
        out.append(f"        tile[{row} * ld + {col}] = x[{r}];")
    return out + ["    }"]


def generate(p, layout=None, *, arch: str | None = None) -> str:
    """CUDA source text (a ``struct`` in namespace ``fraglab_gen``) for a :class:`Plan`, or for a
    kind name (planned with :func:`plan`, ``layout`` and ``arch`` passed on)."""
    if not isinstance(p, Plan):
        p = plan(p, layout, arch=arch)
    m, n = p.shape
    body = []
    for piece in (_reduce_fn, _coord_fn, _store_lines_fn, _expand_fn):
        body += piece(p.rows) + [""] + piece(p.cols) + [""]
    body += _store_fn(p)
    head = [f"// {p.name}: {m}x{n} tile, {p.n_regs} registers a lane; layout: {p.source}.",
            f"//   rows: registers {p.rows.groups_text()}, lane offsets {p.rows.offsets_text()}",
            f"//   cols: registers {p.cols.groups_text()}, lane offsets {p.cols.offsets_text()}",
            f"struct {p.name} {{",
            f"    using T = {p.ctype};",
            f"    static constexpr int M = {m}, N = {n}, K = {p.k}, NREGS = {p.n_regs};",
            f"    static constexpr int ROW_GROUPS = {len(p.rows.groups)}, "
            f"COL_GROUPS = {len(p.cols.groups)};"]
    return "\n".join(head + [""] + body + ["};"]) + "\n"


def header(plans=None, *, arch: str = HEADER_ARCH, note: str | None = None) -> str:
    """A self-contained header: the operators, one struct per plan and the X-macro
    ``FRAGLAB_GEN_KINDS(X)`` listing them as ``X(GUARD, name, M, N, K, T)``, GUARD being
    ``FRAGLAB_ANY_ARCH`` or ``SM80_ONLY`` (as in ``kernels/fragment_kinds.cuh``). ``plans``:
    Plans or kind names (default: every accumulator kind, from the ``arch`` recording)."""
    plans = [q if isinstance(q, Plan) else plan(q, arch=arch) for q in (plans or KINDS)]
    names = [q.name for q in plans]
    if len(set(names)) != len(names):
        raise ValueError(f"plans must have distinct names, got {names}")
    lines = ["// Generated by `python -m fraglab.layout_codegen header` "
             "(fraglab/layout_codegen/emit.py)",
             f"// from {note or f'the recorded layouts fraglab/layouts/{arch}.json'}. "
             "Do not edit: regenerate.",
             f"#ifndef {GUARD}", f"#define {GUARD}", "#include <cuda_fp16.h>", "", _preamble(),
             "namespace fraglab_gen {", ""]
    for q in plans:
        lines.append(generate(q))
    lines.append("}  // namespace fraglab_gen\n")
    # Rows as in kernels/fragment_kinds.cuh: the guard first (FRAGLAB_ANY_ARCH from that file,
    # SM80_ONLY from common.cuh), then the kind's name and shape; T is the C++ element type.
    lines.append("#define FRAGLAB_GEN_KINDS(X)" + "".join(
        f" \\\n    X({'SM80_ONLY' if q.sm80 else 'FRAGLAB_ANY_ARCH'}, {q.name}, {q.shape[0]}, "
        f"{q.shape[1]}, {q.k}, {q.ctype})" for q in plans))
    lines += ["", f"#endif  // {GUARD}", ""]
    return "\n".join(lines)


def header_is_current() -> bool:
    return HEADER_PATH.is_file() and HEADER_PATH.read_text() == header()


def harness_source(p: Plan) -> str:
    """The harness ``kernels/06_layout_codegen.cu`` compiled with code generated for ``p`` only
    (what the wrappers use for a layout given by the user)."""
    return header([p], note="a layout given at run time") + \
        (KERNELS_DIR / f"{KERNELS}.cu").read_text()
