"""The package's shape, checked from the source: no import cycle, one template per topic,
files of one job (a size guide), and the topic names shared by every folder."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "fraglab"
#: Kernel files that belong to a topic whose name is their stem up to a variant suffix.
KERNEL_TOPICS = sorted({p.stem for p in (ROOT / "book").glob("[0-9][0-9]_*.ipynb")})


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PKG.rglob("*.py")}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module ``name`` refers to: itself, or the package it names a member of."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _is_main_guard(node) -> bool:
    """``if __name__ == "__main__":`` at module level."""
    t = node.test if isinstance(node, ast.If) else None
    return (isinstance(t, ast.Compare) and isinstance(t.left, ast.Name) and t.left.id == "__name__"
            and len(t.comparators) == 1 and isinstance(t.comparators[0], ast.Constant)
            and t.comparators[0].value == "__main__")


def import_graph() -> dict[str, set[str]]:
    """Module -> fraglab modules it imports, from the AST: imports inside functions count."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for mod, path in modules.items():
        is_pkg = path.name == "__init__.py"
        package = mod if is_pkg else mod.rpartition(".")[0]
        edges = set()
        tree = ast.parse(path.read_text(), str(path))
        # a module's `if __name__ == "__main__":` block runs only as `python -m`, in module
        # __main__, never when the module is imported: its imports are no edge of this module
        main = {id(n) for top in tree.body if _is_main_guard(top)
                for stmt in top.body for n in ast.walk(stmt)}
        for node in ast.walk(tree):
            if id(node) in main:
                continue
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - (node.level - 1)]
                    stem = ".".join(base + ([node.module] if node.module else []))
                else:
                    stem = node.module or ""
                targets = [f"{stem}.{a.name}" for a in node.names]
                # `from . import kernels` names a submodule: no edge to the package itself
                if not all(t in modules for t in targets):
                    targets.append(stem)
            for t in targets:
                if t.split(".")[0] != "fraglab":
                    continue
                r = _resolve(t, modules)
                if r and r != mod:
                    edges.add(r)
        graph[mod] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str):
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            # a package's own __init__ importing its submodules is not a cycle back into them
            if state.get(n) == 1 and not m.startswith(n + "."):
                return stack[stack.index(n):] + [n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_the_cycle_finder_finds_a_planted_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_fraglab_has_no_import_cycle():
    graph = import_graph()
    assert "fraglab.toolchain" in graph and graph["fraglab.toolchain"], "the graph reads imports"
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def topic_of(module: str, topics) -> str | None:
    """The topic package (or module) ``module`` belongs to, or None for a core module."""
    return next((t for t in topics if module == t or module.startswith(t + ".")), None)


def cross_topic_imports(graph: dict[str, set[str]], topics) -> list[tuple[str, str]]:
    """Every edge ``(module, imported)`` of ``graph`` from one topic into another."""
    return sorted((m, n) for m, edges in graph.items() for n in edges
                  if topic_of(m, topics) and topic_of(n, topics)
                  and topic_of(m, topics) != topic_of(n, topics))


def test_the_cross_topic_finder_finds_a_planted_import():
    topics = {"fraglab.a", "fraglab.ab"}
    graph = {"fraglab.a.x": {"fraglab.ab.y", "fraglab.a.z", "fraglab.core"},
             "fraglab.a.z": {"fraglab.a"}, "fraglab.ab.y": {"fraglab.core"},
             "fraglab.core": set()}
    assert cross_topic_imports(graph, topics) == [("fraglab.a.x", "fraglab.ab.y")]
    del graph["fraglab.a.x"]
    assert cross_topic_imports(graph, topics) == []


def test_topics_import_only_core():
    """No topic package imports another topic package: every chapter builds on core modules only
    (what two chapters share lives in core: ``fraglab.attention``, ``fraglab.sass``,
    ``fraglab.ncu``, ``fraglab.fragments.fit``). Imports inside functions count. No module is
    exempt: the core modules that serve every topic (``fraglab.grading``, ``fraglab.labs``,
    ``fraglab.notebooks``, ``fraglab.cli``) import no topic either (next test). The one place
    where a chapter reaches another chapter's code is a benchmark timing an earlier chapter's
    kernel beside its own: it looks the kernel up at run time by name
    (``fraglab.attention.baselines.COURSE_KERNELS``), never by import, and goes on without it."""
    topics = {f"fraglab.{t[3:]}" for t in KERNEL_TOPICS}
    bad = cross_topic_imports(import_graph(), topics)
    assert not bad, "topic imports another topic: " + ", ".join(f"{m} -> {n}" for m, n in bad)


def test_core_modules_import_no_topic():
    topics = {f"fraglab.{t[3:]}" for t in KERNEL_TOPICS}
    graph = import_graph()
    core = [m for m in graph if not any(m == t or m.startswith(t + ".") for t in topics)]
    for m in core:
        bad = [n for n in graph[m]
               if any(n == t or n.startswith(t + ".") for t in topics)]
        assert not bad, f"core module {m} imports topic code {bad}"


@pytest.mark.parametrize("topic", KERNEL_TOPICS)
def test_every_topic_has_every_part(topic):
    """A topic NN_name owns kernels/NN_name*.cu, fraglab/name(.py or /), book, solution, lab and
    tests/test_NN_name*.py (see CONTRIBUTING.md, "Adding a chapter")."""
    name = topic[3:]
    assert list((ROOT / "kernels").glob(f"{topic}*.cu")), f"no kernels/{topic}*.cu"
    assert (PKG / f"{name}.py").is_file() or (PKG / name / "__init__.py").is_file(), \
        f"no fraglab/{name}.py or fraglab/{name}/"
    for folder in ("book", "solutions", "labs"):
        assert (ROOT / folder / f"{topic}.ipynb").is_file(), f"no {folder}/{topic}.ipynb"
    assert list((ROOT / "tests").glob(f"test_{topic}*.py")), f"no tests/test_{topic}*.py"


def test_every_kernel_file_belongs_to_a_topic():
    for cu in (ROOT / "kernels").glob("*.cu"):
        assert any(cu.stem == t or cu.stem.startswith(t + "_") for t in KERNEL_TOPICS), \
            f"{cu.name} belongs to no topic (no book/NN_name.ipynb for it)"


#: Files allowed past the size guide, with why.
LONG_OK: dict[str, str] = {}
MAX_LINES = 550   # "about 500 lines" (CONTRIBUTING.md): one job per file


@pytest.mark.parametrize("path", sorted(PKG.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_stay_small(path):
    rel = str(path.relative_to(ROOT))
    n = len(path.read_text().splitlines())
    assert n <= MAX_LINES or rel in LONG_OK, \
        f"{rel} has {n} lines; split it by job (CONTRIBUTING.md: one job per file)"


def test_contributing_maps_every_module():
    """CONTRIBUTING.md's module map names every module and package of fraglab."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    for p in sorted(PKG.iterdir()):
        if p.name.startswith(("_", ".")) or p.name == "layouts" or not (
                p.suffix == ".py" or (p / "__init__.py").is_file()):
            continue
        name = f"fraglab/{p.name}" + ("/" if p.is_dir() else "")
        assert f"`{name}`" in text, f"CONTRIBUTING.md's module map lacks {name}"


#: Core modules that import a module by a name in a string. fraglab.topics: the registry of
#: core's run-time lookups of topics; grading/sandbox_child.py: the learner's process, which
#: imports standard modules only (it cannot import the course).
NAME_IMPORTERS = {"fraglab.topics", "fraglab.grading.sandbox_child"}


def _imports_by_name(tree) -> list[int]:
    """Lines of ``importlib.import_module(...)`` and ``__import__(...)`` calls."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if (isinstance(f, ast.Attribute) and f.attr == "import_module") or \
                    (isinstance(f, ast.Name) and f.id in ("__import__", "import_module")):
                out.append(node.lineno)
    return out


def _top_level_names(path: Path) -> set[str]:
    """What a module defines or imports at its top level (functions, classes, assignments,
    imported names)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                names |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def test_core_reaches_topics_only_through_the_registry():
    """The import graph cannot see a module imported by a name in a string: core modules do it
    only in ``fraglab.topics``, whose tables name modules and attributes that exist (a topic
    renamed or an attribute moved fails here, not at a benchmark's run time)."""
    from fraglab import topics as reg
    topics = {f"fraglab.{t[3:]}" for t in KERNEL_TOPICS}
    modules = _modules()
    for mod, path in modules.items():
        if mod in NAME_IMPORTERS or any(mod == t or mod.startswith(t + ".") for t in topics):
            continue
        assert not _imports_by_name(ast.parse(path.read_text())), \
            f"{mod} imports a module by name: look topics up through fraglab.topics"
    for name, (module, attr, _what) in reg.COURSE_KERNELS.items():
        assert module in modules and module in topics, (name, module)
        assert attr in _top_level_names(modules[module]), f"{module} has no {attr} ({name})"
    for attr in reg.EXPORTS:
        assert any(attr in _top_level_names(modules[t]) for t in topics if t in modules), attr
