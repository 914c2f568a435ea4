"""Scoring a rollout: rewards and advantages for every decision node (the ``score`` stage)."""

from __future__ import annotations

from collections import defaultdict
from statistics import fmean
from typing import Any

import polars as pl

from e3orch.config import RewardsConfig, lookahead_at
from e3orch.rewards.advantages import ESTIMATOR_AUX, NodeKey, get_estimator
from e3orch.rewards.terms import NodeFacts, make_terms, total_reward
from e3orch.rollout.records import SCORED_SCHEMA, spine_nodes

_NO_ANSWER = {"no_answer"}


def matched_baseline_facts(rows: list[dict[str, Any]], keys: list[NodeKey], facts: list[NodeFacts],
                           leaf: dict[str, dict[str, Any]]) -> list[NodeFacts]:
    """Per decision, the facts of its comparison group at its own leaf count.

    The group is its siblings when it branched (their leaves are every leaf below the state it
    was sampled in), otherwise its tree (all the tree's leaves; own defects averaged over the
    tree's decisions of the same kind). The group's leaves are averaged into one reference leaf,
    repeated as many times as the decision has leaves, so that decision and baseline are judged
    by the same uncertainty: the difference is what the decision changed, not how often it was
    sampled below.
    """
    sib: dict[tuple[str, str], list[int]] = defaultdict(list)
    same_kind: dict[tuple[str, str], list[int]] = defaultdict(list)
    tree_leaves: dict[str, set[str]] = defaultdict(set)
    for i, (k, row) in enumerate(zip(keys, rows)):
        sib[(k.tree_id, k.parent_id)].append(i)
        same_kind[(k.tree_id, k.kind)].append(i)
        tree_leaves[k.tree_id].update(x for x in row["leaves"] if x in leaf)
    out = []
    for i, k in enumerate(keys):
        group = sib[(k.tree_id, k.parent_id)]
        if k.n_siblings > 1 and len(group) > 1:
            ids: set[str] = set().union(*({x for x in rows[j]["leaves"] if x in leaf} for j in group))
        else:
            group, ids = same_kind[(k.tree_id, k.kind)], tree_leaves[k.tree_id]
        ref = [leaf[x] for x in sorted(ids)]
        n = len(facts[i].leaf_scores)
        out.append(NodeFacts(
            leaf_scores=[fmean(r["score"] for r in ref)] * n,
            leaf_costs=[fmean(r["cost"] for r in ref)] * n,
            leaf_answered=[fmean(0.0 if r["budget_failure"] else 1.0 for r in ref)] * n,
            n_defects=fmean(facts[j].n_defects for j in group),
            cost_scale=facts[i].cost_scale,
        ))
    return out


