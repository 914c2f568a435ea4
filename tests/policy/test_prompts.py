"""Prompt rendering: the compact style's exact text, and the fall-back to the full style."""

from __future__ import annotations

from pathlib import Path

from e3orch.executors.base import ExecutionResult, load_pool_specs
from e3orch.orchestration.episode import DecisionType, Observation, Orchestrator
from e3orch.orchestration.types import MilestoneRecord, Plan, Subtask
from e3orch.policy.prompts import (
    asks_about_result,
    echo_part,
    join_answers,
    policy_prompt_style,
    render_prompt,
    slot_alternatives,
    split_decision,
    sub_prompts,
    tier_answer,
)

REPO = Path(__file__).resolve().parents[2]
DEFAULT = tuple(load_pool_specs(REPO / "configs" / "executors" / "default.yaml"))
QUESTION = """A fact verification task.
P1: (simple) Find the main export of Corvo Labs.
P2: (easy) Find the largest customer of Corvo Labs.
P3: (moderate) Infer whether the plan is feasible, using P1 and P2.
Final answer: the result of P3."""


def _obs(history: tuple[MilestoneRecord, ...], pending: str | None, question: str = QUESTION) -> Observation:
    return Observation(task_id="t", question=question, cards=DEFAULT, history=history, pending_milestone=pending,
                       milestones_left=10, subtasks_left=30, cost_left=50.0, max_plan_subtasks=8)


HISTORY = (MilestoneRecord(
    "Solve P1, P2",
    Plan((Subtask("S1", "web-search", "Solve P1."), Subtask("S2", "web-search", "Solve P2."))),
    [ExecutionResult("S1", "web-search", True, "P1 = Norvik52 (confidence 0.92)"),
     ExecutionResult("S2", "web-search", False, "", error="timeout")],
),)


def test_compact_milestone_prompt_exact() -> None:
    assert render_prompt(_obs(HISTORY, None), "milestone", style="compact") == (
        "### parts\n"
        "P1 retrieve easy: 0.92 x1\n"
        "P2 retrieve easy: failed x1\n"
        "P3 reason normal <P1,P2: waits\n"
        "### final: P3 waits\n"
        "### budget: 10 milestones, 30 subtasks left\n"
        "### decide: milestone\n"
    )


def test_compact_plan_prompt_lists_each_parts_menu() -> None:
    text = render_prompt(_obs(HISTORY, "Solve P2, P3"), "plan", style="compact")
    assert text == (
        "### S1 P2 retrieve easy x1: #1 good 0.03 | #2 good 0.03 | #3 strong 22\n"
        "### S2 P3 reason normal: #1 good 3.5 | #2 good 3.5 | #3 strong 11\n"
        "### decide: plan for Solve P2, P3\n"
    )


def test_factored_style_asks_each_slot_as_a_one_slot_plan() -> None:
    obs = _obs(HISTORY, "Solve P2, P3")
    assert render_prompt(obs, "plan", style="factored") == render_prompt(obs, "plan", style="compact")
    assert sub_prompts(obs, "plan") == [
        "### S1 P2 retrieve easy x1: #1 good 0.03 | #2 good 0.03 | #3 strong 22\n"
        "### decide: plan for Solve P2\n",
        "### S1 P3 reason normal: #1 good 3.5 | #2 good 3.5 | #3 strong 11\n"
        "### decide: plan for Solve P3\n",
    ]
    # ... and each is exactly the compact prompt of a plan for that part alone
    assert sub_prompts(obs, "plan")[1] == render_prompt(_obs(HISTORY, "Solve P3"), "plan", style="compact")
    assert sub_prompts(_obs((), None, question="What is 2 + 2?"), "plan") is None  # asked whole
    assert sub_prompts(_obs((), "Finish up"), "plan") is None
    assert sub_prompts(obs, "milestone") is None  # milestones are asked whole


