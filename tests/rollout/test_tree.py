"""Tree rollouts: shared histories execute once, same seed → same tree, valid records."""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence

import polars as pl
import pytest
from conftest import REPO, sampled_rollout

from e3orch.config import EngineConfig
from e3orch.data.sim import generate_split
from e3orch.executors.base import load_pool_specs
from e3orch.executors.simulated import SimulatedExecutor
from e3orch.policy.backends.base import Generation, PolicyBackend
from e3orch.policy.prompts import asks_about_result, question_part
from e3orch.rollout.records import LEAF_SCHEMA, NODE_SCHEMA, leaves_frame, nodes_frame
from e3orch.rollout.tree import TreeRollout


class PromptRulePolicy(PolicyBackend):
    """A stochastic rule policy that reads only the prompt text: next unsolved part, random card.
    It makes every decision the tree machinery has to handle, without an LM in the loop."""

    name = "prompt-rules"

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def score(self, prompts: Sequence[str], completions: Sequence[str]) -> list[list[float]]:
        return [[0.0] for _ in prompts]

    def generate(self, prompts, *, n=1, temperature=1.0, top_p=1.0, max_new_tokens=64, seed=None, min_new_tokens=0):  # type: ignore[no-untyped-def]
        rng = random.Random(seed)
        out = []
        for p in prompts:
            if p.rstrip().endswith("### decide: milestone"):
                final = re.search(r"result of (P\d+)", p).group(1)
                status = re.search(r"### status: (.*)", p)
                done = set(re.findall(r"(P\d+) ", status.group(1) + " ")) if status else set()
                parts = re.findall(r"^(P\d+):", p, re.M)
                todo = [x for x in parts if x not in done]
                text = f"ANSWER: {final}" if final in done or not todo else f"MILESTONE: Solve {todo[0]}"
            else:
                part = re.search(r"plan for Solve (P\d+)", p).group(1)
                n_cards = len(re.findall(r"^E\d+ ", p, re.M))
                card = 1 if temperature == 0 else rng.randint(1, n_cards)  # greedy: always the first card
                text = f"S1 | E{card} | - | Solve {part}."
            out.append([Generation(text, [1, 2], [-0.5, -0.5], 0, True)])
        return out


def _run(seed: int, counter: list[int] | None = None, **options):  # type: ignore[no-untyped-def]
    tasks = [t for t in generate_split(0, "train", 2) if t.domain in ("multihop", "factcheck")]
    specs = load_pool_specs(REPO / "configs/executors/default.yaml")
    cfg = sampled_rollout(**{"branch_milestone": 2, "branch_plan": 2, "branch_start": 1, "branch_stride": 2,
                           "branch_depth": 8, "leaf_budget": 6, "randomize_pool": True, **options})
    if counter is not None:
        original = SimulatedExecutor.simulate

        def counting(self, request):  # type: ignore[no-untyped-def]
            counter[0] += 1
            return original(self, request)

        SimulatedExecutor.simulate = counting  # type: ignore[method-assign]
        try:
            return TreeRollout(PromptRulePolicy(), EngineConfig(), cfg).run(tasks, specs, seed=seed)
        finally:
            SimulatedExecutor.simulate = original  # type: ignore[method-assign]
    return TreeRollout(PromptRulePolicy(), EngineConfig(), cfg).run(tasks, specs, seed=seed)


def test_shared_prefix_executions_run_once() -> None:
    calls = [0]
    res = _run(3, calls)
    assert calls[0] == res.calls_tree == sum(n.n_calls for n in res.nodes)
    assert res.calls_independent > res.calls_tree  # leaves share executed prefixes
    share = res.sharing()
    assert share["sharing_ratio"] < 1.0
    # every leaf's path-calls is the sum of its nodes' calls
    by_id = {n.node_id: n for n in res.nodes}
    for leaf in res.leaves:
        assert leaf.n_calls_path == sum(by_id[x].n_calls for x in leaf.node_path)


def test_tree_shape_respects_budgets() -> None:
    res = _run(1)
    by_tree: dict[str, int] = {}
    for leaf in res.leaves:
        by_tree[leaf.tree_id] = by_tree.get(leaf.tree_id, 0) + 1
    assert all(1 < n <= 6 for n in by_tree.values())
    for n in res.nodes:
        assert n.n_siblings == 1 or (n.depth < 8 and n.depth % 2 == 1)
        assert n.leaves  # every decision has leaves below it
    # siblings share their parent and state: same prompt
    groups: dict[tuple[str, str], set[str]] = {}
    for n in res.nodes:
        groups.setdefault((n.tree_id, n.parent_id), set()).add(n.prompt)
    assert all(len(v) == 1 for v in groups.values())


def test_distinct_siblings_branch_only_where_samples_differ() -> None:
    def sibling_groups(res):  # type: ignore[no-untyped-def]
        groups: dict[str, list] = {}
        for n in res.nodes:
            if n.n_siblings > 1:
                groups.setdefault(n.parent_id + n.tree_id, []).append(n)
        return list(groups.values())

    # the rule policy's milestones are deterministic, its plans pick a random card
    plain = _run(5, branch_stride=1)
    assert any(g[0].kind == "milestone" and len({n.completion for n in g}) == 1 for g in sibling_groups(plain))
    res = _run(5, distinct_siblings=True, branch_stride=1)
    groups = sibling_groups(res)
    assert groups and all(g[0].kind == "plan" for g in groups)
    for g in groups:
        assert len({n.completion for n in g}) == len(g) == g[0].n_siblings
        assert sorted(n.sibling_index for n in g) == list(range(len(g)))
    by_tree: dict[str, int] = {}
    for leaf in res.leaves:
        by_tree[leaf.tree_id] = by_tree.get(leaf.tree_id, 0) + 1
    for tree, n_leaves in by_tree.items():  # every kept extra sibling is one more leaf, within the budget
        assert n_leaves == 1 + sum(len(g) - 1 for g in groups if g[0].tree_id == tree) <= 6
    assert all(n.leaves for n in res.nodes)


