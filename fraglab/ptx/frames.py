"""Where an instruction comes from in the CUDA source: its frames (the line, and each call site
it is inlined at, from :mod:`.loc`), the learner's line among them, CUDA's own headers told
apart, paths shortened, and C++ function names read from their mangled symbols (the Itanium
ABI, as NVRTC writes them). :mod:`.errors` puts :func:`source_of` in every message;
:mod:`.inspect` finds instructions by source line."""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

_REPO = str(Path(__file__).resolve().parents[2]) + "/"


def short_path(path: str) -> str:
    """'/work/main/kernels/00_hello_warp.cu' -> 'kernels/00_hello_warp.cu' (paths inside the
    repository relative to it; headers from their include/ folder on)."""
    if path.startswith(_REPO):
        return path[len(_REPO):]
    for marker in ("/kernels/", "/include/"):
        if marker in path:
            return path[path.rindex(marker) + 1:]
    return path


# ---- which source files are CUDA's own (the one rule) -----------------------------------------

@lru_cache(maxsize=None)
def _cuda_include_dirs() -> tuple[str, ...]:
    """The CUDA header folders the course compiles with (fraglab.tools), as 'dir/' prefixes
    (as given and resolved); none when they cannot be found here."""
    try:
        from .. import tools
        dirs = tools.include_dirs()
    except Exception:                       # no NVRTC or headers: the name rules still apply
        return ()
    out = []
    for d in dirs:
        for form in (str(d), str(Path(d).resolve())):
            if form.rstrip("/") + "/" not in out:
                out.append(form.rstrip("/") + "/")
    return tuple(out)


# CUDA's headers wherever a toolkit or wheel put them: files and folders of the CUDA include
# directory (cuda_fp16.hpp, sm_30_intrinsics.hpp, crt/mma.hpp, cooperative_groups/..., libcu++'s
# cuda/std and nv/target, CCCL), or any file below a toolkit's or an NVIDIA wheel's include/.
_CUDA_HEADER = re.compile(
    r"(?:^|/)(?:cuda_(?:fp16|bf16|fp8|fp6|fp4|pipeline\w*|awbarrier\w*|runtime\w*"
    r"|device_runtime_api|texture_types|surface_types)"
    r"|sm_\d+_(?:intrinsics|atomic_functions)"
    r"|device_(?:functions|atomic_functions|double_functions|types)"
    r"|math_functions|vector_functions|mma|host_defines|cooperative_groups"
    r"|(?:texture|surface)_(?:fetch_functions|functions|indirect_functions))\.hpp?$"
    r"|(?:^|/)(?:crt|cooperative_groups|cccl|cub|thrust)/|(?:^|/)cuda/(?:std/|__)"
    r"|(?:^|/)nv/(?:target|detail)"
    r"|/cuda(?:-[\d.]+)?/(?:targets/[^/]+/)?include/|/site-packages/nvidia/[^/]+/include/")


@lru_cache(maxsize=4096)
def is_builtin(path: str | None) -> bool:
    """Whether a source file is one of CUDA's own headers (below the CUDA include directory
    fraglab.tools compiles with, or named like them: cuda_fp16.hpp, sm_30_intrinsics.hpp,
    crt/..., cooperative_groups/...). Frames in such files are never the learner's line: the
    one rule :func:`source_of` and :mod:`.inspect` use."""
    if not path:
        return False
    if path.startswith(_cuda_include_dirs()):
        return True
    return _CUDA_HEADER.search(path) is not None


@lru_cache(maxsize=4096)
def _builtin_name(path: str) -> str:
    """'.../include/crt/mma.hpp' -> 'crt/mma.hpp': a CUDA header from its include folder on."""
    for d in _cuda_include_dirs():
        if path.startswith(d):
            return path[len(d):]
    m = re.search(r"/include/(?:cccl/)?(.+)$", path)
    return m.group(1) if m else path.rsplit("/", 1)[-1]


# ---- C++ names of inlined functions (the Itanium ABI mangling NVRTC writes in .debug_str) ------

_OPERATORS = {
    "nw": " new", "na": " new[]", "dl": " delete", "da": " delete[]", "ps": "+", "ng": "-",
    "ad": "&", "de": "*", "co": "~", "pl": "+", "mi": "-", "ml": "*", "dv": "/", "rm": "%",
    "an": "&", "or": "|", "eo": "^", "aS": "=", "pL": "+=", "mI": "-=", "mL": "*=", "dV": "/=",
    "rM": "%=", "aN": "&=", "oR": "|=", "eO": "^=", "ls": "<<", "rs": ">>", "lS": "<<=",
    "rS": ">>=", "eq": "==", "ne": "!=", "lt": "<", "gt": ">", "le": "<=", "ge": ">=", "ss": "<=>",
    "nt": "!", "aa": "&&", "oo": "||", "pp": "++", "mm": "--", "cm": ",", "pm": "->*", "pt": "->",
    "cl": "()", "ix": "[]"}
