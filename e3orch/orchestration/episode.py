"""Episodes: the milestone → plan → act loop, as a forkable state machine.

An :class:`EpisodeState` alternates between two decisions asked of an orchestrator — a milestone
(or the final answer) and a plan for that milestone — and one action: running the plan on the
DAG scheduler. Budgets (milestones, subtasks, cost) bound every episode: it always ends with an
answer or a recorded budget failure.

The state is forkable (:meth:`EpisodeState.fork`): tree rollouts branch at decisions and each
child continues from its parent's history, which was executed once.

What this module deliberately does not do: generate decisions (orchestrators and policies do),
or grade (graders do; :meth:`EpisodeState.finish` only calls them).
"""

from __future__ import annotations

import abc
import copy
import re
from dataclasses import dataclass, field, replace
from typing import Literal

from e3orch.config import EngineConfig
from e3orch.data.graders import grade
from e3orch.data.sim import stable_seed
from e3orch.data.tasks import Task
from e3orch.executors.base import ExecutorSpec, Pool
from e3orch.executors.simulated import parse_values
from e3orch.orchestration.protocol import parse_milestone, parse_plan
from e3orch.orchestration.reading import (
    futile_parts,
    is_spent,
    menus_for,
    named_parts,
    parse_parts,
    part_attempts,
    plan_slots,
)
from e3orch.orchestration.scheduler import run_plan
from e3orch.orchestration.types import Defect, Episode, MilestoneDecision, MilestoneRecord, Plan

DecisionType = Literal["milestone", "plan"]
_REF_RE = re.compile(r"^\s*([PS]\d+)\s*\.?\s*$")


@dataclass(frozen=True)
class Observation:
    """Everything an orchestrator may see: the task text, the pool's cards, the history."""

    task_id: str
    question: str
    cards: tuple[ExecutorSpec, ...]
    history: tuple[MilestoneRecord, ...]
    pending_milestone: str | None
    milestones_left: int
    subtasks_left: int
    cost_left: float
    max_plan_subtasks: int
    max_part_attempts: int = 0  # engine.max_part_attempts (0 = no limit)


