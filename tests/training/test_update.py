"""The RL update step on a real (tiny) policy: each optimizer step weighs its decisions as the
decisions' own weights say, in every PPO epoch, and the update moves a decision the way its
advantage points."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import same_weights, trainer_weights

from e3orch.config import load_params
from e3orch.training import trainer as trainer_module
from e3orch.training.data import Example, collate, completion_logprobs
from e3orch.training.trainer import RLTrainer


def _trainer(root: Path, **train: Any) -> RLTrainer:
    overrides = {f"train.{k}": v for k, v in {"validate_rounds": False, **train}.items()}
    params = load_params(root / "params.yaml", overrides)  # the shared folder's file stays as it is
    return RLTrainer(params, params.policy.init_dir)


def _examples(trainer: RLTrainer) -> list[Example]:
    """Tree a: one decision (weight 1); tree b: three (1/3 each), as examples_from_scored weighs them.
    Old log-probs are the policy's own, so every ratio starts at 1."""
    out = []
    for i, (group, weight) in enumerate([("a", 1.0), ("b", 1 / 3), ("b", 1 / 3), ("b", 1 / 3)]):
        e = Example([1, 5 + i, 9], [11 + i, 12, 2], 0.5 if i % 2 == 0 else -0.5, [], weight, group)
        with torch.no_grad():
            lp = completion_logprobs(trainer.model, collate([e], trainer.tokenizer.pad_token_id))
        e.old_logprobs = lp[0, -len(e.completion_ids):].tolist()
        out.append(e)
    return out


