"""A learner's CUDA region as the compiler sees it, and the translation unit it compiles in.

The graded notebook puts a CUDA region's text between two marker comments
(:func:`wrap`: the lab, the region, the learner's cell and line). Every compile of a source that
holds them (:func:`fraglab.toolchain.compile`) goes through :func:`prepare` first, which

* reads the region as the preprocessor does - backslash-newline splices joined, digraphs mapped
  (``%:`` is ``#``, ``<%`` is ``{``...), comments, strings and character literals skipped
  (:func:`tokens`) - and refuses it (a :class:`fraglab.toolchain.CompileError` whose log names
  the cell and line) when it holds a preprocessor
  directive other than ``#pragma unroll``, ``_Pragma``, a raw string literal or a universal
  character name in code, or a bracket that closes what the lab opened before the region (a
  region that closes its function could define, at file scope, names the lab's code uses: no
  region may redefine a name of the lab file outside itself, macros included);
* compiles it with an include path of its own (:func:`staging_dir`): the course's headers, less
  those that hold the answer of the region's exercise (:data:`HIDDEN`: a whole header, or the
  bodies of the functions the learner writes), and without the source's own folder
  (``-no-source-include``): the course's reference is not in the translation unit.

A compile error is reported in the learner's terms by :func:`learner_errors`: one line per error,
``cell N, line L: message``, the line counted in the learner's notebook cell.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..tools import KERNELS_DIR, cache_dir

MARK = "// ---- fraglab grading: learner region"
_BEGIN = MARK + " {lab}/{region} (cell {cell}, line {line}) ----"
_END = "// ---- fraglab grading: end of learner region {lab}/{region} ----"
_BEGIN_RE = re.compile(r"^// ---- fraglab grading: learner region (\S+)/(\S+) \(cell (\d+), "
                       r"line (\d+)\) ----$")
_END_RE = re.compile(r"^// ---- fraglab grading: end of learner region (\S+)/(\S+) ----$")

#: What a learner's region may not reach, per ``lab/region``: ``{header: None}`` leaves the header
#: out of the region's include path, ``{header: (function, ...)}`` keeps it with those functions
#: declared but not defined (their bodies are the exercise's answer).
HIDDEN: dict[str, dict[str, tuple[str, ...] | None]] = {
    "08_register_liveness/2": {"08_register_liveness.cuh": ("fetch_smem",)},
    "09_instruction_diet/2": {"09_instruction_diet.cuh": ("copy_whole",)},
    "11_fused_lm_head/1": {"11_fused_lm_head_lse.cuh": None},
}

#: The directives a region may hold: ``#pragma unroll`` / ``nounroll`` (and ``#error``, which
#: only stops the compile: the lab's stubs hold one).
ALLOWED_PRAGMAS = ("unroll", "nounroll")


def wrap(body: str, lab: str, region: str, cell: int, line: int) -> str:
    """``body`` between the marker comments (``line``: the cell's line of its first line)."""
    body = body if not body or body.endswith("\n") else body + "\n"
    return (_BEGIN.format(lab=lab, region=region, cell=cell, line=line) + "\n" + body
            + _END.format(lab=lab, region=region) + "\n")


@dataclass
class Span:
    """Where a learner's region lies in an assembled source (1-based lines of the marker lines)."""
    lab: str
    region: str
    cell: int
    line: int           # the cell's line of the region's first line
    begin: int          # the source's line of the begin marker
    end: int            # ... and of the end marker

    def cell_line(self, source_line: int) -> int | None:
        if self.begin < source_line < self.end:
            return self.line + source_line - self.begin - 1
        return None


def spans(source: str) -> list[Span]:
    """The learner's regions in ``source``, in order. A begin marker without its end marker
    (something swallowed it) is a span to the end of the source."""
    out, open_ = [], None
    for n, text in enumerate(source.split("\n"), 1):
        m = _BEGIN_RE.match(text.strip())
        if m and open_ is None:
            open_ = Span(m[1], m[2], int(m[3]), int(m[4]), n, 0)
            continue
        m = _END_RE.match(text.strip())
        if m and open_ is not None and (m[1], m[2]) == (open_.lab, open_.region):
            open_.end = n
            out.append(open_)
            open_ = None
    if open_ is not None:
        open_.end = source.count("\n") + 2
        out.append(open_)
    return out


# --------------------------------------------------------------------------------------------
# The region as the preprocessor reads it
# --------------------------------------------------------------------------------------------

_DIGRAPHS = (("%:%:", "##"), ("%:", "#"), ("<%", "{"), ("%>", "}"), ("<:", "["), (":>", "]"))
_PUNCT = sorted(["...", "<<=", ">>=", "->*", "::", "##", "++", "--", "<<", ">>", "<=", ">=", "==",
                 "!=", "&&", "||", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "->", ".*"],
                key=len, reverse=True)
_ID = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_NUM = re.compile(r"\.?[0-9](?:[eEpP][+-]|'[A-Za-z0-9_]|[A-Za-z0-9_.])*")
_PREFIX = re.compile(r"(u8|u|U|L)?(R)?(?=[\"'])")


@dataclass
class Token:
    kind: str           # "id", "num", "str", "punct", "bad"
    text: str
    line: int           # 1-based physical line of the region where it starts
    first: bool         # the first token of its logical line


def _splice(text: str) -> tuple[str, list[int]]:
    """``text`` with backslash-newline splices removed (a backslash, blanks, a newline: as
    compilers accept it), and the physical line (1-based) of each character left."""
    out, lines, line, i = [], [], 1, 0
    while i < len(text):
        m = re.match(r"\\[ \t]*\r?\n", text[i:i + 200])
        if m:
            i += m.end()
            line += 1
            continue
        out.append(text[i])
        lines.append(line)
        line += text[i] == "\n"
        i += 1
    return "".join(out), lines


def tokens(text: str) -> tuple[list[Token], list[str]]:
    """The preprocessing tokens of a region (splices joined, digraphs mapped, comments skipped)
    and what cannot be read (an unterminated comment, string or character literal)."""
    src, where = _splice(text)
    out: list[Token] = []
    bad: list[str] = []
    i, first = 0, True
    n = len(src)
    while i < n:
        c = src[i]
        line = where[i]
        if c == "\n":
            first = True
            i += 1
            continue
        if c in " \t\r\f\v":
            i += 1
            continue
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
            continue
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            if j < 0:
                bad.append(f"line {line}: a comment that does not end inside the region")
                break
            i = j + 2
            continue
        m = _PREFIX.match(src, i)
        if m and i + len(m.group(0)) < n and (m.group(0) or c in "\"'"):
            if m.group(2):
                out.append(Token("bad", "R\"", line, first))
                bad.append(f"line {line}: a raw string literal")
                break
            q = src[i + len(m.group(0))]
            j = i + len(m.group(0)) + 1
            while j < n and src[j] != q and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            if j >= n or src[j] != q:
                bad.append(f"line {line}: a {'string' if q == chr(34) else 'character'} literal "
                           "that does not end on its line")
                break
            out.append(Token("str", src[i:j + 1], line, first))
            first = False
            i = j + 1
            continue
        kind, m = next(((k, m) for k, rx in (("id", _ID), ("num", _NUM))
                        for m in (rx.match(src, i),) if m), (None, None))
        if m:
            out.append(Token(kind, m.group(0), line, first))
            i = m.end()
            first = False
            continue
        if c == "\\":
            out.append(Token("bad", src[i:i + 2], line, first))
            i += 2
            first = False
            continue
        for dig, real in _DIGRAPHS:
            # C++11: "<::" is "<" "::" unless followed by ":" or ">"
            if src.startswith(dig, i) and not (dig == "<:" and src.startswith("<::", i)
                                               and src[i + 3:i + 4] not in (":", ">")):
                out.append(Token("punct", real, line, first))
                i += len(dig)
                break
        else:
            p = next((p for p in _PUNCT if src.startswith(p, i)), c)
            out.append(Token("punct", p, line, first))
            i += len(p)
        first = False
    return out, bad


def text_of(body: str) -> str:
    """The region's tokens (splices joined, digraphs mapped, no comments), a blank between two
    words and none elsewhere, a newline at each logical line's start: what a scan for names
    reads."""
    out, last = [], None
    for t in tokens(body)[0]:
        if t.first and last is not None:
            out.append("\n")
        elif last is not None and last.kind in ("id", "num") and t.kind in ("id", "num"):
            out.append(" ")
        out.append(t.text)
        last = t
    return "".join(out)


def problems(body: str) -> list[str]:
    """Why grading refuses to compile a region (empty: nothing)."""
    if "fraglab grading:" in body:
        return ["it holds the grader's marker comments"]
    toks, bad = tokens(body)
    out = list(bad)
    if re.search(r"\\[ \t]*\n*\Z", body):
        out.append("its last line ends with a backslash (it would join the lab's next line)")
    for k, t in enumerate(toks):
        if t.kind == "punct" and t.text in ("#", "##") and t.first:
            name = toks[k + 1].text if k + 1 < len(toks) and toks[k + 1].line == t.line else ""
            arg = toks[k + 2].text if k + 2 < len(toks) and toks[k + 2].line == t.line else ""
            if (name == "pragma" and arg in ALLOWED_PRAGMAS) or name == "error":
                continue
            out.append(f"line {t.line}: the preprocessor directive #{name}"
                       + (" (a region may hold #pragma unroll only)" if name else ""))
        elif t.kind == "id" and t.text in ("_Pragma", "__pragma"):
            out.append(f"line {t.line}: {t.text} (a region may hold #pragma unroll only)")
        elif t.kind == "bad" and t.text.startswith("\\"):
            out.append(f"line {t.line}: a universal character name or stray backslash in code")
    depth = {"(": 0, "[": 0, "{": 0}
    close = {")": "(", "]": "[", "}": "{"}
    for t in toks:
        if t.kind != "punct":
            continue
        if t.text in depth:
            depth[t.text] += 1
        elif t.text in close:
            depth[close[t.text]] -= 1
            if depth[close[t.text]] < 0:
                out.append(f"line {t.line}: '{t.text}' closes a bracket the lab opened before "
                           "the region (write inside the function)")
                break
    return out            # a bracket left open only breaks the lab's code after it: NVRTC says so


# --------------------------------------------------------------------------------------------
# The include path of a region
# --------------------------------------------------------------------------------------------

def _past_closing(text: str, i: int, pair: str) -> int:
    """The index just past the bracket that closes the ``pair[0]`` at ``text[i]`` (or the end)."""
    depth = 0
    while i < len(text):
        depth += {pair[0]: 1, pair[1]: -1}.get(text[i], 0)
        i += 1
        if depth == 0:
            break
    return i


def strip_definitions(text: str, names: tuple[str, ...]) -> str:
    """``text`` with the body of every definition of a function named in ``names`` replaced by
    ``;`` (a declaration: a call still compiles, the program does not link)."""
    for name in names:
        pos = 0
        while True:
            m = re.compile(r"\b" + re.escape(name) + r"\s*\(").search(text, pos)
            if not m:
                break
            i = _past_closing(text, m.end() - 1, "()")
            tail = re.compile(r"\s*(const\s*)?(noexcept\s*)?\{").match(text, i)
            if not tail:
                pos = m.end()
                continue
            j = _past_closing(text, tail.end() - 1, "{}")
            text = (text[:i] + (" const" if tail.group(1) else "") + "; // (the lab's exercise: not in a "
                    "learner's include path)" + "\n" * text[i:j].count("\n") + text[j:])
            pos = i + 1
    return text


_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"/]+\.cu)"', re.M)


def _kernel_files(text: str) -> tuple[str, ...]:
    """The ``kernels/*.cu`` files a text includes (the lab's own code, outside the learner's
    region), and those they include."""
    out: list[str] = []
    todo = _INCLUDE.findall(text)
    while todo:
        name = todo.pop()
        if name not in out and (KERNELS_DIR / name).is_file():
            out.append(name)
            todo += _INCLUDE.findall((KERNELS_DIR / name).read_text())
    return tuple(sorted(out))


def staging_dir(key: str, kernel_files: tuple[str, ...] = ()) -> Path:
    """The include folder of region ``key`` (``lab/region``): every ``kernels/*.cuh`` but what
    :data:`HIDDEN` keeps from it, and the ``kernels/*.cu`` files the lab's code includes
    (``kernel_files``), under the compile cache, named by its content."""
    hidden = HIDDEN.get(key, {})
    files = {}
    for p in sorted(KERNELS_DIR.glob("*.cuh")) + [KERNELS_DIR / f for f in kernel_files]:
        if p.name in hidden and hidden[p.name] is None:
            continue
        text = p.read_text()
        files[p.name] = strip_definitions(text, hidden[p.name]) if hidden.get(p.name) else text
    h = hashlib.sha256()
    for name, text in files.items():
        h.update(name.encode() + b"\0" + text.encode() + b"\0")
    folder = cache_dir() / "regions" / f"{key.replace('/', '-')}-{h.hexdigest()[:16]}"
    if not (folder / ".complete").is_file():
        tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for name, text in files.items():
            (tmp / name).write_text(text)
        (tmp / ".complete").write_text("")
        try:
            tmp.rename(folder)
        except OSError:                 # another process staged it first
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


def prepare(source: str) -> tuple[Path, list[str]]:
    """The include folder a source that holds learner regions compiles with (``kernels/`` when it
    holds none), and why grading refuses to compile it (one line per reason, naming the cell and
    line; empty: nothing refused)."""
    found = spans(source)
    if not found:
        return KERNELS_DIR, []
    lines = source.split("\n")
    why = []
    for s in found:
        body = "\n".join(lines[s.begin:s.end - 1]) + "\n"
        found_here = []
        for p in problems(body):
            m = re.match(r"line (\d+): (.*)", p, re.S)
            at = f"cell {s.cell}, line {s.line + int(m[1]) - 1}" if m else f"cell {s.cell}"
            found_here.append((int(m[1]) if m else 1 << 30,
                               f"{at}: grading refused region {s.region}: {m[2] if m else p}"))
        why += [w for _, w in sorted(found_here)]
    if why:
        return KERNELS_DIR, why
    keys = {f"{s.lab}/{s.region}" for s in found}
    outside = "\n".join(l for n, l in enumerate(lines, 1)
                        if not any(s.begin <= n <= s.end for s in found))
    key = sorted(keys)[0] if len(keys) == 1 else _merged(keys)
    return staging_dir(key, _kernel_files(outside)), []


def _merged(keys) -> str:
    hidden: dict = {}
    for k in sorted(keys):
        for header, names in HIDDEN.get(k, {}).items():
            old = hidden.get(header, ())
            hidden[header] = None if names is None or old is None else tuple(old) + tuple(names)
    key = "+".join(sorted(keys))
    HIDDEN.setdefault(key, hidden)
    return key


# --------------------------------------------------------------------------------------------
# Compile errors in the learner's terms
# --------------------------------------------------------------------------------------------

_ERROR = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<kind>catastrophic error|error)"
                    r"(?: #\S+)?: (?P<msg>.*)$")


