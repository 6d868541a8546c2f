"""The process that runs a learner's code while it is graded (fraglab.grading.sandbox, jail,
exposed): what it refuses, what it may use (services counted in the grader, handles with their
attributes), how it ends (death, a loop, a broken format: each reported at once, with the
exercise), and the wall-clock limits on kernels (fraglab.grading.limits)."""
import os
import time

import numpy as np
import pytest

from fraglab import grade, warp
from fraglab.grading import exposed, limits, sandbox
from nbval_run import ROOT

CODE = '''
def add(a, b):
    return a + b
def butterfly(v):
    for offset in (16, 8, 4, 2, 1):
        v = v + warp.shfl_xor_sync(warp.FULL_MASK, v, offset)
    return v
def env():
    return dict(os.environ), os.getcwd()
def attempt(what):
    return eval(what)
'''


@pytest.fixture(scope="module")
def child():
    import sys
    ns = {"warp": warp, "grade": grade, "np": np, "sys": sys, "os": os, "lay": np.arange(4),
          "fig": None}
    os.environ["FRAGLAB_GRADING_MUTANT"] = "fail"          # the grader's environment...
    try:
        c = sandbox.Child("exercise 1", "00_hello_warp", ("1",), ns,
                          ["warp", "grade", "np", "sys", "os", "lay"], checks=["shuffles"])
    finally:
        del os.environ["FRAGLAB_GRADING_MUTANT"]
    got = c.exec_cell(CODE, "<exercise 1, notebook cell 5>", ["add", "butterfly", "env", "attempt"],
                      "running the test's cell")
    assert all(v["kind"] == "function" for v in got.values()), got
    yield c
    c.close()


def test_the_child_computes_with_plain_data(child):
    assert child.call("add", (2, 3), {}) == 5
    out = child.call("add", (np.arange(3, dtype=np.float32), np.float32(1)), {})
    assert out.dtype == np.float32 and out.tolist() == [1, 2, 3]
    assert child.call("attempt", ("lay.sum()",), {}) == 6         # the notebook's plain data


def test_the_childs_environment_is_scrubbed(child):
    env, cwd = child.call("env", (), {})
    assert not any(k.startswith(("FRAGLAB", "PYTHON")) for k in env), env
    assert env["HOME"] == cwd == child.dir and not cwd.startswith(str(ROOT))


@pytest.mark.parametrize("what, words", [
    (f"open({str(ROOT / 'solutions' / '00_hello_warp.ipynb')!r}).read()", "refused to open"),
    (f"os.listdir({str(ROOT)!r})", "refused to list"),
    ("open('/tmp/fraglab-outside.txt', 'w')", "refused to open"),
    ("os.fork()", "refused os.fork"),
    ("os.system('true')", "refused os.system"),
    ("__import__('subprocess')", "refused to import subprocess"),
    ("__import__('ctypes')", "refused to import ctypes"),
    ("__import__('socket')", "refused to import socket"),
    ("__import__('fraglab.grade', fromlist=['fail']).fail", "refused"),
    ("__import__('IPython').get_ipython()", "refused"),
    ("os.kill(os.getppid(), 0)", "signal another process"),
    ("grade.fail", "refused `grade.fail`"),
    ("vars(grade).update(fail=None)", "refused"),
    ("setattr(grade, 'fail', None)", "refused `grade.fail`"),
    ("shuffles.calls", "belongs to a check"),
    ("vars(warp)['reduce_xor']", "refused `warp.reduce_xor`"),
    ("warp.reduce_xor", "refused `warp.reduce_xor`"),
    ("sys.modules['fraglab.warp'].reduce_xor", "refused"),
])
def test_the_child_refuses_and_says_so(child, what, words):
    with pytest.raises(Exception, match=words) as e:
        child.call("attempt", (what,), {})
    assert "line" in e.value.learner_where                 # where in the learner's cell


def test_the_walls_that_stand(child):
    assert {"audit hook", "import gate", "rlimits"} <= set(child.layers)
    if os.uname().sysname == "Linux" and os.uname().machine in ("x86_64", "aarch64"):
        assert "seccomp" in child.layers


def test_a_value_that_is_not_plain_data_does_not_cross(child):
    with pytest.raises(TypeError, match="not plain data"):
        child.call("attempt", ("type('Always', (), {'__eq__': lambda s, o: True})()",), {})
    with pytest.raises(TypeError, match="cannot pass"):          # a module: never handed out
        child.call("add", (os, 1), {})


def test_services_run_in_the_grader_where_checks_count_them(child):
    v = np.random.default_rng(0).standard_normal(32).astype(np.float32)
    with grade.count_calls(warp, "shfl_xor_sync") as shuffles:
        got = child.call("butterfly", (v,), {})
    assert shuffles.calls == 5 and np.allclose(got, v.sum(), atol=1e-5)
    with pytest.raises(warp.WarpError):                     # the course's error, both ways
        child.call("attempt", ("warp.shfl_xor_sync(0xFFFF, np.arange(32.0), 16)",), {})


