"""Where core meets the topics: by name, at run time, never by import.

Core modules import no topic and no topic imports another (``tests/test_structure.py``). The
two places where core needs a topic's code look it up here, from these tables, which the
structure test reads (every entry names a module and an attribute that exist, and no other core
module imports a module by name):

* :data:`EXPORTS`: what every topic may export for core to collect (``PROBLEMS``:
  :func:`fraglab.problem.topic_problems`);
* :data:`COURSE_KERNELS`: the course's kernels that later chapters time beside theirs
  (:class:`fraglab.attention.Baselines`); a chapter that is missing or broken is noted, never
  fatal.
"""
from __future__ import annotations

import importlib

#: Attributes core collects from every topic package ``fraglab.<name>`` (a topic may lack them).
EXPORTS = ("PROBLEMS",)

#: The course's own kernels that later chapters time beside theirs: name -> (module, launcher,
#: what). A launcher is ``launcher(q, k, v, *, causal) -> (run, out)``.
COURSE_KERNELS = {
    "fa2": ("fraglab.flash_attention", "fa2_launcher", "chapter 05's FA-2"),
    "ch09": ("fraglab.instruction_diet", "attention_launcher", "chapter 09's last step"),
}


def lookup(module: str, attr: str):
    """``module.attr``, imported now (whatever the import raises, raised)."""
    return getattr(importlib.import_module(module), attr)


def topic_export(topic: str, attr: str):
    """Topic ``topic``'s (``"hello_warp"``) export ``attr`` (one of :data:`EXPORTS`), or
    ``None`` where the topic has none."""
    if attr not in EXPORTS:
        raise KeyError(f"{attr!r} is no topic export core collects ({', '.join(EXPORTS)})")
    return getattr(importlib.import_module(f"fraglab.{topic}"), attr, None)
