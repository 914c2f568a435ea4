"""warmstart.select: best — the weights written are the validation split's most accurate of those
after cloning and after each correction round, and they are exactly those weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from e3orch.config import ConfigError, load_params, parse_params
from tests.conftest import write_tiny_params


def test_select_best_writes_the_most_accurate_weights_seen_on_validation(tmp_path: Path) -> None:
    from e3orch.cli import main
    from e3orch.commands.common import sim_tasks
    from e3orch.executors.base import load_pool_specs
    from e3orch.policy.backends.hf import TransformersBackend
    from e3orch.training.trainer import validate_policy

    path = write_tiny_params(tmp_path, prepare={"val_per_domain": 2}, warmstart={"dagger_rounds": 2, "select": "best"})
    assert main(["prepare", "--params", str(path)]) == 0
    assert main(["warmstart", "--params", str(path), "--metrics", str(tmp_path / "ws.json")]) == 0
    info = json.loads((tmp_path / "ws.json").read_text())
    entries = info["validation"]
    assert [v["round"] for v in entries] == [0, 1, 2]
    assert set(entries[0]["val_pools"]) == {"training", "randomized"}
    best = max(entries, key=lambda v: (v["val_accuracy"], -v["val_cost"], v["round"]))  # ties: the later
    assert info["kept_round"] == best["round"]
    # the written weights decide exactly as the kept ones did (the tiny policy's rounds may all tie:
    # the next test checks the choice and the restore on rounds that differ)
    params = load_params(path)
    backend = TransformersBackend(str(tmp_path / "models/warmstart"))

    class One:  # one process
        process_index, num_processes = 0, 1

    specs = load_pool_specs(params.evaluate.executors)
    again = validate_policy(backend, params, sim_tasks(params, "val"), specs, One())
    assert (again["val_accuracy"], again["val_cost"]) == pytest.approx((best["val_accuracy"], best["val_cost"]))


def test_best_round_keeps_the_most_accurate_then_cheaper_then_later_weights_and_restores_them() -> None:
    """BestRound on a one-weight network whose validation accuracy is its weight (cost: its bias)."""
    import torch
    from accelerate import Accelerator

    from e3orch.training.warmstart import BestRound

    net = torch.nn.Linear(1, 1)
    keeper = BestRound(net, Accelerator(cpu=True), lambda m: {"val_accuracy": round(m.weight.item(), 6),
                                                               "val_cost": round(m.bias.item(), 6)})

    def after(rnd: int, accuracy: float, cost: float) -> None:
        with torch.no_grad():
            net.weight.fill_(accuracy)
            net.bias.fill_(cost)
        keeper(rnd)

    after(0, 0.5, 2.0)
    after(1, 0.7, 2.0)
    after(2, 0.6, 1.0)
    assert keeper.restore() == 1 and (net.weight.item(), net.bias.item()) == pytest.approx((0.7, 2.0))
    after(3, 0.7, 1.5)  # as accurate, cheaper
    after(4, 0.7, 1.5)  # a tie: the later
    after(5, 0.4, 0.5)
    assert keeper.restore() == 4 and (net.weight.item(), net.bias.item()) == pytest.approx((0.7, 1.5))
    assert [e["round"] for e in keeper.entries] == [0, 1, 2, 3, 4, 5]
    after(6, 0.9, 3.0)  # the last is the best: nothing to load
    assert keeper.restore() == 6 and net.weight.item() == pytest.approx(0.9)


def test_select_best_needs_a_validation_split() -> None:
    with pytest.raises(ConfigError, match="warmstart.select: best runs the validation split; set prepare.val_per_domain > 0"):
        parse_params({"prepare": {"val_per_domain": 0}, "warmstart": {"select": "best"}})
    parse_params({"prepare": {"val_per_domain": 0}, "warmstart": {"select": "best", "dagger_rounds": 0}})  # nothing to choose
    with pytest.raises(ConfigError, match="warmstart.select"):
        parse_params({"warmstart": {"select": "first"}})
