"""Prompt rendering: the policy's whole view of the world, in one of two styles.

* ``full`` — executor cards (name, description, price, latency), the task text, the trimmed
  history and the decision asked for. The history keeps the most recent milestones whole and
  drops the oldest first when the prompt would exceed its token budget; outputs are clipped per
  result. For pretrained LLMs, which read prose.
* ``compact`` — the same information digested into a few lines: each numbered part with its
  skill, difficulty cue, dependencies and state (latest confidence, attempts, and ``spent`` once
  it has had the ``engine.max_part_attempts`` subtasks the engine allows); the final part's
  state is repeated on the ``### final`` line, next to the answer-or-go-on decision that hinges
  on it (without it the small policy answered with a low-confidence final part on 40 of 140
  tasks; with it, on 1). For a plan decision, each part's *menu*: the executors whose card
  claims at least a fair level at its skill, cheapest first, with the level and price the card
  states. Plans answer slot by slot with menu ranks (``S1 | #2 | -``: the first slot's part, its
  menu's second executor; see orchestration/protocol.py). A from-scratch
  ~1M-parameter policy learns to route from this in minutes; from the full prompt it does not
  learn within a CPU budget (docs/design.md).
  Tasks without numbered parts (live benchmarks) fall back to ``full``.
* ``factored`` — ``compact``, with a plan asked one slot at a time (a factored action space):
  each slot gets the one-slot plan prompt of its part (its line, renumbered ``S1``, and
  ``### decide: plan for Solve P3``) and answers ``S1 | #4 | -``; the slots are generated side by
  side and their answers put back together as ``Sk`` lines, with the dependencies the task's
  parts state. Milestones are asked whole, as in ``compact``. Why: asked for a whole plan, a
  ~1M-parameter policy routed every one-slot plan as its teacher would but only 65% of the
  slots of wider plans, falling back to ``#1`` where the slot's own line asked for another
  rank; asked slot by slot, it matched its teacher on every slot (docs/benchmarks.md).
* ``per_part`` — ``factored``, with the milestone asked one part at a time too: each part the
  engine would still run (not ``spent``, every part it uses has a value) gets a question showing
  its line, the state of the parts it uses and of the final part, and ``### decide: act on P3``;
  it answers ``yes`` or ``no``. The milestone solves the parts answered ``yes`` (at most
  ``engine.max_plan_subtasks``), in the task's order; with none, or no question to ask, it
  answers with the final part. Why: asked for a whole milestone, the factored policy matched
  its teacher on 80% of milestones (every plan slot matched) and its mistakes — skipping a
  low-confidence part, re-planning a spent one — cost 9 points of accuracy against its teacher
  (docs/benchmarks.md); and RL gets one decision per part whose credit it can compare
  (``rollout.slot_alternatives`` flips one answer).
* ``per_part_tiers`` — ``per_part``, with each menu entry's price shown as its tier (``free``
  ``cheap`` ``mid`` ``pricey`` ``premium``: orchestration/reading.py) instead of the number. Why:
  a small policy reads a price as a token, so what RL taught it for ``good 0.03 | strong 22`` did
  not carry over to ``good 0.06 | strong 27`` on the transfer pool; with tiers both read
  ``good free | strong premium`` (docs/benchmarks.md, "Prices as tiers").
* ``per_part_tier_answers`` — ``per_part_tiers``, with each plan slot answered tier first: the
  tier the menu shows for the chosen rank, then the rank (``S1 | premium #3 | -``; the rank picks
  the card, :func:`tier_answer`). Why: answered ``#3``, the same token stands for a mid-priced
  strong card on one pool and a premium one on another, and RL's comparisons of the two (in favour
  of ``#3`` for hard code at ``mid``, against it at ``premium``) moved one token: the trained
  policies sent every hard coding part to ``#3`` whatever it cost. Tier first, the first token
  that differs between two answers names what they cost (docs/benchmarks.md, "Tier-first answers").
* ``per_part_bands`` — ``per_part_tiers``, with each reported confidence floored to its 0.05 band
  (``0.62`` reads ``0.60``, ``0.67`` reads ``0.65``; :func:`confidence_band`). Why: each two-digit
  confidence is one token to the small policy, and RL's comparisons of repairing a result at
  0.60–0.65 (better on three in four) and at 0.65–0.70 (about even) pushed neighbouring tokens
  both ways, and no round kept a repair threshold of 0.65; with bands, all the comparisons within
  one band train one token. The rules' threshold, 0.6, is a band edge, so the teachers' choices
  read the same. Measured, RL then moved the threshold on one seed of three (docs/benchmarks.md,
  "Confidence bands").
* ``per_part_source`` — ``per_part``, with each result naming the stated level, at the part's
  skill, of the card that reported it (``P2 retrieve easy: 0.63 good x1``). Why: the sim's stated
  confidence is drawn from one distribution for right values and another for wrong ones, whoever
  reports them, so what a confidence says depends on how often the reporting card is right: a
  0.60 is right about four times in five from a card right nine times in ten, and about three
  times in ten from one right half the time. Repairing a good card's results below 0.75 and a
  strong card's below 0.6 makes ``heuristic`` 5.7 points more accurate and ``thrifty`` 14.2 on
  the default pool; a warm start taught by rules that ignore the source ignores it too, and RL
  has not taught it to read it (docs/benchmarks.md, "Who reported a result").
* ``per_part_menu`` — ``per_part``, with a question about a part that already has a result also
  showing the part's menu as a plan slot shows it (``### repair: #1 good 0.03 | #2 strong 22``).
  Why: whether a repair pays depends on what it costs — a lookup repaired by a search tool
  costs next to nothing, a reasoning result repaired by a reasoner a tenth of a task's budget —
  and ``per_part`` asks it without the price, so RL's comparisons of repairs (favourable for
  lookups, unfavourable for reasoning) average out over skills (docs/benchmarks.md, "What a
  repair costs").

Either way executors appear only through their cards — never as fixed output classes — so a pool
the policy never saw is just another set of cards.

What this module deliberately does not do: tokenize for the model (backends do) or parse the
completion (the engine's protocol parser does).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import replace
from typing import get_args

from e3orch.config import FACTORED_STYLES, PER_PART_STYLES, PromptStyle
from e3orch.executors.base import SKILLS
from e3orch.orchestration.episode import DecisionType, Observation
from e3orch.orchestration.protocol import parse_milestone, render_answer, render_milestone
from e3orch.orchestration.reading import (
    DIFFICULTY_NAMES,
    LEVEL_NAMES,
    MENU_REF_RE,
    PART_RESULT_RE,
    PART_TAG_RE,
    PRICE_NAMES,
    CardsKey,
    MenuRank,
    Part,
    PartStatus,
    card_levels,
    cards_key,
    deps_met,
    is_spent,
    key_levels,
    parse_parts,
    part_status,
    plan_slots,
    skill_menus,
    tier_of_price,
)
from e3orch.orchestration.types import MilestoneRecord

COMPACT_STYLES = ("compact", *FACTORED_STYLES)  # styles whose prompts are the compact digest
TIER_STYLES = ("per_part_tiers", "per_part_tier_answers", "per_part_bands")  # styles whose menus show price tiers instead of prices
TIER_ANSWER_STYLES = ("per_part_tier_answers",)  # styles whose plan slots are answered tier first (S1 | mid #2 | -)
BAND_STYLES = ("per_part_bands",)  # styles that show each confidence as its 0.05 band
SOURCE_STYLES = ("per_part_source",)  # styles whose result lines name the reporting card's level
MENU_STYLES = ("per_part_menu",)  # styles whose questions about a part with a result show its menu

MAX_OUTPUT_CHARS = 160

PROTOCOL_HINT = (
    "Reply with one decision. Milestone step: 'MILESTONE: <next objective>' or 'ANSWER: <answer>' "
    "(a part tag like P3 names that part's result). Plan step: one line per subtask "
    "'S1 | <executor name or card handle E1..> | <deps or -> | <instruction>'."
)


def render_card(obs_card, index: int) -> str:  # type: ignore[no-untyped-def]
    """``E3 name: description (price in/out, latency)``; ``E3`` is the handle plans may use."""
    p, lat = obs_card.price, obs_card.latency
    # Two significant digits: randomised prices would otherwise spend many tokens on noise.
    return (f"E{index} {obs_card.name}: {obs_card.description.strip()} "
            f"(price {p.input_per_1k:.2g}/{p.output_per_1k:.2g}, latency {lat.base_s:.2g}s)")


def render_milestone_record(i: int, rec: MilestoneRecord) -> str:
    lines = [f"M{i}: {rec.text}"]
    by_id = {s.id: s for s in rec.plan.subtasks}
    for r in rec.results:
        sub = by_id.get(r.id)
        what = (r.output if r.ok else f"ERROR {r.error}") or ""
        what = " ".join(what.split())[:MAX_OUTPUT_CHARS]
        label = f" [{sub.instruction[:40]}]" if sub and not _TAG_RE.search(what) else ""  # parts already named
        lines.append(f"{r.id} {r.executor}{label} -> {what}")
    if not rec.results:
        lines.append("(no valid subtask)")
    return "\n".join(lines)


_PART_FAIL_RE = re.compile(r"\b(P\d+): cannot proceed")


def render_status(history: tuple[MilestoneRecord, ...] | list[MilestoneRecord]) -> str:
    """Latest reported state of every named part (``P2 0.81`` = value with confidence 0.81,
    ``P3 failed``), read off the results: a compact digest of the history that survives trimming."""
    status: dict[str, str] = {}
    for rec in history:
        for r in rec.results:
            if not r.ok:
                continue
            for m in PART_RESULT_RE.finditer(r.output):
                status[m.group(1)] = m.group(3) or "done"
            for m in _PART_FAIL_RE.finditer(r.output):
                status.setdefault(m.group(1), "failed")
    if not status:
        return ""
    return " | ".join(f"{k} {v}" for k, v in sorted(status.items(), key=lambda kv: int(kv[0][1:])))


_TAG_RE = re.compile(r"\b[PS]\d+\b")


def focus_lines(question: str, milestone: str | None) -> list[str]:
    """The task lines that mention the parts the pending milestone names, repeated next to the
    plan decision: the policy routes a part by its text, and a small model attends far better to
    what is close to the decision than to a line in the middle of a long prompt."""
    tags = set(_TAG_RE.findall(milestone or ""))
    if not tags:
        return []
    lines = [ln.strip() for ln in question.splitlines() if ln.strip() and ln.split(":", 1)[0].strip() in tags]
    return ["### focus: " + ln for ln in lines]


def render_prompt(
    obs: Observation,
    kind: DecisionType,
    *,
    count_tokens: Callable[[str], int] | None = None,
    max_tokens: int = 0,
    hint: bool = False,
    style: PromptStyle = "full",
) -> str:
    """The prompt for one decision. ``count_tokens``+``max_tokens`` trim the oldest history first."""
    if style in COMPACT_STYLES:
        compact = render_compact(obs, kind, tiers=style in TIER_STYLES, source=style in SOURCE_STYLES,
                                 bands=style in BAND_STYLES)
        if compact is not None:
            return compact
    head = ["### executors"] + [render_card(c, i + 1) for i, c in enumerate(obs.cards)]
    if hint:
        head = [PROTOCOL_HINT, *head]
    head += ["### task", obs.question.strip()]
    status = render_status(obs.history)
    focus = focus_lines(obs.question, obs.pending_milestone) if kind == "plan" else []
    tail = ([f"### status: {status}"] if status else []) + focus + [
        f"### budget: {obs.milestones_left} milestones, {obs.subtasks_left} subtasks left"
        + (f", at most {obs.max_part_attempts} subtasks per part" if obs.max_part_attempts else ""),
        f"### decide: plan for {obs.pending_milestone}" if kind == "plan" else "### decide: milestone",
    ]
    records = [render_milestone_record(i + 1, m) for i, m in enumerate(obs.history)]
    while True:
        dropped = len(obs.history) - len(records)
        hist = ["### history"] + ([f"({dropped} earlier milestones omitted)"] if dropped else []) + records
        text = "\n".join(head + hist + tail) + "\n"
        if not records or count_tokens is None or max_tokens <= 0 or count_tokens(text) <= max_tokens:
            return text
        records = records[1:]


def policy_prompt_style(backend: object, default: PromptStyle) -> PromptStyle:
    """The style a checkpoint was trained with (its ``e3orch_policy.json``), else ``default``:
    a policy must be prompted the way it learned."""
    import json
    from pathlib import Path

    path = getattr(backend, "model_path", None)
    meta = Path(str(path)) / "e3orch_policy.json" if path else None
    if meta is not None and meta.exists():
        style = json.loads(meta.read_text()).get("prompt")
        if style in get_args(PromptStyle):
            return style  # type: ignore[no-any-return]
    return default


def confidence_band(confidence: float) -> float:
    """A confidence floored to its 0.05 band: 0.62 → 0.60, 0.65 → 0.65, 0.599 → 0.55."""
    return math.floor(confidence * 20 + 1e-9) / 20


def _shown_status(obs: Observation, parts: list[Part], bands: bool) -> dict[str, PartStatus]:
    """The parts' status as a prompt shows it: with ``bands``, each confidence as its band."""
    status = part_status(obs.history, parts)
    if bands:
        status = {k: replace(v, confidence=confidence_band(v.confidence)) for k, v in status.items()}
    return status


