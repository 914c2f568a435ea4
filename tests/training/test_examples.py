"""Scored decisions → update examples: tree weights, and leaving zero-advantage decisions out."""

from __future__ import annotations

import polars as pl
import pytest
from conftest import write_tiny_params

from e3orch.config import load_params
from e3orch.policy.model import create_default_policy
from e3orch.training.trainer import examples_from_scored


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("examples")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(create_default_policy(load_params(write_tiny_params(root)), root / "init"))


def _scored(advantages: dict[str, list[float]]) -> pl.DataFrame:
    rows = [{"tree_id": t, "prompt": f"### decide: milestone {t}{i}\n", "token_ids": [5, 6, 7],
             "logprobs": [-0.1, -0.2, -0.3], "advantage": a}
            for t, adv in advantages.items() for i, a in enumerate(adv)]
    return pl.DataFrame(rows)


def test_every_tree_weighs_the_same(tokenizer) -> None:  # type: ignore[no-untyped-def]
    ex = examples_from_scored(_scored({"a": [0.5, 0.0, -0.5, 0.0], "b": [1.0, 0.0]}), tokenizer, 256)
    assert [e.weight for e in ex] == [0.25] * 4 + [0.5] * 2
    assert [e.advantage for e in ex] == [0.5, 0.0, -0.5, 0.0, 1.0, 0.0]
    assert ex[0].completion_ids == [5, 6, 7] and ex[0].old_logprobs == [-0.1, -0.2, -0.3]


def test_skip_zero_advantage_keeps_the_rest_and_reweights(tokenizer) -> None:  # type: ignore[no-untyped-def]
    scored = _scored({"a": [0.5, 0.0, -0.5, 0.0], "b": [1.0, 0.0], "c": [0.0, 0.0]})
    ex = examples_from_scored(scored, tokenizer, 256, skip_zero_advantage=True)
    assert [(e.group, e.advantage, e.weight) for e in ex] == [("a", 0.5, 0.5), ("a", -0.5, 0.5), ("b", 1.0, 1.0)]
