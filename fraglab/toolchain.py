"""The course's one compile path: CUDA source -> NVRTC -> PTX + CUBIN + ptxas resource report.

Everything (book chapters, labs, tests, benchmarks) compiles through :func:`compile`, which works
with or without a GPU: NVRTC and the disassembler are libraries and programs, not the driver.

    >>> b = compile("00_hello_warp", arch="sm_90")
    >>> b.resources["warp_sum"]["registers"]
    >>> print(b.sass("warp_sum"))

Results are cached on disk (:func:`fraglab.tools.cache_dir`, bounded; ``make clean`` empties it), keyed by the source, every
header in ``kernels/``, the options and the NVRTC version, so a re-run does not recompile.

A build is made in two steps where the ``ptxas`` program is the build NVRTC carries inside
(:func:`fraglab.tools.ptxas_is_nvrtcs`): NVRTC writes the PTX for the virtual target, then
``ptxas`` assembles it, giving NVRTC's own cubin byte for byte. The PTX interpreter needs the
PTX alone: :func:`compile_ptx` stops after the first step, and a later :func:`compile` of the same
build runs only ``ptxas`` on that PTX.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from . import sass
from . import tools
from .elf import _complete_elf, elf_kernels, elf_sections, elf_sm  # noqa: F401
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

    def __init__(self, name: str, arch: str, log: str):
        self.name, self.arch, self.log = name, arch, log
        super().__init__(f"NVRTC could not compile {name} for {arch}:\n{log.strip()}")


# --------------------------------------------------------------------------------------------
# Compiling
# --------------------------------------------------------------------------------------------

_PTXAS_FUNC = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"Used (\d+) registers")


def parse_ptxas_log(log: str) -> dict[str, dict]:
    """Per kernel: registers, barriers, smem, cmem0, stack_frame, spill_stores, spill_loads (bytes)."""
    res: dict[str, dict] = {}
    cur = None
    for line in log.splitlines():
        m = _PTXAS_FUNC.search(line)
        if m:
            cur = res.setdefault(m.group(1), dict(registers=0, barriers=0, smem=0, cmem0=0,
                                                  stack_frame=0, spill_stores=0, spill_loads=0))
            continue
        if cur is None:
            continue
        m = _PTXAS_FRAME.search(line)
        if m:
            cur.update(stack_frame=int(m.group(1)), spill_stores=int(m.group(2)),
                       spill_loads=int(m.group(3)))
        if _PTXAS_USED.search(line):
            cur["registers"] = int(_PTXAS_USED.search(line).group(1))
            for key, pat in (("barriers", r"used (\d+) barriers"), ("smem", r"(\d+) bytes smem"),
                             ("cmem0", r"(\d+) bytes cmem\[0\]")):
                mm = re.search(pat, line)
                cur[key] = int(mm.group(1)) if mm else 0
    return res


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


def _headers_digest() -> str:
    h = hashlib.sha256()
    for p in sorted(KERNELS_DIR.glob("*.cuh")):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


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
        """Entry points of the cubin, read from its ELF section names (``.text.<kernel>``)."""
        return elf_kernels(self.cubin)

    def sass(self, kernel: str | None = None) -> str:
        """SASS of one kernel (or the whole cubin) from nvdisasm."""
        return sass.disassemble(self, kernel)

    def opcodes(self, kernel: str, base: bool = True):
        """Counter of SASS opcodes of a kernel (base names like HMMA, or full like HMMA.16816.F32)."""
        return sass.count_opcodes(self.sass(kernel), base=base)

    def classes(self, kernel: str):
        """Counter of SASS instruction classes (tensor, shared, global, shuffle, barrier, ...)."""
        return sass.count_classes(self.sass(kernel))

    def report(self, kernel: str) -> dict:
        """Resource use of a kernel from ptxas, plus the SASS class counts."""
        if kernel not in self.kernels:
            raise KeyError(f"{self.name} has no kernel {kernel!r}; it has {self.kernels}")
        if kernel not in self.resources:
            raise KeyError(f"the ptxas report of {self.name} ({self.arch}) lacks {kernel!r}; "
                           f"NVRTC's log was:\n{self.log[-2000:]}")
        return {**self.resources[kernel], **{f"sass_{k}": v for k, v in self.classes(kernel).items()}}


_ENTRY = re.compile(r"^[ \t]*(?:\.visible[ \t]+|\.weak[ \t]+)?\.entry[ \t]+([\w$]+)", re.M)


@dataclass
class PtxBuild:
    """A build's PTX, without its cubin (:func:`compile_ptx`): what the PTX interpreter runs."""
    name: str
    arch: str
    options: tuple[str, ...]
    ptx: str
    log: str                       # NVRTC's log (ptxas's report only if a whole build was made)
    key: str                       # the key of the whole build (:func:`compile` of the same)

    @property
    def kernels(self) -> list[str]:
        """The PTX's entry points: the kernels of the cubin it assembles into."""
        return sorted(set(_ENTRY.findall(self.ptx)))

    @classmethod
    def of(cls, b) -> "PtxBuild":
        return b if isinstance(b, cls) else cls(b.name, b.arch, tuple(b.options), b.ptx, b.log,
                                                 b.key)


