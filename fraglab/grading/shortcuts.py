"""Static checks of a learner's exercise region: shortcuts and tampering.

An exercise is graded as not solved, with a message saying why, when its region

* calls the course's own reference for that same exercise (``warp.reduce_xor`` for the butterfly,
  ``quad_reduce`` for Algorithm 3, ``alg4_step`` for Algorithm 4, the tracer's decoder, a lookup in
  the recorded layout, the generator's plan, the course's kernels...), listed per exercise in
  :data:`REFERENCES`;
* reads the solutions (a path naming ``solutions`` or a notebook);
* patches what grading relies on (``grade``, NumPy, the warp emulator, IPython's input
  transformers, builtins, ``sys.modules``) or escapes to ``exec``/``eval``/a subprocess.

The checks read a Python region's text with its comments removed (``#``); a name in a comment is
fine, and so is one in a Python string (a stub's message), except for the solutions and files, which
are found in strings too. A CUDA region is read as the preprocessor reads it
(:func:`.cuda_region.tokens`: backslash-newline splices joined, digraphs mapped, comments left
out), so a name split across lines or a ``%:include`` is seen; its directives and brackets are
checked by :func:`.cuda_region.problems`, the same rules the compile of a graded source applies
(this scan only says it earlier).
"""
from __future__ import annotations

import re

#: (pattern, why) that no Python region may match.
PYTHON_TAMPERING = (
    (r"\bsolutions\b|\.ipynb\b", "reads the course's solutions"),
    (r"\bgrade\s*\.\s*\w+\s*=(?!=)|\bsetattr\s*\(|\bdelattr\s*\(", "patches the course's checks"),
    (r"\b(np|numpy)\s*\.\s*[\w.]+\s*=(?!=)", "patches NumPy"),
    (r"\bwarp\s*\.\s*\w+\s*=(?!=)", "patches the warp emulator"),
    (r"\bget_ipython\b|\binput_transformers\w*|\bIPython\b", "reaches into IPython"),
    (r"\b__builtins__\b|\bbuiltins\b|\bsys\s*\.\s*modules\b|\bimportlib\b|\b__import__\b",
     "reaches into the interpreter's modules"),
    (r"\bexec\s*\(|\beval\s*\(|\bcompile\s*\(|\bsubprocess\b|\bos\s*\.\s*system\b",
     "runs code that grading cannot see"),
    (r"\bfraglab\s*\.\s*grading\b|\bgrading\b|\brun_graded\b", "reaches into the grader"),
    (r"\bopen\s*\(|\bPath\s*\(|\bread_text\b", "reads files"),
)

