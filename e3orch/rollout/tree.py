"""Tree-structured rollouts with shared execution histories.

For every task a tree grows from one root episode state. At each decision (milestone or plan)
a path may branch: ``k`` completions are sampled from the *same* prompt, and each child
continues from a fork of its parent's state. The parent's history was executed once; forking
copies its records, not its executions, so shared prefixes are never re-run. Branching is
allowed while a path has made fewer than ``branch_depth`` decisions and the tree has room under
``leaf_budget`` (every path ends in exactly one leaf).

Two knobs decide where the signal is (``rollout.trunk`` and ``rollout.distinct_siblings``). With a
*greedy trunk* every path decodes greedily, as evaluation does, and only a branch point's extra
siblings sample: each branch compares the greedy decision with an alternative, in the states the
greedy policy reaches. With *distinct siblings* a branch keeps only completions that differ; when
every sample repeats, the path goes on unbranched and the leaves it would have spent stay in the
budget. At temperature 0.8 four in five sampled sibling pairs of a warm-started policy were
identical: two copies of one decision, whose outcomes differ only by execution noise.
With *shared noise* (``rollout.shared_noise``) that noise is common to a tree's paths: the k-th
milestone of every path executes with the same seed, so siblings that go on to make the same
decisions get the same results, and what separates their leaves is what their decisions changed
(common random numbers, as evaluation uses across systems). With *slot alternatives*
(``rollout.slot_alternatives``, factored prompts only) a plan's branch point draws one plan, and
its siblings are copies of it in which one slot, drawn at random, names another executor of that
slot's menu; the policy scores the new answer (its tokens and log-probs), so the siblings compare
routings that a peaked policy would almost never sample. With ``policy.prompt: per_part`` a
milestone's branch point does the same with its parts: the siblings flip one part's ``yes`` or
``no``, comparing repairing a part (or moving on) with not. With ``rollout.alternative_slot:
uncertain`` the slot is drawn with weight 1 − the policy's probability of its answer, so the
comparisons go where the policy is least sure rather than to parts it answers with certainty
(entropy-guided branching). With a *spine* (``rollout.spine``)
only the path that took the first child at every branch point branches again; the other
children run to their leaves unbranched, so a tree compares alternatives at every decision of
one episode rather than at the early decisions of many. With ``rollout.lookahead`` N, an
alternative off the spine branches again at its next N branch points, so that every decision
can be judged by its best continuation through them (rewards/score.py): "repair this part" is
then compared with "move on" at the repair's best routing, not only at the greedy one. A
decision with nothing to ask (the ``per_part`` milestone once no part can still run) is forced
and never branches. With a hand-written ``rollout.continuation`` (spine only), each child of a
branch point is judged by ``rollout.probes`` *probes* instead of its own greedy continuation: the
child's decision applied (its plan executed with the probe's noise, the same for every sibling)
and the episode finished by the rule, whose plans the policy routes as it does greedily with
``rollout.probe_routing: policy`` (each distinct question generated once a round); the children
off the spine end at their probes, so the policy generates only the spine.

The loop is phased across all trees of a batch: (1) one batched generation call for every
pending decision on the frontier of every tree, (2) every resulting plan executed concurrently
(asyncio) on the DAG scheduler. Every decision becomes a :class:`DecisionNode`, every finished
path a :class:`Leaf`. With ``policy.workers`` a round's tasks are shared out between processes
(:func:`rollout_shares`): one process's generation and episodes take turns on one core.

What this module deliberately does not do: compute rewards (rewards/ does), or update weights.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from e3orch.config import EngineConfig, RolloutConfig, lookahead_at
from e3orch.data.sim import stable_seed
from e3orch.data.tasks import Task
from e3orch.executors.base import ExecutorSpec, Pool, build_pool
from e3orch.orchestration.episode import DecisionType, EpisodeState, Orchestrator, play_out
from e3orch.orchestration.handwritten import make_handwritten
from e3orch.orchestration.reading import MenuRank
from e3orch.policy.backends.base import Generation, PolicyBackend
from e3orch.policy.pools import training_pool
from e3orch.policy.prompts import (
    PromptStyle,
    asks_about_result,
    asks_to_act,
    join_answers,
    policy_prompt_style,
    question_part,
    render_prompt,
    slot_alternatives,
    sub_prompts,
)
from e3orch.rollout.records import DecisionNode, Leaf

if TYPE_CHECKING:
    from e3orch.policy.workers import PolicyWorkers


@dataclass
class _Path:
    state: EpisodeState
    pool: Pool
    tree: _Tree
    node_path: list[str] = field(default_factory=list)
    calls: int = 0
    spine: bool = True  # took the first child at every branch point so far
    look: int = 0  # off the spine: branch points this path may still branch at (rollout.lookahead)
    focus: str | None = None  # the part its alternative changed: its lookahead branches change that part again


@dataclass
class _Tree:
    tree_id: str
    task: Task
    specs: list[ExecutorSpec]
    paths: int = 1
    nodes: int = 0


@dataclass
class RolloutResult:
    nodes: list[DecisionNode]
    leaves: list[Leaf]
    trees: dict[str, list[dict[str, Any]]]  # tree_id -> pool cards (what the policy saw)
    generate_s: float = 0.0
    execute_s: float = 0.0
    generated_tokens: int = 0
    generate_calls: int = 0
    probe_calls: int = 0  # executor calls of the hand-written continuations (rollout.continuation)

    @property
    def calls_tree(self) -> int:
        return sum(n.n_calls for n in self.nodes) + self.probe_calls

    @property
    def calls_independent(self) -> int:
        return sum(leaf.n_calls_path for leaf in self.leaves)

    @classmethod
    def merge(cls, parts: Sequence[RolloutResult]) -> RolloutResult:
        """The rollouts of disjoint task shares as one (``policy.workers``): their nodes, leaves and
        trees in share order; the phases' seconds are the slowest share's (they ran side by side)."""
        out = cls([], [], {})
        for r in parts:
            out.nodes += r.nodes
            out.leaves += r.leaves
            out.trees.update(r.trees)
            out.generated_tokens += r.generated_tokens
            out.generate_calls += r.generate_calls
            out.probe_calls += r.probe_calls
        out.generate_s = max((r.generate_s for r in parts), default=0.0)
        out.execute_s = max((r.execute_s for r in parts), default=0.0)
        return out

    def sharing(self) -> dict[str, float]:
        n = max(1, len(self.leaves))
        tree, indep = self.calls_tree / n, self.calls_independent / n
        return {"calls_per_leaf_tree": tree, "calls_per_leaf_independent": indep,
                "sharing_ratio": sharing_ratio(self.calls_tree, self.calls_independent)}


def sharing_ratio(calls_tree: float, calls_independent: float) -> float:
    """Executor calls a tree rollout ran over those its leaves would need as independent rollouts."""
    return calls_tree / calls_independent if calls_independent else 1.0


class TreeRollout:
    def __init__(
        self,
        backend: PolicyBackend,
        engine: EngineConfig,
        cfg: RolloutConfig,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: dict[str, int] | None = None,
        max_prompt_tokens: int = 1024,
        prompt_style: PromptStyle = "full",
        menu_rank: MenuRank = "highest",
    ) -> None:
        self.backend = backend
        self.engine = engine
        self.cfg = cfg
        self.temperature = temperature
        self.top_p = top_p
        self.max_new_tokens = max_new_tokens or {"milestone": 24, "plan": 160}
        self.max_prompt_tokens = max_prompt_tokens
        self.prompt_style = prompt_style
        self.menu_rank = menu_rank  # policy.menu_rank: the rank a slot alternative names its card by
        self._policy_plans: _PolicyPlans | None = None  # per run: the policy's greedy plans for probes

    @classmethod
    def from_params(cls, backend: PolicyBackend, params: Any) -> TreeRollout:
        """The rollout engine as ``params.policy`` (decoding), ``engine`` and ``rollout`` configure it."""
        pc = params.policy
        return cls(backend, params.engine, params.rollout, temperature=pc.temperature, top_p=pc.top_p,
                   max_new_tokens={"milestone": pc.max_new_tokens_milestone, "plan": pc.max_new_tokens_plan},
                   max_prompt_tokens=pc.max_prompt_tokens, prompt_style=policy_prompt_style(backend, pc.prompt),
                   menu_rank=pc.menu_rank)

    def branching(self, path: _Path, kind: str) -> int:
        k = self.cfg.branch_milestone if kind == "milestone" else self.cfg.branch_plan
        depth = len(path.node_path)  # decisions already made on this path
        cfg = self.cfg
        if cfg.spine and not path.spine and path.look <= 0:
            return 1
        if depth < cfg.branch_start or depth >= cfg.branch_depth or (depth - cfg.branch_start) % cfg.branch_stride:
            return 1
        room = self.cfg.leaf_budget - path.tree.paths
        return max(1, min(k, room + 1))

    def run(self, tasks: Sequence[Task], specs: Sequence[ExecutorSpec], *, round_id: int = 0, seed: int = 0,
            stream: int = 0) -> RolloutResult:
        return asyncio.run(self.arun(tasks, specs, round_id=round_id, seed=seed, stream=stream))

    async def arun(self, tasks: Sequence[Task], specs: Sequence[ExecutorSpec], *, round_id: int = 0, seed: int = 0,
                   stream: int = 0) -> RolloutResult:
        """Grow every task's tree. A task's pool, noise and alternatives are keyed by ``seed``,
        ``round_id`` and the task; ``stream`` > 0 gives the sampled siblings of this call their own
        draws (a share of a round run beside others, :func:`rollout_shares`, whose batches would
        otherwise draw the same numbers row for row)."""
        import time

        result = RolloutResult([], [], {})
        # probe_routing policy: this round's greedy plans, cached for the probes
        self._policy_plans = _PolicyPlans(self) if self.cfg.probe_routing == "policy" else None
        active: list[_Path] = []
        for task in tasks:
            rng = random.Random(stable_seed("pool", seed, round_id, task.task_id))
            as_is = not self.cfg.randomize_pool or (self.cfg.as_is_share > 0 and rng.random() < self.cfg.as_is_share)
            task_specs = list(specs) if as_is else training_pool(specs, rng, self.cfg.generated_pool_share)
            pool = build_pool(task_specs)
            tree = _Tree(f"r{round_id}:{task.task_id}", task, task_specs)
            result.trees[tree.tree_id] = [s.model_dump(include={"name", "description", "price", "latency"}) for s in task_specs]
            state = EpisodeState.start(task, pool, self.engine, seed=stable_seed(seed, round_id, task.task_id),
                                       seed_by_executor=not self.cfg.common_executor_noise)
            active.append(_Path(state, pool, tree))

        step = 0
        while active:
            step += 1
            # (1) one generation call per decision kind across the frontier of all trees
            t0 = time.perf_counter()
            children: list[tuple[_Path, DecisionNode, str]] = []
            for kind in ("milestone", "plan"):
                group = [p for p in active if p.state.needs == kind]
                if not group:
                    continue
                obs = [p.state.observation() for p in group]
                prompts = [render_prompt(o, kind, count_tokens=self.backend.count_tokens,
                                         max_tokens=self.max_prompt_tokens, style=self.prompt_style) for o in obs]
                # what each decision generates from: its prompt, or (factored styles) one question per plan
                # slot, and (per_part) per part a milestone could act on: none when the decision is forced
                subs = [sub_prompts(o, kind, self.prompt_style) for o in obs]  # type: ignore[arg-type]
                ks = []
                for p, sp in zip(group, subs):  # reserve leaves as we go: several paths of one tree may branch now
                    ks.append(self.branching(p, kind) if sp != [] else 1)  # a forced decision does not branch
                    p.tree.paths += ks[-1] - 1
                asks = [[pr] if sp is None else sp for sp, pr in zip(subs, prompts)]
                # slot alternatives (factored plans): one draw per path; its siblings are built from it
                alts = [self.cfg.slot_alternatives and sp is not None and k > 1 for sp, k in zip(subs, ks)]
                draws = [1 if alt else k for alt, k in zip(alts, ks)]
                # greedy trunk: each path's first child decodes greedily, only the extra siblings sample
                greedy = self.cfg.trunk == "greedy"
                sampled = [q for a, d in zip(asks, draws) for _ in range(d - 1 if greedy else d) for q in a]
                trunk = [q for a in asks for q in a] if greedy else []
                gens: list[Generation] = []
                for batch, temperature in ((trunk, 0.0), (sampled, self.temperature)):
                    if batch:
                        gens += [g[0] for g in await asyncio.to_thread(
                            self.backend.generate, batch, n=1, temperature=temperature, top_p=self.top_p,
                            max_new_tokens=self.max_new_tokens[kind],
                            seed=stable_seed(seed, round_id, step, kind, *((stream,) if stream else ())) % (2**31),
                        )]
                        result.generate_calls += 1
                result.generated_tokens += sum(len(g.token_ids) for g in gens)
                t = 0  # the trunk's generations, then the sampled siblings'
                i = len(trunk)
                all_runs = []
                for a, d in zip(asks, draws):
                    own = d - 1 if greedy else d
                    all_runs.append(([gens[t:t + len(a)]] if greedy else [])
                                    + [gens[i + j * len(a): i + (j + 1) * len(a)] for j in range(own)])
                    t += len(a) if greedy else 0
                    i += own * len(a)
                changed: list[list[str | None]] = []  # per path, per child: the part its alternative changed
                in_tree: Counter[str] = Counter()  # paths of one tree that draw alternatives at this step
                wanted: list[tuple[int, list[tuple[int, str]]]] = []  # per path: (its index, [(slot, answer)])
                for x, (path, runs, sp, alt, k) in enumerate(zip(group, all_runs, subs, alts, ks)):
                    changed.append([None])
                    if alt and sp is not None:
                        # each path its own draw (the first keeps the seed it always had)
                        j = in_tree[path.tree.tree_id]
                        in_tree[path.tree.tree_id] += 1
                        key = (seed, round_id, step, path.tree.tree_id, path.tree.nodes) + ((j,) if j else ())
                        rng = random.Random(stable_seed(*key))
                        picks = self._alternatives(runs[0], sp, k - 1, rng, focus=path.focus if path.look > 0 else None)
                        wanted.append((x, picks))
                        changed[-1] += [question_part(sp[j]) for j, _ in picks]
                # the policy scores every alternative answer of this step in one call (tokens and log-probs, as if sampled)
                pairs = [(subs[x][j], text) for x, picks in wanted for j, text in picks]  # type: ignore[index]
                lps = await asyncio.to_thread(self.backend.score, [q for q, _ in pairs], [a for _, a in pairs]) if pairs else []
                at = 0
                for x, picks in wanted:
                    base = all_runs[x][0]
                    for j, text in picks:
                        ids, lp = self.backend.completion_ids(text), lps[at]
                        at += 1
                        if len(ids) != len(lp):
                            raise RuntimeError(f"{self.backend.name} backend scored {len(lp)} tokens of a {len(ids)}-token "
                                               "completion; rollout.slot_alternatives needs score() and completion_ids() to agree")
                        forced = Generation(text, ids, [float(v) for v in lp], base[j].prompt_tokens)
                        all_runs[x].append([*base[:j], forced, *base[j + 1:]])
                for path, o, prompt, sp, runs, k, parts in zip(group, obs, prompts, subs, all_runs, ks, changed):
                    parent = path.node_path[-1] if path.node_path else ""
                    samples = [(_combine(o, kind, sp, r), [len(x.token_ids) for x in r] if sp is not None else [])
                               for r in runs]
                    if len(samples) < k:  # fewer alternatives than siblings reserved: give the leaves back
                        path.tree.paths -= k - len(samples)
                        k = len(samples)
                    if self.cfg.distinct_siblings and k > 1:
                        samples = _distinct(samples)
                        path.tree.paths -= k - len(samples)  # give back the leaves a repeat reserved
                        k = len(samples)
                    for j, (g, lengths) in enumerate(samples):
                        child = path if k == 1 else _Path(
                            path.state.fork(f"{step}.{j}", shared_noise=self.cfg.shared_noise), path.pool, path.tree,
                            list(path.node_path), path.calls, spine=path.spine and j == 0,
                            look=_look(path, j, lookahead_at(self.cfg.lookahead, self.cfg.lookahead_from, kind)),
                            focus=(parts[j] if j < len(parts) else None) if path.spine and j else path.focus)
                        node = DecisionNode(
                            node_id=f"{path.tree.tree_id}#{path.tree.nodes}", tree_id=path.tree.tree_id,
                            task_id=path.tree.task.task_id, benchmark=path.tree.task.benchmark, parent_id=parent,
                            kind=kind, depth=len(path.node_path), sibling_index=j, n_siblings=k, prompt=prompt,
                            completion=g.text, token_ids=list(g.token_ids), logprobs=[float(x) for x in g.logprobs],
                            finished=g.finished, defects=[], sub_prompts=list(sp or []), sub_lengths=lengths,
                        )
                        path.tree.nodes += 1
                        child.node_path.append(node.node_id)
                        result.nodes.append(node)
                        children.append((child, node, kind))
            result.generate_s += time.perf_counter() - t0

            # (2) apply decisions; execute every plan of every tree concurrently
            t0 = time.perf_counter()
            probing = self.cfg.continuation != "policy"
            if probing:
                # each child of a branch point: its decision applied (a plan executed) and the episode finished by
                # the hand-written continuation, rollout.probes times; a child off the spine ends there
                branched = [(c, n) for c, n, _ in children if n.n_siblings > 1]
                probes = await asyncio.gather(*(self._probe(c, n) for c, n in branched))
                # the leaves in the children's order (not the order the probes finished in): the same
                # rollout writes the same leaf ids whatever the timing of its concurrent episodes
                for (c, _), ends in zip(branched, probes):
                    for st, calls in ends:
                        result.probe_calls += calls
                        result.leaves.append(self._leaf(c, len(result.leaves), state=st, calls=c.calls + calls, probe=True))
                children = [(c, n, k) for c, n, k in children if n.n_siblings == 1 or c.spine]

            async def apply(child: _Path, node: DecisionNode, kind: str) -> None:
                before = len(child.state.defects)
                if kind == "milestone":
                    child.state.apply_milestone(node.completion)
                else:
                    plan = child.state.apply_plan(node.completion)
                    rec = await child.state.act(plan, child.pool, node.completion)
                    node.n_calls = len(rec.results)
                    node.cost = rec.cost
                    child.calls += node.n_calls
                node.defects = [d.code for d in child.state.defects[before:]]

            await asyncio.gather(*(apply(c, n, k) for c, n, k in children))
            result.execute_s += time.perf_counter() - t0

            active = []
            for child, _, _ in children:
                if child.state.finished:
                    result.leaves.append(self._leaf(child, len(result.leaves)))
                else:
                    active.append(child)

        by_id = {n.node_id: n for n in result.nodes}
        for leaf in result.leaves:
            for nid in leaf.node_path:
                by_id[nid].leaves.append(leaf.leaf_id)
        return result

    def _alternatives(self, base: list[Generation], questions: list[str], n: int, rng: random.Random,
                      focus: str | None = None) -> list[tuple[int, str]]:
        """Up to ``n`` alternatives to a factored decision's answers ``base``, each changing one
        slot: ``(slot, new answer)`` — another executor of that slot's menu, or a part's yes/no
        flipped. The first slot is drawn by ``rng`` (uniformly, or by :func:`uncertainty_weights`);
        with ``focus`` (a lookahead branch below an alternative that changed that part) it is that
        part's when the decision asks about it, and only that part changes. Otherwise, when the first
        slot has fewer than ``n`` alternatives, the others follow in random order, so a wide branch
        point compares every single change of the decision it can afford."""
        slots = [i for i, q in enumerate(questions) if self._may_change(q) and self._unsure(q, base[i])]
        if not slots:
            return []
        mine = [i for i in slots if focus is not None and question_part(questions[i]) == focus]
        if mine:
            first = mine[0]
        elif self.cfg.alternative_slot == "uncertain":
            weights = uncertainty_weights(base)
            first = rng.choices(slots, weights=[weights[i] for i in slots])[0]
        else:
            first = rng.choice(slots)
        options = slot_alternatives(questions[first], base[first].text, self.menu_rank)
        rng.shuffle(options)
        out = [(first, text) for text in options[:n]]
        if len(out) < n and not mine:
            rest = [i for i in slots if i != first]
            rng.shuffle(rest)
            for j in rest:
                options = slot_alternatives(questions[j], base[j].text, self.menu_rank)
                rng.shuffle(options)
                out += [(j, text) for text in options[: n - len(out)]]
                if len(out) >= n:
                    break
        return out

    def _may_change(self, question: str) -> bool:
        """Whether an alternative may change this question's answer (``rollout.milestone_flips``)."""
        return self.cfg.milestone_flips == "all" or not asks_to_act(question) or asks_about_result(question)

    def _unsure(self, question: str, answer: Generation) -> bool:
        """Whether a milestone flip may change this answer (``rollout.flip_below``): the policy gave it
        with probability below that. Plan slots are not filtered."""
        return (self.cfg.flip_below >= 1.0 or not asks_to_act(question)
                or answer_probability(answer) < self.cfg.flip_below)

    def _leaf(self, path: _Path, index: int, *, state: EpisodeState | None = None, calls: int | None = None,
              probe: bool = False) -> Leaf:
        ep = (state or path.state).finish("policy")
        return Leaf(
            leaf_id=f"{path.tree.tree_id}@{index}", tree_id=path.tree.tree_id, task_id=ep.task_id,
            benchmark=ep.benchmark, node_path=list(path.node_path), correct=ep.correct, score=float(ep.score),
            cost=float(ep.cost), makespan_s=float(ep.makespan_s), n_calls_path=path.calls if calls is None else calls,
            budget_failure=ep.budget_failure or "", answer=ep.answer[:500], probe=probe,
        )

    async def _probe(self, path: _Path, node: DecisionNode) -> list[tuple[EpisodeState, int]]:
        """``rollout.probes`` episodes from ``path`` (a child of a branch point, before its
        decision): ``node``'s decision applied — a plan executed — then finished by the hand-written
        ``rollout.continuation``; each a leaf that ends at ``node``. Probe ``d`` of every child of one
        branch point draws the same execution noise (the children share their noise, and
        ``probe<d>`` extends it alike), so what separates the children's probes is what their
        decisions changed; the probes of one child differ in the noise of its own plan too. Returns
        each probe's finished episode and its own executions (the caller makes them leaves)."""
        rule = make_handwritten(self.cfg.continuation, [s.name for s in path.state.specs],
                                seed=stable_seed(node.parent_id or node.node_id))
        finish = rule if self._policy_plans is None else _PolicyRouted(rule, self._policy_plans)
        start = len(path.state.milestones)
        ends: list[tuple[EpisodeState, int]] = []
        for d in range(self.cfg.probes):
            st = path.state.fork(f"probe{d}")
            if node.kind == "milestone":
                st.apply_milestone(node.completion)
            else:
                await st.act(st.apply_plan(node.completion), path.pool, node.completion)
            await play_out(st, finish, path.pool)
            ends.append((st, sum(len(rec.results) for rec in st.milestones[start:])))  # this probe's own executions
        return ends


