"""Test tiers. Every machine: unit, compile + SASS, emulator, labs and solutions through nbval in
GPU-less mode, the book build. Where CuPy sees a GPU, also: kernels against NumPy references and
nbval of book, labs and solutions in GPU mode. A skipped test says why."""
import os
import re

import numpy as np
import pytest

from fraglab import device
from cpu_profile import pytest_runtest_protocol  # noqa: F401  (FRAGLAB_CPU_PROFILE=file: CPU by test)


def pytest_configure(config):
    # Under compute-sanitizer, give every CuPy array its own cudaMalloc: with CuPy's pool, an
    # overrun past an array but inside the pool's block is memory memcheck considers valid.
    if os.environ.get("FRAGLAB_NO_MEMPOOL") == "1" and device.gpu_available():
        import cupy
        cupy.cuda.set_allocator(None)


#: Under ``--dist loadgroup`` (the Makefile's), each test file is one unit of work for a worker,
#: except these, split by one parameter whose value the test id shows (the pattern finds it):
#: their work per value is large and independent (one lab's grading runs once, in the worker
#: that holds its unit, cached by ``graded(lab)``).
SPLIT_BY = {"test_grading_fixtures.py": r"\d\d_[a-z0-9_]*[a-z0-9]", "test_labs.py": r"\d\d_[a-z0-9_]*[a-z0-9]",
            "test_toolchain.py": r"sm_\d+a?", "test_ptx_differential.py": r"^[a-z0-9_]+",
            "test_11_fused_lm_head.py": r"^[a-z0-9_]+"}
#: Handed out first, in this order: the units that take minutes on the 2-core CI machine, so that
#: no long one starts last while the other worker idles.
FIRST = ("test_grading_fixtures.py", "test_toolchain.py", "test_09_instruction_diet.py",
         "test_labs.py", "test_interpreter.py", "test_06_layout_codegen.py", "test_chapter.py")


#: A randomised test whose name says that it proves a wrong answer, a wrong kernel or a weakened
#: check fails (``mutant``): it must fail that answer on every seed it can draw, the kind of
#: test that once failed one clean run in several (``make test-suspects`` reruns them).
MUTANT_TEST = re.compile(r"wrong|weaken|mutant|missing|unsolved|bad|broken|cheat|fails")