def test_per_part_tiers_shows_each_menu_entrys_price_tier() -> None:
    obs = _obs(HISTORY, "Solve P2, P3")
    assert sub_prompts(obs, "plan", "per_part_tiers") == [
        "### S1 P2 retrieve easy x1: #1 good free | #2 good free | #3 strong premium\n"
        "### decide: plan for Solve P2\n",
        "### S1 P3 reason normal: #1 good mid | #2 good mid | #3 strong pricey\n"
        "### decide: plan for Solve P3\n",
    ]
    # milestones are asked part by part as in per_part, and they show no prices
    assert sub_prompts(_obs(HISTORY, None), "milestone", "per_part_tiers") == sub_prompts(_obs(HISTORY, None), "milestone", "per_part")
    tier_q = sub_prompts(obs, "plan", "per_part_tiers")[0]  # type: ignore[index]
    assert slot_alternatives(tier_q, "S1 | #1 | -") == ["S1 | #3 | -"]  # a level names one card, whatever its price shows


def test_tier_answers_name_the_ranks_tier_first_and_the_rank_still_picks_the_card() -> None:
    from e3orch.orchestration.protocol import parse_plan
    from e3orch.orchestration.reading import part_menus

    obs = _obs(HISTORY, "Solve P2, P3")
    q2, q3 = sub_prompts(obs, "plan", "per_part_tier_answers") or []
    assert (q2, q3) == tuple(sub_prompts(obs, "plan", "per_part_tiers") or [])  # the same questions
    taught = [tier_answer(q, a) for q, a in zip((q2, q3), split_decision(obs, "S1 | #1 | -\nS2 | #3 | -") or [])]
    assert taught == ["S1 | free #1 | -", "S1 | pricey #3 | -"]
    assert [tier_answer(q, a) for q, a in zip((q2, q3), taught)] == taught  # already tiered: as it is
    # split back (what DAgger compares) without the tier; put together, the plan names the tiers and
    # resolves by rank: P2's #1 is web-search, P3's #3 the reasoner (pricey), as without them
    assert split_decision(obs, join_answers(obs, taught)) == ["S1 | #1 | -", "S1 | #3 | -"]
    names = [c.name for c in DEFAULT]
    plan = parse_plan(join_answers(obs, taught), names, menus=part_menus(obs.question, DEFAULT), slots=["P2", "P3"])
    untiered = parse_plan(join_answers(obs, ["S1 | #1 | -", "S1 | #3 | -"]), names,
                          menus=part_menus(obs.question, DEFAULT), slots=["P2", "P3"])
    assert [s.executor for s in plan.subtasks] == [s.executor for s in untiered.subtasks] == ["web-search", "reasoner"]
    assert not plan.defects
    # a tier that contradicts the menu is ignored (the rank picks); a tier name that is none is a defect
    wrong = parse_plan("S1 | premium #1 | -", names, menus=part_menus(obs.question, DEFAULT), slots=["P2"])
    assert [s.executor for s in wrong.subtasks] == ["web-search"]
    bad = parse_plan("S1 | dear #1 | -", names, menus=part_menus(obs.question, DEFAULT), slots=["P2"])
    assert [d.code for d in bad.defects] == ["unknown_executor", "unparseable"] and not bad.subtasks
    # alternatives are written as the answer is: tier first for a tiered answer
    assert slot_alternatives(q3, "S1 | pricey #3 | -") == ["S1 | mid #2 | -"]
    assert slot_alternatives(q3, "S1 | pricey #3 | -", "lowest") == ["S1 | mid #1 | -"]
    assert slot_alternatives(q3, "S1 | #3 | -") == ["S1 | #2 | -"]
    # not a plan slot's rank answer, or a menu without tiers: as it is
    assert tier_answer(q3, "MILESTONE: oops") == "MILESTONE: oops"
    assert tier_answer(q3, "S1 | #7 | -") == "S1 | #7 | -"
    numeric = sub_prompts(obs, "plan", "per_part")[1]  # type: ignore[index]
    assert tier_answer(numeric, "S1 | #3 | -") == "S1 | #3 | -"


def test_a_policy_is_prompted_in_the_style_it_was_made_with(tmp_path: Path) -> None:
    import json
    from types import SimpleNamespace

    (tmp_path / "e3orch_policy.json").write_text(json.dumps({"kind": "e3orch-default-policy", "prompt": "per_part_tiers"}))
    assert policy_prompt_style(SimpleNamespace(model_path=str(tmp_path)), "per_part") == "per_part_tiers"
    assert policy_prompt_style(SimpleNamespace(model_path=str(tmp_path / "none")), "per_part") == "per_part"


