"""``python -m fraglab.ptx.difftest.hw --out DIR``: the interpreter against the GPU on what the
per-instruction differential test cannot reach: tensor-core arithmetic bit for bit
(:mod:`.tc`) and whole random programs (:mod:`.fuzz`).

Writes ``DIR/tensor_cores.json`` (per form and input class: elements compared, interpreter
differences with examples, and how many elements each neighbouring model of the tensor cores gets
wrong), ``DIR/tensor_cores_gpu_bits.npz`` (the GPU's results, to refit the model offline),
``DIR/fuzz.json`` (programs, seeds, differences with their PTX), ``DIR/fuzz_gpu_words.npz`` (the
GPU's output words of those programs, by seed, to bisect offline) and prints a summary. The
appendix's record lives in ``book/data/appendix_ptx_interpreter/`` (copy the JSON files there).

``--replay RECORD`` first runs again the programs that differed in an earlier fuzz record (a
``fuzz.json``, e.g. ``book/data/appendix_ptx_interpreter/fuzz_h200_confirm.json``): the driver's
JIT, ``ptxas -O3`` and ``ptxas -O0``, each against the interpreter, every GPU word kept
(:mod:`.fuzz_replay`: ``DIR/replay.json``, ``DIR/replay_gpu_words.npz``); then the parts
``--only`` names (``--only replay``: the replay alone).

``--published DIR`` scores the tensor-core model on the published H100/H200 test vectors
(:func:`.tc.published`; no GPU needed). Options: ``--only tc|fuzz|replay``, ``--programs N`` (fuzzed programs, default 12,000 on a GPU, 24
without), ``--seed S`` (first fuzz seed), ``--quick`` (few instances: a smoke test),
``--no-gpu`` (interpreter only; also what happens, with a message, where no GPU is found),
``--fake-gpu`` (the interpreter in the GPU's place: a self-test of the pipeline), ``--budget S`` (no fuzz batch starts after S seconds, default 150), ``--jobs N``.
Needs NumPy, and CuPy for the GPU side; run from the repository root (``PYTHONPATH=.``)."""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np


def gpu_name() -> str | None:
    """The GPU's name, or None where CuPy or a GPU is missing."""
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
        props = cupy.cuda.runtime.getDeviceProperties(0)
        name = props["name"]
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:                                              # noqa: BLE001
        return None