#: One line per lab and region: ``lab/region | what it is | pattern`` - the course's reference for
#: the same exercise, which the region must not call.
_REFERENCE_TABLE = r"""
00_hello_warp/1 | the course's warp reduction | \breduce_xor\b|\ballreduce\b|\bwarp_sum\b
00_hello_warp/2 | the course's wrappers | \brotate\w*\s*\(|\bhello_warp\b
00_hello_warp/3 | the course's warp_sum kernel | \bwarp_sum_strided\b
01_tracer/1 | the course's tracer kernels | \btrace_(input|acc)_\w+|\bdump\s*\(
01_tracer/2 | the course's tracer and its decoder | \btracer\b|\bdecode\b|\bENCODINGS\b|\bTrace\b|\bfragments\b
02_forward_mapping/1 | the recorded layout or the course's formulas | \btracer\b|\blay3\b|\bk3\b|\bfragments\b|\bfm\b|\bforward_mapping\b|\belement_table\b|\blayouts?\s*\(|sm_90
02_forward_mapping/2 | the reference store or the course's formula structs | \bstore_matrix_sync\b|\bout_ref\b|\bsc\s*\[|\bEq12\b|\bBitWeights\b|\bmma_then_store\b
03_permutation_and_quad_reduction/1 | the course's permutation | \bpq\b|\bpermute_fig2\b(?!_mine)|\bpermutation_and_quad_reduction\b
03_permutation_and_quad_reduction/2 | the course's Algorithm 3 | \bpq\b|\bquad_reduce\b(?!_mine)|\breduce_xor\b|\bpermutation_and_quad_reduction\b
03_permutation_and_quad_reduction/3 | the course's reduction or a store to memory | \bpermute_fig2\b|\bquad_reduce_alg3\b|\brows_16x16\b|\breduce_lines\b|\breduce_acc\b|\bstore_matrix_sync\b
03_permutation_and_quad_reduction/4 | the course's reduction or a store to memory | \breduce_lines\b|\blines_generic\b|\breduce_acc\b|\bstore_matrix_sync\b
04_microbenchmark/1 | the course's analysis | \bmb\b|\bmicrobenchmark\b|\bfindings\b
04_microbenchmark/2 | the course's plan | \bmb\b|\bmicrobenchmark\b|\bSETUPS\b|\bFACTOR_VALUES\b
04_microbenchmark/3 | the course's warm measurement | \bmb\b|\bmicrobenchmark\b|\bwarm\w*\s*\(
04_microbenchmark/4 | the course's timed kernels | \browmax_tile\b|\bfold_bits\b|\bepilogue_smem\b
05_flash_attention/1 | the course's online softmax | \bfa\b|\bflash_attention\b|\bonline_softmax\w*|\battention_reference\b
05_flash_attention/2 | the course's Algorithm 4 | \bfa\b|\balg4_step\b|\bemulate_fa1\b|\bflash_attention\b
05_flash_attention/3 | the course's softmax step | \bSoftmaxInRegister\b|\bSoftmaxPaper\w*|\bSoftmaxFair\w*|\bSoftmax\w+\s*[{(:]|\.step\s*\(
06_layout_codegen/1 | the generator's plan | \blc\b|\blayout_codegen\b|\bplan\s*\(|\bpattern\s*\(|\bwant\b
06_layout_codegen/2 | the course's compiled reductions | \bPROBLEMS\b|\breduce\s*\(
07_register_reuse/1 | the course's SGEMM rungs | \bsgemm_\w+\s*\(|\bstage_\w+\s*<[^>]*>\s*\(\s*Bs
07_register_reuse/2 | the course's counter | \bsass_counts\b|\brr_lab\b|\brr\b|\bcounts\s*\(|\bnapkin\b|\bregister_reuse\b
07_register_reuse/3a | the course's tile choice | \brr_lab\b|\btile_choice\w*|\bTILES\b|\bautotuned\b
07_register_reuse/3b | the course's check of the tile choice | \brr_lab\b|\btile_choice\w*
08_register_liveness/1a | the course's resource report | (?<!\.)\bresources\b|\bresource_report\b|\brl_lab\b
08_register_liveness/1b | the course's resource report | (?<!\.)\bresources\b|\bresource_report\b|\brl_lab\b|\ball_rows\b
08_register_liveness/2 | the course's Q reload | \bfetch_smem\b|\bfetch_global\b|\bQSource\b|\bwith\s*\(
08_register_liveness/3 | the figure's data | \bfigure_data\b|\brl_lab\b|\bprofiles\b|\blive_counts\b|\bliveness\b
09_instruction_diet/1 | the course's SASS counts | \bactual_directions\b|\bvariant_counts\b|\bcounts\s*\(|\bclasses\b|\bdiet_lab\b
09_instruction_diet/2 | the course's copies | \bcopy_whole\s*<|\bcopy_checked\b|\bcopy_tile\b
09_instruction_diet/3 | the course's gap counter | \bldsm_gaps\b|\bregression_problems\b
"""

#: ``{lab: {region: ((pattern, what), ...)}}``, read from the table above.
REFERENCES: dict[str, dict[str, tuple[tuple[str, str], ...]]] = {}
for _line in _REFERENCE_TABLE.strip().splitlines():
    _key, _what, _pattern = (x.strip() for x in _line.split(" | ", 2))
    _lab, _region = _key.split("/")
    _old = REFERENCES.setdefault(_lab, {}).get(_region, ())
    REFERENCES[_lab][_region] = _old + ((_pattern, _what),)


def _strip_python_comments(text: str) -> str:
    return re.sub(r"#[^\n]*", "", text)


def is_cuda(body: str, begin_line: str = "") -> bool:
    return begin_line.lstrip().startswith("//")


def problems(lab: str, region: str, body: str, cuda: bool) -> list[str]:
    """Why a region's text is not accepted as the learner's own work (empty: nothing found)."""
    from . import cuda_region
    text = cuda_region.text_of(body) if cuda else _strip_python_comments(body)
    rules = [] if cuda else list(PYTHON_TAMPERING)
    refs = REFERENCES.get(lab, {}).get(region, ())
    out = [f"region {region}: {p}: write the exercise yourself, inside its function"
           for p in (cuda_region.problems(body) if cuda else ())]
    for pattern, why in rules:
        m = re.search(pattern, text)
        if m:
            out.append(f"region {region} {why} ({m.group(0).strip()!r}): write the exercise yourself")
    code = re.sub(r"\"[^\"\n]*\"|'[^'\n]*'", "''", text) if not cuda else text
    for pattern, what in refs:
        m = re.search(pattern, code)
        if m:
            out.append(f"region {region} calls {what} ({m.group(0).strip()!r}), the answer this "
                       "exercise asks you to write: a shortcut")
    return out