def continuation_facts(rows: list[dict[str, Any]], facts: list[NodeFacts],
                       leaf: dict[str, dict[str, Any]], lookahead: int = 0,
                       lookahead_from: str = "any") -> list[list[NodeFacts]]:
    """Per decision, the facts of each leaf below it that can judge it: the one leaf whose path
    takes the first child at every later branch point (the greedy continuation under
    ``rollout.trunk: greedy``), and with ``lookahead`` N every leaf whose path may take any child
    at the first N branch points below the decision and first children after them (``lookahead_from``
    milestone: for milestone decisions only). A decision with probes (``rollout.continuation``: the
    episode finished from it by a hand-written rule, several times) is judged by them together:
    one candidate whose leaves are its probes."""
    first = {r["node_id"]: r["sibling_index"] == 0 for r in rows}
    branched = {r["node_id"]: r["n_siblings"] > 1 for r in rows}
    own: dict[str, list[dict[str, Any]]] = {}  # node → the leaves that end at it: its probes, or the episode's end
    for r in rows:
        own[r["node_id"]] = [leaf[x] for x in r["leaves"] if x in leaf and leaf[x]["node_path"][-1] == r["node_id"]]
    probed: dict[tuple[str, str], int] = defaultdict(int)  # branch point → probes per child
    for r in rows:
        n = sum(bool(x.get("probe")) for x in own[r["node_id"]])
        probed[(r["tree_id"], r["parent_id"])] = max(probed[(r["tree_id"], r["parent_id"])], n)
    out = []
    for r, f in zip(rows, facts):
        nid = r["node_id"]
        k = probed[(r["tree_id"], r["parent_id"])] if r["n_siblings"] > 1 else 0
        ends = ([x for x in own[nid] if x.get("probe")] or own[nid] * k) if k else []
        if ends:  # judged by its probes; a child that ended the episode, by its end counted as often
            out.append([_judged_by(ends, f)])
            continue
        below = {x: _after(leaf[x]["node_path"], nid) for x in r["leaves"] if x in leaf and not leaf[x].get("probe")}
        greedy = [x for x, path in below.items() if _follows(path, first, branched, 0)]
        if len(greedy) != 1:
            raise ValueError(f"node {nid}: {len(greedy)} leaves follow first children below it, expected 1 (incomplete rollout file?)")
        look = lookahead_at(lookahead, lookahead_from, r["kind"])
        cont = [x for x, path in below.items() if _follows(path, first, branched, look)] if look else greedy
        out.append([_judged_by([leaf[x]], f) for x in cont])
    return out


def _judged_by(leaves: list[dict[str, Any]], f: NodeFacts) -> NodeFacts:
    """A decision's facts with ``leaves`` as the leaves that judge it (its own defects and cost scale kept)."""
    return NodeFacts(leaf_scores=[x["score"] for x in leaves], leaf_costs=[x["cost"] for x in leaves],
                     leaf_answered=[not x["budget_failure"] for x in leaves], n_defects=f.n_defects,
                     cost_scale=f.cost_scale)


def _follows(path: list[str], first: dict[str, bool], branched: dict[str, bool], free: int) -> bool:
    """Whether ``path`` takes the first child at every branch point after its first ``free`` ones."""
    for nid in path:
        if branched.get(nid, False):
            if free > 0:
                free -= 1
                continue
        if not first.get(nid, True):
            return False
    return True


def _clip_zero_sum(adv: list[float], keys: list[NodeKey], c: float, recentre: bool = True) -> list[float]:
    """Advantages clipped to [-c, c], then, within each group of siblings, re-centred on their
    mean. Siblings' advantages sum to zero as every sibling estimator makes them, and must go on
    doing so: the tokens siblings share (``S1 | #`` before the rank they differ in) get the sum of
    their advantages, and a clipped group whose sum is negative would push the answer format itself
    down until plans stop parsing. ``recentre=False`` (``branch_first``, whose groups are not
    zero-sum by design: re-centred, it would be ``branch``) only clips."""
    out = [min(c, max(-c, a)) for a in adv]
    if not recentre:
        return out
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, k in enumerate(keys):
        if k.n_siblings > 1:
            groups[(k.tree_id, k.parent_id)].append(i)
    for idx in groups.values():
        if len(idx) > 1 and any(adv[i] for i in idx):
            mean = fmean(out[i] for i in idx)
            for i in idx:
                out[i] -= mean
    return out


def _after(path: list[str], node_id: str) -> list[str]:
    return list(path[path.index(node_id) + 1:])


