"""Demonstrations from the hand-written orchestrators, recorded as (prompt, completion) pairs.

Teachers are mixed per task (``heuristic``, ``sequential``, ``upfront``, ``random``,
``single:<executor>``) and every task gets its own randomised pool, so the warm-start policy
starts diverse and reads cards rather than copying one rule or memorising names.

``collect_corrections`` is the same recording with the *policy* acting and the teacher only
labelling (DAgger, Ross et al. 2011): a cloned policy drifts into states its teachers never
visit — a part retried a fourth time, a milestone that skipped a part — and, never having seen
them, keeps going wrong there; the teacher's decision in exactly those states teaches it to
recover.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from e3orch.config import EngineConfig
from e3orch.data.sim import stable_seed
from e3orch.data.tasks import Task
from e3orch.executors.base import ExecutorSpec, build_pool
from e3orch.orchestration.episode import DecisionType, Observation, Orchestrator, run_episode
from e3orch.orchestration.handwritten import ExploreOrchestrator, RuleOrchestrator, make_handwritten
from e3orch.orchestration.protocol import to_handles, to_menu_refs, to_slot_lines
from e3orch.orchestration.reading import MENU_NEEDS, MenuRank, menus_for, parse_parts, plan_slots
from e3orch.orchestration.types import Episode
from e3orch.policy.pools import training_pool
from e3orch.policy.prompts import (
    COMPACT_STYLES,
    FACTORED_STYLES,
    TIER_ANSWER_STYLES,
    PromptStyle,
    render_prompt,
    split_decision,
    sub_prompts,
    tier_answer,
)

DEFAULT_TEACHERS: dict[str, float] = {"heuristic": 0.4, "explore": 0.3, "sequential": 0.1, "upfront": 0.1,
                                      "random": 0.05, "single": 0.05}


@dataclass(frozen=True)
class Demo:
    task_id: str
    teacher: str
    kind: str
    prompt: str
    completion: str
    obs: Observation | None = None  # what the teacher saw: prompts can be re-rendered with a token budget
    correct: bool = False
    cost: float = 0.0
    style: PromptStyle = "full"
    weight: float = 1.0  # with soft labels, the share of the teachers' mix that answers the prompt so

    def budgeted_prompt(self, count_tokens: Callable[[str], int], max_tokens: int) -> str:
        """The prompt with the history trimming the policy meets at inference (oldest milestones
        dropped first until it fits ``max_tokens``)."""
        if self.obs is None or self.style != "full":  # only full prompts carry a history to trim
            return self.prompt
        return render_prompt(self.obs, self.kind, count_tokens=count_tokens, max_tokens=max_tokens,  # type: ignore[arg-type]
                             style=self.style)


class Recorder(Orchestrator):
    """Wraps a teacher and records what it was shown (rendered as a policy prompt) and said.

    With ``handles`` the recorded plans name executors by card handle (``E3``): a short pointer
    into the prompt's cards is far easier for a small policy to produce than a random name; with
    the ``compact`` style, by rank in the part's menu (``#2``) where the menu lists them, and a
    line that solves its slot's part leaves the instruction out (``S2 | #1 | -``).

    With ``actor`` the actor's decision is the one executed and the teacher only labels the states
    the actor reaches (its empty labels are not recorded).

    With ``labellers`` (weight, teacher) every plan state is also answered by each of them: the
    plan the whole mix would make there, recorded beside the teacher's own (soft labels)."""

    def __init__(self, inner: Orchestrator, handles: bool = True, style: PromptStyle = "full",
                 actor: Orchestrator | None = None,
                 labellers: Sequence[tuple[float, Orchestrator]] = (), menu_rank: MenuRank = "highest") -> None:
        self.inner = inner
        self.handles = handles
        self.style = style
        self.actor = actor
        self.labellers = labellers
        self.menu_rank = menu_rank
        self.name = inner.name
        self.records: list[tuple[DecisionType, Observation, str, list[tuple[float, str]]]] = []
        self.agreed = 0

    def _taught(self, obs: Observation, kind: DecisionType, text: str, teacher: Orchestrator) -> str:
        if not (self.handles and kind == "plan"):
            return text
        names = [c.name for c in obs.cards]
        if self.style in COMPACT_STYLES:
            parts = parse_parts(obs.question)[0]
            needs = teacher.needs(obs) if self.menu_rank == "need" and isinstance(teacher, RuleOrchestrator) else None
            return to_slot_lines(to_menu_refs(text, names, menus_for(parts, obs.cards), self.menu_rank, needs),
                                 plan_slots(parts, obs.pending_milestone))
        return to_handles(text, names)

    async def decide(self, obs: Observation, kind: DecisionType) -> str:
        text = await self.inner.decide(obs, kind)
        taught = self._taught(obs, kind, text, self.inner)
        mixed = ([(w, self._taught(obs, kind, await t.decide(obs, kind), t)) for w, t in self.labellers]
                 if kind == "plan" else [])
        if self.actor is None:
            self.records.append((kind, obs, taught, mixed))
            return text
        acted = await self.actor.decide(obs, kind)
        if taught.strip():
            self.records.append((kind, obs, taught, mixed))
            self.agreed += _same(kind, obs, acted, taught, self.style)
        return acted


