"""The small default policy's tokenizer: numbers digit by digit when ``policy.model.split_digits``."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from e3orch.policy.model import train_tokenizer

# what confidences, prices and part ids look like in the compact prompts, repeated so that BPE would merge them
TEXTS = [f"### part: P{i % 12 + 1} retrieve normal: 0.{61 + i % 30} x{i % 3 + 1}\n### uses: P1 0.98 x1\nyes"
         for i in range(300)] + ["### S1 P2 reason hard: #1 good mid 12.50 | #2 good mid | #3 strong pricey 0.05"] * 50


def test_merged_numbers_are_single_tokens_without_split_digits() -> None:
    tok = train_tokenizer(TEXTS, 400)
    pieces = [tok.decode([i]) for i in tok("### part: P12 retrieve normal: 0.61 x1", add_special_tokens=False)["input_ids"]]
    assert pieces[3:] == [" P", "12", " retrieve", " normal", ":", " 0", ".", "61", " x", "1"]


def test_split_digits_reads_every_number_digit_by_digit() -> None:
    tok = train_tokenizer(TEXTS, 400, split_digits=True)
    digit_tokens = [t for t in tok.get_vocab() if any(c in "0123456789" for c in t)]
    assert sorted(digit_tokens) == list("0123456789")
    pieces = [tok.decode([i]) for i in tok("### part: P12 retrieve normal: 0.61 x1", add_special_tokens=False)["input_ids"]]
    assert pieces[-8:] == [":", " ", "0", ".", "6", "1", " x", "1"]


@settings(max_examples=50, deadline=None)
@given(st.text(alphabet="0123456789.:#|-Px ", max_size=40))
def test_split_digits_decodes_what_it_encodes(text: str) -> None:
    tok = _SPLIT
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


_SPLIT = train_tokenizer(TEXTS, 400, split_digits=True)
