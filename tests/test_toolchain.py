"""The compile path, on any machine: NVRTC, headers, cubins, the ptxas report, SASS."""
import shutil
import struct

import pytest

from fraglab import toolchain, tools
from fraglab.toolchain import ARCHES, CompileError

KERNEL_FILES = sorted(p.stem for p in toolchain.KERNELS_DIR.glob("*.cu"))


def test_include_dirs_hold_mma_headers():
    dirs = toolchain.include_dirs()
    assert any((d / "mma.h").is_file() for d in dirs)
    assert any((d / "crt" / "mma.h").is_file() for d in dirs)


def test_headers_match_nvrtc_major():
    major = toolchain.nvrtc_version()[0]
    for d in toolchain.include_dirs():
        assert tools._header_cuda_major(d) in (major, None)


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("name", KERNEL_FILES)
def test_every_kernel_compiles_for_every_target(name, arch):
    """Each kernel file builds for each target (a fast build for the compile-only targets), into
    a complete cubin for that machine with whole instructions in every kernel, read from the
    ELF alone. No listing here: nvdisasm costs ~0.5 s of CPU a run however small the cubin
    (78 runs, 30 of them read by no other test); a listing is made where a claim is made of it
    (the chapters' SASS tests, the labs' SASS checks), and that nvdisasm reads the course's
    cubins for every target is test_the_elf_header_names_the_target_as_nvdisasm_does."""
    b = toolchain.compile_check(name, arch)       # a fast build for the compile-only targets
    assert b.arch == arch and b.kernels, f"{name} defines no extern \"C\" kernel"
    assert f".target {arch}" in b.ptx
    # the cubin is an ELF for the right machine, as long as its headers say, with code in
    # every kernel: whole 16-byte instructions (sm_70 on)
    assert toolchain.elf_sm(b.cubin) == int(arch[3:].rstrip("a"))
    assert len(b.cubin) == len(toolchain._complete_elf(b.cubin)), "the cubin is cut short"
    sections = toolchain.elf_sections(b.cubin)
    for k in b.kernels:
        assert sections[f".text.{k}"] > 0 and sections[f".text.{k}"] % 16 == 0, f"no code for {k}"
        assert b.resources[k]["registers"] > 0


def test_the_elf_header_names_the_target_as_nvdisasm_does():
    for arch in ("sm_75", "sm_80", "sm_90", "sm_120"):
        b = toolchain.compile("00_hello_warp", arch)
        n = toolchain.elf_sm(b.cubin)
        assert n == int(arch[3:])
        text = b.sass()                        # nvdisasm says it one way or the other by version
        assert f"EF_CUDA_SM{n}" in text or f".target\t{arch}" in text or arch == "sm_120"
    assert toolchain.elf_sm(toolchain.compile("10_fa3_pipelining_nooverlap", "sm_90a").cubin) == 90