def _same(kind: DecisionType, obs: Observation, acted: str, taught: str, style: PromptStyle) -> bool:
    """Whether the actor did what the teacher says. A factored plan is compared slot by slot: its
    dependencies are the task's, where a taught slot line writes ``-``."""
    if style in FACTORED_STYLES and kind == "plan":
        answers = split_decision(obs, taught)
        if answers is not None:
            return split_decision(obs, acted) == answers
    return acted.strip() == taught.strip()


def _taught_pairs(kind: DecisionType, obs: Observation, taught: str, style: PromptStyle,
                  mixed: Sequence[tuple[float, str]] = ()) -> list[tuple[str, str, float]]:
    """The (prompt, completion, weight) triples one taught decision becomes: one, or with a factored
    style one per plan slot (none for a plan that cannot be taught slot by slot), and with
    ``per_part`` one per part a milestone could act on (none for a milestone that cannot be taught
    part by part). With ``mixed`` (the mix's plans, weighed) a plan slot's question is taught every
    answer the mix gives it, each weighing its share (together 1), instead of the teacher's own."""
    questions = sub_prompts(obs, kind, style)
    if questions is not None:
        # per_part_tier_answers: a slot is taught its rank's tier first (S1 | premium #3 | -)
        say = tier_answer if kind == "plan" and style in TIER_ANSWER_STYLES else (lambda q, a: a)
        shares = _slot_shares(obs, mixed, len(questions)) if kind == "plan" and mixed else None
        if shares is not None:
            return [(q, say(q, a), w) for q, share in zip(questions, shares) for a, w in share.items()]
        answers = split_decision(obs, taught, kind)
        return [(q, say(q, a), 1.0) for q, a in zip(questions, answers)] if answers is not None else []
    return [(render_prompt(obs, kind, style=style), taught, 1.0)]


def _slot_shares(obs: Observation, mixed: Sequence[tuple[float, str]], slots: int) -> list[dict[str, float]] | None:
    """Each plan slot's answers under the weighed plans ``mixed`` and their shares (summing to 1
    over the plans that can be taught slot by slot); None when none can."""
    shares: list[dict[str, float]] = [{} for _ in range(slots)]
    total = 0.0
    for w, text in mixed:
        answers = split_decision(obs, text, "plan")
        if answers is None or len(answers) != slots:
            continue
        total += w
        for share, a in zip(shares, answers):
            share[a] = share.get(a, 0.0) + w
    if total <= 0:
        return None
    return [{a: w / total for a, w in share.items()} for share in shares]


def mix_labellers(mix: dict[str, float], pool_names: Sequence[str], seed: int = 0) -> list[tuple[float, Orchestrator]]:
    """The teachers of ``mix`` as plan-makers, each weighing how often the mix answers as it does:
    ``explore`` once per need it draws from (uniformly), ``single`` once per pool member. What they
    answer at a plan state is the mix's distribution there (``warmstart.soft_labels``)."""
    total = sum(mix.values())
    out: list[tuple[float, Orchestrator]] = []
    for name, w in mix.items():
        share = w / total
        if name == "explore":
            out += [(share / len(MENU_NEEDS), ExploreOrchestrator(name, seed=seed, need=need)) for need in MENU_NEEDS]
        elif name == "single":
            out += [(share / len(pool_names), make_handwritten(f"single:{n}", pool_names, seed=seed)) for n in pool_names]
        else:
            out.append((share, make_handwritten(name, pool_names, seed=seed)))
    return out