_memory_cache: dict[str, Build] = {}
_ptx_cache: dict[str, PtxBuild] = {}


def _request(name, arch, source, defines, options) -> tuple[str, str, str, list[str], str]:
    """``(arch, label, source, NVRTC options, key)`` of a build."""
    arch = _normalize_arch(arch)
    if source is None:
        path = kernel_path(name)
        source, label = path.read_text(), str(path.relative_to(REPO_ROOT)) \
            if path.resolve().is_relative_to(REPO_ROOT) else str(path)
    else:
        label = str(name)
    opts = [f"-arch={arch}", "-std=c++17", "-lineinfo", "--ptxas-options=-v",
            f"-I{KERNELS_DIR}"] + [f"-I{d}" for d in include_dirs()]
    opts += [f"-D{k}={v}" for k, v in sorted((defines or {}).items())] + list(options)
    # the name NVRTC is given (see _nvrtc_run) is in the key: builds cached before it was
    # anchored at the repository carry another directory in their line info
    key = hashlib.sha256(json.dumps([_nvrtc_name(label), source, _headers_digest(), opts,
                                     list(nvrtc_version())]).encode()).hexdigest()[:24]
    return arch, label, source, opts, key


def compile(name: str | os.PathLike, arch: str | int | None = None, *, source: str | None = None,
            defines: dict | None = None, options: tuple[str, ...] | list[str] = ()) -> Build:
    """Compile a kernel file (``kernels/NAME.cu``) or a ``source`` string for ``arch``.

    ``arch`` defaults to the GPU in use (an error without one). ``defines`` become ``-DKEY=VALUE``.
    Kernels should be ``extern "C"`` so their names are plain. Raises :class:`CompileError` with
    NVRTC's log (file and line of each error) when the source does not compile (ptxas's errors
    included: the whole build is made here).
    """
    arch, label, source, opts, key = _request(name, arch, source, defines, options)
    if key in _memory_cache:
        return _memory_cache[key]
    t0, where = _clock(), "disk"
    build = _load_cached(key)
    if build is None:
        with _compile_lock(key):          # another process compiling the same build: wait for it
            build = _load_cached(key)
            if build is None:
                t0, where = _clock(), "nvrtc"
                if _two_step(opts):
                    front = _ptx_cache.get(key) or _load_ptx_cached(key)
                    where = "ptxas" if front else where
                    front = front or _front_end(label, arch, source, opts, key)
                    build = _assemble(front)
                else:
                    build = _nvrtc_compile(label, arch, source, opts, key)
                _store_cached(build)
    _memory_cache[key] = build
    _log_compile(build, where, t0)
    return build


def compile_ptx(name: str | os.PathLike, arch: str | int | None = None, *,
                source: str | None = None, defines: dict | None = None,
                options: tuple[str, ...] | list[str] = ()) -> PtxBuild:
    """The PTX of :func:`compile`'s build (same arguments), without running ``ptxas``: what the
    PTX interpreter needs. Raises :class:`CompileError` when NVRTC rejects the source; what only
    ``ptxas`` rejects is found by :func:`compile` (a claim on the cubin, its SASS or resources,
    and every launch on a GPU). Where the build cannot be made in two steps, the whole build."""
    arch, label, source, opts, key = _request(name, arch, source, defines, options)
    got = _memory_cache.get(key) or _ptx_cache.get(key)
    if got is not None:
        return PtxBuild.of(got)
    t0, where = _clock(), "disk"
    front = _load_cached(key) or _load_ptx_cached(key)
    if front is None and not _two_step(opts):
        return PtxBuild.of(compile(name, arch, source=source, defines=defines, options=options))
    if front is None:
        with _compile_lock(key):
            front = _load_cached(key) or _load_ptx_cached(key)
            if front is None:
                t0, where = _clock(), "nvrtc-ptx"
                front = _front_end(label, arch, source, opts, key)
                _store_ptx_cached(front)
    front = _ptx_cache[key] = PtxBuild.of(front)
    _log_compile(front, where, t0)
    return front


