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


def two_processes(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``torchrun`` with two CPU processes on ``args`` (a script, or ``-m module ...``), one
    thread each, tracking off unless ``env`` says otherwise; it must succeed."""
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    proc = subprocess.run(
        [torchrun, "--standalone", "--nproc_per_node", "2", *args], cwd=REPO, capture_output=True, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "E3ORCH_TRACKING": "0", **env}, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.slow
def test_two_processes_really_run_and_stay_in_sync(tmp_path: Path) -> None:
    # old log-probs recomputed (as with vLLM rollouts): each process runs as many forward passes as the busiest
    params = write_tiny_params(tmp_path, train={"rounds": 1, "old_logprobs": "recompute"}, warmstart={"dagger_tasks": 4})
    assert main(["prepare", "--params", str(params)]) == 0
    # warm start with a correction round: each process runs 2 of the 4 tasks, both train on all labels
    two_processes("-m", "e3orch.cli", "warmstart", "--params", str(params), "--metrics", str(tmp_path / "ws.json"))
    (r,) = json.loads((tmp_path / "ws.json").read_text())["corrections"]
    assert r["tasks"] == 4 and r["decisions"] > 0
    # RL with tracking on: one stage run for the launch, not one per process
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    proc = two_processes("-m", "e3orch.cli", "train", "--params", str(params), "--no-resume",
                         "--metrics", str(tmp_path / "rounds.json"), E3ORCH_TRACKING="1", MLFLOW_TRACKING_URI=uri)
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


HOLD_SCRIPT = """
import json, sys
import torch
from e3orch.config import load_params
from e3orch.training.trainer import RLTrainer

params, init, out = sys.argv[1:]
trainer = RLTrainer(load_params(params), init)
acc = trainer.acc
trainer.validation = [{"round": 0, "val_accuracy": 0.6, "val_cost": 3.0}]
trainer.remember_weights()

def step():  # one real DDP step: a forward through the wrapped model, gradients all-reduced
    trainer.opt.zero_grad()
    ids = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(acc.process_index))
    acc.backward(trainer.model(input_ids=ids).logits.float().square().mean())
    trainer.opt.step()

def sums():
    return [float(x) for x in acc.gather(torch.tensor([trainer.param_checksum()], dtype=torch.float64)).tolist()]

warm = sums()
step()
moved = sums()
undone = trainer.hold({"val_accuracy": 0.5, "val_cost": 2.0})
back = sums()
opt_state = len(getattr(trainer.opt, "optimizer", trainer.opt).state)
step()
after = sums()
if acc.is_main_process:
    json.dump({"n": acc.num_processes, "warm": warm, "moved": moved, "undone": undone, "back": back,
               "after": after, "opt_state": opt_state}, open(out, "w"))
"""


@pytest.mark.slow
def test_an_undone_round_restores_the_same_weights_on_both_processes(tmp_path: Path) -> None:
    """train.hold_accuracy under two gloo processes: the undo puts the last kept weights back on
    each replica, exactly, with fresh optimizer moments, so the same DDP step from there lands on
    the same weights again, on both."""
    params = write_tiny_params(tmp_path, train={"hold_accuracy": 0.01, "validate_rounds": True, "lr": 0.01},
                               warmstart={"dagger_rounds": 0})
    assert main(["prepare", "--params", str(params)]) == 0
    assert main(["warmstart", "--params", str(params)]) == 0
    script = tmp_path / "hold.py"
    script.write_text(HOLD_SCRIPT)
    two_processes(str(script), str(params), str(tmp_path / "models/warmstart"), str(tmp_path / "hold.json"))
    r = json.loads((tmp_path / "hold.json").read_text())
    assert r["n"] == 2 and r["undone"] is False and r["opt_state"] == 0
    assert r["warm"][0] == r["warm"][1] and r["moved"][0] == r["moved"][1]
    assert r["moved"][0] != r["warm"][0]  # the step moved the weights (gradients from different batches, averaged)
    assert r["back"] == r["warm"]  # exactly the kept weights again, on both processes
    assert r["after"] == r["moved"]  # fresh Adam moments and step count: the first step, repeated exactly