def test_cubin_is_padded_to_its_elf_size():
    b = toolchain.compile("00_hello_warp", "sm_90")
    shoff, = struct.unpack_from("<Q", b.cubin, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", b.cubin, 0x3A)
    assert len(b.cubin) >= shoff + shentsize * shnum


def test_compile_error_shows_file_and_line():
    src = 'extern "C" __global__ void k(float* p) {\n  p[0] = 1.0f\n}\n'
    with pytest.raises(CompileError) as e:
        toolchain.compile("labs/my_kernel.cu", "sm_80", source=src)
    assert "labs/my_kernel.cu(3)" in str(e.value) or "labs/my_kernel.cu(2)" in str(e.value)
    assert "error" in e.value.log


def test_unknown_kernel_file_lists_known_ones():
    with pytest.raises(FileNotFoundError, match="00_hello_warp"):
        toolchain.compile("no_such_kernel", "sm_90")


@pytest.mark.parametrize("bad", ["90x", "sm90a1", "compute", ""])
def test_bad_arch_is_rejected(bad):
    with pytest.raises(ValueError, match="arch"):
        toolchain.compile("00_hello_warp", bad)


def test_arch_spellings_are_equivalent():
    a = toolchain.compile("00_hello_warp", 90)
    b = toolchain.compile("00_hello_warp", "sm_90")
    assert a.key == b.key


def test_defines_change_the_build(tmp_path):
    src = 'extern "C" __global__ void k(int* p) { p[0] = VALUE; }\n'
    b1 = toolchain.compile("d.cu", "sm_80", source=src, defines={"VALUE": 1})
    b2 = toolchain.compile("d.cu", "sm_80", source=src, defines={"VALUE": 2})
    assert b1.key != b2.key and b1.cubin != b2.cubin


def test_disk_cache_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("FRAGLAB_CACHE", str(tmp_path))
    src = 'extern "C" __global__ void k(float* p) { p[threadIdx.x] *= 2.0f; }\n'
    b1 = toolchain.compile("cache_test.cu", "sm_90", source=src)
    assert (tmp_path / b1.key / "kernel.cubin").is_file()
    toolchain._memory_cache.clear()
    b2 = toolchain.compile("cache_test.cu", "sm_90", source=src)
    assert (b2.cubin, b2.ptx, b2.resources) == (b1.cubin, b1.ptx, b1.resources)


def test_a_build_another_process_is_compiling_is_waited_for_not_compiled_again(tmp_path, monkeypatch):
    """Two test workers asking for one build: the second waits on the first's lock and reads
    its build from the cache (here a marked copy stored while the lock is held)."""
    import dataclasses
    import subprocess
    import sys
    import time
    monkeypatch.setenv("FRAGLAB_CACHE", str(tmp_path))
    src = 'extern "C" __global__ void k(float* p) { p[threadIdx.x] += 3.0f; }\n'
    with toolchain.deferred_ptxas(False):       # a whole build (the tests defer ptxas: conftest)
        b = toolchain.compile("lock_test.cu", "sm_80", source=src)
    toolchain._memory_cache.clear()
    import shutil
    shutil.rmtree(tmp_path / b.key)
    child = ("from fraglab import toolchain; "
             f"print(toolchain.compile('lock_test.cu', 'sm_80', source={src!r}).log)")
    with toolchain._compile_lock(b.key):
        p = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True,
                             env={**__import__("os").environ, "FRAGLAB_CACHE": str(tmp_path)})
        time.sleep(3)                         # the child is waiting on the lock by now
        assert p.poll() is None, "the child did not wait for the lock"
        toolchain._store_cached(dataclasses.replace(b, log=b.log + "\nMARK: stored by the lock holder"))
    out, _ = p.communicate(timeout=120)
    assert "MARK: stored by the lock holder" in out


def test_ptxas_report_parsing():
    log = ("ptxas info    : Compiling entry function 'k' for 'sm_90'\n"
           "ptxas info    : Function properties for k\n"
           "ptxas         .     16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
           "ptxas info    : Used 40 registers, used 1 barriers, 1024 bytes smem, 372 bytes cmem[0]\n")
    r = toolchain.parse_ptxas_log(log)["k"]
    assert r == dict(registers=40, barriers=1, smem=1024, cmem0=372, stack_frame=16,
                     spill_stores=8, spill_loads=4)


def test_resource_report_of_a_shared_memory_kernel():
    src = ('extern "C" __global__ void k(float* p) { __shared__ float s[256];\n'
           ' s[threadIdx.x] = p[threadIdx.x]; __syncthreads(); p[threadIdx.x] = s[255 - threadIdx.x]; }\n')
    b = toolchain.compile("smem.cu", "sm_90", source=src)
    rep = b.report("k")
    assert rep["smem"] == 1024 and rep["barriers"] == 1
    assert rep["sass_shared"] == 2 and rep["sass_barrier"] >= 1


