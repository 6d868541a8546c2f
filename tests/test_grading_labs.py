"""Labs as a learner opens them: objectives and time at the top, a Colab link and a link back to
the chapter's page in the built book, both from the one course address, GPU accelerator metadata, hints collapsed, stubs
that give nothing away, exercises numbered in order, no stored output; the Colab clone pinned to
the course version."""
import json
import re

import pytest

import fraglab
from fraglab import labs, report
from fraglab.grading import build
from nbval_run import ROOT

LABS = sorted((ROOT / "labs").glob("*.ipynb"))


@pytest.mark.parametrize("lab", LABS, ids=[p.stem for p in LABS])
def test_lab_opens_as_a_learner_meets_it(lab):
    nb = json.loads(lab.read_text())
    top = "".join(nb["cells"][0]["source"])
    assert "**Objectives:**" in top and re.search(r"\*\*Estimated time:\*\* about \d+ minutes", top)
    assert top.count("**Objectives") == 1 and top.count("**Estimated time") == 1, \
        "one Objectives block and one time estimate"
    assert report.lab_url(lab.stem, "colab") in top
    assert f"[the chapter]({report.book_url(lab.stem)})" in top, \
        "no link back to the chapter's page in the built book"
    assert ".ipynb)" not in top.replace(report.lab_url(lab.stem, "colab"), ""), \
        "a link to a notebook file where the built book's page belongs"
    assert nb["metadata"].get("accelerator") == "GPU"
    assert all(not c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code")
    ex = build.exercises(json.loads((ROOT / "solutions" / lab.name).read_text()))
    numbers = [int(re.match(r"\d+", e.key).group()) for e in ex]
    assert numbers == list(range(1, len(ex) + 1)), f"exercises numbered {numbers}"
    text = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    for e in ex:
        for r in e.regions:       # more on hints: tests/test_labs_hints.py
            for n in (1, 2):
                assert f"<details><summary>Hint {n} for exercise {r}</summary>" in text, \
                    f"no collapsed hint {n} for {r}"
    for body in build.region_bodies(nb).values():
        assert "not written yet" in body, f"a stub says more than that it is not written: {body}"


def test_setup_cell_clones_the_course_version_from_the_one_address():
    url, _ = report.course_address()
    assert f'"{url}"' in labs.SETUP_CELL
    assert f'"--branch", "v{fraglab.__version__}"' in labs.SETUP_CELL
