"""Scored decisions → update examples: tree weights, and leaving zero-advantage decisions out."""

from __future__ import annotations

import polars as pl
import pytest
from conftest import write_tiny_params

from e3orch.config import load_params
from e3orch.policy.model import create_default_policy
from e3orch.rollout.records import spine_nodes
from e3orch.training.trainer import examples_from_scored


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("examples")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(create_default_policy(load_params(write_tiny_params(root)), root / "init"))


def _scored(advantages: dict[str, list[float]]) -> pl.DataFrame:
    rows = [{"tree_id": t, "prompt": f"### decide: milestone {t}{i}\n", "token_ids": [5, 6, 7],
             "logprobs": [-0.1, -0.2, -0.3], "advantage": a, "sub_prompts": [], "sub_lengths": []}
            for t, adv in advantages.items() for i, a in enumerate(adv)]
    return pl.DataFrame(rows, schema_overrides={"sub_prompts": pl.List(pl.Utf8), "sub_lengths": pl.List(pl.Int64)})


def test_every_tree_weighs_the_same(tokenizer) -> None:  # type: ignore[no-untyped-def]
    ex = examples_from_scored(_scored({"a": [0.5, 0.0, -0.5, 0.0], "b": [1.0, 0.0]}), tokenizer, 256)
    assert [e.weight for e in ex] == [0.25] * 4 + [0.5] * 2
    assert [e.advantage for e in ex] == [0.5, 0.0, -0.5, 0.0, 1.0, 0.0]
    assert ex[0].completion_ids == [5, 6, 7] and ex[0].old_logprobs == [-0.1, -0.2, -0.3]


def test_skip_zero_advantage_keeps_the_rest_and_reweights(tokenizer) -> None:  # type: ignore[no-untyped-def]
    scored = _scored({"a": [0.5, 0.0, -0.5, 0.0], "b": [1.0, 0.0], "c": [0.0, 0.0]})
    ex = examples_from_scored(scored, tokenizer, 256, skip_zero_advantage=True)
    assert [(e.group, e.advantage, e.weight) for e in ex] == [("a", 0.5, 0.5), ("a", -0.5, 0.5), ("b", 1.0, 1.0)]


def test_a_decision_asked_part_by_part_trains_as_its_answers(tokenizer) -> None:  # type: ignore[no-untyped-def]
    scored = _scored({"a": [0.5, -1.0]})
    slots = ["### S1 P1 compute easy: #1 good 0.5\n### decide: plan for Solve P1\n",
             "### S1 P2 compute hard: #1 good 0.5 | #2 strong 9\n### decide: plan for Solve P2\n"]
    scored = scored.with_columns(
        token_ids=pl.Series([[5, 6, 7], [8, 9, 10, 11, 12]]), logprobs=pl.Series([[-0.1, -0.2, -0.3], [-1.0, -2.0, -3.0, -4.0, -5.0]]),
        sub_prompts=pl.Series([[], slots], dtype=pl.List(pl.Utf8)), sub_lengths=pl.Series([[], [2, 3]], dtype=pl.List(pl.Int64)))
    ex = examples_from_scored(scored, tokenizer, 256)
    # three examples in tree a: the milestone and the plan's two slots, each from its own prompt
    assert [(e.completion_ids, e.old_logprobs, e.advantage, e.weight) for e in ex] == [
        ([5, 6, 7], [-0.1, -0.2, -0.3], 0.5, 1 / 3), ([8, 9], [-1.0, -2.0], -1.0, 1 / 3),
        ([10, 11, 12], [-3.0, -4.0, -5.0], -1.0, 1 / 3)]
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    assert ex[2].prompt_ids == bos + tokenizer(slots[1], add_special_tokens=False)["input_ids"]


def test_forced_and_over_long_decisions_do_not_count_in_their_trees_weight(tokenizer) -> None:  # type: ignore[no-untyped-def]
    scored = _scored({"a": [0.5, 0.5, 0.5], "b": [1.0]}).with_columns(
        token_ids=pl.Series([[5, 6, 7], [], list(range(5, 45)), [5, 6, 7]]),
        logprobs=pl.Series([[-0.1] * 3, [], [-0.1] * 40, [-0.1] * 3]))
    ex = examples_from_scored(scored, tokenizer, 16)  # a: one decision forced, one 40 tokens long
    assert [(e.group, e.weight) for e in ex] == [("a", 1.0), ("b", 1.0)]


def test_a_long_prompt_is_cut_from_the_left_to_fit(tokenizer) -> None:  # type: ignore[no-untyped-def]
    (e,) = examples_from_scored(_scored({"a": [0.5]}), tokenizer, 7)
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    full = bos + tokenizer("### decide: milestone a0\n", add_special_tokens=False)["input_ids"]
    assert len(full) > 4 and e.prompt_ids == full[-4:] and len(e.prompt_ids) + len(e.completion_ids) == 7


