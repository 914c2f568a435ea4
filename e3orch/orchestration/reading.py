"""Reading a task and a pool the way an orchestrator does: numbered parts, card levels, menus.

A sim task names its parts in text ("P3: (tricky) Find …, using P1 and P2."); a card states its
strengths in words ("strong at code, good at compute; weak at retrieve"). This module turns both
into data, shared by the hand-written orchestrators, the policy's compact prompt and the engine:

* :func:`parse_parts` — each part's id, skill (from its leading verb), difficulty cue and deps;
* :func:`card_levels` — skill → level 0 (weak) … 3 (strong) as a card's description states it;
* :func:`part_status` — each part's attempts and latest reported value and confidence, read off
  an episode's results (:func:`part_attempts` counts attempts as the engine limits them;
  :func:`futile_parts` says when a milestone names none that would still run);
* :func:`part_menus` — for each part, a *menu* of three needs: ``#1`` the cheapest card that
  claims at least a fair level at its skill, ``#2`` at least good, ``#3`` at least strong (the
  strongest card where none claims that much). A plan may name an executor by its rank in the
  menu of the part its instruction names (``#2``): a pointer whose meaning ("the cheapest card
  good enough at this skill") is the same in every pool, as the hand-written rules' and the
  fitted routing tables' are, and which a small policy learns far faster than pointing into a
  card list. Two needs may name the same card (on the default pool the search tool is the
  cheapest card at least fair and at least good at lookups).

Everything here reads only what an orchestrator is shown (task text and cards), never the sim's
hidden requirement graph or executor profiles. What it deliberately does not do: decide anything.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from e3orch.executors.base import SKILLS, ExecutorSpec

if TYPE_CHECKING:
    from e3orch.orchestration.types import MilestoneRecord

_PART_RE = re.compile(r"^\s*(P\d+)\s*:\s*(.*?)\s*$")
_USING_RE = re.compile(r",?\s*using\s+(.+?)\.?\s*$", re.I)
_SINK_RE = re.compile(r"result of\s+(P\d+)", re.I)
PART_TAG_RE = re.compile(r"\bP\d+\b")  # a part named anywhere in a text
# a reported value in an executor's output: "P3 = Norvik52 (confidence 0.92)" → part, value, confidence
PART_RESULT_RE = re.compile(r"\b(P\d+) = (\S+)(?: \(confidence ([0-9.]+)\))?")


def named_parts(text: str) -> list[str]:
    """The parts a text names (``P3``), each once, in the order they first appear."""
    return list(dict.fromkeys(PART_TAG_RE.findall(text)))


def part_attempts(history: Iterable[MilestoneRecord]) -> dict[str, int]:
    """Per part: how many executed subtasks named it (a subtask naming it twice counts once).
    What the compact prompt shows as ``x3`` and what ``engine.max_part_attempts`` limits."""
    attempts: dict[str, int] = {}
    for rec in history:
        for tag in _record_reading(rec)[0]:
            attempts[tag] = attempts.get(tag, 0) + 1
    return attempts


# per result of a record, in order: the parts its subtask named, and the values it reported
# (part, value, confidence, executor); what part_attempts and part_status read off a record
RecordReading = tuple[tuple[str, ...], tuple[tuple[str, str, float, str], ...]]


def _record_reading(rec: MilestoneRecord) -> RecordReading:
    """What :func:`part_attempts` and :func:`part_status` read off one record, read once: a record
    is not changed once its episode appends it, and every later decision of the episode (and of
    every path forked from it) reads it again."""
    if rec.reading is None:
        by_id = {s.id: s for s in rec.plan.subtasks}
        tags = tuple(tag for r in rec.results if r.id in by_id for tag in named_parts(by_id[r.id].instruction))
        reports = tuple((m.group(1), m.group(2), float(m.group(3)) if m.group(3) else 0.5, r.executor)
                        for r in rec.results if r.ok for m in PART_RESULT_RE.finditer(r.output))
        rec.reading = (tags, reports)
    return rec.reading


@dataclass
class PartStatus:
    attempts: int = 0             # as :func:`part_attempts` counts them
    value: str | None = None      # the latest value an executor reported for the part
    confidence: float = 0.0       # its stated confidence (0.5 when it stated none)
    executor: str = ""            # the executor that reported that value
    skill: str = ""               # the part's skill (what the reporting card's stated level is read at)


def part_status(history: Sequence[MilestoneRecord], parts: Iterable[Part]) -> dict[str, PartStatus]:
    """Attempts and latest reported value/confidence of every part, read off the results: what
    the hand-written orchestrators decide on and the compact prompt shows."""
    attempts = part_attempts(history)
    status = {p.id: PartStatus(attempts=attempts.get(p.id, 0), skill=p.skill) for p in parts}
    for rec in history:
        for part, value, confidence, executor in _record_reading(rec)[1]:
            if part in status:
                st = status[part]
                st.value, st.confidence, st.executor = value, confidence, executor
    return status


def deps_met(part: Part, status: dict[str, PartStatus]) -> bool:
    """Whether every part ``part`` depends on has a value (the compact prompt's ``open``)."""
    return all(d in status and status[d].value is not None for d in part.deps)


def is_spent(attempts: int, limit: int) -> bool:
    """Whether a part with ``attempts`` subtasks has had the ``engine.max_part_attempts`` the
    engine allows (``limit`` 0 = no limit); the engine refuses a subtask whose named parts are all
    spent, and the compact prompt marks such a part ``spent``."""
    return bool(limit) and attempts >= limit


def futile_parts(text: str, question: str, history: Iterable[MilestoneRecord], limit: int) -> list[str]:
    """The parts a milestone ``text`` names when none of them would still run — each is spent
    (:func:`is_spent`) or not a part of the task — else ``[]`` (also when it names no part, or
    the task has no numbered parts). Any plan for such a milestone is refused subtask by subtask."""
    tags = named_parts(text)
    parts = {p.id for p in parse_parts(question)[0]}
    if not tags or not parts:
        return []
    attempts = part_attempts(history)
    return [] if any(t in parts and not is_spent(attempts.get(t, 0), limit) for t in tags) else tags


SKILL_WORDS: dict[str, tuple[str, ...]] = {
    "retrieve": ("look up", "find", "retrieve", "search", "lookup"),
    "compute": ("calculate", "compute", "work out", "evaluate", "arithmetic"),
    "code": ("write", "implement", "program", "code", "function"),
    "reason": ("decide", "judge", "infer", "reason", "determine", "verify"),
}
_HARD_WORDS = ("tricky", "hard", "obscure", "demanding", "difficult", "complex")
_EASY_WORDS = ("quick", "simple", "easy", "routine", "trivial")
_LEVEL_WORDS = {
    "strongest": 3, "strong": 3, "exact": 3, "excellent": 3, "expert": 3,
    "good": 2, "decent": 2, "solid": 2,
    "fair": 1, "okay": 1, "basic": 1,
    "weak": 0, "poor": 0, "useless": 0, "bad": 0,
}
_LEVEL_ALT = "|".join(_LEVEL_WORDS)
# "strong at code, good at compute" → ("strong", "code, "), ("good", "compute"): a list ends at ; . or the next level word
_LEVEL_RE = re.compile(
    rf"\b({_LEVEL_ALT})\s+(?:at|for|in|on)\s+((?:(?!\b(?:{_LEVEL_ALT})\b)[^;.])+)", re.I
)
_DIFF_PREFIX_RE = re.compile(r"^\((\w+)\)\s*")
_SKILL_SYNONYMS: dict[str, tuple[str, ...]] = {
    "retrieve": ("retrieve", "retrieval", "lookup", "search"),
    "compute": ("compute", "math", "arithmetic", "calculation"),
    "code": ("code", "coding", "programming"),
    "reason": ("reason", "reasoning", "logic"),
}


@dataclass(frozen=True)
class Part:
    id: str
    skill: str
    difficulty: int  # 0 easy, 1 medium, 2 hard (as cued by the text)
    deps: tuple[str, ...]
    text: str


def parse_parts(question: str) -> tuple[list[Part], str | None]:
    """The numbered parts of a task text and the part the final answer names."""
    parts, sink = _parse_parts(question)
    return list(parts), sink


# Every decision of an episode (the engine's, the prompt's, a hand-written rule's) reads the same
# task text and the same cards again: an evaluation reads them a few hundred thousand times.
@functools.lru_cache(maxsize=4096)
def _parse_parts(question: str) -> tuple[tuple[Part, ...], str | None]:
    parts: list[Part] = []
    for line in question.splitlines():
        m = _PART_RE.match(line)
        if not m:
            continue
        pid, body = m.group(1), m.group(2)
        low = body.lower()
        deps: tuple[str, ...] = ()
        u = _USING_RE.search(body)
        if u:
            deps = tuple(PART_TAG_RE.findall(u.group(1)))
        verb = _DIFF_PREFIX_RE.sub("", low)
        # The leading verb names the skill ("Write and test code that computes …" is code, not compute).
        skill = next((s for s, words in SKILL_WORDS.items() if any(verb.startswith(w) for w in words)), None) or next(
            (s for s, words in SKILL_WORDS.items() if any(w in low for w in words)), "reason"
        )
        # The difficulty cue is the leading "(word)"; a verb such as "Program a routine that" must not count.
        cue_m = _DIFF_PREFIX_RE.match(low)
        cue = cue_m.group(1) if cue_m else ""
        difficulty = 2 if cue in _HARD_WORDS else 0 if cue in _EASY_WORDS else 1
        parts.append(Part(pid, skill, difficulty, deps, body))
    sink = _SINK_RE.search(question)
    return tuple(parts), (sink.group(1) if sink else (parts[-1].id if parts else None))


def card_levels(spec: ExecutorSpec) -> dict[str, int]:
    """Skill → level (0 weak … 3 strong) as the card's description states it."""
    return dict(_description_levels(spec.description))


@functools.lru_cache(maxsize=4096)
def _description_levels(description: str) -> tuple[tuple[str, int], ...]:
    desc = description.lower()
    general = "general" in desc
    levels = {s: (1 if general else 0) for s in SKILLS}
    stated: set[str] = set()
    for m in _LEVEL_RE.finditer(desc):
        level, what = _LEVEL_WORDS[m.group(1).lower()], m.group(2)
        if any(w in what for w in ("every skill", "all skills", "everything", "anything")):
            # "useless for anything else" covers only the skills not stated so far
            rest = [s for s in SKILLS if s not in stated] if "else" in what else list(SKILLS)
            for s in rest:
                levels[s] = level
            continue
        for s, words in _SKILL_SYNONYMS.items():
            if any(w in what for w in words):
                levels[s] = level
                stated.add(s)
    return tuple(levels.items())


def price_of(spec: ExecutorSpec) -> float:
    # Outputs dominate agent calls; weigh them as a typical 1:2 input:output call would.
    return spec.price.input_per_1k + 2.0 * spec.price.output_per_1k


DIFFICULTY_NAMES = ("easy", "normal", "hard")
LEVEL_NAMES = ("weak", "fair", "good", "strong")
# Price tiers of a card (price_of, per 1k tokens): below 0.2 is a tool's price, below 2 a small
# model's, below 8 a mid-sized or specialist model's, below 20 a dear one's, above a large model's.
PRICE_TIERS = ((0.2, "free"), (2.0, "cheap"), (8.0, "mid"), (20.0, "pricey"), (float("inf"), "premium"))
PRICE_NAMES = tuple(name for _, name in PRICE_TIERS)


def price_tier(spec: ExecutorSpec) -> str:
    """The card's price as one of :data:`PRICE_NAMES` (how the policy's menus show it)."""
    return tier_of_price(price_of(spec))


def tier_of_price(price: float) -> str:
    """A price (:func:`price_of`) as one of :data:`PRICE_NAMES`."""
    return next(name for bound, name in PRICE_TIERS if price < bound)


# ``#2``, or with its tier first (``mid #2``: policy.prompt per_part_tier_answers); groups: the tier
# (None without one) and the rank, which picks the card
MENU_REF_RE = re.compile(rf"^(?:({'|'.join(PRICE_NAMES)}) )?#(\d{{1,2}})$")


def plan_slots(parts: Sequence[Part], milestone: str | None) -> list[str]:
    """The plan slots of a milestone: the parts it names, in the task's order (slot ``S1`` is the
    first). The compact prompt lists them; a plan line without an instruction solves its slot's part."""
    wanted = set(PART_TAG_RE.findall(milestone or ""))
    return [p.id for p in parts if p.id in wanted]


def slot_instruction(part: str) -> str:
    """The instruction a slot line stands for."""
    return f"Solve {part}."


def part_menus(question: str, cards: Sequence[ExecutorSpec]) -> dict[str, list[int]]:
    """Part id → the menu of the part: indices into ``cards`` of the cheapest card at least fair,
    good and strong at the part's skill (``#1``, ``#2``, ``#3``); empty when no card is capable."""
    return menus_for(parse_parts(question)[0], cards)


MENU_NEEDS = (1, 2, 3)  # the level each menu rank asks for: fair, good, strong


def cheapest_at_least(cards: Sequence[ExecutorSpec], levels: Sequence[dict[str, int]], skill: str, need: int) -> int:
    """Index of the cheapest card whose stated ``skill`` level is at least ``need``; when none is,
    the strongest card at the skill (cheapest among equals)."""
    return _cheapest_at_least([price_of(c) for c in cards], levels, skill, need)


def strongest(cards: Sequence[ExecutorSpec], levels: Sequence[dict[str, int]], skill: str) -> int:
    """Index of the card that states the highest level at ``skill`` (the cheapest among equals)."""
    return _strongest([price_of(c) for c in cards], levels, skill)


def _cheapest_at_least(prices: Sequence[float], levels: Sequence[dict[str, int]], skill: str, need: int) -> int:
    ok = [i for i in range(len(prices)) if levels[i][skill] >= need]
    if ok:
        return min(ok, key=lambda i: (prices[i], i))
    return _strongest(prices, levels, skill)


def _strongest(prices: Sequence[float], levels: Sequence[dict[str, int]], skill: str) -> int:
    return min(range(len(prices)), key=lambda i: (-levels[i][skill], prices[i], i))


def menus_for(parts: Sequence[Part], cards: Sequence[ExecutorSpec]) -> dict[str, list[int]]:
    """:func:`part_menus` for parts already parsed."""
    if not parts:
        return {}
    by_skill = skill_menus(cards_key(cards))
    return {p.id: list(by_skill[p.skill]) for p in parts}


# what a card's menus and menu texts depend on: its description (stated levels) and its price
CardsKey = tuple[tuple[str, float], ...]


def cards_key(cards: Sequence[ExecutorSpec]) -> CardsKey:
    """The cards as (description, price): what menus are read from, a key to cache them by."""
    return tuple((c.description, price_of(c)) for c in cards)


def key_levels(cards: CardsKey) -> list[dict[str, int]]:
    """:func:`card_levels` of the cards of a :func:`cards_key`."""
    return [dict(_description_levels(description)) for description, _ in cards]


@functools.lru_cache(maxsize=4096)
def skill_menus(cards: CardsKey) -> dict[str, tuple[int, ...]]:
    """Skill → menu (indices of the cheapest card at least fair, good, strong at it; empty when no
    card is capable) of the cards of a :func:`cards_key`: a part's menu depends on its skill and
    the cards alone, and a pool's menus are read at every decision of every episode (the cached dict
    itself: read it, do not change it)."""
    levels = key_levels(cards)
    prices = [price for _, price in cards]
    return {skill: tuple(_cheapest_at_least(prices, levels, skill, n) for n in MENU_NEEDS)
            if any(lv[skill] >= 1 for lv in levels) else () for skill in SKILLS}


def _menu_of(instruction: str, menus: dict[str, list[int]]) -> list[int] | None:
    """The menu of the first part ``instruction`` names, if it has one."""
    part = part_of(instruction)
    return menus.get(part) if part else None


def resolve_menu_ref(executor: str, instruction: str, menus: dict[str, list[int]], names: Sequence[str]) -> str | None:
    """``#k`` → the name of the k-th executor in the menu of the first part the instruction names."""
    m = MENU_REF_RE.match(executor.strip())
    menu = _menu_of(instruction, menus)
    if not m or menu is None:
        return None
    k = int(m.group(2))
    return names[menu[k - 1]] if 1 <= k <= len(menu) else None


MenuRank = Literal["highest", "lowest", "need"]


def menu_rank(name: str, instruction: str, menus: dict[str, list[int]], names: Sequence[str],
              pick: MenuRank = "highest", need: int | None = None) -> int | None:
    """The inverse of :func:`resolve_menu_ref`: the highest 1-based rank of the instruction's part
    menu that names ``name`` — the most a need may ask and still pick that card, which is the
    level its card states — or with ``pick="lowest"`` the lowest, the least a need asks to pick
    it (``None`` for a card no need picks: a dearer card of a level a cheaper one also claims, or
    one not capable at the skill). ``need``: the rank whoever picked the card asked for, written
    when it names the card (``pick="need"``; otherwise, or when it does not, the highest)."""
    menu = _menu_of(instruction, menus)
    if menu is None or name not in names:
        return None
    i = list(names).index(name)
    ranks = [k + 1 for k, j in enumerate(menu) if j == i]
    if not ranks:
        return None
    if pick == "need" and need in ranks:
        return need
    return ranks[0] if pick == "lowest" else ranks[-1]


def part_of(instruction: str) -> str | None:
    """The first part an instruction names (``Solve P3.`` → ``P3``): the part whose menu a line's
    rank points into."""
    tag = PART_TAG_RE.search(instruction)
    return tag.group(0) if tag else None
