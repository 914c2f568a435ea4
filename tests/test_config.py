"""The typed, frozen params: defaults, the repository's params.yaml, and errors that name the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic
import pytest

from e3orch.config import EngineConfig, Params, load_params, parse_params
from e3orch.executors.base import ConfigError

REPO = Path(__file__).resolve().parents[1]


def test_defaults_load_without_a_file(tmp_path: Path) -> None:
    p = load_params(tmp_path / "missing.yaml")
    assert p == Params()
    assert p.engine.max_milestones == 12
    assert p.engine.max_plan_subtasks == 8
    assert p.evaluate.split == "eval"
    assert p.evaluate.executors == "configs/executors/default.yaml"
    assert p.prepare.domains == ()


def test_empty_file_and_empty_sections_are_defaults(tmp_path: Path) -> None:
    f = tmp_path / "params.yaml"
    f.write_text("")
    assert load_params(f) == Params()
    f.write_text("engine:\nprepare: {}\n")
    assert load_params(f) == Params()


def test_repository_params_yaml_loads() -> None:
    p = load_params(REPO / "params.yaml")
    assert isinstance(p, Params)
    assert set(p.evaluate.baselines) >= {"heuristic", "upfront", "sequential"}
    assert (REPO / p.evaluate.executors).exists()
    assert (REPO / p.evaluate.transfer_executors).exists()


def test_dotted_overrides_apply(tmp_path: Path) -> None:
    p = load_params(tmp_path / "missing.yaml", {"engine.max_cost": 5.0, "prepare.domains": ["math"]})
    assert p.engine.max_cost == 5.0
    assert p.prepare.domains == ("math",)


def test_params_are_frozen() -> None:
    p = Params()
    with pytest.raises(pydantic.ValidationError):
        p.engine.max_cost = 1.0  # type: ignore[misc]


def _error(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        parse_params(data, "params.yaml")
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith("params.yaml: ")
    return msg


@pytest.mark.parametrize(
    ("data", "key", "words"),
    [
        ({"enigne": {}}, "enigne", "unknown section"),
        ({"engine": {"max_milestone": 3}}, "engine.max_milestone", "unknown key"),
        ({"evaluate": {"limt": 3}}, "evaluate.limt", "unknown key"),
        ({"engine": {"max_cost": "lots"}}, "engine.max_cost", "'lots'"),
        ({"engine": {"concurrency": 2.5}}, "engine.concurrency", "2.5"),
        ({"engine": {"max_milestones": 0}}, "engine.max_milestones", "greater than or equal to 1"),
        ({"prepare": {"train_per_domain": -1}}, "prepare.train_per_domain", "-1"),
        ({"evaluate": {"split": "test"}}, "evaluate.split", "'test'"),
        ({"evaluate": {"single_executors": "maybe"}}, "evaluate.single_executors", "'maybe'"),
        ({"engine": 5}, "engine", "mapping"),
        ({"train": {"validate_pools": ["training", "shuffled"]}}, "train.validate_pools.1", "'shuffled'"),
        ({"train": {"validate_pools": []}}, "train.validate_pools", "at least 1"),
        ({"train": {"validate_pools": ["training", "training"]}}, "train.validate_pools", "twice"),
    ],
)
def test_errors_name_the_dotted_key(data: dict[str, Any], key: str, words: str) -> None:
    msg = _error(data)
    assert f": {key}:" in msg
    assert words in msg


def test_impossible_combination_is_rejected_with_the_fix() -> None:
    msg = _error({"engine": {"max_plan_subtasks": 40, "max_total_subtasks": 32}})
    assert "engine" in msg and "max_plan_subtasks" in msg and "max_total_subtasks" in msg
    assert "raise max_total_subtasks" in msg
    with pytest.raises(pydantic.ValidationError):
        EngineConfig(max_plan_subtasks=9, max_total_subtasks=8)


def test_alternative_slot_needs_slot_alternatives() -> None:
    msg = _error({"rollout": {"alternative_slot": "uncertain"}})
    assert msg.endswith("rollout.alternative_slot: needs rollout.slot_alternatives: true "
                        "(it chooses which slot the alternatives change)")
    ok = {"rollout": {"alternative_slot": "uncertain", "slot_alternatives": True}, "policy": {"prompt": "per_part"}}
    assert parse_params(ok).rollout.alternative_slot == "uncertain"


def test_common_executor_noise_needs_shared_noise() -> None:
    msg = _error({"rollout": {"common_executor_noise": True}})
    assert msg.endswith("rollout.common_executor_noise: needs rollout.shared_noise: true "
                        "(without it siblings draw their own noise)")
    ok = {"rollout": {"common_executor_noise": True, "shared_noise": True}}
    assert parse_params(ok).rollout.common_executor_noise


def test_slot_alternatives_need_the_factored_prompt() -> None:
    msg = _error({"rollout": {"slot_alternatives": True}})
    assert "rollout.slot_alternatives" in msg and "policy.prompt: factored" in msg and "'compact'" in msg
    assert parse_params({"rollout": {"slot_alternatives": True}, "policy": {"prompt": "factored"}}).rollout.slot_alternatives
    assert parse_params({"rollout": {"slot_alternatives": True}, "policy": {"prompt": "per_part"}}).rollout.slot_alternatives


def test_impossible_combination_names_the_dotted_key() -> None:
    msg = _error({"engine": {"max_plan_subtasks": 40, "max_total_subtasks": 32}})
    assert "engine.max_plan_subtasks" in msg


def test_load_params_errors_name_the_file_and_the_key(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text("engine:\n  max_cost: -1\n")
    with pytest.raises(ConfigError, match=r"p\.yaml: engine\.max_cost: "):
        load_params(f)
    with pytest.raises(ConfigError, match=r"engine\.max_milestone: unknown key"):
        load_params(tmp_path / "missing.yaml", {"engine.max_milestone": 3})
    with pytest.raises(ConfigError, match=r"bogus: unknown section"):
        load_params(tmp_path / "missing.yaml", {"bogus.x": 1})
    f.write_text("engine: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_params(f)


def test_config_error_is_a_value_error() -> None:
    # the CLI turns ValueErrors into one line and exit code 2
    assert issubclass(ConfigError, ValueError)


def test_params_yaml_states_the_defaults() -> None:
    """Every value in the repository's params.yaml is the code's default: a key left out of a
    params file means what params.yaml documents, not some other value."""
    assert load_params(REPO / "params.yaml") == Params()