def test_handles_give_only_the_attributes_exposed_lists(monkeypatch):
    import types
    from fraglab import bench
    fake = types.ModuleType("fraglab.fake")
    fake.timing = lambda: bench.Timing("t", [1.0, 2.0, 3.0])
    fake.__name__ = "fraglab.fake"
    monkeypatch.setitem(exposed.SERVICES, "99_fake", {"1": {"fake": ("timing",)}})
    c = sandbox.Child("exercise 1", "99_fake", ("1",), {"fake": fake}, ["fake"])
    try:
        c.exec_cell("def f(what):\n    t = fake.timing()\n    return eval(what)\n", "<exercise 1>",
                    ["f"], "test")
        assert c.call("f", ("t.median_ms",), {}) == 2.0
        assert c.call("f", ("t.to_dict()['n']",), {}) == 3
        assert c.call("f", ("t",), {}).median_ms == 2.0      # handed back: the grader's object
        for what in ("t.stats", "t.meta", "t.from_dict"):
            with pytest.raises(AttributeError):
                c.call("f", (what,), {})
    finally:
        c.close()


def _child_with(code, names):
    c = sandbox.Child("exercise 9", "00_hello_warp", ("1",), {"np": np}, ["np"])
    c.exec_cell(code, "<exercise 9, notebook cell 3>", names, "test")
    return c


def test_a_process_that_exits_fails_its_exercise_at_once():
    c = _child_with("import os\ndef f():\n    os._exit(3)\n", ["f"])
    t = time.monotonic()
    with pytest.raises(sandbox.ExerciseProcessError, match="exercise 9: .*exited with status 3"):
        c.call("f", (), {})
    assert time.monotonic() - t < 5
    with pytest.raises(sandbox.ExerciseProcessError):       # and stays failed
        c.call("f", (), {})


def test_a_loop_fails_its_exercise_at_the_limit(monkeypatch):
    monkeypatch.setattr(sandbox, "LIMIT_S", 1.5)
    c = _child_with("def f():\n    while True:\n        pass\n", ["f"])
    t = time.monotonic()
    with pytest.raises(sandbox.ExerciseProcessError, match="did not finish within 1.5 s"):
        c.call("f", (), {})
    assert time.monotonic() - t < 5


def test_a_child_that_breaks_the_format_fails_its_exercise():
    c = _child_with("import os\ndef f():\n    os.write(int(__import__('sys').argv[3]), b'junk\\n')\n"
                    "    return 1\n", ["f"])
    with pytest.raises(sandbox.ExerciseProcessError, match="broke the grading format"):
        c.call("f", (), {})


def test_an_interpreter_kernel_meets_the_wall_clock_limit(monkeypatch):
    t = time.monotonic()
    with pytest.raises(limits.KernelTimeout, match="did not finish within 0.3 s"):
        with limits._alarm(0.3, "spin"):
            while True:
                pass
    assert time.monotonic() - t < 2


def test_a_deadlocking_kernel_is_the_interpreters_deadlock_within_30_s():
    import json
    from fraglab import device, hello_warp, launch, ptx
    from fraglab.grading import build
    sol = json.loads((ROOT / "solutions" / "00_hello_warp.ipynb").read_text())
    cell = next("".join(c["source"]) for c in sol["cells"]
                if "WARP_SUM_SOURCE = r" in "".join(c["source"]))
    body = (ROOT / "tests" / "fixtures" / "wrong_answers" / "00_hello_warp" / "3" / "deadlock.txt").read_text()
    ns = {}
    exec(build.replace_bodies(cell, {"3": body}), ns)
    x = np.ones((2, 32), np.float32)
    t = time.monotonic()
    with device.forced_mode("cpu"), pytest.raises(ptx.Deadlock, match="deadlock"):
        hello_warp.warp_sum(launch.to_device(x), source=ns["WARP_SUM_SOURCE"])
    assert time.monotonic() - t < 30


SPIN = r"""extern "C" __global__ void fraglab_test_spin(volatile int* flag) { while (flag[0] == 0) { } }"""


@pytest.mark.gpu
def test_a_kernel_that_never_ends_on_the_gpu_fails_at_the_limit(monkeypatch):
    """A GPU kernel that spins (on a flag in mapped host memory, so that the test can let it go
    afterwards) fails its launch after GPU_LIMIT_S, saying so, instead of hanging the check."""
    import ctypes
    import cupy as cp
    from fraglab import launch
    monkeypatch.setattr(limits, "GPU_LIMIT_S", 2.0)
    rt = cp.cuda.runtime
    ptr = rt.hostAlloc(8, rt.hostAllocMapped | rt.hostAllocPortable)
    flag = (ctypes.c_int * 2).from_address(ptr)
    flag[0] = 0
    fn = launch.get_kernel("fraglab_test_spin.cu", "fraglab_test_spin", source=SPIN)
    limits.install()
    try:
        t = time.monotonic()
        with pytest.raises(limits.KernelTimeout, match="did not finish within 2 s: a deadlock"):
            launch.launch(fn, 1, 1, (np.uint64(ptr),))
        assert time.monotonic() - t < 10
    finally:
        flag[0] = 1                                   # let it go, and wait for it
        cp.cuda.get_current_stream().synchronize()
        limits.uninstall()
    launch.launch(fn, 1, 1, (np.uint64(ptr),), sync=True)   # the plain path is back
