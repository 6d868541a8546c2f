"""The core attention package (fraglab.attention) without a kernel: the Problem factory's plumbing
(knobs, row selection, tolerances), the check-all loop's records, the argument checks, and the
late lookup of the course's kernels that benchmarks time."""
import numpy as np
import pytest

from fraglab import attention, launch
from fraglab.attention import baselines
from fraglab.problem import Case


def _numpy_attention(q, k, v, *, causal, scale, wrong_row=None, **_):
    """A stand-in kernel: float64 attention rounded to float16, optionally one row wrong."""
    exact = [np.asarray(launch.to_host(a), dtype=np.float64) for a in (q, k, v)]
    o = attention.attention_reference(*exact, causal=causal, scale=scale).astype(np.float16)
    if wrong_row is not None:
        o[..., wrong_row, :] += np.float16(1.0)
    return o


CASES = (Case("small", shape=(1, 2, 40, 64), dtype="f16"),
         Case("causal peaky", shape=(1, 1, 33, 64), dtype="f16", causal=True, q_scale=6.0,
              edge=True),
         Case("row 3 wrong", shape=(1, 1, 16, 64), dtype="f16", wrong_row=3))


def test_a_problem_from_the_factory_checks_a_kernel(rng):
    p = attention.attention_problem("test/numpy", "attention in NumPy", _numpy_attention, CASES,
                                    requires=None)
    assert p.tolerance(p.case("small")) == attention.TOL["f16"] and p.labels == attention.LABELS
    for name in ("small", "causal peaky"):
        assert p.check(name, rng).ok
    res = p.evaluate("row 3 wrong", rng)                  # the knob reaches the kernel
    assert not res.ok and "row" in res.detail


def test_rows_pick_the_same_rows_of_output_and_reference(rng):
    p = attention.attention_problem(
        "test/rows", "only rows 0..7 are compared", _numpy_attention,
        (Case("wrong past 8", shape=(1, 1, 16, 64), dtype="f16", wrong_row=12),),
        requires=None, rows=lambda q, causal, **_: slice(0, 8))
    inp = p.inputs(rng, **p.cases[0].params)
    assert p.run(**inp).shape == p.reference(**inp).shape == (1, 1, 8, 64)
    assert p.check("wrong past 8", rng).ok


def test_check_all_records_every_case_and_never_stops(rng):
    def broken(q, k, v, **_):
        raise RuntimeError("no launch")
    probs = {"good": attention.attention_problem("t/good", "", _numpy_attention, CASES, requires=None),
             "broken": attention.attention_problem("t/broken", "", broken, CASES[:1], requires=None)}
    lines = []
    recs = attention.check_all(probs, rng, lines.append, key="variant")
    assert [(r["variant"], r["case"], r["ok"]) for r in recs] == [
        ("good", "small", True), ("good", "causal peaky", True), ("good", "row 3 wrong", False),
        ("broken", "small", False)]
    assert recs[-1]["failure"] == "RuntimeError: no launch" and "error" in recs[0]
    assert "2/3 pass" in lines[0] and "WRONG: row 3 wrong" in lines[0] and "0/1 pass" in lines[1]
    only = attention.check_all(probs, rng, lines.append, cases=lambda p: ("small",))
    assert [r["problem"] for r in only] == ["good", "broken"]


def test_random_qkv_is_exact_and_bf16_travels_as_bits(rng):
    (q, k, v), exact = attention.random_qkv(rng, (1, 1, 4, 64), "bf16", q_scale=2.0)
    assert q.dtype == np.uint16 and np.array_equal(attention.as_float(q, "bf16"), exact[0])
    with pytest.raises(ValueError, match="dtype"):
        attention.random_qkv(rng, (1, 1, 4, 64), "f32")


def test_fa2_argument_checks():
    q = launch.to_device(np.zeros((1, 1, 8, 64), np.float16))     # a GPU array where there is one
    with pytest.raises(TypeError, match="causal must be a bool"):
        attention.check_fa2_arguments(q, q, q, 1, None)
    with pytest.raises(ValueError, match="d = 256"):
        x = launch.to_device(np.zeros((1, 1, 8, 256), np.float16))
        attention.check_fa2_arguments(x, x, x, False, None)
    with pytest.raises(ValueError, match="finite"):
        attention.check_scale(float("inf"), 64)
    assert attention.check_scale(None, 64) == 0.125
    assert attention.attention_flops(1, 2, 8, 64, causal=True) == 4 * 2 * 64 * 64 / 2


def test_course_kernels_are_looked_up_at_run_time(monkeypatch):
    fn, note = attention.course_launcher("fa2")
    assert callable(fn) and "chapter 05" in note
    monkeypatch.setitem(baselines.COURSE_KERNELS, "gone", ("fraglab.no_such_chapter", "f", "gone"))
    fn, note = attention.course_launcher("gone")
    assert fn is None and "not importable" in note
