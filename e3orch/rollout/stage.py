"""The rollout and score stages as library functions (files in, files out)."""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from e3orch.config import Params
from e3orch.data.sim import stable_seed
from e3orch.data.tasks import Task
from e3orch.executors.base import ExecutorSpec
from e3orch.rollout.records import (
    LEAF_SCHEMA,
    NODE_SCHEMA,
    leaves_frame,
    nodes_frame,
    read_validated,
    write_validated,
)


def _mean(column: Any) -> float:
    """A polars column's mean as a float (0.0 when empty)."""
    value = column.mean()
    return float(value) if isinstance(value, (int, float)) else 0.0


def rollout_stage(params: Params, policy_dir: str | Path, train_tasks: Sequence[Task], specs: Sequence[ExecutorSpec],
                  out_dir: str | Path, *, round_id: int = 0, shard: tuple[int, int] = (0, 1)) -> dict[str, Any]:
    """Tree rollouts of ``policy_dir`` on the round's task sample → ``out_dir``/{nodes,leaves}.parquet.

    ``shard=(i, n)`` runs only every n-th task starting at i (Prefect/Ray run shards in parallel;
    :func:`merge_rollouts` joins them). The same (round, seed) gives the same sample and trees.
    """
    from e3orch.policy.backends.base import backend_from_params
    from e3orch.policy.workers import PolicyWorkers, worker_count
    from e3orch.rollout.tree import rollout_shares

    rc = params.rollout
    backend = backend_from_params(params.policy, policy_dir)
    rng = random.Random(stable_seed("rollout-stage", rc.seed, round_id))
    tasks = rng.sample(list(train_tasks), min(rc.tasks_per_round, len(train_tasks)))
    index, count = shard
    if not 0 <= index < count:
        raise ValueError(f"shard index {index} out of range for {count} shards")
    tasks = tasks[index::count]
    # each shard its own sampling streams (rows of different shards would share them); one shard: rc.seed
    seed = rc.seed if count == 1 else stable_seed(rc.seed, "shard", index) % 2**31
    n = worker_count(params.policy)  # policy.workers: this shard's tasks shared out again between processes
    with contextlib.ExitStack() as stack:
        workers = stack.enter_context(PolicyWorkers(params.policy, policy_dir, n)) if n > 1 else None
        res = rollout_shares(backend, params, tasks, specs, round_id=round_id, seed=seed, workers=workers)
    out = Path(out_dir)
    write_validated(nodes_frame(res.nodes), NODE_SCHEMA, out / "nodes.parquet")
    write_validated(leaves_frame(res.leaves), LEAF_SCHEMA, out / "leaves.parquet")
    (out / "trees.json").write_text(json.dumps(res.trees, indent=1) + "\n")
    own = [x for x in res.leaves if not x.probe]  # the policy's episodes (probes: rollout.continuation)
    summary = {
        "tasks": len(tasks), "decisions": len(res.nodes), "leaves": len(own), "probes": len(res.leaves) - len(own),
        "leaf_accuracy": sum(x.correct for x in own) / max(1, len(own)),
        "leaf_cost": sum(x.cost for x in own) / max(1, len(own)),
        **res.sharing(), "generated_tokens": res.generated_tokens,
        "generate_s": res.generate_s, "execute_s": res.execute_s,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    backend.release()
    return summary


def score_stage(params: Params, rollout_dir: str | Path, out_path: str | Path) -> dict[str, Any]:
    import polars as pl

    from e3orch.rewards.score import score_nodes
    from e3orch.rollout.records import SCORED_SCHEMA

    d = Path(rollout_dir)
    nodes = read_validated(d / "nodes.parquet", NODE_SCHEMA)
    leaves = read_validated(d / "leaves.parquet", LEAF_SCHEMA)
    scored = score_nodes(nodes, leaves, params.rewards, params.rollout.lookahead, params.rollout.lookahead_from)
    write_validated(scored, SCORED_SCHEMA, out_path)
    cols = ["performance", "cost_norm", "completeness", "reward", "advantage"]
    summary: dict[str, Any] = {c: _mean(scored[c]) for c in cols}
    for c in ("reward", "advantage"):
        by_kind = scored.group_by("kind").agg(pl.col(c).mean())
        summary[f"{c}_by_kind"] = {k: float(v) for k, v in zip(by_kind["kind"].to_list(), by_kind[c].to_list())}
    summary["decisions"] = len(scored)
    return summary


def merge_rollouts(shard_dirs: Sequence[str | Path], out_dir: str | Path) -> dict[str, Any]:
    """Concatenate rollout shards (disjoint trees) into one validated rollout folder."""
    import polars as pl

    dirs = [Path(d) for d in shard_dirs]
    nodes = pl.concat([read_validated(d / "nodes.parquet", NODE_SCHEMA) for d in dirs])
    leaves = pl.concat([read_validated(d / "leaves.parquet", LEAF_SCHEMA) for d in dirs])
    out = Path(out_dir)
    write_validated(nodes, NODE_SCHEMA, out / "nodes.parquet")
    write_validated(leaves, LEAF_SCHEMA, out / "leaves.parquet")
    trees: dict[str, Any] = {}
    summaries = []
    for d in dirs:
        trees.update(json.loads((d / "trees.json").read_text()))
        summaries.append(json.loads((d / "summary.json").read_text()))
    (out / "trees.json").write_text(json.dumps(trees, indent=1) + "\n")
    n_leaves = max(1, len(leaves))
    calls_tree = int(nodes["n_calls"].sum())
    calls_indep = int(leaves["n_calls_path"].sum())
    summary = {
        "tasks": sum(s["tasks"] for s in summaries), "decisions": len(nodes), "leaves": len(leaves),
        "leaf_accuracy": _mean(leaves["correct"]), "leaf_cost": _mean(leaves["cost"]),
        "calls_per_leaf_tree": calls_tree / n_leaves, "calls_per_leaf_independent": calls_indep / n_leaves,
        "sharing_ratio": calls_tree / calls_indep if calls_indep else 1.0,
        "generated_tokens": sum(s["generated_tokens"] for s in summaries),
        "generate_s": sum(s["generate_s"] for s in summaries), "execute_s": sum(s["execute_s"] for s in summaries),
        "shards": len(dirs),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