def test_copies_of_one_answer_merge_into_one_example(tokenizer) -> None:  # type: ignore[no-untyped-def]
    # a plan branch asked slot by slot: the greedy plan (P1 #1, P2 #1) and two alternatives that each
    # change one slot; the unchanged slots repeat the greedy answers to the same prompts
    p1 = "### S1 P1 reason normal: #1 good 3.5 | #2 strong 11\n### decide: plan for Solve P1\n"
    p2 = "### S1 P2 code normal: #1 good 3.5 | #2 strong 5.6\n### decide: plan for Solve P2\n"
    one, two = [5, 6], [7, 8]  # "#1" and "#2", say
    rows = [("greedy", one + one, [-0.1, -0.1, -0.2, -0.2], 0.1),
            ("P1 to #2", two + one, [-3.0, -3.0, -0.2, -0.2], 0.3),
            ("P2 to #2", one + two, [-0.1, -0.1, -2.0, -2.0], -0.4)]
    scored = pl.DataFrame(
        [{"tree_id": "a", "prompt": "", "token_ids": t, "logprobs": lp, "advantage": adv, "sub_prompts": [p1, p2],
          "sub_lengths": [2, 2]} for _, t, lp, adv in rows] + [
            {"tree_id": "b", "prompt": p1, "token_ids": one, "logprobs": [-0.1, -0.1], "advantage": 1.0,
             "sub_prompts": [], "sub_lengths": []}],  # the same answer in another tree stays apart
        schema_overrides={"sub_prompts": pl.List(pl.Utf8), "sub_lengths": pl.List(pl.Int64)})
    ex = examples_from_scored(scored, tokenizer, 256)
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    prompt_of = {tuple(bos + tokenizer(p, add_special_tokens=False)["input_ids"]): name for name, p in (("P1", p1), ("P2", p2))}
    got = [(e.group, prompt_of[tuple(e.prompt_ids)], e.completion_ids, round(e.advantage, 9), round(e.weight, 9)) for e in ex]
    # six slot answers in tree a, four distinct: P1 #1 twice (0.1, -0.4), P2 #1 twice (0.1, 0.3)
    assert got == [("a", "P1", one, -0.15, round(2 / 6, 9)), ("a", "P2", one, 0.2, round(2 / 6, 9)), ("a", "P1", two, 0.3, round(1 / 6, 9)),
                   ("a", "P2", two, -0.4, round(1 / 6, 9)), ("b", "P1", one, 1.0, 1.0)]
    # the same gradient as the copies apart: sum of weight x advantage per distinct answer
    assert sum(e.weight * e.advantage for e in ex if e.group == "a") == pytest.approx((0.1 + 0.1 + 0.3 + 0.3 - 0.4 - 0.4) / 6)


def test_skip_zero_advantage_drops_copies_whose_advantages_cancel(tokenizer) -> None:  # type: ignore[no-untyped-def]
    # a two-slot plan and one alternative changing slot 2: slot 1's answer is in both siblings with
    # advantages +0.2 and -0.2 — merged, 0: it teaches nothing, and with skip_zero_advantage it leaves
    p1 = "### S1 P1 reason normal: #1 good 3.5 | #2 strong 11\n### decide: plan for Solve P1\n"
    p2 = "### S1 P2 code normal: #1 good 3.5 | #2 strong 5.6\n### decide: plan for Solve P2\n"
    one, two = [5, 6], [7, 8]
    scored = pl.DataFrame(
        [{"tree_id": "a", "prompt": "", "token_ids": t, "logprobs": [-0.1] * 4, "advantage": adv, "sub_prompts": [p1, p2],
          "sub_lengths": [2, 2]} for t, adv in ((one + one, 0.2), (one + two, -0.2))],
        schema_overrides={"sub_prompts": pl.List(pl.Utf8), "sub_lengths": pl.List(pl.Int64)})
    kept = examples_from_scored(scored, tokenizer, 256, skip_zero_advantage=True)
    assert sorted((e.completion_ids, e.advantage, e.weight) for e in kept) == [(one, 0.2, 0.5), (two, -0.2, 0.5)]
    assert len(examples_from_scored(scored, tokenizer, 256)) == 3  # without it the cancelled copy stays