class Orchestrator(abc.ABC):
    """Anything that makes the two decisions; hand-written rules and learned policies alike."""

    name: str = "orchestrator"

    @abc.abstractmethod
    async def decide(self, obs: Observation, kind: DecisionType) -> str:
        """Return the decision text in the protocol of :mod:`e3orch.orchestration.protocol`."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        pass


@dataclass
class EpisodeState:
    task: Task
    specs: tuple[ExecutorSpec, ...]
    cfg: EngineConfig
    seed: int = 0
    branch: str = ""  # suffix of the execution seeds: siblings of a rollout tree draw independent noise
    seed_by_executor: bool = True  # False: a subtask's noise does not depend on its executor (run_plan)
    milestones: list[MilestoneRecord] = field(default_factory=list)
    workspace: dict[str, str] = field(default_factory=dict)
    pending: MilestoneDecision | None = None
    pending_completion: str = ""
    decisions: int = 0
    subtasks_used: int = 0
    cost: float = 0.0
    makespan_s: float = 0.0
    serial_latency_s: float = 0.0
    defects: list[Defect] = field(default_factory=list)
    finished: bool = False
    answer: str = ""
    budget_failure: str | None = None

    @classmethod
    def start(cls, task: Task, pool: Pool, cfg: EngineConfig, seed: int = 0, *, seed_by_executor: bool = True) -> EpisodeState:
        return cls(task=task, specs=tuple(pool.specs), cfg=cfg, seed=seed, seed_by_executor=seed_by_executor)

    # -- what is asked next ------------------------------------------------------------------
    @property
    def needs(self) -> DecisionType | None:
        if self.finished:
            return None
        return "plan" if self.pending is not None else "milestone"

    def observation(self) -> Observation:
        return Observation(
            task_id=self.task.task_id,
            question=self.task.question,
            cards=self.specs,
            history=tuple(self.milestones),
            pending_milestone=self.pending.text if self.pending else None,
            milestones_left=self.cfg.max_milestones - len(self.milestones),
            subtasks_left=self.cfg.max_total_subtasks - self.subtasks_used,
            cost_left=self.cfg.max_cost - self.cost,
            max_plan_subtasks=min(self.cfg.max_plan_subtasks, self.cfg.max_total_subtasks - self.subtasks_used),
            max_part_attempts=self.cfg.max_part_attempts,
        )

    # -- decisions ---------------------------------------------------------------------------
    def apply_milestone(self, completion: str) -> MilestoneDecision:
        """Record a milestone-or-answer decision."""
        assert self.needs == "milestone"
        decision = parse_milestone(completion)
        self.decisions += 1
        self.defects.extend(decision.defects)
        if decision.kind == "answer":
            self.answer = self._resolve(decision.text)
            self.finished = True
        elif decision.kind == "milestone" and len(self.milestones) >= self.cfg.max_milestones:
            self._fail("milestone_budget", f"{len(self.milestones)} milestones run, no answer")
        elif decision.kind == "milestone":
            self.pending = decision
            self.pending_completion = completion
            futile = futile_parts(decision.text, self.task.question, self.milestones, self.cfg.max_part_attempts)
            if futile:  # the milestone's own defect: its plan's refused subtasks are recorded there too
                self.defects.append(Defect("futile_milestone", f"names only spent or unknown parts: {', '.join(futile)}"))
        elif self.decisions > self.cfg.max_milestones:
            # invalid decisions use up the same budget (max_milestones plans + one answer)
            self._fail("milestone_budget", f"{self.decisions} decisions without an answer")
        return decision

    def apply_plan(self, completion: str) -> Plan:
        """Parse and validate the plan for the pending milestone (does not execute it)."""
        assert self.needs == "plan"
        room = min(self.cfg.max_plan_subtasks, self.cfg.max_total_subtasks - self.subtasks_used)
        parts = parse_parts(self.task.question)[0]
        slots = plan_slots(parts, self.pending.text if self.pending else None)
        plan = parse_plan(completion, [s.name for s in self.specs], max_subtasks=max(room, 0),
                          menus=menus_for(parts, self.specs), slots=slots)
        if room < self.cfg.max_plan_subtasks and any(d.code == "oversized_plan" for d in plan.defects):
            plan = Plan(plan.subtasks, (*plan.defects, Defect("over_budget", f"{room} subtasks left in the episode")))
        if self.cfg.max_part_attempts:
            plan = self._refuse_spent_parts(plan)
        self.defects.extend(plan.defects)
        return plan

    def _refuse_spent_parts(self, plan: Plan) -> Plan:
        """Drop the subtasks whose named parts have all had ``max_part_attempts`` subtasks already
        (earlier subtasks of this plan count; a subtask that also names a fresh part, e.g. "Solve
        P3, using P2", runs); their ids leave the others' deps."""
        attempts = part_attempts(self.milestones)
        keep, defects = [], list(plan.defects)
        for s in plan.subtasks:
            tags = named_parts(s.instruction)
            spent = [t for t in tags if is_spent(attempts.get(t, 0), self.cfg.max_part_attempts)]
            if spent and len(spent) == len(tags):
                defects.append(Defect("part_attempts", f"{s.id}: {spent[0]} already had {attempts[spent[0]]} subtasks "
                                                       f"(engine.max_part_attempts)"))
                continue
            for t in tags:
                attempts[t] = attempts.get(t, 0) + 1
            keep.append(s)
        if len(keep) == len(plan.subtasks):
            return plan
        dropped = {s.id for s in plan.subtasks} - {s.id for s in keep}
        keep = [replace(s, deps=tuple(d for d in s.deps if d not in dropped)) for s in keep]
        return Plan(tuple(keep), tuple(defects))

    async def act(self, plan: Plan, pool: Pool, plan_completion: str = "") -> MilestoneRecord:
        """Run ``plan`` for the pending milestone and record the step."""
        assert self.pending is not None
        by_part = self.cfg.noise_key == "part"
        run = await run_plan(
            plan,
            pool,
            task=self.task,
            workspace=self.workspace,
            seed=stable_seed(self.seed, self.task.task_id, "part" if by_part else len(self.milestones), self.branch),
            concurrency=self.cfg.concurrency,
            timeout_s=self.cfg.subtask_timeout_s,
            seed_by_executor=self.seed_by_executor,
            noise_keys=self._part_noise_keys(plan) if by_part else None,
        )
        rec = MilestoneRecord(
            text=self.pending.text,
            plan=plan,
            results=run.results,
            makespan_s=run.makespan_s,
            serial_latency_s=run.serial_latency_s,
            cost=run.cost,
            milestone_completion=self.pending_completion,
            plan_completion=plan_completion,
        )
        self.milestones.append(rec)
        for r in run.results:
            if r.ok:
                self.workspace.update(parse_values(r.output))
        self.subtasks_used += len(plan.subtasks)
        self.cost += run.cost
        self.makespan_s += run.makespan_s
        self.serial_latency_s += run.serial_latency_s
        self.pending = None
        self.pending_completion = ""
        if self.cost >= self.cfg.max_cost:
            self._fail("cost_budget", f"cost {self.cost:.3g} >= {self.cfg.max_cost:g}")
        return rec

    def _part_noise_keys(self, plan: Plan) -> dict[str, str]:
        """Per subtask, ``P3#2,P4#1``: each part it names and how many subtasks named it before (in
        earlier milestones and earlier in this plan), so the n-th attempt at a part draws the same
        noise whatever came before it. A subtask naming no part is keyed by its id and the
        milestone's index (``S2@3``), as with ``noise_key: milestone``."""
        attempts = part_attempts(self.milestones)
        keys: dict[str, str] = {}
        for s in plan.subtasks:
            tags = named_parts(s.instruction)
            keys[s.id] = ",".join(f"{t}#{attempts.get(t, 0) + 1}" for t in tags) or f"{s.id}@{len(self.milestones)}"
            for t in tags:
                attempts[t] = attempts.get(t, 0) + 1
        return keys

    def fork(self, branch: str, *, shared_noise: bool = False) -> EpisodeState:
        """A child that shares this history (already executed) and draws its own noise — or, with
        ``shared_noise``, its parent's: then the k-th milestone of every path (with ``engine.noise_key:
        part``, the n-th attempt at each part) draws the same seed, and
        two paths that plan the same subtask (executor and instruction) there get the same result."""
        child = copy.copy(self)
        child.milestones = list(self.milestones)  # records are immutable once appended
        child.workspace = dict(self.workspace)
        child.defects = list(self.defects)
        child.branch = self.branch if shared_noise else f"{self.branch}/{branch}"
        return child

    # -- end ---------------------------------------------------------------------------------
    def _fail(self, code: str, detail: str) -> None:
        self.defects.append(Defect(code, detail))
        self.defects.append(Defect("no_answer", "episode ended without an answer"))
        self.budget_failure = code
        self.finished = True

    def _resolve(self, text: str) -> str:
        """``P5`` → that part's latest value; ``S2`` → the latest output of subtask S2."""
        m = _REF_RE.match(text)
        if not m:
            return text
        ref = m.group(1)
        if ref in self.workspace:
            return self.workspace[ref]
        for rec in reversed(self.milestones):
            for r in rec.results:
                if r.id == ref and r.ok:
                    return r.output
        return "" if ref.startswith("P") and self.task.requirements else text

    def finish(self, orchestrator: str = "") -> Episode:
        g = grade(self.task, self.answer) if self.answer else None
        return Episode(
            task_id=self.task.task_id,
            benchmark=self.task.benchmark,
            domain=self.task.domain,
            question=self.task.question,
            orchestrator=orchestrator,
            milestones=list(self.milestones),
            answer=self.answer,
            correct=bool(g and g.correct),
            score=g.score if g else 0.0,
            cost=self.cost,
            makespan_s=self.makespan_s,
            serial_latency_s=self.serial_latency_s,
            defects=list(self.defects),
            budget_failure=self.budget_failure,
            grade_error=g.error if g else "no answer",
        )


async def play_out(st: EpisodeState, orchestrator: Orchestrator, pool: Pool) -> EpisodeState:
    """Let ``orchestrator`` make every decision left in ``st`` until the episode ends."""
    while not st.finished:
        if st.needs == "milestone":
            st.apply_milestone(await orchestrator.decide(st.observation(), "milestone"))
        else:
            completion = await orchestrator.decide(st.observation(), "plan")
            plan = st.apply_plan(completion)
            await st.act(plan, pool, completion)
    return st


async def run_episode(task: Task, orchestrator: Orchestrator, pool: Pool, cfg: EngineConfig, seed: int = 0) -> Episode:
    """Run one task to the end with ``orchestrator``."""
    st = await play_out(EpisodeState.start(task, pool, cfg, seed), orchestrator, pool)
    return st.finish(orchestrator.name)
