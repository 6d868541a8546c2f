"""A learner's CUDA region as the preprocessor reads it (fraglab.grading.cuda_region): the
directives, operators and brackets that could reach the course's answer are refused however they
are spelled (digraphs, backslash-newline splices, comments between), every solution's region is
accepted, the include path of a region leaves out the answer, and a compile error maps back to
the learner's cell and line. No compiles here (the fixtures' end-to-end runs are in
tests/test_grading_fixtures.py)."""
import pytest

from fraglab import labs, toolchain
from fraglab.grading import build, cuda_region, shortcuts, verdict
from nbval_run import ROOT

SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))


def cuda_regions():
    """(lab, region, cell index, body) of every CUDA region of the solutions."""
    out = []
    for path in SOLUTIONS:
        nb = build.read(path)
        for k, cell in enumerate(nb["cells"]):
            if cell["cell_type"] != "code":
                continue
            text = build.source(cell)
            lines = text.splitlines(keepends=True)
            for rid, b, e in labs.regions(text):
                if lines[b].lstrip().startswith("//"):
                    out.append((path.stem, rid, k, "".join(lines[b + 1:e])))
    return out


REGIONS = cuda_regions()

#: (what, region text) that no region may hold: each is refused.
REFUSED = [
    ("include by digraph", '}\n%:include "11_fused_lm_head_lse.cuh"\n'),
    ("define by digraph", "%:define copy_whole_lab copy_whole\n"),
    ("directive after a comment", "  /* here */ %: define A B\n"),
    ("directive split by a splice", '  #\\\ninclude "x.cuh"\n'),
    ("directive behind a string that looks like a comment", ' const char* s = "/*";\n#include "x"\n// */\n'),
    ("token pasting", "%:define GLUE(a, b) a %:%: b\n"),
    ("line", '#line 7 "11_fused_lm_head_lse.cuh"\n'),
    ("line by digraph", "%:line 1\n"),
    ("pragma operator", '_Pragma("push_macro(\\"x\\")")\n'),
    ("another pragma", "#pragma nv_diag_suppress 177\n"),
    ("closing the function", "  }\n  __device__ void f() {\n"),
    ("closing by digraph", "  %>\n  __device__ void f() <%\n"),
    ("raw string", ' auto s = R"(\n#include)";\n'),
    ("universal character name", " int \\u0041 = 2;\n"),
    ("trailing splice", "  x += 1; \\\n"),
    ("unterminated comment", "  x += 1; /* the rest of the lab\n"),
    ("the grader's markers", "// ---- fraglab grading: end of learner region a/1 ----\n"),
]


@pytest.mark.parametrize("what, text", REFUSED, ids=[w for w, _ in REFUSED])
def test_a_region_that_could_reach_outside_itself_is_refused(what, text):
    assert cuda_region.problems(text), what


@pytest.mark.parametrize("lab, region, cell, body", REGIONS,
                         ids=[f"{a}/{b}" for a, b, _, _ in REGIONS])
def test_every_solution_region_is_accepted(lab, region, cell, body):
    assert cuda_region.problems(body) == []


def test_the_scan_reads_tokens_not_text():
    """A name split by a backslash-newline, or spelled with digraphs, is found by the shortcut
    scan (its reference patterns read the token stream)."""
    split = "    copy_who\\\nle<D, ROWS>(dst, src);\n"
    assert cuda_region.text_of(split).startswith("copy_whole<D,ROWS>(dst,src);")
    assert any("copy_whole<" in p for p in shortcuts.problems("09_instruction_diet", "2", split, True))
    assert cuda_region.text_of("a <: 1 :> = b; // c\n") == "a[1]=b;"
    ok = "  x[1] = '{' + \"}\"; // }\n  /* } */ int n = 1'000;\n#pragma unroll 4\n#error \"stub\"\n"
    assert cuda_region.problems(ok) == []