def pick_teacher(rng: random.Random, names: Sequence[str], mix: dict[str, float]) -> str:
    kinds, weights = zip(*mix.items())
    t = rng.choices(kinds, weights=weights)[0]
    return f"single:{rng.choice(list(names))}" if t == "single" else t


async def _collect(tasks: Sequence[Task], specs: Sequence[ExecutorSpec], engine: EngineConfig, seed: int,
                   mix: dict[str, float], randomize: bool, style: PromptStyle,
                   actor: Orchestrator | None = None, stream: str = "demo", generated_share: float = 0.0,
                   explore_accept: tuple[float, float] | None = None,
                   explore_accept_free: tuple[float, float] | None = None,
                   soft_labels: bool = False, menu_rank: MenuRank = "highest") -> tuple[list[Demo], list[Episode], int]:
    async def one(task: Task) -> tuple[list[Demo], Episode, int]:
        rng = random.Random(stable_seed(stream, seed, task.task_id))
        task_specs = training_pool(specs, rng, generated_share) if randomize else list(specs)
        pool = build_pool(task_specs)
        teacher = pick_teacher(rng, pool.names, mix)
        labellers = mix_labellers(mix, pool.names, seed) if soft_labels and style in FACTORED_STYLES else []
        rec = Recorder(make_handwritten(teacher, pool.names, seed=seed, explore_accept=explore_accept,
                                        explore_accept_free=explore_accept_free), style=style, actor=actor,
                       labellers=labellers, menu_rank=menu_rank)
        ep = await run_episode(task, rec, pool, engine, seed=stable_seed(seed, task.task_id, *([stream] if actor else [])))
        demos = [Demo(task.task_id, teacher, k, prompt, c, obs=o, correct=ep.correct, cost=ep.cost, style=style, weight=w)
                 for k, o, taught, mixed in rec.records for prompt, c, w in _taught_pairs(k, o, taught, style, mixed)]
        return demos, ep, rec.agreed

    # in task order, not in the order episodes happen to finish (the training data's order)
    done = await asyncio.gather(*(one(t) for t in tasks))
    return [d for demos, _, _ in done for d in demos], [ep for _, ep, _ in done], sum(a for _, _, a in done)


def collect_demonstrations(
    tasks: Sequence[Task],
    specs: Sequence[ExecutorSpec],
    engine: EngineConfig,
    *,
    seed: int = 0,
    mix: dict[str, float] | None = None,
    randomize: bool = True,
    style: PromptStyle = "full",
    generated_share: float = 0.0,
    explore_accept: tuple[float, float] | None = None,
    explore_accept_free: tuple[float, float] | None = None,
    soft_labels: bool = False,
    menu_rank: MenuRank = "highest",
) -> tuple[list[Demo], list[Episode]]:
    """The teachers' episodes on ``tasks`` and the demonstrations they make. ``soft_labels``
    (factored styles): every plan slot is taught the whole mix's answers there, each weighing its
    share, not just the acting teacher's (the episodes are the same)."""
    demos, episodes, _ = asyncio.run(_collect(tasks, specs, engine, seed, mix or DEFAULT_TEACHERS, randomize, style,
                                              generated_share=generated_share, explore_accept=explore_accept,
                                              explore_accept_free=explore_accept_free, soft_labels=soft_labels,
                                              menu_rank=menu_rank))
    return demos, episodes


def collect_corrections(
    tasks: Sequence[Task],
    specs: Sequence[ExecutorSpec],
    engine: EngineConfig,
    actor: Orchestrator,
    *,
    seed: int = 0,
    mix: dict[str, float] | None = None,
    style: PromptStyle = "full",
    generated_share: float = 0.0,
    explore_accept: tuple[float, float] | None = None,
    explore_accept_free: tuple[float, float] | None = None,
    soft_labels: bool = False,
    menu_rank: MenuRank = "highest",
) -> tuple[list[Demo], list[Episode], int]:
    """The ``actor`` (a policy) runs the tasks on randomised pools; at every state it reaches, the
    task's teacher says what it would have done (with ``soft_labels``, at a plan state the whole
    mix does). Returns the teacher-labelled demos, the actor's episodes, and how many of its
    decisions matched the task teacher's label exactly."""
    return asyncio.run(_collect(tasks, specs, engine, seed, mix or DEFAULT_TEACHERS, True, style,
                                actor=actor, stream="dagger", generated_share=generated_share,
                                explore_accept=explore_accept, explore_accept_free=explore_accept_free,
                                soft_labels=soft_labels, menu_rank=menu_rank))
