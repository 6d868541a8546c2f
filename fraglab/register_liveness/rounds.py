"""Chapter 08's d = 256 comparison against both fast SDPA backends, repeated in rounds (step
``d256`` of ``python -m fraglab.register_liveness bench``).

Why rounds, and two conditions: under sustained tensor-core work the H100 runs at its 700 W cap,
and what else runs in the same rounds sets the clock every kernel gets (``shared/gpu/README.md``).
The chapter's first record timed its kernels beside SDPA flash alone; a later run with SDPA's
cuDNN backend interleaved gave the same kernel a lower ratio to SDPA flash. Each round here
times, in one process, on one stream, with :func:`fraglab.bench.compare` (interleaved, medians):

* ``with_cudnn``: the course's kernels (:data:`KERNELS`), SDPA flash and SDPA cuDNN;
* ``without_cudnn``: the same without cuDNN (the setting of the chapter's first record),

the two conditions taking turns to go first from round to round, with the SM clock and the power
sampled through NVML (:class:`Monitor`) over each. :func:`spread` gives the min, median and max
over the rounds of every ratio, TFLOP/s, clock and power, per condition. Everything but
:class:`Monitor` and the GPU callables runs on the CPU with a fake timer (the tests do).
"""
from __future__ import annotations

import threading
import time
from typing import Callable

from .. import bench, nvml, stats

#: The course's kernels timed at d = 256: the first record's fastest (one masked loop, 64-key
#: tiles), its two-loop form, and the default tiles of 32 keys (``rl.attention(variant="qreload")``).
KERNELS = ("qreload_oneloop@bn=64", "qreload@bn=64", "qreload")
FLASH, CUDNN = "sdpa_flash", "cudnn"
#: Condition -> the SDPA backends timed in its rounds beside :data:`KERNELS`.
CONDITIONS = {"with_cudnn": (FLASH, CUDNN), "without_cudnn": (FLASH,)}
ROUNDS, QUICK_ROUNDS = 5, 2
#: One condition of one round: ``repeat`` timed calls a callable, in ``rounds`` interleaved passes.
REP = dict(repeat=120, rounds=4, warmup=3)
QUICK_REP = dict(repeat=12, rounds=2, warmup=1)
D, CAUSAL = 256, False


def ratio_key(num: str, den: str) -> str:
    return f"{num}/{den}"


def round_record(cmp: bench.Comparison, flops: float, r: int, condition: str,
                 monitor: dict | None = None) -> dict:
    """One condition of round ``r``: each callable's median, p10, p90 and TFLOP/s, the ratios of
    every callable's speed to each SDPA backend timed (``"a/b"``: b's median over a's, > 1 = a
    faster), the clock read right after (:func:`fraglab.bench.clock_check`) and ``monitor``'s
    samples."""
    rows = {name: {"median_ms": t.median_ms, "p10_ms": t.p10_ms, "p90_ms": t.p90_ms,
                   "tflops": flops / (t.median_ms * 1e-3) / 1e12}
            for name, t in cmp.timings.items()}
    ratios = {ratio_key(a, b): cmp.timings[b].median_ms / cmp.timings[a].median_ms
              for b in (FLASH, CUDNN) if b in rows for a in rows if a != b}
    return {"round": r, "condition": condition, "rows": rows, "ratios": ratios,
            "clocks_after": cmp.clocks, "monitor": monitor or {},
            "orders": cmp.settings.get("orders")}


def run_rounds(runs: dict[str, Callable], flops: float, *, rounds: int = ROUNDS,
               rep: dict | None = None, log: Callable[[str], None] = print,
               monitor: Callable | None = None, _timer=None) -> list[dict]:
    """``rounds`` rounds of every condition of :data:`CONDITIONS` over ``runs`` (name -> a
    zero-argument callable: the course's kernels and the SDPA backends that ran). Rounds 1, 3,
    ... start with ``with_cudnn``, rounds 2, 4, ... with ``without_cudnn``. ``monitor()``
    is a context manager whose ``result()`` is kept with the round (:class:`Monitor` on a GPU).
    A condition whose backends are missing from ``runs`` is left out (and said so once)."""
    rep = dict(REP if rep is None else rep)
    conds = {c: b for c, b in CONDITIONS.items() if all(x in runs for x in b)}
    for c in CONDITIONS.keys() - conds.keys():
        log(f"  d256: condition {c} left out: {sorted(set(CONDITIONS[c]) - set(runs))} did not run")
    if not conds:
        raise RuntimeError(f"no condition can run: SDPA flash is missing ({sorted(runs)})")
    names = {c: [n for n in runs if n not in (FLASH, CUDNN) or n in b] for c, b in conds.items()}
    out = []
    for r in range(1, rounds + 1):
        order = list(conds) if r % 2 else list(conds)[::-1]
        for cond in order:
            t0 = time.perf_counter()
            with (monitor() if monitor else _NoMonitor()) as mon:
                cmp = bench.compare({n: runs[n] for n in names[cond]}, baseline=FLASH,
                                    progress=False, _timer=_timer, **rep)
            rec = round_record(cmp, flops, r, cond, mon.result())
            rec["seconds"] = time.perf_counter() - t0
            out.append(rec)
            log(round_line(rec, rounds))
    return out


