"""Engine record types: subtasks, plans, decisions, milestones and episodes.

These are the records that travel between the engine, the orchestrators, the rollout tree and
the evaluation. They are plain dataclasses; ``to_dict`` gives the JSON trace shape of DESIGN §5.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from e3orch.executors.base import ExecutionResult


@dataclass(frozen=True)
class Defect:
    """A planning defect found by the parser/validator or the episode runner.

    Codes: unparseable, bad_line, no_slot, unknown_executor, duplicate_id, empty_instruction, self_dep,
    dangling_dep, cyclic_deps, empty_plan, oversized_plan, over_budget, part_attempts, futile_milestone,
    no_answer, milestone_budget, cost_budget, unconsumed_output.
    """

    code: str
    detail: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "detail": self.detail}


@dataclass(frozen=True)
class Subtask:
    id: str
    executor: str
    instruction: str
    deps: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "executor": self.executor, "instruction": self.instruction, "deps": list(self.deps)}


@dataclass(frozen=True)
class Plan:
    subtasks: tuple[Subtask, ...]
    defects: tuple[Defect, ...] = ()

    @property
    def ids(self) -> list[str]:
        return [s.id for s in self.subtasks]


DecisionKind = Literal["milestone", "answer", "invalid"]


@dataclass(frozen=True)
class MilestoneDecision:
    kind: DecisionKind
    text: str
    defects: tuple[Defect, ...] = ()


@dataclass
class MilestoneRecord:
    """One milestone → plan → act step of an episode."""

    text: str
    plan: Plan
    results: list[ExecutionResult] = field(default_factory=list)
    makespan_s: float = 0.0
    serial_latency_s: float = 0.0
    cost: float = 0.0
    milestone_completion: str = ""
    plan_completion: str = ""
    # what orchestration.reading reads off the record (parts named, values reported), read once: an
    # episode does not change a record once it appends it
    reading: Any = field(default=None, init=False, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "plan": [s.to_dict() for s in self.plan.subtasks],
            "results": [r.to_dict() for r in self.results],
            "defects": [d.to_dict() for d in self.plan.defects],
            "makespan_s": round(self.makespan_s, 6),
            "serial_latency_s": round(self.serial_latency_s, 6),
            "cost": round(self.cost, 6),
        }


@dataclass
class Episode:
    """A finished episode: the trace of DESIGN §5 plus what rewards need."""

    task_id: str
    benchmark: str
    domain: str
    question: str
    orchestrator: str
    milestones: list[MilestoneRecord]
    answer: str
    correct: bool
    score: float
    cost: float
    makespan_s: float
    serial_latency_s: float
    defects: list[Defect] = field(default_factory=list)
    budget_failure: str | None = None
    grade_error: str | None = None

    @property
    def n_calls(self) -> int:
        return sum(len(m.results) for m in self.milestones)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "benchmark": self.benchmark,
            "domain": self.domain,
            "orchestrator": self.orchestrator,
            "question": self.question,
            "milestones": [m.to_dict() for m in self.milestones],
            "answer": self.answer,
            "correct": self.correct,
            "score": self.score,
            "cost": round(self.cost, 6),
            "makespan_s": round(self.makespan_s, 6),
            "serial_latency_s": round(self.serial_latency_s, 6),
            "defects": [d.to_dict() for d in self.defects],
            "budget_failure": self.budget_failure,
            "grade_error": self.grade_error,
        }
