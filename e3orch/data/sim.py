"""The ``sim`` environment: a seeded generator of seven task domains and their grader.

A sim task is a natural-language question made of numbered parts (``P1``, ``P2`` …). Each part
is a hidden :class:`~e3orch.data.tasks.Requirement` that needs one skill (``retrieve``,
``compute``, ``code``, ``reason``), has a difficulty (cued in the text by words such as
"quick" or "tricky", with several synonyms) and depends on earlier parts ("using P1 and P3").
The orchestrator must find the parts, their skills and dependencies in the text; the hidden graph
drives the simulated executors (:mod:`e3orch.executors.simulated`) and the grader.

Domains differ in shape (chains, fans, diamonds, wide fan-ins), size, skill mix and difficulty.
Everything is a pure function of ``(seed, domain, index)``; train and eval splits draw from
disjoint index ranges, so they never share a task.

What this module deliberately does not do: simulate executors (see executors/simulated.py) or
decide anything an orchestrator decides.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from e3orch.data.graders import Grade, register_grader
from e3orch.data.tasks import Requirement, Task

DIFFICULTY_WORDS: dict[int, tuple[str, ...]] = {
    0: ("quick", "simple", "easy", "routine"),
    1: ("standard", "moderate", "regular", "typical"),
    2: ("tricky", "hard", "obscure", "demanding"),
}

_ENTITIES = (
    "Varnholt", "Kelvar Institute", "Lake Oduna", "the Brisa Line", "Mount Teller", "Ostrava Mills",
    "the Quill Archive", "Port Ameline", "Sorrel Bank", "the Helix Society", "Dunmore County",
    "Tarrow Bridge", "the Amber Fleet", "Iselin Observatory", "Corvo Labs", "the Nadir Canal",
    "Elmsworth", "the Pale Court", "Ravel Works", "Juniper Station", "Halden Press", "the Sable Trust",
)
_ATTRS = (
    "founding year", "population", "chief engineer", "annual budget", "length in km", "first director",
    "main export", "altitude", "number of members", "opening date", "home city", "largest customer",
)
_QUANT = (
    "the growth rate", "the weighted average", "the total cost", "the ratio of the two figures",
    "the projected value in ten years", "the per-capita share", "the net difference", "the compound interest",
)
_CODE = (
    "parses the ledger lines", "deduplicates the records", "merges the two schedules",
    "validates the checksums", "sorts the entries by date", "computes the rolling mean",
    "detects overlapping intervals", "normalises the addresses",
)
_REASON = (
    "whether the claim holds", "which option satisfies every constraint", "the most likely explanation",
    "whether the plan is feasible", "which source is more reliable", "the consistent ordering of events",
    "whether the two accounts agree", "the best next step",
)
_VERBS: dict[str, tuple[str, ...]] = {
    "retrieve": ("Look up", "Find", "Retrieve", "Search for"),
    "compute": ("Calculate", "Compute", "Work out", "Evaluate"),
    "code": ("Write and test a function that", "Implement and test code that", "Program a routine that"),
    "reason": ("Decide", "Judge", "Infer", "Determine by reasoning"),
}


@dataclass(frozen=True)
class DomainSpec:
    name: str
    intro: str
    shape: Callable[[random.Random], list[tuple[str, tuple[int, ...]]]]
    difficulty: tuple[float, float, float]  # P(easy), P(medium), P(hard)


def _chain(skills: Sequence[str]) -> list[tuple[str, tuple[int, ...]]]:
    return [(s, (i - 1,) if i else ()) for i, s in enumerate(skills)]


def _multihop(r: random.Random) -> list[tuple[str, tuple[int, ...]]]:
    return _chain(["retrieve"] * r.randint(2, 3) + ["reason"])


def _math(r: random.Random) -> list[tuple[str, tuple[int, ...]]]:
    return _chain(["reason"] + ["compute"] * r.randint(2, 3))


def _code(r: random.Random) -> list[tuple[str, tuple[int, ...]]]:
    return _chain(["code", "compute", "code"][: r.randint(2, 3)] + ["reason"])


def _table(r: random.Random) -> list[tuple[str, tuple[int, ...]]]:
    n = r.randint(2, 3)
    parts: list[tuple[str, tuple[int, ...]]] = [("retrieve", ()) for _ in range(n)]
    parts.append(("compute", tuple(range(n))))
    parts.append(("compute", (n,)))
    return parts


def _factcheck(r: random.Random) -> list[tuple[str, tuple[int, ...]]]:
    n = r.randint(2, 4)
    return [("retrieve", ()) for _ in range(n)] + [("reason", tuple(range(n)))]


def _planning(r: random.Random) -> list[tuple[str, tuple[int, ...]]]:
    mid = r.choice([("compute", "retrieve"), ("compute", "code"), ("retrieve", "reason")])
    return [("reason", ()), (mid[0], (0,)), (mid[1], (0,)), ("reason", (1, 2))]


def _research(r: random.Random) -> list[tuple[str, tuple[int, ...]]]:
    n = r.randint(4, 6)
    parts: list[tuple[str, tuple[int, ...]]] = [(r.choice(["retrieve", "retrieve", "reason"]), ()) for _ in range(n)]
    return parts + [("reason", tuple(range(n)))]


DOMAINS: dict[str, DomainSpec] = {
    d.name: d
    for d in (
        DomainSpec("multihop", "A multi-hop lookup question.", _multihop, (0.3, 0.45, 0.25)),
        DomainSpec("math", "A math word problem.", _math, (0.45, 0.4, 0.15)),
        DomainSpec("code", "A code write-and-test task.", _code, (0.15, 0.45, 0.4)),
        DomainSpec("table", "A table analysis task.", _table, (0.4, 0.4, 0.2)),
        DomainSpec("factcheck", "A fact verification task.", _factcheck, (0.35, 0.4, 0.25)),
        DomainSpec("planning", "A constrained planning problem.", _planning, (0.1, 0.4, 0.5)),
        DomainSpec("research", "A wide multi-part research question.", _research, (0.3, 0.45, 0.25)),
    )
}


def stable_seed(*parts: object) -> int:
    """A process-independent 63-bit seed from any printable parts (``hash()`` is salted per process)."""
    h = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") >> 1


def make_value(skill: str, r: random.Random) -> str:
    """A plausible value a part produces (what the grader compares)."""
    if skill == "retrieve":
        return r.choice(("Nor", "Vel", "Ash", "Kiv", "Tam", "Orl", "Bex", "Sul")) + r.choice(
            ("vik", "dane", "mora", "ton", "ieri", "usk", "brand", "ola")
        ) + str(r.randint(10, 99))
    if skill == "compute":
        return str(r.randint(100, 99999))
    if skill == "code":
        return f"fn{r.randint(1000, 9999)}-passes"
    return r.choice(("yes", "no", "option")) + f"-{r.randint(100, 999)}"


def _sentence(skill: str, difficulty: int, r: random.Random) -> str:
    verb = r.choice(_VERBS[skill])
    if skill == "retrieve":
        obj = f"the {r.choice(_ATTRS)} of {r.choice(_ENTITIES)}"
    elif skill == "compute":
        obj = r.choice(_QUANT)
    elif skill == "code":
        obj = r.choice(_CODE)
    else:
        obj = r.choice(_REASON)
    return f"({r.choice(DIFFICULTY_WORDS[difficulty])}) {verb} {obj}"


def generate_task(seed: int, domain: str, index: int, split: str) -> Task:
    if domain not in DOMAINS:
        raise ValueError(f"unknown sim domain {domain!r}; known: {', '.join(DOMAINS)}")
    spec = DOMAINS[domain]
    r = random.Random(stable_seed("sim-task", seed, domain, index))
    shape = spec.shape(r)
    reqs: list[Requirement] = []
    lines = [spec.intro]
    for i, (skill, deps) in enumerate(shape):
        difficulty = r.choices((0, 1, 2), weights=spec.difficulty)[0]
        rid = f"P{i + 1}"
        dep_ids = tuple(f"P{d + 1}" for d in deps)
        reqs.append(Requirement(rid, skill, difficulty, dep_ids, make_value(skill, r)))
        text = f"{rid}: {_sentence(skill, difficulty, r)}"
        if dep_ids:
            joined = dep_ids[0] if len(dep_ids) == 1 else ", ".join(dep_ids[:-1]) + " and " + dep_ids[-1]
            text += f", using {joined}"
        lines.append(text + ".")
    sink = reqs[-1]
    lines.append(f"Final answer: the result of {sink.id}.")
    return Task(
        task_id=f"sim-{domain}-{split}-{index:05d}",
        split=split,
        domain=domain,
        benchmark=f"sim/{domain}",
        question="\n".join(lines),
        answer=sink.value,
        requirements=tuple(reqs),
        meta={"seed": seed, "index": index},
    )


# Train and eval draw from disjoint index ranges of the same generator.
_EVAL_OFFSET = 1_000_000
_VAL_OFFSET = 500_000  # validation tasks: disjoint from train (index < 500,000) and eval


def generate_split(seed: int, split: str, per_domain: int, domains: Sequence[str] = ()) -> list[Task]:
    names = list(domains) or list(DOMAINS)
    offset = {"eval": _EVAL_OFFSET, "val": _VAL_OFFSET}.get(split, 0)
    return [generate_task(seed, d, offset + i, split) for d in names for i in range(per_domain)]


_PART_RE = re.compile(r"\bP(\d+)\b")


def normalise(text: str) -> str:
    return " ".join(text.strip().strip(".").lower().split())


@register_grader("sim")
def grade_sim(task: Task, answer: str) -> Grade:
    """Exact match of the final value (after normalisation). Part references are resolved by the
    engine before grading, so ``answer`` is already the value text."""
    if not answer.strip():
        return Grade(False, 0.0, "empty answer")
    ok = normalise(answer) == normalise(task.answer)
    return Grade(ok, 1.0 if ok else 0.0, None)
