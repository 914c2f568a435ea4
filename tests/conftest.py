"""Shared test set-up: tracking off by default, one torch thread, and a tiny pipeline config.

``write_tiny_params(dir)`` writes a params.yaml whose whole pipeline (prepare → warmstart →
rollout → score → train → evaluate) runs in about ten seconds on one CPU thread, with every
output folder under ``dir``; the ``tiny_params_file`` fixture is one such file per session.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]

# Tests of other modules must not write mlflow.db into the checkout; tests of tracking turn it on
# with their own MLFLOW_TRACKING_URI. Torch at one thread stays steady on 2 shared cores.
os.environ.setdefault("E3ORCH_TRACKING", "0")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
if str(REPO) not in sys.path:  # `flows/` is a folder at the repository root, not an installed package
    sys.path.insert(0, str(REPO))


# configs/params-compact.yaml's tree shape: sampled trees with sibling branching every third decision
SAMPLED_TREES: dict[str, Any] = {
    "branch_milestone": 2, "branch_plan": 2, "branch_start": 2, "branch_stride": 3, "branch_depth": 12, "trunk": "sample",
    "slot_alternatives": False, "milestone_flips": "all", "flip_below": 1.0, "spine": False, "continuation": "policy", "probes": 4,
    "probe_routing": "rule", "shared_noise": False, "common_executor_noise": False, "as_is_share": 0.0,
}


SIBLING_REWARDS: dict[str, Any] = {"w_cost": 0.01, "cost_unit": 0.0, "estimator": "sibling", "normalize_std": True,
                                    "advantage_clip": None}


def load_script(name: str) -> Any:
    """``scripts/<name>.py`` as a module (registered in ``sys.modules``, where a dataclass of it
    resolves its annotations)."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def sampled_rollout(**values: Any) -> Any:
    """A RolloutConfig from configs/params-compact.yaml's sampled trees (24 tasks, 8 leaves) and ``values``:
    the unit tests of tree shapes state what they change from that, not from params.yaml's probes."""
    from e3orch.config import RolloutConfig

    return RolloutConfig(**{**SAMPLED_TREES, "tasks_per_round": 24, "leaf_budget": 8, **values})


def sibling_rewards(**values: Any) -> Any:
    """A RewardsConfig from configs/params-compact.yaml's sibling credit and ``values``."""
    from e3orch.config import RewardsConfig

    return RewardsConfig(**{**SIBLING_REWARDS, **values})


def default_rl_sections(root: str | Path) -> dict[str, dict[str, Any]]:
    """Sections for :func:`write_tiny_params` that put back params.yaml's own prompt and menu ranks,
    warm-start teachers, tree shape, rewards and update knobs on the tiny sizes (fewer probes and leaves)."""
    from e3orch.config import Params

    p = Params()
    keep = {"tasks_per_round": 2, "leaf_budget": 8, "probes": 2, "generated_pool_share": 0.5,
            "out_dir": str(Path(root).resolve() / "data/rollouts")}
    return {
        "policy": {"prompt": p.policy.prompt, "menu_rank": p.policy.menu_rank},
        "warmstart": {"explore_accept": list(p.warmstart.explore_accept)},
        "rollout": {**{k: getattr(p.rollout, k) for k in SAMPLED_TREES}, "branch_milestone": 4, "branch_plan": 4, **keep},
        "rewards": {k: getattr(p.rewards, k) for k in ("cost_unit", "estimator", "normalize_std", "advantage_clip")},
        "train": {"clip_eps_high": p.train.clip_eps_high, "ppo_epochs": p.train.ppo_epochs},
    }


def trainer_weights(trainer: Any) -> dict[str, Any]:
    """A copy of an RLTrainer's weights, by name."""
    return {k: v.detach().clone() for k, v in trainer.acc.unwrap_model(trainer.model).state_dict().items()}


def same_weights(a: dict[str, Any], b: dict[str, Any]) -> bool:
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def rule_backend(answer: Any) -> Any:
    """A policy backend whose answer to each prompt is ``answer(prompt)``: a stand-in policy with a
    known rule, for what surrounds a policy (orchestrators, scripts). ``calls`` records each
    generate call's prompts."""
    from e3orch.policy.backends.base import Generation, PolicyBackend

    class RuleBackend(PolicyBackend):
        name = "rule"

        def __init__(self) -> None:
            self.calls: list[list[str]] = []

        def count_tokens(self, text: str) -> int:
            return len(text.split())

        def score(self, prompts, completions):  # type: ignore[no-untyped-def]
            return [[0.0] for _ in prompts]

        def generate(self, prompts, *, n=1, temperature=1.0, top_p=1.0, max_new_tokens=64, seed=None,  # type: ignore[no-untyped-def]
                     min_new_tokens=0, row_seeds=None):
            self.calls.append(list(prompts))
            return [[Generation(answer(p))] for p in prompts]

    return RuleBackend()