def test_greedy_trunk_samples_only_the_extra_siblings() -> None:
    res = _run(5, trunk="greedy", distinct_siblings=True, branch_stride=1)
    plans = [n for n in res.nodes if n.kind == "plan"]
    firsts = [n for n in plans if n.sibling_index == 0]
    extras = [n for n in plans if n.sibling_index > 0]
    assert all(" | E1 | " in n.completion for n in firsts)   # every path's own decision is the greedy one
    assert extras and all(" | E1 | " not in n.completion for n in extras)  # a sample equal to it does not branch
    by_tree: dict[str, int] = {}
    for leaf in res.leaves:
        by_tree[leaf.tree_id] = by_tree.get(leaf.tree_id, 0) + 1
    assert sum(by_tree.values()) == len(by_tree) + len(extras)


def test_spine_branches_only_along_the_first_children() -> None:
    res = _run(5, trunk="greedy", branch_stride=1, branch_depth=30, leaf_budget=40, spine=True)
    by_id = {n.node_id: n for n in res.nodes}
    branched = [n for n in res.nodes if n.n_siblings > 1]
    assert branched and all(_on_spine(by_id, n) for n in branched)
    for tree in {n.tree_id for n in res.nodes}:
        leaves = [x for x in res.leaves if x.tree_id == tree]
        points = {n.parent_id for n in branched if n.tree_id == tree}
        extra = sum(n.n_siblings - 1 for n in branched if n.tree_id == tree and n.sibling_index == 0)
        assert len(leaves) == 1 + extra and len(points) == len([n for n in branched if n.tree_id == tree
                                                                and n.sibling_index == 0])
        # the spine's own leaf: every decision it made from depth 1 on was a branch point
        spine_leaf = next(x for x in leaves if all(by_id[i].sibling_index == 0 for i in x.node_path))
        assert all(by_id[i].n_siblings > 1 for i in spine_leaf.node_path[1:])
    # without the spine the same budget also branches off the first children
    full = _run(5, trunk="greedy", branch_stride=1, branch_depth=30, leaf_budget=40)
    full_by_id = {n.node_id: n for n in full.nodes}
    assert any(not _on_spine(full_by_id, n) for n in full.nodes if n.n_siblings > 1)


@pytest.mark.parametrize("lookahead", [1, 2])
def test_lookahead_lets_each_alternative_branch_at_its_next_branch_points(lookahead: int) -> None:
    from conftest import sibling_rewards

    from e3orch.rewards.score import score_nodes

    res = _run(5, trunk="greedy", branch_stride=1, branch_depth=30, leaf_budget=200, spine=True, lookahead=lookahead)
    by_id = {n.node_id: n for n in res.nodes}
    most = 0
    for leaf in res.leaves:
        path = [by_id[i] for i in leaf.node_path]
        off = next((i for i, n in enumerate(path) if n.sibling_index), None)  # where it left the spine
        if off is not None:  # below the alternative: at most `lookahead` more branch points
            below = sum(n.n_siblings > 1 for n in path[off + 1:])
            assert below <= lookahead
            most = max(most, below)
    assert most == lookahead  # with room in the budget, some alternative used all of them
    # every decision has a greedy continuation, and the scores take the best through the branches
    cfg = sibling_rewards(estimator="branch", normalize_std=False)
    greedy = score_nodes(nodes_frame(res.nodes), leaves_frame(res.leaves), cfg)["advantage"]
    best = score_nodes(nodes_frame(res.nodes), leaves_frame(res.leaves), cfg, lookahead=lookahead)["advantage"]
    assert greedy.len() == best.len() == len(res.nodes) and (greedy != best).any()


def test_lookahead_needs_the_spine() -> None:
    from e3orch.config import ConfigError, parse_params

    own = {"continuation": "policy", "lookahead": 1}  # a policy continuation: a hand-written one never branches again
    with pytest.raises(ConfigError, match="rollout.lookahead: needs rollout.spine"):
        parse_params({"rollout": {**own, "spine": False}})
    with pytest.raises(ConfigError, match="rollout.lookahead: must be 0 with a hand-written rollout.continuation"):
        parse_params({"rollout": {"lookahead": 1}})
    with pytest.raises(ConfigError, match="rollout.lookahead: needs rewards.estimator: branch or branch_first"):
        parse_params({"rollout": own, "rewards": {"estimator": "sibling"}})
    assert parse_params({"rollout": own}).rollout.lookahead == 1


def _on_spine(by_id, n) -> bool:  # type: ignore[no-untyped-def]
    """Whether every decision above ``n`` (``by_id``: the tree's nodes by id) was its branch point's first child."""
    while n.parent_id:
        n = by_id[n.parent_id]
        if n.sibling_index:
            return False
    return True


