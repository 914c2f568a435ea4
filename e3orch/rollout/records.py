"""Record types of the rollout boundary: decision nodes and leaves, with their pandera schemas.

One row per decision node (``nodes.parquet``) and one per leaf (``leaves.parquet``). The scoring
stage adds reward columns to the node table (``scored.parquet``), validated by its own schema.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import pandera.polars as pa
import polars as pl

KINDS = ["milestone", "plan"]


def _row(record: Any) -> dict[str, Any]:
    """A record's fields as a table row (``asdict`` would deep-copy every list)."""
    return {f.name: getattr(record, f.name) for f in fields(record)}


@dataclass
class DecisionNode:
    node_id: str
    tree_id: str
    task_id: str
    benchmark: str
    parent_id: str          # "" for the first decision of a tree
    kind: str               # milestone | plan
    depth: int              # decisions before this one on its path
    sibling_index: int
    n_siblings: int         # children sampled at this decision point (1 = no branching)
    prompt: str
    completion: str
    token_ids: list[int]
    logprobs: list[float]
    finished: bool          # the completion ended with EOS
    defects: list[str]      # defect codes of this decision (parser/validator, budget)
    n_calls: int = 0        # executor calls this decision caused (plan nodes)
    cost: float = 0.0       # their cost
    leaves: list[str] = field(default_factory=list)
    # ``policy.prompt: factored``: a plan asked one slot at a time. Each slot's prompt, and how
    # many of ``token_ids``/``logprobs`` (the slots' answers, concatenated) are its answer.
    sub_prompts: list[str] = field(default_factory=list)
    sub_lengths: list[int] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        return _row(self)


@dataclass
class Leaf:
    leaf_id: str
    tree_id: str
    task_id: str
    benchmark: str
    node_path: list[str]    # decision nodes root → leaf
    correct: bool
    score: float
    cost: float
    makespan_s: float
    n_calls_path: int       # executor calls on the path (what an independent rollout would run)
    budget_failure: str
    answer: str
    # a probe: the episode finished from its last decision by the rollout's hand-written continuation
    # (``rollout.continuation``), not by the policy; it judges that decision only
    probe: bool = False

    def row(self) -> dict[str, Any]:
        return _row(self)


NODE_SCHEMA = pa.DataFrameSchema(
    {
        "node_id": pa.Column(pl.Utf8, unique=True),
        "tree_id": pa.Column(pl.Utf8),
        "task_id": pa.Column(pl.Utf8),
        "benchmark": pa.Column(pl.Utf8),
        "parent_id": pa.Column(pl.Utf8),
        "kind": pa.Column(pl.Utf8, pa.Check.isin(KINDS)),
        "depth": pa.Column(pl.Int64, pa.Check.ge(0)),
        "sibling_index": pa.Column(pl.Int64, pa.Check.ge(0)),
        "n_siblings": pa.Column(pl.Int64, pa.Check.ge(1)),
        "prompt": pa.Column(pl.Utf8),
        "completion": pa.Column(pl.Utf8),
        "token_ids": pa.Column(pl.List(pl.Int64)),
        "logprobs": pa.Column(pl.List(pl.Float64)),
        "finished": pa.Column(pl.Boolean),
        "defects": pa.Column(pl.List(pl.Utf8)),
        "n_calls": pa.Column(pl.Int64, pa.Check.ge(0)),
        "cost": pa.Column(pl.Float64, pa.Check.ge(0)),
        "leaves": pa.Column(pl.List(pl.Utf8)),
        "sub_prompts": pa.Column(pl.List(pl.Utf8)),
        "sub_lengths": pa.Column(pl.List(pl.Int64)),
    },
    strict=True,
    name="DecisionNodes",
)

LEAF_SCHEMA = pa.DataFrameSchema(
    {
        "leaf_id": pa.Column(pl.Utf8, unique=True),
        "tree_id": pa.Column(pl.Utf8),
        "task_id": pa.Column(pl.Utf8),
        "benchmark": pa.Column(pl.Utf8),
        "node_path": pa.Column(pl.List(pl.Utf8)),
        "correct": pa.Column(pl.Boolean),
        "score": pa.Column(pl.Float64, pa.Check.in_range(0.0, 1.0)),
        "cost": pa.Column(pl.Float64, pa.Check.ge(0)),
        "makespan_s": pa.Column(pl.Float64, pa.Check.ge(0)),
        "n_calls_path": pa.Column(pl.Int64, pa.Check.ge(0)),
        "budget_failure": pa.Column(pl.Utf8),
        "answer": pa.Column(pl.Utf8),
        "probe": pa.Column(pl.Boolean),
    },
    strict=True,
    name="Leaves",
)

SCORED_SCHEMA = NODE_SCHEMA.add_columns(
    {
        "n_leaves": pa.Column(pl.Int64, pa.Check.ge(1)),
        "performance": pa.Column(pl.Float64),
        "cost_norm": pa.Column(pl.Float64, pa.Check.ge(0)),
        "completeness": pa.Column(pl.Float64, pa.Check.in_range(0.0, 1.0)),
        "reward": pa.Column(pl.Float64),
        "advantage": pa.Column(pl.Float64),
    }
)
SCORED_SCHEMA.name = "ScoredNodes"

_NODE_DTYPES = {name: col.dtype.type for name, col in NODE_SCHEMA.columns.items()}
_LEAF_DTYPES = {name: col.dtype.type for name, col in LEAF_SCHEMA.columns.items()}


def spine_nodes(nodes: pl.DataFrame) -> set[str]:
    """The nodes on the first child at every branch point from each tree's root: with
    ``rollout.spine``, the greedy episode the tree's alternatives branch from. A node off it lies
    below an alternative (or is one)."""
    first = nodes.filter(pl.col("sibling_index") == 0).sort("depth")
    out: set[str] = set()
    for node, parent in zip(first["node_id"].to_list(), first["parent_id"].to_list()):
        if not parent or parent in out:
            out.add(node)
    return out


def nodes_frame(nodes: list[DecisionNode]) -> pl.DataFrame:
    df = pl.DataFrame([n.row() for n in nodes], schema=_NODE_DTYPES)
    return NODE_SCHEMA.validate(df, lazy=True)


def leaves_frame(leaves: list[Leaf]) -> pl.DataFrame:
    df = pl.DataFrame([x.row() for x in leaves], schema=_LEAF_DTYPES)
    return LEAF_SCHEMA.validate(df, lazy=True)


def write_validated(df: pl.DataFrame, schema: pa.DataFrameSchema, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    schema.validate(df, lazy=True).write_parquet(p)
    return p


def read_validated(path: str | Path, schema: pa.DataFrameSchema) -> pl.DataFrame:
    from e3orch.data.tasks import read_table

    return read_table(path, schema, "rollout table", " (run the stage that writes it first)")
