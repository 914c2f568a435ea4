"""Warm start: supervised fine-tuning on teacher demonstrations (loss on decision tokens only).

The policy learns the protocol and a diverse mixture of hand-written behaviours, on pools
randomised per task. Trained with Accelerate (one process, several CPU processes, or GPUs).
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from e3orch.training.data import Example, collate, completion_logprobs, make_batches
from e3orch.training.optim import finite_step

log = logging.getLogger(__name__)


@dataclass
class SFTStats:
    steps: int
    epochs: float
    final_loss: float
    tokens: int
    seconds: float
    losses: list[float]
    skipped_steps: int = 0           # steps whose gradient was not finite (not applied)


def sft_train(
    model: Any,
    examples: Sequence[Example],
    *,
    accelerator: Any,
    lr: float = 3e-3,
    epochs: float = 2.0,
    tokens_per_batch: int = 16384,
    weight_decay: float = 0.0,
    warmup_frac: float = 0.05,
    seed: int = 0,
    pad_id: int = 0,
    group_prompts: bool = False,
    on_step: Callable[[int, int, float], None] | None = None,
) -> SFTStats:
    """Train ``model`` in place; token-mean cross-entropy over completion tokens, each example's
    tokens counted ``Example.weight`` times (``merge_copies``: k copies of one pair weigh as k).
    ``group_prompts``: every answer taught for one prompt in the same batch (:func:`make_batches`)."""
    rng = random.Random(seed)
    batches = make_batches(examples, tokens_per_batch, rng, group_prompts)
    # every process takes its share of batches (same count: drop the remainder)
    per_proc = len(batches) // accelerator.num_processes
    total_steps = max(1, int(per_proc * epochs))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, betas=(0.9, 0.98))
    warm = max(1, int(total_steps * warmup_frac))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / total_steps)))
    )
    model, opt, sched = accelerator.prepare(model, opt, sched)
    model.train()
    losses: list[float] = []
    tokens = 0
    t0 = time.perf_counter()
    step = 0
    epoch = 0
    skipped = 0
    while step < total_steps:
        order = batches[:]
        random.Random(seed + epoch).shuffle(order)
        mine = order[accelerator.process_index :: accelerator.num_processes][:per_proc]
        for batch_ex in mine:
            if step >= total_steps:
                break
            batch = {k: v.to(accelerator.device) for k, v in collate(batch_ex, pad_id).items()}
            with accelerator.accumulate(model):
                lp = completion_logprobs(model, batch)
                mask = batch["completion_mask"]
                w = batch["weight"].unsqueeze(-1) * mask  # an example's copies weigh as many (merge_copies)
                loss = -(lp * w).sum() / w.sum().clamp(min=1e-8)
                accelerator.backward(loss)
                if not finite_step(accelerator, model, opt, sched, 1.0):
                    skipped += 1
            losses.append(float(loss.detach()))
            tokens += int(batch["attention_mask"].sum())
            step += 1
            if on_step:
                on_step(step, total_steps, losses[-1])
        epoch += 1
    model.eval()
    last = [x for x in losses[-10:] if math.isfinite(x)]  # a skipped step's loss may be NaN
    return SFTStats(step, step / max(1, per_proc), sum(last) / len(last) if last else float("nan"), tokens,
                    time.perf_counter() - t0, losses, skipped)
