"""The E³-Orch pipeline as a Prefect flow: the same stage functions ``dvc repro`` runs, as tasks.

prepare → warmstart → rollout (``rollout_shards`` shard tasks in parallel, then merged) →
score → train → evaluate. Data passes through files exactly as in ``dvc.yaml``; each task
returns the path it wrote, which orders the tasks and keys their caches (:mod:`flows.caching`).
Tasks that call executors (warm-start demonstrations, rollouts, training rounds, evaluation)
retry; every stage run is tracked to MLflow under one parent run per flow run.

Task runner: threads locally; ``E3ORCH_TASK_RUNNER=ray`` runs the tasks on Ray
(``pip install -e '.[ray]'``; ``E3ORCH_RAY_ADDRESS`` joins an existing cluster, whose workers
must see the same files, e.g. a shared file system).

What this file deliberately does not do: any stage logic. Run it with
``python -m flows.pipeline [--params params.yaml] [--shards N] [--set key=value ...]`` or serve it
on a schedule with :mod:`flows.serve`.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import yaml
from prefect import flow, task
from prefect.runtime import flow_run
from prefect.task_runners import ThreadPoolTaskRunner

from e3orch.commands.common import resolve_pool_path, sim_tasks, validation_tasks
from e3orch.commands.prepare import prepare
from e3orch.config import Params, load_params, load_params_file
from e3orch.evaluation.stage import evaluate_stage
from e3orch.executors.base import ExecutorSpec, load_pool_specs
from e3orch.rollout.stage import merge_rollouts, rollout_stage, score_stage
from e3orch.tracking import pipeline_run, stage_run
from e3orch.training.trainer import train_rl
from e3orch.training.warmstart import warmstart
from flows.caching import stage_cache, submit

# Executors fail transiently (endpoints time out, rate limits); stages that call them retry.
EXECUTOR_RETRIES: dict[str, Any] = {"retries": 2, "retry_delay_seconds": [10, 60]}


def task_runner() -> Any:
    """``ThreadPoolTaskRunner`` unless ``E3ORCH_TASK_RUNNER=ray``."""
    kind = os.environ.get("E3ORCH_TASK_RUNNER", "threads").strip().lower()
    if kind == "ray":
        try:
            from prefect_ray import RayTaskRunner
        except ImportError as exc:
            raise ImportError("E3ORCH_TASK_RUNNER=ray needs the optional `ray` extra: "
                              "pip install -e '.[ray]' (prefect-ray and ray)") from exc
        return RayTaskRunner(address=os.environ.get("E3ORCH_RAY_ADDRESS") or None)
    if kind in ("threads", "thread", ""):
        workers = os.environ.get("E3ORCH_TASK_WORKERS")
        return ThreadPoolTaskRunner(max_workers=int(workers) if workers else None)
    raise ValueError(f"E3ORCH_TASK_RUNNER={kind!r}: use 'threads' (default) or 'ray'")


@task(name="prepare", cache_policy=stage_cache(out_dir=("sim_train.parquet", "sim_eval.parquet")))
def prepare_task(params: Params, out_dir: str, tracking_parent: str | None = None) -> dict[str, str]:
    with stage_run("prepare", params, parent_run_id=tracking_parent):
        return {split: str(path) for split, path in prepare(params, out_dir).items()}


@task(name="warmstart", **EXECUTOR_RETRIES, cache_policy=stage_cache(out_dir=("config.json",)))
def warmstart_task(params: Params, specs: list[ExecutorSpec], task_files: dict[str, str], out_dir: str,
                   tracking_parent: str | None = None) -> str:
    with stage_run("warmstart", params, parent_run_id=tracking_parent) as tracker:
        out, stats, info = warmstart(params, sim_tasks(params, "train"), specs, out_dir=out_dir)
        tracker.log_metrics(info)
        tracker.log_curve("sft_loss", stats.losses)
        tracker.log_policy(out, name="warmstart")
    return str(out)


@task(name="rollout-shard", task_run_name="rollout-shard-{index}-of-{count}", **EXECUTOR_RETRIES,
      cache_policy=stage_cache(out_dir=("nodes.parquet", "leaves.parquet")))
def rollout_shard_task(params: Params, specs: list[ExecutorSpec], task_files: dict[str, str], policy_dir: str,
                       out_dir: str, index: int, count: int, tracking_parent: str | None = None) -> str:
    with stage_run("rollout", params, parent_run_id=tracking_parent, run_name=f"rollout[{index}/{count}]",
                   tags={"e3orch.shard": f"{index}/{count}", "e3orch.round": 0}) as tracker:
        tracker.log_metrics(rollout_stage(params, policy_dir, sim_tasks(params, "train"), specs, out_dir,
                                          round_id=0, shard=(index, count)))
    return out_dir


@task(name="merge-rollouts", cache_policy=stage_cache(out_dir=("nodes.parquet", "leaves.parquet")))
def merge_rollouts_task(params: Params, shard_dirs: list[str], out_dir: str, tracking_parent: str | None = None) -> str:
    with stage_run("rollout", params, parent_run_id=tracking_parent, tags={"e3orch.shards": len(shard_dirs)}) as tracker:
        tracker.log_metrics(merge_rollouts(shard_dirs, out_dir))
    return out_dir


@task(name="score", cache_policy=stage_cache(out_path=""))
def score_task(params: Params, rollout_dir: str, out_path: str, tracking_parent: str | None = None) -> str:
    with stage_run("score", params, parent_run_id=tracking_parent) as tracker:
        tracker.log_metrics(score_stage(params, rollout_dir, out_path))
    return out_path


@task(name="train", **EXECUTOR_RETRIES, cache_policy=stage_cache(out_dir=("config.json",), rounds_path=""))
def train_task(params: Params, specs: list[ExecutorSpec], task_files: dict[str, str], init_dir: str,
               scored_path: str, leaves_path: str, out_dir: str, rounds_path: str,
               tracking_parent: str | None = None) -> str:
    with stage_run("train", params, parent_run_id=tracking_parent) as tracker:
        out, history = train_rl(params, sim_tasks(params, "train"), specs, init_dir=init_dir, out_dir=out_dir,
                                on_round=tracker.log_round, first_scored=scored_path, first_leaves=leaves_path,
                                val_tasks=validation_tasks(params))
        Path(rounds_path).parent.mkdir(parents=True, exist_ok=True)
        Path(rounds_path).write_text(json.dumps([m.to_dict() for m in history], indent=2) + "\n")
        tracker.log_artifact(rounds_path)
        tracker.log_policy(out, name="policy")
    return str(out)


@task(name="evaluate", **EXECUTOR_RETRIES, cache_policy=stage_cache(out_dir=("metrics.json", "report.md")))
def evaluate_task(params: Params, task_files: dict[str, str], policies: dict[str, str], out_dir: str,
                  tracking_parent: str | None = None) -> dict[str, Any]:
    with stage_run("evaluate", params, parent_run_id=tracking_parent) as tracker:
        metrics = evaluate_stage(params, sim_tasks(params, params.evaluate.split), policies, out_dir)
        tracker.log_evaluation(metrics, out_dir)
        tracker.log_pool(resolve_pool_path(params.evaluate.executors))
        tracker.log_pool(resolve_pool_path(params.evaluate.transfer_executors))
    return metrics


@flow(name="e3orch-pipeline", task_runner=task_runner())
def e3orch_pipeline(params_path: str = "params.yaml", overrides: dict[str, Any] | None = None,
                    rollout_shards: int = 2) -> dict[str, Any]:
    """prepare → warmstart → rollout shards → merge → score → train → evaluate; returns metrics.json."""
    params = load_params(params_path, overrides)
    specs = load_pool_specs(resolve_pool_path(params.evaluate.executors))
    rollouts = Path(params.rollout.out_dir)
    shard_root = rollouts.with_name(rollouts.name + "-shards")
    reports = Path(params.evaluate.out_dir)
    with pipeline_run(params, run_name=f"prefect:{flow_run.name}",
                      tags={"prefect.flow_run_id": flow_run.id, "prefect.params_path": params_path}) as parent:
        tasks = submit(prepare_task, params, params.prepare.out_dir, parent)
        warm = submit(warmstart_task, params, specs, tasks, params.warmstart.out_dir, parent)
        shards = [submit(rollout_shard_task, params, specs, tasks, warm,
                         str(shard_root / f"{i}-of-{rollout_shards}"), i, rollout_shards, parent)
                  for i in range(rollout_shards)]
        merged = submit(merge_rollouts_task, params, shards, str(rollouts), parent)
        scored = submit(score_task, params, merged, str(rollouts.with_name("scored.parquet")), parent)
        policy = submit(train_task, params, specs, tasks, warm, scored, str(rollouts / "leaves.parquet"),
                        params.train.out_dir, str(reports / "train_rounds.json"), parent)
        metrics = submit(evaluate_task, params, tasks, {"e3orch": policy, "warmstart": warm}, str(reports), parent)
        return metrics.result()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Run the E³-Orch pipeline once as a Prefect flow.")
    p.add_argument("--params", default=None, help="params file (default: ./params.yaml, all defaults when absent)")
    p.add_argument("--shards", type=int, default=2, help="parallel rollout shards")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a param (YAML value), e.g. --set rewards.w_cost=0.5")
    args = p.parse_args(argv)
    overrides = {k: yaml.safe_load(v) for k, _, v in (s.partition("=") for s in args.set)}
    try:  # bad params: one line now, not a failed flow run later
        if args.params is None:
            load_params("params.yaml", overrides)
        else:
            load_params_file(args.params, overrides)
    except (ValueError, OSError) as exc:
        p.error(str(exc))
    e3orch_pipeline(params_path=args.params or "params.yaml", overrides=overrides or None, rollout_shards=args.shards)


if __name__ == "__main__":
    main()
