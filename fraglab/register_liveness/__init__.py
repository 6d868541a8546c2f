"""Topic 08_register_liveness: how long Q's fragments stay live in the FA-2 kernel, and what the
register file does about it (the Intel blog on Triton FlashAttention, tested on an H100).

* :mod:`.kernels`: :func:`attention` with :data:`VARIANTS` (``qreg``: Q in registers for the
  whole key sweep, chapter 05's kernel; ``qreload``: reloaded from shared memory at each use;
  ``qglobal``: re-read from global memory at each key tile, the blog's pass taken literally;
  ``*_oneloop``: one masked causal loop instead of two); d = 64, 128, 256.
* :mod:`.problems`: :data:`PROBLEMS`, one per variant, against float64.
* :mod:`.liveness`: live registers at every instruction of a SASS listing (backward dataflow
  over the control-flow graph), the course's small tool.
* :mod:`.resources`: ptxas registers and spills, LDL/STL in SASS, H100 occupancy.
* :mod:`.bench` (``python -m fraglab.register_liveness bench --out DIR``), :mod:`.rounds` (d = 256
  beside SDPA flash and cuDNN, in rounds with and without cuDNN), :mod:`.triton_fa`
  (the seed's setting in Triton), :mod:`.report` and :mod:`.plots` (the chapter), :mod:`.lab`.

    from fraglab import register_liveness as rl
    o = rl.attention(q, k, v, causal=True, variant="qreload")
    rl.resource_report("qreg", 256)     # {"registers": 255, "spill_stores": ..., ...}
    rl.live_counts(rl.parse(sass_text))  # live registers per instruction
"""
from .kernels import (CHANGES, HEAD_DIMS, MODES, VARIANTS, attention,  # noqa: F401
                      attention_launcher, build, build_spec, key_tiles, smem_bytes)
from .liveness import Instr, live_counts, live_sets, parse, parse_sass  # noqa: F401
from .problems import PROBLEMS  # noqa: F401
from .resources import resources as resource_report  # noqa: F401
from .report import glue_values  # noqa: F401  (the chapter's numbers; tests/test_book_record.py)
