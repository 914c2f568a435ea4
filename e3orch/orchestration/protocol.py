"""The text protocol of the orchestrator's decisions, with a tolerant parser and validator.

Three decisions, each a short block of text:

* **milestone** — ``MILESTONE: <the next intermediate objective>``
* **final answer** — ``ANSWER: <the answer>`` (instead of a milestone; in the sim a part tag such
  as ``P5`` names that part's latest value)
* **plan** for the current milestone — one line per subtask::

      S1 | <executor> | - | <instruction>
      S2 | <executor> | S1 | <instruction that uses S1's output>
      S3 | <executor> | S1,S2 | <instruction>

  fields: subtask id, executor name (from the cards), comma-separated dependency ids or ``-``,
  instruction. Independent subtasks run in parallel; a subtask receives its dependencies' outputs.
  An instruction is one line; ``{task}`` in it stands for the task's full text (e.g. a
  multi-line function to complete), expanded when the subtask runs. The executor may be named
  by its card handle instead (``E3`` = the third card of *this* prompt), or — for a task with
  numbered parts — by its rank in the menu of the part the instruction names (``#2`` = the
  second-cheapest executor whose card claims at least a fair level at that part's skill, see
  :mod:`e3orch.orchestration.reading`). Both are pointers into the cards shown, not a fixed
  output per executor, so they transfer to any pool.

  For a task with numbered parts a line may leave the instruction out (``S2 | #1 | -``): subtask
  ``Sk`` then solves the k-th part the milestone names, in the task's order (its *slot*, as the
  compact prompt lists them: ``### S2 P5 ...``). The small policy writes its plans this way, so it
  never has to copy a part id (it used to write ``Solve P4.`` on the line of slot ``S4 P5``).

The parser never raises on model output. Whatever it cannot use becomes a :class:`Defect`
(what the completeness reward penalises) and is dropped, so a partly broken plan still runs
its valid part. What this module deliberately does not do: execute anything, or repair intent
(an unknown executor is not guessed at).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from e3orch.orchestration.reading import MenuRank, menu_rank, part_of, resolve_menu_ref, slot_instruction
from e3orch.orchestration.types import Defect, MilestoneDecision, Plan, Subtask

_MILESTONE_RE = re.compile(r"^\s*(?:\*\*)?\s*(milestone|answer|final answer)\s*(?:\*\*)?\s*[:：]\s*(.*)$", re.I | re.S)
_ID_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_\-]{0,15}$")
_SLOT_ID_RE = re.compile(r"^S(\d{1,2})$")
_HANDLE_RE = re.compile(r"^[Ee](\d{1,3})$")
_FENCE_RE = re.compile(r"^\s*```[a-zA-Z]*\s*$")
MAX_INSTRUCTION_CHARS = 4000


def render_plan(subtasks: list[Subtask] | tuple[Subtask, ...]) -> str:
    """The canonical plan text (what hand-written orchestrators emit and policies learn)."""
    return "\n".join(
        f"{s.id} | {s.executor} | {','.join(s.deps) if s.deps else '-'} | {s.instruction}" for s in subtasks
    )


def render_milestone(text: str) -> str:
    return f"MILESTONE: {text}"


def render_answer(text: str) -> str:
    return f"ANSWER: {text}"


def parse_milestone(text: str) -> MilestoneDecision:
    """Parse a milestone-or-answer decision. Only the first non-empty line block counts."""
    body = _strip_fences(text or "").strip()
    if not body:
        return MilestoneDecision("invalid", "", (Defect("unparseable", "empty milestone decision"),))
    m = _MILESTONE_RE.match(body)
    if not m:
        return MilestoneDecision("invalid", body[:200], (Defect("unparseable", f"expected MILESTONE: or ANSWER:, got {body[:60]!r}"),))
    kind = "answer" if m.group(1).lower() in ("answer", "final answer") else "milestone"
    content, _, rest = m.group(2).strip().partition("\n")
    defects: list[Defect] = []
    if rest.strip():
        defects.append(Defect("trailing_text", rest.strip()[:60]))
    if not content.strip():
        return MilestoneDecision("invalid", "", (Defect("unparseable", f"empty {kind}"),))
    return MilestoneDecision(kind, content.strip(), tuple(defects))  # type: ignore[arg-type]


def _strip_fences(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not _FENCE_RE.match(line))


def resolve_executor(name: str, executors: Sequence[str]) -> str | None:
    """An executor name, or a card handle ``E<i>`` resolved against the cards' order."""
    if name in executors:
        return name
    m = _HANDLE_RE.match(name)
    if m and 1 <= int(m.group(1)) <= len(executors):
        return executors[int(m.group(1)) - 1]
    return None


