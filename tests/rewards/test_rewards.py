"""Exact reward and advantage values on hand-built cases; the sign of every term."""

from __future__ import annotations

import math
import statistics
from typing import get_args

import polars as pl
import pytest
from conftest import sibling_rewards
from hypothesis import given, settings
from hypothesis import strategies as st

from e3orch.config import RewardsConfig
from e3orch.rewards.advantages import (
    ESTIMATOR_AUX,
    ESTIMATORS,
    NodeKey,
    branch_advantages,
    branch_first_advantages,
    get_estimator,
    matched_advantages,
    sibling_advantages,
    sibling_only_advantages,
    tree_mean_advantages,
)
from e3orch.rewards.score import score_nodes
from e3orch.rewards.terms import beta_lcb, completeness, normalised_cost, total_reward
from e3orch.rollout.records import DecisionNode, Leaf, leaves_frame, nodes_frame


def test_beta_lcb_exact_values() -> None:
    # Beta(1,1) prior, 3 successes of 4: a=4, b=2 → mean 2/3, std sqrt(8/(36*7))
    assert beta_lcb([1, 1, 1, 0], 1, 1, 0.0) == pytest.approx(2 / 3)
    assert beta_lcb([1, 1, 1, 0], 1, 1, 0.5) == pytest.approx(2 / 3 - 0.5 * math.sqrt(8 / (36 * 7)))
    assert beta_lcb([], 1, 1, 0.0) == pytest.approx(0.5)  # no evidence: the prior mean


def test_beta_lcb_prefers_more_evidence_at_equal_rate() -> None:
    assert beta_lcb([1] * 8, kappa=0.5) > beta_lcb([1], kappa=0.5)
    assert beta_lcb([1, 0] * 10, kappa=0.5) > beta_lcb([1, 0], kappa=0.5)


def test_cost_is_normalised_per_task_and_subtracted() -> None:
    assert normalised_cost([2.0, 4.0], 3.0) == pytest.approx(1.0)
    assert normalised_cost([20.0, 40.0], 30.0) == pytest.approx(1.0)  # same relative cost, same value
    assert normalised_cost([1.0], 0.0) == 0.0
    # pseudo-leaves at the task's mean: one leaf at twice the mean, with two of them, is (2 + 2) / 3
    assert normalised_cost([6.0], 3.0, prior=2.0) == pytest.approx(4 / 3)
    assert normalised_cost([3.0, 3.0], 3.0, prior=2.0) == pytest.approx(1.0)  # at the mean: unchanged


def test_cost_prior_matches_the_performance_prior_shrinkage() -> None:
    """With prior = alpha + beta and kappa 0, one leaf's success and one leaf's cost move a
    decision's estimates by the same factor, whatever the number of leaves below it."""
    for n in (1, 3, 12):
        perf_step = beta_lcb([1.0] + [0.0] * (n - 1), 1.0, 1.0, kappa=0.0) - beta_lcb([0.0] * n, 1.0, 1.0, kappa=0.0)
        cost_step = normalised_cost([4.0] + [2.0] * (n - 1), 2.0, prior=2.0) - normalised_cost([2.0] * n, 2.0, prior=2.0)
        assert perf_step == pytest.approx(cost_step) == pytest.approx(1 / (n + 2))
    # sign: more cost, less reward (everything else equal)
    assert total_reward(0.5, 2.0, 1.0, 1.0, 0.3, 0.2) < total_reward(0.5, 1.0, 1.0, 1.0, 0.3, 0.2)
    # sign: more performance / completeness, more reward
    assert total_reward(0.6, 1.0, 1.0, 1.0, 0.3, 0.2) > total_reward(0.5, 1.0, 1.0, 1.0, 0.3, 0.2)
    assert total_reward(0.5, 1.0, 1.0, 1.0, 0.3, 0.2) > total_reward(0.5, 1.0, 0.5, 1.0, 0.3, 0.2)
    assert total_reward(0.5, 2.0, 0.5, 1.0, 0.3, 0.2) == pytest.approx(0.5 - 0.6 + 0.1)


@pytest.mark.parametrize(
    "defects,answered,expected",
    [(0, [True, True], 1.0), (1, [True, True], 0.75), (2, [True], 0.5), (3, [True], 0.5),
     (0, [True, False], 0.75), (0, [False], 0.5), (1, [False, False], 0.25)],
)
def test_completeness_table(defects: int, answered: list[bool], expected: float) -> None:
    assert completeness(defects, answered, 0.5) == pytest.approx(expected)


def K(nid: str, parent: str, kind: str = "plan", n: int = 2, tree: str = "t") -> NodeKey:
    return NodeKey(nid, tree, parent, kind, n)


