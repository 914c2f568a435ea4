"""``e3orch rollout``: tree-structured rollouts of a policy → nodes/leaves Parquet (DVC stage)."""

from __future__ import annotations

import argparse
import json

from e3orch.commands.common import add_params_arg, params_from, resolve_pool_path, sim_tasks
from e3orch.evaluation.systems import check_local_policy


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_params_arg(p)
    p.add_argument("--policy", default=None, help="policy checkpoint (default: warmstart.out_dir)")
    p.add_argument("--executors", default=None, help="pool (default: evaluate.executors)")
    p.add_argument("--out", default=None, help="output folder (default: rollout.out_dir)")
    p.add_argument("--round", type=int, default=0)
    p.add_argument("--shard", default="0/1", help="I/N: run only shard I of N (e.g. 1/4)")


def run(args: argparse.Namespace) -> int:
    from e3orch.executors.base import load_pool_specs
    from e3orch.rollout.stage import rollout_stage
    from e3orch.tracking import stage_run

    try:
        i, n = (int(x) for x in args.shard.split("/"))
    except ValueError:
        raise ValueError(f"--shard must look like I/N (e.g. 0/4), got {args.shard!r}") from None
    if not 0 <= i < n:
        raise ValueError(f"--shard {args.shard}: needs 0 <= I < N")
    params = params_from(args)
    pool_path = resolve_pool_path(args.executors or params.evaluate.executors)
    specs = load_pool_specs(pool_path)
    policy = args.policy or params.warmstart.out_dir
    check_local_policy(policy, "--policy", "run `e3orch warmstart` first, or pass --policy DIR", local=args.policy is None)
    with stage_run("rollout", params, run_name=f"rollout[{i}/{n}]" if n > 1 else None,
                   tags={"e3orch.shard": f"{i}/{n}", "e3orch.round": args.round}) as tracker:
        summary = rollout_stage(params, policy, sim_tasks(params, "train"), specs,
                                args.out or params.rollout.out_dir, round_id=args.round, shard=(i, n))
        tracker.log_metrics(summary)
        tracker.log_pool(pool_path)
    print(json.dumps(summary, indent=2))
    return 0
