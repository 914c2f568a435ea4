"""Menus: each part's three needs (the cheapest card at least fair, good, strong at its skill), and the
``#k`` references plans make to them."""

from __future__ import annotations

import random
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from e3orch.data.sim import DOMAINS, generate_task
from e3orch.executors.base import load_pool_specs
from e3orch.orchestration.handwritten import Router, parse_parts
from e3orch.orchestration.protocol import parse_plan, render_plan, to_menu_refs
from e3orch.orchestration.reading import (
    PRICE_NAMES,
    MenuRank,
    menu_rank,
    part_menus,
    price_of,
    price_tier,
    resolve_menu_ref,
)
from e3orch.orchestration.types import Subtask
from e3orch.policy.pools import randomize_pool

REPO = Path(__file__).resolve().parents[2]
DEFAULT = load_pool_specs(REPO / "configs" / "executors" / "default.yaml")
NAMES = [s.name for s in DEFAULT]
QUESTION = """A fact verification task.
P1: (simple) Find the main export of Corvo Labs.
P2: (tricky) Calculate the growth rate, using P1.
P3: (moderate) Infer whether the plan is feasible, using P1 and P2.
Final answer: the result of P3."""


def test_menus_name_the_cheapest_card_of_each_need() -> None:
    menus = part_menus(QUESTION, DEFAULT)
    named = {p: [NAMES[i] for i in m] for p, m in menus.items()}
    # price_of = in + 2*out. Retrieve: web-search (good, .03) is the cheapest card at least fair and at
    # least good; the only strong one is frontier-llm ("strongest at every skill", 22.5)
    assert named["P1"] == ["web-search", "web-search", "frontier-llm"]
    # compute: the calculator claims "exact" (strong) and is nearly free: every need names it
    assert named["P2"] == ["calculator", "calculator", "calculator"]
    # reason: small-llm and code-llm are weak; mid-llm good (3.5), reasoner strong (10.8) and cheaper than frontier
    assert named["P3"] == ["mid-llm", "mid-llm", "reasoner"]
    assert part_menus("no numbered parts here", DEFAULT) == {}


def test_a_need_no_card_meets_names_the_strongest_card() -> None:
    transfer = load_pool_specs(REPO / "configs" / "executors" / "transfer.yaml")
    names = [s.name for s in transfer]
    named = {p: [names[i] for i in m] for p, m in part_menus(QUESTION, transfer).items()}
    assert named["P3"] == ["nimbus-mini", "quanta-math", "sage-reasoner"]  # fair 1.35, good 4.6, strong 9
    weak = [s for s in DEFAULT if s.name in ("small-llm", "mid-llm", "web-search")]  # nobody strong at reasoning
    wnames = [s.name for s in weak]
    assert [wnames[i] for i in part_menus(QUESTION, weak)["P3"]] == ["mid-llm", "mid-llm", "mid-llm"]
    assert part_menus(QUESTION, [s for s in DEFAULT if s.name == "calculator"])["P3"] == []  # nobody capable


def test_price_tiers_of_the_shipped_pools() -> None:
    tiers = {s.name: price_tier(s) for s in DEFAULT}
    assert tiers == {"frontier-llm": "premium", "mid-llm": "mid", "small-llm": "cheap", "code-llm": "mid",
                     "reasoner": "pricey", "calculator": "free", "web-search": "free"}
    transfer = load_pool_specs(REPO / "configs" / "executors" / "transfer.yaml")
    assert [price_tier(s) for s in transfer] == ["premium", "cheap", "mid", "mid", "pricey", "free", "free"]
    # bounds: a price exactly on a bound is the dearer tier
    mid = DEFAULT[1].model_copy(update={"price": DEFAULT[1].price.model_copy(update={"input_per_1k": 0.0, "output_per_1k": 1.0})})
    assert price_of(mid) == 2.0 and price_tier(mid) == "mid"


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000))
def test_price_tiers_follow_price_order(seed: int) -> None:
    pool = randomize_pool(DEFAULT, random.Random(seed), drop_prob=0.0)
    ranked = sorted(pool, key=price_of)
    assert [PRICE_NAMES.index(price_tier(s)) for s in ranked] == sorted(PRICE_NAMES.index(price_tier(s)) for s in ranked)


def test_menu_refs_resolve_against_the_instruction_part() -> None:
    menus = part_menus(QUESTION, DEFAULT)
    assert resolve_menu_ref("#3", "Solve P3.", menus, NAMES) == "reasoner"
    assert resolve_menu_ref("#1", "Solve P2, then check P3", menus, NAMES) == "calculator"  # first tag counts
    assert resolve_menu_ref("#4", "Solve P3.", menus, NAMES) is None  # past the end of the menu
    assert resolve_menu_ref("#1", "Summarise everything", menus, NAMES) is None  # no part named
    assert resolve_menu_ref("E1", "Solve P3.", menus, NAMES) is None
    assert menu_rank("reasoner", "Solve P3.", menus, NAMES) == 3
    assert menu_rank("mid-llm", "Solve P3.", menus, NAMES) == 2  # #1 and #2 name it: the highest, its card's level
    assert menu_rank("mid-llm", "Solve P3.", menus, NAMES, "lowest") == 1  # or the least need that picks it
    assert menu_rank("reasoner", "Solve P3.", menus, NAMES, "lowest") == 3  # a rank of its own: the same either way
    assert menu_rank("mid-llm", "Solve P3.", menus, NAMES, "need", 1) == 1  # or the need its router asked for
    assert menu_rank("mid-llm", "Solve P3.", menus, NAMES, "need", 2) == 2
    assert menu_rank("mid-llm", "Solve P3.", menus, NAMES, "need", 3) == 2  # #3 is the reasoner: a need that did not pick it
    assert menu_rank("mid-llm", "Solve P3.", menus, NAMES, "need") == 2  # no need given: the highest
    assert menu_rank("mid-llm", "Solve P3.", menus, NAMES, "highest", 1) == 2  # a need counts only with pick="need"
    assert menu_rank("web-search", "Solve P3.", menus, NAMES) is None  # not capable: not on the menu
    assert menu_rank("frontier-llm", "Solve P3.", menus, NAMES) is None  # strong, but the reasoner is cheaper

    plan = parse_plan("S1 | #3 | - | Solve P3.\nS2 | #9 | - | Solve P1.\nS3 | E2 | S1 | Solve P2.", NAMES, menus=menus)
    assert [(s.id, s.executor) for s in plan.subtasks] == [("S1", "reasoner"), ("S3", "mid-llm")]
    assert [d.code for d in plan.defects] == ["unknown_executor"]
    # without menus a rank is just an unknown executor
    assert [d.code for d in parse_plan("S1 | #2 | - | Solve P3.", NAMES).defects] == ["unknown_executor", "unparseable"]