def test_sibling_advantages_exact() -> None:
    keys = [K("a", "r"), K("b", "r"), K("c", "a", n=1)]
    rewards = [1.0, 0.0, 0.4]
    # a, b: siblings (mean 0.5); c has no siblings → same-kind mean in tree (plan: 1.0, 0.0, 0.4 → 0.4667)
    adv = sibling_advantages(keys, rewards, False)
    assert adv == pytest.approx([0.5, -0.5, 0.4 - (1.4 / 3)])
    std = pl.Series(rewards).std(ddof=0)
    assert sibling_advantages(keys, rewards, True) == pytest.approx([a / (std + 1e-6) for a in adv])


def test_lonely_node_gets_zero_and_trees_are_separate() -> None:
    keys = [K("m", "", kind="milestone", n=1), K("p1", "m"), K("p2", "m"), K("x", "", kind="milestone", n=1, tree="u")]
    adv = sibling_advantages(keys, [0.3, 0.9, 0.1, 5.0], False)
    assert adv[0] == 0.0 and adv[3] == 0.0  # only milestone node of its tree
    assert adv[1] == pytest.approx(0.4) and adv[2] == pytest.approx(-0.4)


def test_sibling_only_credits_branch_points_alone() -> None:
    keys = [K("a", "r"), K("b", "r"), K("c", "a", n=1), K("d", "a", n=1, tree="u")]
    rewards = [1.0, 0.0, 0.4, 0.9]
    assert sibling_only_advantages(keys, rewards, False) == pytest.approx([0.5, -0.5, 0.0, 0.0])
    std = pl.Series(rewards[:3]).std(ddof=0)  # the scale is still the whole tree's
    assert sibling_only_advantages(keys, rewards, True) == pytest.approx([0.5 / (std + 1e-6), -0.5 / (std + 1e-6), 0.0, 0.0])
    assert get_estimator("sibling_only") is sibling_only_advantages


def test_tree_mean_estimator_and_registry() -> None:
    keys = [K("a", "r"), K("b", "r"), K("m", "", kind="milestone", n=1)]
    assert tree_mean_advantages(keys, [1.0, 0.0, 3.0], False) == pytest.approx([0.5, -0.5, 0.0])
    assert get_estimator("sibling") is sibling_advantages
    with pytest.raises(ValueError, match="unknown advantage estimator"):
        get_estimator("nope")


def test_params_name_every_registered_estimator_and_what_each_needs() -> None:
    assert set(get_args(RewardsConfig.model_fields["estimator"].annotation)) == set(ESTIMATORS)
    assert ESTIMATOR_AUX == {"sibling": None, "sibling_only": None, "tree_mean": None, "matched": "matched",
                             "branch": "continuation", "branch_first": "continuation"}


@given(st.lists(st.floats(-5, 5, allow_nan=False), min_size=2, max_size=6))
def test_sibling_advantages_sum_to_zero_within_a_group(rewards: list[float]) -> None:
    keys = [K(f"n{i}", "r", n=len(rewards)) for i in range(len(rewards))]
    assert sum(sibling_advantages(keys, rewards, False)) == pytest.approx(0.0, abs=1e-9)


def _node(nid: str, parent: str, kind: str, leaves: list[str], n_sib: int = 1, defects: list[str] | None = None,
          cost: float = 0.0) -> DecisionNode:
    return DecisionNode(nid, "t", "task", "sim/math", parent, kind, 0, 0, n_sib, "p", "c", [1], [-0.1], True,
                        defects or [], 1 if kind == "plan" else 0, cost, leaves)


