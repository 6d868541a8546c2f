"""Chapter 6 as a reader sees it: no printed line wider than the column, long listings collapsed,
tables as HTML, the prose's numbers glued, and the quoted SASS counts are what the code computes."""
import json

import pytest

from fraglab import report
from nbval_run import ROOT

NOTEBOOK = ROOT / "book" / "06_layout_codegen.ipynb"


@pytest.fixture(scope="module")
def nb():
    return json.loads(NOTEBOOK.read_text())


def test_no_wide_printed_line(nb):
    for i, cell in enumerate(nb["cells"]):
        for o in cell.get("outputs", []):
            if o["output_type"] == "stream":
                assert not report.wide_lines("".join(o["text"])), i


def test_long_listings_are_collapsed(nb):
    for i, cell in enumerate(nb["cells"]):
        lines = sum("".join(o.get("text", "")).count("\n") for o in cell.get("outputs", [])
                    if o["output_type"] == "stream")
        if lines > 25:
            assert "hide-output" in cell["metadata"].get("tags", []), i


def test_tables_are_html(nb):
    for i, cell in enumerate(nb["cells"]):
        for o in cell.get("outputs", []):
            if o["output_type"] in ("execute_result", "display_data") and "text/plain" in o["data"]:
                plain = "".join(o["data"]["text/plain"])
                if plain.startswith("<table:"):
                    assert "fraglab-table" in "".join(o["data"]["text/html"])


def test_setup_hidden_and_chapter_frame(nb):
    setup = next(c for c in nb["cells"] if c["cell_type"] == "code")     # the first code cell
    assert "Setup: make the course" in "".join(setup["source"])
    assert "remove-input" in setup["metadata"]["tags"]
    first, last = ("".join(nb["cells"][i]["source"]) for i in (0, -1))
    assert "{admonition} Objectives" in first and "**Prerequisites:**" in first
    assert "{admonition} What you measured" in last
    assert report.lab_url("06_layout_codegen", "colab") in last
    assert report.lab_url("06_layout_codegen", "github") in last


def test_glued_values_are_cited_and_consistent(nb):
    glued = report.glued_values(NOTEBOOK)
    assert report.glue_names_cited(NOTEBOOK) <= set(glued)
    assert int(glued["ch06-sm90-generated"]) <= int(glued["ch06-sm90-chapter3"])


def test_quoted_counts_match_a_fresh_build():
    """The counts the notebook glued are those of the NVRTC it names; on the same NVRTC a fresh
    build gives them again."""
    from fraglab import layout_codegen as lc, permutation_and_quad_reduction as pq, sass, toolchain
    glued = report.glued_values(NOTEBOOK)
    here = ".".join(map(str, toolchain.nvrtc_version()))
    if glued["ch06-nvrtc"] != here:
        pytest.skip(f"the notebook was executed with NVRTC {glued['ch06-nvrtc']}, this is {here}")
    n6 = len(sass.instructions(toolchain.compile(lc.KERNELS, "sm_90").sass(
        lc.reduce_kernel("acc_16x16x16_f32", "max"))))
    n3 = len(sass.instructions(toolchain.compile(pq.KERNELS, "sm_90").sass(
        pq.reduce_acc_kernel((16, 16), "max", True, "full"))))
    assert (str(n6), str(n3)) == (glued["ch06-sm90-generated"], glued["ch06-sm90-chapter3"])