def test_slot_alternatives_name_every_other_executor_of_the_slot_menu() -> None:
    q2, q3 = sub_prompts(_obs(HISTORY, "Solve P2, P3"), "plan") or []
    # #1 and #2 name one card (good 0.03): it is offered once, by its highest rank, and never as an
    # alternative to itself
    assert slot_alternatives(q2, "S1 | #1 | -") == ["S1 | #3 | -"]
    assert slot_alternatives(q2, "S1 | #3 | -") == ["S1 | #2 | -"]
    assert slot_alternatives(q3, "S1 | #2 | -\n") == ["S1 | #3 | -"]
    assert slot_alternatives(q3, "MILESTONE: oops") == ["S1 | #2 | -", "S1 | #3 | -"]
    three = "### S1 P3 reason normal: #1 fair 1.4 | #2 good 4.6 | #3 strong 9\n### decide: plan for Solve P3\n"
    assert slot_alternatives(three, "S1 | #2 | -") == ["S1 | #1 | -", "S1 | #3 | -"]
    # policy.menu_rank lowest: the shared card is offered by its lowest rank
    assert slot_alternatives(q2, "S1 | #3 | -", "lowest") == ["S1 | #1 | -"]
    assert slot_alternatives(q2, "S1 | #2 | -", "lowest") == ["S1 | #3 | -"]
    assert slot_alternatives(three, "S1 | #2 | -", "lowest") == ["S1 | #1 | -", "S1 | #3 | -"]
    assert slot_alternatives("### S1 P4 code hard: (no capable executor)\n### decide: plan for Solve P4\n",
                             "S1 | #1 | -") == []


def test_join_answers_renumbers_slots_and_wires_the_parts_dependencies() -> None:
    obs = _obs((), "Solve P1, P3")  # P3 uses P1 (and P2)
    # the slots' own dependency fields are replaced by the task's; an instruction is kept
    assert join_answers(obs, ["S1 | #4 | -", "S1 | #2 | S1 | Weigh both.\nS2 | #1 | -"]) == (
        "S1 | #4 | -\nS2 | #2 | S1 | Weigh both.")
    # a malformed answer stays as written (the plan parser records the defect)
    assert join_answers(obs, ["use the cheap one", "S1 | #1 | -"]) == "use the cheap one\nS2 | #1 | S1"


def test_split_decision_is_the_inverse_for_taught_slot_lines() -> None:
    obs = _obs(HISTORY, "Solve P2, P3")
    assert split_decision(obs, "S1 | #1 | -\nS2 | #2 | -\n") == ["S1 | #1 | -", "S1 | #2 | -"]
    answers = ["S1 | #1 | -", "S1 | #2 | -"]
    assert join_answers(obs, answers) == "S1 | #1 | -\nS2 | #2 | S1"  # P3 uses P2
    assert split_decision(obs, join_answers(obs, answers)) == answers
    assert split_decision(obs, "S1 | #1 | -") is None  # one line for two slots
    assert split_decision(obs, "S1 | #1 | -\nS2 | E3 | - | Solve P3 another way.") is None  # not a slot line
    assert split_decision(obs, "S2 | #2 | -\nS1 | #1 | -") is None  # out of slot order


def test_a_restated_part_is_taught_kept_by_alternatives_and_dropped_from_the_plan() -> None:
    obs = _obs(HISTORY, "Solve P2, P3")
    q2, q3 = sub_prompts(obs, "plan", style="per_part_tiers") or []
    assert q2.startswith("### S1 P2 retrieve easy x1: ") and q3.startswith("### S1 P3 reason normal: ")
    taught = [echo_part(q, a) for q, a in zip((q2, q3), split_decision(obs, "S1 | #1 | -\nS2 | #3 | -") or [])]
    assert taught == ["S1 retrieve easy | #1 | -", "S1 reason normal | #3 | -"]
    # the plan put together is the one without the restatement
    assert join_answers(obs, taught) == join_answers(obs, ["S1 | #1 | -", "S1 | #3 | -"]) == "S1 | #1 | -\nS2 | #3 | S1"
    # alternatives keep the answer's own head
    assert slot_alternatives(q3, taught[1]) == ["S1 reason normal | #2 | -"]
    assert slot_alternatives(q3, "S1 | #3 | -") == ["S1 | #2 | -"]
    # only a plan slot's rank answer is restated; a head that is not a slot's stays a defect
    assert echo_part(q3, "MILESTONE: oops") == "MILESTONE: oops"
    assert echo_part("### part: P3 reason normal: open\n### decide: act on P3\n", "yes") == "yes"
    assert join_answers(obs, ["S1 please | #1 | -", "S1 | #2 | -"]) == "S1 please | #1 | -\nS2 | #2 | S1"


