"""Headroom probe: how good could a router fitted to execution feedback be on this pool?

A *routing table* is the decision rule of the hand-written orchestrators with its constants
exposed: for every skill, the card a part's first attempt goes to at each difficulty, the card its
second and third attempts go to, the confidence below which a result is repaired, and how many
attempts a part gets. Cards are named by what their descriptions claim — the cheapest card at
least fair (1), good (2) or strong (3) at the skill, or the strongest one (:data:`STRONGEST`) — so
a table reads any pool's cards, as ``heuristic`` does. ``heuristic`` and ``thrifty`` are two such
tables (:func:`handwritten_table`).

The probe fits tables by coordinate ascent on train-split episodes, maximising accuracy − λ·cost
for a few λ on the training pool, and evaluates every fitted table on the eval split next to
``heuristic`` and ``thrifty``, with the same execution seeds, on that pool, the transfer pool and
the generated pools. A table decides on what the policy sees (cue words, card descriptions,
stated confidences), so what a fitted table reaches, a learned policy could reach too; the
distance between them is what training leaves on the table.

Next to them, ``by_source``: ``heuristic`` and ``thrifty`` with their repair threshold set by the
stated level of the card that reported a result (:data:`SOURCE_ACCEPT`) — what a policy reading
the ``per_part_source`` prompt could reach on repairs alone.

It is a measurement, not an orchestrator the project trains or ships: a black-box fit of 22
entries with tens of thousands of episodes, on one pool.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from e3orch.config import EngineConfig
from e3orch.data.tasks import Task
from e3orch.evaluation.evaluate import (
    SystemMetrics,
    evaluation_pools,
    limit_per_benchmark,
    run_system,
    summarize,
)
from e3orch.executors.base import SKILLS, Pool
from e3orch.orchestration.episode import DecisionType, Observation
from e3orch.orchestration.handwritten import Router, RuleOrchestrator
from e3orch.orchestration.reading import Part, PartStatus

STRONGEST = 9  # "the strongest card at the skill" (cheapest among equals), as heuristic repairs
NEEDS = (1, 2, 3, STRONGEST)
ACCEPTS = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75)
LAMBDAS = (0.05, 0.1, 0.12, 0.14, 0.2)


@dataclass(frozen=True)
class RouteTable:
    first: dict[str, tuple[int, int, int]]   # skill → need of the first attempt at difficulty easy/normal/hard
    repair: dict[str, tuple[int, int]]       # skill → need of the second and third attempts
    accept: float                            # a result at or above this confidence is kept
    attempts: int                            # subtasks per part
    # by the stated level (weak, fair, good, strong) of the card that reported the result, at the
    # part's skill, instead of ``accept`` (not fitted: see SOURCE_ACCEPT)
    accept_by_level: tuple[float, float, float, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"first": {s: list(v) for s, v in self.first.items()},
                "repair": {s: list(v) for s, v in self.repair.items()},
                "accept": list(self.accept_by_level) if self.accept_by_level else self.accept, "attempts": self.attempts}


# Repair thresholds by the reporting card's stated level: the sim draws a stated confidence from
# one distribution for right values and another for wrong ones, whoever reports them, so a 0.6 is
# right about 4 times in 5 from a card right 9 times in 10 and 3 in 10 from one right half the time
# (policy/prompts.py, per_part_source). Set by hand from that, not fitted.
SOURCE_ACCEPT = (0.75, 0.75, 0.75, 0.6)


def handwritten_table(name: str) -> RouteTable:
    """``heuristic`` (a strong card for hard parts) or ``thrifty`` (a good one at every difficulty),
    both repairing with the strongest card below confidence 0.6, three attempts."""
    hard = {"heuristic": 3, "thrifty": 2}[name]
    return RouteTable({s: (2, 2, hard) for s in SKILLS}, {s: (STRONGEST, STRONGEST) for s in SKILLS},
                      RuleOrchestrator.accept_confidence, RuleOrchestrator.max_attempts)


def card_for(router: Router, skill: str, need: int) -> str:
    """The cheapest card at least ``need`` at ``skill`` (the strongest when none is, or for :data:`STRONGEST`)."""
    return router.strongest(skill) if need == STRONGEST else router.cheapest_at_least(skill, need)


class TableOrchestrator(RuleOrchestrator):
    """``heuristic``'s milestones and repairs, routed and thresholded by a :class:`RouteTable`."""

    def __init__(self, table: RouteTable, name: str = "table") -> None:
        super().__init__(name)
        self.table = table
        self.accept_confidence = table.accept
        self.max_attempts = table.attempts
        self._levels: dict[str, dict[str, int]] = {}

    async def decide(self, obs: Observation, kind: DecisionType) -> str:
        if self.table.accept_by_level is not None:  # the fitted tables never read them: no parsing on their hot path
            self._levels = Router(obs.cards).levels
        return await super().decide(obs, kind)

    def accepted(self, st: PartStatus) -> bool:
        by_level = self.table.accept_by_level
        if by_level is None or st.value is None or not self.repair:
            return super().accepted(st)
        return st.confidence >= by_level[self._levels.get(st.executor, {}).get(st.skill, 0)]

    def need_of(self, part: Part, attempts: int) -> int:
        """The table's entry for the part, routed as the rules route a need (``RuleOrchestrator.route``):
        STRONGEST is need 3, whose card is the strongest (levels stop at strong), as :func:`card_for` says."""
        t = self.table
        need = t.first[part.skill][part.difficulty] if attempts == 0 else t.repair[part.skill][min(attempts, 2) - 1]
        return min(need, 3)