class _PolicyRouted(Orchestrator):
    """A probe's continuation under ``rollout.probe_routing: policy``: the rule's milestones, the
    policy's greedy plans (:class:`_PolicyPlans`)."""

    def __init__(self, rule: Orchestrator, plans: _PolicyPlans) -> None:
        self.rule, self.plans, self.name = rule, plans, rule.name

    async def decide(self, obs: Any, kind: DecisionType) -> str:
        return await (self.rule.decide(obs, kind) if kind == "milestone" else self.plans.plan(obs))


class _PolicyPlans:
    """Plans as the policy makes them when it decodes greedily, for probes (``rollout.probe_routing:
    policy``): each distinct question (a plan slot's, or a whole plan prompt) is generated once per
    rollout — one round, one set of weights — batched with the questions other probes are waiting
    on at the same time, and cached; thousands of probes then cost a few hundred generations."""

    def __init__(self, rollout: TreeRollout) -> None:
        from e3orch.policy.orchestrator import DecodeSettings, MicroBatcher

        self.rollout = rollout
        self.batcher = MicroBatcher(rollout.backend, DecodeSettings(
            temperature=0.0, max_new_tokens=rollout.max_new_tokens, max_prompt_tokens=rollout.max_prompt_tokens,
            prompt_style=rollout.prompt_style))
        self.cache: dict[str, asyncio.Future[str]] = {}

    async def _generate(self, question: str) -> str:
        return (await self.batcher.generate(question, "plan", temperature=0.0)).text

    def _ask(self, question: str) -> asyncio.Future[str]:
        if question not in self.cache:
            self.cache[question] = asyncio.ensure_future(self._generate(question))
        return self.cache[question]

    async def plan(self, obs: Any) -> str:
        r = self.rollout
        questions = sub_prompts(obs, "plan", r.prompt_style)
        if questions is None:
            return await self._ask(render_prompt(obs, "plan", count_tokens=r.backend.count_tokens,
                                                 max_tokens=r.max_prompt_tokens, style=r.prompt_style))
        answers = await asyncio.gather(*(self._ask(q) for q in questions))
        return join_answers(obs, list(answers), "plan")


