"""``python -m fraglab.chapter``: a new chapter from one command (its files are what
CONTRIBUTING.md's recipe lists, and the chapter it writes passes the tests it affects, shown in a
copy of the repository), a chapter's GPU run (its steps, as ``--dry-run`` prints them; refused
without a GPU), the topics ``.ci/gpu bench`` runs, and how a draft chapter ends."""
import fnmatch
import os
import re
import shutil
import subprocess
import sys

import pytest

from fraglab import chapter, device, notebooks
from nbval_run import ROOT


def _cli(*args, cwd=ROOT, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "fraglab.chapter", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _recipe_paths() -> list[str]:
    """The first column of the table in CONTRIBUTING.md's "Adding a chapter"."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    section = text[text.index("## Adding a chapter"):]
    section = section[:section.index("\n## ")]
    return re.findall(r"^\| `([^`]+)` \|", section, re.M)


def test_the_recipe_lists_what_the_command_writes():
    listed = _recipe_paths()
    written = [p for p, _ in chapter.files("NN", "name")]
    assert listed and len(set(written)) == len(written)
    for pattern in listed:
        assert fnmatch.filter(written, pattern), f"the recipe lists {pattern}; the command writes no such file"
    for path in written:
        found = [pattern for pattern in listed if fnmatch.fnmatch(path, pattern)]
        assert len(found) == 1, f"{path}: the recipe lists it {len(found)} times ({found})"


def test_list_prints_the_files_and_writes_nothing():
    r = _cli("new", "98", "probe_topic", "--list")
    assert r.returncode == 0, r.stderr
    paths = [line.split("  (")[0] for line in r.stdout.splitlines()]
    assert paths == [p for p, _ in chapter.files("98", "probe_topic")]
    assert not [p for p in paths if p not in chapter.EDITED and (ROOT / p).exists()]


@pytest.mark.parametrize("nn, name, words", [
    ("1", "fresh_name", "two digits"),
    ("00", "fresh_name", "has this number or name"),
    ("98", "hello_warp", "has this number or name"),
    ("98", "Bad-Name", "module name"),
    ("98", "trailing_", "module name"),
    ("98", "warp", "exists already"),
    ("98", "lab", "something else"),
    ("98", "class", "something else"),
])
def test_a_number_or_name_that_cannot_be_is_refused(nn, name, words):
    with pytest.raises(chapter.ChapterError, match=words):
        chapter.check_new(nn, name)


def test_a_title_that_would_break_a_table_is_refused():
    with pytest.raises(chapter.ChapterError, match="title"):
        chapter.new("98", "probe_topic", "a | b", execute=False)


def test_a_notebook_template_reads_as_cells():
    nb = chapter.notebook('%% metadata {"a": 1}\n%% markdown\n# Title\n\ntext\n\n'
                          '%% code {"tags": ["graded"]}\nx = 1\ny = 2\n')
    assert nb["metadata"] == {"a": 1} and nb["nbformat"] == 4
    md, code = nb["cells"]
    assert md == {"cell_type": "markdown", "metadata": {}, "source": ["# Title\n", "\n", "text"]}
    assert code["metadata"] == {"tags": ["graded"]} and code["source"] == ["x = 1\n", "y = 2"]
    assert code["outputs"] == [] and code["execution_count"] is None
    with pytest.raises(chapter.ChapterError, match="nothing fills in"):
        chapter.render("@@NN@@ @@NOPE@@", {"NN": "11"})


def test_the_topic_joins_the_toc_and_the_tables_in_its_place():
    toc = chapter.add_to_toc((ROOT / "_toc.yml").read_text(), "07_zz_probe", "Zz: a probe")
    order = re.findall(r"file: book/(\S+)", toc)
    assert order.index("07_zz_probe") == order.index("07_register_reuse") + 1
    assert '- caption: "Zz: a probe"' in toc
    last = chapter.add_to_toc((ROOT / "_toc.yml").read_text(), "99_zz_probe", "Zz")
    order = re.findall(r"file: book/(\S+)", last)
    assert order[order.index("99_zz_probe") + 1].startswith("appendix")
    text = chapter.add_to_contributing((ROOT / "CONTRIBUTING.md").read_text(), "07", "zz_probe")
    rows = re.findall(r"^\| `fraglab/(\w+)/` \| (\d\d)", text, re.M)
    assert rows.index(("zz_probe", "07")) == rows.index(("register_reuse", "07")) + 1
    road = chapter.add_to_roadmap((ROOT / "book" / "intro.md").read_text(), "07_zz_probe", "Zz")
    rows = re.findall(r"^\| `(\d\d_\w+)`", road, re.M)
    assert rows.index("07_zz_probe") == rows.index("07_register_reuse") + 1


def test_bench_dry_run_prints_its_three_steps():
    topic = chapter.topics(bench=True)[-1]
    nn, name = topic[:2], topic[3:]
    r = _cli("bench", nn, "--dry-run", "--out", "OUT")
    assert r.returncode == 0, r.stderr
    assert [line for line in r.stdout.splitlines() if not line.startswith("#")] == [
        f"python -m fraglab.{name} bench --out OUT/bench_{name}",
        f"cp OUT/bench_{name}/results.json OUT/bench_{name}/log.txt book/data/{topic}/",
        f"python -m fraglab.notebooks book/{topic}.ipynb"]
    quick = _cli("bench", nn, "--dry-run", "--quick").stdout
    assert f"bench --out {chapter.BENCH_OUT}/bench_{name} --quick" in quick
    assert "book/data" not in quick and "not recorded" in quick


@pytest.mark.skipif(device.gpu_available(), reason="checks the GPU-less refusal")
def test_bench_without_a_gpu_runs_nothing_and_says_so(tmp_path):
    r = _cli("bench", chapter.topics(bench=True)[-1][:2], "--out", str(tmp_path / "out"))
    assert r.returncode == 2 and "no GPU" in r.stderr and "--dry-run" in r.stderr
    assert not (tmp_path / "out").exists() and not r.stdout


def test_bench_on_a_gpu_runs_records_and_executes_in_order(tmp_path, monkeypatch):
    """With a GPU (faked: the commands are recorded, the bench writes its files): the bench into
    the folder, its record copied into book/data/, the chapter executed; a failing bench stops
    the steps with its exit status."""
    topic = chapter.topics(bench=True)[-1]
    ran, copied = [], []

    def fake_run(argv, cwd=None, **_):
        ran.append(argv[1:])
        if "bench" in argv:
            out = argv[argv.index("--out") + 1]
            os.makedirs(out)
            for f in ("results.json", "log.txt"):
                open(os.path.join(out, f), "w").close()
        return subprocess.CompletedProcess(argv, 0)
    monkeypatch.setattr(device, "gpu_available", lambda: True)
    monkeypatch.setattr(chapter.subprocess, "run", fake_run)
    monkeypatch.setattr(chapter.shutil, "copy2", lambda src, dest: copied.append((src, dest)))
    assert chapter.bench(topic[:2], str(tmp_path), log=lambda *_: None) == 0
    run_dir = tmp_path / f"bench_{topic[3:]}"
    assert ran == [["-m", f"fraglab.{topic[3:]}", "bench", "--out", str(run_dir)],
                   ["-m", "fraglab.notebooks", f"book/{topic}.ipynb"]]
    assert copied == [(run_dir / f, ROOT / "book" / "data" / topic) for f in ("results.json", "log.txt")]
    monkeypatch.setattr(chapter.subprocess, "run", lambda argv, **_: subprocess.CompletedProcess(argv, 3))
    assert chapter.bench(topic[:2], str(tmp_path / "again"), log=lambda *_: None) == 3


def test_bench_needs_a_chapter_with_a_bench():
    without = next(t for t in chapter.topics() if t not in chapter.topics(bench=True))
    with pytest.raises(chapter.ChapterError, match="no bench module"):
        chapter.bench_steps(without[:2])
    with pytest.raises(chapter.ChapterError, match="no chapter 97"):
        chapter.bench_steps("97")


def test_the_topics_are_the_books_and_ci_gpu_benches_those_with_a_bench():
    book = sorted(p.stem for p in (ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
    assert _cli("list").stdout.split() == book
    assert _cli("list", "--bench").stdout.split() == [
        t for t in book if (ROOT / "fraglab" / t[3:] / "bench.py").is_file()]
    assert "python3 -m fraglab.chapter list --bench" in (ROOT / ".ci" / "gpu").read_text()


def test_executing_on_a_gpu_ends_a_draft():
    out = {"output_type": "stream", "name": "stdout", "text": ["[cpu] no GPU\n"]}
    nb = {"metadata": {"fraglab": {"draft": "why"}, "kernelspec": {}},
          "cells": [{"cell_type": "markdown", "source": "# T"},
                    {"cell_type": "code", "source": "setup", "outputs": [out]}]}
    assert not notebooks.end_draft(nb) and nb["metadata"]["fraglab"] == {"draft": "why"}
    out["text"] = ["[gpu] kernels run on NVIDIA H100 (sm_90)\n"]
    assert notebooks.end_draft(nb) and nb["metadata"] == {"kernelspec": {}}
    assert not notebooks.end_draft(nb)


#: The tests a new chapter touches, run in the copy: every one of some files, the new topic's
#: parametrizations of others (and the notebooks' whole-set checks). Not its lab-check test
#: (11 s of compiles, in a copy whose compile cache is cold): the solution's graded cell, which
#: `new` executes, runs the same check.
AFFECTED = ["tests/test_structure.py", "tests/test_99_probe_scan.py", "tests/test_labs.py",
            "tests/test_labs_hints.py", "tests/test_grading_labs.py", "tests/test_labs_colab.py",
            "tests/test_grading.py", "tests/test_book.py", "tests/test_book_record.py",
            "tests/test_ci_sanitize.py", "tests/test_interpreter.py", "tests/test_ptx_coverage.py",
            "tests/test_chapter.py", "tests/test_runs_where.py", "tests/test_labs_signatures.py"]
SELECT = ("(probe_scan or structure or up_to_date or toc or draft or one_place or topic_is_named "
          "or finds_every_topic or every_topic_with_kernels or recipe) and not lab_check")


@pytest.mark.slow
def test_a_new_chapter_passes_the_tests_it_affects(tmp_path):
    """``new 99 probe_scan`` in a copy of this working tree: every file of the list is there,
    the solution stores its PASS line, and the tests the new topic takes part in pass there."""
    copy = tmp_path / "repo"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(
        ".git", ".venv", "_build", "_gpu_out", "__pycache__", ".grading-*", "*.egg-info", ".whl",
        ".device_out", ".pytest_cache", ".fraglab_cache", "tmp*"))
    env = dict(os.environ, PYTHONPATH=str(copy))
    r = _cli("new", "99", "probe_scan", "--title", "A probe: scan", cwd=copy, env=env, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for path, _ in chapter.files("99", "probe_scan"):
        assert (copy / path).is_file(), f"{path} was not written"
    assert "PASS exercise 1" in (copy / "solutions" / "99_probe_scan.ipynb").read_text()
    t = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-m",
                        "not nbval and not slow", "-k", SELECT, *AFFECTED], cwd=copy, env=env,
                       capture_output=True, text=True, timeout=600)
    assert t.returncode == 0, t.stdout[-4000:] + t.stderr[-2000:]
    ran = [line for line in t.stdout.splitlines() if "probe_scan" in line and "PASSED" in line]
    assert len(ran) >= 40, "\n".join(ran)


def test_boxes_check_says_every_box_is_up_to_date():
    """``boxes --check`` (the facts: tests/test_runs_where.py) writes nothing and passes here."""
    r = _cli("boxes", "--check")
    assert r.returncode == 0 and "every box is up to date" in r.stdout, r.stdout + r.stderr
