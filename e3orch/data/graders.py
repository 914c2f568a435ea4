"""Graders: one per benchmark, behind a small registry.

``grade(task, answer) -> Grade`` never raises for a bad answer: a grader failure (a crash in
the unit tests, an unparseable number) is a recorded ``error`` with ``correct=False``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from e3orch.data.tasks import Task


@dataclass(frozen=True)
class Grade:
    correct: bool
    score: float
    error: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {"correct": self.correct, "score": round(self.score, 6), "error": self.error}


Grader = Callable[[Task, str], Grade]
_GRADERS: dict[str, Grader] = {}
# benchmark -> module that registers its grader (imported on first use)
_LAZY: dict[str, str] = {
    "sim": "e3orch.data.sim",
    "humaneval": "e3orch.data.live",
    "mbpp": "e3orch.data.live",
    "gsm8k": "e3orch.data.live",
    "math": "e3orch.data.live",
    "hotpotqa": "e3orch.data.live",
}


def register_grader(benchmark: str) -> Callable[[Grader], Grader]:
    def deco(fn: Grader) -> Grader:
        _GRADERS[benchmark] = fn
        return fn

    return deco


def get_grader(benchmark: str) -> Grader:
    key = benchmark.split("/")[0]
    if key not in _GRADERS and key in _LAZY:
        importlib.import_module(_LAZY[key])
    if key not in _GRADERS:
        raise ValueError(f"no grader for benchmark {benchmark!r}; known: {', '.join(sorted(set(_GRADERS) | set(_LAZY)))}")
    return _GRADERS[key]


def grade(task: Task, answer: str) -> Grade:
    return get_grader(task.benchmark)(task, answer)