def _look(parent: _Path, j: int, lookahead: int) -> int:
    """Branch points the ``j``-th child of a branching ``parent`` may still branch at off the spine:
    the spine's first child goes on as the spine, its alternatives get ``lookahead``, and a child
    of a path already off the spine gets one fewer than its parent had."""
    if parent.spine:
        return 0 if j == 0 else lookahead
    return max(0, parent.look - 1)


def uncertainty_weights(answers: Sequence[Generation]) -> list[float]:
    """Per slot, 1 - the policy's probability of the answer it gave there (its completion's
    log-probs summed): a slot the policy answered with probability 0.99 is drawn 50 times less
    often than one it answered with probability 0.5. A floor keeps every weight positive."""
    return [max(1.0 - answer_probability(g), 1e-6) for g in answers]


def answer_probability(answer: Generation) -> float:
    """The policy's probability of an answer it gave: its completion's log-probs summed."""
    return math.exp(sum(answer.logprobs))


def _combine(obs: Any, kind: str, questions: list[str] | None, gens: list[Generation]) -> Generation:
    """One decision's generation: ``gens[0]``, or (factored) the decision joined from its
    questions' answers, their tokens and log-probs concatenated in question order."""
    if questions is None:
        return gens[0]
    return Generation(join_answers(obs, [g.text for g in gens], kind),  # type: ignore[arg-type]
                      [x for g in gens for x in g.token_ids],
                      [x for g in gens for x in g.logprobs], sum(g.prompt_tokens for g in gens),
                      all(g.finished for g in gens))


