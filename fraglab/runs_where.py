"""What runs where: for every chapter and lab, what runs without a GPU, on which GPUs, and what
needs an H100. The one home of these facts, and of the box that shows them at the top of every
chapter (``book/*.ipynb``) and lab (``solutions/*.ipynb``, hence ``labs/``).

Most of a box is derived from what the code already knows:

* each topic's ``PROBLEMS`` (:func:`fraglab.problem.topic_problems`): the checks of the chapter's
  kernels, which of them are small enough for the PTX interpreter, and, for each GPU target of
  :data:`GPUS`, which ones the kernels' own ``requires`` refuse and with which message (asked
  with :func:`simulated_gpu`, which makes :mod:`fraglab.device` answer as that GPU would);
* chapter 01, which has no ``PROBLEMS``: the fragment kinds of :mod:`fraglab.fragments` that
  each target supports (:func:`fraglab.device.supports`);
* the chapter's record, ``book/data/NN_name/results.json`` (its GPU's name), and the machine the
  page was executed on (its setup cell's stored status line);
* for a lab, the ``Problem`` each CUDA exercise is checked through (:data:`LAB_PROBLEMS`): on a
  GPU that the problem refuses, the exercise runs on the PTX interpreter alone.

What no code says (what a page does without a GPU beyond its kernels' checks, what only the H100
gives) is a sentence per topic in :data:`NOTES`. ``python -m fraglab.chapter boxes`` writes the
boxes; ``tests/test_runs_where.py`` checks that every notebook's box is what :func:`box` renders.
"""
from __future__ import annotations

import json
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from . import device
from .tools import REPO_ROOT

#: The GPU targets a box speaks of: (target, compute capability, the GPUs it stands for).
GPUS = (("sm_75", (7, 5), "T4, Colab's free GPU"),
        ("sm_80", (8, 0), "A100; the RTX 30 and 40 series alike"),
        ("sm_90", (9, 0), "H100, H200"))

#: The title of the box (a MyST admonition): how a test and ``boxes`` find it in a notebook.
TITLE = "What runs where"
#: The first line of the box's cell.
HEAD = f":::{{admonition}} {TITLE}"


@dataclass(frozen=True)
class Notes:
    """What a topic's code cannot say about where it runs (one sentence or two each)."""
    #: the chapter without a GPU, beyond its kernels' checks on the interpreter
    cpu: str = ""
    #: what only an H100 gives (timings, Hopper-only kernels); the record is named by itself
    h100: str = ""
    #: the lab without a GPU
    lab_cpu: str = ""
    #: what a GPU adds to the lab (timings, more cases)
    lab_gpu: str = ""