def test_compact_falls_back_to_full_without_numbered_parts() -> None:
    obs = _obs((), None, question="What is 2 + 2?")
    assert render_prompt(obs, "milestone", style="compact") == render_prompt(obs, "milestone", style="full")
    assert "### executors" in render_prompt(obs, "milestone", style="compact")


def test_compact_prompts_mark_parts_the_engine_will_not_run_again() -> None:
    retry = MilestoneRecord("Solve P3", Plan((Subtask("S1", "mid-llm", "Solve P3."),)),
                            [ExecutionResult("S1", "mid-llm", True, "P3 = yes-1 (confidence 0.41)")])
    obs = _obs((*HISTORY, retry, retry, retry), None)
    spent = Observation(**{**obs.__dict__, "max_part_attempts": 3})
    text = render_prompt(spent, "milestone", style="compact")
    assert "P3 reason normal <P1,P2: 0.41 x3 spent\n" in text and "### final: P3 0.41 x3 spent\n" in text
    # without an engine limit there is nothing to mark
    assert "spent" not in render_prompt(obs, "milestone", style="compact")
    plan = Observation(**{**spent.__dict__, "pending_milestone": "Solve P3"})
    assert render_prompt(plan, "plan", style="compact").startswith("### S1 P3 reason normal x3 spent: #1 good 3.5")


def test_the_policy_orchestrator_asks_every_slot_in_one_batch() -> None:
    import asyncio

    from conftest import rule_backend

    from e3orch.policy.orchestrator import DecodeSettings, PolicyOrchestrator

    # answers a slot question with the rank of its first strong card
    echo = rule_backend(lambda p: "S1 | #" + p.split(" strong")[0].rsplit("#", 1)[1].split()[0] + " | -")
    orch = PolicyOrchestrator(echo, DecodeSettings(prompt_style="factored"))
    obs = _obs(HISTORY, "Solve P2, P3")
    assert asyncio.run(orch.decide(obs, "plan")) == "S1 | #3 | -\nS2 | #3 | S1"
    assert echo.calls == [sub_prompts(obs, "plan")]


# -- per_part: the milestone asked one part at a time ----------------------------------------
LOW = MilestoneRecord(
    "Solve P1, P2",
    Plan((Subtask("S1", "web-search", "Solve P1."), Subtask("S2", "web-search", "Solve P2."))),
    [ExecutionResult("S1", "web-search", True, "P1 = Norvik52 (confidence 0.92)"),
     ExecutionResult("S2", "web-search", True, "P2 = Velola25 (confidence 0.41)")],
)


def test_per_part_asks_each_part_the_engine_would_still_run() -> None:
    obs = _obs((LOW,), None)
    assert render_prompt(obs, "milestone", style="per_part") == render_prompt(obs, "milestone", style="compact")
    assert sub_prompts(obs, "milestone", "per_part") == [
        "### part: P1 retrieve easy: 0.92 x1\n### uses: -\n### final: P3 open\n### decide: act on P1\n",
        "### part: P2 retrieve easy: 0.41 x1\n### uses: -\n### final: P3 open\n### decide: act on P2\n",
        "### part: P3 reason normal: open\n### uses: P1 0.92 x1, P2 0.41 x1\n### final: P3 open\n"
        "### decide: act on P3\n",
    ]
    # a part waiting for a value is not asked about; neither is a spent one
    assert [q.split("\n")[0] for q in sub_prompts(_obs(HISTORY, None), "milestone", "per_part") or []] == [
        "### part: P1 retrieve easy: 0.92 x1", "### part: P2 retrieve easy: failed x1"]
    spent = Observation(**{**_obs((LOW, LOW, LOW), None).__dict__, "max_part_attempts": 3})
    assert [q.split("\n")[0] for q in sub_prompts(spent, "milestone", "per_part") or []] == [
        "### part: P3 reason normal: open"]
    # nothing left to ask once the budget is gone: the decision is forced
    broke = Observation(**{**obs.__dict__, "milestones_left": 0})
    assert sub_prompts(broke, "milestone", "per_part") == []
    assert join_answers(broke, [], "milestone") == "ANSWER: P3"
    assert sub_prompts(obs, "milestone", "factored") is None  # asked whole there


