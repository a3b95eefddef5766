"""The reproduction harness: a method's `reproduce.py` declares a `Study` (arms, tasks, claims, sections, plots)
and `methodlab reproduce <slug>` runs it here. Plain functions and frozen dataclasses (see study.py)."""

from methodlab.reproduce.study import Arm, Claim, Study, Task

__all__ = ["Arm", "Claim", "Study", "Task"]
