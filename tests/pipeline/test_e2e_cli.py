"""End to end on a tiny config through the stage CLIs (what dvc.yaml runs), plus resume."""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pytest
import torch
from conftest import default_rl_sections, optimizer_step, same_weights, trainer_weights, write_tiny_params
from safetensors.torch import load_file

from e3orch.cli import main
from e3orch.evaluation.targets import judge
from e3orch.executors.base import load_pool_specs
from e3orch.executors.generated import generate_pool
from e3orch.rollout.records import LEAF_SCHEMA, NODE_SCHEMA, SCORED_SCHEMA


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("e2e")
    params = str(write_tiny_params(root, policy={"workers": 2}))  # the rollout and train stages share tasks with a worker
    reports = root / "reports"
    assert main(["prepare", "--params", params]) == 0
    assert main(["warmstart", "--params", params, "--metrics", str(reports / "warmstart.json")]) == 0
    assert main(["rollout", "--params", params, "--policy", str(root / "models/warmstart"), "--out", str(root / "data/rollouts")]) == 0
    assert main(["score", "--params", params, "--rollouts", str(root / "data/rollouts"), "--out", str(root / "data/scored.parquet")]) == 0
    assert main(["train", "--params", params, "--init", str(root / "models/warmstart"),
                 "--scored", str(root / "data/scored.parquet"), "--leaves", str(root / "data/rollouts/leaves.parquet"),
                 "--metrics", str(reports / "train_rounds.json")]) == 0
    assert main(["evaluate-all", "--params", params, "--policy", str(root / "models/policy"),
                 "--warmstart", str(root / "models/warmstart"), "--out", str(reports)]) == 0
    return root


def test_stage_outputs_exist_and_validate(pipeline: Path) -> None:
    for sub in ("models/init", "models/warmstart", "models/policy"):
        assert (pipeline / sub / "config.json").exists(), sub
    NODE_SCHEMA.validate(pl.read_parquet(pipeline / "data/rollouts/nodes.parquet"))
    LEAF_SCHEMA.validate(pl.read_parquet(pipeline / "data/rollouts/leaves.parquet"))
    scored = SCORED_SCHEMA.validate(pl.read_parquet(pipeline / "data/scored.parquet"))
    assert scored.height > 0
    rounds = json.loads((pipeline / "reports/train_rounds.json").read_text())
    assert [r["round"] for r in rounds] == [1, 2]
    assert rounds[1]["n_decisions"] > 0 and rounds[1]["time_generate_s"] > 0
    # round 1 is the score stage's rollout, round 2 the trainer's own: each covers tasks_per_round trees
    assert [r["n_tasks"] for r in rounds] == [2, 2]
    assert rounds[0]["n_decisions"] == scored.height
    # one PPO epoch of one step: every ratio is taken before the step, against the log-probs the rollout
    # recorded with the same weights (a worker process's share too: it was sent the updated weights),
    # so it is 1 (up to float noise); round 1's policy is its reference
    for r in rounds:
        assert r["ratio_mean"] == pytest.approx(1.0, abs=1e-4) and r["clip_frac"] == 0.0
    assert rounds[0]["kl"] == pytest.approx(0.0, abs=1e-6) and rounds[1]["kl"] > 0.0


def test_metrics_json_has_the_documented_shape(pipeline: Path) -> None:
    m = json.loads((pipeline / "reports/metrics.json").read_text())
    for block in (m["systems"], m["transfer"]["systems"], m["generated"]["systems"], m["generated"]["pools"][0]["systems"]):
        assert {"e3orch", "warmstart", "heuristic"} <= set(block)
        for row in block.values():
            assert {"accuracy", "cost", "makespan_s", "ie", "n"} <= set(row)
            assert row["n"] == 4  # 2 domains x limit 2 (one generated pool)
    assert set(m["per_benchmark"]) == {"sim/math", "sim/table"}
    assert (pipeline / "reports/report.md").exists() and (pipeline / "reports/pareto.png").exists()
    # the generated pool is written out and is the one that was evaluated
    pool = load_pool_specs(pipeline / "reports/generated_pools/pool-0.yaml")
    assert [s.name for s in pool] == m["generated"]["pools"][0]["executors"] == [s.name for s in generate_pool(0)]
    assert "Generated pools (never seen in any form)" in (pipeline / "reports/report.md").read_text()
    # the training targets, judged on the tables beside them (all four pools and systems are there)
    assert m["targets"] == judge({k: v for k, v in m.items() if k != "targets"}) and m["targets"]["judged"] == 4
    assert f"## Training targets: {m['targets']['met']} of 4 met" in (pipeline / "reports/report.md").read_text()
    episodes = [json.loads(line) for line in (pipeline / "reports/episodes.jsonl").read_text().splitlines()]
    assert {e["pool"] for e in episodes} == {"default", "transfer", "generated-0"}


