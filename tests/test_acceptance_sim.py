"""Acceptance on the real default setting: the sim eval split (30 tasks per domain), the default
pool, params.yaml's engine budgets and evaluation seed. Deterministic given the seeds.

The heuristic orchestrator must beat the cheap single executors on accuracy, spend less than the
most expensive one, finish sooner than the sequential orchestrator, and planning everything
upfront must be visibly worse.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from e3orch.config import load_params
from e3orch.data.sim import generate_split
from e3orch.evaluation.evaluate import SystemMetrics, limit_per_benchmark, run_system, summarize
from e3orch.evaluation.systems import make_orchestrator
from e3orch.executors.base import build_pool

REPO = Path(__file__).resolve().parents[1]
LIMIT = 30

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def metrics() -> dict[str, SystemMetrics]:
    params = load_params(REPO / "params.yaml")
    pool = build_pool(REPO / params.evaluate.executors)
    tasks = generate_split(params.prepare.seed, "eval", max(LIMIT, params.prepare.eval_per_domain), params.prepare.domains)
    tasks = limit_per_benchmark(tasks, LIMIT)
    assert len(tasks) == 7 * LIMIT
    systems = ["heuristic", "upfront", "sequential", *(f"single:{n}" for n in pool.names)]

    async def go() -> dict[str, SystemMetrics]:
        out = {}
        for name in systems:
            orch = make_orchestrator(name, pool, seed=params.evaluate.seed)
            eps = await run_system(orch, tasks, pool, params.engine, seed=params.evaluate.seed)
            out[name] = summarize(eps)
        return out

    return asyncio.run(go())


def singles(metrics: dict[str, SystemMetrics]) -> dict[str, SystemMetrics]:
    return {k: v for k, v in metrics.items() if k.startswith("single:")}


def test_every_system_ran_every_task(metrics: dict[str, SystemMetrics]) -> None:
    assert {m.n for m in metrics.values()} == {7 * LIMIT}
    assert metrics["heuristic"].budget_failures == 0


def test_heuristic_beats_the_cheapest_single_executor(metrics: dict[str, SystemMetrics]) -> None:
    s = singles(metrics)
    cheapest = min(s.values(), key=lambda m: m.cost)
    assert metrics["heuristic"].accuracy > cheapest.accuracy
    # and the cheapest single executor that solves anything at all
    cheapest_useful = min((m for m in s.values() if m.accuracy > 0), key=lambda m: m.cost)
    assert metrics["heuristic"].accuracy > cheapest_useful.accuracy


def test_no_cheaper_single_executor_is_as_accurate_as_heuristic(metrics: dict[str, SystemMetrics]) -> None:
    h = metrics["heuristic"]
    for name, m in singles(metrics).items():
        if m.cost <= h.cost:
            assert m.accuracy < h.accuracy, name


def test_heuristic_costs_less_than_the_most_expensive_single_executor(metrics: dict[str, SystemMetrics]) -> None:
    priciest = max(singles(metrics).values(), key=lambda m: m.cost)
    assert metrics["heuristic"].cost < priciest.cost


def test_heuristic_finishes_sooner_than_sequential(metrics: dict[str, SystemMetrics]) -> None:
    assert metrics["heuristic"].makespan_s < metrics["sequential"].makespan_s
    assert metrics["sequential"].makespan_s == pytest.approx(metrics["sequential"].serial_latency_s)


def test_upfront_is_measurably_less_accurate_than_heuristic(metrics: dict[str, SystemMetrics]) -> None:
    assert metrics["upfront"].accuracy <= metrics["heuristic"].accuracy - 0.1
