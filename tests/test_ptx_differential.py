"""The interpreter against the hardware, instruction by instruction: every combination the
interpreter accepts (``fraglab.ptx.accepted``) has a generated one-instruction kernel
(``fraglab.ptx.difftest``) whose outputs on an H100 are recorded in
``tests/data/ptx_differential.npz``; here the interpreter reruns each kernel on the regenerated
inputs and must reproduce the record (bit for bit where the PTX ISA defines the result, within
the ISA's bound for the approximate instructions). A combination with neither a record nor a GPU
test in ``difftest.COVERED_BY`` fails. The GPU tier repeats the comparison live."""
from __future__ import annotations

import ast
import re
import time
from pathlib import Path

import numpy as np
import pytest

from fraglab.ptx import difftest as D

ROOT = Path(__file__).resolve().parent.parent
FAMILIES = D.families()


@pytest.fixture(scope="module")
def record():
    return D.Record(D.RECORD) if D.RECORD.is_file() else None


@pytest.mark.parametrize("family", list(FAMILIES))
def test_interpreter_reproduces_the_h100_record(family, record):
    """One interpreter run per family (each module parsed once, each kernel decoded once),
    checked against the record, and for the cheap combinations against NumPy (which catches
    generator bugs without a GPU)."""
    cases, missing = D.build_family(FAMILIES[family])
    mine = D.run_interp(cases)
    problems = _numpy_check(cases, mine) + D.replay(cases, missing, mine, record)
    assert not problems, f"{len(problems)} problems in {family}:\n" + "\n".join(problems[:25])


def test_every_accepted_combination_has_a_test_or_a_gpu_test():
    untested = []
    for c in D.combinations():
        if D.covered_by(c):
            continue
        try:
            D.build(c)
        except D.NoTest as e:
            untested.append(f"{c} ({e})")
    assert not untested, ("accepted combinations with neither a generated differential test nor a GPU "
                          "test in difftest.COVERED_BY:\n  " + "\n  ".join(untested))


def _test_text(path: str, name: str) -> str:
    """The source of test `name` in `path`, with the module-level constants and functions it
    names (and those they name: two levels), those imported from a helper module of tests/ too."""
    src = (ROOT / path).read_text()
    tree = ast.parse(src)
    defs, sources = {}, {}       # name -> its definition; definition -> the text it is in

    def add(nodes, text, names=None):
        for n in nodes:
            if isinstance(n, (ast.FunctionDef, ast.Assign)):
                for t in ([n.name] if isinstance(n, ast.FunctionDef) else
                          [t.id for t in n.targets if isinstance(t, ast.Name)]):
                    if names is None or t in names:
                        defs[t], sources[id(n)] = n, text
    for n in tree.body:
        helper = ROOT / "tests" / f"{n.module}.py" if isinstance(n, ast.ImportFrom) and n.module else None
        if helper is not None and helper.is_file():
            add(ast.parse(helper.read_text()).body, helper.read_text(), {a.name for a in n.names})
    add(tree.body, src)
    assert isinstance(defs.get(name), ast.FunctionDef), f"{path} has no test {name}"
    seen, todo = {name}, [defs[name]]
    for _ in range(3):
        nxt = []
        for node in todo:
            for n in ast.walk(node):
                if isinstance(n, ast.Name) and n.id in defs and n.id not in seen:
                    seen.add(n.id)
                    nxt.append(defs[n.id])
        todo = nxt
    parts = [ast.get_source_segment(src, d) for k in seen for d in getattr(defs[k], "decorator_list", [])]
    return "\n".join(parts + [ast.get_source_segment(sources[id(defs[k])], defs[k]) for k in seen])


@pytest.mark.parametrize("key", list(D.COVERED_BY))
def test_covered_by_names_a_gpu_test_that_mentions_the_opcode(key):
    entry = D.COVERED_BY[key]
    test, *words = (entry,) if isinstance(entry, str) else entry
    path, name = test.split("::")
    text = _test_text(path, name)
    module = (ROOT / path).read_text()
    assert "mark.gpu" in text or "pytestmark = pytest.mark.gpu" in module, f"{test} is not a GPU test"
    words = words or [key]
    assert any(w in text for w in words), f"{test} does not mention {words}"


