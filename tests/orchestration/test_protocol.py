"""The text protocol: milestone/answer and plan parsing, validation defects, round trips.

Hand-built outputs pin the exact defect codes; hypothesis checks that nothing a model could write
makes the parser raise or hand the scheduler an invalid plan.
"""

from __future__ import annotations

import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from e3orch.orchestration.protocol import (
    MAX_INSTRUCTION_CHARS,
    parse_milestone,
    parse_plan,
    render_answer,
    render_milestone,
    render_plan,
    to_slot_lines,
)
from e3orch.orchestration.reading import parse_parts, plan_slots
from e3orch.orchestration.types import Defect, Plan, Subtask

EXECUTORS = ("frontier-llm", "mid-llm", "calculator")


def codes(plan: Plan) -> list[str]:
    return [d.code for d in plan.defects]


def assert_valid(plan: Plan, executors=EXECUTORS, max_subtasks: int = 8) -> None:
    """What the scheduler relies on: known executors, unique ids, deps on kept ids, acyclic."""
    ids = [s.id for s in plan.subtasks]
    assert len(ids) == len(set(ids))
    assert len(ids) <= max_subtasks
    kept = set(ids)
    for s in plan.subtasks:
        assert s.executor in executors
        assert s.instruction.strip()
        assert s.id not in s.deps
        assert set(s.deps) <= kept
    # acyclic: repeatedly remove subtasks whose deps are all removed
    remaining = {s.id: set(s.deps) for s in plan.subtasks}
    while remaining:
        free = [sid for sid, deps in remaining.items() if not deps & remaining.keys()]
        assert free, f"cycle among {sorted(remaining)}"
        for sid in free:
            del remaining[sid]


# -- milestone / answer decisions ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind", "content"),
    [
        ("MILESTONE: Solve P1 and P2", "milestone", "Solve P1 and P2"),
        ("milestone:   find the founding year  ", "milestone", "find the founding year"),
        ("ANSWER: P3", "answer", "P3"),
        ("answer: 42", "answer", "42"),
        ("Final Answer: Norvik12", "answer", "Norvik12"),
        ("**ANSWER**: yes-123", "answer", "yes-123"),
        ("MILESTONE： full-width colon", "milestone", "full-width colon"),
        ("\n\n  MILESTONE: after blank lines", "milestone", "after blank lines"),
        ("```\nANSWER: P5\n```", "answer", "P5"),
        ("```text\nMILESTONE: fenced with a language\n```", "milestone", "fenced with a language"),
    ],
)
def test_parse_milestone_good(text: str, kind: str, content: str) -> None:
    d = parse_milestone(text)
    assert (d.kind, d.text, d.defects) == (kind, content, ())


def test_parse_milestone_trailing_text_is_a_defect_but_keeps_the_decision() -> None:
    d = parse_milestone("MILESTONE: Solve P1\nand then I will think about P2")
    assert d.kind == "milestone"
    assert d.text == "Solve P1"
    assert [x.code for x in d.defects] == ["trailing_text"]
    assert "and then" in d.defects[0].detail


@pytest.mark.parametrize(
    "text",
    ["", "   \n\t", None, "hello there", "Sure! MILESTONE: later on the line", "MILESTONE:", "ANSWER:   ",
     "```\n```", "PLAN: S1 | a | - | x"],
)
def test_parse_milestone_bad_is_invalid_with_unparseable(text: str | None) -> None:
    d = parse_milestone(text)  # type: ignore[arg-type]
    assert d.kind == "invalid"
    assert [x.code for x in d.defects] == ["unparseable"]


def test_render_milestone_and_answer_round_trip() -> None:
    assert parse_milestone(render_milestone("Solve P1, P2")).text == "Solve P1, P2"
    a = parse_milestone(render_answer("P7"))
    assert (a.kind, a.text) == ("answer", "P7")


# -- plans: good ------------------------------------------------------------------------------