def test_shared_noise_gives_identical_decisions_identical_outcomes() -> None:
    # milestone siblings repeat one decision and every plan is greedy: all paths of a tree decide alike
    def outcomes(res):  # type: ignore[no-untyped-def]
        by_tree: dict[str, set[tuple[bool, float, str]]] = {}
        for leaf in res.leaves:
            by_tree.setdefault(leaf.tree_id, set()).add((leaf.correct, round(leaf.cost, 9), leaf.answer))
        assert any(n.n_siblings > 1 for n in res.nodes) and len(res.leaves) > len(by_tree)
        return by_tree

    own = outcomes(_run(5, trunk="greedy", branch_plan=1, branch_stride=1))
    assert any(len(v) > 1 for v in own.values())  # own noise: alike decisions, different executions
    shared = outcomes(_run(5, trunk="greedy", branch_plan=1, branch_stride=1, shared_noise=True))
    assert all(len(v) == 1 for v in shared.values())  # common random numbers: the same results


def test_same_seed_same_tree_and_records_validate() -> None:
    a, b = _run(7), _run(7)
    fa, fb = nodes_frame(a.nodes), nodes_frame(b.nodes)
    assert fa.equals(fb)
    assert leaves_frame(a.leaves).equals(leaves_frame(b.leaves))
    NODE_SCHEMA.validate(fa)
    LEAF_SCHEMA.validate(leaves_frame(a.leaves))
    assert not nodes_frame(_run(8).nodes).equals(fa)
    bad = fa.with_columns(pl.lit("nonsense").alias("kind"))
    try:
        NODE_SCHEMA.validate(bad)
        raise AssertionError("a bad kind must fail validation")
    except Exception as exc:  # pandera SchemaError
        assert "kind" in str(exc)


@pytest.mark.parametrize("share", [0.0, 0.5, 1.0])
def test_as_is_share_keeps_that_share_of_tasks_on_the_training_pool(share: float) -> None:
    tasks = generate_split(0, "train", 16, domains=("multihop",))
    specs = load_pool_specs(REPO / "configs/executors/default.yaml")
    cfg = sampled_rollout(branch_milestone=1, branch_plan=1, leaf_budget=1, randomize_pool=True, as_is_share=share,
                        generated_pool_share=0.5)
    res = TreeRollout(PromptRulePolicy(), EngineConfig(), cfg).run(tasks, specs, seed=2)
    training = [s.name for s in specs]
    as_is = [tid for tid, pool in res.trees.items() if [c["name"] for c in pool] == training]
    assert len(res.trees) == 16
    if share == 0.0:  # every pool renamed: a variant or a generated pool
        assert not as_is
    elif share == 1.0:
        assert len(as_is) == 16
    else:
        assert 0 < len(as_is) < 16
    # every other task's pool is a renamed variant or a generated pool
    others = [pool for tid, pool in res.trees.items() if tid not in as_is]
    assert all(not {c["name"] for c in pool} & set(training) for pool in others)


class FactoredRulePolicy(PromptRulePolicy):
    """Reads the compact milestone prompt (every open part at once, then the answer) and answers a
    plan slot's question with rank #1 when greedy and a random rank when sampled. A slot's answer
    has as many tokens as its part's number (P3: three), so the records show which is which."""

    def generate(self, prompts, *, n=1, temperature=1.0, top_p=1.0, max_new_tokens=64, seed=None, min_new_tokens=0):  # type: ignore[no-untyped-def]
        rng = random.Random(seed)
        out = []
        for p in prompts:
            if p.rstrip().endswith("### decide: milestone"):
                open_ = re.findall(r"^(P\d+) .*: open$", p, re.M)
                final = re.search(r"### final: (P\d+)", p).group(1)
                text, ids = (f"MILESTONE: Solve {', '.join(open_)}" if open_ else f"ANSWER: {final}"), [1]
            else:
                assert len(re.findall(r"^### S\d+ ", p, re.M)) == 1, p  # one slot per question
                part = int(re.search(r"plan for Solve P(\d+)", p).group(1))
                ranks = len(re.findall(r"#\d+ ", p))
                text, ids = f"S1 | #{1 if temperature == 0 else rng.randint(1, ranks)} | -", [100 + part] * part
            out.append([Generation(text, ids, [-0.25] * len(ids), 0, True)])
        return out


def test_factored_style_asks_a_plan_slot_by_slot_and_records_every_slot() -> None:
    tasks = [t for t in generate_split(0, "train", 2) if t.domain in ("factcheck", "research")]
    specs = load_pool_specs(REPO / "configs/executors/default.yaml")
    cfg = sampled_rollout(branch_plan=2, branch_start=1, branch_stride=2, branch_depth=8, leaf_budget=6, randomize_pool=True)
    res = TreeRollout(FactoredRulePolicy(), EngineConfig(), cfg, prompt_style="factored").run(tasks, specs, seed=3)
    plans = [n for n in res.nodes if n.kind == "plan"]
    assert any(len(n.sub_prompts) >= 3 for n in plans) and any(n.n_siblings > 1 for n in plans)
    for n in plans:
        parts = [int(k) for k in re.findall(r"plan for Solve P(\d+)", "".join(n.sub_prompts))]
        assert len(parts) == len(n.sub_prompts) == n.n_calls == len(n.completion.splitlines())
        assert n.sub_lengths == parts and n.token_ids == [100 + k for k in parts for _ in range(k)]
        assert [ln.split(" | ")[0] for ln in n.completion.splitlines()] == [f"S{k + 1}" for k in range(len(parts))]
        assert not n.defects
    assert all(not n.sub_prompts and not n.sub_lengths and n.token_ids == [1] for n in res.nodes if n.kind == "milestone")
    NODE_SCHEMA.validate(nodes_frame(res.nodes))


