"""Seeding torch's sampler for one generation call (the policy backend and the local-model executor)."""

from __future__ import annotations

from typing import Any


def seed_sampler(seed: int, device: Any) -> None:
    """Seed the stream that sampling on ``device`` draws from. On the CPU only the CPU generator,
    as ``torch.manual_seed`` seeds it (the same draws): ``torch.manual_seed`` also queues a seed for
    every accelerator not yet started, and queueing one formats the caller's stack and keeps it,
    once per call (a sizeable share of a CPU rollout's generation calls)."""
    import torch

    if torch.device(device).type == "cpu":
        torch.random.default_generator.manual_seed(seed)
    else:
        torch.manual_seed(seed)
