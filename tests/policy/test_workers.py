"""policy.workers: a round's tasks shared out between processes. A worker's share is exactly what
this process would roll out (or validate) for those tasks with the weights it was sent."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import torch

from e3orch.commands.common import resolve_pool_path, sim_tasks
from e3orch.config import PolicyConfig, load_params
from e3orch.executors.base import load_pool_specs
from e3orch.policy.backends.base import backend_from_params
from e3orch.policy.workers import PolicyWorkers, worker_count
from e3orch.rollout.tree import RolloutResult, TreeRollout, rollout_shares
from e3orch.training.trainer import _validation_share, validate_policy


class _OneProcess:
    process_index, num_processes = 0, 1


def _rows(result: RolloutResult) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return [asdict(n) for n in result.nodes], [asdict(x) for x in result.leaves]


def _fails(backend: Any, share: list[int], index: int) -> list[int]:
    if index:
        raise ValueError(f"share {index} of {share}")
    return share


@pytest.mark.parametrize(("values", "processes", "expected"), [
    ({"workers": 3, "device": "cpu"}, 1, 3),
    ({"workers": 1, "device": "cpu"}, 1, 1),
    ({"workers": 0, "device": "cpu"}, 1, os.cpu_count()),
    ({"workers": 2, "device": "cpu"}, 2, 1),          # Accelerate already splits the tasks between processes
    ({"workers": 2, "backend": "vllm"}, 1, 1),        # a server batches every process's requests
    ({"workers": 2, "device": "cuda"}, 1, 1),         # one process keeps a GPU busy
    ({"workers": 2, "device": "mps"}, 1, 1),
    ({"workers": 2, "device": "auto"}, 1, 1 if torch.cuda.is_available() else 2),  # auto: the CPU without CUDA
])
def test_worker_count(values: dict[str, Any], processes: int, expected: int) -> None:
    assert worker_count(PolicyConfig(**values), training_processes=processes) == expected


def test_a_workers_share_is_what_this_process_rolls_out_with_the_weights_it_was_sent(tiny_init_root: Path) -> None:
    params = load_params(tiny_init_root / "params.yaml", {"policy.workers": 2})
    specs = load_pool_specs(resolve_pool_path(params.evaluate.executors))
    tasks = sim_tasks(params, "train")[:4]
    backend = backend_from_params(params.policy, params.policy.init_dir)
    # this process's weights move away from the folder the worker loads (as an RL update moves them)
    with torch.no_grad():
        g = torch.Generator().manual_seed(0)
        for p in backend.model.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=g))
    weights = {k: v.clone() for k, v in backend.model.state_dict().items()}
    with PolicyWorkers(params.policy, params.policy.init_dir, 2) as workers:
        merged = rollout_shares(backend, params, tasks, specs, round_id=1, seed=3, workers=workers, weights=weights)
        # no weights: the worker keeps the ones it was sent
        stale = rollout_shares(backend, params, tasks, specs, round_id=1, seed=3, workers=workers)
        with pytest.raises(ValueError, match=r"share 1 of \[2\]"):  # a worker's failure reaches the caller
            workers.map_shares(_fails, backend, [1, 2, 3])
    alone = [TreeRollout.from_params(backend, params).run(tasks[i::2], specs, round_id=1, seed=3, stream=i)
             for i in range(2)]
    assert _rows(merged) == _rows(RolloutResult.merge(alone))
    assert _rows(stale) == _rows(merged)
    assert merged.trees.keys() == {f"r1:{t.task_id}" for t in tasks}
    assert merged.generated_tokens == sum(r.generated_tokens for r in alone)
    # the warm start's own weights give other trees: the worker generated with the ones it was sent
    fresh = backend_from_params(params.policy, params.policy.init_dir)
    other = TreeRollout.from_params(fresh, params).run(tasks[1::2], specs, round_id=1, seed=3, stream=1)
    assert _rows(other) != _rows(alone[1])


def test_share_streams_differ_and_share_zero_keeps_a_single_process_stream(tiny_init_root: Path) -> None:
    # tiny params sample every decision (trunk: sample): the stream decides the draws
    params = load_params(tiny_init_root / "params.yaml")
    specs = load_pool_specs(resolve_pool_path(params.evaluate.executors))
    tasks = sim_tasks(params, "train")[:2]
    backend = backend_from_params(params.policy, params.policy.init_dir)
    engine = TreeRollout.from_params(backend, params)
    plain = engine.run(tasks, specs, seed=5)
    zero, one = (engine.run(tasks, specs, seed=5, stream=s) for s in (0, 1))
    assert _rows(plain) == _rows(zero) != _rows(one)


def test_validation_across_workers_is_each_shares_own_episodes(tiny_init_root: Path) -> None:
    params = load_params(tiny_init_root / "params.yaml", {"policy.workers": 2})
    specs = load_pool_specs(resolve_pool_path(params.evaluate.executors))
    tasks = sim_tasks(params, "train")[:6]
    backend = backend_from_params(params.policy, params.policy.init_dir)
    with PolicyWorkers(params.policy, params.policy.init_dir, 2) as workers:
        figures = validate_policy(backend, params, tasks, specs, _OneProcess(), workers=workers)
    rows = _validation_share(backend, tasks[0::2], 0, params, specs) + _validation_share(backend, tasks[1::2], 1, params, specs)
    assert len(rows) == 2 * len(tasks)  # every task on the training pool and on its own random one
    assert figures["val_accuracy"] == pytest.approx(sum(c for _, c, _ in rows) / len(rows))
    assert figures["val_cost"] == pytest.approx(sum(c for *_, c in rows) / len(rows))
    assert figures == validate_policy(backend, params, tasks, specs, _OneProcess())  # the same episodes in one process


def test_workers_need_a_second_process(tiny_init_root: Path) -> None:
    params = load_params(tiny_init_root / "params.yaml")
    with pytest.raises(ValueError, match="at least two"):
        PolicyWorkers(params.policy, params.policy.init_dir, 1)


def test_a_script_without_a_main_guard_is_told_what_to_do(tiny_init_root: Path, tmp_path: Path) -> None:
    """Spawned workers import the main module: an unguarded script would start them again in each."""
    import subprocess
    import sys

    script = tmp_path / "unguarded.py"
    script.write_text(
        "from e3orch.config import load_params\n"
        "from e3orch.policy.workers import PolicyWorkers\n"
        f"params = load_params({str(tiny_init_root / 'params.yaml')!r})\n"
        "PolicyWorkers(params.policy, params.policy.init_dir, 2).start()\n")
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert 'under `if __name__ == "__main__":`' in run.stderr.splitlines()[-1]
