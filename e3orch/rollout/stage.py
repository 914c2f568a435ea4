"""The rollout and score stages as library functions (files in, files out)."""

from __future__ import annotations

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


def rollout_stage(params: Params, policy_dir: str | Path, train_tasks: Sequence[Task], specs: Sequence[ExecutorSpec],
                  out_dir: str | Path, *, round_id: int = 0) -> dict[str, Any]:
    from e3orch.policy.backends.base import make_backend
    from e3orch.rollout.tree import TreeRollout

    pc, rc = params.policy, params.rollout
    opts = ({"device": pc.device, "dtype": pc.dtype, "threads": pc.threads, "batch_size": pc.batch_size}
            if pc.backend == "transformers" else {"base_url": pc.vllm_url})
    backend = make_backend(pc.backend, str(policy_dir), **opts)
    rng = random.Random(stable_seed("rollout-stage", rc.seed, round_id))
    tasks = rng.sample(list(train_tasks), min(rc.tasks_per_round, len(train_tasks)))
    engine = TreeRollout(backend, params.engine, rc, temperature=pc.temperature, top_p=pc.top_p,
                         max_new_tokens={"milestone": pc.max_new_tokens_milestone, "plan": pc.max_new_tokens_plan},
                         max_prompt_tokens=pc.max_prompt_tokens)
    res = engine.run(tasks, specs, round_id=round_id, seed=rc.seed)
    out = Path(out_dir)
    write_validated(nodes_frame(res.nodes), NODE_SCHEMA, out / "nodes.parquet")
    write_validated(leaves_frame(res.leaves), LEAF_SCHEMA, out / "leaves.parquet")
    (out / "trees.json").write_text(json.dumps(res.trees, indent=1) + "\n")
    summary = {
        "tasks": len(tasks), "decisions": len(res.nodes), "leaves": len(res.leaves),
        "leaf_accuracy": sum(x.correct for x in res.leaves) / max(1, len(res.leaves)),
        "leaf_cost": sum(x.cost for x in res.leaves) / max(1, len(res.leaves)),
        **res.sharing(), "generated_tokens": res.generated_tokens,
        "generate_s": res.generate_s, "execute_s": res.execute_s,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    backend.release()
    return summary


def score_stage(params: Params, rollout_dir: str | Path, out_path: str | Path) -> dict[str, Any]:
    from e3orch.rewards.score import score_nodes
    from e3orch.rollout.records import SCORED_SCHEMA

    d = Path(rollout_dir)
    nodes = read_validated(d / "nodes.parquet", NODE_SCHEMA)
    leaves = read_validated(d / "leaves.parquet", LEAF_SCHEMA)
    scored = score_nodes(nodes, leaves, params.rewards)
    write_validated(scored, SCORED_SCHEMA, out_path)
    cols = ["performance", "cost_norm", "completeness", "reward", "advantage"]
    summary = {c: float(scored[c].mean() or 0.0) for c in cols}
    summary.update({f"{c}_by_kind": {k: float(v) for k, v in scored.group_by("kind").agg(scored[c].mean()).iter_rows()}
                    for c in ("reward",)})
    summary["decisions"] = len(scored)
    return summary
