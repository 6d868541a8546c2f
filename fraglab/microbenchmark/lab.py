"""The lab's checks (``solutions/04_microbenchmark.ipynb``): a warm measurement's plan, a
learner's clock-timed kernel (its SASS, and on a GPU its cycles)."""
from __future__ import annotations

import math

import numpy as np

from .. import launch, sass, toolchain
from .build_report import bracket
from .kernels import VARIANTS, random_inputs, reference, tolerance


class recorded_compares:
    """Record every :func:`fraglab.bench.compare` call made inside a ``with`` block: the order of
    its variants, its settings and its result (``.calls``). Progress output is turned off.

    ``stand_in=True`` (no GPU) runs compare with a stand-in timer that returns made-up times
    (baseline about 3.2 us, in-register about 3.0 us, 3 % noise) without calling the variants:
    the plan of a measurement can then be checked anywhere, its numbers cannot.
    """

    def __init__(self, stand_in: bool = False, rng=None):
        self.stand_in = stand_in
        self.rng = np.random.default_rng() if rng is None else rng
        self.calls: list[dict] = []

    def __enter__(self):
        from .. import bench
        self.bench, self.real = bench, bench.compare
        names: dict[int, str] = {}

        def timer(fn, n, flush_l2):
            base = {"smem": 0.0032, "regs": 0.0030}.get(names.get(id(fn)), 0.0031)
            return list(base * (1 + 0.03 * self.rng.standard_normal(n)))

        def spy(variants, **kw):
            names.update({id(f): k for k, f in variants.items()})
            kw["progress"] = False
            if self.stand_in:
                kw["_timer"] = timer
            result = self.real(variants, **kw)
            self.calls.append({"order": list(variants), "settings": {
                k: v for k, v in kw.items() if k != "_timer"}, "result": result})
            return result
        bench.compare = spy
        return self

    def __exit__(self, *exc):
        self.bench.compare = self.real
        return False


def warm_plan_problems(calls: list[dict], summary) -> list[str]:
    """What a warm measurement lacks (empty: sound). ``calls`` from :class:`recorded_compares`;
    ``summary`` maps "smem first" and "regs first" to ``{variant: {"median_us", "p10_us",
    "p90_us"}, "speedup": baseline median / in-register median}``."""
    problems = []
    if len(calls) < 2:
        return [f"bench.compare was called {len(calls)} time(s); measure both orders: two calls"]
    firsts = {c["order"][0] for c in calls if sorted(c["order"]) == sorted(VARIANTS)}
    for w in VARIANTS:
        if w not in firsts:
            problems.append(f"no bench.compare call of both kernels with {w!r} first")
    by_first = {}
    for c in calls:
        st = c["settings"]
        warm = st.get("warmup", 10)
        rep = st.get("repeat", 200)
        if warm < 1:
            problems.append(f"a call with {c['order'][0]!r} first has no warm-up (warmup={warm})")
        if rep < 1000:
            problems.append(f"a call with {c['order'][0]!r} first times {rep} launches per kernel; "
                            "take at least 1000")
        by_first[c["order"][0]] = c["result"]
    if not isinstance(summary, dict):
        return problems + [f"the summary must be a dict, got {type(summary).__name__}"]
    for w in VARIANTS:
        key = f"{w} first"
        if key not in summary:
            problems.append(f"the summary has no {key!r} entry")
            continue
        if w not in by_first:
            continue
        got, cmp = summary[key], by_first[w]
        for variant in VARIANTS:
            t = cmp.timings[variant]
            want = {"median_us": t.median_ms * 1e3, "p10_us": t.p10_ms * 1e3,
                    "p90_us": t.p90_ms * 1e3}
            entry = got.get(variant) if isinstance(got, dict) else None
            if not isinstance(entry, dict):
                problems.append(f"summary[{key!r}] has no {variant!r} entry with median and spread")
                continue
            for k, v in want.items():
                if k not in entry:
                    problems.append(f"summary[{key!r}][{variant!r}] lacks {k!r} "
                                    "(report the spread)")
                elif not math.isclose(float(entry[k]), v, rel_tol=1e-6):
                    problems.append(f"summary[{key!r}][{variant!r}][{k!r}] = {entry[k]}, but that "
                                    f"run measured {v:.6g}")
        sp = got.get("speedup") if isinstance(got, dict) else None
        ratio = cmp.timings["smem"].median_ms / cmp.timings["regs"].median_ms
        if sp is None or not math.isclose(float(sp), ratio, rel_tol=1e-6):
            problems.append(f"summary[{key!r}]['speedup'] = {sp}, expected baseline median / "
                            f"in-register median = {ratio:.6g}")
    return problems


def clock_source_problems(source: str, kernel: str, arches=toolchain.ARCHES) -> dict:
    """Compile a learner's clock-timed in-register kernel for each target and check its SASS with
    :func:`bracket` (epilogue: SHFL and FMNMX), plus: both clock reads predicated (made to wait
    with ``clock_after``), no shared memory. Returns ``{arch: [problems]}``."""
    out = {}
    for arch in arches:
        b = toolchain.compile("lab04_clock.cu", arch, source=source)
        if kernel not in b.resources:
            out[arch] = [f"no kernel named {kernel!r} (found {b.kernels})"]
            continue
        text = b.sass(kernel)
        lines = sass.listing(text)
        r = bracket(lines, ("SHFL", "FMNMX"))
        probs = list(r["problems"])
        for i in r["clock_lines"]:
            if not lines[i].startswith("@"):
                probs.append(f"the clock read {lines[i]!r} does not wait for anything: read it "
                             "with clock_after(dependency)")
        if sass.count_classes(text)["shared"]:
            probs.append("the in-register epilogue uses shared memory")
        out[arch] = probs
    return out


def cycles_of_source(source: str, kernel: str, *, launches: int = 50, rng=None) -> dict:
    """Run a learner's clock-timed f16 kernel (signature of the ``_clock`` kernels) on one tile
    ``launches`` times: ``{"cycles": [...], "rows_ok": bool}``."""
    import cupy as cp
    rng = np.random.default_rng() if rng is None else rng
    a, b = random_inputs(1, "f16", rng)
    fn = launch.get_kernel("lab04_clock.cu", kernel, source=source)
    ag, bg = cp.asarray(a), cp.asarray(b)
    rows = launch.poisoned((1, 16), np.float32)
    cyc = launch.poisoned((1,), np.int64)
    out = []
    for _ in range(launches):
        launch.launch(fn, 1, 32, (ag, bg, rows, cyc, np.int32(1), np.uint32(0)), sync=True)
        out.append(int(cyc.get()[0]))
    got = rows.get().astype(np.float64)
    return {"cycles": out, "rows_ok": bool((np.abs(got - reference(a, b, "f16"))
                                            <= tolerance(a, b, "f16")).all())}