def test_the_include_path_of_a_region_leaves_out_its_answer():
    for key, hidden in cuda_region.HIDDEN.items():
        folder = cuda_region.staging_dir(key)
        assert not list(folder.glob("*.cu")), "no kernel file is on a region's include path"
        assert [p.name for p in cuda_region.staging_dir(key, ("00_hello_warp.cu",)).glob("*.cu")] \
            == ["00_hello_warp.cu"], "but those the lab's own code includes"
        for header, names in hidden.items():
            if names is None:
                assert not (folder / header).exists(), (key, header)
                continue
            text = (folder / header).read_text()
            original = (toolchain.KERNELS_DIR / header).read_text()
            assert text.count("\n") == original.count("\n"), "line numbers are kept"
            for name in names:
                assert name in text and "not in a learner's include path" in text
                body = cuda_region.strip_definitions(original, (name,))
                assert body == text or len(names) > 1


def test_the_toolchain_knows_the_marker():
    assert toolchain._LEARNER_MARK == cuda_region.MARK


def test_every_cuda_exercise_compiles_its_region_between_the_markers():
    """The graded notebook of every CUDA exercise puts the learner's text between the markers,
    so its compile goes through cuda_region.prepare (a lab whose source assembly dropped the
    comments would lose the protection silently: this keeps it)."""
    seen = set()
    for lab, region, cell, body in REGIONS:
        sol = build.read(ROOT / "solutions" / f"{lab}.ipynb")
        ex = next(e for e in build.exercises(sol) if region in e.regions)
        nb = build.graded_notebook(sol, build.region_bodies(sol), ex, lab=lab)
        text = next(c["source"] for c in nb["cells"] if c["id"] == f"g{cell}")
        assert f"learner region {lab}/{region} (cell {cell}, line " in text, (lab, region)
        seen.add(lab)
    assert {"09_instruction_diet", "11_fused_lm_head"} <= seen


def test_a_compile_error_names_the_cell_and_line():
    source = ("int a;\n" + cuda_region.wrap("  x = 1\n  y = q;\n", "00_hello_warp", "3", 14, 12)
              + "}\n")
    log = ("00_hello_warp(3): error: expected a \";\"\n   x = 1\n       ^\n\n"
           "00_hello_warp(4): error: identifier \"q\" is undefined\n"
           "00_hello_warp(4): error: identifier \"q\" is undefined\n"
           "00_hello_warp(6): error: expected a declaration\n"
           "common.cuh(2): error: something\n"
           "4 errors detected in the compilation of \"00_hello_warp\".\n")
    got = cuda_region.learner_errors(log, source, "00_hello_warp")
    assert got[:2] == ['cell 14, line 12: expected a ";"', 'cell 14, line 13: identifier "q" is undefined']
    assert got[2] == ("cell 14, line 14: expected a declaration (in the lab's code after your "
                      "region: line 6 of the assembled file)")
    assert got[3].startswith("common.cuh, line 2")
    assert len(got) == 4

    try:              # as a lab's check reports it: a GradeError raised while handling it
        try:
            raise toolchain.CompileError("00_hello_warp", "sm_80", log, source=source)
        except toolchain.CompileError as e:
            raise AssertionError(f"does not compile: {e.log}")
    except AssertionError as wrapped:
        category, reason, detail = verdict.classify(wrapped)
    assert category == verdict.NOT_COMPILED and reason.splitlines()[0] == got[0]
    assert "NVRTC's log" in detail and "4 errors detected" in detail


def test_lab_05s_translation_unit_leaves_out_the_courses_softmax():
    """Lab 05's region is assembled into the kernel file's text, not included: the kernel file's
    own softmax paths (the exercise's arithmetic) are blanked there, line numbers kept."""
    from fraglab.flash_attention import lab
    step = "__device__ __forceinline__ void online_softmax_step(float (&x)[8], float (&m)[2], " \
           "float (&l)[2], float (&alpha)[2], float scale_log2) {}"
    src = lab.fa1_lab_source(step)
    for struct in ("SoftmaxPaperBaseline", "SoftmaxFairBaseline", "SoftmaxInRegister"):
        assert f"struct {struct}" not in src and f"{struct}::" not in src
    kernel_file = (toolchain.KERNELS_DIR / "05_flash_attention_fa1.cu").read_text()
    assert src.index("struct SoftmaxLab") > src.index(step)
    line = next(l for l in kernel_file.splitlines() if l.startswith("template <int D, class Softmax>"))
    assert src.splitlines().index(line) == kernel_file.splitlines().index(line), "line numbers kept"
