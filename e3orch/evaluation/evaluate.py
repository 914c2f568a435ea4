"""Evaluate orchestrators on a task set: episodes, per-system and per-benchmark metrics.

Intelligence efficiency ``ie`` = accuracy ÷ mean cost per task (pool cost units). Episodes of
different systems on the same task share execution seeds (common random numbers), so their
differences are differences of decisions, not of executor luck.

What this module deliberately does not do: plot or write reports (see evaluation/report.py).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from e3orch.config import EngineConfig, EvaluateConfig
from e3orch.data.sim import stable_seed
from e3orch.data.tasks import Task
from e3orch.executors.base import Pool
from e3orch.orchestration.episode import Orchestrator, run_episode
from e3orch.orchestration.types import Episode


@dataclass(frozen=True)
class SystemMetrics:
    accuracy: float
    cost: float
    makespan_s: float
    serial_latency_s: float
    ie: float
    n: int
    defects_per_episode: float
    budget_failures: int

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def summarize(episodes: Sequence[Episode]) -> SystemMetrics:
    n = len(episodes)
    if n == 0:
        return SystemMetrics(0.0, 0.0, 0.0, 0.0, 0.0, 0, 0.0, 0)
    acc = sum(e.correct for e in episodes) / n
    cost = sum(e.cost for e in episodes) / n
    return SystemMetrics(
        accuracy=acc,
        cost=cost,
        makespan_s=sum(e.makespan_s for e in episodes) / n,
        serial_latency_s=sum(e.serial_latency_s for e in episodes) / n,
        ie=acc / cost if cost > 0 else 0.0,
        n=n,
        defects_per_episode=sum(len(e.defects) for e in episodes) / n,
        budget_failures=sum(e.budget_failure is not None for e in episodes),
    )


async def run_system(
    orchestrator: Orchestrator,
    tasks: Sequence[Task],
    pool: Pool,
    cfg: EngineConfig,
    *,
    seed: int = 0,
    max_concurrent_episodes: int = 256,
    on_episode: Callable[[Episode], None] | None = None,
) -> list[Episode]:
    """All tasks with one orchestrator, many episodes in flight (policies batch across them)."""
    sem = asyncio.Semaphore(max_concurrent_episodes)

    async def one(task: Task) -> Episode:
        async with sem:
            ep = await run_episode(task, orchestrator, pool, cfg, seed=stable_seed(seed, task.task_id))
        if on_episode:
            on_episode(ep)
        return ep

    return list(await asyncio.gather(*(one(t) for t in tasks)))


async def run_systems(
    systems: Iterable[tuple[str, Orchestrator]],
    tasks: Sequence[Task],
    pool: Pool,
    cfg: EngineConfig,
    *,
    seed: int = 0,
    on_start: Callable[[str], Callable[[Episode], None] | None] | None = None,
    on_system: Callable[[str, list[Episode]], None] | None = None,
) -> tuple[dict[str, list[Episode]], dict[str, int]]:
    """Each system in turn on all tasks, closed when done: its episodes, and how many futile
    milestones it re-drew (``policy.resample_futile``; 0 for all but policies). ``on_start(name)``
    may return a per-episode callback (a progress bar); ``on_system`` gets each system's episodes."""
    results: dict[str, list[Episode]] = {}
    redrawn: dict[str, int] = {}
    for name, orch in systems:
        on_episode = on_start(name) if on_start else None
        results[name] = await run_system(orch, tasks, pool, cfg, seed=seed, on_episode=on_episode)
        redrawn[name] = getattr(orch, "resampled", 0)
        await orch.aclose()
        if on_system:
            on_system(name, results[name])
    return results, redrawn


def metrics_table(results: dict[str, list[Episode]], redrawn: dict[str, int] | None = None) -> dict[str, Any]:
    """``{systems: {O: metrics}, per_benchmark: {bench: {O: {accuracy, cost, ...}}}}``; ``redrawn``:
    futile milestones a policy re-drew (``policy.resample_futile``), stated where there were any."""
    systems = {name: summarize(eps).to_dict() for name, eps in results.items()}
    for name, n in (redrawn or {}).items():
        if n and name in systems:
            systems[name]["resampled_milestones"] = n
    per: dict[str, dict[str, Any]] = defaultdict(dict)
    for name, eps in results.items():
        by_bench: dict[str, list[Episode]] = defaultdict(list)
        for e in eps:
            by_bench[e.benchmark].append(e)
        for bench, group in sorted(by_bench.items()):
            m = summarize(group)
            per[bench][name] = {"accuracy": round(m.accuracy, 6), "cost": round(m.cost, 6),
                                "makespan_s": round(m.makespan_s, 6), "ie": round(m.ie, 6), "n": m.n}
    return {"systems": systems, "per_benchmark": dict(per)}


POOL_KINDS = ("default", "transfer", "generated")


def evaluation_pools(ecfg: EvaluateConfig, kinds: Sequence[str] = POOL_KINDS) -> dict[str, list[Pool]]:
    """The pools of each evaluation kind, built (the caller closes them): ``default``
    (``evaluate.executors``), ``transfer`` (``evaluate.transfer_executors``) and ``generated`` (the
    ``evaluate.generated_pools`` pools never seen in any form; none when that is 0)."""
    from e3orch.commands.common import resolve_pool_path
    from e3orch.executors.base import build_pool
    from e3orch.executors.generated import generate_pool

    def build(kind: str) -> list[Pool]:
        if kind == "generated":
            return [build_pool(generate_pool(ecfg.generated_seed + i)) for i in range(ecfg.generated_pools)]
        return [build_pool(resolve_pool_path(ecfg.executors if kind == "default" else ecfg.transfer_executors))]

    return {kind: build(kind) for kind in kinds}


def limit_per_benchmark(tasks: Sequence[Task], limit: int) -> list[Task]:
    """The first ``limit`` tasks of every benchmark (all when ``limit`` is 0)."""
    if limit <= 0:
        return list(tasks)
    seen: dict[str, int] = defaultdict(int)
    out = []
    for t in tasks:
        if seen[t.benchmark] < limit:
            seen[t.benchmark] += 1
            out.append(t)
    return out
