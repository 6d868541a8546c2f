"""Algorithm 2 on the GPU: the wrapper of ``kernels/02_forward_mapping.cu``, which stores an
accumulator with a formula and, for comparison, with ``store_matrix_sync``."""
from __future__ import annotations

import numpy as np

from .. import fragments, launch, warp
from ..fragments import STORE_TYPES, recording
from ..fragments.fit import fit
from ..fragments.formulas import Mapping

KERNELS = "02_forward_mapping"

#: Kinds with the paper's formula compiled in: the accumulators of the 16x16 tile (the kernels
#: fwd_store_eq12_<kind> exist for these only, kernels/02_forward_mapping.cu).
EQ12_KINDS = tuple(k.name for k in fragments.kinds("accumulator") if k.shape == (16, 16))


def forward_store(kind, a, b, c, *, mapping: Mapping | None = None, variant: str = "fitted",
                  source: str | None = None):
    """Compute ``a @ b + c`` tile by tile with WMMA, one warp a tile, and store every tile twice:
    with ``store_matrix_sync`` (``out_ref``) and with the forward formula (``out_fwd``,
    Algorithm 2). Returns ``(out_ref, out_fwd)`` as CuPy arrays, both poisoned before launch.

    ``a``: (rows, K) of the kind's input dtype; ``b``: (K, cols); ``c``: (rows, cols) of the
    accumulator dtype; rows and cols multiples of the tile. ``variant="fitted"`` passes
    ``mapping`` (default: the fit of the recorded layout for this machine's arch,
    :func:`fraglab.fragments.recording.layout`; on a GPU with no recording, pass
    ``mapping=fit(fraglab.tracer.layout(kind))``, traced live) to the kernel as bit weights;
    ``"eq12"`` uses the paper's formula compiled in (16x16 kinds only).
    """
    k = fragments.get_kind(kind)
    if not k.is_accumulator:
        raise ValueError(f"{k.name} is not an accumulator kind; forward_store stores accumulators "
                         f"({', '.join(STORE_TYPES)})")
    if variant not in ("fitted", "eq12"):
        raise ValueError(f"variant must be 'fitted' or 'eq12', got {variant!r}")
    if variant == "eq12" and k.name not in EQ12_KINDS:
        raise ValueError(f"the paper's formula describes the 16x16 tiles ({', '.join(EQ12_KINDS)}),"
                         f" not {k.name}; use variant='fitted'")
    inp, in_dt, acc_dt = STORE_TYPES[k.name]
    M, N = k.shape
    launch.check_array("a", a, dtype=in_dt, ndim=2)
    rows, K = a.shape
    if K != k.k:
        raise ValueError(f"a must have {k.k} columns (the k of {k.name}), got shape {a.shape}")
    launch.check_array("b", b, dtype=in_dt, ndim=2)
    if b.shape[0] != k.k:
        raise ValueError(f"b must have {k.k} rows (the k of {k.name}), got shape {b.shape}")
    cols = b.shape[1]
    launch.check_array("c", c, dtype=acc_dt, shape=(rows, cols))
    launch.check_multiple("rows", rows, M)
    launch.check_multiple("cols", cols, N)
    if rows == 0 or cols == 0:
        raise ValueError(f"a, b and c must not be empty (rows {rows}, cols {cols})")
    if rows // M > 65535 or cols // N > 2**31 - 1:
        raise ValueError(f"at most 65535 row tiles ({rows // M} asked)")
    coef = None
    if variant == "fitted":
        if mapping is None:
            mapping = fit(recording.layout(k), kind=k)
        check_mapping(mapping, k)
        coef = mapping.coefficients()
    fragments.require_supported(k)
    name = f"fwd_store_{'eq12_' if variant == 'eq12' else ''}{k.name}"
    fn = launch.get_kernel(KERNELS, name, source=source)
    out_ref = launch.poisoned((rows, cols), acc_dt)
    out_fwd = launch.poisoned((rows, cols), acc_dt)
    args = (a, b, c, out_ref, out_fwd, np.int32(rows), np.int32(cols))
    if coef is not None:
        args += (launch.to_device(coef.ravel()),)
    launch.launch(fn, (cols // N, rows // M), 32, args, sync=True)
    return out_ref, out_fwd


def check_mapping(mapping: Mapping, k) -> None:
    if not isinstance(mapping, Mapping):
        raise TypeError(f"mapping must be a forward_mapping.Mapping (from fit), got "
                        f"{type(mapping).__name__}")
    if mapping.num_elements != k.num_elements or tuple(mapping.shape) != k.shape:
        raise ValueError(f"mapping is for a {mapping.shape} tile with {mapping.num_elements} "
                         f"registers, but {k.name} has a {k.shape} tile and {k.num_elements}")
    # Every slot must land inside the tile (the kernel trusts the weights), each element once.
    try:
        warp.validate_layout(mapping.table(), k.shape)
    except warp.LayoutError as e:
        raise ValueError(f"mapping does not place the {k.slots} values of {k.name} on its "
                         f"tile one to one: {e}") from None
