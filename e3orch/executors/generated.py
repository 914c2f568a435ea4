"""Executor pools never seen in any form, drawn from a seed: the strictest transfer check.

``default.yaml`` trains the policy (renamed and re-priced per task by ``policy/pools.py``, so
its members are seen in many forms); ``transfer.yaml`` is a fixed, hand-written second pool.
A generated pool shares nothing with either: every member gets fresh hidden skill rates and
difficulty sensitivity, a fresh name (from syllables neither other source uses), prices that
follow its strength, and a card that states its levels truthfully in varied words — what a
pool author would write for executors the policy has never met.

Members are drawn from five archetypes (large, mid, small, specialist, tool); a pool always has
one large model and at least one executor that is good or better at every skill, so every task
stays solvable, and 5-7 members in all.

What this module deliberately does not do: copy or perturb a known pool.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from e3orch.executors.base import SKILLS, ExecutorSpec

# the band of hidden success rates behind each stated level (0 weak … 3 strong)
_RATE = {3: (0.88, 0.97), 2: (0.77, 0.87), 1: (0.60, 0.74), 0: (0.20, 0.50)}
_LEVEL_WORDS = {3: ("strong", "excellent", "expert"), 2: ("good", "solid", "decent"),
                1: ("fair", "okay", "basic"), 0: ("weak", "poor")}
_SKILL_NAMES = {"retrieve": ("retrieve", "retrieval", "search"), "compute": ("compute", "math", "calculation"),
                "code": ("code", "coding", "programming"), "reason": ("reason", "reasoning", "logic")}
_PRICE_WORD = ((0.05, "nearly free"), (1.0, "cheap"), (4.0, "mid-priced"), (9.0, "expensive"), (1e9, "very expensive"))
_NAME_A = ("thy", "bry", "cyn", "dro", "fyl", "gry", "hyx", "kly", "myr", "nyx", "pyr", "skal", "tyv", "vyr", "zyl")
_NAME_B = ("and", "oth", "esk", "iri", "ulm", "ave", "orn")
_NAME_SUFFIX = ("-7b", "-lite", "-max", "-r1", "-instruct", "-flash", "-kit", "-v3")
# archetype → (level draws, sensitivity range, output price per 1k range, latency base range, noun)
_ARCHETYPES: dict[str, tuple[tuple[int, ...], tuple[float, float], tuple[float, float], tuple[float, float], str]] = {
    "large": ((3, 3, 3, 2), (0.4, 0.7), (8.0, 16.0), (1.0, 1.6), "Large model"),
    "mid": ((2, 2, 2, 1, 3), (0.8, 1.2), (1.2, 3.0), (0.5, 0.9), "Model"),
    "small": ((1, 2, 1, 0), (1.5, 2.4), (0.2, 0.8), (0.2, 0.4), "Compact model"),
    "specialist": ((), (0.6, 1.0), (1.5, 4.0), (0.7, 2.5), "Specialist model"),
}


Namer = Callable[[random.Random, set[str]], str]


def _name(rng: random.Random, taken: set[str]) -> str:
    while True:
        name = rng.choice(_NAME_A) + rng.choice(_NAME_B) + rng.choice(_NAME_SUFFIX)
        if name not in taken:
            taken.add(name)
            return name


def _price_word(out_price: float) -> str:
    return next(word for bound, word in _PRICE_WORD if out_price < bound)


def describe(levels: dict[str, int], noun: str, out_price: float, rng: random.Random) -> str:
    """A truthful card description: every skill's level in words, strongest first, then the price."""
    groups = []
    for level in (3, 2, 1, 0):
        skills = [rng.choice(_SKILL_NAMES[s]) for s in SKILLS if levels[s] == level]
        if skills:
            joined = skills[0] if len(skills) == 1 else ", ".join(skills[:-1]) + " and " + skills[-1]
            groups.append(f"{rng.choice(_LEVEL_WORDS[level])} at {joined}")
    return f"{noun}, {', '.join(groups)}; {_price_word(out_price)}."


def _model(kind: str, rng: random.Random, taken: set[str], name: Namer) -> ExecutorSpec:
    draws, sens, price, lat, noun = _ARCHETYPES[kind]
    if kind == "specialist":
        main, second = rng.sample(SKILLS, 2)
        levels = {s: rng.choice((0, 1)) for s in SKILLS} | {main: 3, second: 2}
    else:
        levels = {s: rng.choice(draws) for s in SKILLS}
    skills = {s: round(rng.uniform(*_RATE[lv]), 3) for s, lv in levels.items()}
    out_p = round(rng.uniform(*price), 3)
    return ExecutorSpec.model_validate({
        "name": name(rng, taken), "kind": "simulated", "description": describe(levels, noun, out_p, rng),
        "price": {"input_per_1k": round(out_p * rng.uniform(0.2, 0.35), 4), "output_per_1k": out_p},
        "latency": {"base_s": round(rng.uniform(*lat), 2), "per_1k_tokens_s": round(rng.uniform(0.5, 3.0), 2)},
        "skills": skills, "difficulty_sensitivity": round(rng.uniform(*sens), 2),
    })


def _tool(skill: str, rng: random.Random, taken: set[str], name: Namer) -> ExecutorSpec:
    noun, what = {"retrieve": ("Search tool", "lookup"), "compute": ("Calculator tool", "calculation")}[skill]
    out_p = round(rng.uniform(0.001, 0.03), 4)
    return ExecutorSpec.model_validate({
        "name": name(rng, taken), "kind": "simulated",
        "description": f"{noun}, exact at {what}; useless for anything else; nearly free.",
        "price": {"input_per_1k": out_p, "output_per_1k": out_p},
        "latency": {"base_s": round(rng.uniform(0.02, 0.6), 2), "per_1k_tokens_s": 0.0},
        "skills": {s: (round(rng.uniform(0.88, 0.97), 3) if s == skill else 0.0) for s in SKILLS},
        "difficulty_sensitivity": round(rng.uniform(1.0, 2.5), 2),
    })


def sample_pool(rng: random.Random, name: Namer = _name) -> list[ExecutorSpec]:
    """A pool of 5-7 fresh simulated executors drawn with ``rng``, named by ``name``."""
    taken: set[str] = set()
    kinds = ["large", rng.choice(("mid", "small")), "specialist", *rng.sample(["mid", "small", "specialist"], rng.randint(1, 2))]
    members = [_model(k, rng, taken, name) for k in kinds]
    members += [_tool(s, rng, taken, name) for s in rng.sample(["retrieve", "compute"], rng.randint(1, 2))]
    rng.shuffle(members)
    return members


def generate_pool(seed: int) -> list[ExecutorSpec]:
    """An evaluation pool of never-seen executors, the same for the same ``seed``. Training may
    draw pools from the same archetypes (``policy/pools.py``: ``training_pool``), but from its own
    random stream and with names from another syllable set, so no member of an evaluation pool
    ever appears in training."""
    return sample_pool(random.Random(f"generated-pool:{seed}"))