def test_score_nodes_on_a_hand_built_tree() -> None:
    # root milestone m → two plan siblings p1 (leaf A: correct, cost 1) and p2 (leaf B: wrong, cost 3)
    nodes = [_node("m", "", "milestone", ["A", "B"]), _node("p1", "m", "plan", ["A"], 2, cost=1.0),
             _node("p2", "m", "plan", ["B"], 2, defects=["dangling_dep"], cost=3.0)]
    leaves = [Leaf("A", "t", "task", "sim/math", ["m", "p1"], True, 1.0, 1.0, 1.0, 1, "", "x"),
              Leaf("B", "t", "task", "sim/math", ["m", "p2"], False, 0.0, 3.0, 1.0, 1, "", "y")]
    cfg = sibling_rewards(w_performance=1.0, w_cost=0.3, w_completeness=0.2, prior_alpha=1, prior_beta=1, kappa=0.0,
                        defect_penalty=0.5, normalize_std=False)
    out = score_nodes(nodes_frame(nodes), leaves_frame(leaves), cfg)
    rows = {r["node_id"]: r for r in out.iter_rows(named=True)}
    assert rows["p1"]["performance"] == pytest.approx(2 / 3)   # Beta(2,1)
    assert rows["p2"]["performance"] == pytest.approx(1 / 3)   # Beta(1,2)
    assert rows["p1"]["cost_norm"] == pytest.approx(0.5)       # 1 / mean(1, 3)
    assert rows["p2"]["cost_norm"] == pytest.approx(1.5)
    assert rows["p2"]["completeness"] == pytest.approx(0.75)   # one defect
    r1 = 2 / 3 - 0.3 * 0.5 + 0.2 * 1.0
    r2 = 1 / 3 - 0.3 * 1.5 + 0.2 * 0.75
    assert rows["p1"]["reward"] == pytest.approx(r1)
    assert rows["p1"]["advantage"] == pytest.approx((r1 - r2) / 2)
    assert rows["p2"]["advantage"] == pytest.approx(-(r1 - r2) / 2)
    assert rows["m"]["advantage"] == 0.0
    assert rows["m"]["n_leaves"] == 2
    # positive_only: the better sibling keeps its credit, the worse one's becomes 0
    pos = score_nodes(nodes_frame(nodes), leaves_frame(leaves), cfg.model_copy(update={"positive_only": True}))
    assert dict(zip(pos["node_id"], pos["advantage"])) == pytest.approx({"m": 0.0, "p1": (r1 - r2) / 2, "p2": 0.0})
    # advantage_clip: both advantages cut to the clip (still summing to zero), the rewards untouched
    c = (r1 - r2) / 4
    clipped = score_nodes(nodes_frame(nodes), leaves_frame(leaves), cfg.model_copy(update={"advantage_clip": c}))
    assert dict(zip(clipped["node_id"], clipped["advantage"])) == pytest.approx({"m": 0.0, "p1": c, "p2": -c})
    assert list(clipped["reward"]) == pytest.approx(list(out["reward"]))