def _part_state(part: Part, status: dict[str, PartStatus], limit: int = 0,
                levels: dict[str, dict[str, int]] | None = None) -> str:
    """``0.63 x1`` (a result's confidence and the attempts), ``failed``, ``open`` or ``waits``;
    with ``levels`` (card name → stated skill levels) a result also names the level, at the
    part's skill, of the card that reported it: ``0.63 good x1``."""
    st = status[part.id]
    if st.value is not None:
        state = f"{st.confidence:.2f}"
        level = (levels or {}).get(st.executor, {}).get(st.skill)
        if level is not None:
            state += f" {LEVEL_NAMES[level]}"
    elif st.attempts:
        state = "failed"
    elif deps_met(part, status):
        state = "open"
    else:
        state = "waits"
    return state + _attempts_note(st.attempts, limit)


def _attempts_note(n: int, limit: int) -> str:
    """`` x2``; `` x3 spent`` once the engine refuses more (``engine.max_part_attempts``)."""
    return (f" x{n}" if n else "") + (" spent" if is_spent(n, limit) else "")


def _source_levels(obs: Observation, source: bool) -> dict[str, dict[str, int]] | None:
    """Card name → stated skill levels, for the styles whose result lines name their source."""
    return {c.name: card_levels(c) for c in obs.cards} if source else None


