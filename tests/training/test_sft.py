"""Warm-start SFT on a real (tiny) policy: loss on completion tokens only, the step count the
epochs ask for, and a loss that falls on a repeated batch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from e3orch.config import load_params
from e3orch.training.data import Example, collate, completion_logprobs
from e3orch.training.sft import sft_train


@pytest.fixture
def init_dir(tiny_init_root: Path) -> Path:
    return Path(load_params(tiny_init_root / "params.yaml").policy.init_dir)


def test_sft_counts_completion_tokens_only_takes_the_asked_steps_and_learns(init_dir: Path) -> None:
    from accelerate import Accelerator
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(init_dir)
    # 8 examples: two prompts (one twice as long), one answer each
    examples = [Example([1, 5, 6, 7, 8, 9, 10][: 4 + 3 * (i % 2)], [11, 12, 13, 2]) for i in range(8)]
    batch = collate(examples, 0)
    with torch.no_grad():
        lp = completion_logprobs(model, batch)
    first = float(-(lp * batch["completion_mask"]).sum() / batch["completion_mask"].sum())
    stats = sft_train(model, examples, accelerator=Accelerator(cpu=True), lr=2e-2, epochs=30, tokens_per_batch=4096)
    assert stats.steps == 30 and stats.skipped_steps == 0  # one batch of all 8, 30 passes
    assert stats.tokens == 30 * int(batch["attention_mask"].sum())
    assert stats.losses[0] == pytest.approx(first, rel=1e-4)  # the mean over the answer tokens, prompts not counted
    assert stats.losses[-1] < stats.losses[0] / 20, stats.losses[::5]


def test_merge_copies_keeps_first_seen_order_and_sums_weights() -> None:
    from e3orch.training.data import merge_copies

    a, b, c = Example([1, 5], [11, 2]), Example([1, 6], [11, 2]), Example([1, 5], [12, 2], weight=2.0)
    merged = merge_copies([a, b, a, c, a, c])
    assert [(m.prompt_ids, m.completion_ids, m.weight) for m in merged] == [
        ([1, 5], [11, 2], 3.0), ([1, 6], [11, 2], 1.0), ([1, 5], [12, 2], 4.0)]
    assert a.weight == 1.0  # the inputs are left as they were


def test_a_merged_example_trains_as_its_copies_did(init_dir: Path) -> None:
    """One step on [x, x, x, y] and one on merge_copies of it: the same loss, the same weights after."""
    from accelerate import Accelerator
    from transformers import AutoModelForCausalLM

    from e3orch.training.data import merge_copies

    x, y = Example([1, 5, 6, 7], [11, 12, 2]), Example([1, 8, 9], [13, 2])
    copies = [x, x, x, y]
    models, losses = [], []
    for examples in (copies, merge_copies(copies)):
        model = AutoModelForCausalLM.from_pretrained(init_dir)
        stats = sft_train(model, examples, accelerator=Accelerator(cpu=True), lr=1e-2, epochs=1, tokens_per_batch=4096)
        assert stats.steps == 1
        models.append(model)
        losses.append(stats.losses[0])
    assert len(merge_copies(copies)) == 2
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
    for p, q in zip(models[0].parameters(), models[1].parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)  # Adam moves each weight by ~lr = 1e-2