def test_parse_plan_canonical() -> None:
    text = (
        "S1 | mid-llm | - | Solve P1.\n"
        "S2 | calculator | - | Solve P2.\n"
        "S3 | frontier-llm | S1,S2 | Solve P3 using S1 and S2.\n"
    )
    plan = parse_plan(text, EXECUTORS)
    assert plan.defects == ()
    assert plan.subtasks == (
        Subtask("S1", "mid-llm", "Solve P1."),
        Subtask("S2", "calculator", "Solve P2."),
        Subtask("S3", "frontier-llm", "Solve P3 using S1 and S2.", ("S1", "S2")),
    )


def test_slot_lines_solve_the_parts_the_milestone_names_in_task_order() -> None:
    question = "P1: (easy) Look up A.\nP2: (hard) Look up B.\nP3: (easy) Decide C, using P1.\nP4: (hard) Judge D.\n" \
               "P5: (easy) Infer E, using P2, P3 and P4.\nFinal answer: the result of P5."
    slots = plan_slots(parse_parts(question)[0], "Solve P4, P1, P3")
    assert slots == ["P1", "P3", "P4"]
    text = "S1 | mid-llm | -\nS2 | calculator | S1 |\nS3 | frontier-llm | - | Solve P2 instead.\nS4 | mid-llm | -\nS5 | x | - | y"
    plan = parse_plan(text, EXECUTORS, slots=slots)
    assert plan.subtasks == (
        Subtask("S1", "mid-llm", "Solve P1."),
        Subtask("S2", "calculator", "Solve P3.", ("S1",)),   # an empty instruction field is a slot line too
        Subtask("S3", "frontier-llm", "Solve P2 instead."),  # a spelled-out instruction wins
    )
    assert plan.defects == (Defect("no_slot", "S4: the milestone names 3 parts"), Defect("unknown_executor", "x"))
    # without slots a line without an instruction is what it always was
    assert [d.code for d in parse_plan("S1 | mid-llm | -", EXECUTORS).defects] == ["bad_line", "unparseable"]
    # teaching: the slot's own instruction is dropped, anything else is kept; parsing restores it
    full = "S1 | mid-llm | - | Solve P1.\nS2 | calculator | S1 | Solve P3.\nS3 | mid-llm | - | Solve P3."
    short = to_slot_lines(full, slots)
    assert short == "S1 | mid-llm | -\nS2 | calculator | S1\nS3 | mid-llm | - | Solve P3."
    assert parse_plan(short, EXECUTORS, slots=slots) == parse_plan(full, EXECUTORS)


def test_parse_plan_tolerates_fences_headers_blank_lines_and_dep_spellings() -> None:
    text = (
        "```\nPLAN:\n\n"
        "A1 | mid-llm | - | first\n"
        "A2 | mid-llm | deps: A1 | second\n"
        "A3 | mid-llm | after=A1 A2 | third\n"
        "A4 | mid-llm | A1, A1 ,A2 | duplicate deps collapse\n"
        "END\n```"
    )
    plan = parse_plan(text, EXECUTORS)
    assert plan.defects == ()
    assert [(s.id, s.deps) for s in plan.subtasks] == [
        ("A1", ()), ("A2", ("A1",)), ("A3", ("A1", "A2")), ("A4", ("A1", "A2")),
    ]


def test_parse_plan_keeps_original_order_not_topological() -> None:
    plan = parse_plan("S2 | mid-llm | S1 | later\nS1 | mid-llm | - | earlier", EXECUTORS)
    assert plan.defects == ()
    assert plan.ids == ["S2", "S1"]


def test_parse_plan_truncates_long_instructions() -> None:
    plan = parse_plan("S1 | mid-llm | - | " + "x" * (MAX_INSTRUCTION_CHARS + 50), EXECUTORS)
    assert len(plan.subtasks[0].instruction) == MAX_INSTRUCTION_CHARS


