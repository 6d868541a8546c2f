"""Topic 09_instruction_diet: an instruction diet for the FA-2 kernel, read from its SASS.

    from fraglab import instruction_diet as diet
    o = diet.attention(q, k, v, causal=True, variant="two_stage")   # any of diet.VARIANTS
    diet.PROBLEMS["rows32"].check("small f16 d128 N=72", rng)
    diet.variant_counts("rows32", "f16", 128)  # instruction classes, whole kernel and main loop

``python -m fraglab.instruction_diet bench --out DIR`` runs the H100 measurements;
``python -m fraglab.instruction_diet classes`` prints the class tables (CPU).
"""
from .kernels import (CHANGES, FINAL, SEED_STEPS, VARIANTS, attention,  # noqa: F401
                      attention_launcher, block_rows, build, has_m16, kernel_file, kernel_name,
                      keys_per_tile, smem_bytes)
from .problems import PROBLEMS  # noqa: F401
from .report import glue_values  # noqa: F401  (the chapter's numbers; tests/test_book_record.py)
from .classes import counts as sass_counts, diff as sass_diff, variant_counts  # noqa: F401