def entries() -> list[str]:
    """The table's entries, in the order a sweep visits them."""
    return ([f"first.{s}.{d}" for s in SKILLS for d in range(3)] + [f"repair.{s}.{a}" for s in SKILLS for a in range(2)]
            + ["accept", "attempts"])


def candidates(table: RouteTable, entry: str, router: Router, max_attempts: int) -> list[RouteTable]:
    """The tables that differ from ``table`` in ``entry`` only and decide differently on ``router``'s
    cards: one per card other than the current one (needs that name the same card are one decision)."""
    if entry == "accept":
        return [replace(table, accept=a) for a in ACCEPTS if a != table.accept]
    if entry == "attempts":
        return [replace(table, attempts=n) for n in range(1, max_attempts + 1) if n != table.attempts]
    field, skill, i = entry.split(".")
    row = list(getattr(table, field)[skill])
    seen = {card_for(router, skill, row[int(i)])}
    out = []
    for need in NEEDS:
        card = card_for(router, skill, need)
        if card not in seen:
            seen.add(card)
            new = list(row)
            new[int(i)] = need
            if field == "first":
                out.append(replace(table, first={**table.first, skill: (new[0], new[1], new[2])}))
            else:
                out.append(replace(table, repair={**table.repair, skill: (new[0], new[1])}))
    return out


async def score(table: RouteTable, tasks: Sequence[Task], pool: Pool, cfg: EngineConfig, seed: int) -> SystemMetrics:
    return summarize(await run_system(TableOrchestrator(table), tasks, pool, cfg, seed=seed))


async def fit(start: RouteTable, tasks: Sequence[Task], pool: Pool, cfg: EngineConfig, *, lam: float, seed: int,
              sweeps: int = 2, on_eval: Callable[[], None] | None = None) -> tuple[RouteTable, SystemMetrics]:
    """Coordinate ascent on accuracy − ``lam`` × cost over ``tasks``: each sweep tries every
    entry's :func:`candidates` in turn and keeps a change when it scores strictly higher."""
    router = Router(tuple(pool.specs))
    max_attempts = cfg.max_part_attempts or RuleOrchestrator.max_attempts
    best, best_m = start, await score(start, tasks, pool, cfg, seed)

    def objective(m: SystemMetrics) -> float:
        return m.accuracy - lam * m.cost

    for _ in range(sweeps):
        improved = False
        for entry in entries():
            for cand in candidates(best, entry, router, max_attempts):
                m = await score(cand, tasks, pool, cfg, seed)
                if on_eval:
                    on_eval()
                if objective(m) > objective(best_m) + 1e-12:
                    best, best_m, improved = cand, m, True
        if not improved:
            break
    return best, best_m