def test_spine_anchor_keeps_comparisons_and_the_spines_zero_advantage_decisions(tokenizer) -> None:  # type: ignore[no-untyped-def]
    # spine r -> m1 -> p1 -> m2 (greedy); at m1 an alternative a1 with its continuation a1c; at p1 an alternative b1
    nodes = [("r", "", 0, 0, 0.0), ("m1", "r", 1, 0, 0.1), ("a1", "r", 1, 1, -0.1), ("a1c", "a1", 2, 0, 0.0),
             ("p1", "m1", 2, 0, 0.0), ("b1", "m1", 2, 1, 0.0), ("m2", "p1", 3, 0, 0.0), ("b1c", "b1", 3, 0, 0.0)]
    scored = _scored({"t": [a for *_, a in nodes]}).with_columns(
        node_id=pl.Series([n for n, *_ in nodes]), parent_id=pl.Series([p for _, p, *_ in nodes]),
        depth=pl.Series([d for _, _, d, _, _ in nodes]), sibling_index=pl.Series([i for *_, i, _ in nodes]))
    assert spine_nodes(scored) == {"r", "m1", "p1", "m2"}
    kept = examples_from_scored(scored, tokenizer, 256, anchor="spine")
    # the spine's four (three of them at advantage 0) and the alternative a1 (-0.1); b1 and both continuations go
    assert [(e.advantage, e.weight) for e in kept] == [(0.0, 0.2), (0.1, 0.2), (-0.1, 0.2), (0.0, 0.2), (0.0, 0.2)]
    assert len(examples_from_scored(scored, tokenizer, 256)) == len(nodes)
    assert len(examples_from_scored(scored, tokenizer, 256, anchor="spine", skip_zero_advantage=True)) == 2


def test_departure_credits_only_where_an_answer_departs_from_the_first_childs(tokenizer) -> None:  # type: ignore[no-untyped-def]
    """train.pg_tokens: departure on a two-slot plan branch point: the first child (greedy) and two
    alternatives, each changing one slot's rank (the token after the shared `S1 | #`); and a one-part
    decision that did not branch. Under branch_first the first child's advantage is 0."""
    from e3orch.training.trainer import departures

    p1 = "### S1 P1 reason normal: #1 good mid | #2 strong pricey\n### decide: plan for Solve P1\n"
    p2 = "### S1 P2 code normal: #1 good mid | #2 strong pricey\n### decide: plan for Solve P2\n"
    fmt, one, two, end = [53, 19, 276, 278], [20], [21], [276, 294, 2]
    a1, a2 = fmt + one + end, fmt + two + end  # "S1 | #1 | -</s>", "S1 | #2 | -</s>"
    rows = [("g", 0, a1 + a1, 0.0), ("x", 1, a2 + a1, -0.1), ("y", 2, a1 + a2, 0.05)]
    scored = pl.DataFrame(
        [{"node_id": n, "tree_id": "t", "parent_id": "m", "n_siblings": 3, "sibling_index": i, "prompt": "",
          "token_ids": t, "logprobs": [-0.1] * 16, "advantage": adv, "sub_prompts": [p1, p2], "sub_lengths": [8, 8]}
         for n, i, t, adv in rows] + [
            {"node_id": "m", "tree_id": "t", "parent_id": "", "n_siblings": 1, "sibling_index": 0, "prompt": "### decide: x\n",
             "token_ids": [343, 2], "logprobs": [-0.1, -0.1], "advantage": 0.0, "sub_prompts": [], "sub_lengths": []}],
        schema_overrides={"sub_prompts": pl.List(pl.Utf8), "sub_lengths": pl.List(pl.Int64)})
    # the greedy slots train from the rank on (each has a sibling departing there); an alternative's
    # changed slot from the rank on, its repeated slot not at all; a decision without siblings is not matched
    assert departures(scored) == {"g": [4, 4], "x": [4, None], "y": [None, 4]}
    ex = examples_from_scored(scored, tokenizer, 256, pg_tokens="departure")
    got = sorted((e.completion_ids == a2, e.pg_from, round(e.advantage, 9), round(e.weight, 9)) for e in ex if e.completion_ids != [343, 2])
    # P1 #1 (g, y: 0 and 0), P2 #1 (g, x: 0 and 0), P1 #2 (x: -0.1), P2 #2 (y: 0.05); seven answers in tree t
    assert got == [(False, 4, 0.0, round(2 / 7, 9)), (False, 4, 0.0, round(2 / 7, 9)),
                   (True, 4, -0.1, round(1 / 7, 9)), (True, 4, 0.05, round(1 / 7, 9))]
    # pg_tokens all: every token of every answer with its decision's advantage, as before
    whole = examples_from_scored(scored, tokenizer, 256)
    assert {e.pg_from for e in whole} == {0}
    assert sorted(round(e.advantage, 9) for e in whole) == [-0.1, -0.05, 0.0, 0.025, 0.05]


def test_collate_masks_the_policy_gradient_before_pg_from() -> None:
    from e3orch.training.data import Example, collate

    batch = collate([Example([1, 2], [5, 6, 7, 8], pg_from=2), Example([1, 2, 3], [5, 6]), Example([1], [5, 6, 7], pg_from=9)], 0)
    assert batch["completion_mask"].tolist() == [[1, 1, 1, 1], [0, 0, 1, 1], [0, 1, 1, 1]]
    assert batch["pg_mask"].tolist() == [[0, 0, 1, 1], [0, 0, 1, 1], [0, 0, 0, 0]]
