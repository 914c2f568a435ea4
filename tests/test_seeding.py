"""The sampler's seed on the CPU: the draws torch.manual_seed gives, without queueing accelerator seeds."""

from __future__ import annotations

import pytest
import torch

from e3orch.seeding import seed_sampler


@pytest.mark.parametrize("device", ["cpu", torch.device("cpu")])
def test_the_cpu_stream_is_torch_manual_seeds_and_nothing_else_is_seeded(device: object,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(7)
    expected = torch.rand(5)
    torch.rand(3)  # move the stream on
    monkeypatch.setattr(torch, "manual_seed", lambda *_: pytest.fail("torch.manual_seed called on the CPU"))
    seed_sampler(7, device)
    assert torch.equal(torch.rand(5), expected)