def test_per_part_source_names_the_level_of_the_card_that_reported_each_result() -> None:
    # web-search states it is good at retrieval, the frontier model strong: the same confidence
    # is likelier right from the stronger card, and only this style lets the policy tell them apart
    frontier = MilestoneRecord(
        "Solve P2", Plan((Subtask("S1", "frontier-llm", "Solve P2."),)),
        [ExecutionResult("S1", "frontier-llm", True, "P2 = Velola25 (confidence 0.63)")])
    obs = _obs((LOW, frontier), None)
    assert sub_prompts(obs, "milestone", "per_part_source") == [
        "### part: P1 retrieve easy: 0.92 good x1\n### uses: -\n### final: P3 open\n### decide: act on P1\n",
        "### part: P2 retrieve easy: 0.63 strong x2\n### uses: -\n### final: P3 open\n### decide: act on P2\n",
        "### part: P3 reason normal: open\n### uses: P1 0.92 good x1, P2 0.63 strong x2\n### final: P3 open\n"
        "### decide: act on P3\n",
    ]
    assert render_prompt(obs, "milestone", style="per_part_source").split("\n")[1:4] == [
        "P1 retrieve easy: 0.92 good x1", "P2 retrieve easy: 0.63 strong x2", "P3 reason normal <P1,P2: open"]
    # plans are asked as in per_part; a failed attempt names no card
    assert sub_prompts(obs, "plan", "per_part_source") == sub_prompts(obs, "plan", "per_part")
    assert sub_prompts(_obs(HISTORY, None), "milestone", "per_part_source")[1].startswith(  # type: ignore[index]
        "### part: P2 retrieve easy: failed x1\n")
    assert asks_about_result(sub_prompts(obs, "milestone", "per_part_source")[1])  # type: ignore[index]


def test_per_part_menu_shows_what_a_repair_would_cost_on_questions_about_results() -> None:
    obs = _obs((LOW,), None)
    menu = "### repair: #1 good 0.03 | #2 good 0.03 | #3 strong 22\n"
    assert sub_prompts(obs, "milestone", "per_part_menu") == [
        "### part: P1 retrieve easy: 0.92 x1\n" + menu + "### uses: -\n### final: P3 open\n### decide: act on P1\n",
        "### part: P2 retrieve easy: 0.41 x1\n" + menu + "### uses: -\n### final: P3 open\n### decide: act on P2\n",
        # an open part: no repair to price
        "### part: P3 reason normal: open\n### uses: P1 0.92 x1, P2 0.41 x1\n### final: P3 open\n"
        "### decide: act on P3\n",
    ]
    # a failed attempt is a result to repair too; plans and the whole milestone are asked as in per_part
    failed = sub_prompts(_obs(HISTORY, None), "milestone", "per_part_menu")[1]  # type: ignore[index]
    assert failed.startswith("### part: P2 retrieve easy: failed x1\n" + menu) and asks_about_result(failed)
    assert sub_prompts(obs, "plan", "per_part_menu") == sub_prompts(obs, "plan", "per_part")
    assert render_prompt(obs, "milestone", style="per_part_menu") == render_prompt(obs, "milestone", style="per_part")


def test_per_part_answers_join_into_a_milestone_and_split_back() -> None:
    obs = _obs((LOW,), None)
    assert join_answers(obs, ["no", "yes", "no"], "milestone") == "MILESTONE: Solve P2"
    assert join_answers(obs, ["no", "Yes\n", "yes"], "milestone") == "MILESTONE: Solve P2, P3"
    assert join_answers(obs, ["no", "no", "no"], "milestone") == "ANSWER: P3"  # nothing to do: answer
    # an answer that is neither stays as written: the milestone parser records the defect
    assert join_answers(obs, ["no", "maybe later", "no"], "milestone") == "maybe later"
    assert split_decision(obs, "MILESTONE: Solve P2", "milestone") == ["no", "yes", "no"]
    assert split_decision(obs, "ANSWER: P3", "milestone") == ["no", "no", "no"]
    assert split_decision(obs, "MILESTONE: Solve P4", "milestone") is None  # no question about P4
    assert split_decision(obs, "what now?", "milestone") is None
    capped = Observation(**{**obs.__dict__, "max_plan_subtasks": 1})
    assert join_answers(capped, ["yes", "yes", "no"], "milestone") == "MILESTONE: Solve P1"


