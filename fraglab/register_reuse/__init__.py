"""Topic 07_register_reuse: an FP32 SGEMM ladder on the H100, rung by rung.

Each rung is ``kernels/07_register_reuse_<rung>.cu`` and a small diff of the one before
(llm.c's dev/cuda style; siboehm's SGEMM_CUDA ladder):

    1. naive          one thread per element of C, lanes walk down a column
    2. coalesced      lanes walk along a row: coalesced B loads and C stores
    3. smem           32x32 tiles in shared memory                (2 shared words per FFMA)
    4. tile1d         TM=8 outputs per thread, one Bs value reused (9/8 words per FFMA)
    5. tile2d         8x8 outputs per thread, an outer product      (1/4 words per FFMA)
    6. vectorized     float4 global loads, A transposed in shared memory, LDS.128
    7. warptile       warp tiles: lanes' 4x4 chunks spread over the warp's tile
    8. double_buffer  two shared stages, global -> register -> shared prefetch
    9. autotuned      rung 8 with the tiles of an H100 sweep
   10. split_k        tiles per shape from an H100 table, K split where SMs would idle

    from fraglab import register_reuse as rr
    c = rr.sgemm(a, b, variant="tile1d")      # a, b: float32 CuPy, (M,K) and (K,N)
    rr.cublas(a, b)                           # the yardstick, TF32 off
    rr.tiles_for(1024, 1024, 1024)            # rung 10's tiles and split for that shape
    rr.PROBLEMS["tile1d"].check("square256", rng)
    rr.sass_report("tile1d")                  # LDS per FFMA of the main loop, from SASS (sm_90)
    rr.SEED                                   # the seed article's figures, with its citation

``python -m fraglab.register_reuse bench --out DIR`` runs the H100 measurements;
``python -m fraglab.register_reuse sweep-shapes --out DIR`` measures rung 10's shape table.
"""
from .kernels import (CHANGES, FINAL, RAGGED_OK, TF32_ENV, TILES, VARIANTS,  # noqa: F401
                      block_tile, build, cublas, cublas_settings, kernel_file, sgemm,
                      sgemm_launcher, shape_table, shared_bytes, split_plan, threads, tiles,
                      tiles_for)
from .problems import PROBLEMS  # noqa: F401
from ..sass import occupancy  # noqa: F401  (lab 07's service rr.occupancy)
from .sass_counts import napkin, report as sass_report  # noqa: F401
from .seed import SEED  # noqa: F401
from .report import glue_values  # noqa: F401  (the chapter's numbers; tests/test_book_record.py)
