"""Whole random programs on the GPU and on the interpreter, compared bit for bit.

:func:`program` turns a seed into one small PTX kernel (2 blocks of 64 threads): a prologue loads
16 random words per thread into integer, f32, 64-bit, f64 registers and predicates; a body of
random instructions follows (integer and bit operations, f32 in every rounding mode, f64, f16x2,
conversions, float immediates including -0.0, NaN and subnormals, predicated instructions,
divergent branches and loops with lane-dependent trip counts; at the top level only: shuffles,
votes, redux, shared-memory exchanges between threads of both warps with every load/store width,
shared reductions, reads of the kernel's own ``.const`` and ``.global`` tables, stores and loads
of every width through the thread's global and local scratch, atomics on the thread's own
addresses, read-only and volatile loads); an epilogue
stores every register. Results the ISA leaves open are kept out (no approximate instructions, no
atomics' return values, no integer division, collectives only where the whole warp takes part).

:func:`module` packs many kernels into one module (several kernels per process, each with its
own constant and global tables); :func:`run` runs batches in worker processes (each with its own
CUDA context) on the GPU and the interpreter and compares each program's output words. The seed
of every program, and the PTX of every program that differs, go into the record."""
from __future__ import annotations

import os
import time

import numpy as np

from .fuzzgen import (BLOCKS, IN_WORDS, OUT_WORDS, SCRATCH, THREADS, Gen,  # noqa: F401
                               inputs, module, program)


