"""The grading engine (fraglab.grading): graded notebooks built from the solution with the
learner's regions put in, one per exercise; shortcut detection; PTX dependency checks. Fast tests
only: the nbval runs over every lab's fixtures are in tests/test_grading_fixtures.py."""
import json

import numpy as np
import pytest

from fraglab import labs, toolchain
from fraglab.grading import build, dataflow, shortcuts
from fraglab.grading.fixtures import FIXTURES_DIR, fixtures
from nbval_run import ROOT

SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))
LABS = [p.stem for p in SOLUTIONS]


def _read(p):
    return json.loads(p.read_text())


def test_exercises_group_regions_by_their_graded_cell():
    ex = build.exercises(_read(ROOT / "solutions" / "07_register_reuse.ipynb"))
    assert [(e.name, e.regions) for e in ex] == [
        ("exercise 1", ("1",)), ("exercise 2", ("2",)), ("exercise 3", ("3a", "3b"))]


@pytest.mark.parametrize("lab", LABS)
def test_every_region_of_every_lab_has_three_wrong_answers(lab):
    sol = _read(ROOT / "solutions" / f"{lab}.ipynb")
    regions = [r for e in build.exercises(sol) for r in e.regions]
    have = {}
    for label in fixtures(lab):
        have.setdefault(label.split("/")[0], []).append(label)
    assert sorted(have) == sorted(regions), f"fixture folders {sorted(have)} for regions {regions}"
    for r in regions:
        assert len(have[r]) >= 3, f"region {r} has {len(have[r])} wrong answers; at least 3 are needed"
    bodies = build.region_bodies(sol)
    for label, (region, text) in fixtures(lab).items():
        assert text.strip() and text != bodies[region], f"{label} is the solution itself"


def test_graded_notebook_puts_the_learner_region_in_and_keeps_the_solution_check():
    sol = _read(ROOT / "solutions" / "00_hello_warp.ipynb")
    ex = build.exercises(sol)[1]
    body = "    return v  # MINE\n"
    nb = build.graded_notebook(sol, {**build.region_bodies(sol), "2": body}, ex, lab="00_hello_warp")
    text = "\n".join(c["source"] for c in nb["cells"])
    assert "return v  # MINE" in text
    assert "(warp.lane_id() + 1) % 32" not in text            # the solution's region 2 is gone
    graded = nb["cells"][-1]
    assert "run_graded(" in graded["source"] and "nbval-ignore-output" not in graded["metadata"]["tags"]
    assert graded["outputs"][0]["text"].startswith("PASS exercise 2")
    assert all("nbval-ignore-output" in c["metadata"]["tags"] for c in nb["cells"][:-1])
    # editing the lab's check cell changes nothing: the check comes from the solution
    lab = _read(ROOT / "labs" / "00_hello_warp.ipynb")
    for c in lab["cells"]:
        if "graded" in c["metadata"].get("tags", []):
            c["source"] = "print('PASS exercise 2: trust me')\n"
    assert build.learner_bodies(lab, sol)["2"] != build.region_bodies(sol)["2"]


def _kernel_cell(nb, needle):
    return next(c["source"] for c in nb["cells"] if needle in c["source"])


def test_a_python_region_is_only_a_string_in_the_kernel():
    """The kernel's cell for a Python region defines nothing itself: it passes the learner's text,
    as a string, to sandbox.bind (which runs it in the exercise's own process)."""
    import ast
    sol = _read(ROOT / "solutions" / "00_hello_warp.ipynb")
    ex = build.exercises(sol)[0]
    body = "    import fraglab.grade as g  # MINE\n    g.fail = None\n    return v\n"
    nb = build.graded_notebook(sol, {**build.region_bodies(sol), "1": body}, ex, lab="00_hello_warp")
    cell = _kernel_cell(nb, "MINE")
    tree = ast.parse(cell)
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.Assign))]
    call = tree.body[-1].value
    assert call.func.id == "_bind"
    kw = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    assert "# MINE" in kw["code"] and kw["names"] == ["warp_sum_emulated"]
    assert kw["lab"] == "00_hello_warp" and kw["regions"] == ("1",) and "warp" in kw["context"]
    assert "shuffles" in kw["checks"]            # the check's names: stand-ins that refuse


def test_a_cuda_region_that_closes_its_string_stays_cuda():
    """A CUDA region whose text closes the Python string and runs Python is, in the kernel, the
    value of the string: the Python after the quotes is source for the compiler, never run."""
    sol = _read(ROOT / "solutions" / "00_hello_warp.ipynb")
    ex = build.exercises(sol)[2]
    body = "    v = 0;\n}\n'''\nraise SystemExit('escaped')\n_rest = r'''\n"
    nb = build.graded_notebook(sol, {**build.region_bodies(sol), "3": body}, ex, lab="00_hello_warp")
    cell = _kernel_cell(nb, "WARP_SUM_SOURCE")
    ns = {}
    exec(cell, ns)                                          # runs no Python of the learner's
    assert set(ns) == {"__builtins__", "WARP_SUM_SOURCE"}
    src = ns["WARP_SUM_SOURCE"]
    assert body in src and src.index("// BEGIN EXERCISE 3") < src.index(body) < src.index("// END EXERCISE")
    assert build.replace_bodies(src, {"3": "X\n"}).count("X\n") == 1


