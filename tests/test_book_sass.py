"""SASS figures a learner can reproduce: chapter 03 glues what
`permutation_and_quad_reduction.report.glue_values(sass_record())` computed with the NVRTC of the
machine that executed it (named on the page). This test rebuilds the kernels with the NVRTC
installed here (`make test`'s) and compares: the compiler-independent values always, every value
when the book's NVRTC is this one."""
import json

import pytest

from fraglab import report
from fraglab.permutation_and_quad_reduction import report as pq_report
from fraglab.tools import nvrtc_version
from nbval_run import ROOT

CHAPTER = ROOT / "book" / "03_permutation_and_quad_reduction.ipynb"


@pytest.fixture(scope="module")
def fresh():
    return pq_report.glue_values(pq_report.sass_record())


def test_book_names_its_compiler():
    glued = report.glued_values(CHAPTER)
    assert glued.get("ch03-nvrtc"), "chapter 03 does not glue the NVRTC version of its listings"
    assert "ch03-nvrtc" in report.glue_names_cited(CHAPTER), "the prose does not name the compiler"


def test_book_glues_what_the_report_computes(fresh):
    glued = report.glued_values(CHAPTER)
    assert set(fresh) <= set(glued), f"not glued: {sorted(set(fresh) - set(glued))}"


def test_compiler_independent_values_match_a_fresh_build(fresh):
    glued = report.glued_values(CHAPTER)
    diff = {k: (glued.get(k), fresh[k]) for k in pq_report.STABLE if glued.get(k) != fresh[k]}
    assert not diff, f"book vs NVRTC {'.'.join(map(str, nvrtc_version()))} here: {diff}"


def test_every_value_matches_when_the_compiler_is_the_same(fresh):
    glued = report.glued_values(CHAPTER)
    here = "{}.{}".format(*nvrtc_version())
    if glued.get("ch03-nvrtc") != here:
        pytest.skip(f"the book's listings come from NVRTC {glued.get('ch03-nvrtc')}, this machine has {here}")
    diff = {k: (glued.get(k), v) for k, v in fresh.items() if glued.get(k) != v}
    assert not diff, diff


def test_the_record_is_json():
    rec = pq_report.sass_record(["sm_90"])
    assert json.loads(json.dumps(rec)) == rec
    assert rec["arches"]["sm_90"]["swap_identical"]
