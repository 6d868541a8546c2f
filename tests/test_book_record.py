"""Prose versus record: every number a chapter's text cites is glued by the notebook
(`{glue:text}` names), and where the topic records its results, the glued text is what the
topic's `glue_values(record)` computes from the recorded file today.

The contract (fraglab/report.py, /work/notes/book_conventions.md): a chapter glues
`report.glue_all(<topic>.glue_values(record))`; a topic that has `book/data/<chapter>/results.json`
and a `glue_values` function is recomputed here, without a GPU."""
import importlib
import json

import pytest

from fraglab import report
from nbval_run import ROOT

CHAPTERS = sorted((ROOT / "book").glob("*.ipynb"))


def topic_module(chapter):
    return importlib.import_module("fraglab." + chapter.stem.split("_", 1)[1])


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_every_cited_value_is_glued(chapter):
    cited, glued = report.glue_names_cited(chapter), report.glued_values(chapter)
    missing = sorted(cited - set(glued))
    assert not missing, f"the prose cites values the notebook never glues: {missing}"


RECORDED = [p for p in CHAPTERS if (ROOT / "book" / "data" / p.stem / "results.json").is_file()]


@pytest.mark.parametrize("chapter", RECORDED, ids=[p.stem for p in RECORDED])
def test_glued_values_are_the_records(chapter):
    topic = topic_module(chapter)
    if not hasattr(topic, "glue_values"):
        pytest.skip(f"{topic.__name__} has no glue_values(record) yet")
    record = json.loads((ROOT / "book" / "data" / chapter.stem / "results.json").read_text())
    want = topic.glue_values(record)
    got = report.glued_values(chapter)
    diff = {k: (got.get(k), v) for k, v in want.items() if got.get(k) != v}
    assert not diff, f"glued (notebook) vs recomputed (record): {diff}"


def test_glue_roundtrip():
    """report.glue_output is what report.glue displays, and glued_values reads it back."""
    import tempfile
    from pathlib import Path
    nb = {"cells": [{"cell_type": "code", "source": [], "metadata": {},
                     "outputs": [report.glue_output("x-rate", "1.64 TB/s")]},
                    {"cell_type": "markdown", "metadata": {},
                     "source": ["at {glue:text}`x-rate` and {glue}`y`"]}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "nb.ipynb"
        p.write_text(json.dumps(nb))
        assert report.glued_values(p) == {"x-rate": "1.64 TB/s"}
        assert report.glue_names_cited(p) == {"x-rate", "y"}


def test_references_quote_the_peaks_report_uses():
    """The datasheet peaks live in report.H100_SXM; the references page quotes the same."""
    text = (ROOT / "book" / "references.md").read_text()
    assert f"{report.H100_SXM['hbm_tb_s']} TB/s" in text
    assert f"{report.H100_SXM['dense_bf16_tflops']} TFLOP/s" in text