_ABBREV = {"St": "std", "Sa": "std::allocator", "Sb": "std::basic_string", "Ss": "std::string",
           "Si": "std::istream", "So": "std::ostream", "Sd": "std::iostream"}


class _Names:
    """Just enough of the Itanium C++ ABI to read a function's qualified name: nested names,
    constructors, operators, and template arguments (skipped, with the types inside them)."""

    def __init__(self, s: str):
        self.s, self.i = s, 2

    def peek(self, n: int = 1) -> str:
        return self.s[self.i:self.i + n]

    def number(self) -> int:
        m = re.match(r"n?\d+", self.s[self.i:])
        self.i += len(m.group())
        return int(m.group().replace("n", "-"))

    def source_name(self) -> str:
        n = self.number()
        name = self.s[self.i:self.i + n]
        self.i += n
        return "(anonymous namespace)" if name.startswith("_GLOBAL__N") else name

    def part(self, names: list) -> None:
        c, two = self.peek(), self.peek(2)
        if c.isdigit():
            names.append(self.source_name())
        elif c == "C" and two[1:] in ("1", "2", "3", "4", "5"):
            self.i += 2
            names.append(names[-1] if names else "(constructor)")
        elif c == "D" and two[1:] in ("0", "1", "2", "4", "5"):
            self.i += 2
            names.append("~" + (names[-1] if names else ""))
        elif two == "cv":
            self.i += 2
            self.type()
            names.append("operator (conversion)")
        elif two in _OPERATORS:
            self.i += 2
            names.append("operator" + _OPERATORS[two])
        elif c == "L":
            self.i += 1
            self.part(names)
        elif two in _ABBREV:
            self.i += 2
            names.append(_ABBREV[two])
        elif c == "S":                              # S_ or S<seq>_: an earlier component
            self.i = self.s.index("_", self.i) + 1
            names.append("?")
        elif two == "Ul":                           # a lambda: Ul <parameter types> E [<n>] _
            self.i += 2
            while self.peek() != "E":
                self.type()
            self.i = self.s.index("_", self.i) + 1
            names.append("(lambda)")
        elif two == "Ut":                           # an unnamed type: Ut [<n>] _
            self.i = self.s.index("_", self.i) + 1
            names.append("(unnamed)")
        else:
            raise ValueError(self.s[self.i:])
        if self.peek() == "B":                      # an ABI tag: B <source-name>
            self.i += 1
            self.source_name()

    def name(self) -> list:
        names: list = []
        if self.peek() == "Z":                      # a local name: Z <function> E <entity>
            self.i += 1
            names = self.name()
            while self.peek() != "E":               # the function's parameter types
                self.type()
            self.i += 1
            return names + self.name()
        if self.peek() == "N":
            self.i += 1
            while self.peek() in ("r", "V", "K", "R", "O"):
                self.i += 1
            while self.peek() != "E":
                if self.peek() == "I":
                    self.template_args()
                elif self.peek() == "T":
                    self.template_param()
                    names.append("T")
                else:
                    self.part(names)
            self.i += 1
        else:
            self.part(names)
            if names[-1] == "std" and self.peek()[:1].isdigit():
                self.part(names)
            if self.peek() == "I":
                self.template_args()
        return names

    def template_param(self) -> None:
        self.i = self.s.index("_", self.i) + 1      # T_ or T<n>_

    def template_args(self) -> None:
        self.i += 1
        while self.peek() != "E":
            c = self.peek()
            if c == "L":                            # a literal: L <type> <value> E
                self.i += 1
                if self.peek(2) == "_Z":
                    raise ValueError("symbol literal")
                self.type()
                self.i = self.s.index("E", self.i) + 1
            elif c == "J":                          # a pack
                self.template_args()
                continue
            elif c == "X" and self.peek(2) == "XT":     # an expression: only a template parameter
                self.i += 1
                self.template_param()
                if self.peek() != "E":
                    raise ValueError("expression")
                self.i += 1
            elif c == "X":
                raise ValueError("expression")
            else:
                self.type()
        self.i += 1

    def type(self) -> None:
        c, two = self.peek(), self.peek(2)
        if c in "vwbcahstijlmxynofdegz":
            self.i += 1
        elif c == "u":
            self.i += 1
            self.source_name()
        elif two in ("Dh", "Df", "Dd", "De", "Di", "Ds", "Du", "Da", "Dc", "Dn"):
            self.i += 2
        elif two == "DF":                           # DF16_ (_Float16) and the like
            self.i = self.s.index("_", self.i) + 1
        elif two == "Dp":
            self.i += 2
            self.type()
        elif two == "Dv":                           # vector: Dv <n> _ <type>
            self.i = self.s.index("_", self.i) + 1
            self.type()
        elif c in "rVKPROCG":
            self.i += 1
            self.type()
        elif c.isdigit() or c in "NZ" or two in _ABBREV:
            self.name()
        elif c == "S":                              # S_ or S<seq>_ : an earlier component
            self.i = self.s.index("_", self.i) + 1
            if self.peek() == "I":
                self.template_args()
        elif c == "T":
            self.template_param()
            if self.peek() == "I":
                self.template_args()
        elif c == "A":                              # array: A <n> _ <type>
            self.i = self.s.index("_", self.i) + 1
            self.type()
        elif c == "F":                              # function type: F <ret> <params> E
            self.i += 1
            while self.peek() != "E":
                self.type()
            self.i += 1
        elif c == "M":
            self.i += 1
            self.type()
            self.type()
        else:
            raise ValueError(self.s[self.i:])


