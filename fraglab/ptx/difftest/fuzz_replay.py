"""Replaying a fuzz record: the programs that differed in an earlier run
(``python -m fraglab.ptx.difftest.hw --replay RECORD``), on the GPU and on the interpreter again,
each compiled three ways on the GPU:

* ``jit``: the driver's JIT, as the fuzz run loads them (``cuModuleLoadData`` of the PTX);
* ``O3``: ``ptxas -O3`` for the GPU's architecture, the cubin loaded as it is (does the ptxas the
  CPU machines have reproduce the JIT, so that its SASS explains what the hardware did?);
* ``O0``: ``ptxas -O0``: a difference that goes away here comes from ptxas's optimiser, not from
  the hardware's arithmetic (the ISA says what the instruction computes; ptxas may not change it).

Each program's record says, for each way, how many words differ from the interpreter where the
ISA defines them (:func:`.fuzz.compare`), and how many words the ways disagree on among
themselves; every GPU word goes into ``replay_gpu_words.npz`` (keys ``SEED-jit``, ``SEED-O3``,
``SEED-O0``) for offline bisection. Programs whose instruction the interpreter now refuses are
replayed as the generator writes them today (their fields moved into range). All programs go
into one module, as in the fuzz run (kernel ``fz{k}`` is the k-th seed)."""
from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from . import fuzz as F

WAYS = ("jit", "O3", "O0")


def seeds_of(record: Path) -> list[int]:
    """The seeds of a fuzz record's programs that differed or failed (fuzz.json's rows, or a
    causes file's programs)."""
    d = json.loads(Path(record).read_text())
    rows = d.get("rows", d.get("programs", []))
    keep = ("differ", "interp_error", "gpu_error", "cause")
    return sorted({int(r["seed"]) for r in rows if r.get("seed") is not None and any(k in r for k in keep)})


def causes(path: Path | None) -> dict:
    """seed -> cause from a causes file (tests/data/fuzz_h200_confirm_causes.json), if present."""
    if path is None or not Path(path).is_file():
        return {}
    return {int(p["seed"]): p["cause"] for p in json.loads(Path(path).read_text())["programs"]}


def _arch() -> str:
    import cupy
    return "sm_" + str(cupy.cuda.Device().compute_capability)


def ptxas():
    """The ptxas the O3 and O0 ways use: ``$FRAGLAB_PTXAS``, else the CUDA install's (the
    toolkit the driver's JIT comes with), else :func:`fraglab.tools.find_tool`'s."""
    import os
    from ...tools import find_tool
    for c in (os.environ.get("FRAGLAB_PTXAS"), "/usr/local/cuda/bin/ptxas"):
        if c and Path(c).is_file():
            return Path(c)
    return find_tool("ptxas", required=False)


def ptxas_version() -> str:
    """The ptxas the O3 and O0 ways use: its path and version line."""
    exe = ptxas()
    if exe is None:
        return "none"
    r = subprocess.run([str(exe), "--version"], capture_output=True, text=True)
    return f"{exe}: {(r.stdout.strip().splitlines() or ['?'])[-1]}"


def _cubin(text: str, opt: int, arch: str | None = None) -> bytes:
    """The module's PTX assembled by ptxas at -O``opt`` for ``arch`` (default: the GPU in use)."""
    exe = ptxas()
    if exe is None:
        raise RuntimeError("no ptxas found (set FRAGLAB_PTXAS)")
    with tempfile.TemporaryDirectory() as d:
        src, dst = Path(d) / "m.ptx", Path(d) / "m.cubin"
        src.write_text(text)
        r = subprocess.run([str(exe), f"-arch={arch or _arch()}", f"-O{opt}",
                            str(src), "-o", str(dst)], capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"ptxas -O{opt}: {(r.stderr or r.stdout).strip()[:300]}")
        return dst.read_bytes()


