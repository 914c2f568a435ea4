"""The routing probe: its parsing of plans, and one tiny run end to end."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from e3orch.benchmarks.routing import bench_routing, first_executor, first_part, options, uniform_chance
from e3orch.executors.base import load_pool_specs
from e3orch.orchestration.episode import Observation
from e3orch.training.demos import Demo

# Three lookups and a decision: on the default pool a lookup's menu names two cards (web-search for
# #1 and #2, frontier-llm for #3), and so does a decision's (mid-llm for #1 and #2, reasoner for #3).
QUESTION = """A multi-hop lookup question.
P1: (obscure) Look up the annual budget of the Helix Society.
P2: (moderate) Search for the home city of the Nadir Canal, using P1.
P3: (simple) Look up the annual budget of Dunmore County, using P2.
P4: (standard) Decide the most likely explanation, using P3.
Final answer: the result of P4."""


def _plan(completion: str, milestone: str, style: str = "compact") -> Demo:
    cards = tuple(load_pool_specs("configs/executors/default.yaml"))
    obs = Observation(task_id="t", question=QUESTION, cards=cards, history=(), pending_milestone=milestone,
                      milestones_left=5, subtasks_left=20, cost_left=50.0, max_plan_subtasks=8)
    return Demo(task_id="t", teacher="heuristic", kind="plan", prompt="", completion=completion, obs=obs,
                style=style)  # type: ignore[arg-type]


def test_first_executor_reads_the_first_subtask_line() -> None:
    assert first_executor("S1 | E3 | - | Solve P1.\nS2 | E1 | S1 | Solve P2.") == "E3"
    assert first_executor("S1 |web-search| - | look it up") == "web-search"
    assert first_executor("MILESTONE: Solve P1") is None
    assert first_executor("") is None


def test_bench_routing_tiny_run(tiny_params_file: Path) -> None:
    r = bench_routing(str(tiny_params_file), quick=True, eval_tasks=4)
    assert r["plan_decisions"] > 0 and r["milestone_decisions"] > 0
    for key in ("handle_agreement", "majority_agreement", "uniform_chance", "plan_exact", "milestone_exact"):
        assert 0.0 <= r[key] <= 1.0, key
    # the best constant answer scores at least the share of its own handle, which is ≥ 1/pool
    assert r["majority_agreement"] >= 1 / 7
    assert r["sft_steps"] > 0


def test_first_part_reads_slot_lines_and_instructions() -> None:
    # a slot line solves its slot's part: the slots are the parts the milestone names, in task order
    assert first_part("S1 | #1 | -", _plan("", "Solve P3 and P2").obs) == "P2"
    assert first_part("S2 | #1 | -\nS1 | #2 | -", _plan("", "Solve P3 and P2").obs) == "P3"
    # a line with an instruction: the first part it names, whatever the slots
    assert first_part("S1 | #2 | - | Check P4 against P1.", _plan("", "Solve P1").obs) == "P4"
    assert first_part("S3 | #1 | -", _plan("", "Solve P1").obs) is None  # beyond the slots
    assert first_part("MILESTONE: Solve P1", _plan("", "Solve P1").obs) is None


@pytest.mark.parametrize(("completion", "milestone", "want"), [
    ("S1 | #3 | -", "Solve P1", 2),           # a lookup: two cards on the menu
    ("S1 | #1 | -", "Solve P4", 2),           # deciding: two
    ("S2 | #2 | -", "Solve P2 and P4", 2),    # slot 2 is P4
    ("S1 | #1 | - | Decide P4.", "Solve P1", 2),
    ("S1 | #1 | - | Summarise.", "Solve P1", 7),  # no part named: every card
])
def test_options_are_the_first_subtasks_menu(completion: str, milestone: str, want: int) -> None:
    assert options(_plan(completion, milestone)) == want
    assert options(_plan(completion, milestone, style="full")) == 7  # full prompts choose among all cards


def test_uniform_chance_is_the_mean_of_one_over_the_options() -> None:
    plans = [_plan("S1 | #3 | -", "Solve P1"), _plan("S1 | #1 | -", "Solve P4"), _plan("S1 | #2 | -", "Solve P2")]
    assert uniform_chance(plans) == pytest.approx(1 / 2)
    assert uniform_chance([replace(d, style="full") for d in plans]) == pytest.approx(1 / 7)
    assert uniform_chance([]) == 0.0
