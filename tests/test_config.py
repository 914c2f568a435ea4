"""The typed, frozen params: defaults, the repository's params.yaml, and errors that name the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic
import pytest

from e3orch.config import EngineConfig, Params, load_params, parse_params, read_params_file
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


def test_empty_sections_are_defaults_and_an_empty_file_an_error(tmp_path: Path) -> None:
    f = tmp_path / "params.yaml"
    f.write_text("")  # most likely a file truncated by mistake: running on the defaults could overwrite outputs
    with pytest.raises(ConfigError, match="is empty"):
        load_params(f)
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


def test_a_base_chain_merges_key_by_key(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("engine: {max_cost: 5.0, max_milestones: 4}\n"
                                      "evaluate: {baselines: [heuristic, thrifty], limit: 3}\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub/b.yaml").write_text("base: ../a.yaml\nengine: {max_cost: 7.0}\nevaluate: {baselines: [upfront]}\n")
    (tmp_path / "c.yaml").write_text("base: sub/b.yaml\nprepare: {seed: 3}\n")
    assert read_params_file(tmp_path / "c.yaml") == {
        "engine": {"max_cost": 7.0, "max_milestones": 4},  # a key the nearer file sets wins; the others stay
        "evaluate": {"baselines": ["upfront"], "limit": 3},  # a list replaces, it does not append
        "prepare": {"seed": 3},
    }
    p = load_params(tmp_path / "c.yaml", {"engine.max_cost": 9.0})  # overrides apply after the chain
    assert (p.engine.max_cost, p.engine.max_milestones, p.prepare.seed) == (9.0, 4, 3)
    assert p.policy == Params().policy


@pytest.mark.parametrize(("text", "needle"), [
    ("base: nowhere.yaml\n", "base: "),
    ("base: self.yaml\n", "leads back"),
    ("base: 3\n", "must be the path"),
])
def test_a_bad_base_is_a_one_line_error(tmp_path: Path, text: str, needle: str) -> None:
    f = tmp_path / "self.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_params(f)
    assert needle in str(info.value) and "\n" not in str(info.value)
    assert str(info.value).startswith(str(f))


def test_a_base_cycle_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("base: b.yaml\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\n")
    with pytest.raises(ConfigError, match="leads back"):
        load_params(tmp_path / "a.yaml")


def test_an_error_from_a_base_names_the_file_it_is_in(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("train: {roundz: 3}\n")
    (tmp_path / "child.yaml").write_text("base: bad.yaml\nengine: {max_cost: 7.0}\n")
    with pytest.raises(ConfigError) as info:
        load_params(tmp_path / "child.yaml")
    msg = str(info.value)
    assert msg.startswith(f"{(tmp_path / 'bad.yaml').resolve()}: train.roundz: unknown key")
    assert msg.endswith(f"(a base of {tmp_path / 'child.yaml'})") and "\n" not in msg
    (tmp_path / "good.yaml").write_text("train: {rounds: 3}\n")
    (tmp_path / "own.yaml").write_text("base: good.yaml\nengine: {max_cost: lots}\n")
    for overrides in ({}, {"engine.max_cost": 1.0, "train.rounds": "many"}):
        with pytest.raises(ConfigError) as info:  # its own key, or an override: the file asked for, as usual
            load_params(tmp_path / "own.yaml", overrides)
        assert str(info.value).startswith(f"{tmp_path / 'own.yaml'}: ") and "a base of" not in str(info.value)


def test_the_compact_config_is_the_sampled_tree_pipeline() -> None:
    """configs/params-compact.yaml puts back the compact prompt, sampled trees judged by sibling
    leaves and the rules' fixed repair threshold; the rest (sizes, evaluation) is params.yaml's."""
    compact, default = load_params(REPO / "configs/params-compact.yaml"), load_params(REPO / "params.yaml")
    assert compact.policy.prompt == "compact" and default.policy.prompt == "per_part_tiers"
    assert (compact.rollout.trunk, compact.rollout.spine, compact.rollout.continuation) == ("sample", False, "policy")
    assert (compact.rewards.estimator, compact.rewards.w_cost, compact.train.lr) == ("sibling", 0.01, 2e-5)
    assert compact.warmstart.explore_accept == (0.6, 0.6) and default.warmstart.explore_accept == (0.55, 0.7)
    assert compact.engine == default.engine and compact.evaluate == default.evaluate and compact.prepare == default.prepare
    assert compact.policy.model == default.policy.model and compact.train.rounds == default.train.rounds


def test_the_spine_config_is_params_compact_with_its_own_keys() -> None:
    """configs/params-spine.yaml states only what differs; the rest is params-compact.yaml's."""
    spine, default = load_params(REPO / "configs/params-spine.yaml"), load_params(REPO / "configs/params-compact.yaml")
    assert spine.policy.prompt == "per_part" and spine.rollout.spine and spine.rollout.common_executor_noise
    assert (spine.rewards.w_cost, spine.train.w_cost_up, spine.train.hold_accuracy) == (0.02, 1.0, 0.01)
    assert spine.engine == default.engine and spine.warmstart == default.warmstart
    assert spine.evaluate == default.evaluate and spine.prepare == default.prepare


