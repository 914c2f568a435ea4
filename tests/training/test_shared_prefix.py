"""Decisions that share a prompt compute it once in the update: the same log-probs, entropies and
gradients as one forward per decision, and a step holds every answer a question got."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import LlamaConfig, LlamaForCausalLM

from e3orch.training.data import (
    Example,
    collate,
    completion_logprobs,
    prefix_cache_kwarg,
    shared_prefix_logprobs,
)
from e3orch.training.trainer import _split


def _model(attn: str = "sdpa") -> Any:
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=48, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=64, max_position_embeddings=96, attn_implementation=attn)
    return LlamaForCausalLM(cfg).float()


def _examples(rng: random.Random, prompts: int, answers: int) -> list[Example]:
    """``prompts`` questions of 3-11 tokens, each answered 1 to ``answers`` times (1-6 tokens and EOS 2)."""
    out = []
    for _ in range(prompts):
        prompt = [rng.randrange(3, 48) for _ in range(rng.randint(3, 11))]
        for _ in range(rng.randint(1, answers)):
            out.append(Example(prompt, [rng.randrange(3, 48) for _ in range(rng.randint(0, 5))] + [2]))
    rng.shuffle(out)
    return out


def _grads(model: Any) -> dict[str, torch.Tensor]:
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return grads


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000), prompts=st.integers(1, 5), answers=st.integers(1, 4))
def test_shared_prompts_give_the_unshared_log_probs_entropies_and_gradients(attn: str, seed: int, prompts: int,
                                                                           answers: int) -> None:
    model = _model(attn)
    kw = prefix_cache_kwarg(model)
    assert kw is not None
    examples = _examples(random.Random(seed), prompts, answers)
    batch = collate(examples, 0)
    mask = batch["completion_mask"]
    weights = torch.linspace(0.5, 1.5, mask.shape[1])  # a loss that reads every token differently

    lp, ent = completion_logprobs(model, batch, with_entropy=True)
    ((lp * mask * weights).sum() + (ent * mask).sum()).backward()
    plain = _grads(model)
    slp, sent = shared_prefix_logprobs(model, examples, 0, "cpu", kw, with_entropy=True)
    ((slp * mask * weights).sum() + (sent * mask).sum()).backward()
    shared = _grads(model)

    assert slp.shape == lp.shape
    assert torch.allclose(slp * mask, lp * mask, atol=1e-5)
    assert torch.allclose(sent * mask, ent * mask, atol=1e-5)
    assert set(shared) == set(plain)
    for name, g in plain.items():
        assert torch.allclose(shared[name], g, atol=1e-5, rtol=1e-4), name


def test_only_a_full_attention_model_with_a_cache_keyword_shares_prompts() -> None:
    assert prefix_cache_kwarg(_model("sdpa")) in ("cache", "past_key_values")
    assert prefix_cache_kwarg(object()) is None  # not a transformers model
    other = _model("sdpa")
    other.config._attn_implementation_internal = "flash_attention_2"  # its own masking: one forward per decision
    assert prefix_cache_kwarg(other) is None
    sliding = _model("sdpa")
    sliding.config.use_sliding_window = True
    assert prefix_cache_kwarg(sliding) is None


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), prompts=st.integers(1, 30), parts=st.integers(1, 6))
def test_a_split_keeps_each_questions_answers_in_one_minibatch(seed: int, prompts: int, parts: int) -> None:
    rng = random.Random(seed)
    examples = _examples(rng, prompts, 4)
    split = _split(examples, parts, rng, by_question=True)
    assert len(split) == parts
    assert sorted(map(id, (e for mb in split for e in mb))) == sorted(map(id, examples))  # each example once
    home = {}
    for i, mb in enumerate(split):
        for e in mb:
            assert home.setdefault(tuple(e.prompt_ids), i) == i  # a question's answers: one minibatch
    # balanced: no minibatch exceeds the smallest by more than the largest group
    largest = max(sum(1 for e in examples if e.prompt_ids == p.prompt_ids) for p in examples)
    assert max(map(len, split)) - min(map(len, split)) <= largest


def test_a_split_is_the_same_for_the_same_seed() -> None:
    examples = _examples(random.Random(1), 12, 3)
    a = _split(examples, 4, random.Random(7), by_question=True)
    b = _split(examples, 4, random.Random(7), by_question=True)
    assert [[id(e) for e in mb] for mb in a] == [[id(e) for e in mb] for mb in b]
