"""Prompt rendering: the compact style's exact text, and the fall-back to the full style."""

from __future__ import annotations

from pathlib import Path

from e3orch.executors.base import ExecutionResult, load_pool_specs
from e3orch.orchestration.episode import Observation
from e3orch.orchestration.types import MilestoneRecord, Plan, Subtask
from e3orch.policy.prompts import render_prompt

REPO = Path(__file__).resolve().parents[2]
DEFAULT = tuple(load_pool_specs(REPO / "configs" / "executors" / "default.yaml"))
QUESTION = """A fact verification task.
P1: (simple) Find the main export of Corvo Labs.
P2: (easy) Find the largest customer of Corvo Labs.
P3: (moderate) Infer whether the plan is feasible, using P1 and P2.
Final answer: the result of P3."""


def _obs(history: tuple[MilestoneRecord, ...], pending: str | None, question: str = QUESTION) -> Observation:
    return Observation(task_id="t", question=question, cards=DEFAULT, history=history, pending_milestone=pending,
                       milestones_left=10, subtasks_left=30, cost_left=50.0, max_plan_subtasks=8)


HISTORY = (MilestoneRecord(
    "Solve P1, P2",
    Plan((Subtask("S1", "web-search", "Solve P1."), Subtask("S2", "web-search", "Solve P2."))),
    [ExecutionResult("S1", "web-search", True, "P1 = Norvik52 (confidence 0.92)"),
     ExecutionResult("S2", "web-search", False, "", error="timeout")],
),)


def test_compact_milestone_prompt_exact() -> None:
    assert render_prompt(_obs(HISTORY, None), "milestone", style="compact") == (
        "### parts\n"
        "P1 retrieve easy: 0.92 x1\n"
        "P2 retrieve easy: failed x1\n"
        "P3 reason normal <P1,P2: waits\n"
        "### final: P3 waits\n"
        "### budget: 10 milestones, 30 subtasks left\n"
        "### decide: milestone\n"
    )


def test_compact_plan_prompt_lists_each_parts_menu() -> None:
    text = render_prompt(_obs(HISTORY, "Solve P2, P3"), "plan", style="compact")
    assert text == (
        "### S1 P2 retrieve easy x1: #1 good 0.03 | #2 fair 0.7 | #3 good 3.5 | #4 strong 22\n"
        "### S2 P3 reason normal: #1 good 3.5 | #2 strong 11 | #3 strong 22\n"
        "### decide: plan for Solve P2, P3\n"
    )


def test_compact_falls_back_to_full_without_numbered_parts() -> None:
    obs = _obs((), None, question="What is 2 + 2?")
    assert render_prompt(obs, "milestone", style="compact") == render_prompt(obs, "milestone", style="full")
    assert "### executors" in render_prompt(obs, "milestone", style="compact")


def test_compact_prompts_mark_parts_the_engine_will_not_run_again() -> None:
    retry = MilestoneRecord("Solve P3", Plan((Subtask("S1", "mid-llm", "Solve P3."),)),
                            [ExecutionResult("S1", "mid-llm", True, "P3 = yes-1 (confidence 0.41)")])
    obs = _obs((*HISTORY, retry, retry, retry), None)
    spent = Observation(**{**obs.__dict__, "max_part_attempts": 3})
    text = render_prompt(spent, "milestone", style="compact")
    assert "P3 reason normal <P1,P2: 0.41 x3 spent\n" in text and "### final: P3 0.41 x3 spent\n" in text
    # without an engine limit there is nothing to mark
    assert "spent" not in render_prompt(obs, "milestone", style="compact")
    plan = Observation(**{**spent.__dict__, "pending_milestone": "Solve P3"})
    assert render_prompt(plan, "plan", style="compact").startswith("### S1 P3 reason normal x3 spent: #1 good 3.5")