def test_advantage_clip_keeps_each_sibling_groups_advantages_summing_to_zero() -> None:
    """Clipped, a group (+0.05, -0.3, +0.25) would sum to -0.05 (+0.05, -0.1, +0.1): the tokens all
    siblings share would be pushed down. Re-centred on the mean, the clipped advantages sum to 0."""
    from e3orch.rewards.score import _clip_zero_sum

    keys = [K("a", "r", n=3), K("b", "r", n=3), K("c", "r", n=3), K("d", "s", n=1)]
    out = _clip_zero_sum([0.05, -0.3, 0.25, 0.0], keys, 0.1)
    shift = (0.05 - 0.1 + 0.1) / 3
    assert out == pytest.approx([0.05 - shift, -0.1 - shift, 0.1 - shift, 0.0])
    assert sum(out[:3]) == pytest.approx(0.0)
    assert _clip_zero_sum([0.0, 0.0, 0.0, 0.0], keys, 0.1) == [0.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("estimator", ["sibling", "matched"])
def test_a_leaf_without_an_answer_costs_completeness_and_no_answer_is_not_a_defect(estimator: str) -> None:
    # the tree above, but leaf B ran out of milestones (no answer) and p2 carries the no_answer mark
    nodes = [_node("m", "", "milestone", ["A", "B"]), _node("p1", "m", "plan", ["A"], 2, cost=1.0),
             _node("p2", "m", "plan", ["B"], 2, defects=["no_answer"], cost=3.0)]
    leaves = [Leaf("A", "t", "task", "sim/math", ["m", "p1"], True, 1.0, 1.0, 1.0, 1, "", "x"),
              Leaf("B", "t", "task", "sim/math", ["m", "p2"], False, 0.0, 3.0, 1.0, 1, "milestone_budget", "")]
    cfg = sibling_rewards(w_performance=1.0, w_cost=0.3, w_completeness=0.2, prior_alpha=1, prior_beta=1, kappa=0.0,
                        defect_penalty=0.5, normalize_std=False, estimator=estimator)
    rows = {r["node_id"]: r for r in score_nodes(nodes_frame(nodes), leaves_frame(leaves), cfg).iter_rows(named=True)}
    assert rows["p2"]["completeness"] == pytest.approx(0.5)   # no defect counted (1.0), no answer (0.0): half each
    assert rows["m"]["completeness"] == pytest.approx(0.75)   # one of its two leaves answered
    r1, r2 = 2 / 3 - 0.3 * 0.5 + 0.2 * 1.0, 1 / 3 - 0.3 * 1.5 + 0.2 * 0.5
    assert rows["p1"]["reward"] == pytest.approx(r1) and rows["p2"]["reward"] == pytest.approx(r2)
    assert rows["m"]["reward"] == pytest.approx(0.5 - 0.3 * 1.0 + 0.2 * 0.75)
    # sibling: half the gap; matched: against the parent's own figures, 0.35 — the same here
    assert rows["p1"]["advantage"] == pytest.approx((r1 - r2) / 2) == pytest.approx(r1 - 0.35)


def test_cost_unit_weighs_every_task_by_the_same_fixed_amount() -> None:
    # two one-task trees, each a plan branch: a saving of 1 on a cheap task (costs 1 and 2) and on a dear one (10 and 11)
    def tree(t: str, lo: float) -> tuple[list[DecisionNode], list[Leaf]]:
        nodes = [_node(f"{t}m", "", "milestone", [f"{t}A", f"{t}B"]), _node(f"{t}p1", f"{t}m", "plan", [f"{t}A"], 2, cost=lo),
                 _node(f"{t}p2", f"{t}m", "plan", [f"{t}B"], 2, cost=lo + 1)]
        leaves = [Leaf(f"{t}{x}", t, t, "sim/math", [f"{t}m", f"{t}p{i}"], True, 1.0, lo + i - 1, 1.0, 1, "", "x")
                  for i, x in ((1, "A"), (2, "B"))]
        for n in nodes:
            n.tree_id = t
        return nodes, leaves
    (n1, l1), (n2, l2) = tree("cheap", 1.0), tree("dear", 10.0)
    base = sibling_rewards(w_cost=0.5, kappa=0.0, normalize_std=False)

    def adv(cfg: RewardsConfig) -> dict[str, float]:
        out = score_nodes(nodes_frame(n1 + n2), leaves_frame(l1 + l2), cfg)
        return dict(zip(out["node_id"], out["advantage"]))
    per_task = adv(base)  # over each task's mean leaf cost: 1/1.5 there, 1/10.5 here
    assert per_task["cheapp1"] == pytest.approx(0.5 * (1 / 1.5) / 2) and per_task["dearp1"] == pytest.approx(0.5 * (1 / 10.5) / 2)
    fixed = adv(base.model_copy(update={"cost_unit": 4.0}))  # over 4 on both: the same saving, the same credit
    assert fixed["cheapp1"] == pytest.approx(0.5 * 0.25 / 2) == pytest.approx(fixed["dearp1"])
    assert fixed["cheapp2"] == pytest.approx(-fixed["cheapp1"])


def _two_leaf_tree(correct_b: bool, cost_b: float, defect_p2: bool) -> tuple[list[DecisionNode], list[Leaf]]:
    # milestone m1 (leaves A, B) → plan siblings p1 (A) and p2 (B); p1 → milestone m2 (A), not branched
    nodes = [_node("m1", "", "milestone", ["A", "B"]), _node("p1", "m1", "plan", ["A"], 2, cost=1.0),
             _node("p2", "m1", "plan", ["B"], 2, defects=["dangling_dep"] if defect_p2 else [], cost=cost_b),
             _node("m2", "p1", "milestone", ["A"])]
    leaves = [Leaf("A", "t", "task", "sim/math", ["m1", "p1", "m2"], True, 1.0, 1.0, 1.0, 1, "", "x"),
              Leaf("B", "t", "task", "sim/math", ["m1", "p2"], correct_b, float(correct_b), cost_b, 1.0, 1, "", "y")]
    return nodes, leaves


def _scored(nodes: list[DecisionNode], leaves: list[Leaf], estimator: str, **kw: float) -> dict[str, float]:
    cfg = sibling_rewards(w_performance=1.0, w_cost=kw.get("w_cost", 0.3), w_completeness=0.2, prior_alpha=1, prior_beta=1,
                        kappa=kw.get("kappa", 0.0), defect_penalty=0.5, estimator=estimator, normalize_std=False)
    out = score_nodes(nodes_frame(nodes), leaves_frame(leaves), cfg)
    return {r["node_id"]: r["advantage"] for r in out.iter_rows(named=True)}


def test_sibling_credits_leaf_counts_where_matched_gives_zero() -> None:
    # every leaf correct, same cost, no defects: nothing any decision did made a difference
    nodes, leaves = _two_leaf_tree(correct_b=True, cost_b=1.0, defect_p2=False)
    sib = _scored(nodes, leaves, "sibling")
    # m1 is judged on 2 leaves (Beta(3,1): 0.75), m2 on 1 (Beta(2,1): 2/3); the kind mean sits between
    assert sib["m1"] == pytest.approx((0.75 - 2 / 3) / 2) and sib["m2"] == pytest.approx(-(0.75 - 2 / 3) / 2)
    assert _scored(nodes, leaves, "matched") == pytest.approx({"m1": 0.0, "p1": 0.0, "p2": 0.0, "m2": 0.0})


def test_matched_advantages_exact() -> None:
    # A correct at cost 1, B wrong at cost 3 with a defect in p2; tree mean cost 2
    nodes, leaves = _two_leaf_tree(correct_b=False, cost_b=3.0, defect_p2=True)
    adv = _scored(nodes, leaves, "matched")
    # p1, p2: baseline = the siblings' mean leaf (score 0.5, cost 2, answered) and mean own defects 0.5, at n = 1:
    # 0.5 - 0.3 * 1 + 0.2 * (0.5 * 0.75 + 0.5) = 0.375
    p1 = 2 / 3 - 0.3 * 0.5 + 0.2 * 1.0
    p2 = 1 / 3 - 0.3 * 1.5 + 0.2 * 0.75
    assert adv["p1"] == pytest.approx(p1 - 0.375) and adv["p2"] == pytest.approx(p2 - 0.375)
    assert adv["p1"] == pytest.approx(-adv["p2"])
    # m1 holds every leaf of the tree: it is its own baseline
    assert adv["m1"] == pytest.approx(0.0)
    # m2 (not branched): the tree's mean leaf at n = 1, milestone defects 0 → 0.5 - 0.3 + 0.2 = 0.4
    assert adv["m2"] == pytest.approx(p1 - 0.4)


def test_matched_needs_baselines() -> None:
    assert get_estimator("matched") is matched_advantages
    with pytest.raises(ValueError, match="one more reward per decision"):
        matched_advantages([K("a", "r")], [1.0], False)


@settings(deadline=None, max_examples=60)  # each example builds and validates two Parquet-schema frames
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["milestone", "plan"]), st.sets(st.integers(0, 5), min_size=1)),
                min_size=1, max_size=10),
       st.booleans(), st.floats(0.1, 5.0))