def test_evaluation_in_one_process_writes_the_same_figures_and_episodes(pipeline: Path) -> None:
    """The pipeline's evaluate-all ran its pools in two worker processes (policy.workers: 2); in this
    process alone every system's episodes, and so every figure, are the same."""
    one = pipeline / "one-process"
    params = write_tiny_params(one, prepare={"out_dir": str(pipeline / "data/tasks")}, policy={"workers": 1})
    assert main(["evaluate-all", "--params", str(params), "--policy", str(pipeline / "models/policy"),
                 "--warmstart", str(pipeline / "models/warmstart"), "--out", str(one / "reports")]) == 0
    assert json.loads((one / "reports/metrics.json").read_text()) == json.loads((pipeline / "reports/metrics.json").read_text())
    assert (one / "reports/episodes.jsonl").read_text() == (pipeline / "reports/episodes.jsonl").read_text()


def test_warm_start_ran_the_plan_questions_first_and_a_correction_round(pipeline: Path) -> None:
    info = json.loads((pipeline / "reports/warmstart.json").read_text())
    assert info["plan_steps"] >= 1 and info["plan_seconds"] > 0  # warmstart.plan_epochs 1.0 (tests/conftest.py)
    (r,) = info["corrections"]
    assert r["round"] == 1 and r["tasks"] == 3 and r["decisions"] > 0 and r["steps"] >= 1
    assert 0.0 <= r["agreement"] <= 1.0 and 0.0 <= r["policy_accuracy"] <= 1.0
    assert r["agreement"] * r["decisions"] == pytest.approx(round(r["agreement"] * r["decisions"]))  # a count


def test_train_resumes_from_its_checkpoint(pipeline: Path) -> None:
    """A finished run's checkpoint says 'next round 2'; asking for 3 rounds runs only one more."""
    params = write_tiny_params(pipeline, train={"rounds": 3})
    info = json.loads((pipeline / "models/checkpoints/round.json").read_text())
    assert info["next_round"] == 2
    out = pipeline / "reports/train_rounds_resumed.json"
    # rounds changed → different fingerprint → a fresh start would run 3 rounds; resume is keyed on
    # everything *but* the round count, so exactly one round must run.
    assert main(["train", "--params", str(params), "--init", str(pipeline / "models/warmstart"),
                 "--metrics", str(out)]) == 0
    assert [r["round"] for r in json.loads(out.read_text())] == [3]