# -- plans: every defect code ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected_ids", "expected_codes"),
    [
        ("", [], ["empty_plan"]),
        ("```\n```", [], ["empty_plan"]),
        ("PLAN:\nEND", [], ["empty_plan"]),
        ("just some prose", [], ["bad_line", "unparseable"]),
        ("S1 | mid-llm | only three fields", [], ["bad_line", "unparseable"]),
        ("1bad | mid-llm | - | x", [], ["bad_line", "unparseable"]),
        ("S1 | mid-llm | - | ok\nnot a subtask line", ["S1"], ["bad_line"]),
        ("S1 | gpt-99 | - | x\nS2 | mid-llm | - | y", ["S2"], ["unknown_executor"]),
        ("S1 | Mid-LLM | - | x", [], ["unknown_executor", "unparseable"]),
        ("S1 | mid-llm | - | x\nS1 | calculator | - | y", ["S1"], ["duplicate_id"]),
        ("S1 | mid-llm | - |   \nS2 | mid-llm | - | y", ["S2"], ["empty_instruction"]),
        ("S1 | mid-llm | S1 | x", ["S1"], ["self_dep"]),
        ("S1 | mid-llm | S9 | x", ["S1"], ["dangling_dep"]),
        ("S1 | mid-llm | deps: S0 | x", ["S1"], ["dangling_dep"]),
        ("S1 | mid-llm | S2 | x\nS2 | mid-llm | S1 | y", [], ["cyclic_deps", "empty_plan"]),
    ],
)
def test_parse_plan_defects(text: str, expected_ids: list[str], expected_codes: list[str]) -> None:
    plan = parse_plan(text, EXECUTORS)
    assert plan.ids == expected_ids
    assert codes(plan) == expected_codes
    assert_valid(plan)


def test_parse_plan_defect_details_name_the_culprit() -> None:
    plan = parse_plan(
        "S1 | gpt-99 | - | x\nS2 | mid-llm | S2,S7 | y\nS3 | mid-llm | - | z\nS3 | mid-llm | - | again",
        EXECUTORS,
    )
    assert [(d.code, d.detail) for d in plan.defects] == [
        ("unknown_executor", "gpt-99"),
        ("duplicate_id", "S3"),
        ("self_dep", "S2"),
        ("dangling_dep", "S2->S7"),
    ]
    assert plan.subtasks == (Subtask("S2", "mid-llm", "y"), Subtask("S3", "mid-llm", "z"))


def test_parse_plan_three_cycle_and_a_node_behind_it_are_dropped() -> None:
    text = (
        "S1 | mid-llm | S3 | a\n"
        "S2 | mid-llm | S1 | b\n"
        "S3 | mid-llm | S2 | c\n"
        "S4 | mid-llm | S3 | behind the cycle\n"
        "S5 | mid-llm | - | independent\n"
        "S6 | mid-llm | S5 | after the independent one\n"
    )
    plan = parse_plan(text, EXECUTORS)
    assert plan.ids == ["S5", "S6"]
    assert [(d.code, d.detail) for d in plan.defects] == [("cyclic_deps", "S1,S2,S3,S4")]
    assert_valid(plan)


def test_parse_plan_oversized_keeps_the_first_and_reports_dangling_deps_on_dropped() -> None:
    lines = [f"S{i} | mid-llm | {'S' + str(i - 1) if i > 1 else '-'} | step {i}" for i in range(1, 6)]
    lines.append("S6 | mid-llm | S5 | needs a dropped subtask")
    plan = parse_plan("\n".join(lines), EXECUTORS, max_subtasks=3)
    assert plan.ids == ["S1", "S2", "S3"]
    assert [(d.code, d.detail) for d in plan.defects] == [("oversized_plan", "6 subtasks > 3")]
    assert_valid(plan, max_subtasks=3)


def test_parse_plan_zero_room_is_oversized_and_empty() -> None:
    plan = parse_plan("S1 | mid-llm | - | x", EXECUTORS, max_subtasks=0)
    assert plan.subtasks == ()
    assert codes(plan) == ["oversized_plan", "empty_plan"]


