"""Hand-written orchestrators: card reading, task-text parsing, and the shape of their decisions."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from e3orch.config import HANDWRITTEN, EngineConfig
from e3orch.data.sim import DOMAINS, generate_split
from e3orch.data.tasks import Task
from e3orch.executors.base import Pool, build_pool, load_pool_specs
from e3orch.executors.simulated import parse_values
from e3orch.orchestration.episode import DecisionType, Observation, Orchestrator, run_episode
from e3orch.orchestration.handwritten import (
    Part,
    Router,
    RuleOrchestrator,
    card_levels,
    make_handwritten,
    parse_parts,
    part_status,
)
from e3orch.orchestration.types import Episode

REPO = Path(__file__).resolve().parents[2]
DEFAULT = REPO / "configs" / "executors" / "default.yaml"
TRANSFER = REPO / "configs" / "executors" / "transfer.yaml"
CFG = EngineConfig()


@pytest.fixture(scope="module")
def pool() -> Pool:
    return build_pool(DEFAULT)


@pytest.fixture(scope="module")
def tasks() -> list[Task]:
    return generate_split(0, "train", 40) + generate_split(0, "eval", 20)


def levels(path: Path) -> dict[str, dict[str, int]]:
    return {s.name: card_levels(s) for s in load_pool_specs(path)}


def lv(retrieve: int, compute: int, code: int, reason: int) -> dict[str, int]:
    return {"retrieve": retrieve, "compute": compute, "code": code, "reason": reason}


# -- cards ------------------------------------------------------------------------------------


def test_card_levels_default_pool() -> None:
    got = levels(DEFAULT)
    assert got["frontier-llm"] == lv(3, 3, 3, 3)   # "strongest at every skill"
    assert got["mid-llm"] == lv(2, 2, 2, 2)        # "good at retrieve, compute, code and reason"
    assert got["small-llm"] == lv(1, 1, 0, 0)      # "fair at retrieve and compute, weak at code and reason"
    assert got["code-llm"] == lv(0, 2, 3, 0)
    assert got["reasoner"] == lv(0, 2, 0, 3)
    assert got["calculator"] == lv(0, 3, 0, 0)     # "exact at compute …; useless for anything else"
    assert got["web-search"] == lv(2, 0, 0, 0)


def test_card_levels_transfer_pool() -> None:
    got = levels(TRANSFER)
    assert got["atlas-xl"] == lv(3, 3, 3, 3)
    assert got["nimbus-mini"] == lv(2, 1, 0, 1)
    assert got["quanta-math"] == lv(0, 3, 2, 2)
    assert got["forge-coder"] == lv(0, 1, 3, 0)
    assert got["sage-reasoner"] == lv(0, 2, 0, 3)  # "reason and logic"
    assert got["abacus"] == lv(0, 3, 0, 0)         # "exact at calculation"
    assert got["doc-retriever"] == lv(2, 0, 0, 0)  # "good at lookup"


def test_card_levels_read_only_the_card_not_the_hidden_profile() -> None:
    spec = load_pool_specs(DEFAULT)[0]
    twin = spec.model_copy(update={"skills": {"retrieve": 0.0, "compute": 0.0, "code": 0.0, "reason": 0.0}})
    assert card_levels(twin) == card_levels(spec)


def test_router_on_the_default_pool(pool: Pool) -> None:
    r = Router(tuple(pool.specs))
    assert r.cheapest_good_enough("compute", 0) == "calculator"
    assert r.cheapest_good_enough("retrieve", 1) == "web-search"
    assert r.cheapest_good_enough("retrieve", 2) == "frontier-llm"  # hard: needs a "strong" card
    assert r.cheapest_good_enough("code", 1) == "mid-llm"
    assert r.cheapest_good_enough("code", 2) == "code-llm"
    assert r.cheapest_good_enough("reason", 2) == "reasoner"
    assert r.strongest("retrieve") == "frontier-llm"
    assert r.strongest("compute") == "calculator"


# -- reading the task text --------------------------------------------------------------------


def test_parse_parts_on_a_hand_written_question() -> None:
    q = ("A table analysis task.\n"
         "P1: (quick) Look up the population of Elmsworth.\n"
         "P2: (tricky) Find the altitude of Mount Teller.\n"
         "P3: (standard) Calculate the ratio of the two figures, using P1 and P2.\n"
         "P4: (hard) Write and test a function that sorts the entries by date, using P3.\n"
         "Final answer: the result of P4.")
    parts, sink = parse_parts(q)
    assert sink == "P4"
    assert [(p.id, p.skill, p.difficulty, p.deps) for p in parts] == [
        ("P1", "retrieve", 0, ()),
        ("P2", "retrieve", 2, ()),
        ("P3", "compute", 1, ("P1", "P2")),
        ("P4", "code", 2, ("P3",)),
    ]
    assert parse_parts("What is 2 + 2?") == ([], None)


def test_parse_parts_recovers_skills_deps_and_sink_of_generated_tasks(tasks: list[Task]) -> None:
    assert {t.domain for t in tasks} == set(DOMAINS)
    for t in tasks:
        parts, sink = parse_parts(t.question)
        assert [(p.id, p.skill, p.deps) for p in parts] == [(r.id, r.skill, r.deps) for r in t.requirements], t.task_id
        assert sink == t.sinks[0]


def test_parse_parts_recovers_difficulty_of_generated_tasks(tasks: list[Task]) -> None:
    for t in tasks:
        parts, _ = parse_parts(t.question)
        assert [p.difficulty for p in parts] == [r.difficulty for r in t.requirements], t.task_id


# -- decisions --------------------------------------------------------------------------------


def play(name: str, task: Task, pool: Pool, seed: int = 5) -> Episode:
    return asyncio.run(run_episode(task, make_handwritten(name, pool.names, seed=seed), pool, CFG, seed=seed))


def one_per_domain(tasks: list[Task], k: int = 3) -> list[Task]:
    return [t for d in DOMAINS for t in [x for x in tasks if x.domain == d][:k]]


def test_upfront_emits_one_plan_with_deps_wired(tasks: list[Task], pool: Pool) -> None:
    for t in one_per_domain(tasks):
        ep = play("upfront", t, pool)
        assert len(ep.milestones) == 1 and not ep.defects
        plan = ep.milestones[0].plan
        assert len(plan.subtasks) == len(t.requirements)
        sid_of = {r.id: f"S{i + 1}" for i, r in enumerate(t.requirements)}
        for sub, req in zip(plan.subtasks, t.requirements):
            assert sub.id == sid_of[req.id]
            assert sub.instruction == f"Solve {req.id}."
            assert sub.deps == tuple(sid_of[d] for d in req.deps)
        sink_out = parse_values(ep.milestones[0].results[-1].output)
        assert ep.answer == sink_out.get(t.sinks[0], "")


def test_sequential_emits_one_subtask_per_milestone(tasks: list[Task], pool: Pool) -> None:
    for t in one_per_domain(tasks):
        ep = play("sequential", t, pool)
        assert ep.milestones and all(len(m.plan.subtasks) == 1 for m in ep.milestones)
        assert ep.makespan_s == pytest.approx(ep.serial_latency_s)
        assert ep.budget_failure is None


def test_heuristic_runs_ready_parts_in_parallel(tasks: list[Task], pool: Pool) -> None:
    for t in [x for x in tasks if x.domain in ("factcheck", "research", "table")][:12]:
        ep = play("heuristic", t, pool)
        first = ep.milestones[0]
        roots = [r.id for r in t.requirements if not r.deps]
        assert [s.instruction for s in first.plan.subtasks] == [f"Solve {p}." for p in roots]
        assert all(not s.deps for s in first.plan.subtasks)
        assert ep.makespan_s < ep.serial_latency_s
        assert ep.budget_failure is None and not ep.defects


def test_thrifty_tries_the_cheapest_good_card_first_and_repairs_with_the_strongest(tasks: list[Task], pool: Pool) -> None:
    r = Router(tuple(pool.specs))
    firsts_of_hard = repairs = 0
    for t in [x for x in tasks if x.domain in ("factcheck", "research", "table")]:
        ep = play("thrifty", t, pool)
        parts = {p.id: p for p in parse_parts(t.question)[0]}
        tried: set[str] = set()
        for m in ep.milestones:
            for sub in m.plan.subtasks:
                part = parts[sub.instruction.removeprefix("Solve ").rstrip(".")]
                want = r.strongest(part.skill) if part.id in tried else r.cheapest_good_enough(part.skill, 0)
                assert sub.executor == want, (t.task_id, sub)
                firsts_of_hard += part.difficulty == 2 and part.id not in tried
                repairs += part.id in tried
                tried.add(part.id)
        assert ep.budget_failure is None and not ep.defects
    assert firsts_of_hard and repairs
    # a hard lookup: heuristic pays for the strong card at once, thrifty tries the good search first
    assert (r.cheapest_good_enough("retrieve", 2), r.cheapest_good_enough("retrieve", 0)) == ("frontier-llm", "web-search")


def test_tiered_takes_the_strong_card_first_only_within_one_price_tier_of_the_good_one() -> None:
    from e3orch.orchestration.handwritten import TieredOrchestrator
    from e3orch.orchestration.reading import price_tier

    specs = load_pool_specs(DEFAULT)
    r, rule = Router(tuple(specs)), TieredOrchestrator("tiered")
    tiers = {s.name: price_tier(s) for s in specs}
    # the default pool's strong and good cards per skill, and their tiers
    assert {k: (tiers[r.cheapest_at_least(k, 3)], tiers[r.cheapest_at_least(k, 2)]) for k in ("retrieve", "code", "reason")} == {
        "retrieve": ("premium", "free"), "code": ("mid", "mid"), "reason": ("pricey", "mid")}

    def part(skill: str, difficulty: int) -> Part:
        return Part("P1", skill, difficulty, (), "")

    # hard: code (mid over mid) and reasoning (pricey over mid) take the strong card, a lookup (premium
    # over free) the good one; not hard: the good card; a repair: the strongest, whatever it costs
    assert [rule.route(r, part(k, 2), 0) for k in ("code", "reason", "retrieve")] == ["code-llm", "reasoner", "web-search"]
    assert [rule.route(r, part(k, 1), 0) for k in ("code", "reason", "retrieve")] == ["mid-llm", "mid-llm", "web-search"]
    assert [rule.route(r, part(k, 2), 1) for k in ("code", "reason", "retrieve")] == ["code-llm", "reasoner", "frontier-llm"]
    # a wider gap allowed: the lookup's strong card too, as heuristic does
    wide = TieredOrchestrator("tiered")
    wide.max_tier_gap = 4
    assert wide.route(r, part("retrieve", 2), 0) == RuleOrchestrator("heuristic").route(r, part("retrieve", 2), 0) == "frontier-llm"


class NeedsCheck(Orchestrator):
    """Runs a rule and records, for every subtask it plans, (part, attempts so far, the need
    ``needs`` gives its part, the executor it routed it to)."""

    def __init__(self, inner: RuleOrchestrator) -> None:
        self.inner, self.name = inner, inner.name
        self.seen: list[tuple[Part, int, int | None, str]] = []

    async def decide(self, obs: Observation, kind: DecisionType) -> str:
        text = await self.inner.decide(obs, kind)
        if kind == "plan":
            parts = {p.id: p for p in parse_parts(obs.question)[0]}
            status, needs = part_status(obs.history, parts.values()), self.inner.needs(obs)
            for line in text.splitlines():
                _, executor, _, instruction = (f.strip() for f in line.split("|", 3))
                pid = instruction.removeprefix("Solve ").rstrip(".")
                self.seen.append((parts[pid], status[pid].attempts, needs.get(pid), executor))
        return text


@pytest.mark.parametrize("name", ["heuristic", "thrifty", "tiered", "explore", "sequential", "upfront"])
def test_a_rules_needs_name_the_cards_it_routes_to(tasks: list[Task], pool: Pool, name: str) -> None:
    """policy.menu_rank: need teaches the rank ``needs`` gives: it must be the need the plan was routed by."""
    r = Router(tuple(pool.specs))
    check = NeedsCheck(make_handwritten(name, pool.names, seed=3))  # type: ignore[arg-type]
    for t in one_per_domain(tasks, 2):
        asyncio.run(run_episode(t, check, pool, CFG, seed=3))
    assert len(check.seen) > 20
    for part, attempts, need, executor in check.seen:
        assert need is not None and r.cheapest_at_least(part.skill, need) == executor, (name, part, need, executor)
        if name in ("heuristic", "sequential", "upfront"):
            assert need == (3 if attempts or part.difficulty == 2 else 2)
        elif name == "thrifty":
            assert need == (3 if attempts else 2)
        elif name == "tiered":  # on the default pool only a hard lookup's strong card (frontier, premium) is too dear
            assert need == (3 if attempts or part.difficulty == 2 and part.skill != "retrieve" else 2)
    if name == "explore":  # every need drawn
        assert {need for _, _, need, _ in check.seen} == {1, 2, 3}


def test_single_and_random_route_by_no_need(tasks: list[Task], pool: Pool) -> None:
    obs_seen: list[Observation] = []

    class Keep(Orchestrator):
        name = "keep"

        async def decide(self, obs: Observation, kind: DecisionType) -> str:
            obs_seen.append(obs)
            return await make_handwritten("heuristic", pool.names).decide(obs, kind)

    asyncio.run(run_episode(tasks[0], Keep(), pool, CFG, seed=0))
    for name in ("single:mid-llm", "random"):
        rule = make_handwritten(name, pool.names)
        assert isinstance(rule, RuleOrchestrator)
        assert all(rule.needs(o) == {} for o in obs_seen)
    assert make_handwritten("heuristic", pool.names).needs(obs_seen[0])  # type: ignore[attr-defined]


@pytest.mark.parametrize("executor", ["mid-llm", "calculator", "frontier-llm"])
def test_single_uses_only_its_executor(tasks: list[Task], pool: Pool, executor: str) -> None:
    for t in one_per_domain(tasks, 2):
        ep = play(f"single:{executor}", t, pool)
        used = {s.executor for m in ep.milestones for s in m.plan.subtasks}
        assert used == {executor}
        assert {r.executor for m in ep.milestones for r in m.results} == {executor}


def test_random_is_seeded(tasks: list[Task], pool: Pool) -> None:
    t = tasks[0]
    a, b = play("random", t, pool, seed=1), play("random", t, pool, seed=1)
    assert a.to_dict() == b.to_dict()


def test_every_handwritten_orchestrator_ends_with_an_answer(tasks: list[Task], pool: Pool) -> None:
    for name in (*HANDWRITTEN, "single:mid-llm"):
        for t in one_per_domain(tasks, 1):
            ep = play(name, t, pool)
            assert ep.budget_failure is None, (name, t.task_id)
            assert not [d for d in ep.defects if d.code not in ("oversized_plan",)], (name, ep.defects)


def test_unknown_orchestrator_names_are_value_errors(pool: Pool) -> None:
    with pytest.raises(ValueError, match="unknown orchestrator 'clever'"):
        make_handwritten("clever", pool.names)
    with pytest.raises(ValueError, match="no executor 'gpt-99' in the pool"):
        make_handwritten("single:gpt-99", pool.names)
    assert make_handwritten("single:mid-llm", pool.names).name == "single:mid-llm"
    for name in HANDWRITTEN:
        assert make_handwritten(name, pool.names).name == name


def test_explore_draws_its_repair_threshold_per_result_within_the_range() -> None:
    from e3orch.orchestration.handwritten import ExploreOrchestrator
    from e3orch.orchestration.reading import PartStatus

    fixed = make_handwritten("explore", ["a"], seed=0)
    drawn = make_handwritten("explore", ["a"], seed=0, explore_accept=(0.5, 0.75))
    assert isinstance(drawn, ExploreOrchestrator)
    values = [f"v{i}" for i in range(400)]
    # without a range: heuristic's 0.6; low == high: that threshold
    assert [fixed.accepted(PartStatus(1, v, 0.59)) for v in values[:5]] == [False] * 5
    assert [fixed.accepted(PartStatus(1, v, 0.6)) for v in values[:5]] == [True] * 5
    same = make_handwritten("explore", ["a"], explore_accept=(0.6, 0.6))
    assert not same.accepted(PartStatus(1, "x", 0.59)) and same.accepted(PartStatus(1, "x", 0.6))
    fixed_higher = make_handwritten("explore", ["a"], explore_accept=(0.65, 0.65))
    assert not any(fixed_higher.accepted(PartStatus(1, v, 0.649)) for v in values)
    assert all(fixed_higher.accepted(PartStatus(1, v, 0.65)) for v in values)
    # with one: always below low, never at or above high, in between a share (high - c) / (high - low)
    assert not any(drawn.accepted(PartStatus(1, v, 0.49)) for v in values)
    assert all(drawn.accepted(PartStatus(1, v, 0.75)) for v in values)
    share = sum(not drawn.accepted(PartStatus(1, v, 0.625)) for v in values) / len(values)
    assert 0.4 < share < 0.6
    # a result without a value is never accepted; one result gets the same draw in every state
    assert not drawn.accepted(PartStatus(0, None, 0.9))
    assert [drawn.accepted(PartStatus(1, "v7", 0.625)) for _ in range(3)] in ([True] * 3, [False] * 3)


def test_explore_draws_a_free_repairs_threshold_where_a_card_good_at_the_skill_is_priced_as_a_tool() -> None:
    from e3orch.orchestration.episode import Observation
    from e3orch.orchestration.handwritten import ExploreOrchestrator
    from e3orch.orchestration.reading import PartStatus

    specs = load_pool_specs(DEFAULT)
    explore = make_handwritten("explore", [s.name for s in specs], explore_accept=(0.6, 0.6),
                               explore_accept_free=(0.8, 0.8))
    assert isinstance(explore, ExploreOrchestrator)
    obs = Observation(task_id="t", question="P1: Find the capital.\nFinal answer: the result of P1.", cards=tuple(specs),
                      history=(), pending_milestone=None, milestones_left=3, subtasks_left=9, cost_left=9.0,
                      max_plan_subtasks=8)
    asyncio.run(explore.decide(obs, "milestone"))
    # the default pool: web-search (good at retrieval) and the calculator (strong at compute) are priced as tools;
    # no card good at code or reasoning is
    assert explore._free_skills == {"retrieve", "compute"}
    assert not explore.accepted(PartStatus(1, "v", 0.7, skill="retrieve"))
    assert explore.accepted(PartStatus(1, "v", 0.8, skill="retrieve"))
    assert explore.accepted(PartStatus(1, "v", 0.7, skill="reason"))
    assert not explore.accepted(PartStatus(1, "v", 0.59, skill="reason"))
    # without explore_accept_free every skill draws in explore_accept
    plain = make_handwritten("explore", [s.name for s in specs], explore_accept=(0.6, 0.6))
    asyncio.run(plain.decide(obs, "milestone"))
    assert plain.accepted(PartStatus(1, "v", 0.7, skill="retrieve"))