def work_unit(nodeid: str) -> str:
    """The unit of work a test belongs to, from its node id alone: ``test_x.py``, or
    ``test_x.py:<value>`` for a file of :data:`SPLIT_BY` (the scheduler sees only node ids)."""
    import re
    path, _, rest = nodeid.partition("::")
    file = path.rsplit("/", 1)[-1]
    pattern = SPLIT_BY.get(file)
    test_id = rest.partition("[")[2]
    m = re.search(pattern, test_id) if pattern and test_id else None
    return f"{file}:{m.group(0)}" if m else file


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup``: whole units of :func:`work_unit` per worker, in collection order.
    (pytest-xdist's own loadgroup suffixes node ids with ``@group``, which pytest 9.2 no longer
    lets a plugin do: every test became a unit of its own, and a lab graded on both workers.)"""
    if config.getoption("dist", None) != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return work_unit(nodeid)

    return UnitScheduling(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:                   # what `make test-seeds` runs again on other seeds
        if {"rng", "seed"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.randomised)
        if item.get_closest_marker("randomised") and MUTANT_TEST.search(item.originalname or item.name):
            item.add_marker(pytest.mark.mutant)     # and `make test-suspects`, on several seeds
    # xdist workers see ``dist == "no"`` and the controller's choice as ``loadgroup``
    if config.getoption("loadgroup", False) or config.getoption("dist", None) == "loadgroup":
        rank = {f: i for i, f in enumerate(FIRST)}

        def order(it):                   # FIRST's order; a split file's later topics first
            file, _, value = work_unit(it.nodeid).partition(":")
            topic = value[:2]
            return rank.get(file, len(FIRST)), -int(topic) if topic.isdigit() else 0
        items.sort(key=order)
    if os.environ.get("FRAGLAB_SMALL_CASES") == "1":
        # under compute-sanitizer: every kernel still runs, on the cases small enough for the
        # PTX interpreter (the large ones only repeat the same code paths, many times slower)
        keep = [it for it in items
                if not getattr(getattr(it, "callspec", None), "params", {}).get("case", None)
                or not getattr(it.callspec.params["case"], "slow", False)]
        if len(keep) != len(items):
            config.hook.pytest_deselected(items=[it for it in items if it not in keep])
            items[:] = keep
    if device.gpu_available():
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU: {device.why_no_gpu()}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_report_header(config):
    return f"fraglab mode: {device.mode()} ({device.status_line()})"


@pytest.fixture(autouse=True)
def _ptxas_deferred():
    """Every test compiles without ptxas until something reads a build's cubin, ptxas report or
    listing (:func:`fraglab.toolchain.deferred_ptxas`; only where the interpreter runs the build:
    no GPU, sm_80 or sm_90a, no option but defines). A kernel the interpreter runs is read from
    its PTX alone, and ptxas is about half of each compile: a test whose claim is the
    interpreter's verdict (a case's values, a mutant's failure) never pays for it; one that reads
    registers, spills, SASS or constants from the cubin gets NVRTC's own cubin, byte for byte.
    That every kernel file assembles for every target is test_toolchain's
    (test_every_kernel_compiles_for_every_target reads each build's ptxas report)."""
    from fraglab import toolchain
    with toolchain.deferred_ptxas():
        yield


@pytest.fixture
def foreign():
    """``(make, words)``: ``make(array)`` turns a NumPy array into what this mode's wrappers must
    refuse (a NumPy array on a GPU, a list on the interpreter), ``words`` what the error says."""
    if device.gpu_available():
        return (lambda a: a.get() if hasattr(a, "get") else np.asarray(a)), "cupy.asarray"
    return (lambda a: np.asarray(a).tolist()), "must be a numpy.ndarray"


@pytest.fixture
def xp():
    """The array module wrappers take in this mode: CuPy on a GPU, NumPy on the interpreter."""
    if device.gpu_available():
        import cupy
        return cupy
    return np


#: Draws another set of seeds for the whole suite (every test's seed moves with it), to run the
#: randomised tests on more inputs: ``FRAGLAB_TEST_SEED=7 make test``. Unset: 0.
SEED_ENV = "FRAGLAB_TEST_SEED"


def seed_of(nodeid: str) -> int:
    """A test's seed: its node id's CRC-32 (the same in every process, whatever the order of the
    tests or the worker that runs them, whatever PYTHONHASHSEED), moved by $FRAGLAB_TEST_SEED."""
    import zlib
    return zlib.crc32(nodeid.encode()) ^ (int(os.environ.get(SEED_ENV, "0")) * 0x9E3779B1 % 2**32)


@pytest.fixture
def rng(request):
    """Random inputs seeded by the test (:func:`seed_of`): a run repeats the last one's draws,
    serially or on any worker, and a failure repeats (the seed is printed with it)."""
    seed = seed_of(request.node.nodeid)
    print(f"rng seed {seed} ({SEED_ENV}={os.environ.get(SEED_ENV, '0')})")
    return np.random.default_rng(seed)


@pytest.fixture
def seed(request) -> int:
    """The test's seed (:func:`seed_of`) as a number, for what takes a seed rather than a
    generator (the grader's ``seed=``); the test is ``randomised`` as with :func:`rng`."""
    value = seed_of(request.node.nodeid)
    print(f"seed {value} ({SEED_ENV}={os.environ.get(SEED_ENV, '0')})")
    return value


@pytest.fixture
def check_supported(rng):
    """``check_supported(problem, case)``: ``problem.check(case)`` on fresh random inputs, or a
    skip that says why this machine cannot run the case (``problem.supported``)."""
    def check(problem, case):
        ok, why = problem.supported(case)
        if not ok:
            pytest.skip(why)
        return problem.check(case, rng)
    return check