def render_compact(obs: Observation, kind: DecisionType, *, tiers: bool = False, source: bool = False,
                   bands: bool = False) -> str | None:
    """The compact prompt (see the module docstring), or None for a task without numbered parts."""
    parts, sink = parse_parts(obs.question)
    if not parts:
        return None
    status = _shown_status(obs, parts, bands)
    limit = obs.max_part_attempts
    if kind == "plan":
        lines = [f"### S{k + 1} {line}" for k, line in enumerate(_slot_lines(obs, parts, status, tiers))]
        return "\n".join(lines + [f"### decide: plan for {obs.pending_milestone}"]) + "\n"
    levels = _source_levels(obs, source)
    by_id = {p.id: p for p in parts}
    head = ["### parts"]
    for p in parts:
        deps = f" <{','.join(p.deps)}" if p.deps else ""
        head.append(f"{p.id} {p.skill} {DIFFICULTY_NAMES[p.difficulty]}{deps}: {_part_state(p, status, limit, levels)}")
    return "\n".join(head + [
        # the final part's state again, next to the decision that depends on it most (answer or not)
        f"### final: {sink}" + (f" {_part_state(by_id[sink], status, limit, levels)}" if sink in by_id else ""),
        f"### budget: {obs.milestones_left} milestones, {obs.subtasks_left} subtasks left",
        "### decide: milestone",
    ]) + "\n"