def round_line(rec: dict, rounds: int) -> str:
    """The progress line of one condition of one round."""
    mon = rec.get("monitor") or {}
    clock, power = (mon.get("sm_mhz") or {}).get("median"), mon.get("power_w")
    return (f"  d256 round {rec['round']}/{rounds} {rec['condition']:<13}: "
            + ", ".join(f"{k} {r['tflops']:.0f}" for k, r in rec["rows"].items()) + " TFLOP/s; "
            + ", ".join(f"{k} {v:.2f}x" for k, v in rec["ratios"].items()
                        if k.split("/")[0] in KERNELS[:1])
            + (f"; SM {clock:.0f} MHz" if clock else "")
            + (f", {power:.0f} W" if power else "") + f" ({rec.get('seconds', 0):.1f} s)")


def _mmm(values) -> dict:
    s = stats.summary([v for v in values if v is not None])
    return {k: s[k] for k in ("n", "min", "median", "max")} if s["n"] else {"n": 0}


def spread(records: list[dict]) -> dict:
    """Per condition, over its rounds: ``{"ratios": {"a/b": mmm}, "tflops": {name: mmm},
    "sm_mhz": mmm, "power_w": mmm, "rounds": n}``, each ``mmm`` the ``n, min, median, max``
    (of each round's median clock and mean power for the last two)."""
    out = {}
    for cond in CONDITIONS:
        recs = [r for r in records if r["condition"] == cond]
        if not recs:
            continue
        keys = list(dict.fromkeys(k for r in recs for k in r["ratios"]))
        names = list(dict.fromkeys(k for r in recs for k in r["rows"]))
        mon = [r.get("monitor") or {} for r in recs]
        out[cond] = {
            "rounds": len(recs),
            "ratios": {k: _mmm(r["ratios"].get(k) for r in recs) for k in keys},
            "tflops": {n: _mmm(r["rows"].get(n, {}).get("tflops") for r in recs) for n in names},
            "sm_mhz": _mmm((m.get("sm_mhz") or {}).get("median") for m in mon),
            "power_w": _mmm(m.get("power_w") for m in mon),
            "throttle_reasons": sorted({x for m in mon for x in m.get("reasons") or []}),
        }
    return out


# ---- NVML over one condition of one round (GPU machines) ----------------------------------------

class _NoMonitor:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def result(self) -> dict:
        return {}


class Monitor:
    """While a ``with`` block runs: the power (:class:`fraglab.nvml.PowerSampler`, mean from the
    energy counter) and, in a thread every ``period_s``, the SM clock and its event reasons
    (:func:`fraglab.nvml.read_clocks`). Without NVML, ``result()`` says why and holds nothing."""

    def __init__(self, pci_bus_id: str | None = None, period_s: float = 0.05):
        self.pci, self.period_s = pci_bus_id, period_s
        self.mhz, self.masks, self.error, self.power = [], [], None, None

    def __enter__(self):
        try:
            self.power = nvml.PowerSampler(self.pci).__enter__()
        except Exception as exc:                       # no pynvml or no driver library
            self.error = f"{type(exc).__name__}: {exc}"[:200]
            return self
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            try:
                c = nvml.read_clocks(self.pci)
                self.mhz.append(c["sm_mhz"])
                self.masks.append(c.get("clock_reasons_mask"))
            except Exception as exc:
                self.error = f"{type(exc).__name__}: {exc}"[:200]
            self._stop.wait(self.period_s)

    def __exit__(self, *exc):
        if self.power is not None:
            self._stop.set()
            self._thread.join()
            self.power.__exit__(*exc)
        return False

    def result(self) -> dict:
        if self.power is None:
            return {"error": self.error}
        p = self.power.result()
        reasons = {x for m in self.masks for x in nvml.throttle_reasons(m) or []}
        return {"sm_mhz": _mmm(self.mhz), "samples": len(self.mhz),
                "power_w": p["mean_w_energy"] or p["mean_w_samples"],
                "power_max_w": max(p["power_w"]) if p["power_w"] else None,
                "power_source": p["source"], "seconds": p["seconds"],
                "reasons": sorted(reasons), "error": self.error}