def test_the_other_regions_of_a_learner_cell_are_stubs_in_its_process():
    sol = _read(ROOT / "solutions" / "07_register_reuse.ipynb")
    ex = build.exercises(sol)[2]
    nb = build.graded_notebook(sol, {**build.region_bodies(sol), "3a": "    return {}  # MINE\n"}, ex,
                               lab="07_register_reuse")
    cell = _kernel_cell(nb, "MINE")
    assert "rr.build(" in cell and "my_tiles" in cell       # 3b, the solution's: same exercise


def test_a_lab_without_its_markers_is_refused():
    sol = _read(ROOT / "solutions" / "00_hello_warp.ipynb")
    lab = _read(ROOT / "labs" / "00_hello_warp.ipynb")
    for c in lab["cells"]:
        c["source"] = "".join(c["source"]).replace("# END EXERCISE", "")
    with pytest.raises(build.RegionError):
        build.learner_bodies(lab, sol)


def test_kept_lines_drop_debug_prints():
    assert build.kept_lines("debug 1\nPASS exercise 1: x\n[cpu] y\nwarning\n") == "PASS exercise 1: x\n[cpu] y\n"


def _begin_lines(sol):
    out = {}
    for c in sol["cells"]:
        if c["cell_type"] == "code":
            text = "".join(c["source"])
            for rid, b, _ in labs.regions(text):
                out[rid] = text.splitlines()[b]
    return out


@pytest.mark.parametrize("lab", LABS)
def test_solutions_and_stubs_are_not_shortcuts(lab):
    sol = _read(ROOT / "solutions" / f"{lab}.ipynb")
    begin = _begin_lines(sol)
    for nb in (sol, labs.make_lab(sol)):
        for rid, body in build.region_bodies(nb).items():
            cuda = shortcuts.is_cuda(body, begin[rid])
            assert shortcuts.problems(lab, rid, body, cuda) == [], (rid, body)


@pytest.mark.parametrize("label", [f"{p.parent.parent.name}/{p.parent.name}/{p.stem}"
                                   for p in sorted(FIXTURES_DIR.glob("*/*/shortcut_*.txt"))
                                   + sorted(FIXTURES_DIR.glob("*/*/reads_*.txt"))])
def test_shortcut_fixtures_are_found_statically(label):
    lab, region, name = label.split("/")
    text = (FIXTURES_DIR / lab / region / f"{name}.txt").read_text()
    assert shortcuts.problems(lab, region, text, cuda=False)


@pytest.mark.parametrize("text", [
    "    grade.check_close = lambda *a, **k: None\n",
    "    np.allclose = lambda *a, **k: True\n",
    "    get_ipython().input_transformers_post.append(f)\n",
    "    import builtins\n",
    "    exec('x = 1')\n",
    "    warp.shfl_xor_sync = fake\n",
])
def test_tampering_is_refused(text):
    assert shortcuts.problems("00_hello_warp", "1", text, cuda=False)


def test_a_cuda_region_may_not_include_the_course_kernels():
    assert shortcuts.problems("00_hello_warp", "3", '#include "00_hello_warp.cu"\n', cuda=True)
    assert not shortcuts.problems("00_hello_warp", "3", "// #include in a comment\nv += 1;\n", cuda=True)


def _clock_ptx(body=None):
    sol = _read(ROOT / "solutions" / "04_microbenchmark.ipynb")
    cell = next("".join(c["source"]) for c in sol["cells"] if "CLOCK_SOURCE = r" in "".join(c["source"]))
    if body is not None:
        cell = build.replace_bodies(cell, {"4": body})
    ns = {}
    exec(cell, ns)
    return toolchain.compile("lab04_clock.cu", "sm_80", source=ns["CLOCK_SOURCE"]).ptx


def test_clock_dependencies_of_the_solution_are_right():
    assert dataflow.clock_problems(_clock_ptx(), "rowmax_regs_timed") == []


@pytest.mark.parametrize("name, words", [
    ("clock_after_first_hmma_only", "1 of the 8 accumulator registers"),
    ("epilogue_not_waiting_t0", "do not wait for t0"),
    ("t1_not_waiting_result", "second clock read does not wait"),
])
def test_clock_dependency_mistakes_are_found_in_the_ptx(name, words):
    body = (FIXTURES_DIR / "04_microbenchmark" / "4" / f"{name}.txt").read_text()
    probs = dataflow.clock_problems(_clock_ptx(body), "rowmax_regs_timed")
    assert any(words in p for p in probs), probs


