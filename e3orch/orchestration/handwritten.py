"""Hand-written orchestrators on the same engine: the baselines and the warm-start teachers.

They see exactly what a policy sees — the task text, the executor cards and the results — and
never the sim's hidden requirement graph. They read the task's numbered parts ("P3: (tricky)
Find …, using P1 and P2."), guess each part's skill from its verb, read executor strengths off the
cards' descriptions ("strong at code, good at compute; weak at retrieve"), and emit decisions in
the text protocol, so every decision goes through the same parser as a policy's.

* ``heuristic`` — milestones by dependency layer (all ready parts in parallel); route each part to
  the cheapest executor whose card is good enough for its skill and difficulty; repair parts
  whose result failed or came back with low confidence using the strongest executor for that
  skill; answer when the final part is accepted.
* ``thrifty`` — ``heuristic`` with the first attempt of every part, hard or not, on the cheapest
  card that is good at its skill; a repair still goes to the strongest. Cheaper than ``heuristic``
  and, on the sim's pools, at least as efficient (docs/benchmarks.md): the cost-aware bar a
  learned policy must clear.
* ``tiered`` — ``heuristic`` that weighs the menu's prices: a hard part's first attempt goes to the
  strong card only when its price tier is at most one above the good card's (the good card
  otherwise). Cheaper than ``heuristic``; on the transfer and generated pools the most efficient
  rule, more accurate and cheaper than ``thrifty`` on the generated ones (docs/benchmarks.md, "A
  rule that reads the prices").
* ``upfront`` — one milestone with the whole plan (deps wired), no adaptation.
* ``sequential`` — like ``heuristic`` but one subtask per milestone (no parallelism).
* ``random`` — random grouping of ready parts and random executors; no repair.
* ``single:<executor>`` — ``heuristic``'s structure with every subtask sent to one executor.

What this module deliberately does not do: learn anything, or read ``Task.requirements``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from e3orch.config import HANDWRITTEN
from e3orch.data.sim import stable_seed
from e3orch.executors.base import ExecutorSpec
from e3orch.orchestration.episode import DecisionType, Observation, Orchestrator
from e3orch.orchestration.protocol import render_answer, render_milestone, render_plan
from e3orch.orchestration.reading import (
    MENU_NEEDS,
    PART_TAG_RE,
    PRICE_NAMES,
    SKILL_WORDS,
    Part,
    PartStatus,
    card_levels,
    cheapest_at_least,
    parse_parts,
    part_status,
    price_tier,
    strongest,
)
from e3orch.orchestration.types import Subtask


@dataclass
class Router:
    """Card-based routing shared by the rule-based orchestrators."""

    cards: tuple[ExecutorSpec, ...]
    levels: dict[str, dict[str, int]] = field(init=False)

    def __post_init__(self) -> None:
        self.levels = {c.name: card_levels(c) for c in self.cards}
        self._by_index = [self.levels[c.name] for c in self.cards]

    def cheapest_good_enough(self, skill: str, difficulty: int) -> str:
        return self.cheapest_at_least(skill, 3 if difficulty >= 2 else 2)

    def cheapest_at_least(self, skill: str, level: int) -> str:
        """The name of :meth:`cheapest_card_at_least`."""
        return self.cheapest_card_at_least(skill, level).name

    def cheapest_card_at_least(self, skill: str, level: int) -> ExecutorSpec:
        """The cheapest card whose stated ``skill`` level is at least ``level`` (the strongest if
        none is): what the menu rank of that need (``#1`` fair … ``#3`` strong) names."""
        return self.cards[cheapest_at_least(self.cards, self._by_index, skill, level)]

    def strongest(self, skill: str) -> str:
        return self.cards[strongest(self.cards, self._by_index, skill)].name


class RuleOrchestrator(Orchestrator):
    """Base of the rule-based orchestrators: layer-by-layer milestones with repair."""

    accept_confidence = 0.6
    max_attempts = 3
    parallel = True
    repair = True

    def __init__(self, name: str, only: str | None = None, seed: int = 0) -> None:
        self.name = name
        self.only = only
        self.seed = seed

    async def decide(self, obs: Observation, kind: DecisionType) -> str:
        parts, sink = parse_parts(obs.question)
        if not parts:
            return self._freeform(obs, kind)
        status = part_status(obs.history, parts)
        if kind == "milestone":
            return self.milestone(obs, parts, sink, status)
        return self.plan(obs, parts, status)

    # -- decisions ---------------------------------------------------------------------------
    def accepted(self, st: PartStatus) -> bool:
        return st.value is not None and (st.confidence >= self.accept_confidence or not self.repair)

    def ready(self, parts: Sequence[Part], status: dict[str, PartStatus], engine_limit: int = 0) -> list[Part]:
        limit = self.max_attempts if self.repair else 1
        if engine_limit:  # engine.max_part_attempts: never plan what the engine would refuse
            limit = min(limit, engine_limit)
        return [
            p for p in parts
            if not self.accepted(status[p.id]) and status[p.id].attempts < limit
            and all(self.accepted(status[d]) or status[d].value is not None and status[d].attempts >= limit
                    for d in p.deps if d in status)
        ]

    def milestone(self, obs: Observation, parts: Sequence[Part], sink: str | None, status: dict[str, PartStatus]) -> str:
        ready = self.ready(parts, status, obs.max_part_attempts)
        if not ready or obs.milestones_left <= 0 or obs.subtasks_left <= 0 or (sink and self.accepted(status[sink])):
            return render_answer(sink or parts[-1].id)
        chosen = ready if self.parallel else ready[:1]
        chosen = chosen[: obs.max_plan_subtasks]
        return render_milestone("Solve " + ", ".join(p.id for p in chosen))

    def plan(self, obs: Observation, parts: Sequence[Part], status: dict[str, PartStatus]) -> str:
        wanted = set(PART_TAG_RE.findall(obs.pending_milestone or ""))
        router = Router(obs.cards)
        subtasks: list[Subtask] = []
        for p in parts:
            if p.id not in wanted:
                continue
            executor = self.route(router, p, status[p.id].attempts)
            subtasks.append(Subtask(f"S{len(subtasks) + 1}", executor, f"Solve {p.id}."))
        return render_plan(subtasks)

    def route(self, router: Router, part: Part, attempts: int) -> str:
        if self.only:
            return self.only
        return router.cheapest_at_least(part.skill, self.need_at(router, part, attempts))

    def need_at(self, router: Router, part: Part, attempts: int) -> int:
        """:meth:`need_of` on this pool's cards (a rule that weighs prices overrides it)."""
        return self.need_of(part, attempts)

    def need_of(self, part: Part, attempts: int) -> int:
        """The need (one of ``MENU_NEEDS``: the level a menu rank asks for) a part's subtask is
        routed by: a repair the strongest card (need 3), a first attempt :meth:`first_need`."""
        return 3 if attempts > 0 else self.first_need(part)

    def first_need(self, part: Part) -> int:
        """A part's first attempt: the cheapest card good enough for its difficulty (strong when hard)."""
        return 3 if part.difficulty >= 2 else 2

    def needs(self, obs: Observation) -> dict[str, int]:
        """Part id → the need its subtask would be routed by in this state (:meth:`need_of`; none
        for ``single:`` and for tasks without numbered parts): the menu rank the rule asked for,
        which ``policy.menu_rank: need`` teaches where several ranks name the card it picked."""
        parts = parse_parts(obs.question)[0]
        if self.only or not parts:
            return {}
        status = part_status(obs.history, parts)
        router = Router(obs.cards)
        return {p.id: self.need_at(router, p, status[p.id].attempts) for p in parts}

    def _freeform(self, obs: Observation, kind: DecisionType) -> str:
        """A task without numbered parts (live benchmarks): one subtask, answer with its output."""
        done = [r for rec in obs.history for r in rec.results if r.ok]
        if kind == "milestone":
            if done or obs.milestones_left <= 0 or len(obs.history) >= self.max_attempts:
                return render_answer(done[-1].id if done else "no answer")
            return render_milestone("Solve the task")
        router = Router(obs.cards)
        q = obs.question.lower()
        if "def " in obs.question and '"""' in obs.question:
            skill, instruction = "code", "Complete this Python function; reply with the code only: {task}"
        else:
            skill = next((s for s, words in SKILL_WORDS.items() if any(w in q for w in words)), "reason")
            instruction = "Answer the question; end with the final answer: {task}"
        executor = self.only or (router.strongest(skill) if obs.history else router.cheapest_good_enough(skill, 1))
        return render_plan([Subtask("S1", executor, instruction)])


class ExploreOrchestrator(RuleOrchestrator):
    """``heuristic``'s structure with each subtask's need drawn at random — the cheapest card at
    least fair, good or strong at the skill (what menu ranks ``#1`` … ``#3`` name): the
    diverse-but-sensible teacher that gives a warm-started policy probability mass on
    alternatives RL can then compare. A dearer card of a level a cheaper one also claims is never
    drawn: no need picks it.

    With ``accept=(low, high)`` it also draws, for each result, the confidence below which it is
    repaired (uniform in [low, high), the same for the same result in every state of the
    episode; ``low == high``: that fixed threshold): the repair-or-move-on choice gets
    probability mass too. With ``accept_free`` as well, a result whose part's skill has a card at
    least good at it priced as a tool (tier ``free``: a repair costs next to nothing) draws its
    threshold there instead: the repair-or-move-on choice then depends on what a repair costs."""

    def __init__(self, name: str, only: str | None = None, seed: int = 0,
                 accept: tuple[float, float] | None = None, accept_free: tuple[float, float] | None = None,
                 need: int | None = None) -> None:
        super().__init__(name, only, seed)
        self.accept = accept
        self.accept_free = accept_free
        self.need = need  # one of MENU_NEEDS: every subtask takes that need instead of a drawn one
        self._free_skills: frozenset[str] = frozenset()

    async def decide(self, obs: Observation, kind: DecisionType) -> str:
        if self.accept is not None and self.accept_free is not None:  # skills a card priced as a tool is at least good at
            free = [card_levels(c) for c in obs.cards if price_tier(c) == PRICE_NAMES[0]]
            self._free_skills = frozenset(skill for skill in SKILL_WORDS if any(lv[skill] >= 2 for lv in free))
        return await super().decide(obs, kind)

    def need_of(self, part: Part, attempts: int) -> int:
        if self.need is not None:
            return self.need
        return random.Random(stable_seed(self.seed, part.id, part.text, attempts)).choice(MENU_NEEDS)

    def accepted(self, st: PartStatus) -> bool:
        if self.accept is None or st.value is None:
            return super().accepted(st)
        low, high = self.accept_free if self.accept_free is not None and st.skill in self._free_skills else self.accept
        u = random.Random(stable_seed(self.seed, "accept", st.value, st.attempts)).random()
        return st.confidence >= low + (high - low) * u


class ThriftyOrchestrator(RuleOrchestrator):
    """``heuristic`` that tries the cheapest good-enough card first at every difficulty."""

    def first_need(self, part: Part) -> int:
        return 2


class TieredOrchestrator(RuleOrchestrator):
    """``heuristic`` that reads the menu's prices: a hard part's first attempt goes to the strong
    card only when its price tier (free, cheap, mid, pricey, premium) is at most one above the
    good card's, otherwise to the good card; a repair still goes to the strongest."""

    max_tier_gap = 1

    def need_at(self, router: Router, part: Part, attempts: int) -> int:
        need = self.need_of(part, attempts)
        if attempts == 0 and need == 3:
            strong, good = (router.cheapest_card_at_least(part.skill, n) for n in (3, 2))
            if PRICE_NAMES.index(price_tier(strong)) - PRICE_NAMES.index(price_tier(good)) > self.max_tier_gap:
                return 2
        return need


class UpfrontOrchestrator(RuleOrchestrator):
    """One milestone, the whole dependency-wired plan, then the answer."""

    repair = False

    def milestone(self, obs: Observation, parts: Sequence[Part], sink: str | None, status: dict[str, PartStatus]) -> str:
        if obs.history:
            return render_answer(sink or parts[-1].id)
        return render_milestone("Solve every part in one plan")

    def plan(self, obs: Observation, parts: Sequence[Part], status: dict[str, PartStatus]) -> str:
        router = Router(obs.cards)
        sid = {p.id: f"S{i + 1}" for i, p in enumerate(parts)}
        subtasks = [
            Subtask(sid[p.id], self.route(router, p, 0), f"Solve {p.id}.", tuple(sid[d] for d in p.deps if d in sid))
            for p in parts
        ]
        return render_plan(subtasks[: obs.max_plan_subtasks])


class SequentialOrchestrator(RuleOrchestrator):
    parallel = False


class RandomOrchestrator(RuleOrchestrator):
    repair = False

    def _rng(self, obs: Observation) -> random.Random:
        return random.Random(stable_seed(self.seed, obs.task_id, len(obs.history), obs.pending_milestone or ""))

    def milestone(self, obs: Observation, parts: Sequence[Part], sink: str | None, status: dict[str, PartStatus]) -> str:
        ready = self.ready(parts, status, obs.max_part_attempts)
        if not ready or obs.milestones_left <= 0 or (sink and status[sink].value is not None):
            return render_answer(sink or parts[-1].id)
        rng = self._rng(obs)
        chosen = rng.sample(ready, rng.randint(1, len(ready)))
        return render_milestone("Solve " + ", ".join(sorted(p.id for p in chosen)))

    def route(self, router: Router, part: Part, attempts: int) -> str:
        return random.Random(stable_seed(self.seed, part.id, part.text)).choice(router.cards).name

    def needs(self, obs: Observation) -> dict[str, int]:
        return {}  # a random card, not a need


def make_handwritten(name: str, pool_names: Sequence[str], seed: int = 0,
                     explore_accept: tuple[float, float] | None = None,
                     explore_accept_free: tuple[float, float] | None = None) -> Orchestrator:
    """``heuristic`` | ``thrifty`` | ``tiered`` | ``upfront`` | ``sequential`` | ``random`` | ``single:<executor>``
    (and the warm-start teacher ``explore``, whose repair threshold ``explore_accept`` — and, for
    results a repair costs next to nothing for, ``explore_accept_free`` — may draw)."""
    if name.startswith("single:"):
        executor = name.split(":", 1)[1]
        if executor not in pool_names:
            raise ValueError(f"single:{executor}: no executor {executor!r} in the pool; known: {', '.join(pool_names)}")
        return RuleOrchestrator(name, only=executor)
    classes = {"heuristic": RuleOrchestrator, "thrifty": ThriftyOrchestrator, "tiered": TieredOrchestrator,
               "upfront": UpfrontOrchestrator,
               "sequential": SequentialOrchestrator, "random": RandomOrchestrator, "explore": ExploreOrchestrator}
    if name not in classes:
        raise ValueError(
            f"unknown orchestrator {name!r}; use one of {', '.join(HANDWRITTEN)}, single:<executor>, "
            "or a policy checkpoint directory"
        )
    if name == "explore":
        return ExploreOrchestrator(name, seed=seed, accept=explore_accept, accept_free=explore_accept_free)
    return classes[name](name, seed=seed)
