"""The grader's front end (``python -m fraglab.grading``): each mistake in what was asked is a
short message and exit status 2, with no traceback; renamed copies grade as their lab; long
reasons are shortened with the command that prints them whole. None of these runs a notebook."""
import json
import shutil

import pytest

from fraglab import device, labs
from fraglab.grading import cli, front

LAB = labs.REPO_ROOT / "labs" / "00_hello_warp.ipynb"


def usage(capsys, *argv):
    assert cli.main([str(a) for a in argv]) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert 1 <= len(err.strip().splitlines()) <= 3, err
    return err


def test_typo_in_path_names_the_closest_lab(capsys, tmp_path):
    err = usage(capsys, tmp_path / "00_helo_warp.ipynb")
    assert "no file" in err and "00_hello_warp.ipynb" in err
    err = usage(capsys, tmp_path / "zzzz.ipynb")
    assert "00_hello_warp" in err and "10_fa3_pipelining" in err


@pytest.mark.parametrize("name", ["my_00_hello_warp.ipynb", "00_hello_warp-Copy1.ipynb",
                                  "00_hello_warp (copy).ipynb"])
def test_renamed_copy_grades_as_its_lab(tmp_path, name):
    (tmp_path / name).touch()
    sol, note = front.resolve(tmp_path / name)
    assert sol == labs.SOLUTIONS_DIR / "00_hello_warp.ipynb"
    assert note == "graded as labs/00_hello_warp.ipynb"
    assert front.resolve(LAB) == (labs.SOLUTIONS_DIR / LAB.name, "")


def test_name_of_no_lab(capsys, tmp_path):
    (tmp_path / "homework.ipynb").write_text("{}")
    assert "not a lab" in usage(capsys, tmp_path / "homework.ipynb")


def test_book_chapter_names_the_lab(capsys):
    err = usage(capsys, labs.REPO_ROOT / "book" / "00_hello_warp.ipynb")
    assert "chapter" in err and "labs/00_hello_warp.ipynb" in err


def test_half_saved_notebook(capsys, tmp_path):
    p = tmp_path / "00_hello_warp.ipynb"
    p.write_text(LAB.read_text()[:5000])
    err = usage(capsys, p)
    assert "could not read" in err and "saved completely" in err and "JSONDecodeError at line" in err


def test_lost_markers_said_once(capsys, tmp_path):
    nb = json.loads(LAB.read_text())
    for cell in nb["cells"]:
        src = "".join(cell["source"])
        if "BEGIN EXERCISE 1" in src:
            cell["source"] = "\n".join(l for l in src.splitlines() if "EXERCISE" not in l)
    p = tmp_path / "00_hello_warp.ipynb"
    p.write_text(json.dumps(nb))
    assert cli.main([str(p), "--exercise", "1", "--mode", "cpu"]) == 2
    out = capsys.readouterr().out
    assert out.count("lost the markers") == 1 and "region(s) 1:" in out, out
    assert "0 of 1 exercises pass" in out

    for cell in nb["cells"]:      # every marker gone: one message, nothing graded
        cell["source"] = "\n".join(l for l in "".join(cell["source"]).splitlines()
                                   if "EXERCISE" not in l)
    p.write_text(json.dumps(nb))
    err = usage(capsys, p)
    assert "none of the lab's exercise markers" in err and err.count("markers") == 1


def test_unknown_exercise(capsys):
    assert "no exercise 9" in usage(capsys, LAB, "--exercise", "9")


def test_gpu_mode_without_gpu(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(device, "_probe", lambda: (False, "no CUDA device"))
    p = tmp_path / "00_hello_warp.ipynb"
    shutil.copy(LAB, p)
    err = usage(capsys, p, "--mode", "gpu")
    assert "no usable GPU" in err and "--mode cpu" in err and "PTX interpreter" in err


def test_reason_kept_whole_when_short():
    assert front.reason_lines("GradeError: wrong\n\n expected 3, got 4 ", "X") == [
        "GradeError: wrong", "expected 3, got 4"]


def test_long_reason_keeps_its_start_and_says_how_to_see_more():
    first = "GradeError: " + "lane 3 holds the wrong value " * 12 + "expected 7.0"
    more = "python -m fraglab.grading labs/x.ipynb -v --exercise 2"
    lines = front.reason_lines(first + "\n" + "x " * 400, more)
    assert lines[0] == " ".join(first.split()), "the first 300 characters are never cut"
    assert lines[-1] == f"(more: {more})"
    assert sum(map(len, lines[:-1])) <= 600
    long = front.reason_lines("word " * 500, more)
    assert 300 <= len(long[0]) <= 602 and long[0].endswith("…") and long[-1].startswith("(more")


def test_two_reasons_one_per_line_under_the_exercise():
    v = cli.Verdict("exercise 2", False, "shortcut: calls the reference\nshortcut: reads ANSWER")
    lines = v.line(more="python -m fraglab.grading a.ipynb -v --exercise 2").splitlines()
    assert lines[0].endswith("FAIL  shortcut: calls the reference")
    assert lines[1].strip() == "shortcut: reads ANSWER"
    assert lines[1].startswith(" " * len("  exercise 2  FAIL  "))


def test_an_exercise_left_as_its_stub_is_not_attempted(capsys):
    """An exercise whose regions still hold the lab's stubs is "not attempted", said without
    running a notebook."""
    assert cli.main([str(LAB), "--exercise", "3", "--mode", "cpu"]) == 1
    out = capsys.readouterr().out
    assert "exercise 3  FAIL  not attempted: region(s) 3 still hold the lab's stub" in out, out


@pytest.mark.skipif(not (labs.REPO_ROOT / ".venv" / ".installed").is_file() or not shutil.which("make"),
                    reason="make grade runs in the course's .venv")
def test_make_grade_fails_without_makes_own_error_line():
    """A failing grade ends `make grade` with a non-zero status but without make's
    "make: *** [Makefile:NN: grade] Error 1", which reads like a crash."""
    import subprocess
    r = subprocess.run(["make", "-s", "grade", f"LAB={LAB}", "EX=3", "MODE=cpu"],
                       cwd=labs.REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0, r.stdout + r.stderr
    assert "not attempted" in r.stdout and "make: ***" not in r.stdout + r.stderr, r.stdout + r.stderr