class ScoringFactoredPolicy(FactoredRulePolicy):
    """:class:`FactoredRulePolicy` whose forced answers are recognisable: ``#r`` encodes as the one
    token 200 + r and scores log-prob -r."""

    def completion_ids(self, completion: str) -> list[int]:
        return [200 + int(re.search(r"#(\d+)", completion).group(1))]

    def score(self, prompts: Sequence[str], completions: Sequence[str]) -> list[list[float]]:
        return [[-float(self.completion_ids(c)[0] - 200)] for c in completions]


def test_slot_alternatives_send_one_slot_to_each_other_menu_executor() -> None:
    """Each alternative changes one slot to another card of its menu: the drawn slot's other cards
    first, and only when it has fewer than the branch point wants, other slots' (one change each)."""
    tasks = [t for t in generate_split(0, "train", 2) if t.domain in ("factcheck", "research")]
    specs = load_pool_specs(REPO / "configs/executors/default.yaml")
    cfg = sampled_rollout(branch_plan=3, branch_start=1, branch_stride=2, branch_depth=8, leaf_budget=9,
                        randomize_pool=True, slot_alternatives=True)
    res = TreeRollout(ScoringFactoredPolicy(), EngineConfig(), cfg, prompt_style="factored").run(tasks, specs, seed=5)
    groups: dict[str, list] = {}
    for n in res.nodes:
        if n.kind == "plan" and n.n_siblings > 1:
            groups.setdefault(n.parent_id, []).append(n)
    assert groups
    for sibs in groups.values():
        sibs.sort(key=lambda n: n.sibling_index)
        drawn, *alts = sibs
        assert len(sibs) == drawn.n_siblings <= 3 and alts
        ranks = set()
        for alt in alts:
            assert alt.sub_prompts == drawn.sub_prompts
            changed = [k for k, (a, b) in enumerate(zip(alt.completion.splitlines(), drawn.completion.splitlines()))
                       if a != b]
            assert len(changed) == 1  # one slot, the same one for every sibling of the group
            k = changed[0]
            r = int(re.search(r"#(\d+)", alt.completion.splitlines()[k]).group(1))
            ranks.add((k, r))
            # its tokens and log-probs are the policy's score of the forced answer; the others' as drawn
            start = sum(alt.sub_lengths[:k])
            assert alt.token_ids[start:start + 1] == [200 + r] and alt.logprobs[start:start + 1] == [-float(r)]
            assert alt.sub_lengths[:k] == drawn.sub_lengths[:k] and alt.sub_lengths[k] == 1
        assert len(ranks) == len(alts)  # distinct changes
        slots = [k for k, _ in ranks]
        first = slots[0]
        # the first slot's alternatives come first; a second slot only once the first has none left
        assert slots == sorted(slots, key=lambda k: k != first)
        for k, r in ranks:
            assert int(re.search(r"#(\d+)", drawn.completion.splitlines()[k]).group(1)) != r
    assert all(len([lf for lf in res.leaves if lf.tree_id == t]) <= 9 for t in {lf.tree_id for lf in res.leaves})
    NODE_SCHEMA.validate(nodes_frame(res.nodes))


class PerPartRulePolicy(ScoringFactoredPolicy):
    """:class:`ScoringFactoredPolicy` that also answers ``per_part`` milestone questions: ``yes``
    for a part not yet solved or solved with confidence below 0.6 (greedy), a coin flip when
    sampled. ``yes`` encodes as token 301, ``no`` as 302; forced answers score -1."""

    def completion_ids(self, completion: str) -> list[int]:
        if completion in ("yes", "no"):
            return [301 if completion == "yes" else 302]
        return super().completion_ids(completion)

    def score(self, prompts: Sequence[str], completions: Sequence[str]) -> list[list[float]]:
        return [[-1.0] if c in ("yes", "no") else s for c, s in zip(completions, super().score(prompts, completions))]

    def generate(self, prompts, *, n=1, temperature=1.0, top_p=1.0, max_new_tokens=64, seed=None, min_new_tokens=0):  # type: ignore[no-untyped-def]
        rng = random.Random(seed)
        out = []
        for p in prompts:
            m = re.search(r"^### part: P\d+ [^:]*: (\S+)", p, re.M)
            if m is None:
                out += super().generate([p], temperature=temperature, seed=rng.randrange(2**31))
                continue
            state = m.group(1)
            low = state in ("open", "failed") or float(state) < 0.6
            yes = low if temperature == 0 else rng.random() < 0.5
            out.append([Generation("yes" if yes else "no", [301 if yes else 302], [-0.5], 0, True)])
        return out


