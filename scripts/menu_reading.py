"""What a policy's plan answer depends on: P(#1), P(#2), P(#3) for one plan slot under menus that
differ in one place.

    .venv/bin/python scripts/menu_reading.py models/policy models/warmstart
    .venv/bin/python scripts/menu_reading.py runs/seed-1/models/policy --skill reason --difficulty normal

For a first attempt at a --skill part of --difficulty, the policy (greedy evaluation's weights, the
prompt style it was made with) is asked the plan slot question under each menu of MENUS:

* ``A``: ``#1 good mid | #2 good mid | #3 strong premium`` — the first two ranks name one card (a
  shared card is taught as ``#1``, ``policy.menu_rank: lowest``), the strong card is ``premium``
  (a hard coding part's menu on the dearest generated evaluation pool);
* ``B``: ``A`` with the strong card ``mid`` (the default pool's menu for code);
* ``C``: ``B`` with the shared card ``cheap``;
* ``D``: ``A`` with ``#1`` another, ``fair`` and ``cheap``, card (no shared card);
* ``E``: ``D`` with the strong card ``pricey`` (the transfer pool's menu for reason:
  ``nimbus-mini``, ``quanta-math``, ``sage-reasoner``);
* ``F``: ``A`` with the strong card ``pricey`` (the default pool's menu for reason: ``mid-llm``
  twice, ``reasoner``).

It prints each answer's probability (the whole answer ``S1 | #k | -``, or ``S1 | premium #3 | -``
for a policy answering tier first). A policy that reads a menu's prices answers ``A`` and ``B``
differently; one that reads only whether a card is shared answers ``A`` and ``D`` differently; one
that tells ``pricey`` from ``premium`` answers ``D`` and ``E`` differently; ``E`` against ``F`` is the
transfer pool's reasoning menu against the default pool's (docs/benchmarks.md,
"Does the policy read the price of #3?"). Probabilities of answers that are not of this form
(other tiers, other fields) are left out, so a row may sum to less than 1.
"""

from __future__ import annotations

import math
import sys

MENUS = {
    "A": "#1 good mid | #2 good mid | #3 strong premium",
    "B": "#1 good mid | #2 good mid | #3 strong mid",
    "C": "#1 good cheap | #2 good cheap | #3 strong mid",
    "D": "#1 fair cheap | #2 good mid | #3 strong premium",
    "E": "#1 fair cheap | #2 good mid | #3 strong pricey",
    "F": "#1 good mid | #2 good mid | #3 strong pricey",
}


def question(skill: str, difficulty: str, menu: str) -> str:
    """A first attempt's plan slot question (policy/prompts.py: ``sub_prompts``, tier menus)."""
    return f"### S1 P1 {skill} {difficulty}: {menu}\n### decide: plan for Solve P1\n"


def rank_probabilities(backend: object, style: str, q: str) -> list[float]:
    """P(``S1 | #k | -``) for k = 1, 2, 3 given ``q`` (written tier first where ``style`` answers so)."""
    from e3orch.policy.prompts import TIER_ANSWER_STYLES, tier_answer

    answers = [f"S1 | #{k} | -" for k in (1, 2, 3)]
    if style in TIER_ANSWER_STYLES:
        answers = [tier_answer(q, a) for a in answers]
    scores = backend.score([q] * len(answers), answers)  # type: ignore[attr-defined]
    return [math.exp(sum(s)) for s in scores]


def main(argv: list[str] | None = None) -> int:
    from e3orch.config import FACTORED_STYLES
    from e3orch.policy.probing import probe_args, probe_backends, run_probe

    def body() -> int:
        args = probe_args(__doc__, argv, skill="code", difficulty="hard")
        print(f"P(#1) P(#2) P(#3), a {args.difficulty} {args.skill} part's first attempt; menus: "
              + "; ".join(f"{k} {m}" for k, m in MENUS.items()))
        for path, backend, style in probe_backends(args, FACTORED_STYLES, "asks a plan whole, not one slot at a time"):
            cells = []
            for name, menu in MENUS.items():
                p = rank_probabilities(backend, style, question(args.skill, args.difficulty, menu))
                cells.append(f"{name} " + " ".join(f"{x:.2f}" for x in p))
            print(f"{path}: " + "   ".join(cells))
        return 0

    return run_probe("menu_reading", body)


if __name__ == "__main__":
    sys.exit(main())
