"""The Prefect flow end to end on the tiny config, under one temporary Prefect API.

The flow runs three times in a tmp working directory: the first run executes every stage (two
rollout shards in parallel), the second finds every task in the cache, the third recomputes only
the stage whose output was deleted. Task runs are read back from the API; the
stage runs are read back from the tmp MLflow store, nested under the flow's parent run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from conftest import write_tiny_params

STAGE_TASKS = ["prepare", "warmstart", "rollout-shard", "rollout-shard", "merge-rollouts", "score", "train",
               "evaluate"]


@pytest.fixture(scope="module")
def flow_runs(prefect_harness: None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from flows.pipeline import e3orch_pipeline

    work = tmp_path_factory.mktemp("flow")
    params = write_tiny_params(work)
    uri = f"sqlite:///{work / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(work)
        mp.setenv("E3ORCH_TRACKING", "1")
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        first = e3orch_pipeline(params_path=str(params), rollout_shards=2, return_state=True)
        second = e3orch_pipeline(params_path=str(params), rollout_shards=2, return_state=True)
        (work / "reports/metrics.json").unlink()
        third = e3orch_pipeline(params_path=str(params), rollout_shards=2, return_state=True)
    return {"first": first, "second": second, "third": third, "work": work, "uri": uri}


def task_runs(state: Any) -> list[Any]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    flow_run_id = UUID(str(state.state_details.flow_run_id))
    with get_client(sync_client=True) as client:
        return list(client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))))


def test_the_flow_runs_every_stage_with_parallel_shards(flow_runs: dict[str, Any]) -> None:
    state = flow_runs["first"]
    assert state.is_completed(), state
    metrics = state.result()
    assert {"e3orch", "warmstart", "heuristic"} <= set(metrics["systems"])
    assert set(metrics["transfer"]["systems"]) == set(metrics["systems"])
    runs = task_runs(state)
    assert sorted(r.name.rsplit("-", 1)[0] for r in runs if not r.name.startswith("rollout-shard")) == sorted(
        t for t in STAGE_TASKS if t != "rollout-shard")
    shards = sorted((r for r in runs if r.name.startswith("rollout-shard")), key=lambda r: r.name)
    assert [r.name for r in shards] == ["rollout-shard-0-of-2", "rollout-shard-1-of-2"]
    assert max(r.start_time for r in shards) < min(r.end_time for r in shards)  # they overlapped
    assert all(r.state.is_completed() for r in runs)
    work = flow_runs["work"]
    for out in ("data/tasks/sim_train.parquet", "models/warmstart/config.json", "data/rollouts-shards/0-of-2/nodes.parquet",
                "data/rollouts-shards/1-of-2/nodes.parquet", "data/rollouts/nodes.parquet", "data/scored.parquet",
                "models/policy/config.json", "reports/train_rounds.json", "reports/metrics.json", "reports/report.md"):
        assert (work / out).exists(), out


def test_a_second_run_is_served_from_the_cache(flow_runs: dict[str, Any]) -> None:
    state = flow_runs["second"]
    assert state.is_completed()
    runs = task_runs(state)
    assert len(runs) == len(STAGE_TASKS)
    assert {r.state.name for r in runs} == {"Cached"}
    assert state.result() == flow_runs["first"].result()


def test_executor_stages_retry_and_every_stage_caches() -> None:
    from flows.caching import StageCache
    from flows.pipeline import (
        evaluate_task,
        merge_rollouts_task,
        prepare_task,
        rollout_shard_task,
        score_task,
        train_task,
        warmstart_task,
    )

    for t in (warmstart_task, rollout_shard_task, train_task, evaluate_task):
        assert t.retries >= 1 and t.retry_delay_seconds, t.name
    for t in (prepare_task, warmstart_task, rollout_shard_task, merge_rollouts_task, score_task, train_task,
              evaluate_task):
        assert isinstance(t.cache_policy, StageCache), t.name


def test_stages_are_tracked_under_the_flow_parent(flow_runs: dict[str, Any]) -> None:
    from mlflow import MlflowClient

    client = MlflowClient(flow_runs["uri"])
    exp = client.get_experiment_by_name("e3orch")
    parents = client.search_runs([exp.experiment_id], "tags.`e3orch.role` = 'pipeline'")
    assert len(parents) == 3  # one per flow run
    first = next(p for p in parents if p.data.tags["prefect.flow_run_id"] == str(flow_runs["first"].state_details.flow_run_id))
    stages = client.search_runs([exp.experiment_id], f"tags.`mlflow.parentRunId` = '{first.info.run_id}'")
    assert sorted(r.info.run_name for r in stages) == sorted(
        ["prepare", "warmstart", "rollout[0/2]", "rollout[1/2]", "rollout", "score", "train", "evaluate"])
    assert first.info.status == "FINISHED" and "accuracy" in first.data.metrics


def test_the_ray_runner_names_its_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from flows.pipeline import task_runner

    if importlib.util.find_spec("prefect_ray") is not None:
        pytest.skip("prefect-ray is installed")
    monkeypatch.setenv("E3ORCH_TASK_RUNNER", "ray")
    with pytest.raises(ImportError, match=r"\[ray\]"):
        task_runner()
    monkeypatch.setenv("E3ORCH_TASK_RUNNER", "threads")
    assert type(task_runner()).__name__ == "ThreadPoolTaskRunner"


def test_missing_outputs_are_recomputed(flow_runs: dict[str, Any], tmp_path: Path) -> None:
    runs = {r.name.rsplit("-", 1)[0] if not r.name.startswith("rollout-shard") else r.name: r.state.name
            for r in task_runs(flow_runs["third"])}
    assert runs.pop("evaluate") == "Completed"  # its metrics.json was deleted: recomputed
    assert set(runs.values()) == {"Cached"}
    assert (flow_runs["work"] / "reports/metrics.json").exists()

    from flows.caching import stage_cache

    policy = stage_cache(out_dir=("config.json",))
    assert not policy.outputs_exist({"out_dir": str(tmp_path)})
    (tmp_path / "config.json").write_text("{}")
    assert policy.outputs_exist({"out_dir": str(tmp_path)})


def test_the_flow_runs_the_default_rl_setting_in_shards(prefect_harness: None, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """params.yaml's own setting (per_part_tiers, the greedy spine judged by probes routed as the policy
    routes) through the flow: two rollout shards, merged, scored and trained on."""
    import json

    from conftest import default_rl_sections

    from flows.pipeline import e3orch_pipeline

    sections = default_rl_sections(tmp_path)
    sections["train"].update(rounds=1)
    params = write_tiny_params(tmp_path, **sections)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("E3ORCH_TRACKING", "0")
    state = e3orch_pipeline(params_path=str(params), rollout_shards=2, return_state=True)
    assert state.is_completed()
    (r,) = json.loads((tmp_path / "reports/train_rounds.json").read_text())
    assert r["n_tasks"] == 2 and r["n_decisions"] > 0  # both shards' trees reached the update


@pytest.mark.parametrize("module", ["flows.pipeline", "flows.serve"])
def test_a_missing_or_bad_params_file_stops_before_any_flow_run(module: str, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    import importlib

    main = importlib.import_module(module).main
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  roundz: 3\n")
    for path, needle in ((tmp_path / "missing.yaml", "params file not found"), (bad, "train.roundz: unknown key")):
        with pytest.raises(SystemExit) as info:
            main(["--params", str(path)])
        assert info.value.code == 2
        assert needle in capsys.readouterr().err
