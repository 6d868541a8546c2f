"""The WMMA fragment kinds: the ONE table of them in Python.

A *kind* is one WMMA fragment type, ``fragment<use, m, n, k, dtype[, layout]>``, named like
``acc_16x16x16_f32``, ``a_16x16x16_f16_row`` or ``b_8x8x4_f64_col``. The same list is written once
for CUDA, as X-macros in ``kernels/fragment_kinds.cuh`` (the kernels of topics 01 and 02 build
their entry points from it); ``tests/test_fragments.py`` checks that the two lists are equal and
that crt/mma.h declares every ``num_elements`` given here.

    >>> from fraglab import fragments
    >>> k = fragments.get_kind("a_32x8x16_f16_row")
    >>> k.shape, k.num_elements, k.copies
    ((32, 16), 16, 1.0)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import device
from ..dtypes import INT_RANGES

USES = ("accumulator", "matrix_a", "matrix_b")


# --------------------------------------------------------------------------------------------
# Element types
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ElemType:
    """An element type, and what a conversion from float does to an integer value in it."""
    name: str
    exact_limit: int          # every integer 0..exact_limit is held exactly (and not all above)
    lo: int | None = None     # integer types: the range
    hi: int | None = None
    note: str = ""

    @property
    def is_int(self) -> bool:
        return self.lo is not None


def _int_type(name: str) -> ElemType:
    lo, hi = INT_RANGES[name]
    return ElemType(name, hi, lo, hi)


TYPES = {
    "f32": ElemType("f32", 2**24, note="24-bit significand"),
    "f64": ElemType("f64", 2**53, note="53-bit significand"),
    "f16": ElemType("f16", 2**11, note="11-bit significand: above 2048 only even integers"),
    "tf32": ElemType("tf32", 2**11, note="11-bit significand, like f16, with f32's range"),
    "bf16": ElemType("bf16", 2**8, note="8-bit significand: above 256 only even integers, "
                     "above 512 multiples of 4, above 1024 multiples of 8"),
    "s8": _int_type("s8"),
    "u8": _int_type("u8"),
    "s32": _int_type("s32"),
}

#: The C++ element type WMMA names for each type.
CPP_TYPES = {"f32": "float", "f64": "double", "f16": "__half", "bf16": "__nv_bfloat16",
             "tf32": "precision::tf32", "s8": "signed char", "u8": "unsigned char", "s32": "int"}

#: The NumPy dtype of each type in memory (tf32 travels as float32; NumPy has no bf16).
NUMPY_TYPES = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "tf32": np.float32,
               "s8": np.int8, "u8": np.uint8, "s32": np.int32}


# --------------------------------------------------------------------------------------------
# Kinds
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Kind:
    """One WMMA fragment type: ``fragment<use, m, n, k, dtype[, layout]>``."""
    name: str
    use: str                  # "accumulator", "matrix_a" or "matrix_b"
    m: int
    n: int
    k: int
    dtype: str                # the fragment's element type
    layout: str | None        # "row" / "col" for matrix_a/matrix_b, None for accumulators
    num_elements: int         # from the WMMA headers (crt/mma.h)
    input: str                # the WMMA input type the GPU must support (device.supports)
    #: Input types an accumulator can be multiplied through (the tracer's way "mma"), the first
    #: being the default (== ``input``); () for input fragments.
    mma_inputs: tuple[str, ...] = ()

    @property
    def shape(self) -> tuple[int, int]:
        """(rows, cols) of the tile the fragment holds: A is m x k, B is k x n, C is m x n."""
        return {"matrix_a": (self.m, self.k), "matrix_b": (self.k, self.n)}.get(
            self.use, (self.m, self.n))

    @property
    def mnk(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    @property
    def elements(self) -> int:
        return self.shape[0] * self.shape[1]

    @property
    def slots(self) -> int:
        """Values the warp holds: 32 lanes x num_elements."""
        return 32 * self.num_elements

    @property
    def copies(self) -> float:
        """slots / elements: 1 when every element is held once, 2 when twice on average."""
        return self.slots / self.elements

    @property
    def is_accumulator(self) -> bool:
        return self.use == "accumulator"

    def kernel(self, way: str = "load", inputs: str | None = None) -> str:
        """The tracer kernel (kernels/01_tracer.cu) of this kind, way "load" or "mma"."""
        if way == "load":
            return f"trace_load_{self.name}"
        inputs = inputs or self.mma_inputs[0]
        return f"trace_mma_{self.name}" + ("" if inputs == self.mma_inputs[0] else f"_{inputs}in")

    def describe(self) -> str:
        """The C++ type, e.g. ``fragment<matrix_a, 16, 16, 16, __half, row_major>``."""
        lay = f", {self.layout}_major" if self.layout else ""
        return f"fragment<{self.use}, {self.m}, {self.n}, {self.k}, {CPP_TYPES[self.dtype]}{lay}>"

    def memory_type(self) -> str:
        """The type of the tile load_matrix_sync reads (tf32 fragments read float)."""
        return "f32" if self.dtype == "tf32" else self.dtype


def kind_name(use: str, m: int, n: int, k: int, dtype: str, layout: str | None = None) -> str:
    """``acc_16x16x16_f32``, ``a_16x16x16_f16_row``, ``b_8x8x4_f64_col``..."""
    prefix = {"accumulator": "acc", "matrix_a": "a", "matrix_b": "b"}[use]
    return f"{prefix}_{m}x{n}x{k}_{dtype}" + (f"_{layout}" if layout else "")


_SHAPES16 = ((16, 16, 16), (32, 8, 16), (8, 32, 16))

# Accumulators: (m, n, k, dtype, num_elements, mma input types). 8 values a lane for every
# 256-element tile, 2 for the 8x8 f64 tile. f32 accumulators of the 16-bit shapes can also be
# traced through bf16 inputs, where the paper's row*100 + col tracer is not exact.
_ACCUMULATORS = [
    *((m, n, k, dtype, 8, mma) for m, n, k in _SHAPES16
      for dtype, mma in (("f32", ("f16", "bf16")), ("f16", ("f16",)), ("s32", ("s8",)))),
    (16, 16, 8, "f32", 8, ("tf32",)),
    (8, 8, 4, "f64", 2, ("f64",)),
]

# Inputs: dtype -> {(m, n, k): (num_elements of matrix_a, of matrix_b)}, as crt/mma.h declares
# them: f16 keeps the Volta sizes (16 a lane for every shape), the later types hold tile/32
# values a lane. Each comes row- and col-major.
_INPUTS = {
    "f16": {(16, 16, 16): (16, 16), (32, 8, 16): (16, 16), (8, 32, 16): (16, 16)},
    "bf16": {(16, 16, 16): (8, 8), (32, 8, 16): (16, 4), (8, 32, 16): (4, 16)},
    "s8": {(16, 16, 16): (8, 8), (32, 8, 16): (16, 4), (8, 32, 16): (4, 16)},
    "u8": {(16, 16, 16): (8, 8), (32, 8, 16): (16, 4), (8, 32, 16): (4, 16)},
    "tf32": {(16, 16, 8): (4, 4)},
    "f64": {(8, 8, 4): (1, 1)},
}


def _build_kinds() -> dict[str, Kind]:
    out = [Kind(kind_name("accumulator", m, n, k, dtype), "accumulator", m, n, k, dtype, None,
                ne, mma[0], mma) for m, n, k, dtype, ne, mma in _ACCUMULATORS]
    for dtype, per_shape in _INPUTS.items():
        for (m, n, k), counts in per_shape.items():
            for use, ne in zip(("matrix_a", "matrix_b"), counts):
                for lay in ("row", "col"):
                    out.append(Kind(kind_name(use, m, n, k, dtype, lay), use, m, n, k, dtype,
                                    lay, ne, dtype))
    return {k.name: k for k in out}


#: Every fragment kind, by name: ``acc_16x16x16_f32``, ``a_16x16x16_f16_row``, ``b_8x8x4_f64_col``...
KINDS: dict[str, Kind] = _build_kinds()


def get_kind(kind: str | Kind) -> Kind:
    """The :class:`Kind` named ``kind``; ``ValueError`` listing the known names otherwise."""
    if isinstance(kind, Kind):
        return kind
    if type(kind).__name__ == "Kind" and getattr(kind, "name", None) in KINDS:
        return KINDS[kind.name]          # a Kind of the same module loaded twice (python -m)
    if not isinstance(kind, str):
        raise TypeError(f"kind must be a kind name (str), got {type(kind).__name__}")
    if kind not in KINDS:
        raise ValueError(f"unknown fragment kind {kind!r}; known kinds: {', '.join(KINDS)}")
    return KINDS[kind]


def kinds(use: str | None = None) -> list[Kind]:
    """All kinds, or those of one use ("accumulator", "matrix_a", "matrix_b")."""
    if use not in (None, *USES):
        raise ValueError(f"use must be accumulator, matrix_a or matrix_b, got {use!r}")
    return [k for k in KINDS.values() if use is None or k.use == use]


def supported(kind: str | Kind, cc: tuple[int, int] | None = None) -> tuple[bool, str]:
    """Can the GPU in use (or compute capability ``cc``) run this kind? ``(ok, reason)``."""
    return device.supports(get_kind(kind).input, cc)


class UnsupportedKind(RuntimeError):
    """The GPU in use cannot run this fragment kind (the message says why)."""


def require_supported(kind: str | Kind, inputs: str | None = None) -> None:
    """Raise :class:`UnsupportedKind` (with device.supports' reason) if the GPU cannot run it,
    multiplying through ``inputs`` (default: the kind's own input type)."""
    k = get_kind(kind)
    for t in {k.input, inputs or k.input}:
        ok, why = device.supports(t)
        if not ok:
            raise UnsupportedKind(f"{k.name} cannot run on this GPU: {why}")


def num_elements_table() -> str:
    """The ``num_elements`` of every kind as a text table, with the copies it implies."""
    lines = [f"{'kind':21s} {'fragment':62s} {'tile':>5s} {'num_elements':>12s} {'copies':>6s}"]
    for k in KINDS.values():
        tile = f"{k.shape[0]}x{k.shape[1]}"
        lines.append(f"{k.name:21s} {k.describe():62s} {tile:>5s} {k.num_elements:12d} "
                     f"{k.copies:6.3g}")
    return "\n".join(lines)


#: Accumulator kind -> (input type, NumPy input dtype, NumPy accumulator dtype): the arrays a
#: kernel that computes ``A @ B + C`` into this accumulator takes (the default mma input).
STORE_TYPES = {k.name: (k.input, NUMPY_TYPES[k.input], NUMPY_TYPES[k.dtype])
               for k in KINDS.values() if k.is_accumulator}