def test_per_part_milestones_ask_each_part_and_alternatives_flip_one() -> None:
    from e3orch.policy.prompts import sub_prompts

    tasks = [t for t in generate_split(0, "train", 2) if t.domain in ("factcheck", "research")]
    specs = load_pool_specs(REPO / "configs/executors/default.yaml")
    cfg = sampled_rollout(branch_milestone=3, branch_plan=2, branch_start=1, branch_stride=1, branch_depth=8,
                        leaf_budget=9, randomize_pool=True, slot_alternatives=True)
    res = TreeRollout(PerPartRulePolicy(), EngineConfig(max_part_attempts=3), cfg, prompt_style="per_part").run(
        tasks, specs, seed=7)
    miles = [n for n in res.nodes if n.kind == "milestone"]
    asked = [n for n in miles if n.sub_prompts]
    assert asked and any(len(n.sub_prompts) >= 3 for n in asked)
    for n in asked:
        assert all(q.rstrip().split("act on ")[-1].startswith("P") for q in n.sub_prompts)
        assert n.sub_lengths == [1] * len(n.sub_prompts) and set(n.token_ids) <= {301, 302}
        said = [f"P{q.rstrip().rsplit('P', 1)[1]}" for q, t in zip(n.sub_prompts, n.token_ids) if t == 301]
        assert n.completion == (f"MILESTONE: Solve {', '.join(said)}" if said else n.completion)
        assert said or n.completion.startswith("ANSWER: ")
    # a forced milestone (nothing left to ask) never branches and trains nothing
    assert all(n.n_siblings == 1 and not n.token_ids for n in miles if not n.sub_prompts)
    groups: dict[str, list] = {}
    for n in asked:
        if n.n_siblings > 1:
            groups.setdefault(n.parent_id, []).append(n)
    assert groups
    for sibs in groups.values():
        sibs.sort(key=lambda n: n.sibling_index)
        drawn, *alts = sibs
        # yes or no: one alternative per part, so a second alternative flips another part
        assert 1 <= len(alts) <= min(2, len(drawn.sub_prompts))
        parts = set()
        for alt in alts:
            flipped = [k for k, (a, b) in enumerate(zip(alt.token_ids, drawn.token_ids)) if a != b]
            assert len(flipped) == 1 and alt.logprobs[flipped[0]] == -1.0
            parts.add(flipped[0])
        assert len(parts) == len(alts)
    # paths of one tree that branch at the same step draw their flips independently (they shared one draw)
    same_step: dict[tuple[str, int, int], set[int]] = {}
    for sibs in groups.values():
        drawn, alt, *_ = sorted(sibs, key=lambda n: n.sibling_index)
        k = next(k for k, (a, b) in enumerate(zip(alt.token_ids, drawn.token_ids)) if a != b)
        same_step.setdefault((drawn.tree_id, drawn.depth, len(drawn.sub_prompts)), set()).add(k)
    assert any(len(ks) > 1 for ks in same_step.values())
    assert sub_prompts is not None
    NODE_SCHEMA.validate(nodes_frame(res.nodes))


def _per_part_spine(policy: PolicyBackend, **options):  # type: ignore[no-untyped-def]
    """A greedy spine with slot alternatives, per_part prompts, on factcheck and research train tasks."""
    tasks = [t for t in generate_split(0, "train", 3) if t.domain in ("factcheck", "research")]
    specs = load_pool_specs(REPO / "configs/executors/default.yaml")
    options = {"branch_milestone": 2, **options}
    cfg = sampled_rollout(branch_stride=1, branch_depth=30, randomize_pool=False,
                        slot_alternatives=True, spine=True, trunk="greedy", **options)
    return TreeRollout(policy, EngineConfig(max_part_attempts=3), cfg, prompt_style="per_part").run(tasks, specs, seed=3)


def _changed_part(drawn, alt) -> str | None:  # type: ignore[no-untyped-def]
    """The part of the one question whose answer ``alt`` changed against its sibling ``drawn``."""
    def answers(n):  # type: ignore[no-untyped-def]
        cuts = [sum(n.sub_lengths[:i]) for i in range(len(n.sub_lengths) + 1)]
        return [n.token_ids[a:b] for a, b in zip(cuts, cuts[1:])]
    changed = [q for q, a, b in zip(drawn.sub_prompts, answers(drawn), answers(alt)) if a != b]
    assert len(changed) == 1
    return question_part(changed[0])


@pytest.mark.parametrize("only", ["any", "milestone"])
def test_lookahead_branches_change_the_part_their_alternative_changed(only: str) -> None:
    res = _per_part_spine(PerPartRulePolicy(), branch_plan=3, branch_start=1, leaf_budget=120, lookahead=1,
                          lookahead_from=only)
    by_id = {n.node_id: n for n in res.nodes}
    groups: dict[tuple[str, str], list] = {}
    for n in res.nodes:
        if n.n_siblings > 1:
            groups.setdefault((n.tree_id, n.parent_id), []).append(n)
    focused, kinds = 0, set()
    for sibs in groups.values():
        drawn, *alts = sorted(sibs, key=lambda n: n.sibling_index)
        if _on_spine(by_id, drawn):
            continue
        up = drawn  # the alternative this lookahead branch point lies below
        while not up.sibling_index:
            up = by_id[up.parent_id]
        first = next(n for n in res.nodes if n.parent_id == up.parent_id and n.tree_id == up.tree_id
                     and n.sibling_index == 0)
        part = _changed_part(first, up)
        kinds.add(up.kind)
        asked = [question_part(q) for q in drawn.sub_prompts]
        for alt in alts:
            if part in asked:
                assert _changed_part(drawn, alt) == part
                focused += 1
    assert focused >= 5
    # lookahead_from milestone: only milestone alternatives branch again (at their plan)
    assert kinds == ({"milestone", "plan"} if only == "any" else {"milestone"})