def optimizer_step(trainer: Any) -> None:
    """One real optimizer step of an RLTrainer (on the weights' squared sum): the weights move and
    the optimizer has moments."""
    model = trainer.acc.unwrap_model(trainer.model)
    trainer.opt.zero_grad()
    sum(p.square().sum() for p in model.parameters()).backward()
    trainer.opt.step()


def tiny_params(root: str | Path) -> dict[str, Any]:
    """The tiny config as a dict (outputs under ``root``); callers may tweak it before writing.

    Besides its sizes it fixes knobs the tests rely on (every episode in the test's own process, a teacher mix with every kind of teacher,
    a learning rate at which two rounds visibly move the weights, no validation split, and the
    sampled trees judged by sibling leaves on the compact prompt taught by the highest menu rank
    that most tests exercise — as configs/params-compact.yaml), so that retuning params.yaml, whose
    values are the code's defaults, does not change what they test. ``default_rl_sections`` gives params.yaml's own
    prompt, rollout, reward and update knobs instead."""
    d = Path(root).resolve()
    return {
        "prepare": {"seed": 0, "train_per_domain": 3, "eval_per_domain": 2, "val_per_domain": 0, "domains": ["math", "table"],
                    "out_dir": str(d / "data/tasks")},
        "evaluate": {"limit": 2, "single_executors": False, "baselines": ["heuristic"], "generated_pools": 1,
                     "executors": str(REPO / "configs/executors/default.yaml"),
                     "transfer_executors": str(REPO / "configs/executors/transfer.yaml"),
                     "out_dir": str(d / "reports")},
        "policy": {"init_dir": str(d / "models/init"), "threads": 1, "workers": 1, "tokenizer_tasks": 10, "max_new_tokens_plan": 48,
                   "temperature": 1.0, "prompt": "compact", "menu_rank": "highest",
                   "model": {"vocab_size": 400, "hidden_size": 32, "num_layers": 1, "num_heads": 2,
                             "intermediate_size": 64}},
        "warmstart": {"tasks": 6, "epochs": 0.3, "plan_epochs": 1.0, "tokens_per_batch": 2048, "dagger_rounds": 1,
                      "dagger_tasks": 3,
                      "teachers": {"heuristic": 0.4, "explore": 0.3, "sequential": 0.1, "upfront": 0.1, "random": 0.05,
                                   "single": 0.05},
                      "generated_pool_share": 0.5, "explore_accept": [0.6, 0.6],
                      "out_dir": str(d / "models/warmstart")},
        "rollout": {"tasks_per_round": 2, "leaf_budget": 4, "generated_pool_share": 0.5, **SAMPLED_TREES,
                    "out_dir": str(d / "data/rollouts")},
        "rewards": {**SIBLING_REWARDS, "w_cost": 0.3},
        "train": {"rounds": 2, "minibatches": 1, "lr": 5e-4, "validate_rounds": False, "select": "last",
                  "hold_cost": None, "clip_eps_high": None, "ppo_epochs": 1,
                  "out_dir": str(d / "models/policy"),
                  "checkpoint_dir": str(d / "models/checkpoints")},
    }


def write_tiny_params(root: str | Path, **sections: dict[str, Any]) -> Path:
    """Write the tiny params.yaml into ``root`` (keyword sections update the defaults); its path."""
    data = tiny_params(root)
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    path = Path(root) / "params.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def tiny_params_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_params(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def tiny_init_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the tiny params.yaml, its task tables and ``init-policy``'s model (policy.init_dir)."""
    from e3orch.cli import main

    root = tmp_path_factory.mktemp("tiny-init")
    params = write_tiny_params(root)
    assert main(["prepare", "--params", str(params)]) == 0
    assert main(["init-policy", "--params", str(params)]) == 0
    return root



@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One temporary Prefect API for the whole session (starting one costs ~12 s).

    Task results and cache records go to a temporary folder, not ``~/.prefect/storage``.
    """
    from prefect.settings import PREFECT_LOCAL_STORAGE_PATH, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    storage = tmp_path_factory.mktemp("prefect-storage")
    with prefect_test_harness(server_startup_timeout=60), temporary_settings({PREFECT_LOCAL_STORAGE_PATH: storage}):
        yield