def _clock() -> tuple[float, float]:
    """Wall seconds and CPU seconds: this process's and its finished children's (ptxas)."""
    import time
    t = os.times()
    return time.perf_counter(), t.user + t.system + t.children_user + t.children_system


def _log_compile(build: Build, where: str, t0: tuple[float, float]) -> None:
    """With ``FRAGLAB_COMPILE_LOG=file``, one JSON line per build this process did not hold yet:
    where it came from (``nvrtc``: compiled here; ``nvrtc-ptx``: its PTX only, :func:`compile_ptx`;
    ``ptxas``: assembled here from PTX compiled before; ``disk``: the compile cache, perhaps after
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


def _nvrtc_compile(label: str, arch: str, source: str, opts: list[str], key: str) -> Build:
    """One NVRTC run, with ptxas's resource report for every kernel.

    NVRTC 12.9+ keeps a compile cache of its own (``~/.nv/ComputeCache``, shared by processes); a
    build it serves from there comes without ptxas's ``-v`` report. ``fraglab`` asks for that
    cache to be off (``CUDA_CACHE_DISABLE=1``, set on import), and where a report is missing all
    the same, it is made by running ``ptxas -v`` on the build's own PTX."""
    build = _nvrtc_build(label, arch, source, opts, key)
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


#: NVRTC options of a build made in two steps: the front end's, ``-lineinfo`` (ptxas's too) and
#: ptxas's register cap, for which NVRTC writes the same PTX for ``compute_XX`` as for ``sm_XX``
#: and ``ptxas`` makes NVRTC's cubin from it. Others (FAST_BUILD's level changes the PTX): one
#: NVRTC run.
_TWO_STEP = re.compile(r"-arch=sm_\d+a?|-std=\S+|-lineinfo|--ptxas-options=-v|-I.+|-D.+|"
                       r"--maxrregcount=\d+")


def _two_step(opts: list[str]) -> bool:
    return all(_TWO_STEP.fullmatch(o) for o in opts) and tools.ptxas_is_nvrtcs()


def _front_end(label: str, arch: str, source: str, opts: list[str], key: str) -> PtxBuild:
    """Step one: NVRTC's PTX for the virtual target (``compute_XX``), no ptxas."""
    front = [f"-arch=compute_{arch[3:]}" if o.startswith("-arch=") else o for o in opts
             if o != "--ptxas-options=-v"]
    ptx, _, log = _nvrtc_run(label, arch, source, front, cubin=False)
    return PtxBuild(label, arch, tuple(opts), ptx, log, key)


def _assemble(front: PtxBuild) -> Build:
    """Step two: ``ptxas -v`` on the PTX, as NVRTC runs it (its messages name the PTX as NVRTC's
    do, "application ptx input"). A ptxas error is a :class:`CompileError`."""
    import subprocess
    import tempfile
    extra = [o for o in front.options if o == "-lineinfo" or o.startswith("--maxrregcount")]
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
        src.write_text(front.ptx)
        r = subprocess.run([str(find_tool("ptxas")), f"-arch={front.arch}", "-v", *extra, str(src),
                            "-o", str(out)], capture_output=True, text=True)
        log = (r.stdout + r.stderr).replace(f"ptxas {src}", "ptxas application ptx input")
        if r.returncode != 0:
            raise CompileError(front.name, front.arch, (front.log + "\n" + log).strip())
        cubin = _complete_elf(out.read_bytes())
    build = Build(name=front.name, arch=front.arch, options=front.options, ptx=front.ptx,
                  cubin=cubin, log=(front.log + "\n" + log).strip(), key=front.key,
                  resources=parse_ptxas_log(log))
    missing = sorted(set(build.kernels) - set(build.resources))
    if missing:
        raise ToolchainError(f"ptxas assembled {front.name} for {front.arch} without reporting the "
                             f"resources of {', '.join(missing[:5])}. Its log was:\n{log[-1500:]}")
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


