"""Generated pools: deterministic, honest cards, solvable, and sharing nothing with known pools."""

from __future__ import annotations

import random
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from e3orch.executors.base import SKILLS, build_pool, load_pool_specs
from e3orch.executors.generated import describe, generate_pool
from e3orch.orchestration.reading import card_levels
from e3orch.policy.pools import randomize_pool

REPO = Path(__file__).resolve().parents[2]


def _level(rate: float) -> int:
    return 3 if rate >= 0.88 else 2 if rate >= 0.77 else 1 if rate >= 0.6 else 0


def test_same_seed_same_pool_and_other_seeds_differ() -> None:
    assert generate_pool(7) == generate_pool(7)
    assert [s.name for s in generate_pool(7)] != [s.name for s in generate_pool(8)]


def test_describe_states_every_level_in_words() -> None:
    levels = {"retrieve": 0, "compute": 3, "code": 3, "reason": 1}
    text = describe(levels, "Math model", 2.5, random.Random(0))
    assert text.startswith("Math model, ") and text.endswith("; mid-priced.")
    assert card_levels(_spec(text)) == levels


def _spec(description: str):  # type: ignore[no-untyped-def]
    from e3orch.executors.base import ExecutorSpec

    return ExecutorSpec(name="x", kind="simulated", description=description, skills=dict.fromkeys(SKILLS, 0.5))


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=10**6))
def test_generated_pools_are_honest_solvable_and_unseen(seed: int) -> None:
    specs = generate_pool(seed)
    assert 5 <= len(specs) <= 7
    known = {s.name for p in ("default", "transfer") for s in load_pool_specs(REPO / f"configs/executors/{p}.yaml")}
    assert not known & {s.name for s in specs}
    renamed = {s.name for i in range(20) for s in randomize_pool(load_pool_specs(REPO / "configs/executors/default.yaml"),
                                                                  random.Random(i))}
    assert not renamed & {s.name for s in specs}
    for s in specs:
        assert s.skills is not None
        # the card's stated level is the hidden rate's band (tools: "exact" at their one skill)
        assert card_levels(s) == {k: _level(r) for k, r in s.skills.items()}, s.description
    # every skill has an executor that is good or better at it: every task stays solvable
    assert all(max(card_levels(s)[k] for s in specs) >= 2 for k in SKILLS)
    build_pool(specs)  # the simulator accepts every member


def test_training_pools_mix_in_generated_pools_whose_members_never_meet_the_evaluation() -> None:
    from e3orch.policy.pools import training_pool

    default = load_pool_specs(REPO / "configs/executors/default.yaml")
    profiles = {tuple(sorted(s.skills.items())) for s in default if s.skills}
    pools = [training_pool(default, random.Random(i), generated_share=0.5) for i in range(200)]
    fresh = [p for p in pools if all(tuple(sorted(s.skills.items())) not in profiles for s in p if s.skills)]
    assert 70 <= len(fresh) <= 130  # about half the tasks get a generated pool
    evaluation = {s.name for seed in range(50) for s in generate_pool(seed)}
    assert not evaluation & {s.name for p in pools for s in p}
    # share 0: exactly the renamed/re-priced variants of the training pool, as before
    assert training_pool(default, random.Random(3)) == randomize_pool(default, random.Random(3))


@given(st.integers(0, 10_000))
@settings(max_examples=60, deadline=None)
def test_a_random_variant_renames_drops_and_reprices_but_keeps_what_each_member_can_do(seed: int) -> None:
    default = load_pool_specs(REPO / "configs/executors/default.yaml")
    out = randomize_pool(default, random.Random(seed))
    names = [s.name for s in out]
    assert len(out) >= min(4, len(default)) and len(set(names)) == len(names)
    assert not set(names) & {s.name for s in default}
    for s in out:  # each member is one of the pool's, renamed: same card text, kind and hidden skills
        (src,) = [d for d in default if (d.description, d.kind, d.skills) == (s.description, s.kind, s.skills)]
        for got, was in ((s.price.input_per_1k, src.price.input_per_1k), (s.price.output_per_1k, src.price.output_per_1k)):
            assert was * 0.6 - 1e-4 <= got <= was * 1.6 + 1e-4