def test_uncertainty_weights_are_one_minus_the_answer_probability() -> None:
    from e3orch.rollout.tree import uncertainty_weights

    gens = [Generation("yes", [301], [math.log(0.5)], 0, True), Generation("S1 | #2 | -", [202, 9], [math.log(0.9), math.log(0.5)], 0, True),
            Generation("no", [302], [0.0], 0, True)]
    assert uncertainty_weights(gens) == pytest.approx([0.5, 0.55, 1e-6])


class UnsurePerPartPolicy(PerPartRulePolicy):
    """:class:`PerPartRulePolicy` that is sure (log-prob 0) of its answer for every part except one
    solved with a confidence near its threshold (0.5 to 0.7), where its answer has probability 0.5."""

    def generate(self, prompts, *, n=1, temperature=1.0, top_p=1.0, max_new_tokens=64, seed=None, min_new_tokens=0):  # type: ignore[no-untyped-def]
        out = super().generate(prompts, n=n, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
                               seed=seed, min_new_tokens=min_new_tokens)
        for p, gens in zip(prompts, out):
            if gens[0].text in ("yes", "no"):
                lp = math.log(0.5) if _unsure(_part_state(p)) else 0.0
                gens[0] = Generation(gens[0].text, gens[0].token_ids, [lp], 0, True)
        return out


def _part_state(question: str) -> str:
    m = re.search(r"^### part: P\d+ [^:]*: (\S+)", question, re.M)
    assert m is not None
    return m.group(1)


def _unsure(state: str) -> bool:
    return state not in ("open", "failed") and 0.5 <= float(state) < 0.7


@pytest.mark.parametrize("how", ["random", "uncertain"])
def test_uncertain_alternatives_flip_the_part_the_policy_is_least_sure_of(how: str) -> None:
    res = _per_part_spine(UnsurePerPartPolicy(), branch_plan=2, branch_start=0, leaf_budget=24, alternative_slot=how)
    flipped_states = []
    groups: dict[tuple[str, str], list] = {}
    for n in res.nodes:
        if n.kind == "milestone" and n.n_siblings > 1:
            groups.setdefault((n.tree_id, n.parent_id), []).append(n)
    for sibs in groups.values():
        drawn, alt = sorted(sibs, key=lambda n: n.sibling_index)
        k = next(i for i, (a, b) in enumerate(zip(alt.token_ids, drawn.token_ids)) if a != b)
        unsure_asked = any(_unsure(_part_state(q)) for q in drawn.sub_prompts)
        flipped_states.append((_unsure(_part_state(drawn.sub_prompts[k])), unsure_asked, len(drawn.sub_prompts)))
    mixed = [(f, n) for f, s, n in flipped_states if s and n > 1]
    assert len(mixed) >= 5  # milestones that ask about a part near the threshold and others
    hits = sum(f for f, _ in mixed)
    if how == "uncertain":
        assert hits == len(mixed)  # weight 0.5 against 1e-6: always a part whose answer was a coin flip
    else:
        assert hits < len(mixed)  # drawn uniformly, some flips go to parts the policy was sure of


def test_common_executor_noise_gives_a_part_sent_to_different_executors_one_draw() -> None:
    def executors_per_draw(**options):  # type: ignore[no-untyped-def]
        seen: dict[tuple[str, int], set[str]] = {}
        original = SimulatedExecutor.simulate

        def recording(self, request):  # type: ignore[no-untyped-def]
            seen.setdefault((request.instruction, request.seed), set()).add(self.name)
            return original(self, request)

        SimulatedExecutor.simulate = recording  # type: ignore[method-assign]
        try:
            _run(5, branch_stride=1, shared_noise=True, **options)
        finally:
            SimulatedExecutor.simulate = original  # type: ignore[method-assign]
        return [len(v) for v in seen.values()]

    assert max(executors_per_draw()) == 1  # the executor is part of every subtask's seed
    assert max(executors_per_draw(common_executor_noise=True)) > 1  # siblings' executors share the draw


@pytest.mark.parametrize(("depth", "paths", "kind", "spine", "look", "children"), [
    (0, 1, "milestone", True, 0, 1),   # before branch_start
    (1, 1, "milestone", True, 0, 3),   # a branch point: branch_milestone children
    (2, 1, "milestone", True, 0, 1),   # off the stride
    (3, 3, "milestone", True, 0, 2),   # room for one more path: two children
    (3, 4, "milestone", True, 0, 1),   # the tree is full
    (5, 1, "plan", True, 0, 2),        # branch_plan children
    (6, 1, "milestone", True, 0, 1),   # at branch_depth
    (5, 1, "plan", False, 0, 1),       # spine: off the spine, nothing left to look ahead
    (5, 1, "plan", False, 1, 2),       # ... with a lookahead branch point left
])
def test_branching_follows_start_stride_depth_and_budget(depth: int, paths: int, kind: str, spine: bool, look: int,
                                                         children: int) -> None:
    from e3orch.rollout.tree import _Path, _Tree

    cfg = sampled_rollout(branch_milestone=3, branch_plan=2, branch_start=1, branch_stride=2, branch_depth=6,
                        leaf_budget=4, spine=not spine)  # rollout.spine on for the rows of paths off the spine
    tree = _Tree("t", generate_split(0, "train", 1)[0], [], paths=paths)
    path = _Path(None, None, tree, node_path=["x"] * depth, spine=spine, look=look)  # type: ignore[arg-type]
    assert TreeRollout(PromptRulePolicy(), EngineConfig(), cfg).branching(path, kind) == children