@pytest.mark.parametrize("split", ["decision", "question"])
def test_every_epochs_steps_weigh_decisions_as_their_own_weights_say(tiny_init_root: Path, split: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    trainer = _trainer(tiny_init_root, ppo_epochs=3, minibatches=2, kl_coef=0.02, minibatch_by=split)
    assert (trainer._prefix_kw is not None) is (split == "question")  # one process: prompts shared by question
    examples = _examples(trainer)
    seen: list[dict[str, float]] = []  # each optimizer step's (here: one micro-batch's) weights by decision

    def spy(chunk: list[Example], pad: int) -> dict[str, torch.Tensor]:
        if torch.is_grad_enabled():  # a step's batch, not the reference's log-probs before them
            seen.append({f"{e.group}{e.prompt_ids[1]}": e.weight for e in chunk})
        return collate(chunk, pad)

    monkeypatch.setattr(trainer_module, "collate", spy)
    trainer.update(examples)
    assert [e.weight for e in examples] == [1.0, 1 / 3, 1 / 3, 1 / 3]  # the caller's examples are untouched
    assert len(seen) == 3 * 2
    own = {"a5": 1.0, "b6": 1 / 3, "b7": 1 / 3, "b8": 1 / 3}
    for step in seen:
        total = sum(own[k] for k in step)
        assert step == pytest.approx({k: own[k] / total for k in step})  # proportional, summing to 1


@pytest.mark.parametrize("split", ["decision", "question"])
def test_the_references_log_probs_are_computed_once_and_are_its_own(tiny_init_root: Path, split: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Three passes of two steps use the frozen reference's log-probs of one forward pass before
    the first, each step's batch carrying exactly the reference's log-probs of its decisions."""
    trainer = _trainer(tiny_init_root, ppo_epochs=3, minibatches=2, kl_coef=0.5, lr=1e-2, minibatch_by=split)
    examples = _examples(trainer)
    assert trainer.ref is not None
    with torch.no_grad():  # the policy away from its reference, so the KL term has work to do
        for p in trainer.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    pad = trainer.tokenizer.pad_token_id
    with torch.no_grad():
        own = {e.prompt_ids[1]: completion_logprobs(trainer.ref, collate([e], pad))[0, -len(e.completion_ids):]
               for e in examples}
    ref_calls: list[int] = []
    steps: list[dict[int, list[float]]] = []

    def counting(fn: Any) -> Any:
        def forward(model: Any, batch: Any, *args: Any, **kw: Any) -> Any:
            if model is trainer.ref:
                ref_calls.append(len(batch) if isinstance(batch, list) else batch["input_ids"].shape[0])
            return fn(model, batch, *args, **kw)
        return forward

    def spy(chunk: list[Example], pad: int) -> dict[str, torch.Tensor]:  # a step's batch: its reference frame
        batch = collate(chunk, pad)
        if torch.is_grad_enabled():
            steps.append({e.prompt_ids[1]: batch["ref_logprobs"][i].tolist() for i, e in enumerate(chunk)})
        return batch

    for name in ("completion_logprobs", "shared_prefix_logprobs"):
        monkeypatch.setattr(trainer_module, name, counting(getattr(trainer_module, name)))
    monkeypatch.setattr(trainer_module, "collate", spy)
    trainer.update(examples)
    assert ref_calls == [4]  # one forward pass of the four decisions, not one a step
    assert len(steps) == 3 * 2
    for step in steps:
        for key, lp in step.items():
            assert lp == pytest.approx(own[key].tolist(), abs=1e-5)  # padded in one batch there, alone here
    assert all(not e.ref_logprobs for e in examples)  # the caller's examples are left as they are


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_an_update_moves_a_decision_the_way_its_advantage_points(tiny_init_root: Path, sign: float) -> None:
    trainer = _trainer(tiny_init_root, ppo_epochs=1, minibatches=1, kl_coef=0.0, lr=1e-2)
    (e,) = _examples(trainer)[:1]
    e.advantage = sign
    batch = collate([e], trainer.tokenizer.pad_token_id)
    before = float(sum(e.old_logprobs))
    trainer.update([e])
    with torch.no_grad():
        after = float(completion_logprobs(trainer.model, batch)[0, -len(e.completion_ids):].sum())
    assert (after - before) * sign > 0


def test_a_zero_advantage_at_the_reference_leaves_the_weights_exactly(tiny_init_root: Path) -> None:
    trainer = _trainer(tiny_init_root, ppo_epochs=1, minibatches=1, kl_coef=0.02)
    examples = _examples(trainer)
    for e in examples:
        e.advantage = 0.0
    before = trainer_weights(trainer)
    trainer.update(examples)
    assert same_weights(before, trainer_weights(trainer))


@pytest.mark.parametrize("pg_stop_token", [True, False])
def test_without_the_stop_token_in_the_gradient_an_empty_answer_moves_nothing(tiny_init_root: Path,
                                                                              pg_stop_token: bool) -> None:
    # an answer that is only the stop token, at a negative advantage and at the reference (KL gradient 0):
    # with the stop token in the policy gradient the update pushes it down; without, nothing is left to push
    trainer = _trainer(tiny_init_root, ppo_epochs=1, minibatches=1, kl_coef=0.02, lr=1e-2, pg_stop_token=pg_stop_token)
    e = Example([1, 5, 9], [trainer.tokenizer.eos_token_id], -1.0, [], 1.0, "a")
    batch = collate([e], trainer.tokenizer.pad_token_id)
    with torch.no_grad():
        e.old_logprobs = completion_logprobs(trainer.model, batch)[0, -1:].tolist()
    before = trainer_weights(trainer)
    trainer.update([e])
    assert same_weights(before, trainer_weights(trainer)) is not pg_stop_token
    if pg_stop_token:
        with torch.no_grad():
            assert float(completion_logprobs(trainer.model, batch)[0, -1]) < e.old_logprobs[0]


def test_a_new_best_replaces_the_old_one_only_once_round_json_names_it(tiny_init_root: Path) -> None:
    """Killed between saving a new best and writing round.json, a run still has the best on record."""
    import json

    params = load_params(tiny_init_root / "params.yaml")
    params = params.model_copy(update={"train": params.train.model_copy(update={
        "select": "best", "checkpoint_dir": str(tiny_init_root / "ckpt-best")})})
    trainer = RLTrainer(params, tiny_init_root / "models/init")
    trainer.ckpt.mkdir(parents=True, exist_ok=True)
    assert trainer.consider({"val_accuracy": 0.5, "val_cost": 2.0})  # round 0
    trainer.save_checkpoint()
    trainer.round = 1
    assert trainer.consider({"val_accuracy": 0.6, "val_cost": 2.0})  # better: saved, round.json not yet written
    assert json.loads((trainer.ckpt / "round.json").read_text())["best"]["round"] == 0
    assert sorted(d.name for d in trainer.ckpt.glob("best-*")) == ["best-0", "best-1"]  # a kill here loses nothing
    trainer.save_checkpoint()
    assert sorted(d.name for d in trainer.ckpt.glob("best-*")) == ["best-1"]
    assert json.loads((trainer.ckpt / "best-1/e3orch_policy.json").read_text())["val_accuracy"] == 0.6


def test_a_run_killed_while_saving_its_state_resumes_from_the_last_complete_one(tiny_init_root: Path) -> None:
    """Each round's state goes to a folder of its own, named in round.json only once complete: a kill in
    the middle of writing the next one (here: weights cut short, then the save fails) loses that round only."""
    import json

    params = load_params(tiny_init_root / "params.yaml", {"train.validate_rounds": False,
                                                           "train.checkpoint_dir": str(tiny_init_root / "ckpt-kill")})
    trainer = RLTrainer(params, tiny_init_root / "models/init")
    trainer.ckpt.mkdir(parents=True, exist_ok=True)
    trainer.round = 1
    trainer.save_checkpoint()
    saved = trainer_weights(trainer)
    assert json.loads((trainer.ckpt / "round.json").read_text())["state"] == "state-1"

    with torch.no_grad():  # round 2 changes the weights...
        for p in trainer.model.parameters():
            p.add_(1.0)
    real = trainer.acc.save_state

    def killed(path: str) -> None:  # ...and the process dies while writing them
        real(path)
        weights = Path(path) / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:100])
        raise KeyboardInterrupt

    trainer.acc.save_state = killed  # type: ignore[method-assign]
    trainer.round = 2
    with pytest.raises(KeyboardInterrupt):
        trainer.save_checkpoint()

    again = RLTrainer(params, tiny_init_root / "models/init")
    assert again.resume() == 1
    assert same_weights(trainer_weights(again), saved)
    again.round = 2
    again.save_checkpoint()  # the next complete save removes both older folders
    assert sorted(d.name for d in again.ckpt.iterdir() if d.is_dir()) == ["state-2"]


def test_saving_a_tied_head_logs_no_warning_and_the_tie_survives_a_resume(tiny_init_root: Path,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    """Accelerate leaves a tied LM head out of the safetensors file and warns about it every round;
    the trainer drops that notice because loading ties the head again."""
    params = load_params(tiny_init_root / "params.yaml", {"train.validate_rounds": False,
                                                           "train.checkpoint_dir": str(tiny_init_root / "ckpt-tied")})
    trainer = RLTrainer(params, tiny_init_root / "models/init")
    model = trainer.acc.unwrap_model(trainer.model)
    assert model.config.tie_word_embeddings
    with torch.no_grad():
        model.get_input_embeddings().weight.add_(0.5)  # differs from the initial weights on disk
    trainer.ckpt.mkdir(parents=True, exist_ok=True)
    trainer.round = 1
    with caplog.at_level(logging.WARNING):
        trainer.save_checkpoint()
    assert not [r for r in caplog.records if "shared tensor" in r.getMessage()]
    assert not logging.getLogger("accelerate.utils.other").filters  # the filter lives only while saving

    again = RLTrainer(params, tiny_init_root / "models/init")
    assert again.resume() == 1
    head = again.acc.unwrap_model(again.model)
    assert torch.equal(head.get_output_embeddings().weight, model.get_input_embeddings().weight)
    assert head.get_output_embeddings().weight.data_ptr() == head.get_input_embeddings().weight.data_ptr()


def test_recomputed_old_logprobs_are_the_trainers_own(tiny_init_root: Path) -> None:
    """vLLM leaves the stop token's log-prob out (recorded as 0.0) and computes the others in its own
    kernels: with train.old_logprobs recompute (auto with the vllm backend) the update's ratios start
    from the trainer's log-probs, so every ratio starts at 1."""
    trainer = _trainer(tiny_init_root)
    examples = _examples(trainer)
    own = [list(e.old_logprobs) for e in examples]
    for e in examples:
        e.old_logprobs = [x + 0.3 for x in e.old_logprobs[:-1]] + [0.0]
    assert not trainer.recomputes_old_logprobs  # auto with the in-process transformers backend
    trainer.recompute_old_logprobs(examples)
    for e, lp in zip(examples, own):
        assert e.old_logprobs == pytest.approx(lp, abs=1e-6)  # batched with padding here, one by one there
    for mode, backend, expect in [("auto", "vllm", True), ("recompute", "transformers", True), ("rollout", "vllm", False)]:
        trainer.params = trainer.params.model_copy(update={
            "policy": trainer.params.policy.model_copy(update={"backend": backend}),
            "train": trainer.params.train.model_copy(update={"old_logprobs": mode})})
        trainer.cfg = trainer.params.train
        assert trainer.recomputes_old_logprobs is expect