def test_train_validates_every_round_and_writes_the_best(pipeline: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With validate_rounds the warm start (round 0) and every round run the validation split, here
    on the training pool as it is and on randomised pools, as many tasks each; with select: best the
    policy written is the most accurate over both (ties: the cheaper), whatever its round."""
    root = pipeline / "select"
    params = write_tiny_params(pipeline, prepare={"val_per_domain": 2},
                               train={"rounds": 2, "validate_rounds": True, "select": "best",
                                      "validate_pools": ["training", "randomized"], "save_rounds": True,
                                      "checkpoint_dir": str(root / "ckpt")})
    out = root / "rounds.json"
    assert main(["train", "--params", str(params), "--init", str(pipeline / "models/warmstart"), "--no-resume",
                 "--out", str(root / "policy"), "--metrics", str(out)]) == 0
    rounds = json.loads(out.read_text())
    info = json.loads((root / "ckpt/round.json").read_text())
    seen = info["validation"]
    w = seen[0]["val_pools"]
    warm_line = (f"warm start (round 0): val acc {seen[0]['val_accuracy']:.3f} cost {seen[0]['val_cost']:.3f} "
                 f"(training {w['training']['accuracy']:.3f} / {w['training']['cost']:.3f}, "
                 f"randomized {w['randomized']['accuracy']:.3f} / {w['randomized']['cost']:.3f})")
    assert warm_line in capsys.readouterr().out
    assert [v["round"] for v in seen] == [0, 1, 2]
    assert [(r["val_accuracy"], r["val_cost"]) for r in rounds] == [(v["val_accuracy"], v["val_cost"]) for v in seen[1:]]
    assert [r["val_pools"] for r in rounds] == [v["val_pools"] for v in seen[1:]]
    for v in seen:
        assert list(v["val_pools"]) == ["training", "randomized"]
        for m in ("accuracy", "cost"):
            assert v[f"val_{m}"] == pytest.approx((v["val_pools"]["training"][m] + v["val_pools"]["randomized"][m]) / 2)
    best = seen[0]
    for v in seen[1:]:
        if v["val_accuracy"] > best["val_accuracy"] or (v["val_accuracy"] == best["val_accuracy"] and v["val_cost"] < best["val_cost"]):
            best = v
    assert info["best"] == best
    # one best folder, the one round.json names
    assert sorted(d.name for d in (root / "ckpt").glob("best-*")) == [f"best-{best['round']}"]
    meta = json.loads((root / "policy/e3orch_policy.json").read_text())
    assert (meta["rounds"], meta["val_accuracy"], meta["val_cost"]) == (best["round"], best["val_accuracy"], best["val_cost"])
    # save_rounds: every round's policy, beside the state the clean-up removes; the written policy is one of them
    assert sorted(d.name for d in (root / "ckpt").glob("round-*")) == ["round-1", "round-2"]
    assert [json.loads((root / f"ckpt/round-{r}/e3orch_policy.json").read_text())["rounds"] for r in (1, 2)] == [1, 2]
    round_weights = [load_file(str(root / f"ckpt/round-{r}/model.safetensors")) for r in (1, 2)]
    state = load_file(str(root / "ckpt/state-2/model.safetensors"))  # the checkpoint the next round would resume from
    assert set(state) & set(round_weights[1])
    assert all(torch.equal(state[k], v) for k, v in round_weights[1].items() if k in state)
    if best["round"] > 0:
        written = load_file(str(root / "policy/model.safetensors"))
        assert all(torch.equal(written[k], round_weights[best["round"] - 1][k]) for k in written)
    if best["round"] == 0:  # the warm start's own weights
        a, b = load_file(root / "policy/model.safetensors"), load_file(pipeline / "models/warmstart/model.safetensors")
        assert all(torch.equal(a[k], b[k]) for k in a)
    # resumed with one more round (save_rounds off now: not part of what a checkpoint must match): the warm
    # start's line again, from the checkpoint, not re-validated; no round-3 folder
    params = write_tiny_params(pipeline, prepare={"val_per_domain": 2},
                               train={"rounds": 3, "validate_rounds": True, "select": "best",
                                      "validate_pools": ["training", "randomized"],
                                      "checkpoint_dir": str(root / "ckpt")})
    assert main(["train", "--params", str(params), "--init", str(pipeline / "models/warmstart"),
                 "--out", str(root / "policy"), "--metrics", str(out)]) == 0
    assert warm_line in capsys.readouterr().out
    assert [r["round"] for r in json.loads(out.read_text())] == [3]
    assert [v["round"] for v in json.loads((root / "ckpt/round.json").read_text())["validation"]] == [0, 1, 2, 3]
    assert sorted(d.name for d in (root / "ckpt").glob("round-*")) == ["round-1", "round-2"]


def test_select_best_without_validation_is_a_one_line_error(pipeline: Path, capsys: pytest.CaptureFixture[str]) -> None:
    params = write_tiny_params(pipeline, train={"select": "best"})
    assert main(["train", "--params", str(params), "--init", str(pipeline / "models/warmstart")]) != 0
    err = capsys.readouterr().err
    assert "train" in err and "validate_rounds" in err and len(err.strip().splitlines()) == 1


def test_hold_accuracy_undoes_a_round_that_loses_accuracy_and_moves_the_cost_weight(pipeline: Path) -> None:
    """train.hold_accuracy on the trainer itself: a round below the warm start's accuracy minus the
    tolerance gets the last kept weights back exactly, fresh optimizer moments and half the cost
    weight; a round at the floor is kept, becomes what later rounds go back to, and grows it."""
    from e3orch.config import load_params
    from e3orch.training.trainer import RLTrainer

    params = load_params(write_tiny_params(pipeline / "hold", train={"hold_accuracy": 0.01, "validate_rounds": True, "w_cost_up": 1.25,
                                                                      "w_cost_down": 0.5, "lr": 0.01}))
    trainer = RLTrainer(params, pipeline / "models/warmstart")
    warm = trainer_weights(trainer)
    w0 = trainer.w_cost
    trainer.validation = [{"round": 0, "val_accuracy": 0.60, "val_cost": 3.0}]
    trainer.remember_weights()

    earlier, undone = pl.DataFrame({"round": [0]}), pl.DataFrame({"round": [1]})
    trainer.replay = [earlier, undone]  # train.replay_rounds: the undone round's decisions go, the earlier stay

    optimizer_step(trainer)  # a real step, so the weights move and Adam has moments
    assert not same_weights(trainer_weights(trainer), warm)
    assert trainer.hold({"val_accuracy": 0.585, "val_cost": 2.0}) is False  # 1.5 points below: undone
    assert same_weights(trainer_weights(trainer), warm)
    assert len(trainer.replay) == 1 and trainer.replay[0] is earlier
    assert len(getattr(trainer.opt, "optimizer", trainer.opt).state) == 0
    assert trainer.w_cost == pytest.approx(w0 * 0.5)

    optimizer_step(trainer)
    moved = trainer_weights(trainer)
    assert trainer.hold({"val_accuracy": 0.59, "val_cost": 2.5}) is True  # exactly at the floor: kept
    assert len(trainer.replay) == 1 and trainer.replay[0] is earlier
    assert trainer.w_cost == pytest.approx(w0 * 0.5 * 1.25)
    optimizer_step(trainer)
    assert trainer.hold({"val_accuracy": 0.50, "val_cost": 1.0}) is False  # goes back to the kept round, not the warm start
    assert same_weights(trainer_weights(trainer), moved)
    assert trainer.w_cost == pytest.approx(w0 * 0.5 * 1.25 * 0.5)


def test_hold_cost_undoes_a_round_over_the_cost_ceiling_and_raises_the_cost_weight(pipeline: Path) -> None:
    """train.hold_cost: a round costing more than the ratio times the warm start on some validation
    pool gets the last kept weights back and a larger cost weight; one within the ceiling is kept at
    the same weight. With hold_accuracy as well, a round within the ceiling that loses accuracy is
    undone with a smaller cost weight, and a round over it is undone with a larger one."""
    from e3orch.config import load_params
    from e3orch.training.trainer import RLTrainer

    params = load_params(write_tiny_params(pipeline / "hold-cost", train={"hold_cost": 1.25, "validate_rounds": True,
                                                                           "w_cost_up": 1.5, "w_cost_down": 0.5, "lr": 0.01}))
    trainer = RLTrainer(params, pipeline / "models/warmstart")
    warm = trainer_weights(trainer)
    w0 = trainer.w_cost

    def pools(a1: float, c1: float, a2: float, c2: float) -> dict[str, object]:  # a validation entry, two pool kinds
        return {"val_accuracy": (a1 + a2) / 2, "val_cost": (c1 + c2) / 2,
                "val_pools": {"training": {"accuracy": a1, "cost": c1}, "randomized": {"accuracy": a2, "cost": c2}}}

    trainer.validation = [{"round": 0, **pools(0.60, 2.0, 0.60, 4.0)}]
    trainer.remember_weights()

    optimizer_step(trainer)
    assert trainer.hold(pools(0.90, 2.6, 0.90, 4.0)) is False  # 1.3x on the training pool: undone, whatever the accuracy
    assert same_weights(trainer_weights(trainer), warm)
    assert trainer.w_cost == pytest.approx(w0 * 1.5)
    optimizer_step(trainer)
    moved = trainer_weights(trainer)
    assert trainer.hold(pools(0.40, 2.5, 0.40, 5.0)) is True  # exactly 1.25x on both and less accurate: kept
    assert trainer.w_cost == pytest.approx(w0 * 1.5)  # at the same weight
    optimizer_step(trainer)
    assert trainer.hold(pools(0.60, 1.0, 0.60, 5.1)) is False  # the randomised pool over the ceiling
    assert same_weights(trainer_weights(trainer), moved)
    assert trainer.w_cost == pytest.approx(w0 * 1.5 ** 2)

    both = load_params(write_tiny_params(pipeline / "hold-both", train={"hold_cost": 1.25, "hold_accuracy": 0.01,
                                                                         "validate_rounds": True}))
    trainer = RLTrainer(both, pipeline / "models/warmstart")
    trainer.validation = [{"round": 0, **pools(0.60, 2.0, 0.60, 4.0)}]
    trainer.remember_weights()
    assert trainer.hold(pools(0.55, 2.0, 0.60, 4.0)) is False  # within the ceiling, 5 points less accurate
    assert trainer.w_cost == pytest.approx(w0 * 0.5)
    assert trainer.hold(pools(0.55, 3.0, 0.60, 4.0)) is False  # over the ceiling as well: the cost decides
    assert trainer.w_cost == pytest.approx(w0 * 0.5 * 1.25)
    assert trainer.hold(pools(0.70, 2.0, 0.60, 4.0)) is True and trainer.w_cost == pytest.approx(w0 * 0.5 * 1.25)


def test_hold_accuracy_run_records_each_rounds_cost_weight(pipeline: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Through the CLI: every round's metrics and validation entry carry the cost weight its rewards
    used and whether it was kept; at tolerance 1 every round is kept and the weight grows each time."""
    from e3orch.config import load_params

    root = pipeline / "hold-run"
    params = write_tiny_params(pipeline, prepare={"val_per_domain": 2},
                               train={"rounds": 2, "validate_rounds": True, "validate_pools": ["training"],
                                      "hold_accuracy": 1.0, "select": "last", "checkpoint_dir": str(root / "ckpt")})
    out = root / "rounds.json"
    assert main(["train", "--params", str(params), "--init", str(pipeline / "models/warmstart"), "--no-resume",
                 "--out", str(root / "policy"), "--metrics", str(out)]) == 0
    rounds = json.loads(out.read_text())
    w0 = load_params(params).rewards.w_cost
    assert [(r["w_cost"], r["kept"]) for r in rounds] == [(pytest.approx(w0), True), (pytest.approx(w0 * 1.25), True)]
    info = json.loads((root / "ckpt/round.json").read_text())
    assert info["w_cost"] == pytest.approx(w0 * 1.25 ** 2)
    assert [v.get("kept") for v in info["validation"]] == [None, True, True]
    assert "kept" in capsys.readouterr().out


@pytest.mark.parametrize(("key", "value"), [("hold_accuracy", 0.01), ("hold_cost", 1.2)])
def test_a_validation_gate_without_validation_is_a_one_line_error(pipeline: Path, capsys: pytest.CaptureFixture[str],
                                                                   key: str, value: float) -> None:
    params = write_tiny_params(pipeline, train={key: value, "validate_rounds": False, "select": "last"})
    assert main(["train", "--params", str(params), "--init", str(pipeline / "models/warmstart")]) != 0
    err = capsys.readouterr().err
    assert key in err and "validate_rounds" in err and len(err.strip().splitlines()) == 1


def test_stage_summaries_default_to_evaluate_out_dir(tmp_path: Path) -> None:
    """Without --metrics the warm start's and the training's summaries go to evaluate.out_dir of
    the params given (``reports/`` with params.yaml), not to a fixed ``reports/``."""
    params = write_tiny_params(tmp_path, train={"rounds": 1, "checkpoint_dir": str(tmp_path / "ckpt")})
    assert main(["prepare", "--params", str(params)]) == 0
    assert main(["warmstart", "--params", str(params)]) == 0
    assert main(["train", "--params", str(params), "--no-resume"]) == 0
    reports = tmp_path / "reports"
    assert json.loads((reports / "warmstart.json").read_text())["demonstrations"] > 0
    assert [r["round"] for r in json.loads((reports / "train_rounds.json").read_text())] == [1]


@pytest.mark.parametrize("prompt", ["params.yaml", "per_part", "departure"])
def test_the_default_rl_setting_end_to_end(tmp_path: Path, prompt: str) -> None:
    """params.yaml's own setting (per_part_tiers prompts, explore drawing its repair threshold, the
    greedy spine's alternatives judged by probes, milestone flips of result parts only) on the tiny
    sizes: the warm start is taught part-by-part answers, and an RL round compares alternatives. The
    same with numeric menu prices (configs/params-heuristic-start.yaml), which the policy then keeps using,
    and soft labels; and params.yaml's setting credited against the greedy decision (branch_first) on
    the tokens where the answers depart from it (train.pg_tokens: departure)."""
    sections = default_rl_sections(tmp_path)
    if prompt == "departure":  # credit against the greedy decision, on the tokens where an answer departs from it
        sections.setdefault("rewards", {})["estimator"] = "branch_first"
        sections["train"]["pg_tokens"] = "departure"
    elif prompt != "params.yaml":  # and every plan slot taught the whole teacher mix's answers (warmstart.soft_labels)
        sections["policy"]["prompt"] = prompt
        sections["warmstart"]["soft_labels"] = True
    sections["train"].update(rounds=1, checkpoint_dir=str(tmp_path / "ckpt"))
    params = write_tiny_params(tmp_path, **sections)
    assert main(["prepare", "--params", str(params)]) == 0
    assert main(["warmstart", "--params", str(params)]) == 0
    assert main(["train", "--params", str(params), "--no-resume"]) == 0
    reports = tmp_path / "reports"
    info = json.loads((reports / "warmstart.json").read_text())
    assert info["demonstrations"] > 0 and info["corrections"][0]["decisions"] > 0
    (r,) = json.loads((reports / "train_rounds.json").read_text())
    # every child of the spine ends at its probes: more leaves than one per decision, and decisions were compared
    assert r["n_decisions"] > 0 and r["n_leaves"] > 0 and r["n_tasks"] == 2
    assert math.isfinite(r["kl"]) and r["update_tokens"] > 0
    assert (tmp_path / "models/policy/config.json").exists()
    meta = json.loads((tmp_path / "models/policy/e3orch_policy.json").read_text())
    assert meta["prompt"] == sections["policy"]["prompt"]


def test_replayed_rounds_train_again_and_survive_a_resume(pipeline: Path) -> None:
    """train.replay_rounds 1: from round 2 on the update also trains on the round before's decisions.
    A run stopped after round 2 and resumed for round 3 ends with the uninterrupted run's exact
    weights, because the replayed decisions are in the checkpoint; resumed without them it does not."""
    def run(name: str, rounds: int, resume: bool) -> list[dict[str, float]]:
        params = write_tiny_params(pipeline, train={"rounds": rounds, "replay_rounds": 1, "ppo_epochs": 1,
                                                    "checkpoint_dir": str(pipeline / name / "ckpt")})
        out = pipeline / name / f"rounds-{rounds}.json"
        assert main(["train", "--params", str(params), "--init", str(pipeline / "models/warmstart"),
                     *([] if resume else ["--no-resume"]), "--out", str(pipeline / name / "policy"),
                     "--metrics", str(out)]) == 0
        return json.loads(out.read_text())

    def weights(name: str) -> dict[str, torch.Tensor]:
        return load_file(str(pipeline / name / "policy/model.safetensors"))

    whole = run("replay-whole", 3, resume=False)
    assert [r["round"] for r in whole] == [1, 2, 3]
    assert whole[0]["n_replayed"] == 0 and whole[1]["n_replayed"] > 0 and whole[2]["n_replayed"] > 0
    for name in ("replay-resumed", "replay-forgotten"):
        assert [r["round"] for r in run(name, 2, resume=False)] == [1, 2]
    (state,) = (pipeline / "replay-forgotten/ckpt").glob("state-*")
    for f in state.glob("replay-*.parquet"):
        f.unlink()
    for name in ("replay-resumed", "replay-forgotten"):
        assert [r["round"] for r in run(name, 3, resume=True)] == [3]
    assert same_weights(weights("replay-resumed"), weights("replay-whole"))
    assert not same_weights(weights("replay-forgotten"), weights("replay-whole"))