def test_probes_finish_each_child_by_the_rule_and_only_the_spine_goes_on() -> None:
    """``rollout.continuation``: every child of a branch point gets ``probes`` leaves — its decision
    applied (a plan executed with the probe's own noise), the episode finished by the rule — that
    end at it; the policy decides only along the spine."""
    res = _per_part_spine(PerPartRulePolicy(), branch_plan=3, branch_start=1, leaf_budget=60, shared_noise=True,
                          common_executor_noise=True, continuation="heuristic", probes=3)
    by_id = {n.node_id: n for n in res.nodes}
    ends: dict[str, list] = {}
    for lf in res.leaves:
        ends.setdefault(lf.node_path[-1], []).append(lf)
    children = [n for n in res.nodes if n.n_siblings > 1]
    assert children and any(n.sibling_index for n in children)
    for n in children:
        own = ends.get(n.node_id, [])
        probes = [lf for lf in own if lf.probe]
        assert len(probes) == 3
        # an alternative ends at its probes; the spine's child may also end the policy's own episode there
        assert len(own) == 3 or (n.sibling_index == 0 and len(own) == 4)
    # below an alternative the policy made no decision: every decision's ancestors are first children
    for n in res.nodes:
        assert _on_spine(by_id, by_id[n.parent_id]) if n.parent_id else True
    assert all(lf.node_path[-1] in {c.node_id for c in children} for lf in res.leaves if lf.probe)
    LEAF_SCHEMA.validate(leaves_frame(res.leaves))
    # same seed, same probes
    again = _per_part_spine(PerPartRulePolicy(), branch_plan=3, branch_start=1, leaf_budget=60, shared_noise=True,
                            common_executor_noise=True, continuation="heuristic", probes=3)
    assert [(lf.leaf_id, lf.correct, lf.cost) for lf in again.leaves] == [(lf.leaf_id, lf.correct, lf.cost) for lf in res.leaves]


def test_the_probes_of_a_branch_points_children_share_their_noise() -> None:
    """Probe d of every child draws the same execution noise: two children in the same state get
    the same probes, one per draw, and the draws differ from one another."""
    import asyncio

    from e3orch.executors.base import build_pool
    from e3orch.orchestration.episode import EpisodeState
    from e3orch.rollout.records import DecisionNode
    from e3orch.rollout.tree import _Path, _Tree

    tasks = [t for t in generate_split(0, "train", 6) if t.domain == "research"]
    specs = load_pool_specs(REPO / "configs/executors/default.yaml")
    cfg = sampled_rollout(spine=True, shared_noise=True, common_executor_noise=True, continuation="heuristic", probes=6)
    roll = TreeRollout(PerPartRulePolicy(), EngineConfig(max_part_attempts=3), cfg, prompt_style="per_part")
    pool = build_pool(specs)
    outcomes = []
    for task in tasks:
        state = EpisodeState.start(task, pool, EngineConfig(max_part_attempts=3), seed=11, seed_by_executor=False)
        node = DecisionNode("n", "t", task.task_id, task.benchmark, "", "milestone", 0, 0, 2, "p", "c", [], [], True, [])
        runs = []
        for branch in range(2):  # two siblings' forks (shared noise: the same branch suffix)
            path = _Path(state.fork(f"1.{branch}", shared_noise=True), pool, _Tree("t", task, specs))
            ends = asyncio.run(roll._probe(path, node))
            runs.append([(ep.correct, ep.cost) for ep in (st.finish() for st, _ in ends)])
        assert runs[0] == runs[1] and len(runs[0]) == 6
        outcomes.append(runs[0])
    assert any(len(set(run)) > 1 for run in outcomes)  # each probe its own draw


class CountingPerPartPolicy(PerPartRulePolicy):
    """:class:`PerPartRulePolicy` that records every greedy question it is asked."""

    def __init__(self) -> None:
        self.greedy: list[str] = []

    def generate(self, prompts, *, n=1, temperature=1.0, top_p=1.0, max_new_tokens=64, seed=None, min_new_tokens=0,  # type: ignore[no-untyped-def]
                 row_seeds=None):
        if temperature == 0:
            self.greedy += list(prompts)
        return super().generate(prompts, n=n, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
                                seed=seed, min_new_tokens=min_new_tokens)