def _figures(m: SystemMetrics) -> dict[str, float]:
    return {"accuracy": round(m.accuracy, 4), "cost": round(m.cost, 4), "ie": round(m.ie, 4)}


def bench_headroom(params_path: str = "params.yaml", quick: bool = False, train_per_domain: int = 40,
                   lambdas: Sequence[float] = LAMBDAS, sweeps: int = 2) -> dict[str, Any]:
    """Fit a table per λ on the train split (``train_per_domain`` tasks per domain) and the training
    pool (``evaluate.executors``); evaluate each, ``heuristic`` and ``thrifty`` on the eval split
    (``evaluate.limit`` per domain) on that pool, the transfer pool and the generated pools together."""
    from e3orch.commands.common import sim_tasks
    from e3orch.config import load_params
    from e3orch.progress import count_progress

    params = load_params(params_path)
    ecfg = params.evaluate
    if quick:
        train_per_domain, lambdas, sweeps = min(train_per_domain, 3), lambdas[:1], 1
    train = limit_per_benchmark(sim_tasks(params, "train"), train_per_domain)
    evals = limit_per_benchmark(sim_tasks(params, "eval"), ecfg.limit)
    seed, cfg = ecfg.seed, params.engine

    async def go() -> dict[str, Any]:
        pools = {k: v for k, v in evaluation_pools(ecfg).items() if v}

        async def on_pools(table: RouteTable) -> dict[str, dict[str, float]]:
            out = {}
            for kind, members in pools.items():
                eps = [e for pool in members
                       for e in await run_system(TableOrchestrator(table), evals, pool, cfg, seed=seed)]
                out[kind] = _figures(summarize(eps))
            return out

        try:
            train_pool = pools["default"][0]
            router = Router(tuple(train_pool.specs))
            start = handwritten_table("thrifty")
            per_sweep = sum(len(candidates(start, e, router, cfg.max_part_attempts or RuleOrchestrator.max_attempts)) for e in entries())
            out: dict[str, Any] = {"train_tasks": len(train), "eval_tasks": len(evals), "sweeps": sweeps,
                                   "pools": {k: len(v) for k, v in pools.items()}}
            for name in ("heuristic", "thrifty"):
                out[name] = await on_pools(handwritten_table(name))
            # the same rules, repairing by who reported a result (SOURCE_ACCEPT)
            out["by_source"] = {name: await on_pools(replace(handwritten_table(name), accept_by_level=SOURCE_ACCEPT))
                                for name in ("heuristic", "thrifty")}
            fitted, n_evals, t0 = [], 0, time.perf_counter()
            with count_progress("fitting routing tables", len(lambdas) * sweeps * per_sweep) as advance:
                for lam in lambdas:
                    def tick(lam: float = lam) -> None:
                        nonlocal n_evals
                        n_evals += 1
                        advance(f"λ {lam:g}")
                    table, m_train = await fit(start, train, train_pool, cfg, lam=lam, seed=seed,
                                               sweeps=sweeps, on_eval=tick)
                    ev = await on_pools(table)
                    fitted.append({"lambda": lam, "train": _figures(m_train), "eval": ev,
                                   "ie_over_thrifty": {k: round(v["ie"] / out["thrifty"][k]["ie"], 3)
                                                       for k, v in ev.items() if out["thrifty"][k]["ie"]},
                                   "table": table.to_dict()})
            out.update(fitted=fitted, evaluations=n_evals, seconds=round(time.perf_counter() - t0, 1))
            return out
        finally:
            for members in pools.values():
                for pool in members:
                    await pool.aclose()

    return asyncio.run(go())