def _slot_lines(obs: Observation, parts: list[Part], status: dict[str, PartStatus], tiers: bool = False) -> list[str]:
    """Per plan slot: ``P3 retrieve hard x1: #1 good 0.03 | #2 strong 22`` (the part, its skill,
    difficulty and attempts, and its menu: capable executors cheapest first, with level and price,
    or with ``tiers`` price tier: ``#1 good free | #2 strong premium``)."""
    by_id = {p.id: p for p in parts}
    slots = [by_id[x] for x in plan_slots(parts, obs.pending_milestone)]
    menus = _menu_texts(obs, slots, tiers)
    return [f"{p.id} {p.skill} {DIFFICULTY_NAMES[p.difficulty]}"
            f"{_attempts_note(status[p.id].attempts, obs.max_part_attempts)}: {menus[p.id]}" for p in slots]


def _menu_texts(obs: Observation, parts: list[Part], tiers: bool = False) -> dict[str, str]:
    """Part id → its menu as a plan slot shows it (``#1 good 0.03 | #2 strong 22``), for ``parts``
    only (a part's menu depends on its skill and the cards alone)."""
    by_skill = _skill_menu_texts(cards_key(obs.cards), tiers)
    return {p.id: by_skill[p.skill] for p in parts}


@functools.lru_cache(maxsize=4096)
def _skill_menu_texts(cards: CardsKey, tiers: bool) -> dict[str, str]:
    """Skill → the menu text of the cards of a :func:`cards_key` (each plan question of every
    episode on a pool shows them again)."""
    levels = key_levels(cards)
    menus = skill_menus(cards)
    return {skill: " | ".join(f"#{k + 1} {LEVEL_NAMES[levels[i][skill]]} "
                              f"{tier_of_price(cards[i][1]) if tiers else format(cards[i][1], '.2g')}"
                              for k, i in enumerate(menus[skill])) or "(no capable executor)"
            for skill in SKILLS}