def test_the_probes_configs_chain_onto_params_compact() -> None:
    """configs/params-probes-phase2.yaml is params-probes.yaml with milestone flips and its own
    output folders (its init is the first phase's policy); both keep params-compact.yaml's
    warm start and evaluation."""
    default = load_params(REPO / "configs/params-compact.yaml")
    probes = load_params(REPO / "configs/params-probes.yaml")
    phase2 = load_params(REPO / "configs/params-probes-phase2.yaml")
    assert (probes.rollout.continuation, probes.rollout.probe_routing, probes.rollout.branch_milestone) == ("heuristic", "policy", 1)
    assert phase2.rollout.branch_milestone == 8 and phase2.rollout.branch_plan == probes.rollout.branch_plan
    assert phase2.train.out_dir != probes.train.out_dir and phase2.train.checkpoint_dir != probes.train.checkpoint_dir
    assert phase2.rewards == probes.rewards and phase2.warmstart == probes.warmstart == default.warmstart
    assert phase2.evaluate == probes.evaluate == default.evaluate


def test_the_tier_reading_config_changes_only_the_warm_starts_teachers_and_weights() -> None:
    """configs/params-tier-reading.yaml: params.yaml with `tiered` in place of `heuristic` among the
    teachers, soft labels and each plan question weighed twice; nothing else."""
    default, tier_reading = load_params(REPO / "params.yaml"), load_params(REPO / "configs/params-tier-reading.yaml")
    assert dict(tier_reading.warmstart.teachers) == {"tiered": 0.4, "explore": 0.3, "thrifty": 0.3}
    assert tier_reading.warmstart == default.warmstart.model_copy(
        update={"teachers": tier_reading.warmstart.teachers, "soft_labels": True, "plan_oversample": 2})
    assert tier_reading.model_copy(update={"warmstart": default.warmstart}) == default


def test_params_yaml_is_the_tier_config_with_its_own_teachers_and_larger_rounds() -> None:
    """params.yaml is configs/params-tiers.yaml with `thrifty` among the teachers, four copies of each
    repair question, a smaller cost weight, the larger rounds (192 tasks, flips only where the policy
    is unsure, every task on a randomised or generated pool, a shared card taught as its lowest rank,
    16 probes a comparison) and a cost ceiling of 1.3 times the warm start's on validation;
    configs/params-smaller-rounds.yaml puts the rounds of before back, and
    configs/params-heuristic-start.yaml (the warm start as accurate as `heuristic`, numeric prices)
    builds on that, as does the tier config."""
    default, tiers = load_params(REPO / "params.yaml"), load_params(REPO / "configs/params-tiers.yaml")
    smaller = load_params(REPO / "configs/params-smaller-rounds.yaml")
    start = load_params(REPO / "configs/params-heuristic-start.yaml")
    larger_rounds = {"tasks_per_round": 192, "flip_below": 0.99, "as_is_share": 0.0, "probes": 16}
    assert default.policy == tiers.policy.model_copy(update={"menu_rank": "lowest"}) == smaller.policy.model_copy(
        update={"menu_rank": "lowest"})
    assert (default.policy.prompt, tiers.policy.menu_rank) == ("per_part_tiers", "highest")
    assert default.rollout == tiers.rollout.model_copy(update=larger_rounds) == smaller.rollout.model_copy(update=larger_rounds)
    assert dict(default.warmstart.teachers) == {"heuristic": 0.4, "explore": 0.3, "thrifty": 0.3}
    assert (default.warmstart.result_oversample, default.warmstart.epochs) == (4, tiers.warmstart.epochs) == (4, 4.5)
    assert default.warmstart.model_copy(update={"teachers": tiers.warmstart.teachers, "result_oversample": 1}) == tiers.warmstart
    assert default.rewards == tiers.rewards.model_copy(update={"w_cost": 0.12}) == smaller.rewards
    assert default.train == tiers.train.model_copy(update={"hold_cost": 1.3}) and tiers.train == smaller.train
    assert default.engine == tiers.engine
    assert default.evaluate == tiers.evaluate and default.prepare == tiers.prepare
    assert default.warmstart == smaller.warmstart and default.evaluate == smaller.evaluate
    assert dict(start.warmstart.teachers) == {"heuristic": 0.7, "explore": 0.3}  # the base's mix replaced, not merged
    assert (start.policy.prompt, start.warmstart.epochs, start.warmstart.result_oversample) == ("per_part", 3.0, 1)
    assert (start.rewards.w_cost, start.train.lr) == (0.24, 3e-4)
    assert start.rollout == smaller.rollout and start.evaluate == default.evaluate


