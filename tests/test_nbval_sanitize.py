"""nbval's sanitizers (nbval_sanitize.cfg) let the stored outputs, executed on the course's H100,
compare equal on any GPU the course runs on (compute capability 7.5 or newer): what names the GPU
(its name, compute capability, SM count, clocks, memory size, driver, CUDA runtime) is hidden in
every notebook's compared outputs. Checked by rewriting each stored output as another GPU would
print it and comparing the two after the sanitizers, as nbval does."""
import json
import re

import pytest

from nbval_run import ROOT

NOTEBOOKS = sorted([*(ROOT / "book").glob("*.ipynb"), *(ROOT / "solutions").glob("*.ipynb")])
STORED_GPU = "NVIDIA H100 80GB HBM3"


def patterns() -> list[tuple[str, str]]:
    """(regex, replacement) in the file's order, read as nbval reads them."""
    text = (ROOT / "nbval_sanitize.cfg").read_text()
    return re.findall(r"^regex: (.*)$\n^replace: (.*)$", text, flags=re.M)


def sanitize(text: str) -> str:
    for regex, replace in patterns():
        text = re.sub(regex, replace, text)
    return text


#: How other GPUs print the facts the H100 printed: (name, target, capability, SMs, clock, memory).
OTHERS = [("NVIDIA H200", "sm_90", "9.0", 132, 1980, "141GB"),
          ("NVIDIA A100-SXM4-80GB", "sm_80", "8.0", 108, 1410, "80GB"),
          ("NVIDIA GeForce RTX 4090", "sm_89", "8.9", 128, 2520, "24GB"),
          ("NVIDIA L4", "sm_89", "8.9", 58, 2040, "23GB"),
          ("Tesla T4", "sm_75", "7.5", 40, 1590, "15GB")]


def as_other_gpu(text: str, other) -> str:
    name, target, cc, sms, mhz, mem = other
    text = re.sub(re.escape(STORED_GPU) + r"( \(sm_90\))?",
                  lambda m: name + (f" ({target})" if m.group(1) else ""), text)
    text = re.sub(r"compute capability 9\.0", f"compute capability {cc}", text)
    text = re.sub(r"\b132 SMs\b", f"{sms} SMs", text)
    text = re.sub(r"\b1980 MHz\b", f"{mhz} MHz", text)
    text = re.sub(r"\b80 ?GB\b(?!/)", mem, text)
    text = re.sub(r"driver 580\.159\.04", "driver 550.54.15", text)
    return re.sub(r"CUDA runtime 13\.2", "CUDA runtime 12.4", text)


def compared_texts(nb: dict):
    """(cell index, text) of every output nbval compares: code cells without
    ``nbval-ignore-output``, their text and text/* data."""
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code" or "nbval-ignore-output" in cell.get("metadata", {}).get("tags", []):
            continue
        for out in cell.get("outputs", []):
            parts = [out.get("text", "")] + [v for k, v in out.get("data", {}).items() if k.startswith("text/")]
            for p in parts:
                yield i, "".join(p) if isinstance(p, list) else p


@pytest.mark.parametrize("other", OTHERS, ids=[o[0] for o in OTHERS])
def test_what_names_the_gpu_is_sanitized(other):
    stored = (f"layout: traced live on {STORED_GPU} (sm_90).\n"
              f"recorded on {STORED_GPU} (compute capability 9.0, 132 SMs), driver 580.159.04, "
              f"CUDA runtime 13.2; SM clock 1755-1980 MHz (maximum 1980 MHz), 80 GB")
    assert sanitize(stored) == sanitize(as_other_gpu(stored, other))
    assert other[0] not in sanitize(as_other_gpu(stored, other))


def test_the_sentence_around_a_gpu_name_is_still_compared():
    assert sanitize(f"traced on {STORED_GPU} and checked") != sanitize(f"traced on {STORED_GPU} and wrong")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[f"{p.parent.name}/{p.stem}" for p in NOTEBOOKS])
def test_stored_outputs_compare_equal_on_another_gpu(path):
    """Chapter 06's generated listing once printed the GPU's name where nbval compared it: on an
    H200 the chapter failed."""
    nb = json.loads(path.read_text())
    bad = []
    for i, text in compared_texts(nb):
        for other in OTHERS:
            if sanitize(text) != sanitize(as_other_gpu(text, other)):
                line = next(ln for ln, lo in zip(text.splitlines(), as_other_gpu(text, other).splitlines())
                            if sanitize(ln) != sanitize(lo))
                bad.append(f"cell {i} on {other[0]}: {line[:160]}")
                break
    assert not bad, "\n".join(bad)


def test_a_chapter_this_gpu_cannot_rerun_skips_saying_why():
    """Chapter 10 was executed on the H100 and needs a Hopper: on an A100 its GPU nbval skips,
    naming the refusal; chapter 07 re-runs on any GPU of the course (tests/test_book.py)."""
    from fraglab import runs_where
    from nbval_run import refused_here
    from fraglab import device
    assert refused_here("10_fa3_pipelining") is None or device.gpu_available()
    with runs_where.simulated_gpu((8, 0)):
        why = refused_here("10_fa3_pipelining")
        assert why and "needs a Hopper GPU" in why and "8.0" in why
        assert refused_here("07_register_reuse") is None
    with runs_where.simulated_gpu((9, 0)):
        assert refused_here("10_fa3_pipelining") is None