#: One entry per topic (``NN_name``) and for the appendix.
NOTES: dict[str, Notes] = {
    "00_hello_warp": Notes(
        cpu="the kernels are compiled for every target and their SASS read here; the warp "
            "emulator runs the shuffles.",
        h100="the bandwidth and timing cells (this page's, taken live).",
        lab_cpu="every check runs: exercises 1 and 2 in the warp emulator, exercise 3 on the PTX "
                "interpreter, compiled for four targets with its SASS read.",
        lab_gpu="exercise 3 runs there over every case (up to 65,537 rows), then once more on "
                "the interpreter."),
    "01_tracer": Notes(
        cpu="the layouts come from the recording of the course's H100 "
            "(`fraglab/layouts/sm_90.json`); the tracer kernels run on the PTX interpreter.",
        h100="nothing beyond the recording: any GPU traces its own layouts "
             "(`python -m fraglab.tracer record`).",
        lab_cpu="every check runs: the tracer kernel on the PTX interpreter (also on a GPU), "
                "the decoder in Python.",
        lab_gpu="exercise 1 compares with the layout traced live on that GPU."),
    "02_forward_mapping": Notes(
        cpu="formulas are fitted to the H100's recorded layouts; the stores run on the PTX "
            "interpreter.",
        h100="nothing: a GPU without a recording of its own is told how to make one.",
        lab_cpu="every check runs: exercise 1 against the H100's recorded layout, exercise 2 on "
                "the PTX interpreter, compiled for four targets with its SASS read.",
        lab_gpu="exercise 1 compares with the layout traced live there; exercise 2 runs there, "
                "then once more on the interpreter."),
    "03_permutation_and_quad_reduction": Notes(
        cpu="the emulator runs the permutation and the reductions; the SASS comparisons are "
            "compiled here.",
        h100="nothing: every GPU output of this page is a check that any GPU repeats.",
        lab_cpu="every check runs: exercises 1 and 2 in the warp emulator, 3 and 4 on the PTX "
                "interpreter, compiled for four targets with their SASS read.",
        lab_gpu="exercises 3 and 4 run there (f16 WMMA: every GPU here), then once more on the "
                "interpreter."),
    "04_microbenchmark": Notes(
        cpu="every table and figure reads the recorded run; the SASS and resource tables are "
            "compiled here.",
        h100="the paper's figure and every timing (the record); the live re-run at the end.",
        lab_cpu="every check runs: exercises 1 and 2 in Python, exercise 3 with a stand-in timer "
                "(made-up times: only the plan is checked), exercise 4 on the PTX interpreter "
                "(its cycles are instruction counts there).",
        lab_gpu="exercise 3 times the kernels and exercise 4 reads real SM cycles."),
    "05_flash_attention": Notes(
        cpu="the NumPy and warp-emulator versions of FA-1 and FA-2 run here; the timings are the "
            "record's.",
        h100="the timings and the comparison with SDPA (the record).",
        lab_cpu="every check runs: exercise 1 in NumPy, 2 in the warp emulator, 3 on the PTX "
                "interpreter, compiled for four targets with its SASS read.",
        lab_gpu="exercise 3 (an FA-1 kernel: every GPU here) runs there over every case, then "
                "once more on the interpreter."),
    "06_layout_codegen": Notes(
        cpu="the generator runs anywhere; its code runs in the warp emulator and on the PTX "
            "interpreter, for the H100's recorded layouts.",
        h100="nothing: other GPUs generate for their own recorded layouts.",
        lab_cpu="every check runs: the plan in the warp emulator, the generated code on the PTX "
                "interpreter, compiled for sm_80, sm_90 and sm_120 with its SASS read.",
        lab_gpu="exercise 2 runs there where the GPU has f64 tensor cores (sm_80 and newer), on "
                "the interpreter alone on a T4."),
    "07_register_reuse": Notes(
        cpu="the SASS counts and ptxas tables are compiled here; the ladder's timings are the "
            "record's.",
        h100="the timings of the ladder against cuBLAS (the record).",
        lab_cpu="every check runs: exercise 1 on the PTX interpreter at small ragged sizes, "
                "exercises 2 and 3 need only the compiler.",
        lab_gpu="exercise 1 runs there over all of rung 4's cases; a cell times it against rung 3."),
    "08_register_liveness": Notes(
        cpu="registers, spills and the liveness figures are compiled and computed here; the "
            "timings are the record's.",
        h100="the timings (the record).",
        lab_cpu="every check runs: exercises 1 and 3 need only the compiler, exercise 2 runs on "
                "the PTX interpreter on small causal and ragged cases.",
        lab_gpu="exercise 2 runs there over the d = 64 and 128 cases, then once more on the "
                "interpreter."),
    "09_instruction_diet": Notes(
        cpu="every SASS count and diff is compiled here; the timings and stall tables are the "
            "record's.",
        h100="the timings beside SDPA's flash and cuDNN backends, and Nsight Compute's stall "
             "tables (the record).",
        lab_cpu="every check runs: the SASS comes from the compiler, exercise 2 runs on the PTX "
                "interpreter on small heads.",
        lab_gpu="exercise 2 runs there over ragged, causal, bf16 and peaky cases, then once more "
                "on the interpreter."),
    "10_fa3_pipelining": Notes(
        cpu="every kernel is compiled for `sm_90a` and its SASS read here.",
        h100="every kernel on a GPU: `wgmma` and `setmaxnreg` exist only on `sm_90a` (H100, "
             "H200); and the timings beside cuDNN (the record).",
        lab_cpu="every check runs: exercise 1 in Python, exercise 2 compiled for `sm_90a` with "
                "its SASS read and run on the PTX interpreter on small sequences, exercise 3 "
                "(the TMA producer) on the interpreter on small sequences of d = 64, 128 and 256.",
        lab_gpu="exercises 2 and 3 run on the PTX interpreter on small sequences first, then on "
                "an H100 or H200 over all of the chapter's cases."),
    "11_fused_lm_head": Notes(
        cpu="the forward kernel runs on the PTX interpreter on small heads; its registers and "
            "SASS are compiled here; the comparison with the anchors is the record's.",
        h100="the timings and peak memory beside PyTorch eager, `torch.compile`, Liger-Kernel "
             "and Cut Cross-Entropy at Llama 3 8B's and Gemma 2 2B's heads (the record).",
        lab_cpu="every check runs: the kernel with your `lse_tile` on the PTX interpreter on "
                "small heads (ragged vocabulary, several splits, a warp with every column "
                "masked), compiled for four targets with its SASS read.",
        lab_gpu="the exercise runs there over larger heads too, then once more on the "
                "interpreter."),
    "appendix_ptx_interpreter": Notes(
        cpu="all of it: this page is about the interpreter and was executed on a CPU.",
        h100="nothing to run: the interpreter's agreement with an H100 comes from a recorded run "
             "(`book/data/appendix_ptx_interpreter/`)."),
}

