"""Whether a policy reads a result's confidence: P(``yes``) to a milestone question about a part
whose result came back at a given confidence, and about the open part that uses it.

    .venv/bin/python scripts/confidence_reading.py models/warmstart models/policy
    .venv/bin/python scripts/confidence_reading.py runs/seed-1/models/warmstart --skill reason --difficulty hard

For each policy two rows, one column per confidence in CONFIDENCES (policy/prompts.py: the
``per_part`` styles' ``act on`` questions, a three-part chain P1 → P2 → P3 with P1 confirmed):

* ``repair P2``: ``### part: P2 <skill> <difficulty>: <c> x1`` — P2's one attempt reported at
  confidence ``c``; ``yes`` repairs it. The rules repair below 0.6, the warm start's ``explore``
  teacher below a threshold drawn in ``warmstart.explore_accept``;
* ``act on P3``: P3 open, ``### uses: P2 <c> x1`` — ``yes`` acts on a part whose input is at ``c``;
  the rules wait below 0.6 (they repair P2 first).

A policy that reads the confidence answers the two rows in opposite ways on either side of its
threshold; one that does not answers a row alike at every confidence (docs/benchmarks.md, "Numbers
digit by digit").
"""

from __future__ import annotations

import math
import sys

CONFIDENCES = (0.30, 0.40, 0.50, 0.55, 0.58, 0.61, 0.65, 0.70, 0.80, 0.90)
# the per_part styles whose act-on questions are these words (bands round the confidence, source names
# its card's level, menu adds a repair menu; factored and compact ask a milestone whole)
STYLES = ("per_part", "per_part_tiers", "per_part_tier_answers")


def questions(skill: str, difficulty: str, confidence: float) -> dict[str, str]:
    """The two ``act on`` questions at ``confidence`` (policy/prompts.py: ``_act_question``)."""
    c = f"{confidence:.2f}"
    return {
        "repair P2": (f"### part: P2 {skill} {difficulty}: {c} x1\n### uses: P1 0.98 x1\n### final: P3 open\n"
                      "### decide: act on P2\n"),
        "act on P3": (f"### part: P3 {skill} {difficulty}: open\n### uses: P2 {c} x1\n### final: P3 open\n"
                      "### decide: act on P3\n"),
    }


def yes_probabilities(backend: object, skill: str, difficulty: str) -> dict[str, list[float]]:
    """Row → P(``yes``) at each of CONFIDENCES."""
    asked = [questions(skill, difficulty, c) for c in CONFIDENCES]
    return {row: [math.exp(sum(lp)) for lp in backend.score([q[row] for q in asked], ["yes"] * len(asked))]  # type: ignore[attr-defined]
            for row in asked[0]}


def main(argv: list[str] | None = None) -> int:
    from e3orch.policy.probing import probe_args, probe_backends, run_probe

    def body() -> int:
        args = probe_args(__doc__, argv, skill="retrieve", difficulty="normal")
        print(f"P(yes), a {args.difficulty} {args.skill} part; confidence " + " ".join(f"{c:.2f}" for c in CONFIDENCES))
        for path, backend, _ in probe_backends(args, STYLES, "does not ask these questions in these words"):
            for row, ps in yes_probabilities(backend, args.skill, args.difficulty).items():
                print(f"{path}: {row:9s} " + " ".join(f"{p:.2f}" for p in ps))
        return 0

    return run_probe("confidence_reading", body)


if __name__ == "__main__":
    sys.exit(main())