def sub_prompts(obs: Observation, kind: DecisionType, style: PromptStyle = "factored") -> list[str] | None:
    """The questions a factored style asks for a decision (see the module docstring): one per plan
    slot, and (``per_part``) one per part a milestone could act on — possibly none: the decision
    is then forced (the final part's answer). None when the decision is asked whole: any decision
    of a style that is not factored, a milestone in the ``factored`` style, a task without
    numbered parts, or a plan whose milestone names none of them."""
    if style not in FACTORED_STYLES or (kind == "milestone" and style not in PER_PART_STYLES):
        return None
    parts, sink = parse_parts(obs.question)
    if not parts:
        return None
    status = _shown_status(obs, parts, style in BAND_STYLES)
    if kind == "milestone":
        by_id = {p.id: p for p in parts}
        limit = obs.max_part_attempts
        levels = _source_levels(obs, style in SOURCE_STYLES)
        asked = actionable_parts(obs, parts, status)
        # with a menu style, a part that has a result (or a failed attempt) shows what repairing it costs
        menus = _menu_texts(obs, [p for p in asked if status[p.id].attempts]) if style in MENU_STYLES else {}
        final = f"### final: {sink} {_part_state(by_id[sink], status, limit, levels)}" if sink in by_id else "### final: -"
        return [_act_question(p, by_id, status, limit, final, levels, menus.get(p.id)) for p in asked]
    return [f"### S1 {line}\n### decide: plan for Solve {line.split(' ', 1)[0]}\n"
            for line in _slot_lines(obs, parts, status, style in TIER_STYLES)] or None


