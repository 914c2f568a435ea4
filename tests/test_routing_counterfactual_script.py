"""scripts/routing_counterfactual.py: a policy with one routing habit overridden, beside itself as is."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from conftest import load_script, rule_backend, write_tiny_params


def _script():  # type: ignore[no-untyped-def]
    return load_script("routing_counterfactual")


QUESTION = "### S1 P2 code hard: #1 fair cheap | #2 good mid | #3 strong {tier}\n### decide: plan for Solve P2\n"


def test_the_override_changes_only_the_rank_it_names_where_the_menu_says_so() -> None:
    o = _script().Override("code", frozenset({"hard"}), "3", "premium", "2")
    assert o.apply(QUESTION.format(tier="premium"), "S1 | #3 | -") == "S1 | #2 | -"
    assert o.apply(QUESTION.format(tier="mid"), "S1 | #3 | -") is None           # another tier: the policy's answer
    assert o.apply(QUESTION.format(tier="premium"), "S1 | #2 | -") is None       # another answer
    assert o.apply(QUESTION.format(tier="premium").replace("hard", "normal"), "S1 | #3 | -") is None
    assert o.apply(QUESTION.format(tier="premium").replace("code", "reason"), "S1 | #3 | -") is None
    assert o.apply("### decide: plan for Solve P2\n", "S1 | #3 | -") is None     # no slot line
    assert o.apply(QUESTION.format(tier="premium"), "S1 | #31 | -") is None      # a rank is a whole number
    wider = _script().Override("code", frozenset({"normal", "hard"}), "3", "premium", "1")
    assert wider.apply(QUESTION.format(tier="premium").replace("hard", "normal"), "S1 | #3 | -") == "S1 | #1 | -"
    # an answer written tier first (policy.prompt: per_part_tier_answers) gets the new rank's tier
    assert o.apply(QUESTION.format(tier="premium"), "S1 | premium #3 | -") == "S1 | mid #2 | -"
    assert wider.apply(QUESTION.format(tier="premium"), "S1 | premium #3 | -") == "S1 | cheap #1 | -"
    assert o.apply(QUESTION.format(tier="premium"), "S1 | mid #2 | -") is None


@pytest.fixture(scope="module")
def tiny_tiers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from e3orch.cli import main

    params = write_tiny_params(tmp_path_factory.mktemp("counterfactual"), policy={"prompt": "per_part_tiers"})
    assert main(["prepare", "--params", str(params)]) == 0
    return params


def test_only_the_tier_of_the_rank_the_policy_chose_is_overridden(tiny_tiers: Path) -> None:
    from e3orch.config import load_params
    from e3orch.policy.orchestrator import DecodeSettings

    params = load_params(tiny_tiers)
    script = _script()

    def make(cls: type) -> object:  # a stand-in policy: every plan slot to #3, every part acted on
        return cls(rule_backend(lambda p: "S1 | #3 | -" if "decide: plan" in p else "yes"),
                   DecodeSettings(prompt_style="per_part_tiers"))

    rows = {}
    for tier in ("free", "cheap", "mid", "pricey", "premium"):
        override = script.Override("retrieve", frozenset({"easy", "normal", "hard"}), "3", tier, "1")
        rows[tier] = {name: figures for name, *figures in asyncio.run(script.compare(params, make, "default", override))}
    # one card is the cheapest strong at lookups on the default pool (frontier-llm): one tier, where every lookup slot changes
    changed = {tier: r["overridden"][3] for tier, r in rows.items() if r["overridden"][3]}
    assert list(changed) == ["premium"]
    for tier, r in rows.items():
        assert r["as is"] == rows["free"]["as is"] and r["as is"][3] == 0  # the policy alone: the same every time
        if tier not in changed:  # nothing overridden: the same decisions, the same figures
            assert r["overridden"] == r["as is"]
    (tier,) = changed
    assert rows[tier]["overridden"][:2] != rows[tier]["as is"][:2]  # the search tool did the lookups


def test_a_plan_asked_whole_an_unknown_pool_kind_or_a_misspelt_value_is_a_one_line_error(
        tiny_tiers: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "no-policy-needed"  # both are refused before any policy is loaded
    assert _script().main([str(policy), "--params", str(tiny_tiers), "--pools", "default,elsewhere"]) == 2
    assert capsys.readouterr().err.strip() == ("routing_counterfactual: --pools 'default,elsewhere': kinds are "
                                               "default, transfer, generated")
    assert _script().main([str(policy), "--params", str(tiny_tiers), "--tier", "premum"]) == 2
    assert capsys.readouterr().err.strip() == ("routing_counterfactual: --tier 'premum': one of "
                                               "free, cheap, mid, pricey, premium")
    assert _script().main([str(policy), "--params", str(tiny_tiers), "--difficulty", "hard,tricky"]) == 2
    assert capsys.readouterr().err.strip() == ("routing_counterfactual: --difficulty 'hard,tricky': one of "
                                               "easy, normal, hard")
    compact = write_tiny_params(tmp_path / "compact")  # the tiny config's own prompt: compact
    assert _script().main([str(policy), "--params", str(compact)]) == 2
    assert capsys.readouterr().err.strip().startswith("routing_counterfactual: policy.prompt compact asks a plan whole")