def run_way(seeds, text: str, way: str, gpu) -> list:
    """Each program's output words (or an error string) on the GPU compiled ``way``; with
    ``gpu == "fake"`` the interpreter stands in (a self-test of the pipeline)."""
    if gpu == "fake":
        return F.run_interp(seeds, text)
    if way == "jit":
        return F.run_gpu(seeds, text)
    try:
        image = _cubin(text, 3 if way == "O3" else 0)
    except Exception as e:                                         # noqa: BLE001
        return [f"{way}: {F._first_line(e)}"] * len(seeds)
    return F.run_gpu(seeds, text, image=image)


def replay(seeds, gpu, out: Path, cause_of: dict | None = None, log=print) -> dict:
    """Replay ``seeds`` in one module (one JIT load, one ptxas run per way): returns the record
    and writes ``out/replay.json`` and ``out/replay_gpu_words.npz``."""
    import warnings
    warnings.simplefilter("ignore")
    np.seterr(all="ignore")
    from ..program import Program
    cause_of = cause_of or {}
    t0 = time.time()
    seeds = list(seeds)
    text = F.module(seeds)
    prog = Program(text)
    gpu_out = {}
    for way in WAYS:
        try:
            gpu_out[way] = run_way(seeds, text, way, gpu) if gpu else [None] * len(seeds)
        except Exception as e:                                     # noqa: BLE001
            gpu_out[way] = [f"{way}: {F._first_line(e)}"] * len(seeds)
    rows, words = [], {}
    mask = F.compared_words()
    for k, s in enumerate(seeds):
        mine = F._interp_one(prog, k, s)
        row = {"seed": s, "cause": cause_of.get(s)}
        opened = {}

        def open_mask(k=k, s=s, mine=mine, opened=opened):     # once per program, if needed
            if "m" not in opened:
                opened["m"] = F.open_words(s, prog, k, mine)
            return opened["m"]
        got = {w: gpu_out[w][k] for w in WAYS}
        for way in WAYS:
            h = got[way]
            r = F.compare(s, k, prog, h, mine, examples=16, open_mask=open_mask)
            r.pop("seed")
            row[way] = r
            if h is not None and not isinstance(h, str):
                words[f"{s}-{way}"] = np.asarray(h, np.uint32)
        ok = [w for w in WAYS if got[w] is not None and not isinstance(got[w], str)]
        row["ways_disagree"] = {f"{a}/{b}": int(((got[a] != got[b]) & mask).sum())
                                for i, a in enumerate(ok) for b in ok[i + 1:]}
        rows.append(row)
    summary = {w: {"programs": len(rows),
                   "differ": sum("differ" in r[w] for r in rows),
                   "agree": sum(not any(k in r[w] for k in ("differ", "gpu_error", "interp_error",
                                                             "refused")) for r in rows),
                   "errors": sum("gpu_error" in r[w] or "interp_error" in r[w] for r in rows),
                   "refused": sum("refused" in r[w] for r in rows)} for w in WAYS}
    by_cause: dict = {}
    for r in rows:
        c = by_cause.setdefault(r["cause"] or "?", {w: 0 for w in WAYS} | {"programs": 0})
        c["programs"] += 1
        for w in WAYS:
            c[w] += "differ" in r[w]
    res = {"seeds": len(seeds), "ptxas": ptxas_version() if gpu and gpu != "fake" else None,
           "summary": summary, "differ_by_cause": by_cause,
           "seconds": round(time.time() - t0, 1), "rows": rows}
    out.mkdir(parents=True, exist_ok=True)
    if words:
        np.savez_compressed(out / "replay_gpu_words.npz", **words)
    (out / "replay.json").write_text(json.dumps(res, indent=1))
    log(f"replay: {len(seeds)} programs; differ where the ISA defines the words: "
        + ", ".join(f"{w} {summary[w]['differ']}" for w in WAYS)
        + "; GPU errors: " + ", ".join(f"{w} {summary[w]['errors']}" for w in WAYS)
        + f" ({res['seconds']} s)")
    for c, v in sorted(by_cause.items()):
        log(f"  {c}: {v['programs']} programs, differ " + ", ".join(f"{w} {v[w]}" for w in WAYS))
    return res