def test_matched_is_zero_when_every_leaf_is_alike(spec: list[tuple[int, str, set[int]]], correct: bool, cost: float) -> None:
    """Whatever the tree's shape, leaf counts and kappa: if all leaves agree and no decision has a
    defect, no decision made a difference and ``matched`` gives every one exactly 0."""
    parents = [p for p, _, _ in spec]
    nodes = [_node(f"n{i}", f"s{p}", kind, [f"L{x}" for x in sorted(ls)], parents.count(p), cost=cost)
             for i, (p, kind, ls) in enumerate(spec)]
    used = sorted({x for _, _, ls in spec for x in ls})
    leaves = [Leaf(f"L{x}", "t", "task", "sim/math", [], correct, float(correct), cost, 1.0, 1, "", "x") for x in used]
    adv = _scored(nodes, leaves, "matched", kappa=0.5)
    assert all(a == pytest.approx(0.0, abs=1e-12) for a in adv.values())


def _greedy_trunk_tree(a: bool, b: bool, c: bool) -> tuple[list[DecisionNode], list[Leaf]]:
    """m → plans p0 (the trunk, sibling 0) and p1 (an alternative); p0 → milestones q0 (trunk) and
    q1 (alternative). Leaves: A = m p0 q0 (the greedy path), B = m p0 q1, C = m p1."""
    def node(nid: str, parent: str, kind: str, idx: int, n_sib: int, leaves: list[str]) -> DecisionNode:
        return DecisionNode(nid, "t", "task", "sim/math", parent, kind, 0, idx, n_sib, "p", "c", [1], [-0.1], True,
                            [], 1 if kind == "plan" else 0, 1.0, leaves)

    nodes = [node("m", "", "milestone", 0, 1, ["A", "B", "C"]), node("p0", "m", "plan", 0, 2, ["A", "B"]),
             node("p1", "m", "plan", 1, 2, ["C"]), node("q0", "p0", "milestone", 0, 2, ["A"]),
             node("q1", "p0", "milestone", 1, 2, ["B"])]
    leaves = [Leaf(x, "t", "task", "sim/math", path, ok, float(ok), 2.0, 1.0, 1, "", "x")
              for x, path, ok in (("A", ["m", "p0", "q0"], a), ("B", ["m", "p0", "q1"], b), ("C", ["m", "p1"], c))]
    return nodes, leaves


