"""The RL objective against a plain-loop reference and on hand-built tokens; batching."""

from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from e3orch.training.data import Example, collate, make_batches
from e3orch.training.rl import KL_TOKEN_MAX, clipped_pg_loss, without_stop_token


def reference_loss(new, old, ref, adv, mask, weight, clip, beta, clip_high=None, pg_mask=None):  # type: ignore[no-untyped-def]
    """Token by token, decision by decision — the definition, no vectorisation (``pg_mask``: the
    tokens with a policy-gradient term; every masked token keeps its KL term)."""
    high = clip if clip_high is None else clip_high
    total = 0.0
    for b in range(len(adv)):
        toks = []
        for t in range(len(mask[b])):
            if not mask[b][t]:
                continue
            ratio = math.exp(new[b][t] - old[b][t])
            pg = -min(ratio * adv[b], max(1 - clip, min(1 + high, ratio)) * adv[b])
            if pg_mask is not None and not pg_mask[b][t]:
                pg = 0.0
            d = ref[b][t] - new[b][t]
            toks.append(pg + beta * min(KL_TOKEN_MAX, math.exp(d) - d - 1))
        total += weight[b] * (sum(toks) / max(1, len(toks)))
    return total


def random_logprobs(seed: int, B: int, K: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """New, old and reference log-probs [B, K] near one another."""
    g = torch.Generator().manual_seed(seed)
    new = torch.randn(B, K, generator=g) * 0.3 - 1.0
    return new, new + torch.randn(B, K, generator=g) * 0.4, new + torch.randn(B, K, generator=g) * 0.2


def test_clipped_pg_matches_plain_loop() -> None:
    B, K = 5, 7
    new, old, ref = random_logprobs(0, B, K)
    adv = torch.tensor([1.0, -0.5, 0.0, 2.0, -1.5])
    mask = torch.ones(B, K)
    mask[0, :3] = 0
    mask[3, :6] = 0
    weight = torch.tensor([0.1, 0.2, 0.3, 0.25, 0.15])
    parts = clipped_pg_loss(new, old, ref, adv, mask, weight, clip_eps=0.2, kl_coef=0.05)
    expected = reference_loss(new.tolist(), old.tolist(), ref.tolist(), adv.tolist(), mask.tolist(), weight.tolist(), 0.2, 0.05)
    assert float(parts.loss) == pytest.approx(expected, rel=1e-5)
    assert 0.0 <= parts.clip_frac <= 1.0 and parts.kl >= 0.0


def test_diagnostics_on_hand_built_tokens() -> None:
    # token ratios 1.5, 1, 0.5 at advantage 1, clip 0.2: 1.5 clips to 1.2, 0.5 is outside the range but the
    # min keeps its unclipped (smaller) value; two of three tokens are outside [0.8, 1.2]
    new = torch.tensor([[math.log(1.5), 0.0, math.log(0.5)]])
    parts = clipped_pg_loss(new, torch.zeros(1, 3), None, torch.tensor([1.0]), torch.ones(1, 3), torch.tensor([1.0]))
    assert parts.clip_frac == pytest.approx(2 / 3)
    assert parts.ratio_mean == pytest.approx((1.5 + 1.0 + 0.5) / 3)
    assert parts.pg == pytest.approx(-(1.2 + 1.0 + 0.5) / 3) and float(parts.loss) == pytest.approx(parts.pg)
    assert parts.kl == 0.0


@pytest.mark.parametrize(("mask", "loss", "mean"), [([[1.0, 1.0]], -0.1 * (1 + 3) / 2, 2.0), ([[1.0, 0.0]], -0.1, 1.0)])
def test_the_entropy_bonus_is_the_masked_mean_entropy_times_its_coefficient(mask: list[list[float]], loss: float,
                                                                           mean: float) -> None:
    zero = torch.zeros(1, 2)
    parts = clipped_pg_loss(zero, zero, None, torch.tensor([0.0]), torch.tensor(mask), torch.tensor([1.0]),
                            entropy=torch.tensor([[1.0, 3.0]]), entropy_coef=0.1)
    assert float(parts.loss) == pytest.approx(loss) and parts.entropy == pytest.approx(mean)


@pytest.mark.parametrize("high", [0.2, 0.28, 4.0])
def test_clip_higher_matches_plain_loop(high: float) -> None:
    g = torch.Generator().manual_seed(1)
    B, K = 6, 5
    new = torch.randn(B, K, generator=g) - 2.0
    old = new - torch.rand(B, K, generator=g) * 3.0  # ratios from 1 to e^3: past 1.2, some past 5
    ref = new + torch.randn(B, K, generator=g) * 0.2
    adv = torch.tensor([1.0, -0.5, 0.0, 2.0, -1.5, 0.7])
    mask, weight = torch.ones(B, K), torch.full((B,), 1 / B)
    parts = clipped_pg_loss(new, old, ref, adv, mask, weight, clip_eps=0.2, clip_eps_high=high, kl_coef=0.05)
    expected = reference_loss(new.tolist(), old.tolist(), ref.tolist(), adv.tolist(), mask.tolist(), weight.tolist(),
                              0.2, 0.05, clip_high=high)
    assert float(parts.loss) == pytest.approx(expected, rel=1e-5)


def test_clip_higher_lets_a_rare_good_token_keep_rising() -> None:
    # a slot alternative the policy gave probability 1e-4 did better: once its ratio is past 1.2,
    # symmetric clipping stops its gradient; with clip_eps_high 4 it keeps rising up to 5x
    old = torch.tensor([[math.log(1e-4)]])
    for ratio, high, moves in ((1.5, None, False), (1.5, 4.0, True), (6.0, 4.0, False)):
        new = (old + math.log(ratio)).clone().requires_grad_(True)
        clipped_pg_loss(new, old, None, torch.tensor([1.0]), torch.ones(1, 1), torch.ones(1),
                        clip_eps=0.2, clip_eps_high=high).loss.backward()
        assert new.grad is not None
        assert (new.grad.item() < 0) == moves  # a negative gradient of the loss raises the token


def test_kl_of_a_token_pushed_far_below_the_reference_is_capped_and_adds_no_gradient() -> None:
    # token 0 sits 15 nats below the warm start (k3 would be e^15 ≈ 3.3e6), token 1 just below it
    new = torch.tensor([[-20.0, -1.0]], requires_grad=True)
    ref = torch.tensor([[-5.0, -0.9]])
    parts = clipped_pg_loss(new, new.detach(), ref, torch.tensor([0.0]), torch.ones(1, 2), torch.ones(1), kl_coef=1.0)
    small = math.exp(0.1) - 0.1 - 1
    assert float(parts.loss.detach()) == pytest.approx((KL_TOKEN_MAX + small) / 2)
    assert parts.kl == pytest.approx((KL_TOKEN_MAX + small) / 2)
    parts.loss.backward()
    assert new.grad is not None
    assert new.grad[0, 0].item() == 0.0  # capped: it no longer drives the step
    assert new.grad[0, 1].item() == pytest.approx((1 - math.exp(0.1)) / 2)  # d/dnew of k3, per-token mean
    # padding never contributes, whatever its log-probs
    pad = clipped_pg_loss(torch.tensor([[-1.0, -50.0]]), torch.tensor([[-1.0, -50.0]]),
                          torch.tensor([[-1.0, 0.0]]), torch.tensor([1.0]), torch.tensor([[1.0, 0.0]]),
                          torch.ones(1), kl_coef=1.0)
    assert float(pad.loss) == pytest.approx(-1.0) and pad.kl == 0.0


def test_gradient_sign_follows_advantage() -> None:
    lp = torch.zeros(1, 3, requires_grad=True)
    for adv, sign in ((1.0, -1), (-1.0, 1)):
        lp.grad = None
        parts = clipped_pg_loss(lp, torch.zeros(1, 3), None, torch.tensor([adv]), torch.ones(1, 3), torch.ones(1))
        parts.loss.backward()
        assert all(math.copysign(1, x) == sign for x in lp.grad[0].tolist())  # minimising raises good tokens' log-prob


def test_collate_left_pads_and_frames_completions() -> None:
    exs = [Example([5, 6, 7], [8, 9], 1.0, [-0.1, -0.2]), Example([5], [8, 9, 10], -1.0, [-0.3, -0.4, -0.5])]
    b = collate(exs, pad_id=0)
    assert b["input_ids"].tolist() == [[5, 6, 7, 8, 9], [0, 5, 8, 9, 10]]
    assert b["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [0, 1, 1, 1, 1]]
    assert b["completion_mask"].tolist() == [[0, 1, 1], [1, 1, 1]]
    assert b["old_logprobs"][0].tolist() == pytest.approx([0.0, -0.1, -0.2])
    assert b["position_ids"].tolist() == [[0, 1, 2, 3, 4], [0, 0, 1, 2, 3]]


def test_make_batches_respects_the_token_budget_and_keeps_every_example() -> None:
    rng = random.Random(0)
    exs = [Example([1] * rng.randint(1, 50), [2] * rng.randint(1, 9)) for _ in range(200)]
    batches = make_batches(exs, 256, random.Random(1))
    assert sum(len(b) for b in batches) == 200
    for b in batches:
        width = max(len(e.prompt_ids) + len(e.completion_ids) for e in b)
        assert width * len(b) <= 256 or len(b) == 1


def test_grouped_batches_keep_every_answer_of_a_question_together() -> None:
    # three questions of 6 tokens, answered 2, 1 and 3 ways (completions of 2 tokens: width 8); 24 tokens a batch
    exs = [Example([q] * 6, [a, 9]) for q, answers in ((1, [5, 6]), (2, [5]), (3, [5, 6, 7])) for a in answers]
    random.Random(0).shuffle(exs)
    by_length = make_batches(exs, 24, random.Random(1))
    assert sorted(len(b) for b in by_length) == [3, 3]  # by length alone, some question's answers are split
    assert any(len({i for i, b in enumerate(by_length) for e in b if e.prompt_ids[0] == q}) > 1 for q in (1, 3))
    grouped = make_batches(exs, 24, random.Random(1), group_prompts=True)
    assert sorted(sorted(e.completion_ids[0] for e in b) for b in grouped) == [[5, 5, 6], [5, 6, 7]]
    assert sorted(sorted({e.prompt_ids[0] for e in b}) for b in grouped) == [[1, 2], [3]]


@given(st.lists(st.tuples(st.integers(1, 6), st.integers(1, 40), st.integers(1, 4)), min_size=1, max_size=60),
       st.integers(64, 512))
@settings(max_examples=60, deadline=None)
def test_grouped_batches_keep_the_budget_and_every_example_and_split_only_a_question_too_large_for_one(
        rows: list[tuple[int, int, int]], budget: int) -> None:
    # rows: (question, prompt length, answer); a question's prompt is the same tokens wherever it appears
    exs = [Example([q] * (n + q), [a, 9]) for q, n, a in rows]
    batches = make_batches(exs, budget, random.Random(0), group_prompts=True)
    assert sorted(id(e) for b in batches for e in b) == sorted(id(e) for e in exs)
    for b in batches:
        width = max(len(e.prompt_ids) + len(e.completion_ids) for e in b)
        assert width * len(b) <= budget or len(b) == 1
    for prompt in {tuple(e.prompt_ids) for e in exs}:
        group = [e for e in exs if tuple(e.prompt_ids) == prompt]
        holding = {i for i, b in enumerate(batches) for e in b if tuple(e.prompt_ids) == prompt}
        if len(group) * (len(prompt) + 2) <= budget:
            assert len(holding) == 1  # a question that fits a batch is never split


def test_without_the_stop_token_the_policy_gradient_leaves_it_to_the_kl_term() -> None:
    # a decision `no` + stop at ratio 1 and advantage -1, the reference where the policy is (KL gradient 0):
    # each token gets half the push down; without the stop token `no` gets the same half and the stop none
    stop = 7
    ids = torch.tensor([[3, 5, stop], [3, 5, 6]])  # left-padded rows, completions in the last two columns
    cmask = torch.tensor([[1.0, 1.0], [0.0, 1.0]])
    pg_mask = without_stop_token(ids, cmask, stop)
    assert pg_mask.tolist() == [[1.0, 0.0], [0.0, 1.0]]  # a completion cut short (no stop) keeps its last token
    for mask_for_pg, expected, loss in ((None, [0.5, 0.5], 1.0), (pg_mask[:1], [0.5, 0.0], 0.5)):
        new = torch.log(torch.tensor([[0.6, 0.9]])).requires_grad_(True)
        parts = clipped_pg_loss(new, new.detach(), new.detach(), torch.tensor([-1.0]), torch.ones(1, 2),
                                torch.tensor([1.0]), kl_coef=0.1, pg_mask=mask_for_pg)
        parts.loss.backward()
        assert new.grad is not None and new.grad[0].tolist() == pytest.approx(expected)
        assert float(parts.loss.detach()) == pytest.approx(loss) and parts.pg == pytest.approx(loss)


def test_leaving_the_stop_token_out_matches_the_plain_loop_without_its_policy_gradient_term() -> None:
    B, K = 4, 5
    new, old, ref = random_logprobs(1, B, K)
    adv = torch.tensor([1.0, -0.5, 2.0, -1.5])
    mask = torch.ones(B, K)
    mask[1, :2] = 0
    pg_mask = mask.clone()
    pg_mask[:, -1] = 0
    weight = torch.tensor([0.4, 0.3, 0.2, 0.1])
    parts = clipped_pg_loss(new, old, ref, adv, mask, weight, clip_eps=0.2, kl_coef=0.05, pg_mask=pg_mask)
    lists = (new.tolist(), old.tolist(), ref.tolist(), adv.tolist(), mask.tolist(), weight.tolist())
    assert float(parts.loss) == pytest.approx(reference_loss(*lists, 0.2, 0.05, pg_mask=pg_mask.tolist()), rel=1e-5)
    pg_only = reference_loss(*lists, 0.2, 0.0, pg_mask=pg_mask.tolist())
    assert parts.pg == pytest.approx(pg_only, rel=1e-5)
