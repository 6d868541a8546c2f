"""A ``Problem``: one kernel or exercise described once - spec, inputs, reference, tolerance, cases
and how to run it - after GPU-Puzzles' ``CudaProblem`` and ThunderKittens' test structs.

Tests, lab grading and benchmarks use the same description::

    FA2 = Problem(
        "05_flash_attention/fa2", "softmax(Q K^T * scale) V, one head per block row",
        inputs=lambda rng, n, d, dtype, causal: {...},     # NumPy arrays and options
        reference=attention_reference,                     # float64, independent of the kernel
        run=lambda q, k, v, causal, **_: fa2(q, k, v, causal=causal),
        tol={"f16": 2e-3, "bf16": 1e-2},                    # relative error, by dtype
        cases=(Case("random"), Case("ragged", n=1009), Case("causal", causal=True), ...))

    FA2.check(case, rng)                 # raises ProblemFailure with a table of wrong elements
    FA2.check(case, rng, run=learner_fn) # the same checks on someone else's implementation

``run`` receives the inputs as NumPy arrays and returns NumPy arrays (:func:`fraglab.launch.to_host`
is applied to whatever it returns); the wrappers it calls allocate their outputs poisoned
(:func:`fraglab.launch.poisoned`), so an element a kernel never writes stays NaN (or an integer
sentinel) and fails the comparison. Inputs are drawn fresh from ``rng`` for every check.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from . import launch, warp


class ProblemFailure(AssertionError):
    """A kernel's result does not match its reference; the message shows where."""


@dataclass(frozen=True)
class Case:
    """One input configuration: a name (the test id) and the parameters of ``Problem.inputs``.
    ``edge`` marks an edge case (ragged size, -inf row, ...) rather than a plain random draw;
    ``slow`` one too large for the PTX interpreter (it runs on GPUs only)."""
    name: str
    params: Mapping[str, Any] = field(default_factory=dict)
    edge: bool = False
    slow: bool = False

    def __init__(self, name: str, edge: bool = False, slow: bool = False, **params):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "params", dict(params))
        object.__setattr__(self, "edge", edge)
        object.__setattr__(self, "slow", slow)

    def __str__(self) -> str:
        return self.name

    def __hash__(self):
        return hash((self.name, tuple(sorted((k, repr(v)) for k, v in self.params.items()))))


def rel_error(got, ref) -> float:
    """‖got − ref‖ / ‖ref‖ in float64 over the finite elements of ``ref``; ``inf`` when the shapes
    differ or ``got`` is not finite exactly where ``ref`` is (an unwritten, poisoned element)."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        return float("inf")
    if not np.array_equal(np.isfinite(got), np.isfinite(ref)):
        return float("inf")
    fin = np.isfinite(ref)
    if not np.array_equal(got[~fin], ref[~fin], equal_nan=True):   # +inf vs -inf, inf vs NaN
        return float("inf")
    num = np.linalg.norm((got - ref)[fin])
    den = np.linalg.norm(ref[fin])
    return float(num / den) if den > 0 else float(num)


@dataclass
class Result:
    """The outcome of one :meth:`Problem.check`."""
    problem: str
    case: str
    errors: dict            # output name -> relative error (0.0 for an exact match)
    tol: float
    ok: bool
    detail: str = ""

    @property
    def error(self) -> float:
        return max(self.errors.values(), default=0.0)

    def line(self) -> str:
        kind = "exact" if self.tol == 0 else f"rel. error {self.error:.2e} (tol {self.tol:g})"
        return f"{self.problem} [{self.case}]: {'ok' if self.ok else 'WRONG'}, {kind}"


def named_outputs(x) -> dict:
    """A kernel's result as ``{name: array}`` (a dict as is, a tuple as out0, out1, ..., else out)."""
    if isinstance(x, Mapping):
        return dict(x)
    if isinstance(x, tuple):
        return {f"out{i}": v for i, v in enumerate(x)}
    return {"out": x}


