"""Pools as data: per-task randomisation of executor pools for warm start and RL.

Names, membership and prices change from task to task (descriptions, the cards' honest
content, stay), so the policy must read cards instead of memorising names. The simulator's
hidden profile of each executor travels with it — renaming an executor does not change what
it can do. A share of tasks (``generated_pool_share``) instead get a freshly generated pool of
new executors, whose levels and prices are arranged as the training pool's never are.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from e3orch.executors.base import ExecutorSpec

_SYL_A = ("ar", "bel", "cor", "dax", "el", "fen", "gal", "hal", "ix", "jor", "kel", "lum", "mor", "nex",
          "or", "pra", "quo", "ral", "sil", "tor", "ul", "vex", "wyn", "zed")
_SYL_B = ("a", "o", "is", "en", "ux", "ia", "on", "et", "ar", "um")
_SUFFIX = ("", "-lm", "-ai", "-pro", "-mini", "-tool", "-x", "-core", "-1", "-2", "-net", "-agent")


def random_name(rng: random.Random, taken: set[str]) -> str:
    while True:
        name = rng.choice(_SYL_A) + rng.choice(_SYL_B) + rng.choice(_SYL_A) + rng.choice(_SUFFIX)
        if name not in taken:
            taken.add(name)
            return name


def randomize_pool(
    specs: Sequence[ExecutorSpec],
    rng: random.Random,
    *,
    rename: bool = True,
    drop_prob: float = 0.2,
    min_size: int = 4,
    price_range: tuple[float, float] = (0.6, 1.6),
) -> list[ExecutorSpec]:
    """A random variant of a pool: renamed, some members dropped, prices scaled, order shuffled."""
    keep = [s for s in specs if rng.random() >= drop_prob]
    if len(keep) < min(min_size, len(specs)):
        keep = rng.sample(list(specs), min(min_size, len(specs)))
    taken: set[str] = set()
    out = []
    for s in keep:
        f = rng.uniform(*price_range)
        data = s.model_dump()
        data.update(s.options)
        data["name"] = random_name(rng, taken) if rename else s.name
        data["price"] = {"input_per_1k": round(s.price.input_per_1k * f, 4), "output_per_1k": round(s.price.output_per_1k * f, 4)}
        out.append(ExecutorSpec.model_validate(data))
    rng.shuffle(out)
    return out


def training_pool(specs: Sequence[ExecutorSpec], rng: random.Random, generated_share: float = 0.0) -> list[ExecutorSpec]:
    """The pool of one training task: a random variant of ``specs``, or — for a share
    ``generated_share`` of tasks — a freshly drawn pool of new executors (new skill profiles and
    levels, not only new names), so the policy meets cards whose cheapest capable member is only
    fair, specialists it never saw, and so on. Those are named from this module's syllables, which
    the evaluation's generated pools never use."""
    from e3orch.executors.generated import sample_pool

    if generated_share > 0 and rng.random() < generated_share:
        return sample_pool(rng, name=random_name)
    return randomize_pool(specs, rng)
