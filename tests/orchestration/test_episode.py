"""Episodes: the milestone → plan → act state machine, its budgets, answers and forks.

A scripted orchestrator (a real :class:`Orchestrator` that replays fixed texts) drives the engine
on a hand-built task with simulated executors of known profiles.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from e3orch.config import EngineConfig
from e3orch.data.tasks import Requirement, Task
from e3orch.executors.base import ExecutorSpec, build_pool
from e3orch.orchestration.episode import DecisionType, EpisodeState, Observation, Orchestrator, run_episode
from e3orch.orchestration.types import Episode

TASK = Task(
    task_id="hand-chain",
    split="eval",
    domain="multihop",
    benchmark="sim/multihop",
    question="A multi-hop lookup question.\nP1: (quick) Find a.\nP2: (quick) Compute b, using P1.\n"
             "P3: (quick) Decide c, using P2.\nFinal answer: the result of P3.",
    answer="yes-333",
    requirements=(
        Requirement("P1", "retrieve", 0, (), "Norvik11"),
        Requirement("P2", "compute", 0, ("P1",), "4242"),
        Requirement("P3", "reason", 0, ("P2",), "yes-333"),
    ),
)


def _spec(name: str, rate: float, price: float, **extra: object) -> ExecutorSpec:
    return ExecutorSpec.model_validate({
        "name": name, "kind": "simulated", "description": f"{name} test executor",
        "skills": {s: rate for s in ("retrieve", "compute", "code", "reason")},
        "price": {"input_per_1k": price, "output_per_1k": price},
        "latency": {"base_s": 1.0, "per_1k_tokens_s": 0.0}, **extra,
    })


POOL = build_pool([_spec("perfect", 1.0, 1.0, latency_noise=0.0), _spec("hopeless", 0.0, 0.1)])
CFG = EngineConfig(max_milestones=4, max_plan_subtasks=4, max_total_subtasks=10, max_cost=100.0, max_part_attempts=0)


class Scripted(Orchestrator):
    """Replays milestone and plan texts in order; the last one of each repeats forever."""

    name = "scripted"

    def __init__(self, milestones: Sequence[str], plans: Sequence[str] = ("",)) -> None:
        self.milestones = list(milestones)
        self.plans = list(plans)
        self.seen: list[tuple[DecisionType, Observation]] = []

    async def decide(self, obs: Observation, kind: DecisionType) -> str:
        self.seen.append((kind, obs))
        queue = self.milestones if kind == "milestone" else self.plans
        return queue.pop(0) if len(queue) > 1 else queue[0]


def play(orch: Orchestrator, cfg: EngineConfig = CFG, task: Task = TASK, seed: int = 0) -> Episode:
    return asyncio.run(run_episode(task, orch, POOL, cfg, seed=seed))


def codes(ep: Episode) -> list[str]:
    return [d.code for d in ep.defects]


SOLVE_CHAIN = (
    ["MILESTONE: Solve P1", "MILESTONE: Solve P2", "MILESTONE: Solve P3", "ANSWER: P3"],
    ["S1 | perfect | - | Solve P1.", "S1 | perfect | - | Solve P2.", "S1 | perfect | - | Solve P3."],
)


# -- a normal episode -------------------------------------------------------------------------


def test_scripted_episode_solves_the_chain_and_resolves_the_answer_reference() -> None:
    ep = play(Scripted(*SOLVE_CHAIN))
    assert [m.text for m in ep.milestones] == ["Solve P1", "Solve P2", "Solve P3"]
    assert ep.answer == "yes-333"  # "ANSWER: P3" → the workspace value of P3
    assert (ep.correct, ep.score, ep.budget_failure, ep.grade_error) == (True, 1.0, None, None)
    assert ep.defects == []
    assert ep.makespan_s == 3.0 and ep.serial_latency_s == 3.0  # three 1-second milestones
    assert ep.cost == pytest.approx(sum(r.cost for m in ep.milestones for r in m.results))
    assert ep.n_calls == 3
    assert ep.orchestrator == "scripted"


def test_observations_carry_text_cards_history_and_budgets() -> None:
    orch = Scripted(*SOLVE_CHAIN)
    play(orch)
    kinds = [k for k, _ in orch.seen]
    assert kinds == ["milestone", "plan"] * 3 + ["milestone"]
    first, last = orch.seen[0][1], orch.seen[-1][1]
    assert first.question == TASK.question
    assert [c.name for c in first.cards] == ["perfect", "hopeless"]
    assert (first.history, first.pending_milestone, first.milestones_left, first.subtasks_left) == ((), None, 4, 10)
    assert orch.seen[1][1].pending_milestone == "Solve P1"
    assert len(last.history) == 3 and last.milestones_left == 1 and last.subtasks_left == 7
    assert last.cost_left == pytest.approx(100.0 - sum(r.cost for m in last.history for r in m.results))
    assert not hasattr(first, "task")  # the hidden requirement graph is never observed


@pytest.mark.parametrize(
    ("answer", "expected", "correct"),
    [
        ("ANSWER: P3", "yes-333", True),
        ("ANSWER: P2", "4242", False),
        ("ANSWER: P3.", "yes-333", True),
        ("ANSWER: yes-333", "yes-333", True),  # a literal answer is kept as is
        ("ANSWER: P9", "", False),             # an unknown part resolves to nothing
        ("ANSWER: S1", "P3 = yes-333", False),  # latest output of subtask S1 (its full text)
    ],
)
def test_answer_references(answer: str, expected: str, correct: bool) -> None:
    ms, plans = SOLVE_CHAIN
    ep = play(Scripted([*ms[:-1], answer], plans))
    assert ep.answer.split(" (confidence")[0] == expected
    assert ep.correct is correct


# -- budgets ----------------------------------------------------------------------------------


def test_never_answering_hits_the_milestone_budget() -> None:
    ep = play(Scripted(["MILESTONE: keep going"], ["S1 | perfect | - | Solve P1."]))
    assert len(ep.milestones) == CFG.max_milestones
    assert ep.budget_failure == "milestone_budget"
    assert codes(ep) == ["milestone_budget", "no_answer"]
    assert (ep.answer, ep.correct, ep.score, ep.grade_error) == ("", False, 0.0, "no answer")


def test_invalid_decisions_are_defects_not_crashes_and_use_up_the_budget() -> None:
    ep = play(Scripted(["I am not sure what to do."]))
    assert ep.milestones == []
    assert ep.budget_failure == "milestone_budget"
    assert codes(ep) == ["unparseable"] * (CFG.max_milestones + 1) + ["milestone_budget", "no_answer"]


def test_invalid_plans_are_recorded_and_the_episode_goes_on() -> None:
    ep = play(Scripted(
        ["MILESTONE: try", "MILESTONE: try again", "ANSWER: P1"],
        ["no plan here", "S1 | nobody | - | Solve P1.\nS2 | perfect | S1 | Solve P2."],
    ))
    assert len(ep.milestones) == 2 and ep.milestones[0].results == []
    # the valid remainder still runs: S2 (its dangling dep dropped) fails on its missing input
    assert [r.id for r in ep.milestones[1].results] == ["S2"]
    assert ep.milestones[1].results[0].output == "P2: cannot proceed, missing input P1"
    assert [d.code for d in ep.milestones[0].plan.defects] == ["bad_line", "unparseable"]
    assert [d.code for d in ep.milestones[1].plan.defects] == ["unknown_executor", "dangling_dep"]
    assert codes(ep) == ["bad_line", "unparseable", "unknown_executor", "dangling_dep"]
    assert ep.answer == "" and not ep.correct and ep.budget_failure is None


def test_cost_budget_ends_the_episode_after_the_plan_that_crossed_it() -> None:
    cfg = EngineConfig(max_milestones=4, max_plan_subtasks=4, max_total_subtasks=10, max_cost=0.05, max_part_attempts=0)
    ep = play(Scripted(*SOLVE_CHAIN), cfg)
    assert len(ep.milestones) == 1
    assert ep.cost >= 0.05
    assert ep.budget_failure == "cost_budget"
    assert codes(ep) == ["cost_budget", "no_answer"]
    assert not ep.correct


def test_subtask_budget_truncates_plans_with_over_budget_defect() -> None:
    cfg = EngineConfig(max_milestones=4, max_plan_subtasks=3, max_total_subtasks=4, max_cost=100.0, max_part_attempts=0)
    three = "S1 | perfect | - | Solve P1.\nS2 | hopeless | - | Solve P1.\nS3 | hopeless | - | Solve P1."
    ep = play(Scripted(["MILESTONE: a", "MILESTONE: b", "ANSWER: P1"], [three]), cfg)
    assert [len(m.plan.subtasks) for m in ep.milestones] == [3, 1]
    assert codes(ep) == ["oversized_plan", "over_budget"]
    assert ep.milestones[1].plan.defects[0].detail == "3 subtasks > 1"


def test_milestone_failures_can_be_repaired_later() -> None:
    ep = play(Scripted(
        ["MILESTONE: first try", "MILESTONE: repair", "ANSWER: P1"],
        ["S1 | hopeless | - | Solve P1.", "S1 | perfect | - | Solve P1."],
    ))
    first, second = (m.results[0].output for m in ep.milestones)
    assert "Norvik11" not in first and second.startswith("P1 = Norvik11")
    assert ep.answer == "Norvik11"  # the latest value wins
    assert not ep.correct  # P1 is not the final part


# -- the state machine and forks --------------------------------------------------------------


def _state() -> EpisodeState:
    return EpisodeState.start(TASK, POOL, CFG, seed=3)


def _step(st: EpisodeState, part: str) -> None:
    assert st.needs == "milestone"
    st.apply_milestone(f"MILESTONE: Solve {part}")
    assert st.needs == "plan"
    completion = f"S1 | perfect | - | Solve {part}."
    asyncio.run(st.act(st.apply_plan(completion), POOL, completion))


def test_state_machine_alternates_and_finishes() -> None:
    st = _state()
    _step(st, "P1")
    assert st.workspace == {"P1": "Norvik11"} and st.subtasks_used == 1 and st.needs == "milestone"
    st.apply_milestone("ANSWER: P1")
    assert st.finished and st.needs is None and st.answer == "Norvik11"
    with pytest.raises(AssertionError):
        st.apply_milestone("MILESTONE: more")


def test_fork_shares_history_and_does_not_leak_into_the_parent() -> None:
    parent = _state()
    _step(parent, "P1")
    snapshot = (list(parent.milestones), dict(parent.workspace), list(parent.defects), parent.cost,
                parent.subtasks_used, parent.makespan_s, parent.decisions)

    child = parent.fork("a")
    assert child.branch == "/a"
    assert child.milestones == parent.milestones
    assert all(c is p for c, p in zip(child.milestones, parent.milestones))  # executed once, shared
    _step(child, "P2")
    child.apply_milestone("not a decision")
    child.apply_milestone("ANSWER: P2")

    assert child.finished and child.answer == "4242" and len(child.milestones) == 2
    assert child.workspace == {"P1": "Norvik11", "P2": "4242"}
    assert (list(parent.milestones), dict(parent.workspace), list(parent.defects), parent.cost,
            parent.subtasks_used, parent.makespan_s, parent.decisions) == snapshot
    assert not parent.finished and parent.answer == "" and parent.needs == "milestone"

    grandchild = child.fork("b")
    assert grandchild.branch == "/a/b"


def test_forks_with_different_branches_draw_different_noise() -> None:
    noisy = build_pool([_spec("perfect", 1.0, 1.0)])  # latency noise on

    def latency(branch: str) -> float:
        st = EpisodeState.start(TASK, noisy, CFG, seed=3).fork(branch)
        st.apply_milestone("MILESTONE: Solve P1")
        rec = asyncio.run(st.act(st.apply_plan("S1 | perfect | - | Solve P1."), noisy))
        return rec.results[0].latency_s

    assert latency("x") == latency("x")
    assert latency("x") != latency("y")


def _second_part_result(key: str, seed: int, repair_first: bool, attempts: int = 1) -> list[tuple[str, float]]:
    """P2's results (output, latency) on a coin-flip executor after P1 on a perfect one, with or
    without a repair of P1 first: the same inputs either way, one milestone more or less before."""
    coin = build_pool([_spec("perfect", 1.0, 1.0), _spec("coin", 0.5, 1.0)])
    cfg = CFG.model_copy(update={"noise_key": key})
    st = EpisodeState.start(TASK, coin, cfg, seed=seed)
    for _ in range(2 if repair_first else 1):
        st.apply_milestone("MILESTONE: Solve P1")
        asyncio.run(st.act(st.apply_plan("S1 | perfect | - | Solve P1."), coin))
    out = []
    for _ in range(attempts):
        st.apply_milestone("MILESTONE: Solve P2")
        rec = asyncio.run(st.act(st.apply_plan("S1 | coin | - | Solve P2."), coin))
        out.append((rec.results[0].output, rec.results[0].latency_s))
    return out


def test_noise_keyed_by_part_does_not_redraw_a_later_part_after_an_extra_milestone() -> None:
    for seed in range(8):
        assert _second_part_result("part", seed, False) == _second_part_result("part", seed, True)
    # keyed by the milestone's index, the extra milestone re-draws P2 (latency noise differs for every seed here)
    assert all(_second_part_result("milestone", seed, False) != _second_part_result("milestone", seed, True)
               for seed in range(8))
    # a repair is another draw: the second attempt at P2 is not a copy of the first
    first, second = _second_part_result("part", 0, False, attempts=2)
    assert first[1] != second[1]


def test_noise_keys_name_each_part_and_its_attempt_number() -> None:
    st = EpisodeState.start(TASK, POOL, CFG.model_copy(update={"noise_key": "part"}), seed=0)
    st.apply_milestone("MILESTONE: Solve P1")
    asyncio.run(st.act(st.apply_plan("S1 | perfect | - | Solve P1."), POOL))
    st.apply_milestone("MILESTONE: Solve P1, P2")
    plan = st.apply_plan("S1 | perfect | - | Solve P1.\nS2 | perfect | S1 | Solve P2, using P1.\nS3 | perfect | - | Think.")
    assert st._part_noise_keys(plan) == {"S1": "P1#2", "S2": "P2#1,P1#3", "S3": "S3@1"}


# -- attempts per part ------------------------------------------------------------------------


def test_a_part_gets_at_most_max_part_attempts_subtasks() -> None:
    cfg = EngineConfig(max_milestones=4, max_plan_subtasks=4, max_total_subtasks=10, max_part_attempts=3)
    orch = Scripted(["MILESTONE: Solve P1, P2", "MILESTONE: Solve P1, P2", "ANSWER: P2"],
                    ["S1 | hopeless | - | Solve P1.\nS2 | hopeless | - | Solve P1.",        # P1 twice: x2
                     "S1 | hopeless | - | Solve P1.\nS2 | perfect | S1 | Solve P2.\nS3 | perfect | - | Solve P1."])
    ep = play(orch, cfg)
    first, second = ep.milestones
    assert [s.id for s in first.plan.subtasks] == ["S1", "S2"]
    # the third P1 subtask runs, the fourth is refused; its id leaves nobody's deps (none here)
    assert [(s.id, s.deps) for s in second.plan.subtasks] == [("S1", ()), ("S2", ("S1",))]
    assert codes(ep) == ["part_attempts"]
    assert ep.defects[0].detail == "S3: P1 already had 3 subtasks (engine.max_part_attempts)"
    assert orch.seen[-1][1].max_part_attempts == 3


def test_a_milestone_naming_only_spent_parts_is_a_defect_of_its_own() -> None:
    """The milestone that chose a spent part is blamed (futile_milestone), not only its plan, whose
    refused subtask is recorded as before (part_attempts); a milestone naming a part that still
    runs is not."""
    cfg = EngineConfig(max_milestones=4, max_plan_subtasks=4, max_total_subtasks=10, max_part_attempts=1)
    orch = Scripted(["MILESTONE: Solve P1", "MILESTONE: Solve P1", "MILESTONE: Solve P1, P2", "ANSWER: P2"],
                    ["S1 | perfect | - | Solve P1.", "S1 | perfect | - | Solve P1.", "S1 | perfect | - | Solve P2."])
    ep = play(orch, cfg)
    assert codes(ep) == ["futile_milestone", "part_attempts"]
    assert ep.defects[0].detail == "names only spent or unknown parts: P1"
    assert [len(m.plan.subtasks) for m in ep.milestones] == [1, 0, 1]


def test_a_subtask_that_also_names_a_fresh_part_runs() -> None:
    cfg = EngineConfig(max_milestones=4, max_plan_subtasks=4, max_total_subtasks=10, max_part_attempts=1)
    orch = Scripted(["MILESTONE: Solve P1", "MILESTONE: Solve P2", "ANSWER: P2"],
                    ["S1 | perfect | - | Solve P1.", "S1 | perfect | - | Solve P2, using P1.\nS2 | perfect | - | Solve P1."])
    ep = play(orch, cfg)
    assert [s.instruction for s in ep.milestones[1].plan.subtasks] == ["Solve P2, using P1."]
    assert codes(ep) == ["part_attempts"] and ep.defects[0].detail.startswith("S2: P1 already had 2 subtasks")


def test_refused_subtasks_leave_the_deps_of_the_others() -> None:
    cfg = EngineConfig(max_milestones=4, max_plan_subtasks=4, max_total_subtasks=10, max_part_attempts=1)
    orch = Scripted(["MILESTONE: Solve P1", "MILESTONE: Solve P1, P2", "ANSWER: P2"],
                    ["S1 | perfect | - | Solve P1.", "S1 | perfect | - | Solve P1.\nS2 | perfect | S1 | Solve P2."])
    ep = play(orch, cfg)
    assert [(s.id, s.deps) for s in ep.milestones[1].plan.subtasks] == [("S2", ())]
    assert codes(ep) == ["part_attempts"]


def test_no_limit_with_zero() -> None:
    cfg = EngineConfig(max_milestones=4, max_plan_subtasks=4, max_total_subtasks=10, max_part_attempts=0)
    ep = play(Scripted(["MILESTONE: again"], ["S1 | hopeless | - | Solve P1."]), cfg)
    assert len(ep.milestones) == 4 and all(len(m.plan.subtasks) == 1 for m in ep.milestones)
    assert "part_attempts" not in codes(ep)


def test_slot_lines_solve_the_milestones_parts_and_count_toward_the_retry_limit() -> None:
    cfg = EngineConfig(max_milestones=4, max_plan_subtasks=4, max_total_subtasks=10, max_part_attempts=1)
    orch = Scripted(["MILESTONE: Solve P2, P1", "MILESTONE: Solve P2", "ANSWER: P2"],
                    ["S1 | perfect | -\nS2 | perfect | S1\nS3 | perfect | -", "S1 | perfect | -"])
    ep = play(orch, cfg)
    first, second = ep.milestones
    # slots follow the task's order (P1, P2), not the milestone's; S3 has no slot
    assert [(s.instruction, s.deps) for s in first.plan.subtasks] == [("Solve P1.", ()), ("Solve P2.", ("S1",))]
    assert second.plan.subtasks == ()  # P2's one attempt is spent
    assert codes(ep) == ["no_slot", "futile_milestone", "part_attempts"]
