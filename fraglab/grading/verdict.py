"""The verdict file a graded cell writes for the one-line report (:mod:`.run` reads it): JSON,
signed with HMAC-SHA256 under a key that :mod:`.run` draws for each run and hands to the graded
notebooks' kernels alone (:data:`KEY_ENV`; the kernel takes it out of its environment at once,
and the process that runs a learner's code never has it). :mod:`.run` takes no verdict without
this run's signature. A session's first verdict stays: a learner's cell that failed in
:func:`.sandbox.bind` is the reason, not the check that then missed its function.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os

KEY_ENV = "FRAGLAB_GRADING_KEY"
#: For the course's mutation tests only: ``FRAGLAB_GRADING_MUTANT=<name>`` weakens one check
#: function in the kernel so that it always succeeds (:func:`.capture._weaken`), or,
#: ``in_process``, runs the learner's cells in the kernel (:func:`.sandbox.bind`); the fixture
#: tests must then fail. Only the grader's API sets it (:func:`.run.run_notebooks`'s
#: ``mutant``): a value in the environment of ``make grade`` never reaches the kernel, and the
#: learner's process never sees it.
MUTANT_ENV = "FRAGLAB_GRADING_MUTANT"
#: For the course's tests only: ``FRAGLAB_GRADING_LIMIT_S=<seconds>`` lowers the time a learner's
#: process may take (:data:`.sandbox.LIMIT_S`, never raises it), so that a fixture that loops
#: until the limit stops it costs seconds, not 20. Set, like :data:`MUTANT_ENV`, only through the
#: grader's API (:func:`.run.run_notebooks`'s ``limit_s``).
LIMIT_ENV = "FRAGLAB_GRADING_LIMIT_S"
#: For the course's tests only: ``FRAGLAB_GRADING_SEED=<int>`` seeds every
#: ``np.random.default_rng()`` a graded notebook's kernel draws without a seed (the solution's
#: "fresh inputs on every run", the checks' own draws: :func:`.capture.seed_inputs`), so that a
#: fixture's grading repeats its draws and another seed draws others. Set, like
#: :data:`MUTANT_ENV`, only through the grader's API (:func:`.run.run_notebooks`'s ``seed``); a
#: learner's grading draws fresh inputs.
SEED_ENV = "FRAGLAB_GRADING_SEED"

_key = None


def secret() -> bytes:
    """This kernel's signing key (read once, then gone from the environment)."""
    global _key
    if _key is None:
        _key = os.environ.pop(KEY_ENV, "").encode()
    return _key


def sign(obj: dict, key: bytes) -> dict:
    payload = json.dumps(obj, sort_keys=True)
    return {"payload": payload, "mac": hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()}


def check(doc: dict, key: str) -> dict | None:
    """The verdict inside a signed file's content, or None if the signature is not ``key``'s."""
    try:
        payload, mac = doc["payload"], doc["mac"]
        good = hmac.new(key.encode(), payload.encode(), hashlib.sha256).hexdigest()
        if hmac.compare_digest(good, str(mac)):
            return json.loads(payload)
    except (ValueError, KeyError, TypeError):
        pass
    return None


def write(result_file, **obj) -> None:
    if not result_file or os.path.exists(result_file):
        return                                  # a session's first verdict stays (its reason)
    key = secret()
    with open(result_file, "w") as f:
        json.dump(sign(obj, key) if key else obj, f)


def reason(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    where = getattr(e, "learner_where", "")
    return f"{text} (raised at {where})" if where else text


def write_failure(result_file, exercise: str, e: BaseException, where: str,
                  says_itself: bool = False) -> None:
    """The verdict of a learner's cell that failed before its check: names the cell
    (``says_itself``: the error's text already says what happened)."""
    text = reason(e)
    if not says_itself:
        text = f"{where} raised {type(e).__name__}: {text}"
    write(result_file, exercise=exercise, ok=False, error="", reason=text, output="",
          category=classify(e)[0])


#: Where a reason's detail (NVRTC's whole log) starts: ``-v`` shows it, the one-line report not.
DETAIL = "\n\x1f"
#: What a failed exercise is, in the learner's words (the first words of its reason).
NOT_COMPILED, WRONG, CRASHED, NOT_ATTEMPTED = (
    "does not compile", "runs but gives wrong values", "crashes or hangs", "not attempted")
#: Exceptions (by class name, anywhere in the chain) of code that crashed or hung: a process or
#: kernel out of time or dead, the PTX interpreter's diagnostics, a CUDA error.
_CRASHES = ("KernelTimeout", "ExerciseProcessError", "PTXError", "CUDARuntimeError",
            "CUDADriverError", "CompileException", "RecursionError", "MemoryError")


def _chain(e: BaseException):
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def classify(e: BaseException) -> tuple[str, str | None, str | None]:
    """``(category, reason, detail)`` of a failed check's exception: which of
    :data:`NOT_COMPILED`, :data:`WRONG`, :data:`CRASHED`, :data:`NOT_ATTEMPTED` it is; for a
    compile error, the reason in the learner's terms (one line per error, ``cell N, line L:
    message``: :func:`.cuda_region.learner_errors`) and NVRTC's whole log as the detail (None:
    the exception's own text is the reason)."""
    chain = list(_chain(e))
    compile_error = next((x for x in chain if hasattr(x, "log") and hasattr(x, "refused")), None)
    if compile_error is not None:
        from .cuda_region import learner_errors
        log = compile_error.log or ""
        lines = ([l for l in log.splitlines() if l.strip()] if compile_error.refused else
                 learner_errors(log, compile_error.source, compile_error.name))
        lines = lines or [l.strip() for l in log.splitlines() if l.strip()][:1] or ["(no log)"]
        stub = any("not written yet" in l for l in lines)
        return (NOT_ATTEMPTED if stub else NOT_COMPILED), "\n".join(lines), \
            f"{reason(e)}\n\nNVRTC's log ({compile_error.name}, {compile_error.arch}):\n{log.strip()}"
    names = {c.__name__ for x in chain for c in type(x).__mro__}
    if "NotImplementedError" in names or any(str(x).startswith("NotImplementedError")
                                              for x in chain):
        return NOT_ATTEMPTED, None, None
    if names & set(_CRASHES):
        return CRASHED, None, None
    return (WRONG if "GradeError" in names else CRASHED), None, None
