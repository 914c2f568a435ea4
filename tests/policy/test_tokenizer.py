"""The small default policy's tokenizer: numbers digit by digit when ``policy.model.split_digits``; a made
policy checked against ``policy.model`` before a warm start reuses it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from e3orch.config import load_params
from e3orch.policy.model import check_default_policy, train_tokenizer

# what confidences, prices and part ids look like in the compact prompts, repeated so that BPE would merge them
TEXTS = [f"### part: P{i % 12 + 1} retrieve normal: 0.{61 + i % 30} x{i % 3 + 1}\n### uses: P1 0.98 x1\nyes"
         for i in range(300)] + ["### S1 P2 reason hard: #1 good mid 12.50 | #2 good mid | #3 strong pricey 0.05"] * 50


_SPLIT = train_tokenizer(TEXTS, 400, split_digits=True)


def test_merged_numbers_are_single_tokens_without_split_digits() -> None:
    tok = train_tokenizer(TEXTS, 400)
    pieces = [tok.decode([i]) for i in tok("### part: P12 retrieve normal: 0.61 x1", add_special_tokens=False)["input_ids"]]
    assert pieces[3:] == [" P", "12", " retrieve", " normal", ":", " 0", ".", "61", " x", "1"]


def test_split_digits_reads_every_number_digit_by_digit() -> None:
    tok = _SPLIT
    digit_tokens = [t for t in tok.get_vocab() if any(c in "0123456789" for c in t)]
    assert sorted(digit_tokens) == list("0123456789")
    pieces = [tok.decode([i]) for i in tok("### part: P12 retrieve normal: 0.61 x1", add_special_tokens=False)["input_ids"]]
    assert pieces[-8:] == [":", " ", "0", ".", "6", "1", " x", "1"]


@settings(max_examples=50, deadline=None)
@given(st.text(alphabet="0123456789.:#|-Px ", max_size=40))
def test_split_digits_decodes_what_it_encodes(text: str) -> None:
    assert _SPLIT.decode(_SPLIT(text, add_special_tokens=False)["input_ids"]) == text


def test_a_default_policy_made_with_another_shape_or_tokenizer_is_named_not_reused(tiny_init_root: Path) -> None:
    params = load_params(tiny_init_root / "params.yaml")
    init = Path(params.policy.init_dir)
    check_default_policy(params, init)  # made from these params
    other = load_params(tiny_init_root / "params.yaml", {"policy.model.split_digits": True, "policy.model.num_layers": 2})
    with pytest.raises(ValueError) as e:
        check_default_policy(other, init)
    assert str(e.value) == (f"{init}: a default policy made with policy.model num_layers 1 (params: 2), split_digits "
                            "False (params: True); remove it (or run `e3orch init-policy`) to make one from params")
    check_default_policy(other, tiny_init_root)  # no policy there: nothing to check