def score_nodes(nodes: pl.DataFrame, leaves: pl.DataFrame, cfg: RewardsConfig, lookahead: int = 0,
                lookahead_from: str = "any") -> pl.DataFrame:
    """Add ``n_leaves, performance, cost_norm, completeness, reward, advantage`` to ``nodes``.

    ``lookahead`` (``rollout.lookahead``): continuation-judged estimators take the best
    continuation through a decision's next ``lookahead`` branch points (:func:`continuation_facts`;
    ``lookahead_from``: ``rollout.lookahead_from``). With lookahead, the decisions below an
    alternative get advantage 0: their branches judge it and are off the greedy policy's path."""
    leaf = {r["leaf_id"]: r for r in leaves.iter_rows(named=True)}
    tree_costs: dict[str, list[float]] = defaultdict(list)
    for r in leaf.values():
        tree_costs[r["tree_id"]].append(r["cost"])
    # the cost scale: the task's mean leaf cost, or one fixed amount for every task (rewards.cost_unit)
    cost_scale = {t: cfg.cost_unit or sum(c) / len(c) for t, c in tree_costs.items()}
    terms = make_terms(cfg.prior_alpha, cfg.prior_beta, cfg.kappa, cfg.defect_penalty, cfg.cost_prior)

    def reward_of(f: NodeFacts) -> tuple[float, float, float, float]:
        perf, cost, comp = terms["performance"](f), terms["cost"](f), terms["completeness"](f)
        return perf, cost, comp, total_reward(perf, cost, comp, cfg.w_performance, cfg.w_cost, cfg.w_completeness)

    rows = list(nodes.iter_rows(named=True))
    facts: list[NodeFacts] = []
    for n in rows:
        below = [leaf[x] for x in n["leaves"] if x in leaf]
        if not below:
            raise ValueError(f"node {n['node_id']} has no leaf below it (incomplete rollout file?)")
        facts.append(NodeFacts(
            leaf_scores=[b["score"] for b in below],
            leaf_costs=[b["cost"] for b in below],
            leaf_answered=[not b["budget_failure"] for b in below],
            n_defects=len([d for d in n["defects"] if d not in _NO_ANSWER]),
            cost_scale=cost_scale[n["tree_id"]],
        ))
    keys = [NodeKey(n["node_id"], n["tree_id"], n["parent_id"], n["kind"], n["n_siblings"], n["sibling_index"])
            for n in rows]
    cols: dict[str, list[float | int]] = {k: [] for k in ("n_leaves", "performance", "cost_norm", "completeness", "reward")}
    for f in facts:
        perf, cost, comp, reward = reward_of(f)
        cols["n_leaves"].append(len(f.leaf_scores))
        cols["performance"].append(perf)
        cols["cost_norm"].append(cost)
        cols["completeness"].append(comp)
        cols["reward"].append(reward)

    estimator, needs = get_estimator(cfg.estimator), ESTIMATOR_AUX[cfg.estimator]
    aux = None
    if needs == "matched":
        aux = [reward_of(b)[3] for b in matched_baseline_facts(rows, keys, facts, leaf)]
    elif needs == "continuation":
        aux = [max(reward_of(c)[3] for c in cands) for cands in continuation_facts(rows, facts, leaf, lookahead, lookahead_from)]
    adv = estimator(keys, cols["reward"], cfg.normalize_std, aux)  # type: ignore[arg-type]
    if lookahead:  # a lookahead branch is there to judge the alternative above it, not to train its own choices
        spine = spine_nodes(nodes)  # below an alternative: a decision whose parent is off the spine
        adv = [0.0 if r["parent_id"] and r["parent_id"] not in spine else a for a, r in zip(adv, rows)]
    if cfg.positive_only:
        adv = [max(0.0, a) for a in adv]
    if cfg.advantage_clip is not None:
        adv = _clip_zero_sum(adv, keys, cfg.advantage_clip, recentre=cfg.estimator != "branch_first")
    out = nodes.with_columns(
        pl.Series("n_leaves", cols["n_leaves"], dtype=pl.Int64),
        pl.Series("performance", cols["performance"], dtype=pl.Float64),
        pl.Series("cost_norm", cols["cost_norm"], dtype=pl.Float64),
        pl.Series("completeness", cols["completeness"], dtype=pl.Float64),
        pl.Series("reward", cols["reward"], dtype=pl.Float64),
        pl.Series("advantage", adv, dtype=pl.Float64),
    )
    return SCORED_SCHEMA.validate(out, lazy=True)