#: A topic that :data:`NOTES` does not list yet (one that ``python -m fraglab.chapter new`` just
#: wrote): sentences true of the template's example, for its author to replace with an entry.
TEMPLATE_NOTES = Notes(
    cpu="its kernels are compiled for every target and their SASS read here.",
    h100="the timings (the record, once `python -m fraglab.chapter bench` has made it).",
    lab_cpu="every check runs: the CUDA exercise on the PTX interpreter, compiled for every "
            "target with its SASS read.",
    lab_gpu="the CUDA exercise runs there, then once more on the interpreter.")


def notes(topic: str) -> Notes:
    return NOTES.get(topic, TEMPLATE_NOTES)


#: The ``Problem`` (``name`` in the topic's ``PROBLEMS``) that each CUDA exercise of a lab is
#: checked through, where the GPU's support decides where it runs (the lab's checks run it on
#: the interpreter alone on a GPU that the problem refuses).
LAB_PROBLEMS: dict[str, dict[str, str]] = {
    "00_hello_warp": {"exercise 3": "warp_sum"},
    "05_flash_attention": {"exercise 3": "fa1_inregister"},
    "07_register_reuse": {"exercise 1": "tile1d"},
    "08_register_liveness": {"exercise 2": "qreload"},
    "09_instruction_diet": {"exercise 2": "pointer_loads"},
    "10_fa3_pipelining": {"exercise 2": "attention_twostage", "exercise 3": "attention_tma"},
    "11_fused_lm_head": {"exercise 1": "fused_linear_cross_entropy"},
}


# --- derived facts ---------------------------------------------------------------------------------

@contextmanager
def simulated_gpu(cc: tuple[int, int]):
    """A ``with`` block in which :mod:`fraglab.device` answers as a GPU of compute capability
    ``cc`` would (``gpu_available``, ``mode``, ``compute_capability``, ``arch``, ``name``): for
    asking a ``Problem``'s ``requires`` what that GPU may run. ``FRAGLAB_MODE=cpu`` (e.g.
    :func:`fraglab.device.forced_mode`) still means the interpreter inside it. Nothing may be
    launched on the "GPU"."""
    saved = {k: getattr(device, k) for k in ("_probe", "compute_capability", "name")}
    device._probe = lambda: (True, "")
    device.compute_capability = lambda: tuple(cc)
    device.name = lambda: f"a simulated sm_{cc[0]}{cc[1]} GPU"
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(device, k, v)


def _plain(reason: str) -> str:
    """A refusal as the box quotes it: paths relative to the repository, one line."""
    return " ".join(reason.replace(str(REPO_ROOT) + "/", "").split())


@dataclass
class Refusals:
    """What one target runs of a topic's checks: ``total`` checks (problem x case), and for each
    refusal message the problems it skips with how many of their checks."""
    total: int
    skipped: dict[str, dict[str, int]] = field(default_factory=dict)
    #: checks per problem
    cases: dict[str, int] = field(default_factory=dict)

    @property
    def n_skipped(self) -> int:
        return sum(sum(v.values()) for v in self.skipped.values())


