"""Backends: the transformers backend's log-probs agree with scoring; vLLM needs a GPU server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from conftest import write_tiny_params

from e3orch.config import load_params
from e3orch.policy.backends.base import make_backend
from e3orch.policy.model import create_default_policy


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("backend")
    params = load_params(write_tiny_params(root))
    return create_default_policy(params, root / "init")


def test_generation_logprobs_match_scoring_and_seed_repeats(tiny_model: Path) -> None:
    torch.set_num_threads(1)
    be = make_backend("transformers", str(tiny_model), device="cpu")
    prompts = ["### executors\nE1 a: b\n### decide: milestone\n", "### task\nP1: x\n### decide: plan for Solve P1\n"]
    a = be.generate(prompts, n=2, temperature=1.0, max_new_tokens=12, seed=5)
    b = be.generate(prompts, n=2, temperature=1.0, max_new_tokens=12, seed=5)
    assert [[g.token_ids for g in x] for x in a] == [[g.token_ids for g in x] for x in b]
    for prompt, gens in zip(prompts, a):
        assert len(gens) == 2
        for g in gens:
            assert len(g.logprobs) == len(g.token_ids) > 0
            # the sampled tokens re-scored by a plain forward pass (no padding, no cache): the
            # generation-time log-probs are what the trainer's ratio compares against
            ids = be.encode_prompts([prompt])[0]
            x = torch.tensor([ids + g.token_ids])
            with torch.no_grad():
                logits = be.model(x).logits[0, len(ids) - 1 : -1]
            ref = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(g.token_ids).unsqueeze(-1)).squeeze(-1)
            assert ref.tolist() == pytest.approx(g.logprobs, abs=2e-3)
    greedy1 = be.generate(prompts, temperature=0.0, max_new_tokens=8)
    greedy2 = be.generate(prompts, temperature=0.0, max_new_tokens=8)
    assert [x[0].text for x in greedy1] == [x[0].text for x in greedy2]


def test_min_new_tokens_forces_length(tiny_model: Path) -> None:
    be = make_backend("transformers", str(tiny_model), device="cpu")
    g = be.generate(["hello"], max_new_tokens=10, min_new_tokens=10, temperature=1.0, seed=1)[0][0]
    assert len(g.token_ids) == 10


def test_unknown_backend_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown policy backend"):
        make_backend("tgi", "x")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or not os.environ.get("E3ORCH_VLLM_URL"),
                    reason="needs a CUDA GPU and a running vLLM server (E3ORCH_VLLM_URL; make vllm-serve)")
def test_vllm_backend_generates_with_logprobs(tiny_model: Path) -> None:
    be = make_backend("vllm", str(tiny_model), base_url=os.environ["E3ORCH_VLLM_URL"])
    out = be.generate(["### decide: milestone\n"], n=2, max_new_tokens=8, temperature=1.0, seed=0)
    assert len(out[0]) == 2 and all(len(g.logprobs) == len(g.token_ids) for g in out[0])


def test_vllm_backend_without_server_says_what_to_start(tiny_model: Path) -> None:
    with pytest.raises(ConnectionError, match="vllm-serve"):
        make_backend("vllm", str(tiny_model), base_url="http://127.0.0.1:9/v1")
