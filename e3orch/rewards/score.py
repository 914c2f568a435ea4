"""Scoring a rollout: rewards and advantages for every decision node (the ``score`` stage)."""

from __future__ import annotations

from collections import defaultdict

import polars as pl

from e3orch.config import RewardsConfig
from e3orch.rewards.advantages import NodeKey, get_estimator
from e3orch.rewards.terms import NodeFacts, make_terms, total_reward
from e3orch.rollout.records import SCORED_SCHEMA

_NO_ANSWER = {"no_answer"}


def score_nodes(nodes: pl.DataFrame, leaves: pl.DataFrame, cfg: RewardsConfig) -> pl.DataFrame:
    """Add ``n_leaves, performance, cost_norm, completeness, reward, advantage`` to ``nodes``."""
    leaf = {r["leaf_id"]: r for r in leaves.iter_rows(named=True)}
    tree_costs: dict[str, list[float]] = defaultdict(list)
    for r in leaf.values():
        tree_costs[r["tree_id"]].append(r["cost"])
    tree_mean = {t: sum(c) / len(c) for t, c in tree_costs.items()}
    terms = make_terms(cfg.prior_alpha, cfg.prior_beta, cfg.kappa, cfg.defect_penalty)

    cols: dict[str, list[float | int]] = {k: [] for k in ("n_leaves", "performance", "cost_norm", "completeness", "reward")}
    keys: list[NodeKey] = []
    for n in nodes.iter_rows(named=True):
        below = [leaf[x] for x in n["leaves"] if x in leaf]
        if not below:
            raise ValueError(f"node {n['node_id']} has no leaf below it (incomplete rollout file?)")
        facts = NodeFacts(
            leaf_scores=[b["score"] for b in below],
            leaf_costs=[b["cost"] for b in below],
            leaf_answered=[not b["budget_failure"] for b in below],
            n_defects=len([d for d in n["defects"] if d not in _NO_ANSWER]),
            tree_mean_cost=tree_mean[n["tree_id"]],
        )
        perf, cost, comp = terms["performance"](facts), terms["cost"](facts), terms["completeness"](facts)
        cols["n_leaves"].append(len(below))
        cols["performance"].append(perf)
        cols["cost_norm"].append(cost)
        cols["completeness"].append(comp)
        cols["reward"].append(total_reward(perf, cost, comp, cfg.w_performance, cfg.w_cost, cfg.w_completeness))
        keys.append(NodeKey(n["node_id"], n["tree_id"], n["parent_id"], n["kind"], n["n_siblings"]))

    adv = get_estimator(cfg.estimator)(keys, cols["reward"], cfg.normalize_std)  # type: ignore[arg-type]
    out = nodes.with_columns(
        pl.Series("n_leaves", cols["n_leaves"], dtype=pl.Int64),
        pl.Series("performance", cols["performance"], dtype=pl.Float64),
        pl.Series("cost_norm", cols["cost_norm"], dtype=pl.Float64),
        pl.Series("completeness", cols["completeness"], dtype=pl.Float64),
        pl.Series("reward", cols["reward"], dtype=pl.Float64),
        pl.Series("advantage", adv, dtype=pl.Float64),
    )
    return SCORED_SCHEMA.validate(out, lazy=True)