# ---- the generator, checked without a GPU ------------------------------------------------------

def _sx(a, w):
    """Unsigned w-byte patterns -> signed Python ints."""
    a = a.astype(np.uint64).astype(object)
    return np.array([int(v) - (1 << (8 * w)) if int(v) >> (8 * w - 1) else int(v) for v in a], object)


def _numpy_expectation(case):
    """The expected outputs of the cheap combinations, computed with NumPy (None: not checked)."""
    from fraglab.ptx.difftest.gen import INTS, split
    base, mods, types = split(case.combo)
    ins = [a for _, a in case.srcs]
    t = types[-1] if types else "b32"
    w = {"8": 1, "16": 2, "32": 4, "64": 8}.get(re.sub(r"\D", "", t) or "0")
    mask = (1 << (8 * w)) - 1 if w else 0
    wrap = lambda v: np.array([int(x) & mask for x in v], object)          # noqa: E731
    if base in ("ld", "ldu", "st") and len(t) > 1 and t[0] in "bsuf" and w:
        if t[0] == "s" and w == 1:
            return [np.array([int(x) & 0xFFFF for x in _sx(a, 1)], object) for a in ins]
        return [a.astype(object) for a in ins]
    if base in ("add", "sub", "mul", "and", "or", "xor") and t in INTS and not (set(mods) - {"lo"}):
        f = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
             "and": lambda x, y: x & y, "or": lambda x, y: x | y, "xor": lambda x, y: x ^ y}[base]
        return [wrap([f(int(x), int(y)) for x, y in zip(*ins)])]
    if base == "mov" and t != "pred":
        return [ins[0].astype(object)]
    if base == "selp" and t != "pred":
        return [np.where(ins[2] != 0, ins[0], ins[1]).astype(object)]
    if t not in INTS and base not in ("ld", "ldu", "st", "mov", "selp"):
        return None
    if base == "shl" and w:
        return [wrap([int(x) << int(s) if s < 8 * w else 0 for x, s in zip(*ins)])]
    if base == "shr" and t[0] == "u":
        return [wrap([int(x) >> int(s) if s < 8 * w else 0 for x, s in zip(*ins)])]
    if base == "shr" and t[0] == "s":
        return [wrap([int(x) >> min(int(s), 8 * w - 1) for x, s in zip(_sx(ins[0], w), ins[1])])]
    if base == "popc":
        return [np.array([bin(int(x)).count("1") for x in ins[0]], object)]
    if base == "brev":
        return [np.array([int(f"{int(x):0{8 * w}b}"[::-1], 2) for x in ins[0]], object)]
    if base == "atom" and t[0] in "bu" and set(mods) & {"add", "exch", "and", "or", "xor", "max", "min"}:
        op = (set(mods) & {"add", "exch", "and", "or", "xor", "max", "min"}).pop()
        f = {"add": lambda x, y: x + y, "exch": lambda x, y: y, "and": lambda x, y: x & y,
             "or": lambda x, y: x | y, "xor": lambda x, y: x ^ y, "max": max, "min": min}[op]
        return [ins[0].astype(object), wrap([f(int(x), int(y)) for x, y in zip(ins[0], ins[1])])]
    if base == "setp" and t[0] in "us" and not (set(mods) & {"and", "or", "xor"}):
        cmp = mods[0]
        a, b = (_sx(x, w) if t[0] == "s" else x.astype(object) for x in ins[:2])
        f = {"eq": lambda x, y: x == y, "ne": lambda x, y: x != y, "lt": lambda x, y: x < y,
             "le": lambda x, y: x <= y, "gt": lambda x, y: x > y, "ge": lambda x, y: x >= y,
             "lo": lambda x, y: x < y, "ls": lambda x, y: x <= y, "hi": lambda x, y: x > y,
             "hs": lambda x, y: x >= y}[cmp]
        r = np.array([int(f(x, y)) for x, y in zip(a, b)], object)
        return [r, 1 - r]
    if base == "vote" and "ballot" in mods:
        p = ins[0].reshape(-1, 32)
        return [np.repeat([sum(int(v) << i for i, v in enumerate(g)) for g in p], 32).astype(object)]
    if base == "redux" and "add" in mods:
        return [np.repeat([sum(int(v) for v in g) & 0xFFFFFFFF for g in ins[0].reshape(-1, 32)], 32).astype(object)]
    return None