def _rewrite_lines(plan_text: str, rewrite: Callable[[list[str]], str | None]) -> str:
    """``rewrite`` applied to the four raw fields of every plan line; a line it returns None for
    (and any line without four fields) stays as it was."""
    lines = []
    for line in plan_text.splitlines():
        parts = line.split("|", 3)
        new = rewrite(parts) if len(parts) == 4 else None
        lines.append(line if new is None else new)
    return "\n".join(lines)


def to_handles(plan_text: str, executors: Sequence[str]) -> str:
    """Rewrite a plan's executor names as card handles (how the small policy is taught to point)."""
    index = {n: f"E{i + 1}" for i, n in enumerate(executors)}

    def handle(parts: list[str]) -> str | None:
        h = index.get(parts[1].strip())
        return None if h is None else "|".join([parts[0], f" {h} ", *parts[2:]])

    return _rewrite_lines(plan_text, handle)


def to_menu_refs(plan_text: str, executors: Sequence[str], menus: dict[str, list[int]], pick: MenuRank = "highest",
                 needs: Mapping[str, int] | None = None) -> str:
    """Rewrite a plan's executors as menu ranks (``#2``) where the line's part menu lists them and
    as card handles (``E3``) otherwise: how the small policy is taught to point with the compact
    prompt. ``pick``: which rank a card named by several is written as (:func:`menu_rank`; with
    ``"need"``, the one ``needs`` gives the line's part: part id → the need the plan's author
    routed it by)."""

    def rank_ref(parts: list[str]) -> str | None:
        name = resolve_executor(parts[1].strip(), executors)
        part = part_of(parts[3])
        need = needs.get(part) if needs and part else None
        rank = menu_rank(name, parts[3], menus, executors, pick, need) if name else None
        return None if rank is None else "|".join([parts[0], f" #{rank} ", *parts[2:]])

    return _rewrite_lines(to_handles(plan_text, executors), rank_ref)


def to_slot_lines(plan_text: str, slots: Sequence[str]) -> str:
    """Drop the instruction of every line ``Sk`` whose instruction is the one its slot stands for
    (``S2 | #1 | - | Solve P5.`` → ``S2 | #1 | -`` when slot 2 is P5): the inverse of what
    :func:`parse_plan` does with ``slots``."""

    def short(parts: list[str]) -> str | None:
        m = _SLOT_ID_RE.match(parts[0].strip())
        k = int(m.group(1)) if m else 0
        if 1 <= k <= len(slots) and parts[3].strip() == slot_instruction(slots[k - 1]):
            return "|".join(parts[:3]).rstrip()
        return None

    return _rewrite_lines(plan_text, short)


