"""Two real gloo processes train the same policy and stay in sync (torchrun on CPU)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, write_tiny_params

from e3orch.cli import main
from e3orch.config import load_params


@pytest.mark.slow
def test_two_processes_really_run_and_stay_in_sync(tmp_path: Path) -> None:
    params = write_tiny_params(tmp_path, train={"rounds": 1}, warmstart={"dagger_tasks": 4})
    assert main(["prepare", "--params", str(params)]) == 0
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "E3ORCH_TRACKING": "0"}
    # warm start with a correction round: each process runs 2 of the 4 tasks, both train on all labels
    proc = subprocess.run(
        [torchrun, "--standalone", "--nproc_per_node", "2", "-m", "e3orch.cli", "warmstart", "--params", str(params),
         "--metrics", str(tmp_path / "ws.json")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (r,) = json.loads((tmp_path / "ws.json").read_text())["corrections"]
    assert r["tasks"] == 4 and r["decisions"] > 0
    # RL with tracking on: one stage run for the launch, not one per process
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    proc = subprocess.run(
        [torchrun, "--standalone", "--nproc_per_node", "2", "-m", "e3orch.cli", "train", "--params", str(params),
         "--no-resume", "--metrics", str(tmp_path / "rounds.json")],
        cwd=REPO, env={**env, "E3ORCH_TRACKING": "1", "MLFLOW_TRACKING_URI": uri}, capture_output=True, text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("wrote ") == 1  # the report, from the main process only
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("e3orch")
    train_runs = client.search_runs([exp.experiment_id], filter_string="tags.`e3orch.stage` = 'train'")
    assert len(train_runs) == 1 and train_runs[0].info.status == "FINISHED"
    (rnd,) = json.loads((tmp_path / "rounds.json").read_text())
    assert rnd["n_tasks"] == load_params(params).rollout.tasks_per_round  # both processes' shares, not rank 0's
    sync = json.loads((tmp_path / "models/checkpoints/sync.json").read_text())
    assert sync["num_processes"] == 2
    a, b = sync["param_checksums"]
    assert a == b
    assert (tmp_path / "models/policy/config.json").exists()
    from transformers import AutoModelForCausalLM

    warm = AutoModelForCausalLM.from_pretrained(tmp_path / "models/warmstart")
    assert float(sum(p.detach().double().sum() for p in warm.parameters())) != a  # the update changed the weights