def _numpy_check(cases, got) -> list:
    """Interpreter errors the generator caused (an unsupported instruction is the record test's
    business) and the cheap combinations against NumPy."""
    wrong = []
    for c, case in cases.items():
        r = got[c]
        if isinstance(r, str):
            if not r.startswith("UnsupportedInstruction"):
                wrong.append(f"{c}: {r}")
            continue
        want = _numpy_expectation(case)
        for o, (w, g) in enumerate(zip(want or [], r)):
            bad = np.flatnonzero(np.array([int(x) for x in g], object) != w)
            if len(bad):
                j = bad[0]
                wrong.append(f"{c} output {o}: {len(bad)} elements differ from NumPy, e.g. element {j}: inputs "
                             f"{[hex(int(a[j])) for _, a in case.srcs]} got {int(g[j]):#x} want {int(w[j]):#x}")
    return wrong


# ---- GPU tier ------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("family", list(FAMILIES))
def test_interpreter_matches_the_gpu_live(family):
    cases, missing = D.build_family(FAMILIES[family])
    t0 = time.time()
    gpu, mine = D.run_gpu(cases), D.run_interp(cases)
    problems = [f"{c}: no generated test ({why})" for c, why in missing.items()]
    for c, case in cases.items():
        r = D.compare_case(case, gpu[c], mine[c])
        if r["bad"]:
            problems.append(f"{c}: {r['bad']} of {case.n} differ {r.get('error') or ''} {r['examples'][:2]}")
    assert not problems, f"({time.time() - t0:.1f} s)\n" + "\n".join(problems[:25])


def test_comparison_rules():
    """The bounds of the approximate instructions, the ISA's special values and ranges."""
    from fraglab.ptx.difftest.rules import compare, rules_for
    f = lambda *v: np.array(v, np.float32).view(np.uint32)             # noqa: E731
    ex2 = rules_for("ex2.approx.f32", ["f32"])[0]
    one = f(1.0)[0]
    gpu = np.array([one, one, 0, 0x7FFFFFFF], np.uint32)
    mine = np.array([one + 2, one + 3, 0x80000000, 0x7FC00000], np.uint32)
    bad, uns = compare(ex2, "f32", gpu, mine, [f(0.1, 0.1, -np.inf, np.nan)], "ex2.approx.f32")
    assert bad.tolist() == [False, True, True, True] and not uns.any()   # 2 ulp ok, 3 not; -inf, NaN exact
    sin = rules_for("sin.approx.f32", ["f32"])[0]
    bad, uns = compare(sin, "f32", f(0.5, 0.5, 0.5), f(0.5 + 2**-22, 0.5 + 2**-19, 0.6), [f(1.0, 1.0, 1e6)],
                       "sin.approx.f32")
    assert bad.tolist() == [False, True, False] and uns.tolist() == [False, False, True]
    div = rules_for("div.approx.f32", ["f32"])[0]
    bad, uns = compare(div, "f32", f(0.0, 0.5), f(2.0**-127, 0.5 + 2**-23), [f(1.0, 1.0), f(2.0**127, 2.0)],
                       "div.approx.f32")
    assert bad.tolist() == [True, False]                                  # |b| > 2^126: a signed zero
    idiv = rules_for("div.s32", ["s32"])[0]
    bad, uns = compare(idiv, "s32", np.array([1, 2], np.uint32), np.array([3, 4], np.uint32),
                       [np.array([5, 5], np.uint32), np.array([0, 1], np.uint32)], "div.s32")
    assert bad.tolist() == [False, True] and uns.tolist() == [True, False]
    g = rules_for("rcp.approx.ftz.f64", ["f64"])[0]
    x = np.array([0.25], np.float64).view(np.uint64)
    bad, _ = compare(g, "f64", np.array([4.0]).view(np.uint64), np.array([4.0 + 2**-40]).view(np.uint64), [x],
                     "rcp.approx.ftz.f64")
    assert bad.all()                                                     # the low word must be zero
