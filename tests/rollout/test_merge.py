"""Rollout shards merge into one validated folder whose summary is recomputed from the records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from e3orch.rollout.records import (
    LEAF_SCHEMA,
    NODE_SCHEMA,
    DecisionNode,
    Leaf,
    leaves_frame,
    nodes_frame,
    read_validated,
    write_validated,
)
from e3orch.rollout.stage import merge_rollouts


def _node(nid: str, tree: str, parent: str, kind: str, leaves: list[str], n_sib: int = 1) -> DecisionNode:
    return DecisionNode(nid, tree, tree, "sim/math", parent, kind, 0, 0, n_sib, "p", "c", [1], [-0.1], True,
                        [], 1 if kind == "plan" else 0, 1.0, leaves)


def _shard(d: Path, nodes: list[DecisionNode], leaves: list[Leaf], summary: dict[str, float]) -> Path:
    write_validated(nodes_frame(nodes), NODE_SCHEMA, d / "nodes.parquet")
    write_validated(leaves_frame(leaves), LEAF_SCHEMA, d / "leaves.parquet")
    (d / "trees.json").write_text(json.dumps({nodes[0].tree_id: [{"name": "x"}]}))
    (d / "summary.json").write_text(json.dumps(summary))
    return d


def test_merged_summary_is_recomputed_from_both_shards(tmp_path: Path) -> None:
    # shard 0: one milestone, two plan siblings (one call each), leaves A (right, cost 1) and B (wrong, 3)
    s0 = _shard(tmp_path / "s0",
                [_node("a:m", "a", "", "milestone", ["A", "B"]), _node("a:p1", "a", "a:m", "plan", ["A"], 2),
                 _node("a:p2", "a", "a:m", "plan", ["B"], 2)],
                [Leaf("A", "a", "a", "sim/math", ["a:m", "a:p1"], True, 1.0, 1.0, 1.0, 1, "", "x"),
                 Leaf("B", "a", "a", "sim/math", ["a:m", "a:p2"], False, 0.0, 3.0, 1.0, 1, "", "y")],
                {"tasks": 1, "generated_tokens": 10, "generate_s": 1.0, "execute_s": 0.5})
    # shard 1: a shared plan (one call) before two plan siblings: leaves C (right, 2) and D (wrong, 2), two calls each
    s1 = _shard(tmp_path / "s1",
                [_node("b:m", "b", "", "milestone", ["C", "D"]), _node("b:p", "b", "b:m", "plan", ["C", "D"]),
                 _node("b:q1", "b", "b:p", "plan", ["C"], 2), _node("b:q2", "b", "b:p", "plan", ["D"], 2)],
                [Leaf("C", "b", "b", "sim/math", ["b:m", "b:p", "b:q1"], True, 1.0, 2.0, 1.0, 2, "", "x"),
                 Leaf("D", "b", "b", "sim/math", ["b:m", "b:p", "b:q2"], False, 0.0, 2.0, 1.0, 2, "", "y")],
                {"tasks": 1, "generated_tokens": 5, "generate_s": 2.0, "execute_s": 0.25})
    summary = merge_rollouts([s0, s1], tmp_path / "merged")
    assert summary == pytest.approx({
        "tasks": 2, "decisions": 7, "leaves": 4, "leaf_accuracy": 0.5, "leaf_cost": 2.0,
        "calls_per_leaf_tree": 5 / 4, "calls_per_leaf_independent": 6 / 4, "sharing_ratio": 5 / 6,
        "generated_tokens": 15, "generate_s": 3.0, "execute_s": 0.75, "shards": 2})
    assert json.loads((tmp_path / "merged/summary.json").read_text()) == summary
    assert set(json.loads((tmp_path / "merged/trees.json").read_text())) == {"a", "b"}
    with pytest.raises(Exception, match="node_id"):  # the same shard twice: node ids must stay unique
        merge_rollouts([s0, s0], tmp_path / "twice")



def test_shards_sample_from_their_own_streams(tiny_init_root: Path, tmp_path: Path) -> None:
    """Two shards, each with one copy of the same task (only its id differs): with one stream per
    shard they sample differently; they used to share the streams and draw the same plans."""
    from dataclasses import replace

    from e3orch.config import load_params
    from e3orch.data.sim import generate_split
    from e3orch.executors.base import load_pool_specs
    from e3orch.rollout.stage import rollout_stage

    params = load_params(tiny_init_root / "params.yaml")
    params = params.model_copy(update={"rollout": params.rollout.model_copy(update={
        "tasks_per_round": 2, "leaf_budget": 2, "randomize_pool": False})})
    task = generate_split(0, "train", 1, ("math",))[0]
    tasks = [task, replace(task, task_id=task.task_id + "-copy")]
    specs = load_pool_specs(params.evaluate.executors)
    drawn = []
    for i in (0, 1):
        rollout_stage(params, str(tiny_init_root / "models/init"), tasks, specs, tmp_path / f"s{i}", shard=(i, 2))
        nodes = read_validated(tmp_path / f"s{i}/nodes.parquet", NODE_SCHEMA).sort("depth", "sibling_index")
        drawn.append(nodes["completion"].to_list())
    assert drawn[0] != drawn[1]