def test_a_build_does_not_depend_on_the_working_directory(tmp_path, monkeypatch):
    """NVRTC writes a relative name into the PTX's .file lines made absolute with the working
    directory; the cache key does not hold the directory, so the name is anchored at the
    repository (a graded notebook compiles in a temporary folder, the tests in the repository)."""
    src = 'extern "C" __global__ void k(float* p) { p[threadIdx.x] -= 1.0f; }\n'
    builds = []
    for i, where in enumerate((toolchain.REPO_ROOT, tmp_path)):
        monkeypatch.setenv("FRAGLAB_CACHE", str(tmp_path / f"cache{i}"))
        monkeypatch.chdir(where)
        toolchain._memory_cache.clear()
        builds.append(toolchain.compile("cwd_test.cu", "sm_80", source=src))
    assert builds[0].ptx == builds[1].ptx
    assert f'"{toolchain.REPO_ROOT / "cwd_test.cu"}"' in builds[0].ptx


def test_kernels_are_the_entry_points_not_every_function_with_code():
    # a fast build keeps device functions (lane_id, the shuffle wrappers) as functions of their own
    b = toolchain.compile("00_hello_warp", "sm_80", options=toolchain.FAST_BUILD)
    text = [n[len(".text."):] for n in toolchain.elf_sections(b.cubin) if n.startswith(".text.")]
    assert len(text) > 3 and any("lane_id" in n for n in text)
    assert b.kernels == ["hello_warp", "warp_sum", "warp_sum_strided"]


def test_compile_check_builds_the_compile_only_targets_fast():
    for arch in ARCHES:
        b = toolchain.compile_check("00_hello_warp", arch)
        fast = arch in toolchain.COMPILE_ONLY_ARCHES
        assert all(o in b.options for o in toolchain.FAST_BUILD) == fast, arch
        assert b.kernels == toolchain.compile("00_hello_warp", arch).kernels
        if not fast:                                  # the course's own build, shared
            assert b is toolchain.compile("00_hello_warp", arch)


CONSTANTS_SOURCE = r"""
#ifndef TILE
#define TILE 64
#endif
constexpr int STAGES = 3;
extern "C" __device__ const int tk_tile = TILE;
extern "C" __device__ const int tk_smem = TILE * 4 * STAGES;
extern "C" __device__ const int tk_negative = -5;
extern "C" __device__ const int tk_zero = 0;
extern "C" __device__ const int other_threads = 128;
extern "C" __global__ void __launch_bounds__(128) k(int* o) { o[threadIdx.x] = tk_tile * STAGES; }
"""


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_launch_constants_read_back_from_the_build(arch):
    """``extern "C" __device__ const int`` globals, read from the cubin by prefix; a define
    changes them; the kernel's code folds them (no load)."""
    b = toolchain.compile("constants_probe", arch, source=CONSTANTS_SOURCE)
    assert b.constants("tk_") == {"tk_tile": 64, "tk_smem": 768, "tk_negative": -5, "tk_zero": 0}
    assert b.constants("other_") == {"other_threads": 128}
    assert b.constants("none_") == {}
    b2 = toolchain.compile("constants_probe", arch, source=CONSTANTS_SOURCE, defines={"TILE": 32})
    assert b2.constants("tk_")["tk_smem"] == 384
    assert "LDG" not in b.opcodes("k")


def test_launch_constants_on_the_interpreter_are_the_builds(monkeypatch):
    """The launch path's reader (the interpreter's globals without a GPU) gives the cubin's
    values; a file without such globals is a KeyError that says what to declare."""
    from fraglab import device, launch, ptx
    monkeypatch.setattr(device, "gpu_available", lambda: False)
    b = toolchain.compile("constants_probe", "sm_80", source=CONSTANTS_SOURCE)
    prog = ptx.load("constants_probe", "sm_80", source=CONSTANTS_SOURCE)
    assert prog.constants("tk_") == b.constants("tk_")
    assert launch.constants("constants_probe", "tk_", source=CONSTANTS_SOURCE) == b.constants("tk_")
    with pytest.raises(KeyError, match='declares no launch constant none_'):
        launch.constants("constants_probe", "none_", source=CONSTANTS_SOURCE)