def test_per_part_alternatives_flip_the_answer() -> None:
    q = (sub_prompts(_obs((LOW,), None), "milestone", "per_part") or [])[1]
    assert slot_alternatives(q, "yes") == ["no"]
    assert slot_alternatives(q, "no\n") == ["yes"]
    assert slot_alternatives(q, "dunno") == ["yes", "no"]


def test_per_part_answers_express_every_rule_milestone_exactly() -> None:
    """The rule teachers' milestones, on sim tasks of every domain and their own trajectories,
    split into per-part answers and join back to exactly what the teacher said."""
    import asyncio

    from e3orch.config import EngineConfig
    from e3orch.data.sim import generate_split
    from e3orch.executors.base import build_pool
    from e3orch.orchestration.episode import run_episode
    from e3orch.orchestration.handwritten import make_handwritten

    seen: list[tuple[Observation, str]] = []

    class Spy(Orchestrator):
        def __init__(self, inner: Orchestrator) -> None:
            self.inner, self.name = inner, inner.name

        async def decide(self, obs: Observation, kind: DecisionType) -> str:
            text = await self.inner.decide(obs, kind)
            if kind == "milestone":
                seen.append((obs, text))
            return text

    pool = build_pool(DEFAULT)
    tasks = generate_split(3, "eval", 6)
    for teacher in ("heuristic", "thrifty", "explore"):
        for t in tasks:
            asyncio.run(run_episode(t, Spy(make_handwritten(teacher, pool.names)), pool,
                                    EngineConfig(max_part_attempts=3), seed=1))
    assert len(seen) > 100 and any(text.startswith("MILESTONE") for _, text in seen)
    for obs, text in seen:
        answers = split_decision(obs, text, "milestone")
        assert answers is not None, text
        assert len(answers) == len(sub_prompts(obs, "milestone", "per_part") or [])
        assert join_answers(obs, answers, "milestone") == text


def test_confidence_band_floors_to_the_twentieth() -> None:
    from e3orch.policy.prompts import confidence_band

    assert [confidence_band(c) for c in (0.62, 0.65, 0.6, 0.599, 0.67, 0.7, 0.92, 1.0, 0.0)] == [
        0.6, 0.65, 0.6, 0.55, 0.65, 0.7, 0.9, 1.0, 0.0]


def test_per_part_bands_shows_each_confidence_as_its_band() -> None:
    frontier = MilestoneRecord(
        "Solve P2", Plan((Subtask("S1", "frontier-llm", "Solve P2."),)),
        [ExecutionResult("S1", "frontier-llm", True, "P2 = Velola25 (confidence 0.63)")])
    obs = _obs((LOW, frontier), None)
    assert sub_prompts(obs, "milestone", "per_part_bands") == [
        "### part: P1 retrieve easy: 0.90 x1\n### uses: -\n### final: P3 open\n### decide: act on P1\n",
        "### part: P2 retrieve easy: 0.60 x2\n### uses: -\n### final: P3 open\n### decide: act on P2\n",
        "### part: P3 reason normal: open\n### uses: P1 0.90 x1, P2 0.60 x2\n### final: P3 open\n"
        "### decide: act on P3\n",
    ]
    assert render_prompt(obs, "milestone", style="per_part_bands").split("\n")[1:3] == [
        "P1 retrieve easy: 0.90 x1", "P2 retrieve easy: 0.60 x2"]
    # otherwise per_part_tiers: the same questions wherever no confidence shows (plans: menus with tiers)
    planning = _obs((LOW, frontier), "Solve P2, P3")
    assert sub_prompts(planning, "plan", "per_part_bands") == sub_prompts(planning, "plan", "per_part_tiers") == [
        "### S1 P2 retrieve easy x2: #1 good free | #2 good free | #3 strong premium\n### decide: plan for Solve P2\n",
        "### S1 P3 reason normal: #1 good mid | #2 good mid | #3 strong pricey\n### decide: plan for Solve P3\n"]
    assert sub_prompts(_obs(HISTORY, None), "milestone", "per_part_bands")[1].startswith(  # type: ignore[index]
        "### part: P2 retrieve easy: failed x1\n")
    assert asks_about_result(sub_prompts(obs, "milestone", "per_part_bands")[1])  # type: ignore[index]