@lru_cache(maxsize=None)
def _problems(topic: str) -> dict:
    if not topic[:2].isdigit():
        return {}
    from .problem import topic_problems
    return topic_problems([topic[3:]]).get(topic[3:], {})


def refusals(topic: str, cc: tuple[int, int] | None) -> Refusals:
    """The checks of ``topic``'s ``PROBLEMS`` that a GPU of compute capability ``cc`` refuses
    (``cc=None``: the PTX interpreter, which runs the cases not marked ``slow``)."""
    out = Refusals(0)
    for name, p in _problems(topic).items():
        cases = p.cases if cc else p.interpreter_cases
        for case in cases:
            out.total += 1
            out.cases[name] = out.cases.get(name, 0) + 1
            if cc:
                with simulated_gpu(cc):
                    ok, why = p.supported(case)
            else:
                with device.forced_mode("cpu"):
                    ok, why = p.supported(case)
            if not ok:
                per = out.skipped.setdefault(_plain(why), {})
                per[name] = per.get(name, 0) + 1
    return out


def _kinds_refused(cc: tuple[int, int]) -> dict[str, list[str]]:
    """Chapter 01's derivation: ``{refusal: [kind, ...]}`` of the fragment kinds WMMA lacks at
    ``cc``."""
    from . import fragments
    out: dict[str, list[str]] = {}
    for k in fragments.catalogue.kinds():
        ok, why = device.supports(k.input, cc)
        if not ok:
            out.setdefault(why, []).append(k.name)
    return out


def record_device(topic: str, root: Path = REPO_ROOT) -> tuple[str, str] | None:
    """``(GPU name, path)`` of the topic's recorded run, ``book/data/NN_name/results.json``."""
    path = root / "book" / "data" / topic / "results.json"
    if not path.is_file():
        return None
    dev = json.loads(path.read_text()).get("device") or {}
    return (dev.get("name") or "a GPU"), path.relative_to(root).as_posix()


def executed_on(nb: dict) -> str | None:
    """Where a book page was executed, from its setup cell's stored status line
    (:func:`fraglab.device.status_line`): a GPU's name, ``"a CPU"``, or None (not executed)."""
    code = [c for c in nb.get("cells", []) if c.get("cell_type") == "code"]
    if not code:
        return None
    text = "".join("".join(o.get("text", "")) for o in code[0].get("outputs", []))
    m = re.search(r"\[gpu\] kernels run on (.+?) \((sm_\d+a?)\)", text)
    if m:
        return f"{m.group(1)} ({m.group(2)})"
    return "a CPU (kernels on the PTX interpreter)" if "[cpu]" in text else None


# --- the box ---------------------------------------------------------------------------------------

def _gpu_line(topic: str, arch: str, cc, who: str) -> str:
    """One target's line: which of the chapter's kernels it runs, and the message of each
    refusal (no counts of cases: a box changes when what runs where changes, not with a case)."""
    name = topic[3:]
    if topic == "01_tracer":
        refused = _kinds_refused(cc)
        if not refused:
            return f"- **{arch}** ({who}): every fragment kind."
        return (f"- **{arch}** ({who}): every fragment kind but "
                + "; ".join(f"the {why.split()[0]} ones, «{why}»" for why in refused) + ".")
    r = refusals(topic, cc)
    if not r.skipped:
        return f"- **{arch}** ({who}): every kernel of `fraglab.{name}.PROBLEMS`."
    if r.n_skipped == r.total and len(r.skipped) == 1:
        return f"- **{arch}** ({who}): none of its kernels, «{next(iter(r.skipped))}»."
    parts = []
    for why, per in r.skipped.items():
        names = [f"`{p}`" + ("" if n == r.cases[p] else " (some cases)") for p, n in per.items()]
        parts.append(f"{', '.join(names)}, «{why}»")
    return f"- **{arch}** ({who}): every kernel but " + "; ".join(parts) + "."