# ---- the wire format ------------------------------------------------------------------------

def test_wire_carries_plain_data_both_ways():
    from fraglab.grading import wire
    value = {"a": [1, 2.5, None, True, "x"], "t": (np.float32(1.5), np.arange(6, dtype=np.int16).reshape(2, 3)),
             "nan": float("nan"), 3: {1, 2}, "__k": b"\x00\x01", "u": np.add,
             "e": np.zeros((0, 4)), "c": np.array([1 + 2j])}
    back = wire.decode(json.loads(json.dumps(wire.encode(value))))
    assert back["t"][0].dtype == np.float32 and back["t"][1].dtype == np.int16
    assert np.array_equal(back["t"][1], value["t"][1]) and isinstance(back["t"], tuple)
    assert back[3] == {1, 2} and back["__k"] == b"\x00\x01" and back["u"] is np.add
    assert back["nan"] != back["nan"] and back["e"].shape == (0, 4) and back["c"][0] == 1 + 2j


@pytest.mark.parametrize("value", [
    np.array([object()], dtype=object),
    type("Always", (), {"__eq__": lambda s, o: True})(),
    lambda: 1,
    np.array(["a"]),
])
def test_wire_refuses_what_is_not_plain_data(value):
    from fraglab.grading import wire
    with pytest.raises(wire.WireError):
        wire.encode(value)


@pytest.mark.parametrize("obj, words", [
    ({"__nd__": ["object", [1], ""]}, "dtype"),
    ({"__nd__": ["float64", [2], "AAAA"]}, "do not fill"),
    ({"__pickle__": "gASV"}, "unknown tagged"),
    ({"__ref__": [0, "Build"]}, "reference"),
    ({"__figure__": {}}, "figure"),
    ({"__ufunc__": "sum"}, "ufunc"),
    ({"__ns__": {"_x": 1}}, "public names"),
    ({"a": 1, "__tuple__": []}, "unknown tagged"),
])
def test_wire_refuses_what_breaks_the_format(obj, words):
    from fraglab.grading import wire
    with pytest.raises(wire.WireError, match=words):
        wire.decode(obj)


def test_wire_refuses_nesting_and_junk_lines():
    from fraglab.grading import wire
    deep = []
    for _ in range(wire.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(wire.WireError):
        wire.encode(deep)
    for line in (b"not json\n", b"[1, 2]\n", b'{"no_op": 1}\n'):
        with pytest.raises(wire.WireError):
            wire.loads(line)


# ---- the verdict file -----------------------------------------------------------------------

def test_a_verdict_file_must_carry_this_runs_signature(tmp_path):
    from fraglab.grading import run, verdict
    good = tmp_path / "g.json"
    good.write_text(json.dumps(verdict.sign({"ok": True, "output": "PASS x\n"}, b"k1")))
    assert run._verdict(good, "k1") == {"ok": True, "output": "PASS x\n"}
    assert not run._verdict(good, "k2")["ok"]
    forged = tmp_path / "f.json"
    forged.write_text(json.dumps({"ok": True, "output": "PASS exercise 1: forged\n"}))
    v = run._verdict(forged, "k1")
    assert not v["ok"] and "not the grader's" in v["reason"]


def test_the_test_suites_seed_seeds_every_unseeded_draw_of_a_graded_kernel(monkeypatch):
    """seed_inputs (the first cell of every graded notebook): without the seed nothing changes;
    with it, every np.random.default_rng() without a seed draws from a child of it (one run
    repeats the last one's draws, another seed draws others); an explicit seed is kept."""
    from fraglab.grading import capture, verdict
    original = np.random.default_rng
    monkeypatch.setattr(np.random, "default_rng", original)
    monkeypatch.delenv(verdict.SEED_ENV, raising=False)
    capture.seed_inputs()
    assert np.random.default_rng is original

    def draws(seed):
        monkeypatch.setattr(np.random, "default_rng", original)
        monkeypatch.setenv(verdict.SEED_ENV, str(seed))
        capture.seed_inputs()
        return [np.random.default_rng().integers(1 << 30) for _ in range(3)]
    first = draws(5)
    assert first == draws(5) and first != draws(6) and len(set(first)) == 3
    assert np.random.default_rng(3).integers(1 << 30) == original(3).integers(1 << 30)
    sol = _read(ROOT / "solutions" / "00_hello_warp.ipynb")
    nb = build.graded_notebook(sol, build.region_bodies(sol), build.exercises(sol)[0])
    assert nb["cells"][0]["source"].endswith(build.SEED_LINE)
