"""Every attention kernel of chapters 08, 09 and 10 (and chapter 10's building blocks) launched
once on small, ragged inputs: the child that compute-sanitizer watches in ``.ci/gpu sanitize``
(pytest under a sanitizer is too slow for these kernels).

    compute-sanitizer --tool racecheck python3 .ci/sanitize_topics.py [register_liveness ...]
    python3 .ci/sanitize_topics.py --summary OUT_DIR    # the logs -> OUT_DIR/sanitizer.json

The summary is the record the chapters cite (``book/data/sanitizer.json``, read by
:func:`fraglab.report.sanitizer_verdict`).

Each launch is also checked against float64 (a run that computes nothing is no proof); the
script prints one line per launch and exits 1 when an output is wrong.
"""
import sys
import time

import numpy as np

from fraglab import launch
from fraglab.flash_attention.kernels import as_float, random_qkv
from fraglab.flash_attention.reference import attention_reference

if not launch.interpreted():      # (without a GPU the script runs on the interpreter: a dry run)
    import cupy as cp
    cp.cuda.set_allocator(None)  # each array its own allocation, so memcheck knows where it ends
N, HEADS = 200, 2                # ragged: 200 is no multiple of any tile
TOL = {"f16": 2e-2, "bf16": 6e-2}


def attention_cases(topic):
    """``(label, call)`` for every kernel of an attention topic."""
    import importlib
    mod = importlib.import_module(f"fraglab.{topic}")
    if topic == "register_liveness":
        names, key = mod.VARIANTS, "variant"
        dims = mod.HEAD_DIMS
        extra = [("qreload_oneloop", 256, {"bn": 64}), ("qreg", 256, {"maxrregcount": 128})]
    elif topic == "instruction_diet":
        names, key, dims, extra = mod.STEPS, "step", (64, 128), []
    else:
        names, key, dims, extra = mod.VARIANTS, "variant", mod.HEAD_DIMS, []
    for name in names:
        for d in dims:
            for dtype, causal in (("f16", False), ("f16", True), ("bf16", True)):
                yield mod, name, key, d, dtype, causal, {}
    for name, d, knobs in extra:
        yield mod, name, key, d, "f16", True, knobs


def check_attention(rng, mod, name, key, d, dtype, causal, knobs):
    raw, exact = random_qkv(rng, (1, HEADS, N, d), dtype)
    q, k, v = (launch.to_device(a) for a in raw)
    out = mod.attention(q, k, v, causal=causal, **{key: name}, **knobs)
    ref = attention_reference(*exact, causal=causal)
    err = float(np.max(np.abs(as_float(out, dtype) - ref)) / max(np.max(np.abs(ref)), 1e-30))
    return err, err <= TOL[dtype]


host, dev = launch.to_host, launch.to_device


def building_blocks(rng):
    """Chapter 10's small kernels (wgmma, mbarrier ring, swizzled copy, warp specialisation)."""
    from fraglab.fa3_pipelining import kernels as k
    a = rng.standard_normal((64, 64)).astype(np.float16)
    for major, b in (("k", rng.standard_normal((128, 64))), ("mn", rng.standard_normal((64, 128)))):
        b = b.astype(np.float16)
        c = host(k.wgmma_gemm(dev(a), dev(b), b_major=major))
        ref = a.astype(np.float64) @ (b.T if major == "k" else b).astype(np.float64)
        yield f"wgmma_gemm b_major={major}", np.allclose(c, ref, rtol=1e-2, atol=1e-2)
    x = rng.standard_normal(4 * k.RING_CHUNK).astype(np.float32)
    yield "mbarrier_ring", np.array_equal(host(k.mbarrier_ring(dev(x))),
                                          k.mbarrier_ring_reference(x))
    for d in k.HEAD_DIMS:
        src = rng.integers(0, 65535, (k.BR, d), dtype=np.uint16)
        yield f"swizzle_tile d={d}", np.array_equal(host(k.swizzle_tile(dev(src), 100)),
                                                   k.sw128_image(src, 100))
    x = rng.standard_normal((3, 128, 32)).astype(np.float32)
    yield "warpspec_rowsum", np.allclose(host(k.warpspec_rowsum(dev(x))),
                                         x.astype(np.float64).sum(-1), rtol=1e-4, atol=1e-4)


def summary(out_dir):
    """``sanitizer.json`` from the logs ``.ci/gpu sanitize`` left in ``out_dir``
    (``sanitize_topics_<tool>_<topic>.log``): per tool and topic, the tool's summary line,
    whether it is clean, the launches that ran and the outputs that were wrong."""
    import json
    import re
    from pathlib import Path
    from fraglab import bench
    out = Path(out_dir)
    doc = {"script": ".ci/sanitize_topics.py", "N": N, "heads": HEADS, "tools": {}}
    try:
        doc["device"] = bench.device_info()
    except Exception as exc:               # the verdicts matter more than the device line
        doc["device"] = {"error": str(exc)[:200]}
    for log in sorted(out.glob("sanitize_topics_*_*.log")):
        tool, topic = log.stem.removeprefix("sanitize_topics_").split("_", 1)
        text = log.read_text(errors="replace")
        lines = [ln for ln in text.splitlines() if re.search(r"(ERROR|RACECHECK) SUMMARY", ln)]
        marks = re.findall(rf"^(ok |BAD) {topic} ", text, re.M)
        clean = bool(lines) and bool(re.search(r": 0 (errors|hazards)", lines[-1])) \
            and "wrong outputs" in text and "BAD" not in marks
        doc["tools"].setdefault(tool, {})[topic] = {
            "clean": clean, "launches": len(marks), "wrong": marks.count("BAD"),
            "summary": lines[-1].strip("= ") if lines else "no summary line (the run did not finish)"}
    (out / "sanitizer.json").write_text(json.dumps(doc, indent=1) + "\n")
    print({t: {k: v["clean"] for k, v in r.items()} for t, r in doc["tools"].items()})


def main(topics):
    rng, bad, t0 = np.random.default_rng(0), 0, time.perf_counter()
    for topic in topics:
        for mod, name, key, d, dtype, causal, knobs in attention_cases(topic):
            err, ok = check_attention(rng, mod, name, key, d, dtype, causal, knobs)
            bad += not ok
            print(f"{'ok ' if ok else 'BAD'} {topic} {name} d={d} {dtype} causal={causal} "
                  f"{knobs or ''} rel.err {err:.1e}", flush=True)
        if topic == "fa3_pipelining":
            for label, ok in building_blocks(rng):
                bad += not ok
                print(f"{'ok ' if ok else 'BAD'} {topic} {label}", flush=True)
    print(f"{bad} wrong outputs, {time.perf_counter() - t0:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--summary"]:
        sys.exit(summary(sys.argv[2]))
    sys.exit(main(sys.argv[1:] or ["register_liveness", "instruction_diet", "fa3_pipelining"]))