def test_parse_plan_never_raises_on_none() -> None:
    assert codes(parse_plan(None, EXECUTORS)) == ["empty_plan"]  # type: ignore[arg-type]


def test_instruction_containing_pipes_round_trips() -> None:
    sub = Subtask("S1", "mid-llm", "print(a | b) and compare A | B")
    assert parse_plan(render_plan([sub]), EXECUTORS).subtasks == (sub,)


# -- properties -------------------------------------------------------------------------------

_ids = st.text(alphabet=string.ascii_letters + string.digits + "_-", min_size=1, max_size=6).filter(
    lambda s: s[0].isalpha()
)
_executor_field = st.sampled_from([*EXECUTORS, "gpt-99", "", "MID-LLM", " mid-llm "])
_deps_field = st.one_of(
    st.just("-"),
    st.lists(st.sampled_from(["S1", "S2", "S3", "S4", "S5", "S6", "S7", "S8", "S9", "X"]), max_size=4).map(",".join),
    st.text(max_size=12),
)
_instruction = st.one_of(st.text(max_size=30), st.just(""), st.just("Solve P1."))
_plan_line = st.one_of(
    st.tuples(st.one_of(st.sampled_from([f"S{i}" for i in range(1, 10)]), _ids, st.text(max_size=5)),
              _executor_field, _deps_field, _instruction).map(lambda t: " | ".join(t)),
    st.text(max_size=40),
    st.sampled_from(["```", "```json", "PLAN:", "END", "", "|||", "S1 |", "| | | |"]),
)

_settings = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_settings
@given(text=st.text(max_size=300), max_subtasks=st.integers(0, 10))
def test_property_parse_plan_on_arbitrary_text(text: str, max_subtasks: int) -> None:
    plan = parse_plan(text, EXECUTORS, max_subtasks=max_subtasks)
    assert_valid(plan, max_subtasks=max_subtasks)
    assert plan.subtasks or plan.defects  # an unusable plan always says why


@_settings
@given(lines=st.lists(_plan_line, max_size=14), max_subtasks=st.integers(0, 10))
def test_property_parse_plan_on_corrupted_plan_lines(lines: list[str], max_subtasks: int) -> None:
    plan = parse_plan("\n".join(lines), EXECUTORS, max_subtasks=max_subtasks)
    assert_valid(plan, max_subtasks=max_subtasks)
    assert plan.subtasks or plan.defects


@_settings
@given(text=st.text(max_size=200))
def test_property_parse_milestone_never_raises(text: str) -> None:
    d = parse_milestone(text)
    assert d.kind in ("milestone", "answer", "invalid")
    if d.kind == "invalid":
        assert "unparseable" in [x.code for x in d.defects]
    else:
        assert d.text and d.text == d.text.strip() and "\n" not in d.text


_clean_instruction = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp"), blacklist_characters="|\x85"),
    min_size=1, max_size=60,
).map(str.strip).filter(bool)


@st.composite
def _dags(draw: st.DrawFn) -> list[Subtask]:
    n = draw(st.integers(1, 8))
    ids = draw(st.lists(_ids, min_size=n, max_size=n, unique=True).filter(
        lambda xs: not any(x.upper() in ("PLAN", "END") for x in xs)))
    subs = []
    for i, sid in enumerate(ids):
        deps = tuple(draw(st.lists(st.sampled_from(ids[:i]), unique=True, max_size=3))) if i else ()
        subs.append(Subtask(sid, draw(st.sampled_from(EXECUTORS)), draw(_clean_instruction), deps))
    order = draw(st.permutations(range(n)))
    return [subs[k] for k in order]


@_settings
@given(subtasks=_dags())
def test_property_render_then_parse_round_trips(subtasks: list[Subtask]) -> None:
    plan = parse_plan(render_plan(subtasks), EXECUTORS)
    assert plan.defects == ()
    assert list(plan.subtasks) == subtasks
