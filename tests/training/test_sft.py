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
