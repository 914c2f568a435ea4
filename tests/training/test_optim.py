"""The guarded optimizer step: a non-finite gradient is skipped, never applied."""

from __future__ import annotations

import torch
from accelerate import Accelerator

from e3orch.training.optim import finite_step


def _setup() -> tuple[Accelerator, torch.nn.Linear, torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    torch.manual_seed(0)
    acc = Accelerator(cpu=True)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    model, opt, sched = acc.prepare(model, opt, sched)
    return acc, model, opt, sched


def test_finite_gradient_steps() -> None:
    acc, model, opt, sched = _setup()
    before = model.weight.detach().clone()
    model(torch.ones(1, 3)).sum().backward()  # d/dw = [1, 1, 1]; clipped to norm 1 with the bias
    assert finite_step(acc, model, opt, sched, max_grad_norm=10.0)
    assert torch.allclose(model.weight.detach(), before - 0.1)
    assert model.weight.grad is None


def test_non_finite_gradient_is_skipped_and_cleared() -> None:
    acc, model, opt, sched = _setup()
    before = model.weight.detach().clone()
    (model(torch.ones(1, 3)).sum() * float("inf")).backward()
    assert not finite_step(acc, model, opt, sched, max_grad_norm=1.0)
    assert torch.equal(model.weight.detach(), before)   # weights untouched, not NaN
    assert model.weight.grad is None                    # and the bad gradient is gone
    model(torch.ones(1, 3)).sum().backward()
    assert finite_step(acc, model, opt, sched, max_grad_norm=10.0)  # training goes on
    assert torch.isfinite(model.weight).all()