@dataclass
class Problem:
    """Spec, inputs, reference, tolerance, cases and run of one kernel or exercise."""
    name: str
    spec: str
    inputs: Callable[..., dict]
    reference: Callable[..., Any]
    run: Callable[..., Any]
    cases: tuple = (Case("random"),)
    #: relative-error tolerance: a number, a dict keyed by the case's ``dtype`` parameter, or a
    #: callable of the case; 0 means bit-exact (NaN equal to NaN)
    tol: Any = 0.0
    #: ``requires(case) -> (ok, reason)``, e.g. bf16 needs sm_80 (checked before running)
    requires: Callable[[Case], tuple[bool, str]] | None = None
    labels: tuple = ("row", "col")
    #: ``error(got, ref, inputs) -> float`` replaces :func:`rel_error` where a kernel's error is
    #: better measured another way (e.g. per row, against the sum of magnitudes)
    error: Callable[..., float] | None = None

    def __post_init__(self):
        self.cases = tuple(self.cases)
        names = [c.name for c in self.cases]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.name}: case names must be unique, got {names}")

    def case(self, name: str) -> Case:
        for c in self.cases:
            if c.name == name:
                return c
        raise KeyError(f"{self.name} has no case {name!r}; it has {[c.name for c in self.cases]}")

    @property
    def edge_cases(self) -> tuple:
        return tuple(c for c in self.cases if c.edge)

    @property
    def interpreter_cases(self) -> tuple:
        """The cases small enough for the PTX interpreter (GPU-less mode)."""
        return tuple(c for c in self.cases if not c.slow)

    def cases_here(self) -> tuple:
        """The cases to run on this machine: all of them on a GPU, the small ones without."""
        from . import device
        return self.cases if device.gpu_available() else self.interpreter_cases

    def tolerance(self, case: Case) -> float:
        if callable(self.tol):
            return float(self.tol(case))
        if isinstance(self.tol, Mapping):
            return float(self.tol[case.params.get("dtype")])
        return float(self.tol)

    def supported(self, case: Case) -> tuple[bool, str]:
        return self.requires(case) if self.requires else (True, "")

    def evaluate(self, case: Case | str, rng, *, run: Callable | None = None) -> Result:
        """Draw inputs, run (``self.run`` or ``run``), compare with the reference."""
        case = self.case(case) if isinstance(case, str) else case
        ok, why = self.supported(case)
        if not ok:
            raise RuntimeError(f"{self.name} [{case}] cannot run here: {why}")
        inp = self.inputs(rng, **case.params)
        got = named_outputs(launch.to_host((run or self.run)(**inp)))
        ref = named_outputs(self.reference(**inp))
        tol = self.tolerance(case)
        if set(got) != set(ref):
            return Result(self.name, case.name, {k: float("inf") for k in ref}, tol, False,
                          f"outputs {sorted(got)} but the reference has {sorted(ref)}")
        errors, details = {}, []
        for k in ref:
            g, r = np.asarray(got[k]), np.asarray(ref[k])
            if tol == 0:
                same = g.shape == r.shape and np.array_equal(g.astype(np.float64),
                                                            r.astype(np.float64), equal_nan=True)
                errors[k] = 0.0 if same else float("inf")
            elif self.error is not None:
                errors[k] = float(self.error(g, r, inp))
            else:
                errors[k] = rel_error(g, r)
            if not errors[k] <= tol:
                where = f"{k}: " if len(ref) > 1 else ""
                if g.shape != r.shape:
                    details.append(f"{where}shape {g.shape}, expected {r.shape}")
                    continue
                names = self.labels[:g.ndim] if g.ndim <= len(self.labels) else None
                table = warp.format_diff(g, r, rtol=tol, atol=0, equal_nan=True,
                                         index_names=names)
                details.append(f"{where}relative error {errors[k]:.3g} > {tol:g}; "
                               + (table or "no single element is off by more than the "
                                  "tolerance: the error is spread over many"))
        ok = all(e <= tol for e in errors.values())
        return Result(self.name, case.name, errors, tol, ok, "\n".join(details))

    def check(self, case: Case | str, rng, *, run: Callable | None = None) -> Result:
        """:meth:`evaluate`, raising :class:`ProblemFailure` when the result is wrong."""
        res = self.evaluate(case, rng, run=run)
        if not res.ok:
            raise ProblemFailure(res.line() + "\n" + res.detail)
        return res


def topic_problems(topics=None) -> dict[str, dict[str, Problem]]:
    """``{topic: PROBLEMS}``: the ``PROBLEMS`` of every topic of the book (``book/NN_name.ipynb``
    -> ``fraglab.name``) that exports them, in the book's order. ``topics`` (names such as
    ``"hello_warp"``) imports only those, and a name the book lacks raises ``ValueError``."""
    from .tools import REPO_ROOT
    from .topics import topic_export
    book = [nb.stem[3:] for nb in sorted((REPO_ROOT / "book").glob("[0-9][0-9]_*.ipynb"))]
    unknown = sorted(set(topics or ()) - set(book))
    if unknown:
        raise ValueError(f"no topic {', '.join(unknown)}; the book's topics are {', '.join(book)}")
    found = {}
    for name in book:
        if topics is None or name in topics:
            problems = topic_export(name, "PROBLEMS")
            if problems:
                found[name] = dict(problems)
    return found


def check_all(problems: Mapping[str, Problem], rng, log, *, key: str = "problem",
              cases: Callable[[Problem], tuple] | None = None) -> list[dict]:
    """Every problem over ``cases(problem)`` (names or :class:`~fraglab.problem.Case` s; default
    the cases for this machine), each result recorded: ``{key: name, "case", "error", "tol",
    "ok"}``, or ``{key, "case", "ok": False, "failure"}`` when the run raised. Never stops at a
    failure; one log line per problem."""
    out = []
    for name, p in problems.items():
        todo = tuple(p.cases_here() if cases is None else cases(p))
        bad, mine = [], []
        for case in todo:
            label = case if isinstance(case, str) else case.name
            try:
                r = p.evaluate(case, rng)
                rec = {key: name, "case": label, "error": r.error, "tol": r.tol, "ok": bool(r.ok)}
            except Exception as exc:          # recorded, never fatal
                rec = {key: name, "case": label, "ok": False,
                       "failure": f"{type(exc).__name__}: {exc}"[:500]}
            if not rec["ok"]:
                bad.append(label)
            mine.append(rec)
        out += mine
        worst = max((r.get("error", float("inf")) for r in mine), default=0)
        log(f"  {name:<22} {len(todo) - len(bad)}/{len(todo)} pass, worst rel. error "
            f"{worst:.2e}" + (f"  <-- WRONG: {', '.join(bad)}" if bad else ""))
    return out
