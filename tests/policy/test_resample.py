"""Futile milestones (only spent or unknown parts) and their re-drawing by the policy orchestrator."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace

from conftest import REPO

from e3orch.executors.base import ExecutionResult, load_pool_specs
from e3orch.orchestration.episode import Observation
from e3orch.orchestration.reading import futile_parts
from e3orch.orchestration.types import MilestoneRecord, Plan, Subtask
from e3orch.policy.backends.base import Generation, PolicyBackend
from e3orch.policy.orchestrator import DecodeSettings, PolicyOrchestrator, futile_milestone, valid_milestones

QUESTION = "A task.\nP1: (easy) Look up the budget of X.\nP2: (hard) Compute the ratio, using P1.\nFinal answer: the result of P2."


def _obs(p1_attempts: int, limit: int = 3) -> Observation:
    history = tuple(
        MilestoneRecord(text="Solve P1", plan=Plan((Subtask("S1", "web-search", "Solve P1."),)),
                        results=[ExecutionResult("S1", "web-search", True, f"P1 = v{i} (confidence 0.9)")])
        for i in range(p1_attempts)
    )
    return Observation(task_id="t", question=QUESTION, cards=tuple(load_pool_specs(REPO / "configs/executors/default.yaml")),
                       history=history, pending_milestone=None, milestones_left=5, subtasks_left=10, cost_left=10.0,
                       max_plan_subtasks=8, max_part_attempts=limit)


def test_futile_only_when_no_named_part_would_run() -> None:
    spent, fresh = _obs(3), _obs(2)
    assert futile_milestone(spent, "MILESTONE: Solve P1")
    assert futile_milestone(spent, "MILESTONE: Solve P1, P7")     # P7: no such part
    assert futile_milestone(fresh, "MILESTONE: Solve P9")
    assert not futile_milestone(fresh, "MILESTONE: Solve P1")      # two attempts of three
    assert not futile_milestone(spent, "MILESTONE: Solve P1, P2")  # P2 still runs
    assert not futile_milestone(spent, "ANSWER: P1")
    assert not futile_milestone(spent, "MILESTONE: Finish")        # no part named: the parser's business
    assert not futile_milestone(spent, "garbage")
    assert not futile_milestone(_obs(3, limit=0), "MILESTONE: Solve P1")  # no attempt limit
    # the parts the engine's futile_milestone defect names
    assert futile_parts("Solve P1, P7", QUESTION, spent.history, 3) == ["P1", "P7"]
    assert futile_parts("Solve P1, P2", QUESTION, spent.history, 3) == []
    assert futile_parts("Solve P1", "A task without numbered parts.", spent.history, 3) == []


class Scripted(PolicyBackend):
    """Greedy: re-plan P1; sampled: the i-th call's line from ``sampled``."""

    name = "scripted"

    def __init__(self, sampled: Sequence[str], logps: dict[str, list[float]] | None = None) -> None:
        self.sampled = list(sampled)
        self.temperatures: list[float] = []
        self.logps = logps or {}  # completion -> its per-token log-probabilities (score)
        self.scored: list[str] = []

    def generate(self, prompts, *, n=1, temperature=1.0, top_p=1.0, max_new_tokens=64, seed=None, min_new_tokens=0,  # type: ignore[no-untyped-def]
                 row_seeds=None):
        self.temperatures.append(temperature)
        text = "MILESTONE: Solve P1" if temperature == 0 else self.sampled.pop(0)
        return [[Generation(text)] for _ in prompts]

    def score(self, prompts, completions):  # type: ignore[no-untyped-def]
        self.scored.extend(completions)
        return [self.logps.get(c, [-9.0]) for c in completions]

    def count_tokens(self, text: str) -> int:
        return len(text.split())


def _decide(backend: Scripted, resample: int, obs: Observation, mask: bool = False) -> tuple[str, int]:
    orch = PolicyOrchestrator(backend, DecodeSettings(resample_futile=resample, resample_temperature=1.5, prompt_style="compact",
                                                      mask_futile=mask))
    return asyncio.run(orch.decide(obs, "milestone")), orch.resampled