def test_branch_judges_siblings_by_their_continuation() -> None:
    # the greedy path and the alternative plan both succeed; the deviation below p0 (q1) fails
    nodes, leaves = _greedy_trunk_tree(a=True, b=False, c=True)
    branch = _scored(nodes, leaves, "branch")
    # p0 and p1 each lead, greedily, to a correct leaf: no credit either way; q0 beats q1
    assert branch["p0"] == 0.0 and branch["p1"] == 0.0 and branch["m"] == 0.0
    r_ok, r_bad = 2 / 3 - 0.3 + 0.2, 1 / 3 - 0.3 + 0.2  # Beta(2,1) / Beta(1,2) on one leaf, cost_norm 1
    assert branch["q0"] == pytest.approx((r_ok - r_bad) / 2) and branch["q1"] == pytest.approx(-(r_ok - r_bad) / 2)
    # sibling and matched judge p0 by all its leaves, so p0 pays for the deviation below it
    assert _scored(nodes, leaves, "sibling")["p0"] < 0 and _scored(nodes, leaves, "matched")["p0"] < 0
    # the alternative plan is the better decision when the greedy path fails
    nodes, leaves = _greedy_trunk_tree(a=False, b=True, c=True)
    branch = _scored(nodes, leaves, "branch")
    assert branch["p1"] == pytest.approx((r_ok - r_bad) / 2) and branch["p0"] == pytest.approx(-(r_ok - r_bad) / 2)


def test_branch_first_credits_alternatives_against_the_first_child() -> None:
    r_ok, r_bad = 2 / 3 - 0.3 + 0.2, 1 / 3 - 0.3 + 0.2
    nodes, leaves = _greedy_trunk_tree(a=False, b=True, c=True)
    first = _scored(nodes, leaves, "branch_first")
    # the greedy plan p0 gets 0; the alternative p1 beat its greedy continuation by a whole leaf
    assert first["p0"] == 0.0 and first["p1"] == pytest.approx(r_ok - r_bad) and first["m"] == 0.0
    assert first["q0"] == 0.0 and first["q1"] == pytest.approx(r_ok - r_bad)
    nodes, leaves = _greedy_trunk_tree(a=True, b=False, c=True)
    first = _scored(nodes, leaves, "branch_first")
    assert first["p1"] == 0.0 and first["q1"] == pytest.approx(r_bad - r_ok)


def test_advantage_clip_leaves_branch_firsts_first_child_at_zero() -> None:
    """Re-centred like a zero-sum group, a clipped branch_first group would be branch's: the first
    child raised by the alternative's loss. It is clipped only."""
    nodes, leaves = _greedy_trunk_tree(a=True, b=False, c=True)
    r_ok, r_bad = 2 / 3 - 0.3 + 0.2, 1 / 3 - 0.3 + 0.2
    cfg = sibling_rewards(w_performance=1.0, w_cost=0.3, w_completeness=0.2, prior_alpha=1, prior_beta=1, kappa=0.0,
                          defect_penalty=0.5, estimator="branch_first", normalize_std=False, advantage_clip=0.1)
    out = score_nodes(nodes_frame(nodes), leaves_frame(leaves), cfg)
    adv = dict(zip(out["node_id"], out["advantage"]))
    assert r_ok - r_bad > 0.1 and adv == pytest.approx({"m": 0.0, "p0": 0.0, "p1": 0.0, "q0": 0.0, "q1": -0.1})
    branch = score_nodes(nodes_frame(nodes), leaves_frame(leaves), cfg.model_copy(update={"estimator": "branch"}))
    assert dict(zip(branch["node_id"], branch["advantage"]))["q0"] == pytest.approx(0.1)


def test_branch_first_does_not_raise_the_first_child_for_a_bad_alternative() -> None:
    # three siblings: first child 0.5, a better alternative 0.6, a much worse one 0.0
    keys = [K("g", "r", n=3), NodeKey("a", "t", "r", "plan", 3, 1), NodeKey("b", "t", "r", "plan", 3, 2)]
    cont = [0.5, 0.6, 0.0]
    assert branch_first_advantages(keys, cont, False, cont) == pytest.approx([0.0, 0.1, -0.5])
    # the siblings' mean (branch) credits the first child +0.133 although one alternative beat it
    assert branch_advantages(keys, cont, False, cont)[0] == pytest.approx(0.5 - 1.1 / 3)


