"""MLflow tracking through the real stage commands on the tiny config (tmp sqlite store).

One module-scoped run of all six commands (prepare → evaluate-all) in a tmp working directory;
then the runs are read back: one parent per params content, the stages nested under it, round
metrics with steps, one nested run per evaluated system, the policy as a logged model. A broken
tracking URI must not break a stage.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import write_tiny_params

from e3orch.cli import main
from e3orch.tracking import KEY_TAG, PARENT_TAG, ROLE_TAG, pipeline_key, repo_root, stage_run, tracking_uri

STAGES = [
    ["prepare"],
    ["warmstart", "--metrics", "reports/warmstart.json"],
    ["rollout", "--out", "data/rollouts"],
    ["score", "--rollouts", "data/rollouts", "--out", "data/scored.parquet", "--summary", "reports/score.json"],
    ["train", "--scored", "data/scored.parquet", "--leaves", "data/rollouts/leaves.parquet",
     "--metrics", "reports/train_rounds.json"],
    ["evaluate-all", "--out", "reports"],
]


@pytest.fixture(scope="module")
def tracked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Run the six commands with tracking on; yield the client, the folder and the store URI."""
    from mlflow import MlflowClient

    work = tmp_path_factory.mktemp("tracked")
    params = write_tiny_params(work)
    uri = f"sqlite:///{work / 'store' / 'mlflow.db'}"
    (work / "store").mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(work)
        mp.setenv("E3ORCH_TRACKING", "1")
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        mp.delenv("E3ORCH_PIPELINE_RUN_ID", raising=False)
        mp.delenv("DVC_ROOT", raising=False)
        for cmd in STAGES:
            assert main([cmd[0], "--params", str(params), *cmd[1:]]) == 0, cmd
        yield {"client": MlflowClient(uri), "work": work, "params": params, "uri": uri}


def runs(client: Any, filter_string: str = "") -> list[Any]:
    exp = client.get_experiment_by_name("e3orch")
    return list(client.search_runs([exp.experiment_id], filter_string=filter_string, max_results=1000))


def test_stages_nest_under_one_parent_keyed_by_params(tracked: dict[str, Any]) -> None:
    client = tracked["client"]
    parents = runs(client, f"tags.`{ROLE_TAG}` = 'pipeline'")
    assert len(parents) == 1
    parent = parents[0]
    assert parent.data.tags[KEY_TAG] and parent.info.status == "FINISHED"
    assert parent.data.params["train.rounds"] == "2" and parent.data.params["prepare.seed"] == "0"
    stages = runs(client, f"tags.`{ROLE_TAG}` = 'stage'")
    assert sorted(r.data.tags["e3orch.stage"] for r in stages) == sorted(
        ["prepare", "warmstart", "rollout", "score", "train", "evaluate"])
    assert {r.data.tags[PARENT_TAG] for r in stages} == {parent.info.run_id}
    assert {r.info.status for r in stages} == {"FINISHED"}
    assert all(r.data.params["train.lr"] for r in stages)
    # the default pool file went along with every stage that used it
    train = next(r for r in stages if r.data.tags["e3orch.stage"] == "train")
    assert "executors/default.yaml" in {a.path for a in client.list_artifacts(train.info.run_id, "executors")}


def test_round_metrics_are_logged_with_steps(tracked: dict[str, Any]) -> None:
    client = tracked["client"]
    train = runs(client, "tags.`e3orch.stage` = 'train'")[0]
    for key in ("reward", "accuracy", "cost", "kl", "performance", "completeness", "cost_norm",
                "update_tokens_per_s", "time_update_s", "time_checkpoint_s"):
        history = client.get_metric_history(train.info.run_id, key)
        assert sorted(m.step for m in history) == [1, 2], key
    # the values are the rounds' own figures (reports/train_rounds.json), round by round
    rounds = json.loads((tracked["work"] / "reports/train_rounds.json").read_text())
    for key in ("reward", "accuracy", "cost", "kl"):
        history = sorted(client.get_metric_history(train.info.run_id, key), key=lambda m: m.step)
        assert [m.value for m in history] == pytest.approx([r[key] for r in rounds]), key
    warm = runs(client, "tags.`e3orch.stage` = 'warmstart'")[0]
    assert warm.data.metrics["demonstrations"] > 0
    assert len(client.get_metric_history(warm.info.run_id, "sft_loss")) >= 1
    # the tiny config runs one correction round
    assert [m.step for m in client.get_metric_history(warm.info.run_id, "correction_agreement")] == [1]


def test_policy_is_a_logged_model(tracked: dict[str, Any]) -> None:
    import mlflow

    client = tracked["client"]
    train = runs(client, "tags.`e3orch.stage` = 'train'")[0]
    model_id = train.data.tags["e3orch.model.policy"]
    model = client.get_logged_model(model_id)
    assert model.source_run_id == train.info.run_id and str(model.status).endswith("READY")
    local = Path(mlflow.artifacts.download_artifacts(f"models:/{model_id}", dst_path=str(tracked["work"] / "dl"),
                                                     tracking_uri=tracked["uri"]))
    assert (local / "config.json").exists() and (local / "e3orch_policy.json").exists()
    # artifacts live under the store's fixed location, never in a stray ./mlruns
    assert not (tracked["work"] / "mlruns").exists()


