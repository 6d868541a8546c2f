"""Every topic's ``PROBLEMS`` on their small cases, each checked by its own ``Problem`` (its
inputs, float64 reference, tolerance and error measure): the child that compute-sanitizer watches
in ``.ci/gpu sanitize``, one process per tool and topic (pytest is too slow under a sanitizer).

    python3 .ci/sanitize_topics.py --topics            # the topics it checks, one a line
    python3 .ci/sanitize_topics.py --list [TOPIC ...]  # what a run would launch; launches nothing
    compute-sanitizer --tool racecheck python3 .ci/sanitize_topics.py [TOPIC ...]
    python3 .ci/sanitize_topics.py --summary OUT_DIR   # the logs -> OUT_DIR/sanitizer.json

The topics are the book's (``book/NN_name.ipynb``) whose package exports ``PROBLEMS``
(:func:`fraglab.problem.topic_problems`); the cases are each problem's small ones
(``Problem.interpreter_cases``: the cases not marked ``slow``, which the PTX interpreter also
runs), in the problem's order, on inputs drawn from one seeded generator. A case this machine
cannot run (``Problem.supported``) is skipped and says why. Each check prints one line, ``ok`` or
``BAD`` (a wrong output, or an exception), and the run exits 1 when any is ``BAD``: a kernel that
computes nothing is no proof of a clean run.

The summary is the record the chapters cite (``book/data/sanitizer.json``, read by
:func:`fraglab.report.sanitizer_verdict`).
"""
import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # the checkout's fraglab

from fraglab import launch  # noqa: E402
from fraglab.problem import topic_problems  # noqa: E402

LOG_GLOB = "sanitize_topics_*_*.log"     # what .ci/gpu names the logs: _<tool>_<topic>.log


def selection(topics=None, limit: int | None = None) -> list[tuple[str, str, object, object]]:
    """``(topic, name, problem, case)`` for every small case of every problem of ``topics``
    (default: all of them), at most ``limit`` cases a problem."""
    out = []
    for topic, problems in topic_problems(topics).items():
        for name, problem in problems.items():
            cases = problem.interpreter_cases[:limit]
            out += [(topic, name, problem, case) for case in cases]
    return out


def check(rng, topic, name, problem, case) -> tuple[str, bool]:
    """One line for the log and whether it is fine (a skip is)."""
    head = f"{topic} {name} [{case}]"
    ok, why = problem.supported(case)
    if not ok:
        return f"skip {head}: {why}", True
    try:
        res = problem.evaluate(case, rng)
    except Exception as exc:           # a failed launch is a finding, and the next may still run
        return f"BAD {head}: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}", False
    detail = "exact" if res.tol == 0 else f"rel. error {res.error:.2e} (tol {res.tol:g})"
    return f"{'ok ' if res.ok else 'BAD'} {head}: {detail}", res.ok


def run(topics, limit, seed: int) -> int:
    import numpy as np
    if not launch.interpreted():     # without a GPU the script runs on the interpreter: a dry run
        import cupy as cp
        cp.cuda.set_allocator(None)  # each array its own allocation, so memcheck knows where it ends
    rng, bad, t0 = np.random.default_rng(seed), 0, time.perf_counter()
    for item in selection(topics, limit):
        line, fine = check(rng, *item)
        bad += not fine
        print(line, flush=True)
    print(f"{bad} wrong outputs, {time.perf_counter() - t0:.0f} s")
    return 1 if bad else 0


def listing(topics, limit) -> int:
    items = selection(topics, limit)
    for topic, name, problem, case in items:
        ok, why = problem.supported(case)
        print(f"{topic} {name} [{case}]" + ("" if ok else f"  (skipped here: {why})"))
    print(f"{len(items)} checks")
    return 0


def summary(out_dir) -> int:
    """``sanitizer.json`` from the logs ``.ci/gpu sanitize`` left in ``out_dir``
    (:data:`LOG_GLOB`): per tool and topic, the tool's summary line, whether it is clean, the
    checks that ran, were wrong and were skipped."""
    import json
    import re
    from fraglab import bench
    out = Path(out_dir)
    doc = {"script": ".ci/sanitize_topics.py",
           "cases": "each topic's PROBLEMS, every case not marked slow", "tools": {}}
    try:
        doc["device"] = bench.device_info()
    except Exception as exc:               # the verdicts matter more than the device line
        doc["device"] = {"error": str(exc)[:200]}
    for log in sorted(out.glob(LOG_GLOB)):
        tool, topic = log.stem.removeprefix("sanitize_topics_").split("_", 1)
        text = log.read_text(errors="replace")
        lines = [ln for ln in text.splitlines() if re.search(r"(ERROR|RACECHECK) SUMMARY", ln)]
        marks = re.findall(rf"^(ok |BAD|skip) {topic} ", text, re.M)
        clean = bool(lines) and bool(re.search(r": 0 (errors|hazards)", lines[-1])) \
            and "wrong outputs" in text and "BAD" not in marks
        doc["tools"].setdefault(tool, {})[topic] = {
            "clean": clean, "launches": marks.count("ok ") + marks.count("BAD"),
            "wrong": marks.count("BAD"), "skipped": marks.count("skip"),
            "summary": lines[-1].strip("= ") if lines else "no summary line (the run did not finish)"}
    (out / "sanitizer.json").write_text(json.dumps(doc, indent=1) + "\n")
    print({t: {k: v["clean"] for k, v in r.items()} for t, r in doc["tools"].items()})
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("topics", nargs="*", help="topics to check (default: every topic with PROBLEMS)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--topics", dest="print_topics", action="store_true",
                      help="print the topics, one a line")
    mode.add_argument("--list", action="store_true", help="print the checks; launch nothing")
    mode.add_argument("--summary", metavar="OUT_DIR", help="write OUT_DIR/sanitizer.json")
    ap.add_argument("--limit", type=int, default=None, help="at most this many cases a problem")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.summary:
        return summary(args.summary)
    topics = args.topics or None
    if args.print_topics:
        print("\n".join(topic_problems(topics)))
        return 0
    return listing(topics, args.limit) if args.list else run(topics, args.limit, args.seed)


if __name__ == "__main__":
    sys.exit(main())