def _lookahead_tree(ok: dict[str, bool], cost: dict[str, float], kind: str = "plan") -> tuple[list[DecisionNode], list[Leaf]]:
    """The spine m → p0 (greedy) → q0 (greedy) with alternatives p1 (at m) and q1 (at p0); the
    alternative p1 branches once more (rollout.lookahead 1): r0 (greedy) and r1. Leaves: A = m p0
    q0, B = m p0 q1, C = m p1 r0, D = m p1 r1. p0 and p1 are decisions of ``kind``."""
    def node(nid: str, parent: str, idx: int, n_sib: int, leaves: list[str]) -> DecisionNode:
        k = kind if nid[0] == "p" else "plan"
        return DecisionNode(nid, "t", "task", "sim/math", parent, k, 0, idx, n_sib, "p", "c", [1], [-0.1], True,
                            [], 1, 1.0, leaves)

    nodes = [node("m", "", 0, 1, ["A", "B", "C", "D"]), node("p0", "m", 0, 2, ["A", "B"]),
             node("p1", "m", 1, 2, ["C", "D"]), node("q0", "p0", 0, 2, ["A"]), node("q1", "p0", 1, 2, ["B"]),
             node("r0", "p1", 0, 2, ["C"]), node("r1", "p1", 1, 2, ["D"])]
    paths = {"A": ["m", "p0", "q0"], "B": ["m", "p0", "q1"], "C": ["m", "p1", "r0"], "D": ["m", "p1", "r1"]}
    leaves = [Leaf(x, "t", "task", "sim/math", paths[x], ok[x], float(ok[x]), cost[x], 1.0, 1, "", "x") for x in paths]
    return nodes, leaves


def test_lookahead_judges_each_decision_by_its_best_next_branch() -> None:
    cfg = sibling_rewards(w_cost=0.3, kappa=0.0, estimator="branch", normalize_std=False, cost_unit=1.0)
    r_ok, r_bad = 2 / 3 + 0.2, 1 / 3 + 0.2  # Beta(2,1) / Beta(1,2) on one leaf, full completeness; minus 0.3 x cost

    def adv(ok: str, cost: dict[str, float], look: int, kind: str = "plan", only: str = "any") -> dict[str, float]:
        nodes, leaves = _lookahead_tree({x: x in ok for x in "ABCD"}, cost, kind)
        out = score_nodes(nodes_frame(nodes), leaves_frame(leaves), cfg, lookahead=look, lookahead_from=only)
        return {r["node_id"]: r["advantage"] for r in out.iter_rows(named=True)}

    same = dict.fromkeys("ABCD", 1.0)
    # the alternative p1 fails greedily (C) but succeeds at its own alternative (D); the spine's greedy
    # path succeeds (A): greedily judged, p0 beats p1; judged by the best next branch, they tie
    assert adv("AD", same, 0)["p1"] == pytest.approx(-(r_ok - r_bad) / 2)
    look = adv("AD", same, 1)
    assert look["p1"] == 0.0 and look["p0"] == 0.0
    # the spine's later comparison (q0 against q1) is judged as before; the lookahead branch below
    # the alternative (r0, r1) only judges p1 and trains nothing itself
    assert look["q0"] == pytest.approx((r_ok - r_bad) / 2) and look["r1"] == look["r0"] == 0.0
    assert adv("AD", same, 0)["r1"] == pytest.approx((r_ok - r_bad) / 2)
    # the best continuation is the best reward, cost included: p1 at D (cost 1) against p0 at B (cost 2)
    look = adv("ABCD", {"A": 3.0, "B": 2.0, "C": 3.0, "D": 1.0}, 1)
    assert look["p1"] == pytest.approx(0.3 * (2.0 - 1.0) / 2) and look["p0"] == pytest.approx(-look["p1"])
    # lookahead_from milestone: plan decisions keep their greedy continuation, milestones look ahead
    greedy, plans = adv("AD", same, 0), adv("AD", same, 1, "plan", "milestone")
    assert [plans[x] for x in ("p0", "p1", "q0", "q1")] == [greedy[x] for x in ("p0", "p1", "q0", "q1")]
    assert adv("AD", same, 1, "milestone", "milestone") == adv("AD", same, 1, "milestone")
    assert adv("AD", same, 1, "milestone", "milestone")["p1"] == 0.0


def test_branch_needs_continuation_rewards() -> None:
    assert get_estimator("branch") is branch_advantages
    with pytest.raises(ValueError, match="one more reward per decision"):
        branch_advantages([K("a", "r")], [1.0], False)


def test_a_node_without_leaves_below_it_is_an_error_naming_it() -> None:
    nodes, leaves = _two_leaf_tree(correct_b=True, cost_b=1.0, defect_p2=False)
    with pytest.raises(ValueError, match="node p1 has no leaf below it"):
        _scored(nodes, [lf for lf in leaves if lf.leaf_id != "A"], "sibling")


