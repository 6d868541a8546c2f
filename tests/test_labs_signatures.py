"""Labs show what their checks use (issue #27, item 5): the signature of every course function an
exercise calls (the services of fraglab/grading/exposed.py that its solution calls), checked
against the function itself; and the made-up listings that labs 07 and 09 grade a counter on are
printed in the lab, as the failure message says."""
import ast
import inspect
import json
import re
import textwrap

import pytest

import fraglab
from fraglab.grading import build, exposed
from nbval_run import ROOT

SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))


def _aliases(nb) -> dict:
    """``{name: module}`` of the course modules a notebook imports (``from fraglab import x as y``)."""
    out = {}
    for c in nb["cells"]:
        if c["cell_type"] != "code":
            continue
        try:
            tree = ast.parse("".join(c["source"]))
        except SyntaxError:
            continue
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("fraglab"):
                for a in n.names:
                    out[a.asname or a.name] = f"{n.module}.{a.name}"
    return out


def _called(nb, lab) -> dict:
    """``{region: {"alias.name", ...}}``: the course functions each Python region of the solution
    calls, among the services the grader gives that exercise."""
    out = {}
    for rid, body in build.region_bodies(nb).items():
        try:
            tree = ast.parse(textwrap.dedent(body))
        except SyntaxError:               # a CUDA region
            continue
        given = exposed.SERVICES.get(lab, {}).get(rid, {})
        for n in ast.walk(tree):
            f = n.func if isinstance(n, ast.Call) else None
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) \
                    and f.attr in given.get(f.value.id, ()):
                out.setdefault(rid, set()).add(f"{f.value.id}.{f.attr}")
    return out


def _resolve(alias_name: str, aliases: dict):
    import importlib
    alias, name = alias_name.split(".")
    return getattr(importlib.import_module(aliases[alias]), name)


def _params(shown: str) -> list[str]:
    """The parameter names of a shown signature ``a, b=1, *, c=None, **kw`` (``*`` dropped)."""
    out = []
    for p in (x.strip() for x in shown.split(",")):
        if p and p != "*":
            out.append(p.split("=")[0].strip())
    return out


def signature_problems(fn, shown: str) -> list[str]:
    """Where ``shown`` (the text between the parentheses) misstates ``fn``'s signature: every
    required parameter in order and nothing that does not exist; ``*args``/``**kw`` as named."""
    sig = inspect.signature(fn)
    real = {("*" if p.kind == p.VAR_POSITIONAL else "**" if p.kind == p.VAR_KEYWORD else "")
            + name: p for name, p in sig.parameters.items()}
    names = _params(shown)
    required = [k for k, p in real.items() if p.default is p.empty
                and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    problems = [f"{n} is no parameter" for n in names if n not in real]
    if [n for n in names if n in required] != required:
        problems.append(f"the required parameters are {required}, shown {names}")
    return problems


def test_signature_problems_sees_a_wrong_signature():
    def f(variant, t=None, *, arch=None, **knobs):
        pass
    assert signature_problems(f, "variant, t=None, *, arch=None, **knobs") == []
    assert signature_problems(f, "variant") == []
    assert signature_problems(f, "name, t=None")          # a renamed parameter
    assert signature_problems(f, "t=None")                # the required one left out
    assert signature_problems(f, "variant, tiles")        # one that does not exist


@pytest.mark.parametrize("solution", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_every_course_function_an_exercise_calls_has_its_signature_shown(solution):
    nb = json.loads(solution.read_text())
    lab = json.loads((ROOT / "labs" / solution.name).read_text())
    text = "\n".join("".join(c["source"]) for c in lab["cells"] if c["cell_type"] == "markdown")
    aliases = _aliases(nb)
    for rid, names in _called(nb, solution.stem).items():
        for name in sorted(names):
            shown = re.findall(rf"`{re.escape(name)}\(([^`]*)\)`", text)
            assert shown, f"exercise {rid} calls {name}, and the lab never shows its signature"
            fn = _resolve(name, aliases)
            assert any(not signature_problems(fn, s) for s in shown), \
                f"{name}: the lab shows ({shown}), the function is {inspect.signature(fn)}: " \
                + "; ".join(signature_problems(fn, shown[0]))


def test_the_labs_that_call_course_functions_are_all_checked():
    """The derivation sees what the brief named (lab 07's rr.shared_bytes and rr.threads)."""
    called = {p.stem: _called(json.loads(p.read_text()), p.stem) for p in SOLUTIONS}
    assert {"rr.shared_bytes", "rr.threads", "rr.occupancy"} <= called["07_register_reuse"]["3b"]
    assert "warp.shfl_xor_sync" in called["00_hello_warp"]["1"]


@pytest.mark.parametrize("lab, module, names", [
    ("07_register_reuse", "fraglab.register_reuse.lab", ("SYNTHETIC", "SYNTHETIC_2")),
    ("09_instruction_diet", "fraglab.instruction_diet.lab", ("SYNTHETIC", "SYNTHETIC_2"))])
def test_the_made_up_listings_a_check_uses_are_printed_in_the_lab(lab, module, names):
    import importlib
    mod = importlib.import_module(module)
    nb = json.loads((ROOT / "solutions" / f"{lab}.ipynb").read_text())
    printed = "".join("".join(o.get("text", "")) for c in nb["cells"] if c["cell_type"] == "code"
                      for o in c.get("outputs", []))
    code = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    for name in names:
        assert name in code, f"no cell of lab {lab} prints {name}"
        for line in getattr(mod, name):
            assert line in printed, f"{name}'s line {line!r} is not in the lab's stored output"