def actionable_parts(obs: Observation, parts: list[Part], status: dict[str, PartStatus]) -> list[Part]:
    """The parts a ``per_part`` milestone asks about: those the engine would still run (not spent,
    every part they use has a value), none once the milestone or subtask budget is gone."""
    if obs.milestones_left <= 0 or obs.subtasks_left <= 0:
        return []
    return [p for p in parts if not is_spent(status[p.id].attempts, obs.max_part_attempts) and deps_met(p, status)]


def _act_question(part: Part, by_id: dict[str, Part], status: dict[str, PartStatus], limit: int, final: str,
                  levels: dict[str, dict[str, int]] | None = None, menu: str | None = None) -> str:
    """``### part: P3 compute hard: 0.41 x1`` / (with ``menu``: ``### repair: #1 good 0.03 | …``) /
    ``### uses: P1 0.77 x1, P2 0.58 x2`` / the final part's line / ``### decide: act on P3`` (with
    ``levels``, results name their source's level)."""
    uses = ", ".join(f"{d} {_part_state(by_id[d], status, limit, levels)}" for d in part.deps if d in by_id) or "-"
    return "\n".join([
        f"### part: {part.id} {part.skill} {DIFFICULTY_NAMES[part.difficulty]}: {_part_state(part, status, limit, levels)}",
        *([f"### repair: {menu}"] if menu is not None else []),
        f"### uses: {uses}", final, f"### decide: act on {part.id}"]) + "\n"


def join_answers(obs: Observation, answers: list[str], kind: DecisionType = "plan") -> str:
    """The decision made of the answers to :func:`sub_prompts`' questions.

    A plan: each slot's first line renumbered ``Sk``, its executor (and instruction, if it wrote
    one) kept, and its dependencies set to the other slots whose parts its part uses, as the task
    states them. An answer whose first line is not a plan line stays as written, and the plan
    parser records it as a defect.

    A milestone (``per_part``): ``MILESTONE: Solve P1, P3`` for the parts answered ``yes``, or the
    final part's answer when none was. An answer that is neither ``yes`` nor ``no`` becomes the
    decision as written, and the milestone parser records it as a defect."""
    parts, sink = parse_parts(obs.question)
    if kind == "milestone":
        ids = [p.id for p in actionable_parts(obs, parts, part_status(obs.history, parts))]
        chosen = []
        for pid, answer in zip(ids, answers):
            first = _first_line_fields(answer)[0].strip()
            if first.lower() not in ("yes", "no"):
                return first or answer
            if first.lower() == "yes":
                chosen.append(pid)
        if not chosen:
            return render_answer(sink or parts[-1].id)
        return render_milestone("Solve " + ", ".join(chosen[: obs.max_plan_subtasks]))
    by_id = {p.id: p for p in parts}
    slots = plan_slots(parts, obs.pending_milestone)
    lines = []
    for k, (part, answer) in enumerate(zip(slots, answers)):
        first, fields = _first_line_fields(answer)
        if len(fields) < 2 or not _SLOT_HEAD_RE.fullmatch(fields[0]):
            lines.append(first)
            continue
        deps = [f"S{i + 1}" for i, other in enumerate(slots) if other in by_id[part].deps]
        lines.append(" | ".join([f"S{k + 1}", fields[1], ",".join(deps) or "-", *fields[3:]]))
    return "\n".join(lines)


# a slot answer's first field: ``S1``, or with the part restated (warmstart.slot_echo) ``S1 reason hard``
_SLOT_HEAD_RE = re.compile(r"S\d{1,2}(?: [a-z]+ [a-z]+)?")
_SLOT_PART_RE = re.compile(r"^### S1 P\d+ ([a-z]+ [a-z]+)")