def _nvrtc_build(label: str, arch: str, source: str, opts: list[str], key: str) -> Build:
    ptx, cubin, log = _nvrtc_run(label, arch, source, opts)
    return Build(name=label, arch=arch, options=tuple(opts), ptx=ptx, cubin=cubin, log=log,
                 key=key, resources=parse_ptxas_log(log))


def _nvrtc_run(label: str, arch: str, source: str, opts: list[str], cubin: bool = True
               ) -> tuple[str, bytes | None, str]:
    """One NVRTC run: ``(PTX, cubin or None, log)``."""
    # NVRTC makes a relative name absolute with the process's working directory and writes it
    # into the PTX's .file lines (hence into the SASS's line info): anchor it at the repository
    # instead, so that one key gives one build wherever it is compiled from (a grading notebook
    # runs in a temporary folder). Logs show the name as given.
    where = _nvrtc_name(label)
    lib = nvrtc()
    prog = lib.createProgram(source, where, [], [])

    def program_log() -> str:
        return lib.getProgramLog(prog).rstrip("\x00").replace(where, label)
    try:
        try:
            lib.compileProgram(prog, opts)
        except lib.NVRTCError:
            raise CompileError(label, arch, program_log()) from None
        log = program_log()
        ptx = lib.getPTX(prog)
        code = lib.getCUBIN(prog) if cubin else None
    finally:
        lib.destroyProgram(prog)
    ptx = ptx.decode() if isinstance(ptx, bytes) else ptx
    return ptx.rstrip("\x00"), None if code is None else _complete_elf(bytes(code)), log


def _load_cached(key: str) -> Build | None:
    d = cache_dir() / key
    try:
        meta = json.loads((d / "meta.json").read_text())
        build = Build(ptx=(d / "kernel.ptx").read_text(), cubin=(d / "kernel.cubin").read_bytes(),
                      **meta)
    except (OSError, ValueError, TypeError):
        return None
    # a build stored without its ptxas report (NVRTC's own cache served it) is compiled again
    return build if set(build.kernels) <= set(build.resources) else None


def _load_ptx_cached(key: str) -> PtxBuild | None:
    """A build's first step, stored by :func:`compile_ptx` (``front.json`` beside its PTX)."""
    d = cache_dir() / key
    try:
        meta = json.loads((d / "front.json").read_text())
        meta["options"] = tuple(meta["options"])
        return PtxBuild(ptx=(d / "kernel.ptx").read_text(), **meta)
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _store_cached(b: Build) -> None:
    files = {"kernel.ptx": b.ptx, "kernel.cubin": b.cubin, "meta.json": json.dumps(dict(
        name=b.name, arch=b.arch, options=list(b.options), log=b.log, key=b.key,
        resources=b.resources))}
    _store_files(b.key, files)


def _store_ptx_cached(b: PtxBuild) -> None:
    _store_files(b.key, {"kernel.ptx": b.ptx, "front.json": json.dumps(dict(
        name=b.name, arch=b.arch, options=list(b.options), log=b.log, key=b.key))})


def _store_files(key: str, files: dict) -> None:
    """Write a build's files into its folder of the cache: a new folder whole (written aside,
    then renamed), or into the folder of its first step one file at a time, ``meta.json`` last
    (what :func:`_load_cached` reads first)."""
    d = cache_dir() / key
    tmp = d.with_name(d.name + f".tmp{os.getpid()}")
    try:
        tmp.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (tmp / name).write_bytes(data if isinstance(data, bytes) else data.encode())
        if not d.exists():
            os.replace(tmp, d)
        elif not (d / "meta.json").exists():
            for name in sorted(files, key=lambda n: n == "meta.json"):
                os.replace(tmp / name, d / name)
        shutil.rmtree(tmp, ignore_errors=True)
        prune_cache()
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # a read-only cache only costs a recompile


def compile_check(name: str | os.PathLike, arch: str | int, **kw) -> Build:
    """Compile to prove that a source builds for ``arch`` (the compile tests): a fast build
    (:data:`FAST_BUILD`) for the :data:`COMPILE_ONLY_ARCHES`, the course's own build (shared with
    every other use of it) for the others. ``kw`` as for :func:`compile`."""
    arch = _normalize_arch(arch)
    if arch in COMPILE_ONLY_ARCHES:
        kw["options"] = (*kw.get("options", ()), *FAST_BUILD)
    return compile(name, arch, **kw)