def test_to_menu_refs_exact() -> None:
    menus = part_menus(QUESTION, DEFAULT)
    text = render_plan([Subtask("S1", "web-search", "Solve P1."), Subtask("S2", "code-llm", "Solve P3.", ("S1",)),
                        Subtask("S3", "frontier-llm", "Solve P1.")])
    # code-llm is weak at reason: no need names it for P3, so it is taught by its card handle
    assert to_menu_refs(text, NAMES, menus) == "S1 | #2 | - | Solve P1.\nS2 | E4 | S1 | Solve P3.\nS3 | #3 | - | Solve P1."
    assert to_menu_refs(text, NAMES, menus, "lowest") == "S1 | #1 | - | Solve P1.\nS2 | E4 | S1 | Solve P3.\nS3 | #3 | - | Solve P1."


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), domain=st.sampled_from(sorted(DOMAINS)), pick=st.sampled_from(["highest", "lowest"]))
def test_menu_refs_round_trip_on_random_pools(seed: int, domain: str, pick: MenuRank) -> None:
    """Whatever the pool, a plan rewritten as menu ranks parses back to the same executors."""
    rng = random.Random(seed)
    specs = randomize_pool(DEFAULT, rng)
    names = [s.name for s in specs]
    task = generate_task(0, domain, seed, "train")
    parts, _ = parse_parts(task.question)
    router = Router(tuple(specs))
    subtasks = [Subtask(f"S{i + 1}", rng.choice([router.strongest(p.skill), router.cheapest_good_enough(p.skill, p.difficulty),
                                                 rng.choice(names)]), f"Solve {p.id}.") for i, p in enumerate(parts)]
    menus = part_menus(task.question, specs)
    taught = to_menu_refs(render_plan(subtasks), names, menus, pick)
    parsed = parse_plan(taught, names, max_subtasks=len(subtasks), menus=menus)
    assert [s.executor for s in parsed.subtasks] == [s.executor for s in subtasks]
    assert not parsed.defects


def test_cached_readings_are_private_copies() -> None:
    """Task texts and cards are read once and cached; what a caller changes in the answer must
    not reach the next caller."""
    from e3orch.orchestration.reading import card_levels

    parts, sink = parse_parts(QUESTION)
    parts.clear()
    assert [p.id for p in parse_parts(QUESTION)[0]] == ["P1", "P2", "P3"] and sink == "P3"
    levels = card_levels(DEFAULT[0])
    before = dict(levels)
    for skill in levels:
        levels[skill] = -1
    assert card_levels(DEFAULT[0]) == before
    menus = part_menus(QUESTION, DEFAULT)
    menus["P1"].append(99)
    assert part_menus(QUESTION, DEFAULT)["P1"] == [NAMES.index("web-search")] * 2 + [NAMES.index("frontier-llm")]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(sorted(DOMAINS)))
def test_cached_menus_are_the_cards_own_on_random_pools(seed: int, domain: str) -> None:
    """A pool's menus are read once per distinct set of cards (descriptions and prices): on random
    pools, each menu is what the cards state: the cheapest card at least fair, good, strong at the
    part's skill (the strongest where none is), read card by card."""
    from e3orch.executors.generated import generate_pool
    from e3orch.orchestration.reading import card_levels, cheapest_at_least

    rng = random.Random(seed)
    specs = generate_pool(seed) if seed % 2 else randomize_pool(DEFAULT, rng)
    parts, _ = parse_parts(generate_task(0, domain, seed, "train").question)
    levels = [card_levels(c) for c in specs]
    want = {p.id: [cheapest_at_least(specs, levels, p.skill, n) for n in (1, 2, 3)]
            if any(lv[p.skill] >= 1 for lv in levels) else [] for p in parts}
    assert part_menus(generate_task(0, domain, seed, "train").question, specs) == want
    # same descriptions, other prices: other menus where the order of prices changed
    dearer = [c.model_copy(update={"price": c.price.model_copy(update={"output_per_1k": 100.0 - c.price.output_per_1k})})
              for c in specs]
    dlevels = [card_levels(c) for c in dearer]
    assert part_menus(generate_task(0, domain, seed, "train").question, dearer) == {
        p.id: [cheapest_at_least(dearer, dlevels, p.skill, n) for n in (1, 2, 3)]
        if any(lv[p.skill] >= 1 for lv in dlevels) else [] for p in parts}