def echo_part(question: str, answer: str) -> str:
    """A plan slot's taught answer with its part's skill and difficulty restated before the rank:
    ``S1 reason hard | #3 | -`` for ``S1 | #3 | -`` (``warmstart.slot_echo``); any other answer,
    or a question that is not a plan slot's, as it is. Why: taught ``S1 | #3 | -`` from a teacher
    mix, a ~1M-parameter policy answered every slot alike whatever its skill, difficulty or menu
    (only the attempts, which lengthen the question, moved it); writing the part first, it read it
    on one seed of three (docs/benchmarks.md, "What a plan question is read for").
    :func:`join_answers` drops the restatement, :func:`slot_alternatives` keeps it."""
    m = _SLOT_PART_RE.match(question)
    if m is None or not answer.startswith("S1 |"):
        return answer
    return f"S1 {m.group(1)}" + answer[2:]


def _first_line_fields(answer: str) -> tuple[str, list[str]]:
    """A slot answer's first line and its ``|`` fields (at most four; the last keeps any ``|``)."""
    first = (answer.strip().splitlines() or [""])[0]
    return first, [f.strip() for f in first.split("|", 3)]


def split_decision(obs: Observation, taught: str, kind: DecisionType = "plan") -> list[str] | None:
    """The inverse of :func:`join_answers` for a taught decision: the answer each question should get.

    A plan: one ``S1 | #4 | -`` per slot; None when the plan is not one slot line (``S2 | #4 | -``)
    per slot, in slot order: it cannot be taught slot by slot. A milestone (``per_part``): ``yes``
    for each part it names, ``no`` for the others (all ``no`` for an answer); None when it names a
    part no question asks about."""
    parts, _ = parse_parts(obs.question)
    if kind == "milestone":
        ids = [p.id for p in actionable_parts(obs, parts, part_status(obs.history, parts))]
        decision = parse_milestone(taught)
        if decision.kind == "invalid":
            return None
        wanted = set() if decision.kind == "answer" else set(PART_TAG_RE.findall(decision.text))
        if wanted - set(ids):
            return None
        return ["yes" if pid in wanted else "no" for pid in ids]
    slots = plan_slots(parts, obs.pending_milestone)
    lines = [ln.strip() for ln in taught.strip().splitlines() if ln.strip()]
    if not slots or len(lines) != len(slots):
        return None
    out = []
    for k, line in enumerate(lines):
        fields = [f.strip() for f in line.split("|", 3)]
        if len(fields) != 3 or fields[0] != f"S{k + 1}":
            return None
        out.append(f"S1 | {_strip_tier(fields[1])} | -")
    return out


_SLOT_MENU_RE = re.compile(r"^### S1 [^:\n]*: (.*)$", re.M)
_ENTRY_RE = re.compile(r"#(\d{1,2}) ([^|]*?)\s*\|")  # a menu entry: rank, then the card as shown


def _slot_menu(question: str) -> list[tuple[str, str]] | None:
    """A plan slot question's menu entries, (rank, the card as shown: ``strong premium``), in menu
    order; None for a question that is not a plan slot's."""
    m = _SLOT_MENU_RE.search(question)
    return _ENTRY_RE.findall(m.group(1) + " |") if m else None


def _strip_tier(executor: str) -> str:
    """``mid #2`` → ``#2``; anything else as it is."""
    m = MENU_REF_RE.match(executor)
    return f"#{m.group(2)}" if m else executor


def _entry_tier(what: str) -> str | None:
    """The price tier a menu entry shows (``strong premium`` → ``premium``), None for a number."""
    last = what.rsplit(" ", 1)[-1]
    return last if last in PRICE_NAMES else None


def slot_menu_tiers(question: str) -> dict[str, str | None] | None:
    """A plan slot question's menu as rank → the price tier that rank shows (``{"3": "premium"}``
    for ``#3 strong premium``; None where the menu shows a price as a number); None for a question
    that is not a plan slot's."""
    entries = _slot_menu(question)
    return None if entries is None else {rank: _entry_tier(what) for rank, what in entries}