def test_every_system_is_a_nested_run(tracked: dict[str, Any]) -> None:
    client = tracked["client"]
    evaluate = runs(client, f"tags.`e3orch.stage` = 'evaluate' and tags.`{ROLE_TAG}` = 'stage'")[0]
    systems = runs(client, f"tags.`{ROLE_TAG}` = 'system'")
    assert sorted(r.info.run_name for r in systems) == ["system:e3orch", "system:heuristic", "system:warmstart"]
    assert {r.data.tags[PARENT_TAG] for r in systems} == {evaluate.info.run_id}
    for r in systems:
        for key in ("accuracy", "cost", "makespan_s", "ie", "n", "transfer_accuracy", "transfer_cost",
                    "transfer_makespan_s", "transfer_ie", "transfer_n"):
            assert key in r.data.metrics, (r.info.run_name, key)
    metrics = json.loads((tracked["work"] / "reports/metrics.json").read_text())
    for r in systems:  # the values are metrics.json's
        name = r.info.run_name.removeprefix("system:")
        assert r.data.metrics["accuracy"] == pytest.approx(metrics["systems"][name]["accuracy"])
        assert r.data.metrics["transfer_cost"] == pytest.approx(metrics["transfer"]["systems"][name]["cost"])
    artifacts = {a.path for a in client.list_artifacts(evaluate.info.run_id)}
    assert {"metrics.json", "report.md", "plots", "executors"} <= artifacts
    parent = runs(client, f"tags.`{ROLE_TAG}` = 'pipeline'")[0]
    assert "accuracy" in parent.data.metrics and "transfer_ie" in parent.data.metrics
    # the training targets met, as metrics.json judged them
    targets = metrics["targets"]
    for run in (evaluate, parent):
        assert run.data.metrics["targets_met"] == targets["met"] and run.data.metrics["targets_judged"] == targets["judged"]


def test_other_params_get_another_parent_and_the_same_params_reuse_it(tracked: dict[str, Any]) -> None:
    client, work = tracked["client"], tracked["work"]
    same = main(["prepare", "--params", str(tracked["params"])])
    other = write_tiny_params(work / "variant", rewards={"w_cost": 0.5})
    assert same == 0 and main(["prepare", "--params", str(other)]) == 0
    parents = runs(client, f"tags.`{ROLE_TAG}` = 'pipeline'")
    assert len(parents) == 2
    keys = {p.data.tags[KEY_TAG] for p in parents}
    assert len(keys) == 2
    from e3orch.config import load_params

    assert pipeline_key(load_params(other)) in keys
    prepares = runs(client, "tags.`e3orch.stage` = 'prepare'")
    assert len(prepares) == 3


def test_a_failing_stage_marks_its_runs_failed(tracked: dict[str, Any]) -> None:
    from e3orch.config import load_params

    client = tracked["client"]
    params = load_params(tracked["params"], {"train.seed": 7})
    with pytest.raises(RuntimeError), stage_run("train", params) as tracker:
        raise RuntimeError("boom")
    run = client.get_run(tracker.run_id)
    assert run.info.status == "FAILED"
    assert client.get_run(tracker.parent_run_id).info.status == "FAILED"


def test_an_explicit_parent_wins(tracked: dict[str, Any]) -> None:
    from e3orch.config import load_params
    from e3orch.tracking import pipeline_run

    client = tracked["client"]
    with pipeline_run(load_params(tracked["params"]), run_name="flow-run") as parent_id:
        assert os.environ["E3ORCH_PIPELINE_RUN_ID"] == parent_id
        with stage_run("score", load_params(tracked["params"])) as tracker:
            pass
    assert "E3ORCH_PIPELINE_RUN_ID" not in os.environ
    assert client.get_run(tracker.run_id).data.tags[PARENT_TAG] == parent_id
    assert client.get_run(parent_id).info.status == "FINISHED"


@pytest.mark.parametrize("uri", ["sqlite:///{tmp}/a-file/mlflow.db", "http://127.0.0.1:9", "nosuchscheme://x"])
def test_a_broken_tracking_uri_does_not_break_the_stage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        caplog: pytest.LogCaptureFixture, uri: str) -> None:
    params = write_tiny_params(tmp_path)
    (tmp_path / "a-file").write_text("a file where the store's folder should be\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("E3ORCH_TRACKING", "1")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri.format(tmp=tmp_path))
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    with caplog.at_level(logging.WARNING, logger="e3orch.tracking"):
        assert main(["prepare", "--params", str(params)]) == 0
    assert (tmp_path / "data/tasks/sim_train.parquet").exists()
    assert "MLflow tracking is off" in caplog.text


def test_tracking_off_and_default_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    params = write_tiny_params(tmp_path)
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("DVC_ROOT", raising=False)
    assert repo_root() == tmp_path.resolve()
    assert tracking_uri() == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    monkeypatch.setenv("E3ORCH_TRACKING", "0")
    assert main(["prepare", "--params", str(params)]) == 0
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "sub" / "mlruns").exists()


def test_only_the_main_process_of_a_launch_tracks(tracked: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """torchrun and accelerate launch set RANK; rank 1 of the same stage opens no run."""
    client, params = tracked["client"], tracked["params"]
    monkeypatch.setenv("E3ORCH_TRACKING", "1")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracked["uri"])
    before = len(runs(client))
    from e3orch.config import load_params

    p = load_params(params)
    monkeypatch.setenv("RANK", "1")
    with stage_run("train", p) as tracker:
        tracker.log_metrics({"x": 1.0})
    assert tracker.run_id is None and len(runs(client)) == before
    monkeypatch.setenv("RANK", "0")
    with stage_run("train", p) as tracker:
        pass
    assert tracker.run_id is not None and len(runs(client)) == before + 1