def _meta(gpu):
    meta = {"gpu": gpu, "python": platform.python_version(), "numpy": np.__version__,
            "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        import cupy
        meta["cupy"] = cupy.__version__
        meta["driver"] = cupy.cuda.runtime.driverGetVersion()
    except Exception:                                              # noqa: BLE001
        pass
    return meta


def tensor_cores(out: Path, gpu, quick: bool) -> dict:
    from . import tc as T
    print("tensor cores: " + ("GPU vs interpreter, bit for bit" if gpu else
                              "interpreter vs the host model only (no GPU)"), flush=True)
    t0 = time.time()
    res = T.run("fake" if gpu == "fake" else bool(gpu), quick=quick)
    bits = {f"{r['form']}|{r['class']}": r.pop("gpu_bits") for r in res if "gpu_bits" in r}
    if bits:
        np.savez_compressed(out / "tensor_cores_gpu_bits.npz", **bits)
    models: dict = {}
    for r in res:
        for k, v in r.get("model_vs_gpu", {}).items():
            models[k] = models.get(k, 0) + v
    summary = {"tests": len(res), "errors": sum("error" in r or "gpu_error" in r for r in res),
               "elements": sum(r.get("elements", 0) for r in res),
               "interp_elements": sum(r.get("interp_elements", 0) for r in res),
               "interp_vs_gpu": sum(r.get("interp_vs_gpu", 0) for r in res),
               "interp_vs_model": sum(r.get("interp_vs_model_h100", 0) for r in res),
               "model_vs_gpu": models, "seconds": round(time.time() - t0, 1)}
    (out / "tensor_cores.json").write_text(json.dumps(
        {"meta": _meta(gpu), "summary": summary, "tests": res}, indent=1))
    print(f"tensor cores: {summary['tests']} tests, {summary['errors']} errors; "
          f"interpreter vs GPU: {summary['interp_vs_gpu']} of {summary['interp_elements']} elements "
          f"differ; interpreter vs host model: {summary['interp_vs_model']}", flush=True)
    if models:
        print("  host models vs GPU (differing elements of " + f"{summary['elements']}): "
              + ", ".join(f"{k} {v}" for k, v in sorted(models.items(), key=lambda kv: kv[1])),
              flush=True)
    return summary


def fuzz(out: Path, gpu, programs: int, seed: int, budget_s: float, jobs) -> dict:
    from . import fuzz as F
    print(f"fuzz: {programs} programs from seed {seed} "
          + ("on the GPU and the interpreter" if gpu else "on the interpreter only (no GPU)"), flush=True)
    t0 = time.time()
    res = F.run(programs, seed, "fake" if gpu == "fake" else bool(gpu), jobs=jobs, budget_s=budget_s)
    words = {str(r["seed"]): r.pop("gpu_words") for r in res["rows"] if "gpu_words" in r}
    if words:                     # the GPU's output words of the recorded programs
        np.savez_compressed(out / "fuzz_gpu_words.npz", **words)
    res["meta"] = _meta(gpu)
    res["seconds"] = round(time.time() - t0, 1)
    (out / "fuzz.json").write_text(json.dumps(res, indent=1))
    print(f"fuzz: {res['programs']} programs ({res['skipped']} skipped: time budget), {res['compared']} compared, {res['differ']} differ, "
          f"{res.get('undefined_by_isa', 0)} differ only in bits the ISA leaves open, "
          f"{res.get('refused', 0)} refused by name, "
          f"{res['errors']} interpreter errors, {res.get('gpu_errors', 0)} GPU errors "
          f"({res['seconds']} s)", flush=True)
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fraglab.ptx.difftest.hw")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "difftest_hw_out")))
    ap.add_argument("--only", choices=("tc", "fuzz", "replay"), default=None)
    ap.add_argument("--replay", type=Path, default=None,
                    help="a fuzz record: replay its differing programs (jit, ptxas -O3, -O0) first")
    ap.add_argument("--causes", type=Path, default=Path(__file__).resolve().parents[3] / "tests"
                    / "data" / "fuzz_h200_confirm_causes.json",
                    help="seed -> cause of the replayed programs (for the summary)")
    ap.add_argument("--programs", type=int, default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-gpu", action="store_true")
    ap.add_argument("--published", type=Path, default=None,
                    help="score the model on Khattak and Mikaitis' model_validation folder, then stop")
    ap.add_argument("--fake-gpu", action="store_true", help="the interpreter in the GPU's place (self-test)")
    ap.add_argument("--budget", type=float, default=150.0, help="seconds for starting fuzz batches")
    ap.add_argument("--strict", action="store_true", help="exit 1 when anything differs")
    ap.add_argument("--jobs", type=int, default=None, help="fuzz worker processes (default: CPUs)")
    a = ap.parse_args(argv)
    import warnings
    warnings.simplefilter("ignore")
    np.seterr(all="ignore")
    if a.published:
        from .tc import published
        res = published(a.published)
        for k, (n, bad) in res.items():
            print(f"{k}: {bad} of {n} vectors differ")
        return int(not res or any(bad for _, bad in res.values()))
    a.out.mkdir(parents=True, exist_ok=True)
    gpu = "fake" if a.fake_gpu else (None if a.no_gpu else gpu_name())
    if gpu is None and not a.no_gpu:
        print("no GPU found (CuPy with a CUDA device is needed for the hardware comparison): "
              "running the interpreter side only", flush=True)
    print(f"device: {gpu or 'none'}; output: {a.out}", flush=True)
    status = 0
    if a.replay is not None:
        from . import fuzz_replay as R
        r = R.replay(R.seeds_of(a.replay), gpu, a.out, R.causes(a.causes))
        status |= bool(r["summary"]["jit"]["differ"])
    elif a.only == "replay":
        ap.error("--only replay needs --replay RECORD")
    if a.only in (None, "tc"):
        s = tensor_cores(a.out, gpu, a.quick)
        status |= bool(s["errors"] or s["interp_vs_gpu"] or s["interp_vs_model"])
    if a.only in (None, "fuzz"):
        n = a.programs if a.programs is not None else (12000 if gpu else 24)
        r = fuzz(a.out, gpu, n, a.seed, a.budget, a.jobs)
        status |= bool(r["differ"] or r["errors"])
    print("result: " + ("all agree" if not status else "differences found (see the JSON files)"))
    return status if a.strict else 0


if __name__ == "__main__":
    sys.exit(main())