def test_futile_milestone_is_redrawn_until_one_would_run() -> None:
    backend = Scripted(["MILESTONE: Solve P1", "MILESTONE: Solve P2", "ANSWER: P2"])
    assert _decide(backend, 3, _obs(3)) == ("MILESTONE: Solve P2", 2)
    assert backend.temperatures == [0.0, 1.5, 1.5]


def test_redraws_are_bounded_and_off_by_default() -> None:
    assert _decide(Scripted(["MILESTONE: Solve P1"] * 5), 2, _obs(3)) == ("MILESTONE: Solve P1", 2)
    off = Scripted([])
    assert _decide(off, 0, _obs(3)) == ("MILESTONE: Solve P1", 0)
    assert off.temperatures == [0.0]
    fresh = Scripted([])
    assert _decide(fresh, 3, _obs(2)) == ("MILESTONE: Solve P1", 0)  # not futile: kept


def test_metrics_state_the_redraws_of_systems_that_made_any() -> None:
    from e3orch.evaluation.evaluate import metrics_table

    systems = metrics_table({"policy": [], "heuristic": []}, redrawn={"policy": 3, "heuristic": 0})["systems"]
    assert systems["policy"]["resampled_milestones"] == 3
    assert "resampled_milestones" not in systems["heuristic"]


THREE = ("A task.\nP1: (easy) Look up X.\nP2: (easy) Look up Y.\nP3: (hard) Compare them, using P1 and P2.\n"
         "Final answer: the result of P3.")


def test_valid_milestones_are_the_answer_every_fresh_part_and_all_ready_parts() -> None:
    assert valid_milestones(_obs(3)) == ["ANSWER: P2", "MILESTONE: Solve P2"]  # P1 spent; P2 ready
    assert valid_milestones(_obs(2)) == ["ANSWER: P2", "MILESTONE: Solve P1", "MILESTONE: Solve P2"]
    three = replace(_obs(0), question=THREE)  # nothing run yet: P1 and P2 ready, P3 waits for them
    assert valid_milestones(three) == ["ANSWER: P3", "MILESTONE: Solve P1", "MILESTONE: Solve P2",
                                       "MILESTONE: Solve P3", "MILESTONE: Solve P1, P2"]
    assert valid_milestones(replace(_obs(3), question="A task without numbered parts.")) == []


def test_masking_replaces_a_futile_milestone_by_the_valid_one_the_policy_scores_highest() -> None:
    # greedy says "Solve P1" (spent); of the valid decisions the policy prefers to move on to P2
    backend = Scripted([], logps={"ANSWER: P2": [-2.0, -1.5], "MILESTONE: Solve P2": [-0.5, -0.4, -0.3]})
    assert _decide(backend, 0, _obs(3), mask=True) == ("MILESTONE: Solve P2", 1)
    assert backend.scored == ["ANSWER: P2", "MILESTONE: Solve P2"] and backend.temperatures == [0.0]
    # summed log-probabilities decide: here answering is likelier
    answer = Scripted([], logps={"ANSWER: P2": [-0.2, -0.1], "MILESTONE: Solve P2": [-0.5, -0.4, -0.3]})
    assert _decide(answer, 0, _obs(3), mask=True) == ("ANSWER: P2", 1)
    # re-draws come first; masking only where they stayed futile
    redrawn = Scripted(["MILESTONE: Solve P1", "ANSWER: P2"])
    assert _decide(redrawn, 2, _obs(3), mask=True) == ("ANSWER: P2", 2) and redrawn.scored == []


def test_masking_leaves_valid_milestones_alone_and_is_off_by_default() -> None:
    fresh = Scripted([])
    assert _decide(fresh, 0, _obs(2), mask=True) == ("MILESTONE: Solve P1", 0)  # P1 not spent: kept
    off = Scripted([])
    assert _decide(off, 0, _obs(3)) == ("MILESTONE: Solve P1", 0)
    assert fresh.scored == off.scored == []
    assert DecodeSettings().mask_futile is False