def test_the_larger_rounds_config_is_params_yaml_taught_the_highest_rank() -> None:
    """configs/params-larger-rounds.yaml: params.yaml's rounds with the highest rank taught, w_cost 0.14,
    eight probes and no cost ceiling (the values it was measured with)."""
    default, larger = load_params(REPO / "params.yaml"), load_params(REPO / "configs/params-larger-rounds.yaml")
    assert larger.policy == default.policy.model_copy(update={"menu_rank": "highest"})
    assert larger.rewards == default.rewards.model_copy(update={"w_cost": 0.14})
    assert larger.rollout == default.rollout.model_copy(update={"probes": 8}) and larger.warmstart == default.warmstart
    assert larger.train == default.train.model_copy(update={"hold_cost": None})


def test_the_eight_probes_config_is_params_yaml_without_its_probes_and_ceiling() -> None:
    """configs/params-eight-probes.yaml: params.yaml with eight probes and no cost ceiling."""
    default, eight = load_params(REPO / "params.yaml"), load_params(REPO / "configs/params-eight-probes.yaml")
    assert (default.rollout.probes, default.train.hold_cost) == (16, 1.3)
    assert eight.rollout == default.rollout.model_copy(update={"probes": 8})
    assert eight.train == default.train.model_copy(update={"hold_cost": None})
    assert (eight.policy, eight.warmstart, eight.rewards, eight.evaluate) == (
        default.policy, default.warmstart, default.rewards, default.evaluate)


def test_a_teacher_mix_replaces_its_bases_whole(tmp_path: Path) -> None:
    """warmstart.teachers is one value: a file's mix replaces its base's, where other mappings
    (a section, policy.model) merge key by key."""
    (tmp_path / "base.yaml").write_text("warmstart: {teachers: {heuristic: 0.5, thrifty: 0.5}, epochs: 2.0}\n"
                                        "policy: {model: {hidden_size: 64, num_layers: 2}}\n")
    (tmp_path / "p.yaml").write_text("base: base.yaml\nwarmstart: {teachers: {explore: 1.0}}\npolicy: {model: {num_layers: 3}}\n")
    p = load_params(tmp_path / "p.yaml")
    assert dict(p.warmstart.teachers) == {"explore": 1.0} and p.warmstart.epochs == 2.0
    assert (p.policy.model.hidden_size, p.policy.model.num_layers) == (64, 3)


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
        ({"policy": {"device": "gpu"}}, "policy.device", "'gpu'"),
        ({"policy": {"model": {"hidden_size": 30, "num_heads": 4}}}, "policy.model.hidden_size", "divisible by num_heads"),
        ({"rollout": {"branch_plan": 3, "leaf_budget": 2}}, "rollout.leaf_budget", "raise leaf_budget"),
        ({"warmstart": {"teachers": {"heuristic": 0.0}}}, "warmstart.teachers", "at least one teacher"),
        ({"warmstart": {"teachers": {"heurstic": 1.0}}}, "warmstart.teachers", "['heurstic']"),
        ({"evaluate": {"baselines": ["heuristic", "heuristc"]}}, "evaluate.baselines", "'heuristc'"),
        ({"warmstart": {"teachers": {"heuristic": 1.0, "explore": -0.5}}}, "warmstart.teachers", "negative weight for explore"),
        ({"policy": {"dtype": "float64x"}}, "policy.dtype", "'float64x'"),
        ({"warmstart": {"explore_accept": [0.7, 0.5]}}, "warmstart.explore_accept", "need 0 <= low <= high <= 1"),
        ({"warmstart": {"explore_accept_free": [0.9, 1.2]}}, "warmstart.explore_accept_free", "need 0 <= low <= high <= 1"),
        ({"warmstart": {"result_oversample": 0}}, "warmstart.result_oversample", "greater than or equal to 1"),
        ({"rollout": {"continuation": "heurstic", "spine": True}}, "rollout.continuation", "'heurstic'"),
        ({"rollout": {"spine": False}}, "rollout.continuation", "needs rollout.spine"),
        ({"rollout": {"shared_noise": False, "common_executor_noise": False}}, "rollout.continuation",
         "needs rollout.shared_noise"),
        ({"rewards": {"estimator": "sibling"}}, "rollout.continuation", "rewards.estimator: branch"),
        ({"rollout": {"continuation": "heuristic", "spine": True, "shared_noise": True, "lookahead": 1},
          "rewards": {"estimator": "branch"}}, "rollout.lookahead", "must be 0"),
        ({"rollout": {"probes": 0}}, "rollout.probes", "greater than or equal to 1"),
    ],
)
def test_errors_name_the_dotted_key(data: dict[str, Any], key: str, words: str) -> None:
    msg = _error(data)
    assert f": {key}:" in msg
    assert words in msg and "Value error" not in msg