def tier_answer(question: str, answer: str) -> str:
    """A plan slot's answer with the tier its rank has in the question's menu written first:
    ``S1 | premium #3 | -`` for ``S1 | #3 | -`` where the menu reads ``#3 strong premium``
    (``policy.prompt: per_part_tier_answers``); an answer already tiered, one naming no rank of a
    tiered menu, or a question that is not a plan slot's stays as it is. The rank picks the card
    (orchestration/reading.py: ``resolve_menu_ref``); a tier that contradicts it is ignored."""
    tiers = slot_menu_tiers(question)
    fields = _first_line_fields(answer)[1]
    if tiers is None or len(fields) < 2 or not fields[1].startswith("#"):
        return answer
    tier = tiers.get(fields[1][1:])
    return answer if tier is None else " | ".join([fields[0], f"{tier} {fields[1]}", *fields[2:]])


_ACT_RE = re.compile(r"^### decide: act on P\d+$", re.M)
_RESULT_PART_RE = re.compile(r"^### part: P\d+ [^\n]* x\d+( spent)?$", re.M)


_QUESTION_PART_RE = re.compile(r"^### decide: (?:act on|plan for Solve) (P\d+)$", re.M)


def question_part(question: str) -> str | None:
    """The part a :func:`sub_prompts` question asks about (``P3``), or None."""
    m = _QUESTION_PART_RE.search(question)
    return m.group(1) if m else None


def asks_to_act(question: str) -> bool:
    """Whether a :func:`sub_prompts` question is a ``per_part`` milestone's (``act on P3``)."""
    return bool(_ACT_RE.search(question))


def asks_about_result(question: str) -> bool:
    """Whether a ``per_part`` milestone question is about a part that already has a result or a
    failed attempt (``### part: P3 compute hard: 0.41 x1``), not an open or waiting one."""
    return asks_to_act(question) and bool(_RESULT_PART_RE.match(question))


def slot_alternatives(question: str, answer: str, pick: MenuRank = "highest") -> list[str]:
    """For one :func:`sub_prompts` question and its answer, the other answers it could get: for a
    plan slot, each other executor of its menu (``S1 | #3 | -``) — one rank per card, the highest
    that names it or with ``pick="lowest"`` the lowest (``policy.menu_rank``: as warm start
    teaches it; ``"need"`` offers the highest); ranks that name the answer's own card are left out
    (their runs would be the answer's) — in menu order (every card when the answer names no menu
    rank), each written tier first when the answer is (``S1 | mid #2 | -``); for a ``per_part``
    milestone question, the other of ``yes`` and ``no`` (both when the answer is neither)."""
    if asks_to_act(question):
        said = _first_line_fields(answer)[0].strip().lower()
        return [w for w in ("yes", "no") if w != said]
    entries = _slot_menu(question) or []
    card = {rank: what for rank, what in entries}  # rank → the card it names, as shown ("good 0.03")
    fields = _first_line_fields(answer)[1]
    ref = MENU_REF_RE.match(fields[1]) if len(fields) > 1 else None
    chosen = card.get(ref.group(2)) if ref else None
    kept = {what: rank for rank, what in (reversed(entries) if pick == "lowest" else entries)}  # later entries overwrite
    head = fields[0] if _SLOT_HEAD_RE.fullmatch(fields[0]) else "S1"  # a restated part stays (echo_part)
    tiered = bool(ref and ref.group(1))  # an answer written tier first (per_part_tier_answers) gets alternatives so written

    def ref_of(rank: str, what: str) -> str:
        tier = _entry_tier(what) if tiered else None
        return f"{tier} #{rank}" if tier else f"#{rank}"

    return [f"{head} | {ref_of(rank, what)} | -" for rank, what in entries if what != chosen and kept[what] == rank]