def open_words(seed: int, text, k: int = 0, mine=None, runs: int = 2) -> np.ndarray:
    """The output words of kernel ``fz{k}`` (program ``seed``) that depend on bits the PTX ISA
    leaves open: the program run again on the interpreter with those bits drawn instead
    (:func:`fraglab.ptx.nan.open_bits`: NaN results of neg/abs.f32 "yield an unspecified NaN",
    arithmetic and min/max of NaNs give "NaN"), ``runs`` times (pairs in which every sign and
    payload bit takes both values); a word that changes in any run is open, whatever it went
    through (a move to an integer register, copysign, a store, a comparison or a branch). ``mine``: the interpreter's words from a plain run (else run here).
    A perturbed run that fails opens nothing (the comparison stays strict). ``text``: the module's
    PTX, or its parsed :class:`~fraglab.ptx.program.Program`."""
    from .. import nan
    from ..program import Program
    prog = Program(text) if isinstance(text, str) else text
    base = _interp_one(prog, k, seed) if mine is None else mine
    out = np.zeros(BLOCKS * THREADS * OUT_WORDS, bool)
    if isinstance(base, str):
        return out
    for r in range(runs):
        with nan.open_bits(seed * 7919 + r // 2, flip=bool(r % 2)):
            alt = _interp_one(prog, k, seed)
        if not isinstance(alt, str):
            out |= alt != base
    return out


def undefined_words(hw: np.ndarray, mine: np.ndarray, open_mask: np.ndarray) -> np.ndarray:
    """Output words where the two sides differ only in what the ISA leaves open (:func:`open_words`).
    The rest are compared exactly."""
    return (hw != mine) & open_mask


def compared_words() -> np.ndarray:
    """The output words compared (registers, predicates and scratch of every thread)."""
    row = np.zeros(OUT_WORDS, bool)
    row[:34] = True
    row[SCRATCH // 4:] = True
    return np.tile(row, BLOCKS * THREADS)


# ---- running -----------------------------------------------------------------------------------

def _first_line(e: Exception) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"


def _interp_one(prog, k: int, seed: int):
    """Kernel ``fz{k}`` of a parsed module on program ``seed``'s inputs: its output words, or an
    error string."""
    from ..program import launch
    out = np.zeros(BLOCKS * THREADS * OUT_WORDS, np.uint32)
    try:
        launch(prog, f"fz{k}", BLOCKS, THREADS, (inputs(seed), out), echo_printf=False)
        return out
    except Exception as e:                                         # noqa: BLE001
        return _first_line(e)


def run_interp(seeds, text: str) -> list:
    """Each program's output words (or an error string) on the interpreter: one parse per module."""
    from ..program import Program
    try:
        prog = Program(text)
    except Exception as e:                                         # noqa: BLE001
        return [f"parse: {_first_line(e)}"] * len(seeds)
    return [_interp_one(prog, k, s) for k, s in enumerate(seeds)]


def refused(err: str) -> bool:
    """An interpreter error that names what the interpreter does not model (not a failure)."""
    return err.startswith("UnsupportedInstruction")


def run_gpu(seeds, text: str, image: bytes | None = None) -> list:
    """Each program's output words (or an error string) on the GPU: one module load (JIT) per
    batch, every kernel launched on its slice of one input and one output buffer, one copy back.
    A module the driver rejects is retried program by program. ``image``: the module already
    assembled (a cubin of ``text``: :mod:`.fuzz_replay`) instead of the driver's JIT."""
    import cupy
    n = len(seeds)
    per_in, per_out = BLOCKS * THREADS * IN_WORDS, BLOCKS * THREADS * OUT_WORDS
    try:
        mod = cupy.cuda.function.Module()
        mod.load(image if image is not None else text.encode())
        fns = [mod.get_function(f"fz{k}") for k in range(n)]
    except Exception:                                              # noqa: BLE001
        if n == 1 or image is not None:
            raise
        out = []
        for s in seeds:
            try:
                out += run_gpu([s], module([s]))
            except Exception as e:                                 # noqa: BLE001
                out.append(f"JIT: {_first_line(e)}")
        return out
    din = cupy.asarray(np.concatenate([inputs(s) for s in seeds]))
    dout = cupy.zeros(n * per_out, np.uint32)
    for k, fn in enumerate(fns):
        fn((BLOCKS, 1, 1), (THREADS, 1, 1), (din[k * per_in:(k + 1) * per_in],
                                            dout[k * per_out:(k + 1) * per_out]))
    cupy.cuda.get_current_stream().synchronize()
    host = dout.get()
    return [host[k * per_out:(k + 1) * per_out] for k in range(n)]


def compare(seed: int, k: int, text, h, m, examples: int = 8, open_mask=None) -> dict:
    """The record of one program: the GPU's words ``h`` against the interpreter's ``m`` (either
    may be an error string). Keys beside ``seed``: ``refused`` (the interpreter names an
    instruction it does not model), ``interp_error``, ``gpu_error``, ``differ`` and ``examples``
    (words that differ where the ISA defines them), ``undefined_words`` (words that differ only
    in bits the ISA leaves open: :func:`open_words`; ``open_mask()`` gives them when the caller
    keeps them)."""
    row = {"seed": seed}
    if isinstance(m, str):
        row["refused" if refused(m) else "interp_error"] = m
    if h is None:
        return row
    if isinstance(h, str):
        row["gpu_error"] = h
        return row
    if isinstance(m, str):
        return row
    mask = compared_words()
    diff = (h != m) & mask
    if not diff.any():
        return row
    opened = open_mask() if open_mask is not None else open_words(seed, text, k, m)
    loose = undefined_words(h, m, opened) & mask
    bad = np.flatnonzero(diff & ~loose)
    if loose.any():
        row["undefined_words"] = int(loose.sum())
    shown = bad if len(bad) else np.flatnonzero(loose)
    if len(bad):
        row["differ"] = int(len(bad))
    row["examples"] = [{"thread": int(i // OUT_WORDS), "word": int(i % OUT_WORDS),
                        "gpu": hex(int(h[i])), "interp": hex(int(m[i]))} for i in shown[:examples]]
    return row


def _job(seeds, gpu, examples: int = 8) -> dict:
    """One batch in a worker process: GPU, interpreter, comparison."""
    import warnings
    warnings.simplefilter("ignore")
    np.seterr(all="ignore")
    t0 = time.time()
    text = module(seeds)
    hw = None
    if gpu:
        try:
            hw = run_interp(seeds, text) if gpu == "fake" else run_gpu(seeds, text)
        except Exception as e:                                     # noqa: BLE001
            hw = [f"GPU: {_first_line(e)}"] * len(seeds)
    from ..program import Program
    try:
        prog = Program(text)
        mine = [_interp_one(prog, k, s) for k, s in enumerate(seeds)]
    except Exception as e:                                         # noqa: BLE001
        prog, mine = text, [f"parse: {_first_line(e)}"] * len(seeds)
    rows = []
    for k, s in enumerate(seeds):
        h = None if hw is None else hw[k]
        row = compare(s, k, prog, h, mine[k], examples)
        if len(row) > 1:
            row["ptx"] = program(s, 0)
            if "differ" in row or "undefined_words" in row:
                row["gpu_words"] = np.asarray(h, np.uint32)   # every word: offline bisection
            rows.append(row)
    return {"n": len(seeds), "rows": rows, "seconds": time.time() - t0}


def run(programs: int, seed0: int, gpu, jobs: int | None = None, batch: int = 150,
        budget_s: float = 150.0, log=print) -> dict:
    """Programs ``seed0 .. seed0 + programs - 1`` in batches of ``batch`` kernels per module, in
    worker processes (spawned: each its own CUDA context); batches not started within
    ``budget_s`` seconds are skipped (the record says how many ran)."""
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from multiprocessing import get_context
    seeds = list(range(seed0, seed0 + programs))
    batches = [seeds[i:i + batch] for i in range(0, len(seeds), batch)]
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2)
    jobs = jobs or min(len(batches), cpus, 32)
    t0 = time.time()
    rows, done, skipped = [], 0, 0
    if jobs <= 1:
        for b in batches:
            if time.time() - t0 > budget_s:
                skipped += len(b)
                continue
            r = _job(b, gpu)
            rows += r["rows"]
            done += r["n"]
    else:
        with ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) as ex:
            todo, running = list(batches), set()
            while todo or running:
                while todo and len(running) < 2 * jobs and time.time() - t0 < budget_s:
                    running.add(ex.submit(_job, todo.pop(0), gpu))
                if not running:
                    skipped += sum(len(b) for b in todo)
                    break
                fin, running = wait(running, return_when=FIRST_COMPLETED)
                for f in fin:
                    try:
                        r = f.result()
                    except Exception as e:                         # noqa: BLE001
                        rows.append({"seed": None, "worker_error": _first_line(e)})
                        continue
                    rows += r["rows"]
                    done += r["n"]
                    if done // 3000 != (done - r["n"]) // 3000:
                        log(f"  fuzz: {done} programs ({time.time() - t0:.0f} s)")
                if time.time() - t0 >= budget_s and todo:
                    skipped += sum(len(b) for b in todo)
                    todo = []
    return {"programs": done, "skipped": skipped, "first_seed": seed0, "batch": batch,
            "compared": done - sum("gpu_error" in r or "interp_error" in r or "refused" in r
                                   for r in rows) if gpu else 0,
            "differ": sum("differ" in r for r in rows),
            # programs with an instruction the interpreter refuses by name (not compared)
            "refused": sum("refused" in r for r in rows),
            # programs whose only differences are NaN bits the ISA leaves open (undefined_words)
            "undefined_by_isa": sum("undefined_words" in r and "differ" not in r for r in rows),
            "errors": sum("interp_error" in r or "worker_error" in r for r in rows),
            "gpu_errors": sum("gpu_error" in r for r in rows),
            "words_per_program": int(compared_words().sum()),
            "rows": sorted(rows, key=_rank)[:200]}


def _rank(r):
    """Records in the order they matter: differences, errors, refusals, open bits only."""
    return (0 if "differ" in r else 1 if "interp_error" in r or "gpu_error" in r else
            2 if "refused" in r else 3)
