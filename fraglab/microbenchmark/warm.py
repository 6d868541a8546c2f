"""Sound measurements, in process: warm launches timed in both orders, and the epilogue alone in
SM cycles."""
from __future__ import annotations

import numpy as np

from .kernels import VARIANTS, check_variant, launcher, random_inputs, reference, tolerance


def fill_tiles(sm_count: int, waves: int = 1, blocks_per_sm: int = 32) -> int:
    """Tiles that fill the GPU ``waves`` times: one-warp blocks are limited to ``blocks_per_sm``
    resident blocks per SM (32 on sm_80 .. sm_90), hence SMs x 32 x waves."""
    return int(sm_count) * int(blocks_per_sm) * int(waves)


def warm_compare(n_tiles: int, dtype: str = "bf16", *, first: str = "smem", repeat: int = 3000,
                 rounds: int = 10, warmup: int = 50, flush_l2: bool = False, rng=None,
                 progress: bool = False):
    """Both kernels on the same fresh inputs, timed warm in this process with
    :func:`fraglab.bench.compare` (CUDA events, gate, warm-up, rotating rounds). ``first`` is the
    kernel warmed up and timed first in round 1. Ratios are baseline / in-register."""
    import cupy as cp
    from .. import bench
    check_variant(first)
    a, b = random_inputs(n_tiles, dtype, rng)
    ag, bg = cp.asarray(a), cp.asarray(b)
    go = {w: launcher(ag, bg, variant=w, dtype=dtype)[0] for w in VARIANTS}
    order = [first] + [w for w in VARIANTS if w != first]
    return bench.compare({w: go[w] for w in order}, baseline="smem", warmup=warmup,
                         repeat=repeat, rounds=rounds, flush_l2=flush_l2, progress=progress)


def epilogue_cycles(n_tiles: int, dtype: str = "bf16", *, launches: int = 200, warmup: int = 5,
                    rng=None) -> dict:
    """SM cycles of the epilogue, per warp, from the ``_clock`` kernels. Launches alternate
    between the two kernels; ``warmup`` launches of each are recorded apart (``first``).
    Returns ``{variant: {"cycles": [...], "first": [...]}}``."""
    import cupy as cp
    a, b = random_inputs(n_tiles, dtype, rng)
    ag, bg = cp.asarray(a), cp.asarray(b)
    ref, tol = reference(a, b, dtype), tolerance(a, b, dtype)
    runs = {w: launcher(ag, bg, variant=w, dtype=dtype, clock=True) for w in VARIANTS}
    out = {w: {"cycles": [], "first": []} for w in VARIANTS}
    for i in range(warmup + launches):
        for w in (VARIANTS if i % 2 == 0 else VARIANTS[::-1]):
            go, rows, cyc = runs[w]
            cyc.fill(-1)
            go()
            c = cyc.get()
            out[w]["first" if i < warmup else "cycles"].extend(int(v) for v in c)
    for w in VARIANTS:
        got = runs[w][1].get().astype(np.float64)
        if not (np.abs(got - ref) <= tol).all():
            raise RuntimeError(f"the {w} clock kernel computed wrong row maxima")
    return out
