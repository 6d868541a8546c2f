"""What the graded notebook's kernel runs in place of a cell that holds the graded exercise's
regions: the learner's text is never Python there (:mod:`.sandbox` says which process holds
what).

* A **CUDA region** (``// BEGIN EXERCISE``) sits inside a Python string of the solution's cell.
  :func:`cuda_cell` finds that string in the solution's syntax tree, puts the learner's text
  between its markers *as a value*, and writes the string back as its ``repr``: whatever the
  learner wrote (quotes that would close the string, Python after them) is CUDA source for
  the compiler, byte for byte.
* A **Python region** (``# BEGIN EXERCISE``): :func:`python_cell` writes the cell's imports
  (the solution's text) and one call of :func:`.sandbox.bind`, which runs the learner's
  version of the cell in the exercise's child and binds the names the solution's cell
  defines (:func:`defined_names`).
"""
from __future__ import annotations

import ast

from .. import labs


def _offsets(text: str) -> list[int]:
    """Character offset of the start of each line (1-based line numbers index it)."""
    out, pos = [0, 0], 0
    for line in text.splitlines(keepends=True):
        pos += len(line)
        out.append(pos)
    return out


def _char(text_lines: list[str], starts: list[int], lineno: int, col_bytes: int) -> int:
    line = text_lines[lineno - 1]
    return starts[lineno] + len(line.encode("utf-8")[:col_bytes].decode("utf-8"))


def cuda_cell(text: str, bodies: dict[str, str], where: str = "", *, lab: str = "",
              cell: int | None = None) -> str:
    """``text`` (a solution cell) with the bodies of the CUDA regions named in ``bodies`` put
    into the strings that hold them, each string rewritten as its ``repr``. With ``cell`` (the
    notebook cell's index), each body goes between the marker comments of
    :func:`.cuda_region.wrap`: the source it ends up in then compiles as a learner's region
    (:func:`.cuda_region.prepare`), and its errors name the cell and line."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    starts = _offsets(text)
    found_here = labs.regions(text, where)
    wanted = {rid: (b + 1, e + 1) for rid, b, e in found_here if rid in bodies}
    if cell is not None:
        from . import cuda_region
        bodies = {rid: cuda_region.wrap(body, lab or "lab", rid, cell,
                                        next(b for r, b, _ in found_here if r == rid) + 2)
                  for rid, body in bodies.items()}
    edits = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        inside = {rid: body for rid, body in bodies.items() if rid in wanted
                  and node.lineno <= wanted[rid][0] and wanted[rid][1] <= node.end_lineno}
        if not inside:
            continue
        value = node.value
        found = {rid for rid, _, _ in labs.regions(value, where)}
        if not set(inside) <= found:
            raise labs.LabFormatError(f"{where}: CUDA region(s) {sorted(inside)} are not whole "
                                      "inside one string")
        new = replace_bodies(value, inside)
        edits.append((_char(lines, starts, node.lineno, node.col_offset),
                      _char(lines, starts, node.end_lineno, node.end_col_offset), repr(new)))
        for rid in inside:
            wanted.pop(rid)
    if wanted:
        raise labs.LabFormatError(f"{where}: CUDA region(s) {sorted(wanted)} are not inside a "
                                  "Python string")
    for a, b, new in sorted(edits, reverse=True):
        text = text[:a] + new + text[b:]
    return text


def replace_bodies(text: str, bodies: dict[str, str]) -> str:
    """``text`` with the body of every region named in ``bodies`` replaced."""
    lines = text.splitlines(keepends=True)
    out, last = [], 0
    for rid, b, e in labs.regions(text):
        out += lines[last:b + 1]
        if rid in bodies:
            body = bodies[rid]
            out.append(body if not body or body.endswith("\n") else body + "\n")
        else:
            out += lines[b + 1:e]
        last = e
    out += lines[last:]
    return "".join(out)


def defined_names(text: str) -> tuple[list[str], list[str]]:
    """``(names, imports)`` of a cell: the names its top level binds other than by import, and
    the source of its import statements."""
    tree = ast.parse(text)
    names, imports = [], []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append(ast.get_source_segment(text, node))
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
            continue
        for sub in _walk_top(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                names.append(sub.id)
            elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.append(sub.name)
    return list(dict.fromkeys(names)), imports


def all_names(text: str) -> list[str]:
    """Every name a cell's top level binds, imports included."""
    names, imports = defined_names(text)
    for imp in imports:
        for alias in ast.parse(imp).body[0].names:
            names.append(alias.asname or alias.name.partition(".")[0])
    return list(dict.fromkeys(names))


def _walk_top(node):
    """The nodes of a statement, not descending into functions, classes, lambdas and
    comprehensions (their names are not the cell's)."""
    yield node
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield child
        elif not isinstance(child, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp,
                                    ast.GeneratorExp)):
            yield from _walk_top(child)


def python_cell(solution_text: str, learner_text: str, *, exercise: str, lab: str, regions,
                cell: int, context, session: str, checks=()) -> str:
    """The kernel's version of a cell with Python regions of the graded exercise: the
    solution's imports, then :func:`.sandbox.bind` of the learner's version of the cell."""
    names, imports = defined_names(solution_text)
    head = "".join(i + "\n" for i in imports)
    return (head + "from fraglab.grading.sandbox import bind as _bind\n"
            f"_bind(globals(), exercise={exercise!r}, lab={lab!r}, regions={tuple(regions)!r}, "
            f"cell={cell}, names={names!r}, context={list(context)!r}, session={session!r},\n"
            f"      checks={list(checks)!r},\n"
            f"      code={learner_text!r})\n")