def _distinct(samples: list[tuple[Generation, list[int]]]) -> list[tuple[Generation, list[int]]]:
    """The samples whose completion no earlier sample already made, in order (the first is kept)."""
    seen: set[str] = set()
    out = []
    for g, lengths in samples:
        if g.text not in seen:
            seen.add(g.text)
            out.append((g, lengths))
    return out



def rollout_shares(backend: PolicyBackend, params: Any, tasks: Sequence[Task], specs: Sequence[ExecutorSpec], *,
                   round_id: int = 0, seed: int = 0, workers: PolicyWorkers | None = None,
                   weights: dict[str, Any] | None = None) -> RolloutResult:
    """The round's tree rollouts of ``tasks`` (``rollout`` params), in this process with ``backend``
    or split by task across ``workers`` (``policy.workers``; their policies given ``weights`` first):
    every tree grows as it would in one process (its pool, noise and alternatives are keyed by the
    task), each share sampling from its own stream."""
    if workers is None:
        return _rollout_share(backend, list(tasks), 0, params, specs, round_id, seed)
    return RolloutResult.merge(workers.map_shares(_rollout_share, backend, tasks, params, specs, round_id, seed,
                                                  weights=weights))


def _rollout_share(backend: PolicyBackend, tasks: list[Task], index: int, params: Any, specs: Sequence[ExecutorSpec],
                   round_id: int, seed: int) -> RolloutResult:
    """Share ``index`` of :func:`rollout_shares` (share 0 keeps the stream a single process has)."""
    return TreeRollout.from_params(backend, params).run(tasks, specs, round_id=round_id, seed=seed, stream=index)