@lru_cache(maxsize=4096)
def function_name(mangled: str | None) -> str | None:
    """The qualified name of a function from its mangled symbol, without parameters or template
    arguments: '_ZN6nvcuda4wmma16load_matrix_syncERNS0_8fragment...' ->
    'nvcuda::wmma::load_matrix_sync'; C names and names it cannot read come back unchanged."""
    if not mangled or not mangled.startswith("_Z"):
        return mangled
    try:
        names = _Names(mangled).name()
    except (ValueError, IndexError, AttributeError, RecursionError):
        return mangled
    # NVRTC puts a translation unit's internal functions in a namespace of its own; libraries
    # version theirs with inline namespaces (cooperative_groups::__v1, cuda::std::__4)
    names = [n for n in names
             if not n.startswith("_INTERNAL_") and not re.fullmatch(r"__v?\d+", n)]
    return "::".join(names) or mangled


# ---- the CUDA source line of an instruction -------------------------------------------------

def frames(instr, files: dict) -> list:
    """(path, line, function or None) of an instruction's source position and of each call site
    it is inlined at, innermost first (the kernel's own line last); [] without line info."""
    loc = getattr(instr, "loc", None)
    if loc is None:
        return []
    fr = loc.frames() if hasattr(loc, "frames") else [loc]
    return [(files.get(f.file, f"file{f.file}"), f.line, getattr(f, "func", None)) for f in fr]


def lead_frame(fr: list) -> int:
    """Index in :func:`frames` of the line to show the learner: the innermost frame in the
    kernel's own file (the outermost frame's), so code inlined from CUDA's headers or from the
    course's headers is reported at the learner's call; else the innermost frame outside CUDA's
    headers; else the innermost."""
    if not fr:
        return 0
    home = fr[-1][0]
    for i, (path, _, _) in enumerate(fr):
        if path == home and not is_builtin(path):
            return i
    for i, (path, _, _) in enumerate(fr):
        if not is_builtin(path):
            return i
    return 0


def _where(path: str, line: int) -> str:
    return f"CUDA header {_builtin_name(path)}:{line}" if is_builtin(path) \
        else f"{short_path(path)}:{line}"


def source_line(instr, files: dict) -> tuple[str, int] | None:
    """(short path, line) of the learner's line of an instruction (:func:`lead_frame`)."""
    fr = frames(instr, files)
    if not fr:
        return None
    path, line, _ = fr[lead_frame(fr)]
    return short_path(path), line


def source_of(instr, files: dict) -> str | None:
    """The CUDA source line of an instruction, the learner's first (:func:`lead_frame`), then
    the calls it goes through down to the instruction's own line:
    'my_kernel.cu:12 (in __shfl_sync, CUDA header sm_30_intrinsics.hpp:150)',
    'lab.cu:30 (in tile_product, kernels/wmma_tile.cuh:17; in nvcuda::wmma::load_matrix_sync,
    CUDA header crt/mma.hpp:91)', or 'x.cu:10 (inlined at x.cu:25)' for a helper of the same
    file. Of CUDA's own headers only the first frame (the function called) is shown."""
    fr = frames(instr, files)
    if not fr:
        return None
    lead = lead_frame(fr)
    path, line, _ = fr[lead]
    notes = []
    if lead + 1 < len(fr):
        notes.append(f"inlined at {_where(*fr[lead + 1][:2])}")
    for p, ln, func in reversed(fr[:lead]):
        name = function_name(func)
        notes.append(f"in {name}, {_where(p, ln)}" if name else _where(p, ln))
        if is_builtin(p):
            break
    return f"{short_path(path)}:{line}" + (f" ({'; '.join(notes)})" if notes else "")