def _interpreter_line(topic: str) -> str:
    if topic == "01_tracer" or not _problems(topic):
        return ""
    r = refusals(topic, None)
    what = f"the chapter's kernels (`fraglab.{topic[3:]}.PROBLEMS`)"
    if r.skipped:
        return (f"the PTX interpreter runs {what} but "
                + "; ".join(f"«{why}»" for why in r.skipped) + "; ")
    if all(not c.slow for p in _problems(topic).values() for c in p.cases):
        return f"the PTX interpreter runs every check of {what}; "
    return f"the PTX interpreter runs {what} on their small cases (the large ones are for GPUs); "


def chapter_box(topic: str, nb: dict | None = None, root: Path = REPO_ROOT) -> str:
    """The box of chapter ``topic`` (``NN_name`` or ``appendix_...``), as markdown."""
    said = notes(topic)
    lines = [HEAD, ":class: note"]
    lines.append(f"**Without a GPU:** {_interpreter_line(topic)}{said.cpu}")
    if topic[:2].isdigit():
        lines += ["", "**On a GPU**, by target:"]
        lines += [_gpu_line(topic, arch, cc, who) for arch, cc, who in GPUS]
    lines += ["", f"**Needs an H100:** {said.h100}"]
    rec = record_device(topic, root)
    if rec:
        lines[-1] += f" The record: one run on an {rec[0]}, `{rec[1]}`."
    where = executed_on(nb) if nb is not None else None
    if where:
        lines += ["", f"This page was executed on {where}."]
    lines.append(":::")
    return "\n".join(lines)


def _lab_gpu_line(topic: str, arch: str, cc, who: str) -> str:
    skipped = []
    for exercise, pname in LAB_PROBLEMS.get(topic, {}).items():
        p = _problems(topic)[pname]
        with simulated_gpu(cc):
            refused = [why for ok, why in (p.supported(c) for c in p.cases) if not ok]
        if len(refused) == len(p.cases):
            skipped.append(f"{exercise} runs on the PTX interpreter alone («{_plain(refused[0])}»)")
        elif refused:
            skipped.append(f"{exercise} skips {len(refused)} of its {len(p.cases)} GPU cases "
                           f"(«{_plain(refused[0])}»)")
    if topic == "06_layout_codegen" and not device.supports("f64", cc)[0]:
        skipped.append(f"exercise 2 runs on the PTX interpreter alone "
                       f"(«{device.supports('f64', cc)[1]}»)")
    return f"- **{arch}** ({who}): " + ("; ".join(skipped) if skipped else "every exercise") + "."


def lab_box(topic: str) -> str:
    """The box of lab ``topic``, as markdown."""
    said = notes(topic)
    lines = [HEAD, ":class: note", f"**Without a GPU:** {said.lab_cpu}", "",
             f"**On a GPU:** {said.lab_gpu} By target:"]
    lines += [_lab_gpu_line(topic, arch, cc, who) for arch, cc, who in GPUS]
    lines += ["", "**Needs an H100:** nothing to pass the lab"
              + ("; a Hopper GPU (H100, H200) to run exercises 2 and 3 on a GPU at all." if
                 topic == "10_fa3_pipelining" else "."), ":::"]
    return "\n".join(lines)


def box_of(nb: dict) -> tuple[int, str] | None:
    """``(cell index, text)`` of the notebook's box, or None."""
    for k, c in enumerate(nb.get("cells", [])):
        src = c.get("source", "")
        text = "".join(src) if isinstance(src, list) else src
        if c.get("cell_type") == "markdown" and text.startswith(HEAD):
            return k, text
    return None


def expected_box(path: Path, nb: dict) -> str:
    """The box a notebook (a chapter of ``book/`` or a lab of ``solutions/`` or ``labs/``) must
    show."""
    topic = Path(path).stem
    if Path(path).parent.name == "book":
        return chapter_box(topic, nb)
    return lab_box(topic)


def with_box(path: Path, nb: dict) -> dict:
    """``nb`` with its box written (replaced in place, or a new markdown cell right after the
    first cell, the title and objectives)."""
    text = expected_box(path, nb)
    cell = {"cell_type": "markdown", "metadata": {}, "source": text.splitlines(keepends=True)}
    found = box_of(nb)
    if found:
        nb["cells"][found[0]]["source"] = cell["source"]
    else:
        nb["cells"].insert(1, cell)
    return nb
