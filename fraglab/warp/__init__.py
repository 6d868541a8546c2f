"""A NumPy emulator of one CUDA warp, for register permutations and warp reductions.

The model
---------
A warp is 32 threads ("lanes") that run in lockstep. Each lane has its own
registers, so a warp's registers form a 2-D array::

    regs.shape == (32, n_regs)      # regs[lane, r] is register r of that lane

One column, ``regs[:, r]``, is "one register across the warp": a shape-(32,)
array with one value per lane. The shuffle functions below take such a column
(called ``var``, as in CUDA) and return the column every lane receives.

Everything follows the CUDA C++ Programming Guide, section "Warp Shuffle
Functions", and the PTX ISA description of ``shfl.sync`` (its pseudocode is
the ground truth for the corner cases; see ``shuffle._shuffle``). Where CUDA says
"undefined", this emulator raises an error instead of inventing a value, so a
program that runs cleanly here does not rely on undefined behaviour:

* ``WarpError``  -- a shuffle broke the member-mask rules (see ``shfl_sync``);
* ``LayoutError`` -- a fragment layout table is malformed.

Quick example (a butterfly max over the whole warp)::

    >>> import numpy as np
    >>> from fraglab import warp
    >>> v = np.arange(32.0)
    >>> for offset in (16, 8, 4, 2, 1):
    ...     v = np.maximum(v, warp.shfl_xor_sync(0xFFFFFFFF, v, offset))
    >>> float(v[0]), float(v[31])
    (31.0, 31.0)

Parts: :mod:`.lanes` (lane ids, masks, errors), :mod:`.shuffle` (the shuffles and the
member-mask rules), :mod:`.collectives` (``reduce_xor``, ``broadcast``), :mod:`.layouts`
(fragments from layout tables), :mod:`.diff` (``format_diff``).
"""

from .collectives import broadcast, reduce_xor
from .diff import format_diff
from .lanes import (FULL_MASK, LANES, WARP_SIZE, LayoutError, WarpError, lane_id, lanes,
                    lanes_in_mask, mask_of)
from .layouts import (accumulator_16x16_sm80, from_fragment, inverse_layout, to_fragment,
                      validate_layout)
from .shuffle import shfl_down_sync, shfl_sync, shfl_up_sync, shfl_xor_sync

__all__ = [
    "WARP_SIZE", "FULL_MASK", "LANES", "WarpError", "LayoutError",
    "lane_id", "lanes", "lanes_in_mask", "mask_of",
    "shfl_sync", "shfl_up_sync", "shfl_down_sync", "shfl_xor_sync",
    "reduce_xor", "broadcast",
    "validate_layout", "to_fragment", "from_fragment", "inverse_layout",
    "accumulator_16x16_sm80", "format_diff",
]