def learner_errors(log: str, source: str | None, name: str = "") -> list[str]:
    """One line per error of an NVRTC log: ``cell N, line L: message`` where the error lies in a
    learner's region of ``source``, or in the lab's code around it (L: the region's END line, or
    the line before its BEGIN; the message says so); an error in a header names the header.
    Repeated lines (one error seen by several instantiations) are given once."""
    found = spans(source) if source else []
    out: list[str] = []
    for text in log.splitlines():
        m = _ERROR.match(text.strip())
        if not m:
            continue
        line, msg = int(m["line"]), " ".join(m["msg"].split())
        file = m["file"]
        header = file.endswith((".cuh", ".h", ".hpp"))
        here = None if header else next(((s, s.cell_line(line)) for s in found
                                         if s.cell_line(line)), None)
        if here:
            s, ln = here
            item = f"cell {s.cell}, line {ln}: {msg}"
        elif header:
            item = f"{Path(file).name}, line {line} (a header the lab includes): {msg}"
        elif found:
            # the lab's code around the region, which a mistake in the region breaks (a bracket left
            # open, a statement cut short): named by the region's END line, or the line before it
            after = [s for s in found if s.end <= line]
            s = after[-1] if after else found[0]
            ln = s.line + (s.end - s.begin - 1) if after else s.line - 1
            item = (f"cell {s.cell}, line {ln}: {msg} (in the lab's code {'after' if after else 'before'}"
                    f" your region: line {line} of the assembled file)")
        else:
            item = f"line {line} of {file}: {msg}"
        if item not in out:
            out.append(item)
    return out