def test_impossible_combination_is_rejected_with_the_fix() -> None:
    msg = _error({"engine": {"max_plan_subtasks": 40, "max_total_subtasks": 32}})
    assert "engine" in msg and "max_plan_subtasks" in msg and "max_total_subtasks" in msg
    assert "raise max_total_subtasks" in msg
    with pytest.raises(pydantic.ValidationError):
        EngineConfig(max_plan_subtasks=9, max_total_subtasks=8)


@pytest.mark.parametrize("key, value, what", [
    ("alternative_slot", "uncertain", "which slot the alternatives change"),
    ("milestone_flips", "results", "which parts a milestone's alternatives flip"),
    ("flip_below", 0.99, "which parts a milestone's alternatives flip"),
])
def test_alternative_options_need_slot_alternatives(key: str, value: str | float, what: str) -> None:
    others = {"milestone_flips": "all"} if key != "milestone_flips" else {}  # its default is results
    msg = _error({"rollout": {**others, key: value, "slot_alternatives": False}})
    assert msg.endswith(f"rollout.{key}: needs rollout.slot_alternatives: true (it chooses {what})")
    ok = {"rollout": {key: value, "slot_alternatives": True}, "policy": {"prompt": "per_part"}}
    assert getattr(parse_params(ok).rollout, key) == value


def test_common_executor_noise_needs_shared_noise() -> None:
    msg = _error({"rollout": {"common_executor_noise": True, "shared_noise": False, "continuation": "policy"}})
    assert msg.endswith("rollout.common_executor_noise: needs rollout.shared_noise: true "
                        "(without it siblings draw their own noise)")
    ok = {"rollout": {"common_executor_noise": True, "shared_noise": True, "continuation": "policy"}}
    assert parse_params(ok).rollout.common_executor_noise


def test_slot_alternatives_need_the_factored_prompt() -> None:
    msg = _error({"rollout": {"slot_alternatives": True}, "policy": {"prompt": "compact"}})
    assert "rollout.slot_alternatives" in msg and "policy.prompt: factored" in msg and "'compact'" in msg
    assert parse_params({"rollout": {"slot_alternatives": True}, "policy": {"prompt": "factored"}}).rollout.slot_alternatives
    assert parse_params({"rollout": {"slot_alternatives": True}, "policy": {"prompt": "per_part"}}).rollout.slot_alternatives


def test_slot_echo_needs_a_plan_asked_slot_by_slot() -> None:
    msg = _error({"warmstart": {"slot_echo": True}, "policy": {"prompt": "compact"}})
    assert "warmstart.slot_echo" in msg and "policy.prompt: factored" in msg and "'compact'" in msg
    assert parse_params({"warmstart": {"slot_echo": True}}).warmstart.slot_echo  # per_part_tiers, the default


def test_soft_labels_need_a_plan_asked_slot_by_slot() -> None:
    msg = _error({"warmstart": {"soft_labels": True}, "policy": {"prompt": "full"}})
    assert "warmstart.soft_labels" in msg and "policy.prompt: factored" in msg and "'full'" in msg
    assert parse_params({"warmstart": {"soft_labels": True}}).warmstart.soft_labels


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


@pytest.mark.parametrize("path", sorted((REPO / "configs").glob("params-*.yaml")), ids=lambda p: p.name)
def test_every_shipped_params_file_loads(path: Path) -> None:
    """A change of params.yaml's values cannot leave a shipped config contradicting itself."""
    p = load_params(path)
    assert p.policy.prompt in ("compact", "per_part", "per_part_tiers")
