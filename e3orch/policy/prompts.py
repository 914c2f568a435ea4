"""Prompt rendering: executor cards, the task, the trimmed history and the decision asked for.

The prompt is the policy's whole view of the world. Executors appear only as cards (name,
description, price, latency) — never as fixed output classes — so a pool the policy never saw
is just another list of cards. The history keeps the most recent milestones whole and drops the
oldest ones first when the prompt would exceed its token budget; outputs are clipped per result.

What this module deliberately does not do: tokenize for the model (backends do) or parse the
completion (the engine's protocol parser does).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from e3orch.orchestration.episode import DecisionType, Observation
from e3orch.orchestration.types import MilestoneRecord

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


_PART_RESULT_RE = re.compile(r"\b(P\d+) = \S+(?: \(confidence ([0-9.]+)\))?")
_PART_FAIL_RE = re.compile(r"\b(P\d+): cannot proceed")


def render_status(history: tuple[MilestoneRecord, ...] | list[MilestoneRecord]) -> str:
    """Latest reported state of every named part (``P2 0.81`` = value with confidence 0.81,
    ``P3 failed``), read off the results: a compact digest of the history that survives trimming."""
    status: dict[str, str] = {}
    for rec in history:
        for r in rec.results:
            if not r.ok:
                continue
            for m in _PART_RESULT_RE.finditer(r.output):
                status[m.group(1)] = m.group(2) or "done"
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
) -> str:
    """The prompt for one decision. ``count_tokens``+``max_tokens`` trim the oldest history first."""
    head = ["### executors"] + [render_card(c, i + 1) for i, c in enumerate(obs.cards)]
    if hint:
        head = [PROTOCOL_HINT, *head]
    head += ["### task", obs.question.strip()]
    status = render_status(obs.history)
    focus = focus_lines(obs.question, obs.pending_milestone) if kind == "plan" else []
    tail = ([f"### status: {status}"] if status else []) + focus + [
        f"### budget: {obs.milestones_left} milestones, {obs.subtasks_left} subtasks left",
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
