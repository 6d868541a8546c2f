"""Plans: from a (32, n_regs, 2) layout table to the register groups and butterfly offsets that
reduce its rows and columns (the derivation is described in the package docstring)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import device, fragments, warp
from ..fragments import recording

OPS = ("max", "min", "sum")
#: Every accumulator kind of the catalogue, in the order of the committed header.
KINDS = tuple(k.name for k in fragments.kinds("accumulator"))
#: C++ element type of an accumulator of each WMMA type (tf32 accumulates in float).
CTYPES = {d: fragments.CPP_TYPES[d] for d in ("f32", "f16", "s32", "f64")}
NP_TYPES = {d: fragments.NUMPY_TYPES[d] for d in CTYPES}
#: WMMA input types that need sm_80 (the oldest target, sm_75, lacks them): kinds with them get
#: kernels that trap on older targets (SM80_ONLY).
SM80_INPUTS = tuple(sorted({k.input for k in fragments.kinds()
                            if not device.supports(k.input, (7, 5))[0]}))


class CodegenError(ValueError):
    """The layout is valid, but no straight-line shuffle butterfly reduces it (the message says
    which line and why)."""


def _axis_words(axis: str) -> tuple[int, str]:
    """(index of the coordinate, word) of ``axis``: rows -> (0, "row"), cols -> (1, "column")."""
    return (0, "row") if axis == "rows" else (1, "column")


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

    @property
    def what(self) -> str:
        """"row" or "column"."""
        return _axis_words(self.axis)[1]

    def group_of(self) -> list[int]:
        """For each register, the index of the group it belongs to."""
        return [next(g for g, regs in enumerate(self.groups) if r in regs)
                for r in range(sum(map(len, self.groups)))]

    def groups_text(self) -> str:
        """The register groups as ``{0,1,4,5} {2,3,6,7}``."""
        return " ".join("{" + ",".join(map(str, g)) + "}" for g in self.groups)

    def offsets_text(self, none: str = "(none)") -> str:
        return ", ".join(map(str, self.offsets)) or none

    def describe(self) -> str:
        return (f"{self.axis:4}: fold registers {self.groups_text()} (each group holds one "
                f"{self.what}); shuffle offsets {self.offsets_text('none')} "
                f"(lane bits {list(self.lane_bits)})")


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


def _register_groups(coord: np.ndarray, what: str) -> tuple[tuple[int, ...], ...]:
    """Step 1: the registers of a lane that hold the same line, grouped; the same in every lane."""
    def grouping(lane):
        seen: dict[int, list[int]] = {}
        for r in range(coord.shape[1]):
            seen.setdefault(int(coord[lane, r]), []).append(r)
        return tuple(tuple(g) for g in seen.values())

    groups = grouping(0)
    for lane in range(1, 32):
        if grouping(lane) != groups:
            raise CodegenError(
                f"the registers that share a {what} differ between lanes: lane 0 groups them "
                f"{list(groups)}, lane {lane} {list(grouping(lane))}; straight-line code folds the "
                "same registers in every lane, so this layout needs per-lane selects")
    return groups


def _line_span(line_of: np.ndarray, lines: int, what: str) -> tuple[int, ...]:
    """Step 2: the XOR differences between the lanes holding a line; they must be a subspace V
    (the lanes a coset ``l0 ^ V``), the same for every line."""
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
    return span_all


def _line_plan(lay: np.ndarray, axis: str, lines: int) -> LinePlan:
    c, what = _axis_words(axis)
    coord = lay[..., c]
    groups = _register_groups(coord, what)
    line_of = np.array([[coord[lane, g[0]] for g in groups] for lane in range(32)], np.int64)
    span = _line_span(line_of, lines, what)
    # A lane and its partner must hold the same lines in the same groups, or the shuffle of a
    # group would combine two different lines.
    for v in span:
        for lane in range(32):
            if not np.array_equal(line_of[lane], line_of[lane ^ v]):
                g = int(np.flatnonzero(line_of[lane] != line_of[lane ^ v])[0])
                raise CodegenError(
                    f"lane {lane} holds {what} {line_of[lane, g]} in registers {groups[g]}, but "
                    f"its butterfly partner lane {lane ^ v} holds {what} {line_of[lane ^ v, g]} "
                    f"there: shuffling registers {groups[g]} with offset {v} would mix {what}s")
    # The leader of each coset: its lowest lane (no partner below it).
    leaders = 0
    for lane in range(32):
        if all(lane <= (lane ^ v) for v in span):
            leaders |= 1 << lane
    return LinePlan(axis, lines, groups, _basis(list(span)), span, line_of, leaders)


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


def accumulator_kind(kind) -> fragments.Kind:
    """The catalogue's kind ``kind``, which must be an accumulator (``ValueError`` otherwise)."""
    kd = fragments.get_kind(kind)
    if not kd.is_accumulator:
        raise ValueError(f"{kd.name} is a {kd.use} fragment; the generator reduces accumulators "
                         f"(kinds: {', '.join(KINDS)})")
    return kd


def _where(source_line: str) -> str:
    """"[gpu] layouts traced live on X" -> "traced live on X" (what the generated code cites)."""
    where = source_line.split("] ", 1)[-1]
    return where.removeprefix("layouts from ").removeprefix("layouts ")


def plan(kind, layout=None, *, arch: str | None = None, source: str | None = None) -> Plan:
    """The plan of an accumulator ``kind`` for the table ``layout``, or without one, for the
    recording of ``arch`` (``None``: this GPU's arch, sm_90 without a GPU;
    :func:`fraglab.fragments.recording.layout`). ``source`` says where a given table comes from,
    e.g. ``lc.plan(kind, tracer.layout(kind), source=tracer.source_line())`` for the layout
    traced live on this GPU (a ``[gpu]``/``[cpu]`` line is cut to its text)."""
    kd = accumulator_kind(kind)
    if layout is None:
        layout = recording.layout(kd, arch)
        source = source or recording.source_line(arch)
    return plan_from_layout(layout, kd.shape, name=kd.name, ctype=CTYPES[kd.dtype], k=kd.k,
                            sm80=kd.input in SM80_INPUTS,
                            source=_where(source) if source else "a table given by the user")