def parse_plan(
    text: str,
    executors: Sequence[str],
    *,
    max_subtasks: int = 8,
    menus: dict[str, list[int]] | None = None,
    slots: Sequence[str] = (),
) -> Plan:
    """Parse and validate a plan; returns the usable subtasks and every defect found.

    Validation: known executors, unique ids, non-empty instructions, deps that exist and are not
    the subtask itself, an acyclic graph (subtasks on a cycle are dropped), at most
    ``max_subtasks`` subtasks (extra ones dropped). ``menus`` (part id → card indices, from
    :func:`~e3orch.orchestration.reading.part_menus`) lets a line name its executor as ``#k``;
    ``slots`` (:func:`~e3orch.orchestration.reading.plan_slots`) lets line ``Sk`` leave out its
    instruction (it solves slot k's part; ``Sk`` beyond the slots is a ``no_slot`` defect).
    """
    defects: list[Defect] = []
    raw: list[Subtask] = []
    seen: set[str] = set()
    for line in _strip_fences(text or "").splitlines():
        line = line.strip()
        if not line or line.upper() in ("PLAN", "PLAN:", "END"):
            continue
        parts = [p.strip() for p in line.split("|", 3)]  # the instruction may itself contain '|'
        slot = _SLOT_ID_RE.match(parts[0])
        if slots and slot and (len(parts) == 3 or len(parts) == 4 and not parts[3]):
            k = int(slot.group(1))
            if not 1 <= k <= len(slots):
                defects.append(Defect("no_slot", f"{parts[0]}: the milestone names {len(slots)} parts"))
                continue
            parts = [*parts[:3], slot_instruction(slots[k - 1])]
        if len(parts) < 4:
            defects.append(Defect("bad_line", line[:60]))
            continue
        sid, executor, deps_s, instruction = parts
        if not _ID_RE.match(sid):
            defects.append(Defect("bad_line", f"bad subtask id {sid[:20]!r}"))
            continue
        if sid in seen:
            defects.append(Defect("duplicate_id", sid))
            continue
        resolved = resolve_executor(executor, executors)
        if resolved is None and menus:
            resolved = resolve_menu_ref(executor, instruction, menus, executors)
        if resolved is None:
            defects.append(Defect("unknown_executor", executor[:40]))
            continue
        executor = resolved
        if not instruction:
            defects.append(Defect("empty_instruction", sid))
            continue
        seen.add(sid)  # only kept lines claim their id: a corrected repeat of a dropped line is fine
        deps_s = re.sub(r"^(deps?|after)\s*[:=]\s*", "", deps_s, flags=re.I)
        deps = tuple(dict.fromkeys(d.strip() for d in re.split(r"[,\s]+", deps_s) if d.strip() and d.strip() != "-"))
        raw.append(Subtask(sid, executor, instruction[:MAX_INSTRUCTION_CHARS], deps))

    if not raw and not defects:
        return Plan((), (Defect("empty_plan", "no subtasks"),))
    if not raw:
        return Plan((), (*defects, Defect("unparseable", "no valid subtask line")))

    if len(raw) > max_subtasks:
        defects.append(Defect("oversized_plan", f"{len(raw)} subtasks > {max_subtasks}"))
        raw = raw[:max_subtasks]

    ids = {s.id for s in raw}
    cleaned: list[Subtask] = []
    for s in raw:
        keep: list[str] = []
        for d in s.deps:
            if d == s.id:
                defects.append(Defect("self_dep", s.id))
            elif d not in ids:
                defects.append(Defect("dangling_dep", f"{s.id}->{d}"))
            else:
                keep.append(d)
        cleaned.append(Subtask(s.id, s.executor, s.instruction, tuple(keep)))

    acyclic, cyclic = _drop_cycles(cleaned)
    if cyclic:
        defects.append(Defect("cyclic_deps", ",".join(sorted(cyclic))))
    if not acyclic:
        defects.append(Defect("empty_plan", "nothing runnable"))
    return Plan(tuple(acyclic), tuple(defects))


def _drop_cycles(subtasks: list[Subtask]) -> tuple[list[Subtask], set[str]]:
    """Kahn's algorithm: keep what can be ordered; subtasks on or behind a cycle are dropped."""
    indeg = {s.id: len(s.deps) for s in subtasks}
    children: dict[str, list[str]] = {s.id: [] for s in subtasks}
    for s in subtasks:
        for d in s.deps:
            children[d].append(s.id)
    ready = [sid for sid, n in indeg.items() if n == 0]
    order: list[str] = []
    while ready:
        sid = ready.pop()
        order.append(sid)
        for c in children[sid]:
            indeg[c] -= 1
            if indeg[c] == 0:
                ready.append(c)
    ok = set(order)
    # The original order is kept (not the topological one) so traces read as the plan was written.
    return [s for s in subtasks if s.id in ok], {s.id for s in subtasks if s.id not in ok}