def test_probes_routed_by_the_policy_ask_each_question_once_and_route_as_it_does() -> None:
    """``rollout.probe_routing: policy``: the probes' plans are the policy's greedy plans (this
    policy's greedy answer is ``#1``, the cheapest card at least fair), each distinct question
    generated once per rollout; milestones stay the rule's."""
    import asyncio

    from e3orch.executors.base import build_pool
    from e3orch.orchestration.episode import EpisodeState
    from e3orch.orchestration.handwritten import make_handwritten
    from e3orch.policy.prompts import join_answers, sub_prompts
    from e3orch.rollout.tree import _PolicyPlans

    task = next(t for t in generate_split(0, "train", 3) if t.domain == "research")
    specs = load_pool_specs(REPO / "configs/executors/default.yaml")
    policy = CountingPerPartPolicy()
    roll = TreeRollout(policy, EngineConfig(max_part_attempts=3), sampled_rollout(), prompt_style="per_part")
    plans = _PolicyPlans(roll)
    st = EpisodeState.start(task, build_pool(specs), EngineConfig(max_part_attempts=3))
    rule = make_handwritten("heuristic", [s.name for s in specs])
    st.apply_milestone(asyncio.run(rule.decide(st.observation(), "milestone")))
    obs = st.observation()

    async def twice() -> tuple[str, str]:
        return await plans.plan(obs), await plans.plan(obs)

    first, again = asyncio.run(twice())
    questions = sub_prompts(obs, "plan", "per_part") or []
    assert len(questions) >= 3 and first == again == join_answers(obs, ["S1 | #1 | -"] * len(questions), "plan")
    assert sorted(policy.greedy) == sorted(questions)  # each asked once, the second plan from the cache

    # in a rollout: the same tree with probes routed by the rule or by the policy
    spine_only = CountingPerPartPolicy()
    by_rule = _per_part_spine(spine_only, branch_plan=3, branch_start=1, leaf_budget=40, shared_noise=True,
                              common_executor_noise=True, continuation="heuristic", probes=2)
    counting = CountingPerPartPolicy()
    by_policy = _per_part_spine(counting, branch_plan=3, branch_start=1, leaf_budget=40, shared_noise=True,
                                common_executor_noise=True, continuation="heuristic", probes=2, probe_routing="policy")
    assert [n.completion for n in by_policy.nodes] == [n.completion for n in by_rule.nodes]  # the spine is the policy's
    cost = {lf.leaf_id: lf.cost for lf in by_rule.leaves if lf.probe}
    assert any(cost[lf.leaf_id] != lf.cost for lf in by_policy.leaves if lf.probe)  # the probes route otherwise
    # what the probes asked (the spine asks the same in both runs): each question once, far fewer than their plans
    from collections import Counter as _C

    extra = _C(counting.greedy) - _C(spine_only.greedy)
    assert extra and max(extra.values()) == 1
    probe_plans = sum(1 for lf in by_policy.leaves if lf.probe)  # at least one plan a probe
    assert sum(extra.values()) < probe_plans


class DawdlingPerPartPolicy(CountingPerPartPolicy):
    """:class:`CountingPerPartPolicy` whose every generation call takes a random while (the
    policy's probe plans then come back, and the probes waiting on them finish, in another order)."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.rng = random.Random(seed)

    def generate(self, prompts, **kw):  # type: ignore[no-untyped-def]
        import time

        time.sleep(self.rng.uniform(0.0, 0.004))
        return super().generate(prompts, **kw)


def test_leaves_do_not_depend_on_the_order_the_probes_finish_in() -> None:
    """The probes of a step's branch points run concurrently and finish in whatever order their
    generations come back; their leaves are recorded in the children's order, so the same rollout
    writes the same leaves, ids included, however long each generation took."""
    def leaves(policy: PolicyBackend) -> list[tuple]:
        res = _per_part_spine(policy, branch_plan=3, branch_start=1, leaf_budget=40, shared_noise=True,
                              common_executor_noise=True, continuation="heuristic", probes=4, probe_routing="policy")
        return [(lf.leaf_id, tuple(lf.node_path), lf.correct, lf.cost) for lf in res.leaves]

    reference = leaves(CountingPerPartPolicy())
    assert len(reference) > 20
    for seed in range(3):
        assert leaves(DawdlingPerPartPolicy(seed)) == reference


def _changed_questions(res) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    """Per decision kind, the question each alternative changed the answer of (against the drawn sibling)."""
    changed: dict[str, list[str]] = {"milestone": [], "plan": []}
    groups: dict[tuple[str, str], list] = {}
    for n in res.nodes:
        if n.n_siblings > 1:
            groups.setdefault((n.tree_id, n.parent_id), []).append(n)
    for sibs in groups.values():
        drawn, *alts = sorted(sibs, key=lambda n: n.sibling_index)
        by_part = {question_part(q): q for q in drawn.sub_prompts}
        changed[drawn.kind] += [by_part[_changed_part(drawn, alt)] for alt in alts]
    return changed


@pytest.mark.parametrize("flips", ["all", "results"])
def test_milestone_flips_results_flips_only_parts_with_a_result(flips: str) -> None:
    res = _per_part_spine(PerPartRulePolicy(), branch_plan=2, branch_milestone=4, branch_start=0, leaf_budget=60,
                          milestone_flips=flips)
    changed = _changed_questions(res)
    assert len(changed["plan"]) >= 5  # plans still get their alternatives
    results = [asks_about_result(q) for q in changed["milestone"]]
    assert sum(results) >= 5  # repairs (or not) of parts that have a result are compared either way
    if flips == "results":
        assert all(results)
    else:
        assert not all(results)  # and, by default, flips of open parts too


@pytest.mark.parametrize("below", [1.0, 0.99])
def test_flip_below_flips_only_the_parts_the_policy_is_unsure_of(below: float) -> None:
    res = _per_part_spine(UnsurePerPartPolicy(), branch_plan=2, branch_milestone=4, branch_start=0, leaf_budget=60,
                          milestone_flips="results", flip_below=below)
    changed = _changed_questions(res)
    assert len(changed["plan"]) >= 5  # plan slots are never filtered (every plan answer here is sure)
    assert all(asks_about_result(q) for q in changed["milestone"])  # milestone_flips: results still holds
    unsure = [_unsure(_part_state(q)) for q in changed["milestone"]]
    assert sum(unsure) >= 3  # a result near the threshold (answered with probability 0.5) is flipped either way
    if below < 1.0:
        assert all(unsure)  # the results answered with probability 1 are left alone
    else:
        assert not all(unsure)