def test_branch_needs_a_leaf_that_follows_first_children() -> None:
    nodes, leaves = _greedy_trunk_tree(a=True, b=False, c=True)
    # drop the greedy leaf A and q0: m's first child p0 now leads only to B, through p0's second child q1
    nodes = [n for n in nodes if n.node_id != "q0"]
    for n in nodes:
        n.leaves = [x for x in n.leaves if x != "A"]
    with pytest.raises(ValueError, match="0 leaves follow first children"):
        _scored(nodes, [lf for lf in leaves if lf.leaf_id != "A"], "branch")


def test_branch_with_normalize_std_scales_by_the_continuations_spread() -> None:
    # leaves A (greedy, right), B (the alternative below p0, wrong), C (the alternative plan, right)
    nodes, leaves = _greedy_trunk_tree(a=True, b=False, c=True)
    cfg = sibling_rewards(w_performance=1.0, w_cost=0.3, w_completeness=0.2, prior_alpha=1, prior_beta=1, kappa=0.0,
                        defect_penalty=0.5, estimator="branch", normalize_std=True)
    out = score_nodes(nodes_frame(nodes), leaves_frame(leaves), cfg)
    adv = dict(zip(out["node_id"], out["advantage"]))
    # q0 against q1: half the gap between a right and a wrong single leaf, Beta(2,1) - Beta(1,2) = 1/3, so 1/6,
    # over the spread of the tree's continuation rewards (four right, one wrong: pstdev 0.4 x 1/3)
    scale = statistics.pstdev([1, 1, 1, 1, 0]) / 3 + 1e-6
    assert adv["q0"] == pytest.approx((1 / 6) / scale) == pytest.approx(1.249991, abs=1e-5)
    assert adv["q1"] == pytest.approx(-adv["q0"]) and adv["p0"] == adv["p1"] == adv["m"] == 0.0


def test_probes_judge_each_child_and_an_ended_episode_counts_as_often() -> None:
    """``rollout.continuation``: a branch point's children are judged by their probes (the rule
    finishing the episode from each, several times); the spine goes on below the first child, and
    its own later leaves do not judge it. A child that ended the episode (it answered) is judged
    by its end, counted as many times as its siblings have probes."""
    def node(nid: str, parent: str, idx: int, n_sib: int, leaves: list[str], kind: str = "plan") -> DecisionNode:
        return DecisionNode(nid, "t", "task", "sim/math", parent, kind, 0, idx, n_sib, "p", "c", [1], [-0.1], True,
                            [], 0, 0.0, leaves)

    def leaf(x: str, path: list[str], ok: bool, cost: float, probe: bool) -> Leaf:
        return Leaf(x, "t", "task", "sim/math", path, ok, float(ok), cost, 1.0, 1, "", "a", probe=probe)

    # m → spine s (sibling 0: probes s1..s4, then the spine's own milestone q and leaf S), alternative a
    # (probes a1..a4), alternative e that answered (its own leaf E)
    probes_s = [leaf(f"s{i}", ["m", "s"], ok, 2.0, True) for i, ok in enumerate((True, True, False, True))]
    probes_a = [leaf(f"a{i}", ["m", "a"], ok, 1.0, True) for i, ok in enumerate((False, True, False, False))]
    spine_leaf = leaf("S", ["m", "s", "q"], False, 9.0, False)
    ended = leaf("E", ["m", "e"], True, 0.5, False)
    nodes = [node("m", "", 0, 1, ["S", "E"] + [x.leaf_id for x in probes_s + probes_a], "milestone"),
             node("s", "m", 0, 3, ["S"] + [x.leaf_id for x in probes_s]), node("a", "m", 1, 3, [x.leaf_id for x in probes_a]),
             node("e", "m", 2, 3, ["E"]), node("q", "s", 0, 1, ["S"], "milestone")]
    adv = _scored(nodes, [*probes_s, *probes_a, spine_leaf, ended], "branch")
    # cost_norm: cost over the tree's mean leaf cost (all 10 leaves: 8 + 4 + 9 + 0.5 = 21.5 / 10)
    scale = 21.5 / 10

    def reward(succ: int, n: int, cost: float) -> float:  # Beta(1 + succ, 1 + n - succ) mean, kappa 0
        return (1 + succ) / (2 + n) - 0.3 * cost / scale + 0.2 * 1.0

    r_s, r_a, r_e = reward(3, 4, 2.0), reward(1, 4, 1.0), reward(4, 4, 0.5)
    mean = (r_s + r_a + r_e) / 3
    assert adv["s"] == pytest.approx(r_s - mean) and adv["a"] == pytest.approx(r_a - mean)
    assert adv["e"] == pytest.approx(r_e - mean)
    assert adv["m"] == 0.0 and adv["q"] == 0.0  # not branch points