@pytest.mark.gpu
def test_launch_constants_on_the_gpu_are_the_builds():
    from fraglab import launch
    b = toolchain.compile("constants_probe", None, source=CONSTANTS_SOURCE)
    assert launch.constants("constants_probe", "tk_", source=CONSTANTS_SOURCE) == b.constants("tk_")


def test_a_deferred_build_stops_at_the_ptx_and_assembles_as_nvrtc_would(tmp_path, monkeypatch):
    """Within deferred_ptxas, a source for an interpreter target (no GPU) is NVRTC's PTX only;
    its kernels come from the PTX; reading its cubin runs ptxas: NVRTC's own build, byte for byte,
    report included. A PTX ptxas refuses raises CompileError when the build is assembled (a
    graded check's pass assembles every build it made: fraglab.grading.capture.run_graded)."""
    monkeypatch.setenv("FRAGLAB_CACHE", str(tmp_path))
    monkeypatch.setenv("FRAGLAB_MODE", "cpu")
    src = 'extern "C" __global__ void k(float* p) { p[threadIdx.x] = __expf(p[threadIdx.x]); }\n'
    if not toolchain._ptxas_matches_nvrtc():
        pytest.skip("the ptxas found does not make NVRTC's cubin (toolchain._probe_agrees): "
                    "builds are never deferred")
    with toolchain.deferred_ptxas() as builds:
        b = toolchain.compile("deferred.cu", "sm_80", source=src)
    assert b.deferred and builds == [b] and b.kernels == ["k"]
    assert not (tmp_path / b.key).exists(), "a deferred build is not cached whole before ptxas ran"
    # its PTX is: another process (a fresh memory cache) gets it without NVRTC, still deferred
    toolchain._memory_cache.clear()
    with monkeypatch.context() as m, toolchain.deferred_ptxas() as again:
        m.setattr(toolchain, "_nvrtc_ptx", None)                # NVRTC would be called: fails
        b2 = toolchain.compile("deferred.cu", "sm_80", source=src)
    assert b2.deferred and again == [b2] and b2.ptx == b.ptx and b2.key == b.key
    whole = toolchain._nvrtc_compile("deferred.cu", "sm_80", src, list(b.options), b.key,
                                     toolchain._nvrtc_name("deferred.cu"))
    assert b.cubin == whole.cubin and b.resources == whole.resources and not b.deferred
    assert (tmp_path / b.key / "kernel.cubin").is_file()
    # outside a block, a stored PTX costs ptxas only: NVRTC's whole build, byte for byte
    toolchain._memory_cache.clear()
    shutil.rmtree(tmp_path / b.key)                             # the whole build gone
    with monkeypatch.context() as m, toolchain.deferred_ptxas(False):   # (conftest defers)
        m.setattr(toolchain, "_nvrtc_compile", None)
        b3 = toolchain.compile("deferred.cu", "sm_80", source=src)
    assert b3.cubin == whole.cubin and b3.resources == whole.resources and not b3.deferred
    assert (tmp_path / b.key / "kernel.cubin").is_file()
    bad = 'extern "C" __global__ void k() { asm volatile("setmaxnreg.inc.sync.aligned.u32 240;"); }\n'
    with toolchain.deferred_ptxas() as builds:
        b = toolchain.compile("refused.cu", "sm_80", source=bad)
    with pytest.raises(CompileError, match="setmaxnreg|sm_80|not supported"):
        toolchain.assemble_deferred(builds)
    with toolchain.deferred_ptxas(False):
        with pytest.raises(CompileError):
            toolchain.compile("refused.cu", "sm_80", source=bad)  # outside a block: whole at once
        toolchain._memory_cache.clear()
        with pytest.raises(CompileError):
            toolchain.compile("refused.cu", "sm_80", source=bad)  # its stored PTX: refused too
