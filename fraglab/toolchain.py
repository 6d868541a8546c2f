"""The course's one compile path: CUDA source -> NVRTC -> PTX + CUBIN + ptxas resource report.

Everything (book chapters, labs, tests, benchmarks) compiles through :func:`compile`, which works
with or without a GPU: NVRTC and the disassembler are libraries and programs, not the driver.
``compile("00_hello_warp", arch="sm_90").sass("warp_sum")``, for example.

Results are cached on disk (:func:`fraglab.tools.cache_dir`, bounded; ``make clean`` empties it),
keyed by the source, every header in ``kernels/``, the options and the NVRTC version.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from . import compile_cache, sass
from .compile_cache import store as _store_cached
from .elf import (_complete_elf, elf_int_globals, elf_kernels, elf_sections,  # noqa: F401
                  elf_sm)  # (toolchain.elf_*)
from .ptxas_log import parse_ptxas_log  # noqa: F401  (toolchain.parse_ptxas_log)
from .tools import (KERNELS_DIR, REPO_ROOT, ToolchainError, cache_dir, find_tool,  # noqa: F401
                    include_dirs, nvrtc, nvrtc_version, prune_cache)

#: Targets every kernel is compile-tested for. sm_75 (Turing, Colab's T4) has f16 WMMA only.
ARCHES = ("sm_75", "sm_80", "sm_90", "sm_120")
#: Of :data:`ARCHES`, the targets no GPU of the course's runs (sm_80's PTX is the interpreter's,
#: sm_90 the H100's): :func:`compile_check` proves a source builds for them with a fast build.
#: A test that claims something of their SASS (no spills, an instruction count) compiles them
#: the usual way.
COMPILE_ONLY_ARCHES = ("sm_75", "sm_120")
#: NVRTC options of such a build: its fastest compile level (NVRTC 12.8+), which keeps the front
#: end, the target's ``__CUDA_ARCH__`` paths and ptxas's checks of every instruction for the
#: target but skips the expensive optimisations (about 5x faster on the attention kernels). Its
#: code, registers and spills are not what the course ships and measure nothing.
FAST_BUILD = ("--Ofast-compile=max",)


class CompileError(RuntimeError):
    """NVRTC rejected a source. ``log`` holds the compiler log (file(line): error: ...)."""

    def __init__(self, name: str, arch: str, log: str, source: str | None = None,
                 refused: bool = False):
        self.name, self.arch, self.log = name, arch, log
        #: the source compiled (maps a learner's errors back to the cell:
        #: :func:`fraglab.grading.cuda_region.learner_errors`); ``refused``: grading refused
        #: the learner's region before NVRTC saw it (``log`` says why)
        self.source, self.refused = source, refused
        super().__init__(f"grading refused to compile {name}:\n{log.strip()}" if refused else
                         f"NVRTC could not compile {name} for {arch}:\n{log.strip()}")


# --------------------------------------------------------------------------------------------
# Compiling
# --------------------------------------------------------------------------------------------

def _normalize_arch(arch: str | int | None) -> str:
    if arch is None:
        from . import device
        return device.arch()
    a = str(arch).lower().replace("compute_", "sm_")
    if not a.startswith("sm_"):
        a = "sm_" + a
    if not re.fullmatch(r"sm_\d{2,3}a?", a):
        raise ValueError(f"arch must look like 'sm_90' (or 90), got {arch!r}")
    return a


def kernel_path(name: str | os.PathLike) -> Path:
    """``'00_hello_warp'`` -> ``kernels/00_hello_warp.cu``; a path is returned as is."""
    p = Path(name)
    if p.suffix in (".cu", ".cuh") and p.is_file():
        return p
    cand = KERNELS_DIR / (str(name) + ("" if str(name).endswith(".cu") else ".cu"))
    if not cand.is_file():
        known = ", ".join(sorted(q.stem for q in KERNELS_DIR.glob("*.cu")))
        raise FileNotFoundError(f"no kernel source {cand} (known: {known})")
    return cand


_HEADERS_SEEN: dict = {}
_HEADER_PATHS: dict = {}


_INCLUDED_CU = re.compile(r'^\s*#\s*include\s+"([^"/]+\.cu)"', re.M)


def _included_kernel_files(source: str, headers: Path) -> list[str]:
    """The text of every kernel file (``.cu``, not a header) that ``source`` includes, those files'
    own included in turn (``10_fa3_pipelining_tma.cu`` includes the pingpong rung's): the
    headers' digest does not cover them, and a build must not outlive a change to one."""
    out, todo, seen = [], _INCLUDED_CU.findall(source), set()
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.add(name)
        try:
            text = (headers / name).read_text()
        except OSError:
            continue                      # NVRTC says what is missing
        out += [name, text]
        todo += _INCLUDED_CU.findall(text)
    return out


def _headers_digest() -> str:
    """A digest of every header in kernels/, read again only when one of them changed (name, size
    or modification time): a launch path that asks for a cached build pays a few stat calls."""
    # the folder's own modification time changes when a header is added, removed or renamed
    listing = _HEADER_PATHS.get(KERNELS_DIR.stat().st_mtime_ns)
    if listing is None:
        _HEADER_PATHS.clear()
        listing = _HEADER_PATHS[KERNELS_DIR.stat().st_mtime_ns] = sorted(KERNELS_DIR.glob("*.cuh"))
    stamp = tuple((p.name, st.st_size, st.st_mtime_ns) for p in listing for st in (p.stat(),))
    if stamp not in _HEADERS_SEEN:
        h = hashlib.sha256()
        for p in sorted(KERNELS_DIR.glob("*.cuh")):
            h.update(p.name.encode() + p.read_bytes())
        _HEADERS_SEEN.clear()
        _HEADERS_SEEN[stamp] = h.hexdigest()
    return _HEADERS_SEEN[stamp]


@dataclass
class Build:
    """One compiled translation unit for one target."""
    name: str
    arch: str
    options: tuple[str, ...]
    ptx: str
    cubin: bytes
    log: str
    key: str
    resources: dict[str, dict] = field(default_factory=dict)

    @property
    def kernels(self) -> list[str]:
        """Entry points of the cubin, read from its ELF section names (``.text.<kernel>``), once."""
        found = self.__dict__.get("_kernels")
        if found is None:
            found = self.__dict__["_kernels"] = elf_kernels(self.cubin)
        return list(found)

    def sass(self, kernel: str | None = None) -> str:
        """SASS of one kernel (or the whole cubin) from nvdisasm."""
        return sass.disassemble(self, kernel)

    def opcodes(self, kernel: str, base: bool = True):
        """Counter of SASS opcodes of a kernel (base names like HMMA, or full like HMMA.16816.F32)."""
        return sass.count_opcodes(self.sass(kernel), base=base)

    def classes(self, kernel: str):
        """Counter of SASS instruction classes (tensor, shared, global, shuffle, barrier, ...)."""
        return sass.count_classes(self.sass(kernel))

    def constants(self, prefix: str = "") -> dict[str, int]:
        """``{name: value}`` of the module's ``extern "C" __device__ const int`` globals whose
        names start with ``prefix``, read from the cubin (its symbols and initialised data).

        A kernel file declares its launch numbers this way (tiles, threads, stages, shared-memory
        bytes; ``CONTRIBUTING.md``, "Kernels"), so Python reads them back from the build instead
        of typing them again: the same numbers on every target and without a GPU. The launch
        path reads them from the loaded module (:func:`fraglab.launch.constants`). An empty
        ``prefix`` takes every 4-byte initialised global, the compiler's own included."""
        found = self.__dict__.get("_constants")
        if found is None:
            found = self.__dict__["_constants"] = elf_int_globals(self.cubin)
        return {k: v for k, v in found.items() if k.startswith(prefix)}

    def report(self, kernel: str) -> dict:
        """Resource use of a kernel from ptxas, plus the SASS class counts."""
        if kernel not in self.kernels:
            raise KeyError(f"{self.name} has no kernel {kernel!r}; it has {self.kernels}")
        if kernel not in self.resources:
            raise KeyError(f"the ptxas report of {self.name} ({self.arch}) lacks {kernel!r}; "
                           f"NVRTC's log was:\n{self.log[-2000:]}")
        return {**self.resources[kernel], **{f"sass_{k}": v for k, v in self.classes(kernel).items()}}


def _deferred_field(name: str) -> property:
    """A :class:`Build` field that a deferred build (:func:`deferred_ptxas`) fills on first read,
    by running ptxas on its PTX (:meth:`Build.assemble`)."""
    slot = "_" + name

    def get(self):
        if self.__dict__.get("_deferred") is not None:
            self.assemble()
        return self.__dict__[slot]

    def put(self, value):
        self.__dict__[slot] = value
    return property(get, put)


for _name in ("cubin", "log", "resources"):
    setattr(Build, _name, _deferred_field(_name))


def _assemble(self) -> "Build":
    """Run ptxas on a deferred build's PTX (see :func:`deferred_ptxas`): its cubin, ptxas's
    report in its log and resources, stored in the compile cache as any build. A PTX ptxas
    refuses raises :class:`CompileError` (as NVRTC would have). A build made whole is returned
    as is."""
    deferred = self.__dict__.pop("_deferred", None)
    if deferred is None:
        return self
    source, front_log = deferred
    try:
        cubin, log = _ptxas(self.ptx, self.arch)
    except CompileError as e:
        self.__dict__["_deferred"] = deferred
        raise CompileError(self.name, self.arch, (front_log + "\n" + e.log).strip(),
                           source=source) from None
    self.cubin, self.log = cubin, (front_log + "\n" + log).strip()
    self.resources = parse_ptxas_log(log)
    _store_cached(self)
    return self


def _deferred_kernels(self) -> list[str]:
    if self.__dict__.get("_deferred") is not None:     # before ptxas: the PTX's entry points
        return sorted(set(re.findall(r"^\s*(?:\.visible\s+)?\.entry\s+([\w$]+)", self.ptx, re.M)))
    found = self.__dict__.get("_kernels")
    if found is None:
        found = self.__dict__["_kernels"] = elf_kernels(self.cubin)
    return list(found)


Build.assemble = _assemble
Build.kernels = property(_deferred_kernels, doc=Build.kernels.__doc__)
Build.deferred = property(lambda self: self.__dict__.get("_deferred") is not None,
                          doc="True while ptxas has not run on this build (:func:`deferred_ptxas`).")

_memory_cache: dict[str, Build] = {}


def _load_cached(key: str) -> Build | None:
    return compile_cache.load(key, Build)

#: Whether :func:`compile` may leave ptxas for later (:func:`deferred_ptxas`), and the list of
#: the builds it left so within the innermost such block.
_defer: dict = {"on": False, "builds": None}


@contextlib.contextmanager
def deferred_ptxas(on: bool = True):
    """Within it, :func:`compile` of a ``source`` string for a target the PTX interpreter runs
    (``sm_80``, ``sm_90a``), without a GPU and with no option but ``defines``, stops at the PTX
    (NVRTC for ``compute_XX``: about half the CPU of a whole build): ptxas runs on that PTX the
    first time anything reads the build's cubin, log or resources (the same cubin, byte for byte,
    where ptxas and NVRTC are one release), or at :func:`assemble_deferred`. What runs only on
    the interpreter never pays for ptxas: a wrong kernel the interpreter fails (the test suite's
    mutants), a learner's answer that fails its check. Grading (:mod:`fraglab.grading.capture`)
    assembles every deferred build before it writes a pass, so a passing answer still
    assembles for its target. The PTX is cached on disk as soon as NVRTC made it
    (:mod:`fraglab.compile_cache`): the next process asking for it pays neither NVRTC nor, until
    it reads the cubin, ptxas. Yields the list of the builds deferred within the block (for
    :func:`assemble_deferred`)."""
    before = _defer["on"], _defer["builds"]
    builds: list[Build] = []
    _defer["on"], _defer["builds"] = on, builds
    try:
        yield builds
    finally:
        _defer["on"], _defer["builds"] = before


def assemble_deferred(builds: list[Build]) -> None:
    """ptxas on each of ``builds`` still deferred (a refused PTX raises :class:`CompileError`)."""
    for b in builds:
        b.assemble()


def _may_defer(arch: str, source: str | None, options) -> bool:
    from . import device
    return bool(_defer["on"] and source is not None and not list(options)
                and arch in device.INTERPRETER_ARCHES and not device.gpu_available()
                and _ptxas_matches_nvrtc())


def _ptxas_matches_nvrtc() -> bool:
    """Whether the ptxas found is NVRTC's release (then its cubin is NVRTC's, byte for byte)."""
    found = _defer.get("ptxas")
    if found is None:
        import subprocess
        tool, out = find_tool("ptxas", required=False), ""
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([str(tool), "--version"], capture_output=True, text=True,
                                 timeout=30).stdout if tool else ""
        major, minor = nvrtc_version()
        found = bool(re.search(rf"release {major}\.{minor}\b", out)) and _probe_agrees(out)
        _defer["ptxas"] = found
    return found


def _probe_agrees(ptxas_version: str) -> bool:
    """NVRTC's PTX through this ptxas is NVRTC's cubin on a probe, byte for byte (the H200 machine's
    CUDA 13.0 ptxas and NVRTC differ by a byte); cached, keyed by both tools' versions."""
    verdict = cache_dir() / ("ptxas-probe-" + hashlib.sha256(
        (ptxas_version + repr(nvrtc_version())).encode()).hexdigest()[:16])
    with contextlib.suppress(OSError):
        return verdict.read_text() == "same"
    src, where = 'extern "C" __global__ void k(float* p) { p[0] = __expf(p[1]); }\n', "probe.cu"
    opts = ["-arch=sm_80", "-std=c++17", "-lineinfo", "--ptxas-options=-v"]
    try:
        whole = _nvrtc_compile(where, "sm_80", src, opts, "probe", _nvrtc_name(where))
        same = _ptxas(_nvrtc_ptx(where, "sm_80", src, opts, "probe", _nvrtc_name(where)).ptx,
                      "sm_80")[0] == whole.cubin
    except (CompileError, ToolchainError, OSError):
        same = False
    with contextlib.suppress(OSError):
        cache_dir().mkdir(parents=True, exist_ok=True)
        verdict.write_text("same" if same else "differ")
    return same


def _ptxas(ptx: str, arch: str) -> tuple[bytes, str]:
    """ptxas as NVRTC runs it (``-v``, line info) on a PTX text: the cubin and the report."""
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        r = subprocess.run([str(find_tool("ptxas")), f"-arch={arch}", "-v", "-lineinfo", str(src),
                            "-o", str(Path(tmp) / "k.cubin")], capture_output=True, text=True)
        if r.returncode != 0:
            raise CompileError("ptxas", arch, (r.stdout + r.stderr).replace(str(src), "ptx"))
        return (Path(tmp) / "k.cubin").read_bytes(), r.stdout + r.stderr
#: The marker comment that opens a learner's region in a graded source
#: (:data:`fraglab.grading.cuda_region.MARK`, which a test keeps equal).
_LEARNER_MARK = "// ---- fraglab grading: learner region"


def compile(name: str | os.PathLike, arch: str | int | None = None, *, source: str | None = None,
            defines: dict | None = None, options: tuple[str, ...] | list[str] = ()) -> Build:
    """Compile a kernel file (``kernels/NAME.cu``) or a ``source`` string for ``arch``.

    ``arch`` defaults to the GPU in use (an error without one). ``defines`` become ``-DKEY=VALUE``.
    Kernels should be ``extern "C"`` so their names are plain. Raises :class:`CompileError` with
    NVRTC's log (file and line of each error) when the source does not compile.
    """
    arch = _normalize_arch(arch)
    if source is None:
        path = kernel_path(name)
        source, label = path.read_text(), str(path.relative_to(REPO_ROOT)) \
            if path.resolve().is_relative_to(REPO_ROOT) else str(path)
    else:
        label = str(name)
    headers = KERNELS_DIR
    if source is not None and _LEARNER_MARK in source:
        # a graded notebook's source with a learner's region in it: the region is read as the
        # preprocessor reads it, and compiles with the include path its exercise allows
        from .grading import cuda_region
        headers, refused = cuda_region.prepare(source)
        if refused:
            raise CompileError(label, arch, "\n".join(refused), source=source, refused=True)
    opts = [f"-arch={arch}", "-std=c++17", "-lineinfo", "--ptxas-options=-v",
            f"-I{headers}"] + [f"-I{d}" for d in include_dirs()]
    opts += [f"-D{k}={v}" for k, v in sorted((defines or {}).items())] + list(options)
    # the name NVRTC is given (see _nvrtc_run) is in the key: builds cached before it was
    # anchored at the repository carry another directory in their line info
    # a learner's source is named inside its include folder: NVRTC searches the folder of the
    # source's name first, which must not be the repository
    nvrtc_name = _nvrtc_name(label) if headers == KERNELS_DIR else str(headers / Path(label).name)
    key = hashlib.sha256(json.dumps([nvrtc_name, source, _headers_digest(), opts,
                                     list(nvrtc_version())] + _included_kernel_files(source, headers)
                                    ).encode()).hexdigest()[:24]
    if key in _memory_cache:
        build = _memory_cache[key]
        if build.deferred:              # left without ptxas earlier: now within a block, or not
            _defer["builds"].append(build) if _defer["on"] else build.assemble()
        return build
    t0, where = _clock(), "disk"
    build = _load_cached(key)
    if build is None and _may_defer(arch, source, options):
        with _compile_lock(key):          # another process making the same PTX: wait for it
            build, where = compile_cache.load_ptx(key, source, Build), "disk-ptx"
            if build is None:
                t0, where = _clock(), "nvrtc-ptx"
                build = _nvrtc_ptx(label, arch, source, opts, key, nvrtc_name)
                compile_cache.store_ptx(build)
        _defer["builds"].append(build)
    if build is None and not options and source is not None:    # only ptxas left to run
        build = compile_cache.load_ptx(key, source, Build)
        build = build if build is not None and _ptxas_matches_nvrtc() else None
        if build is not None:
            build.assemble()              # stores it whole; a refused PTX raises CompileError
            where = "disk-ptx+ptxas"
    if build is None:
        with _compile_lock(key):          # another process compiling the same build: wait for it
            build = _load_cached(key)
            if build is None:
                t0, where = _clock(), "nvrtc"
                build = _nvrtc_compile(label, arch, source, opts, key, nvrtc_name)
                _store_cached(build)
    _memory_cache[key] = build
    _log_compile(build, where, t0)
    return build


def _clock() -> tuple[float, float]:
    import time
    return time.perf_counter(), time.process_time()


def _log_compile(build: Build, where: str, t0: tuple[float, float]) -> None:
    """With ``FRAGLAB_COMPILE_LOG=file``, one JSON line per build this process did not hold yet:
    where it came from (``nvrtc``: compiled here; ``disk``: the compile cache, perhaps after
    waiting for another process's compile), its wall and CPU seconds, the PTX's size and
    ``FRAGLAB_COMPILE_LOG_TAG`` (what asked, e.g. the test). Appended whole lines, so that the
    processes of a test run (workers, graded notebooks' kernels) can share one file."""
    out = os.environ.get("FRAGLAB_COMPILE_LOG")
    if not out:
        return
    t1 = _clock()
    extra = [o for o in build.options if not o.startswith(("-arch=", "-I", "-std=", "-lineinfo",
                                                            "--ptxas-options=-v"))]
    line = json.dumps(dict(where=where, name=build.name, arch=build.arch, options=extra,
                           key=build.key, wall=round(t1[0] - t0[0], 3), cpu=round(t1[1] - t0[1], 3),
                           ptx=len(build.ptx), pid=os.getpid(),
                           tag=os.environ.get("FRAGLAB_COMPILE_LOG_TAG", "")))
    with contextlib.suppress(OSError), open(out, "a") as f:
        f.write(line + "\n")


@contextlib.contextmanager
def _compile_lock(key: str):
    """An exclusive lock on one build key across processes (``flock`` on a file in the cache),
    so that parallel test workers, or notebooks, compile a build once and the others read it.
    Where locking is impossible (no fcntl, a read-only cache), no lock: at worst a recompile."""
    try:
        import fcntl
        f = open(cache_dir() / f".lock-{key}", "w")
    except (ImportError, OSError):
        yield
        return
    try:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield
    finally:
        f.close()                         # releases the lock; the empty file stays (cheap)


def _nvrtc_compile(label: str, arch: str, source: str, opts: list[str], key: str,
                   where: str | None = None) -> Build:
    """One NVRTC run, with ptxas's resource report for every kernel.

    NVRTC 12.9+ keeps a compile cache of its own (``~/.nv/ComputeCache``, shared by processes); a
    build it serves from there comes without ptxas's ``-v`` report. ``fraglab`` asks for that
    cache to be off (``CUDA_CACHE_DISABLE=1``, set on import), and where a report is missing all
    the same, it is made by running ``ptxas -v`` on the build's own PTX."""
    build = _nvrtc_run(label, arch, source, opts, key, where)
    missing = sorted(set(build.kernels) - set(build.resources))
    if missing:
        log = _ptxas_report(build.ptx, arch, opts)
        build.resources = parse_ptxas_log(log)
        build.log = (build.log + "\n" + log).strip()
        missing = sorted(set(build.kernels) - set(build.resources))
    if missing:
        raise ToolchainError(
            f"NVRTC compiled {label} for {arch} but neither it nor ptxas reported the resources "
            f"of {', '.join(missing[:5])}. The log was:\n{build.log[-1500:]}")
    return build


def _ptxas_report(ptx: str, arch: str, opts: list[str]) -> str:
    """``ptxas -v`` on a PTX text: the resource report NVRTC's cache left out."""
    import subprocess
    import tempfile
    ptxas = find_tool("ptxas")
    extra = [o for o in opts if o.startswith(("--maxrregcount", "-maxrregcount"))]
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        r = subprocess.run([str(ptxas), f"-arch={arch}", "-v", "-lineinfo", *extra, str(src),
                            "-o", str(Path(tmp) / "k.cubin")], capture_output=True, text=True)
    if r.returncode != 0:
        raise ToolchainError(f"ptxas could not assemble the PTX for {arch}:\n{r.stderr[-1500:]}")
    return r.stdout + r.stderr


def _nvrtc_name(label: str) -> str:
    return label if os.path.isabs(label) else str(REPO_ROOT / label)


def _nvrtc_run(label: str, arch: str, source: str, opts: list[str], key: str,
               where: str | None = None) -> Build:
    # NVRTC makes a relative name absolute with the process's working directory and writes it
    # into the PTX's .file lines (hence into the SASS's line info): anchor it at the repository
    # instead, so that one key gives one build wherever it is compiled from (a grading notebook
    # runs in a temporary folder). Logs show the name as given.
    where = where or _nvrtc_name(label)
    lib = nvrtc()
    prog = lib.createProgram(source, where, [], [])

    def program_log() -> str:
        return lib.getProgramLog(prog).rstrip("\x00").replace(where, label)
    try:
        try:
            lib.compileProgram(prog, opts)
        except lib.NVRTCError:
            raise CompileError(label, arch, program_log(), source=source) from None
        log = program_log()
        ptx = lib.getPTX(prog)
        cubin = lib.getCUBIN(prog)
    finally:
        lib.destroyProgram(prog)
    ptx = ptx.decode() if isinstance(ptx, bytes) else ptx
    cubin = _complete_elf(bytes(cubin))
    return Build(name=label, arch=arch, options=tuple(opts), ptx=ptx.rstrip("\x00"),
                 cubin=bytes(cubin), log=log, key=key, resources=parse_ptxas_log(log))


def _nvrtc_ptx(label: str, arch: str, source: str, opts: list[str], key: str, where: str) -> Build:
    """NVRTC to the PTX only (``compute_XX``), the build's ptxas deferred (:func:`deferred_ptxas`).
    The PTX is the whole build's, byte for byte: NVRTC makes the same and hands it to ptxas."""
    lib = nvrtc()
    front = [o.replace(f"-arch={arch}", f"-arch={arch.replace('sm_', 'compute_')}")
             for o in opts if o != "--ptxas-options=-v"]
    prog = lib.createProgram(source, where, [], [])
    try:
        try:
            lib.compileProgram(prog, front)
        except lib.NVRTCError:
            raise CompileError(label, arch, lib.getProgramLog(prog).rstrip("\x00").replace(where, label),
                               source=source) from None
        log = lib.getProgramLog(prog).rstrip("\x00").replace(where, label)
        ptx = lib.getPTX(prog)
    finally:
        lib.destroyProgram(prog)
    ptx = (ptx.decode() if isinstance(ptx, bytes) else ptx).rstrip("\x00")
    build = Build(name=label, arch=arch, options=tuple(opts), ptx=ptx, cubin=b"", log="", key=key)
    build.__dict__["_deferred"] = (source, log.strip())
    return build


def compile_check(name: str | os.PathLike, arch: str | int, **kw) -> Build:
    """Compile to prove that a source builds for ``arch`` (the compile tests): a fast build
    (:data:`FAST_BUILD`) for the :data:`COMPILE_ONLY_ARCHES`, the course's own build (shared with
    every other use of it) for the others. ``kw`` as for :func:`compile`."""
    arch = _normalize_arch(arch)
    if arch in COMPILE_ONLY_ARCHES:
        kw["options"] = (*kw.get("options", ()), *FAST_BUILD)
    return compile(name, arch, **kw)
