"""Grading labs so that a wrong answer cannot pass: one graded notebook per exercise, built from
the solution's cells and stored outputs with the learner's regions put in (:mod:`.build`), run
through nbval in a fresh kernel each (:mod:`.run`), regions checked for shortcuts
(:mod:`.shortcuts`); ``python -m fraglab.grading labs/NN_name.ipynb`` prints one line per
exercise (:mod:`.cli`)."""
from .build import Exercise, exercises, graded_notebook, region_bodies
from .cli import Verdict, grade_bodies, grade_lab

__all__ = ["Exercise", "Verdict", "exercises", "grade_bodies", "grade_lab", "graded_notebook",
           "region_bodies"]
