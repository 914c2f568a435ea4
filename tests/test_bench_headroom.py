"""The headroom probe: routing tables, their search, and one tiny run end to end."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

from e3orch.benchmarks.headroom import (
    SOURCE_ACCEPT,
    STRONGEST,
    RouteTable,
    TableOrchestrator,
    bench_headroom,
    candidates,
    entries,
    fit,
    handwritten_table,
    score,
)
from e3orch.config import EngineConfig
from e3orch.data.sim import generate_split
from e3orch.evaluation.evaluate import run_system
from e3orch.executors.base import ExecutionResult, build_pool, load_pool_specs
from e3orch.orchestration.episode import DecisionType, Observation, Orchestrator
from e3orch.orchestration.handwritten import Router, make_handwritten
from e3orch.orchestration.types import MilestoneRecord, Plan, Subtask

POOL = "configs/executors/default.yaml"
TASKS = generate_split(0, "eval", 3)  # 3 tasks per domain


def _episodes(orch, pool):  # type: ignore[no-untyped-def]
    return asyncio.run(run_system(orch, TASKS, pool, EngineConfig(), seed=7))


def test_the_handwritten_tables_decide_exactly_as_the_rules() -> None:
    pool = build_pool(POOL)
    for name in ("heuristic", "thrifty"):
        ours = _episodes(TableOrchestrator(handwritten_table(name)), pool)
        rule = _episodes(make_handwritten(name, pool.names), pool)
        assert [(e.correct, e.cost, len(e.milestones)) for e in ours] == [(e.correct, e.cost, len(e.milestones)) for e in rule]
        assert [[r.plan_completion for r in e.milestones] for e in ours] == [[r.plan_completion for r in e.milestones] for e in rule]


class Watch(Orchestrator):
    """Runs ``inner`` and keeps every observation it decides on."""

    def __init__(self, inner: Orchestrator) -> None:
        self.inner, self.name, self.seen = inner, inner.name, list[Observation]()

    async def decide(self, obs: Observation, kind: DecisionType) -> str:
        self.seen.append(obs)
        return await self.inner.decide(obs, kind)


def test_the_handwritten_tables_route_by_the_rules_needs() -> None:
    """A table names what the rule's need does (its STRONGEST is need 3), state by state."""
    pool = build_pool(POOL)
    for name in ("heuristic", "thrifty"):
        rule, table = make_handwritten(name, pool.names), TableOrchestrator(handwritten_table(name))
        watch = Watch(rule)
        _episodes(watch, pool)
        needs = [table.needs(o) for o in watch.seen]
        assert needs == [rule.needs(o) for o in watch.seen]  # type: ignore[attr-defined]
        assert any(3 in d.values() for d in needs) and any(2 in d.values() for d in needs)


def test_by_source_repairs_by_the_level_of_the_card_that_reported_a_result() -> None:
    # web-search states it is good at retrieval, frontier-llm strong: the same 0.7 is repaired
    # from the first and kept from the second; a 0.55 is repaired from either, a 0.8 from neither
    cards = tuple(load_pool_specs(POOL))
    question = "A lookup.\nP1: (simple) Find the capital of Norvia.\nFinal answer: the result of P1."
    by_source = TableOrchestrator(replace(handwritten_table("heuristic"), accept_by_level=SOURCE_ACCEPT))
    plain = TableOrchestrator(handwritten_table("heuristic"))

    def milestone(table: TableOrchestrator, executor: str, confidence: float) -> str:
        rec = MilestoneRecord("Solve P1", Plan((Subtask("S1", executor, "Solve P1."),)),
                              [ExecutionResult("S1", executor, True, f"P1 = Oslo (confidence {confidence:.2f})")])
        obs = Observation(task_id="t", question=question, cards=cards, history=(rec,), pending_milestone=None,
                          milestones_left=10, subtasks_left=30, cost_left=50.0, max_plan_subtasks=8)
        return asyncio.run(table.decide(obs, "milestone"))

    assert [milestone(by_source, "web-search", c) for c in (0.55, 0.7, 0.8)] == [
        "MILESTONE: Solve P1", "MILESTONE: Solve P1", "ANSWER: P1"]
    assert [milestone(by_source, "frontier-llm", c) for c in (0.55, 0.7, 0.8)] == [
        "MILESTONE: Solve P1", "ANSWER: P1", "ANSWER: P1"]
    # without it, the rule's one threshold (0.6) for both
    assert [milestone(plain, "web-search", 0.7), milestone(plain, "frontier-llm", 0.55)] == ["ANSWER: P1", "MILESTONE: Solve P1"]
    assert plain.table.to_dict()["accept"] == 0.6


def test_candidates_change_one_entry_to_another_card() -> None:
    router = Router(tuple(load_pool_specs(POOL)))
    thrifty = handwritten_table("thrifty")
    # a hard lookup: thrifty asks web-search (cheapest good); "fair" names it too, "strong" and the
    # strongest both name frontier-llm: one alternative
    (alt,) = candidates(thrifty, "first.retrieve.2", router, 3)
    assert alt.first["retrieve"] == (2, 2, 3) and alt.first["compute"] == thrifty.first["compute"]
    assert alt.repair == thrifty.repair and alt.accept == thrifty.accept
    assert [t.attempts for t in candidates(thrifty, "attempts", router, 3)] == [1, 2]
    assert [t.accept for t in candidates(thrifty, "accept", router, 3)] == [0.5, 0.55, 0.65, 0.7, 0.75]
    # repairs: thrifty takes the strongest; every other card a need names is one candidate
    reps = candidates(thrifty, "repair.reason.0", router, 3)
    assert all(t.repair["reason"][1] == STRONGEST for t in reps) and len({t.repair["reason"][0] for t in reps}) == len(reps)
    assert len(entries()) == 4 * 3 + 4 * 2 + 2


def test_fit_keeps_what_it_measured_and_follows_the_price_weight() -> None:
    pool = build_pool(POOL)
    cfg = EngineConfig()
    start = handwritten_table("heuristic")

    async def go() -> tuple[RouteTable, float, float, float]:
        table, m = await fit(start, TASKS, pool, cfg, lam=5.0, seed=3, sweeps=1)
        again = await score(table, TASKS, pool, cfg, seed=3)
        base = await score(start, TASKS, pool, cfg, seed=3)
        assert (again.accuracy, again.cost) == (m.accuracy, m.cost)  # the figures returned are the table's
        return table, m.cost, base.cost, m.accuracy - 5.0 * m.cost - (base.accuracy - 5.0 * base.cost)

    table, cost, base_cost, gain = asyncio.run(go())
    assert table != start and gain > 0  # at a price weight of 5 per cost unit, cheaper routes win
    assert cost < base_cost


def test_bench_headroom_tiny_run(tiny_params_file: Path) -> None:
    r = bench_headroom(str(tiny_params_file), quick=True)
    assert set(r) >= {"heuristic", "thrifty", "fitted", "evaluations", "train_tasks", "eval_tasks", "pools"}
    kinds = set(r["pools"])
    assert {"default", "transfer"} <= kinds and set(r["heuristic"]) == set(r["thrifty"]) == kinds
    (f,) = r["fitted"]
    assert f["lambda"] == 0.05 and r["evaluations"] > 0
    assert set(f["train"]) == {"accuracy", "cost", "ie"} and set(f["eval"]) == kinds
    assert set(f["table"]) == {"first", "repair", "accept", "attempts"}
    assert set(r["by_source"]) == {"heuristic", "thrifty"} and set(r["by_source"]["thrifty"]) == kinds
